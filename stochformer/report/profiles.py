"""The report's profiles: how big each experiment is run.

Each section (``report.sections``) gives its config fields for every profile; this module names the
profiles and says what they are for. Measured costs are in ``docs/reproduce.md``.
"""

from __future__ import annotations

PROFILES: dict[str, str] = {
    "tiny": "smallest sizes that exercise every code path (tests and CI, about a minute); the numbers are not meant to convince",
    "quick": "reduced sizes (fewer tokens, layers, samples) that finish within 20 minutes on 2 CPU cores",
    "full": "the paper's sizes (SPEC §6), Theorem 1.1 and Proposition 1.2 beyond toy sizes (Proposition 1.2 "
            "with random features and with the exact field at N_ref = 4096): 2.2 to 2.5 hours of CPU time, "
            "1 h 12 min to 1 h 26 min measured on 2 CPU cores with the work split over 2 processes (docs/reproduce.md)",
    "gpu": "large sizes on a CUDA device (device = cuda; variants and bridge have no device and run on the CPU): "
           "more samples and longer sweeps than the paper",
    "quick32": "the quick sizes in float32 (dtype = float32) for every section that has a dtype (sync, phase, "
               "convergence, chaos; the paper's experiments stay float64): the fast precision, whose agreement "
               "with float64 is measured in docs/benchmarks.md (\"Precision\"); it fails where tokens come closer "
               "than a few float32 ulps (chordal distance ~1e-7)",
}

#: profiles that run a profile's sizes with config fields replaced (where a section has them: a
#: section without a ``device`` runs on the CPU under ``gpu``)
DERIVED: dict[str, tuple[str, dict]] = {"quick32": ("quick", {"dtype": "float32"}), "gpu": ("gpu", {"device": "cuda"})}

DEFAULT_PROFILE = "quick"


def sizes(tiny: dict, quick: dict, full: dict, gpu: dict | None = None) -> dict[str, dict]:
    """A section's sizes per profile; ``gpu`` defaults to ``full`` (run on ``device = cuda``, `DERIVED`).

    Parameters
    ----------
    tiny, quick, full : dict
        Config fields of each profile.
    gpu : dict, optional
        Those of the ``gpu`` profile (default ``full``'s).

    Returns
    -------
    dict
        Profile name → config fields.
    """
    return {"tiny": tiny, "quick": quick, "full": full, "gpu": {**full, **(gpu or {})}}
