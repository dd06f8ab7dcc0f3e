"""The paper's experiments of SPEC §6 items 1–3, each a function ``config → result object``.

Each item's config ([`ClustersConfig`][stochformer.experiments.paper.ClustersConfig],
[`ScenariosConfig`][stochformer.experiments.paper.ScenariosConfig],
[`TableConfig`][stochformer.experiments.paper.TableConfig], on
[`PaperConfig`][stochformer.experiments.paper.PaperConfig]) names a built-in ``size``: ``"quick"``
(small, seconds to a minute on a laptop) or ``"paper"`` (the paper's sizes: item 1 N = 64, L = 2000,
T = 20, m = 2048; item 2 N = 64, L = 150, T = 5), with ``sizes`` overriding entries of it. Grids go through
[`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks] (``store`` makes them resumable, ``scheduler`` parallel).

1. [`run_clusters`][stochformer.experiments.paper.run_clusters]: no attention, no biases, d = 4, ReLU and tanh from uniform tokens; the
   final cloud's clusters, antipodal cluster pairs and the distribution of pair cosines (tanh is an
   odd field: two antipodal clusters; ReLU: one).
2. [`run_scenarios`][stochformer.experiments.paper.run_scenarios]: mean/min pairwise cosine and E_β against layer for every activation
   (and "none", no MLP), d, σ = σ_U = σ_W and γ.
3. [`run_table`][stochformer.experiments.paper.run_table]: κ(1), κ'(1), λ₁, λ̄ computed, and beside each the value measured from the
   transformer: κ(1) = E|G(x)|²/d and κ'(1) = E|G(x) − G(y)|²/(d |x − y|²) (|x − y| = 10⁻³) over MLP
   draws; λ₁ by the pair estimator and λ̄ as the first-moment energy rate of a near-synchronised
   pair (cluster spread from the kernel's regularity, ``sync.near_sync_spread``), both extrapolated
   to Δt → 0 (L, L/2, L/4 layers on one Brownian path).
   Horizons are in units of the noise time τ = 1/(d κ(1)) (the time over which a token's noise
   variance is 1); Δt = T/L.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, field_validator

from ..measure.clusters import ClusterSummary, count_clusters, summarise_clusters
from ..config import InitConfig, RunConfig, StrictConfig, as_config, build_config
from ..config.build import GivenModels, Setup, setup, task_model
from ..measure.diagnostics import STATISTICS
from ..io.names import RATE_UNITS, TIME_UNITS
from ..io.store import to_jsonable
from ..io.results import Result
from ..model.activations import ACTIVATIONS, ODD_ACTIVATIONS
from ..model.noise import RandomMLP
from ..core.runtime import child_seeds, provenance, resolve_device
from ..measure.stats import mean_and_se
from ..tasks import Task, run_tasks
from ..core.validation import validated
from .preflight import FLOPS, Estimate, simulate_estimate
from .simulate import run_simulate
from ..integrate import Model, ModelSource
from .sync import (
    energy_levels,
    extrapolated_moment_rate,
    measure_lyapunov,
    near_sync_horizon,
    near_sync_spread,
    pair_start,
    predicted_rates,
)

Size = Literal["quick", "paper"]


class PaperConfig(StrictConfig):
    """A paper experiment (SPEC §6 items 1–3) at one of its built-in sizes, ``paper`` (the paper's)
    or ``quick``, with ``sizes`` overriding entries of that size (e.g. ``--set clusters.sizes.N=16``
    in the report; the keys are those of the item's table, `CLUSTER_SIZES`, `SCENARIO_SIZES` or
    `TABLE_SIZES`)."""

    size: Size = "quick"
    sizes: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0)
    device: str = "cpu"

    #: the item's built-in sizes, ``{"quick": {...}, "paper": {...}}`` (set by each subclass)
    SIZES: ClassVar[dict[str, dict]] = {}

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not (v == "cpu" or v == "cuda" or v.startswith("cuda:")):
            raise ValueError("must be 'cpu', 'cuda' or 'cuda:<index>'")
        return v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: dict) -> dict:
        valid = cls.SIZES["quick"]
        bad = sorted(set(v) - set(valid))
        if bad:
            raise ValueError(f"unknown entries {', '.join(bad)}; valid: {', '.join(valid)}")
        return v

    def resolved_sizes(self) -> dict:
        """The sizes run: the built-in ``size`` with ``sizes`` over it.

        Returns
        -------
        dict
            Every entry of the item's table.
        """
        return {**self.SIZES[self.size], **self.sizes}


def _curves(stats: dict) -> dict:
    """Sample mean and SE per layer of each recorded statistic."""
    out = {}
    for name, arr in stats.items():
        m, s = mean_and_se(torch.as_tensor(np.asarray(arr)))
        out[name], out[f"{name}_se"] = m.numpy(), s.numpy()
    return out


class _PaperResult(Result):
    """A paper item's result: its config is the size, the sizes and the seed."""

    # fields of every subclass (dataclasses)
    size: str
    sizes: dict
    seed: int
    device: str

    @property
    def config(self) -> dict:
        return {"size": self.size, "sizes": self.sizes, "seed": self.seed}

    @property
    def provenance(self) -> dict:
        return provenance(resolve_device(self.device))

    def names(self) -> dict[str, dict[str, str]]:
        """The names of the three items' datasets (clusters, scenarios, table) beside `NAMES`."""
        return {
            "n_clusters": {"long_name": "clusters of the final tokens at tolerance tol", "units": "1"},
            "n_antipodal": {"long_name": "pairs of clusters with antipodal centres (cosine ≤ −1 + tol)", "units": "1"},
            "scenario": {"long_name": "scenario activation/d/σ/γ", "units": "1"},
            "row": {"long_name": "row of the table (activation, d, σ)", "units": "1"},
            "T_near": {"long_name": "horizon of the near-synchronisation E_β fit", "units": TIME_UNITS},
            "kappa": {"long_name": "κ(1) of the MLP's covariance, measured", "units": RATE_UNITS},
            "kappa_pred": {"long_name": "κ(1) of the MLP's covariance, computed", "units": RATE_UNITS},
            "kappa_prime": {"long_name": "κ'(1) of the MLP's covariance, measured", "units": RATE_UNITS},
            "kappa_prime_pred": {"long_name": "κ'(1) of the MLP's covariance, computed", "units": RATE_UNITS},
            "lambda_bar": {"long_name": "first-moment rate λ̄ (E_β rate near synchronisation)", "units": RATE_UNITS},
            "lambda_bar_n": {"long_name": "paths behind the measured λ̄", "units": "1"},
            "near_spread": {"long_name": "per-coordinate spread of the near-synchronised cluster", "units": "1"},
        }


# --------------------------------------------------------------------------- item 1

CLUSTER_SIZES = {
    # snapshots: token states kept for the cluster-count time course, over [0, T] and over the
    # attractor run (to the predicted horizon, at the same step T/L)
    "quick": dict(N=32, L=400, T=20.0, m=256, batch=4, snapshots=40),
    "paper": dict(N=64, L=2000, T=20.0, m=2048, batch=8, snapshots=40),
}


@dataclass(repr=False)
class ClustersResult(_PaperResult):
    """Per activation: the statistics against layer, the final [`ClusterSummary`][stochformer.experiments.paper.ClusterSummary] and the
    cluster-count time course ``courses[act]`` ([`cluster_course`][stochformer.experiments.paper.cluster_course]: ``times``, ``counts``
    (batch, snapshots) over [0, T]; ``horizon`` the predicted attractor time, ``lambda_1``; and
    ``long_times``, ``long_counts`` of the attractor run to that horizon).

    Attributes
    ----------
    size : str
        The size profile.
    sizes : dict
        The sizes run.
    tol : float
        The clustering tolerance.
    curves : dict
        Activation → statistics against layer.
    clusters : dict
        Activation → its final ClusterSummary.
    final : dict
        Activation → final tokens.
    seed : int
        The root seed.
    elapsed_s : float
        The run time in seconds.
    device : str
        Where it ran.
    courses : dict
        Activation → the cluster-count time course.
    meta : dict
        Further record entries (``model``: a model given by hand).
    """

    size: str
    sizes: dict
    tol: float
    curves: dict[str, dict]
    clusters: dict[str, ClusterSummary]
    final: dict[str, np.ndarray]
    seed: int
    elapsed_s: float
    device: str = "cpu"
    courses: dict[str, dict] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    command: ClassVar[str] = "paper-clusters"
    summary_name: ClassVar[str] = "clusters.json"

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "tol": self.tol, "curves": self.curves,
                            "clusters": {k: v.to_dict() for k, v in self.clusters.items()}, "courses": self.courses})

    def _dataset(self) -> xr.Dataset:
        """Per activation: the curves (activation, time), the final tokens and cluster counts."""
        acts = list(self.curves)
        data: dict[str, tuple[tuple[str, ...], np.ndarray]] = {k: (("activation", "step"), np.stack([np.asarray(self.curves[a][k]) for a in acts]))
                for k in self.curves[acts[0]] if k != "layers"}
        data["X_final"] = (("activation", "sample", "token", "dim"), np.stack([self.final[a] for a in acts]))
        data["n_clusters"] = (("activation", "sample"), np.stack([self.clusters[a].n_clusters for a in acts]))
        data["n_antipodal"] = (("activation", "sample"), np.stack([self.clusters[a].n_antipodal for a in acts]))
        return xr.Dataset(data, coords={"activation": acts, "step": np.asarray(self.curves[acts[0]]["layers"])},
                          attrs={"tol": self.tol})


class ClustersConfig(PaperConfig):
    """SPEC §6 item 1 (`run_clusters`): the sizes (`CLUSTER_SIZES`), the seed, the device and the
    clustering tolerance."""

    SIZES: ClassVar[dict[str, dict]] = CLUSTER_SIZES
    tol: float = Field(0.05, gt=0.0, lt=1.0, description="two tokens are in one cluster when cos >= 1 - tol")

    def runs(self) -> dict[str, RunConfig]:
        """The run of each activation (ReLU, tanh): d = 4, no attention, no biases, a child seed each.

        Returns
        -------
        dict of str to RunConfig
            Activation → its run.
        """
        sizes = self.resolved_sizes()
        model = {k: v for k, v in sizes.items() if k != "snapshots"}
        return {act: build_config({**model, "d": 4, "activation": act, "attention": False, "seed": s, "device": self.device,
                                   "record_every": max(1, sizes["L"] // 200),
                                   "path_stride": max(1, sizes["L"] // sizes["snapshots"])})
                for act, s in zip(("relu", "tanh"), child_seeds(self.seed, 2))}

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): each activation's run and its
        attractor run ([`attractor_run`][stochformer.experiments.paper.attractor_run]), one after the other.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over (unused: the runs are sequential).

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        snapshots = self.resolved_sizes()["snapshots"]
        per = []
        for cfg in self.runs().values():
            per.append(simulate_estimate(cfg))
            long = attractor_run(cfg, self.tol, snapshots)
            if long is not None:
                per.append(simulate_estimate(long))
        top = max(per, key=lambda e: e.bytes)
        return Estimate(top.bytes, sum(e.seconds for e in per), f"sizes ({top.memory_fields})", "sizes (L, N, batch or m)")


@validated
def run_clusters(cfg: ClustersConfig, progress: bool = False, model: Optional[ModelSource] = None) -> ClustersResult:
    """SPEC §6 item 1: ReLU and tanh on S³ (d = 4), no attention, no biases, uniform tokens.

    Parameters
    ----------
    cfg : ClustersConfig
        The size, its overrides ``sizes`` (of `CLUSTER_SIZES`), the seed, the device and ``tol``.
    progress : bool, optional
        Show progress bars (on a terminal).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with each run's config (each activation's,
        ``ClustersConfig.runs``, and its attractor run's, [`attractor_run`][stochformer.experiments.paper.attractor_run]),
        whose model is simulated instead of the config's (the attractor horizon is still predicted
        from the config); checked before any work, recorded in ``result.meta["model"]``
        ([`GivenModels`][stochformer.config.build.GivenModels]). (One model object is refused: the
        runs differ in the activation.)

    Returns
    -------
    ClustersResult
        Curves, clusters and courses per activation.
    """
    cfg = as_config(cfg, ClustersConfig)
    sizes = cfg.resolved_sizes()
    runs = cfg.runs()
    longs = {act: attractor_run(run, cfg.tol, sizes["snapshots"]) for act, run in runs.items()}
    given = GivenModels.check(model, [*runs.values(), *(c for c in longs.values() if c is not None)], "clusters")
    start = time.perf_counter()
    curves, clusters, final, courses = {}, {}, {}, {}
    for act, run in runs.items():
        res = run_simulate(run, progress=progress, model=given.get(run, act))
        curves[act] = {"layers": res.data["step"].values, **_curves({k: res.data[k].values for k in STATISTICS})}
        clusters[act] = summarise_clusters(res.data["X_final"].values, cfg.tol)
        final[act] = res.data["X_final"].values
        long = longs[act]
        courses[act] = cluster_course(run, res.data, cfg.tol, sizes["snapshots"], progress,
                                      None if long is None else given.get(long, f"{act} attractor"))
    return ClustersResult(cfg.size, sizes, cfg.tol, curves, clusters, final, cfg.seed, time.perf_counter() - start,
                          cfg.device, courses, given.meta())


def _counts(data: xr.Dataset, tol: float, up_to_sign: bool) -> np.ndarray:
    """Clusters (of projective space with ``up_to_sign``) per sample at every snapshot: (batch, snapshots)."""
    X = data["X"].values
    return np.stack([count_clusters(X[:, k], tol, up_to_sign) for k in range(X.shape[1])], axis=1)


def cluster_course(cfg: RunConfig, data: xr.Dataset, tol: float, snapshots: int, progress: bool = False,
                   model: Optional[Model] = None) -> dict:
    """The number of clusters against t (of projective space {x, −x} for an odd field) of the run
    ``data`` of ``cfg`` (token snapshots ``X``), and of a second run of the same model (seed
    ``cfg.seed + 1``) at the same step T/L up to the attractor horizon predicted from e^{λ₁T}
    ([`attractor_horizon`][stochformer.experiments.paper.attractor_horizon], rounded up to whole snapshots), where the claim is one cluster.
    Returns JSON-able times, counts (batch, snapshots), ``horizon``, ``lambda_1``, ``long_times``,
    ``long_counts`` (empty when the horizon is infinite).

    Parameters
    ----------
    cfg : RunConfig
        The run's configuration.
    data : xarray.Dataset
        Its dataset (token snapshots ``X``).
    tol : float
        The clustering tolerance.
    snapshots : int
        Snapshots of the second run.
    progress : bool, optional
        Show progress bars (on a terminal).
    model : Model, optional
        A model simulated in the second run instead of the config's.

    Returns
    -------
    dict
        ``times``, ``counts``, ``horizon``, ``lambda_1``, ``long_times``, ``long_counts``.
    """
    odd = cfg.activation in ODD_ACTIVATIONS
    p = predicted_rates(cfg, with_bound=False)
    horizon = attractor_horizon(p["lambda_1_noise"], p["kappa"], p["kappa_prime"], cfg.N, tol)
    out = {"up_to_sign": odd, "horizon": horizon, "lambda_1": p["lambda_1_noise"], "T": cfg.T,
           "times": data["snapshot_time"].values, "counts": _counts(data, tol, odd), "long_times": [], "long_counts": []}
    long = attractor_run(cfg, tol, snapshots)
    if long is not None:
        ld = run_simulate(long, progress=progress, model=model).data
        out.update(long_times=ld["snapshot_time"].values, long_counts=_counts(ld, tol, odd))
    return out


def attractor_run(cfg: RunConfig, tol: float, snapshots: int) -> Optional[RunConfig]:
    """The second run of [`cluster_course`][stochformer.experiments.paper.cluster_course]: the model of
    ``cfg`` (seed ``child_seeds(cfg.seed, 1)[0]``) at the same step T/L up to the attractor horizon
    ([`attractor_horizon`][stochformer.experiments.paper.attractor_horizon]) rounded up to whole
    snapshots, keeping ``snapshots`` token states; None when the horizon is infinite (λ₁ ≥ 0).

    Parameters
    ----------
    cfg : RunConfig
        The run's configuration.
    tol : float
        The clustering tolerance.
    snapshots : int
        Snapshots of the second run.

    Returns
    -------
    RunConfig or None
        The attractor run.
    """
    p = predicted_rates(cfg, with_bound=False)
    horizon = attractor_horizon(p["lambda_1_noise"], p["kappa"], p["kappa_prime"], cfg.N, tol)
    if not math.isfinite(horizon):
        return None
    stride = max(1, math.ceil(horizon / cfg.dt / snapshots))
    return cfg.with_updates(T=stride * snapshots * cfg.dt, L=stride * snapshots, path_stride=stride,
                            seed=child_seeds(cfg.seed, 1)[0], record_every=stride * snapshots)


def attractor_horizon(lambda_1: float, kappa: float, kappa_prime: float, N: int, tol: float) -> float:
    """The time by which all N tokens are linked (cos ≥ 1 − tol, up to sign for an odd field), from
    e^{λ₁T}: linearised, the log chordal distance of a pair is a Brownian motion with drift λ₁ and
    variance rate κ + κ' (``sync.near_sync_horizon``) started at log √2 (uniform tokens); the slowest
    of the P = N(N−1)/2 pairs is below √(2 tol) once λ₁T + z_P √((κ + κ')T) ≤ log √tol,
    z_P = Φ⁻¹(1 − 1/P). ``inf`` when λ₁ ≥ 0.

    Parameters
    ----------
    lambda_1 : float
        λ₁.
    kappa : float
        κ(1).
    kappa_prime : float
        κ'(1).
    N : int
        Tokens.
    tol : float
        The clustering tolerance.

    Returns
    -------
    float
        The horizon (inf where λ₁ >= 0).
    """
    from scipy.stats import norm

    if lambda_1 >= 0:
        return math.inf
    z, v, c = float(norm.isf(2.0 / (N * (N - 1)))), kappa + kappa_prime, 0.5 * math.log(tol)
    root = (z * math.sqrt(v) + math.sqrt(z * z * v + 4 * lambda_1 * c)) / (2 * -lambda_1)
    return root * root


# --------------------------------------------------------------------------- item 2

SCENARIO_SIZES = {
    "quick": dict(N=16, L=60, T=5.0, m=128, batch=2, ds=[5, 64], sigmas=[0.0, 0.1]),
    "paper": dict(N=64, L=150, T=5.0, m=512, batch=4, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
}
SCENARIO_ACTIVATIONS = ("relu", "silu", "sigmoid", "tanh", "none")
SCENARIO_GAMMAS = (1.0, 0.0, -1.0)


def scenario_point(config: dict, model: Optional[ModelSource] = None) -> dict:
    """One scenario (a task): mean ± SE over samples of mean/min cosine and E_β per layer.

    Parameters
    ----------
    config : dict
        The scenario's RunConfig fields.
    model : Model or callable, optional
        The model simulated, or a factory building it from the scenario's config.

    Returns
    -------
    dict
        Per statistic, mean and SE per layer (JSON-able); with ``model``, ``model``: the record of
        the model that ran.
    """
    cfg = RunConfig.model_validate(config)
    stepped, record = task_model(model, cfg)
    res = run_simulate(cfg, model=stepped)
    return to_jsonable({"layers": res.data["step"].values, **_curves({k: res.data[k].values for k in STATISTICS}),
                        **record})


@dataclass(repr=False)
class ScenariosResult(_PaperResult):
    """``runs[key]``: the curves of scenario ``key = activation/d/sigma/gamma``; ``keys`` their grid
    coordinates.

    Attributes
    ----------
    size : str
        The size profile.
    sizes : dict
        The sizes run.
    keys : dict
        Scenario key → its grid coordinates.
    runs : dict
        Scenario key → its curves.
    seed : int
        The root seed.
    elapsed_s : float
        The run time in seconds.
    device : str
        Where it ran.
    meta : dict
        Further record entries (``model``: a model given by hand).
    """

    size: str
    sizes: dict
    keys: dict[str, dict]
    runs: dict[str, dict]
    seed: int
    elapsed_s: float
    device: str = "cpu"
    meta: dict = field(default_factory=dict)
    command: ClassVar[str] = "paper-scenarios"
    summary_name: ClassVar[str] = "scenarios.json"

    def final_table(self) -> list[dict]:
        """One row per scenario: its coordinates and the final mean cosine, min cosine and E_β.

        Returns
        -------
        list of dict
            One row per quantity.
        """
        rows = []
        for k, coords in self.keys.items():
            r = self.runs[k]
            rows.append({**coords, **{f"final_{q}": r[q][-1] for q in ("mean_cosine", "min_cosine", "energy")},
                         "final_energy_se": r["energy_se"][-1]})
        return rows

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "keys": self.keys, "runs": self.runs,
                            "final": self.final_table()})

    def _dataset(self) -> xr.Dataset:
        """Mean ± SE curves per scenario (scenario, step); its coordinates as scenario labels."""
        keys = list(self.keys)
        first = self.runs[keys[0]]
        data = {k: (("scenario", "step"), np.stack([np.asarray(self.runs[key][k], dtype=float) for key in keys]))
                for k in first if k != "layers"}
        coords = {"scenario": keys, "step": np.asarray(first["layers"])}
        for c in ("activation", "d", "sigma", "gamma"):
            coords[c] = ("scenario", [self.keys[key][c] for key in keys])
        return xr.Dataset(data, coords=coords)


class ScenariosConfig(PaperConfig):
    """SPEC §6 item 2 (`run_scenarios`): the sizes (`SCENARIO_SIZES`), the seed and the device."""

    SIZES: ClassVar[dict[str, dict]] = SCENARIO_SIZES

    def runs(self) -> dict[str, tuple[dict, RunConfig]]:
        """Every scenario: activation (and "none", no MLP) × d × σ × γ, uniform tokens, β = 1, a child
        seed each (σ only with an MLP: it does not enter without one).

        Returns
        -------
        dict of str to (dict, RunConfig)
            Key ``activation/d/sigma/gamma`` → its grid coordinates and its run.
        """
        sz = self.resolved_sizes()
        grid = [(a, d, s, g) for a, d, s, g in itertools.product(SCENARIO_ACTIVATIONS, sz["ds"], sz["sigmas"], SCENARIO_GAMMAS)
                if not (a == "none" and s != sz["sigmas"][0])]
        out = {}
        for (act, d, sigma, gamma), s in zip(grid, child_seeds(self.seed, len(grid))):
            cfg = build_config({k: sz[k] for k in ("N", "L", "T", "m", "batch")} | {
                "d": d, "activation": "relu" if act == "none" else act, "mlp": act != "none", "sigma_U": sigma,
                "sigma_W": sigma, "gamma": gamma, "attention": gamma != 0.0, "beta": 1.0, "seed": s, "device": self.device})
            out[f"{act}/d{d}/sigma{sigma:g}/gamma{gamma:g}"] = ({"activation": act, "d": d, "sigma": sigma, "gamma": gamma}, cfg)
        return out

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): every scenario's simulate estimate,
        ``workers`` of them at once.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        per = [simulate_estimate(cfg) for _, cfg in self.runs().values()]
        top = max(per, key=lambda e: e.bytes)
        return Estimate(top.bytes * workers, sum(e.seconds for e in per) / max(1, workers),
                        f"sizes ({top.memory_fields}, ds)", "sizes (L, N, batch, m, ds or sigmas)")


@validated
def run_scenarios(cfg: ScenariosConfig, progress: bool = False, store: Optional[Path | str] = None,
                  scheduler: Optional[str] = None, model: Optional[ModelSource] = None) -> ScenariosResult:
    """SPEC §6 item 2: every activation (and no MLP) × d × σ × γ, uniform tokens, β = 1.

    Parameters
    ----------
    cfg : ScenariosConfig
        The size, its overrides ``sizes`` (of `SCENARIO_SIZES`), the seed and the device.
    progress : bool, optional
        Show progress bars (on a terminal).
    store : str or pathlib.Path, optional
        A folder of finished tasks, so a killed run resumes.
    scheduler : str, optional
        Where the tasks run (as for ``run_tasks``).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with each scenario's config, whose model is
        simulated instead of the config's; checked before any work, recorded in
        ``result.meta["model"]`` ([`GivenModels`][stochformer.config.build.GivenModels]); not with
        ``store``; with a process or Dask ``scheduler`` it must pickle. (One model object is refused:
        the scenarios differ in the activation, d, σ and γ.)

    Returns
    -------
    ScenariosResult
        The curves of every scenario.
    """
    cfg = as_config(cfg, ScenariosConfig)
    start = time.perf_counter()
    runs = cfg.runs()
    given = GivenModels.check(model, [run for _, run in runs.values()], "scenarios", scheduler, store)
    keys = {key: coords for key, (coords, _) in runs.items()}
    tasks = [Task(key, scenario_point, {"config": run.model_dump(mode="json"), **given.task_kwargs()})
             for key, (_, run) in runs.items()]
    curves = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="scenarios")
    for key in curves:
        given.add(key, curves[key].pop("model", None))
    return ScenariosResult(cfg.size, cfg.resolved_sizes(), keys, curves, cfg.seed, time.perf_counter() - start, cfg.device,
                           given.meta())


# --------------------------------------------------------------------------- item 3

TABLE_SIZES = {
    # kernel draws, pairs for λ₁, pairs for λ̄, layers, horizon in noise times τ = 1/(dκ(1)), MLP width
    "quick": dict(draws=2000, pairs=64, energy_pairs=256, L=100, T_units=4.0, m=64, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
    "paper": dict(draws=20000, pairs=4096, energy_pairs=8192, L=400, T_units=8.0, m=256, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
}
TABLE_ACTIVATIONS = ("relu", "sigmoid", "tanh", "silu")


def measured_kernel(activation: str, d: int, sigma: float, m: int, draws: int, seed: int, env: Setup,
                    h: float = 1e-3) -> dict:
    """κ(1) = E|G(x)|²/d and κ'(1) ≈ E|G(x) − G(y)|²/(d|x − y|²) at |x − y| = h, over ``draws``
    independent MLPs of width m (explicit weights), with SEs, in float64, from a generator seeded
    with ``seed``.

    Parameters
    ----------
    activation : str
        φ.
    d : int
        Token dimension.
    sigma : float
        σ_U = σ_W.
    m : int
        The MLP's width.
    draws : int
        Independent MLPs.
    seed : int
        The seed.
    env : Setup
        The run's [`Setup`][stochformer.config.build.Setup] (its device).
    h : float, optional
        The distance |x − y|.

    Returns
    -------
    dict
        ``kappa``, ``kappa_se``, ``kappa_prime``, ``kappa_prime_se``.
    """
    gen = env.generator(seed)
    X = pair_start(draws, d, h, gen, torch.float64, env.device)
    G = RandomMLP(m, activation, sigma, sigma, 1.0, mode="weights").increment(X, 1.0, gen)
    dist2 = ((X[:, 1] - X[:, 0]) ** 2).sum(-1)
    k, k_se = mean_and_se((G[:, 0] ** 2).sum(-1) / d)
    kp, kp_se = mean_and_se(((G[:, 1] - G[:, 0]) ** 2).sum(-1) / (d * dist2))
    return {"kappa": float(k), "kappa_se": float(k_se), "kappa_prime": float(kp), "kappa_prime_se": float(kp_se)}


def table_point(activation: str, d: int, sigma: float, sizes: dict, seed: int, device: str = "cpu") -> dict:
    """One row of the paper's table (a task): computed and measured κ, κ', λ₁, λ̄ (transformer).

    Parameters
    ----------
    activation : str
        φ.
    d : int
        Token dimension.
    sigma : float
        σ_U = σ_W.
    sizes : dict
        The sizes run.
    seed : int
        The seed.
    device : str, optional
        Where it runs.

    Returns
    -------
    dict
        The row.
    """
    s = child_seeds(seed, 3)
    cfg = build_config({"N": 2, "d": d, "activation": activation, "sigma_U": sigma, "sigma_W": sigma, "attention": False,
                        "m": sizes["m"], "L": sizes["L"], "T": 1.0, "device": device})
    p = predicted_rates(cfg, with_bound=False)
    T = sizes["T_units"] / (d * p["kappa"])
    T_near = min(T, near_sync_horizon(p["kappa"], p["kappa_prime"]))
    row = {"activation": activation, "d": d, "sigma": sigma, "T": T, "T_near": T_near, "L": sizes["L"], "m": sizes["m"],
           "kappa_pred": p["kappa"], "kappa_prime_pred": p["kappa_prime"], "lambda_1_pred": p["lambda_1_noise"],
           "lambda_bar_pred": p["lambda_bar_noise"]}
    row.update(measured_kernel(activation, d, sigma, sizes["m"], sizes["draws"], s[0], setup(cfg)))
    lyap = measure_lyapunov(cfg.with_updates(T=T), sizes["pairs"], 1e-4, s[1])
    row.update(lambda_1=lyap["lambda_1"], lambda_1_se=lyap["lambda_1_se"], lambda_1_extrap_err=lyap["lambda_1_extrap_err"])
    near = cfg.with_updates(T=T_near, batch=sizes["energy_pairs"], seed=s[2])
    spread = near_sync_spread(activation, d)
    fit = extrapolated_moment_rate(T_near, energy_levels(near, InitConfig(kind="cluster", spread=spread), s[2]), seed=s[2])
    row.update(lambda_bar=fit["rate"], lambda_bar_se=fit["se"], lambda_bar_extrap_err=fit["err"], lambda_bar_n=fit["paths"],
               near_spread=spread)
    return row


@dataclass(repr=False)
class TableResult(_PaperResult):
    """Rows of the paper's table: for each quantity q, ``q_pred`` (computed), ``q`` and ``q_se`` (measured).

    Attributes
    ----------
    size : str
        The size profile.
    sizes : dict
        The sizes run.
    rows : list of dict
        The rows.
    seed : int
        The root seed.
    elapsed_s : float
        The run time in seconds.
    device : str
        Where it ran.
    """

    size: str
    sizes: dict
    rows: list[dict] = field(default_factory=list)
    seed: int = 0
    elapsed_s: float = 0.0
    device: str = "cpu"
    command: ClassVar[str] = "paper-table"
    summary_name: ClassVar[str] = "table.json"

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "rows": self.rows})

    def _dataset(self) -> xr.Dataset:
        """One row per (activation, d, σ): every column of the table as a variable on ``row``."""
        cols = list(self.rows[0]) if self.rows else []
        data = {c: ("row", [np.nan if r[c] is None else r[c] for r in self.rows]) for c in cols}
        return xr.Dataset(data, coords={"row": np.arange(len(self.rows))})

    def markdown(self) -> str:
        """The table in Markdown: computed | measured ± SE for every quantity.

        Returns
        -------
        str
            The Markdown table.
        """
        head = "| φ | d | σ | κ(1) | measured | κ'(1) | measured | λ₁ | measured | λ̄ | measured |"
        lines = [head, "|" + "---|" * 11]
        for r in self.rows:
            cells = [r["activation"], str(r["d"]), f"{r['sigma']:g}"]
            for q in ("kappa", "kappa_prime", "lambda_1", "lambda_bar"):
                cells += [f"{r[q + '_pred']:.4g}", f"{r[q]:.4g} ± {r[q + '_se']:.2g}"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


class TableConfig(PaperConfig):
    """SPEC §6 item 3 (`run_table`): the sizes (`TABLE_SIZES`), the seed, the device and the
    activations of the rows."""

    SIZES: ClassVar[dict[str, dict]] = TABLE_SIZES
    activations: list[str] = Field(default_factory=lambda: list(TABLE_ACTIVATIONS))

    @field_validator("activations")
    @classmethod
    def _acts(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if a not in ACTIVATIONS]
        if bad or not v:
            raise ValueError(f"unknown or no activation {bad}; valid names are {', '.join(sorted(ACTIVATIONS))}")
        return v

    def grid(self) -> list[tuple[str, int, float]]:
        """The rows: (activation, d, σ) for every activation × ``ds`` × ``sigmas``.

        Returns
        -------
        list of tuple
            (activation, d, σ) per row.
        """
        sz = self.resolved_sizes()
        return list(itertools.product(self.activations, sz["ds"], sz["sigmas"]))

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): per row, the kernel draws (``draws``
        MLPs of width m on a pair, their weights U and W held at once), the pair exponent (2·pairs samples) and the energy rate
        (``energy_pairs`` samples), each over L, L/2, L/4 steps; ``workers`` rows at once.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        sz = self.resolved_sizes()
        per = []
        for act, d, sigma in self.grid():
            cfg = build_config({"N": 2, "d": d, "activation": act, "sigma_U": sigma, "sigma_W": sigma, "attention": False,
                                "m": sz["m"], "L": sz["L"], "device": self.device})
            runs = [simulate_estimate(cfg, batch=2 * sz["pairs"]), simulate_estimate(cfg, batch=sz["energy_pairs"])]
            kernel_bytes = 8.0 * 2 * sz["draws"] * sz["m"] * d  # U and W of every draw at once
            per.append(Estimate(max(kernel_bytes, *(e.bytes for e in runs)),
                                1.75 * sum(e.seconds for e in runs) + 8.0 * sz["draws"] * sz["m"] * d / FLOPS, "", ""))
        top = max(e.bytes for e in per)
        return Estimate(top * workers, sum(e.seconds for e in per) / max(1, workers),
                        "sizes (draws, m, pairs or energy_pairs; ds)", "sizes (L, pairs, energy_pairs, draws; ds, sigmas)")


@validated
def run_table(cfg: TableConfig, progress: bool = False, store: Optional[Path | str] = None,
              scheduler: Optional[str] = None) -> TableResult:
    """SPEC §6 item 3: the table for ReLU, sigmoid, tanh, SiLU at d ∈ {5, 64, 128}, σ ∈ {0, 0.1}.

    Parameters
    ----------
    cfg : TableConfig
        The size, its overrides ``sizes`` (of `TABLE_SIZES`), the seed, the device and the activations.
    progress : bool, optional
        Show progress bars (on a terminal).
    store : str or pathlib.Path, optional
        A folder of finished tasks, so a killed run resumes.
    scheduler : str, optional
        Where the tasks run (as for ``run_tasks``).

    Returns
    -------
    TableResult
        The rows.
    """
    cfg = as_config(cfg, TableConfig)
    start = time.perf_counter()
    sz = cfg.resolved_sizes()
    grid = cfg.grid()
    tasks = [Task(f"{a}/d{d}/sigma{s:g}", table_point, dict(activation=a, d=d, sigma=s, sizes=sz, seed=sd, device=cfg.device))
             for (a, d, s), sd in zip(grid, child_seeds(cfg.seed, len(grid)))]
    res = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="table")
    return TableResult(cfg.size, sz, [res[t.key] for t in tasks], cfg.seed, time.perf_counter() - start, cfg.device)
