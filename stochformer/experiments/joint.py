"""``joint``: Corollary 1.3, the joint limit N, L, m → ∞ along a diagonal path (SPEC §3–§4).

Along a path (N_k, L_k, m_k), k = 0, 1, …, the transformer's empirical measure μ^{N,L,m} approaches
the conditional law μ_t of the SPDE. By the triangle inequality for W₂ and the coupling bound
W₂²(μ^N_X, μ^N_X̄) ≤ (1/N) Σ_i |X^i − X̄^i|²,

    E sup_t W₂²(μ^{N,L,m}_t, μ_t) ≤ 2 E sup_t (1/N) Σ_i |X^i_{⌊Lt/T⌋} − X̄^i_t|² + 2 E sup_t W₂²(μ^N_t, μ_t),

and the two terms are what Theorem 1.1 (≲ 1/L + 1/m at layer times, for a fixed N) and Proposition
1.2 (the sharp rate of N points on S^{d−1}: log N/N for d = 3, N^{−2/(d−1)} for d ≥ 4) bound.

Corollary 1.3 states the limit in two forms. (i) The iterated limit lim_N lim_L lim_m, with the bound
2c_N e^{c_N T²}(log L/L + 1/m) + 2c_T r_d(N): its constant depends on N, so it predicts no rate
along a path on which N grows with L and m. (ii) For a C^∞ activation the limits commute, with
E sup_t W₂²(μ^{N,L,m}_t, μ_t) ≤ c_T(log L/L + m^{−1/4} + r_d(N)): along N, L, m ∝ s the error decays at
least at the slowest exponent of the three, min(p_{log L/L}, 1/4, p_{r_d}) in s (local exponents over
the path; ``commuting`` of :meth:`JointConfig.predicted_exponent`). What is measured is the sum of
the two terms above from two independent runs, a bound of the transformer's error, not W₂ of the
transformer's empirical measure to μ_t itself.

Measured, per point of the path, with the existing experiments' tasks:

* ``coupled``: the pathwise sup over layer times of the transformer (depth L_k, width m_k, N_k
  tokens) against the SDE on one Brownian path (``converge``'s coupling, ``refine`` SDE steps per layer);
* ``w2``: sup over the recorded times of W₂²(μ^{N_k}, μ^{N_ref}) of SDE particles driven by one
  random-feature field (``chaos``'s coupling; the finite reference removed by 1/(1 − N/N_ref));

and their sum, the bound of the combined error, with its fitted exponent in s (parametric bootstrap
of the means and SEs with Student's t draws for the samples behind each mean,
:func:`stochformer.stats.fit_power_law`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import xarray as xr
from pydantic import Field, model_validator

from ..config import ExperimentConfig, as_config
from ..distances import rate_function, sphere_rate
from ..results import Result
from ..runtime import child_seeds, provenance, resolve_device
from ..stats import fit_power_law, loglog_slope, mean_and_se
from ..tasks import Task, run_tasks
from ..validation import validated
from . import chaos, converge


class JointConfig(ExperimentConfig):
    """``model``: the system (d, T, activation, attention …; ``model.batch`` samples of the
    transformer–SDE coupling per point, ``model.features`` the width of the W₂ systems' random-feature
    field); the diagonal path ``path_N`` × ``path_L`` × ``path_m`` (equal lengths, every entry the first
    times one scale s) and the W₂ reference."""

    command: ClassVar[str] = "joint"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"d": 3, "T": 1.0, "batch": 64, "features": 256}
    model_min: ClassVar[dict] = {"d": (3, "the sharp W2 rate of N points is for S^{d-1} with d >= 3"),
                                 "batch": (4, "samples of the transformer-SDE coupling per point")}
    model_unused: ClassVar[dict] = {"N": "path_N", "L": "path_L", "m": "path_m"}

    path_N: list[int] = Field(default_factory=lambda: [16, 32, 64, 128], min_length=3, description="tokens N_k")
    path_L: list[int] = Field(default_factory=lambda: [8, 16, 32, 64], min_length=3, description="depths L_k")
    path_m: list[int] = Field(default_factory=lambda: [16, 32, 64, 128], min_length=3, description="widths m_k")
    samples_per_task: int = Field(64, ge=1, description="coupling samples per task (>= 1)")
    refine: int = Field(4, ge=1, le=256, description="SDE steps per layer of the coupling, in [1, 256]")
    N_ref: int = Field(1024, ge=16, description="tokens of the reference system for W2 (> max path_N)")
    w2_batch: int = Field(8, ge=2, description="samples (field + initial tokens) for W2 (>= 2)")
    w2_steps: int = Field(20, ge=1, description="SDE steps of the W2 systems (>= 1)")
    w2_records: int = Field(2, ge=1, description="W2 at t = kT/w2_records, k = 0..w2_records (>= 1)")
    bootstrap: int = Field(1000, ge=100, le=1000000, description="bootstrap resamples of the fitted exponents, in [100, 10^6]")

    @model_validator(mode="after")
    def _path(self) -> "JointConfig":
        n = len(self.path_N)
        if len(self.path_L) != n or len(self.path_m) != n:
            raise ValueError(f"path_L, path_m: need as many entries as path_N ({n})")
        for name in ("path_N", "path_L", "path_m"):
            v = getattr(self, name)
            if any(b <= a for a, b in zip(v, v[1:])) or v[0] < 2:
                raise ValueError(f"{name}: must increase strictly from >= 2 (got {v})")
        scales = [np.asarray(getattr(self, f), float) / getattr(self, f)[0] for f in ("path_N", "path_L", "path_m")]
        if not (np.allclose(scales[0], scales[1]) and np.allclose(scales[0], scales[2])):
            raise ValueError("path_N, path_L, path_m: must grow by the same factors (a diagonal path: N_k/N_0 = "
                             f"L_k/L_0 = m_k/m_0; got N {self.path_N}, L {self.path_L}, m {self.path_m})")
        if self.N_ref <= max(self.path_N):
            raise ValueError(f"N_ref: must exceed the largest path_N = {max(self.path_N)} (got {self.N_ref})")
        run = self.model
        if run.init.kind != "uniform" or any(getattr(run, k) is not None for k in ("Q", "K", "V")):
            raise ValueError("model.init.kind, model.Q, model.K, model.V: the joint limit needs uniform i.i.d. tokens "
                             "and beta/gamma attention")
        return self

    def chaos_config(self) -> "chaos.ChaosConfig":
        """The config of the W₂² systems: ``chaos``'s coupling with the path's N as its sizes."""
        skip = ("dynamics", "noise", "integrator", "batch", "N", "L")
        model = {**{k: v for k, v in self.model.model_dump(mode="json").items() if k not in skip}, "N": self.N_ref,
                 "L": self.w2_steps, "batch": self.w2_batch}
        return chaos.ChaosConfig.model_validate({"model": model, "sizes": self.path_N, "dims": [self.model.d],
                                                 "w2_records": self.w2_records, "bootstrap": 100})

    @property
    def scale(self) -> np.ndarray:
        """The path's scale s_k = N_k/N_0."""
        return np.asarray(self.path_N, float) / self.path_N[0]

    def predicted_exponent(self) -> dict:
        """Local exponents in s along the path: ``N`` of the sharp W₂² rate of N points on the sphere,
        ``log_L`` of log L/L, ``r_d`` of Proposition 1.2's r_d(N), ``m_quarter`` = 1/4, and
        ``commuting``: the smooth-φ form of Corollary 1.3, min(log_L, 1/4, r_d)."""
        N, L = np.asarray(self.path_N, float), np.asarray(self.path_L, float)
        p_N = -loglog_slope(N, sphere_rate(self.model.d, N))[0]
        p_r = -loglog_slope(N, rate_function(self.model.d, N))[0]
        p_L = -loglog_slope(L, np.log(L) / L)[0]
        return {"N": float(p_N), "log_L": float(p_L), "m_quarter": 0.25, "r_d": float(p_r),
                "commuting": float(min(p_L, 0.25, p_r))}


@dataclass(repr=False)
class JointResult(Result):
    """Per point of the path: ``coupled`` (batch,) per point and ``w2`` (w2_batch,) per point, as
    (n_points, samples) arrays; ``fits``: exponents in s with intervals; ``predicted``: the rates."""

    command: ClassVar[str] = "joint"
    summary_name: ClassVar[str] = "joint.json"
    config: JointConfig
    coupled: np.ndarray
    w2: np.ndarray
    fits: dict
    predicted: dict
    provenance: dict
    elapsed_s: float

    def means(self) -> dict:
        """Mean and SE per point of each term and of their sum (the two terms are independent runs)."""
        (cm, cs), (wm, ws) = mean_and_se(self.coupled, axis=1), mean_and_se(self.w2, axis=1)
        return {"coupled": (cm, cs), "w2": (wm, ws), "combined": (cm + wm, np.hypot(cs, ws))}

    def to_dict(self) -> dict:
        c = self.config
        means = {k: {"mean": m, "se": s} for k, (m, s) in self.means().items()}
        return {"path_N": c.path_N, "path_L": c.path_L, "path_m": c.path_m, "scale": c.scale, **means,
                "fits": self.fits, "predicted": self.predicted, "elapsed_s": self.elapsed_s}

    def _dataset(self) -> xr.Dataset:
        return xr.Dataset({"coupled": (("point", "sample"), self.coupled), "w2": (("point", "w2_sample"), self.w2)},
                          coords={"N": ("point", self.config.path_N), "L": ("point", self.config.path_L),
                                  "m": ("point", self.config.path_m)})


@validated
def run_joint(cfg: JointConfig, progress: bool = False, store: Optional[Path | str] = None,
              scheduler: Optional[str] = None) -> JointResult:
    """The coupled transformer–SDE errors and the W₂² to the reference along the path, as tasks of
    ``converge`` and ``chaos`` (``store`` makes the run resumable), then the fits."""
    cfg = as_config(cfg, JointConfig)
    start = time.perf_counter()
    run = cfg.model
    base = run.model_dump(mode="json")
    chaos_cfg = cfg.chaos_config()
    n_parts = -(-run.batch // cfg.samples_per_task)
    sizes = [min(cfg.samples_per_task, run.batch - c * cfg.samples_per_task) for c in range(n_parts)]
    s_coupled, s_w2 = child_seeds(run.seed, 2)
    tasks = [Task(f"coupled-{k}-{c}", converge._grid_task,
                  dict(config={**base, "N": N}, depths=[L], widths=[m], refine=cfg.refine, depth=L, seed=sd, n=sizes[c]))
             for k, (N, L, m) in enumerate(zip(cfg.path_N, cfg.path_L, cfg.path_m))
             for c, sd in enumerate(child_seeds(s_coupled + k, n_parts))]
    tasks += [Task(f"w2-{j}", chaos.coupling_task, dict(config=chaos_cfg.model_dump(mode="json"), d=run.d, seed=sd,
                                                        with_w2=True, keep_cloud=False))
              for j, sd in enumerate(child_seeds(s_w2, cfg.w2_batch))]
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="joint")
    coupled = np.asarray([np.concatenate([np.asarray(results[f"coupled-{k}-{c}"]["layer"][0]) for c in range(n_parts)])
                          for k in range(len(cfg.path_N))])
    ref = 1 - np.asarray(cfg.path_N, float) / cfg.N_ref  # the finite reference removed (as in chaos)
    w2 = np.asarray([np.asarray(results[f"w2-{j}"]["w2"]).max(axis=0) / ref for j in range(cfg.w2_batch)]).T
    result = JointResult(cfg, coupled, w2, {}, cfg.predicted_exponent(), provenance(resolve_device(run.device)), 0.0)
    s = cfg.scale
    samples = {"coupled": run.batch, "w2": cfg.w2_batch, "combined": min(run.batch, cfg.w2_batch)}
    for name, (m, se) in result.means().items():
        fit = fit_power_law(s, m, cfg.bootstrap, run.seed, se=se, n=samples[name])
        result.fits[name] = {"exponent": fit.exponent, "ci": list(fit.ci), "se": fit.se, "prefactor": fit.prefactor,
                             "n": samples[name]}
    result.elapsed_s = time.perf_counter() - start
    return result
