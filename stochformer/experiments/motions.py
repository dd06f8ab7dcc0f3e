"""``motions``: the one- and two-point motions of the noise alone (SPEC §3–§4, no attention), measured
on the limit SDE and on the transformer beside [`stochformer.model.two_point`][stochformer.model.two_point].

Pairs of tokens at cosine ``u0`` are stepped by [`stochformer.solve`][stochformer.solve] (L steps of [0, T], token
snapshots every ``L // snapshots`` steps) for each dynamics. Measured:

* **one point**: c_t = ⟨x₀, X_t⟩ of the first token of every pair, its mean ± SE per snapshot,
  and the decay rate of E c_t fitted as the slope of log(mean) against t (``sync.moment_rate``, the
  bootstrap SE over pairs); predicted −κ(1)(d−1)/2 (and E c_T = e^{−κ(1)(d−1)T/2});
* **two points**: u_T = ⟨X¹_T, X²_T⟩, its mean and the tail probability P(u_T > ``threshold``)
  with SEs, beside the same of the scalar diffusion of u integrated finely
  ([`stochformer.model.two_point.simulate_two_point`][stochformer.model.two_point.simulate_two_point], ``reference_steps`` × ``reference_paths``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field

from ..config.build import GivenModels, initial_tokens, make_kernel, make_model, setup
from ..config import ExperimentConfig, InitConfig, as_config
from ..io.store import to_jsonable
from ..model.two_point import one_point_mean, simulate_two_point
from ..io.results import Result
from ..integrate import ModelSource, SaveAt, solve
from ..measure.stats import mean_and_se
from ..core.progress import ProgressMeter
from ..core.validation import blamed_on, validated
from .sync import moment_rate
from .preflight import FLOPS, Estimate, simulate_estimate

DYNAMICS = ("sde", "transformer")


class MotionsConfig(ExperimentConfig):
    """``model``: the noise alone (no attention, N = 2 tokens, ``model.batch`` pairs; both dynamics are
    run), by default ReLU, d = 4, σ_U = σ_W = 0.5 (κ(1) = 0.5), T = 1 on 100 steps, m = 64
    (docs/synchronisation.md); the pairs' start and the reference's sizes."""

    command: ClassVar[str] = "motions"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"d": 4, "sigma_U": 0.5, "sigma_W": 0.5, "T": 1.0, "L": 100, "m": 64, "batch": 2000}
    model_fixed: ClassVar[dict] = {"attention": (False, "the motions are of the noise alone"),
                                   "N": (2, "a pair of tokens")}
    model_min: ClassVar[dict] = {"batch": (2, "independent pairs")}
    model_unused: ClassVar[dict] = {"dynamics": "both the SDE and the transformer are run",
                                    "init": "every pair starts at cosine u0"}

    u0: float = Field(0.5, gt=-1.0, lt=1.0, description="initial cosine of each pair, in (-1, 1)")
    threshold: float = Field(0.9, gt=-1.0, lt=1.0, description="tail event u_T > threshold, in (-1, 1)")
    snapshots: int = Field(20, ge=2, description="token snapshots over [0, T] for the one-point time course (>= 2)")
    reference_steps: int = Field(400, ge=10, description="Euler steps of the scalar two-point diffusion (>= 10)")
    reference_paths: int = Field(20000, ge=100, description="paths of the scalar two-point diffusion (>= 100)")
    bootstrap: int = Field(400, ge=10, le=1000000, description="bootstrap resamples of the one-point rate's SE, in [10, 10^6]")

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): both dynamics on
        the pairs, and the scalar reference diffusion.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        runs = [simulate_estimate(self.model.with_updates(dynamics=k)) for k in ("sde", "transformer")]
        ref = 8.0 * 4 * self.reference_paths
        seconds = sum(e.seconds for e in runs) + self.reference_paths * self.reference_steps * 50 / FLOPS
        return Estimate(max(e.bytes for e in runs) + ref, seconds, "model.batch, model.m or reference_paths",
                        "model.L, model.batch, reference_steps or reference_paths")


@dataclass(repr=False)
class MotionsResult(Result):
    """``times``: (snapshots,); ``one_point[dyn]``: (mean, se) of ⟨x₀, X_t⟩ per snapshot;
    ``measured[dyn]``: the one-point rate and value at T, the mean and tail of u_T (each with its SE);
    ``reference``: the scalar diffusion's mean and tail of u_T with SEs; ``predicted``: the one-point
    rate −κ(1)(d−1)/2 and e^{−κ(1)(d−1)T/2}, κ(1), d.

    Attributes
    ----------
    config : MotionsConfig
        The configuration run.
    times : numpy.ndarray, shape (snapshots,)
        The snapshot times.
    one_point : dict
        Dynamics → (mean, SE) of ⟨x₀, X_t⟩.
    u_final : dict
        Dynamics → the samples of u_T.
    u_reference : numpy.ndarray
        u_T of the scalar diffusion.
    measured, reference, predicted : dict
        The measured laws, the reference's and the closed forms.
    meta : dict
        Further record entries (``model``: a model given by hand).
    """

    command: ClassVar[str] = "motions"
    summary_name: ClassVar[str] = "motions.json"
    config: MotionsConfig
    times: np.ndarray
    one_point: dict[str, tuple[np.ndarray, np.ndarray]]
    u_final: dict[str, np.ndarray]
    u_reference: np.ndarray
    measured: dict[str, dict]
    reference: dict
    predicted: dict
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return to_jsonable({"measured": self.measured, "reference": self.reference, "predicted": self.predicted,
                            "times": self.times, "one_point": {k: {"mean": m, "se": s} for k, (m, s) in self.one_point.items()}})

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "dynamics": {"long_name": "dynamics stepped (sde: the limit SDE; transformer)", "units": "1"},
            "path": {"long_name": "path of the scalar two-point diffusion (reference)", "units": "1"},
            "one_point": {"long_name": "one-point motion c_t = ⟨x_0, X_t⟩ of a pair's first token", "units": "1"},
            "u_final": {"long_name": "pair cosine u_T = ⟨X¹_T, X²_T⟩ at T", "units": "1"},
            "u_reference": {"long_name": "u_T of the scalar two-point diffusion (reference)", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        dyn = list(self.one_point)
        data = {"one_point_mean": (("dynamics", "time"), np.stack([self.one_point[k][0] for k in dyn])),
                "one_point_se": (("dynamics", "time"), np.stack([self.one_point[k][1] for k in dyn])),
                "u_final": (("dynamics", "pair"), np.stack([self.u_final[k] for k in dyn])),
                "u_reference": ("path", self.u_reference)}
        return xr.Dataset(data, coords={"dynamics": dyn, "time": self.times})


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    m, s = mean_and_se(np.asarray(x, float))
    return float(m), float(s)


def law_of_u(u: np.ndarray, threshold: float) -> dict:
    """Mean and P(u > threshold) of samples ``u`` with their SEs, the number of samples ``n`` and
    of those above the threshold ``tail_count`` (for a binomial interval of the tail).

    Parameters
    ----------
    u : numpy.ndarray
        Samples.
    threshold : float
        The tail's threshold.

    Returns
    -------
    dict
        ``u_mean``, ``u_mean_se``, ``tail``, ``tail_se``, ``n``, ``tail_count``.
    """
    mean, se = _mean_se(u)
    above = np.asarray(u) > threshold
    tail, tail_se = _mean_se(above)
    return {"u_mean": mean, "u_mean_se": se, "tail": tail, "tail_se": tail_se, "n": int(above.size),
            "tail_count": int(above.sum())}


@validated
def run_motions(cfg: MotionsConfig, progress: bool = False, model: Optional[ModelSource] = None) -> MotionsResult:
    """Measure the one- and two-point motions on the limit SDE and the transformer (module docstring).

    Parameters
    ----------
    cfg : MotionsConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with the config of each dynamics
        (``cfg.model`` with ``dynamics = "sde"``, then ``"transformer"``), whose model is stepped
        instead of the config's (the predictions and the reference still come from ``cfg.model``);
        checked before any work, recorded in ``result.meta["model"]``
        ([`GivenModels`][stochformer.config.build.GivenModels]). (One model object is refused: the
        two runs differ in ``dynamics``.)

    Returns
    -------
    MotionsResult
        The measured and predicted motions.
    """
    cfg = as_config(cfg, MotionsConfig)
    runs = {dyn: cfg.model.with_updates(dynamics=dyn) for dyn in DYNAMICS}
    given = GivenModels.check(model, list(runs.values()), "motions", prefix="model.")
    start = time.perf_counter()
    base = cfg.model
    env = setup(base)
    device, dtype = env.device, env.dtype
    kernel = make_kernel(base)
    k1, d, T = kernel.kappa1, base.d, base.T
    s_init, s_ref, *s_dyn = env.seeds(2 + len(DYNAMICS))
    X0 = initial_tokens(InitConfig(kind="pair", cosine=cfg.u0), base.batch, 2, d, env.generator(s_init), dtype,
                        device)
    stride = max(1, base.L // cfg.snapshots)
    save = SaveAt(stats=(), tokens_every=stride)
    one_point: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    u_final: dict[str, np.ndarray] = {}
    measured: dict[str, dict] = {}
    times = np.zeros(0)
    for dyn, seed in zip(DYNAMICS, s_dyn):
        run = runs[dyn]
        stepped = given.model(run, dyn, lambda: make_model(run, dtype, device))
        with blamed_on(run):
            ds = solve(stepped, X0, T, run.L, save, generator=env.generator(seed),
                       progress=ProgressMeter(f"motions ({dyn})") if progress else None)
        X = torch.from_numpy(ds["X"].values)  # (pairs, snapshots, 2, d)
        times = ds["snapshot_time"].values
        c = (X0[:, None, 0].cpu().double() * X[:, :, 0]).sum(-1).numpy()  # (pairs, snapshots)
        mean, se = (np.asarray(x) for x in mean_and_se(c))
        one_point[dyn] = (mean, se)
        rate, rate_se = moment_rate(times, c, n_boot=cfg.bootstrap, seed=seed)
        u = (X[:, -1, 0] * X[:, -1, 1]).sum(-1).numpy()
        u_final[dyn] = u
        measured[dyn] = {"one_point_rate": rate, "one_point_rate_se": rate_se, "one_point_T": float(mean[-1]),
                         "one_point_T_se": float(se[-1]), **law_of_u(u, cfg.threshold)}
    u_ref = simulate_two_point(kernel, cfg.u0, T, cfg.reference_steps, cfg.reference_paths, s_ref)
    predicted = {"kappa": k1, "d": d, "T": T, "one_point_rate": -k1 * (d - 1) / 2,
                 "one_point_T": float(one_point_mean(k1, d, T)), "u0": cfg.u0, "threshold": cfg.threshold}
    return MotionsResult(cfg, times, one_point, u_final, u_ref, measured, law_of_u(u_ref, cfg.threshold), predicted,
                         env.provenance(), time.perf_counter() - start, given.meta())

