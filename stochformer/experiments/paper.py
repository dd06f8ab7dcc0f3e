"""The paper's experiments of SPEC §6 items 1–3, each a function ``size → result object``.

``size``: ``"quick"`` (small, seconds to a minute on a laptop) or ``"paper"`` (the paper's sizes:
item 1 N = 64, L = 2000, T = 20, m = 2048; item 2 N = 64, L = 150, T = 5). Grids go through
:func:`stochformer.tasks.run_tasks` (``store`` makes them resumable, ``scheduler`` parallel).

1. :func:`run_clusters`: no attention, no biases, d = 4, ReLU and tanh from uniform tokens; the
   final cloud's clusters, antipodal cluster pairs and the distribution of pair cosines (tanh is an
   odd field: two antipodal clusters; ReLU: one).
2. :func:`run_scenarios`: mean/min pairwise cosine and E_β against layer for every activation
   (and "none", no MLP), d, σ = σ_U = σ_W and γ.
3. :func:`run_table`: κ(1), κ'(1), λ₁, λ̄ computed, and beside each the value measured from the
   transformer: κ(1) = E|G(x)|²/d and κ'(1) = E|G(x) − G(y)|²/(d |x − y|²) (|x − y| = 10⁻³) over MLP
   draws; λ₁ by the pair estimator; λ̄ as the first-moment energy rate of a near-synchronised pair.
   Horizons are in units of the noise time τ = 1/(d κ(1)) (the time over which a token's noise
   variance is 1); Δt = T/L.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch

from ..clusters import ClusterSummary, summarise_clusters
from ..config import InitConfig, RunConfig, build_config
from ..diagnostics import mean_and_se
from ..io import to_jsonable, write_json
from ..model.noise import MLPNoise
from ..runtime import child_seeds, make_generator, provenance, resolve_device
from ..tasks import Task, run_tasks
from .simulate import simulate
from .sync import energy_paths, measure_lyapunov, moment_rate, near_sync_horizon, pair_start, predicted_rates

Size = Literal["quick", "paper"]


def _check_size(size: str) -> None:
    if size not in ("quick", "paper"):
        raise ValueError(f"size: must be 'quick' or 'paper' (got {size!r})")


def _curves(stats: dict) -> dict:
    """Sample mean and SE per layer of each recorded statistic."""
    out = {}
    for name, arr in stats.items():
        m, s = mean_and_se(torch.as_tensor(np.asarray(arr)))
        out[name], out[f"{name}_se"] = m.numpy(), s.numpy()
    return out


def _record(command: str, sizes: dict, seed: int, elapsed: float, device: str = "cpu") -> dict:
    prov = provenance(resolve_device(device))
    return {"command": command, "sizes": sizes, "seed": seed, "version": prov["stochformer"], "versions": prov,
            "device": prov["device"], "elapsed_s": elapsed}


# --------------------------------------------------------------------------- item 1

CLUSTER_SIZES = {
    "quick": dict(N=32, L=400, T=20.0, m=256, batch=4),
    "paper": dict(N=64, L=2000, T=20.0, m=2048, batch=8),
}


@dataclass
class ClustersResult:
    """Per activation: the statistics against layer and the final :class:`ClusterSummary`."""

    size: str
    sizes: dict
    tol: float
    curves: dict[str, dict]
    clusters: dict[str, ClusterSummary]
    final: dict[str, np.ndarray]
    seed: int
    elapsed_s: float

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "tol": self.tol, "curves": self.curves,
                            "clusters": {k: v.to_dict() for k, v in self.clusters.items()}})

    def save(self, folder: Path | str) -> None:
        folder = Path(folder)
        write_json(folder / "config.json", _record("paper-clusters", self.sizes, self.seed, self.elapsed_s))
        write_json(folder / "clusters.json", self.to_dict())


def run_clusters(size: Size = "quick", seed: int = 0, tol: float = 0.05, progress: bool = False, device: str = "cpu",
                 sizes: Optional[dict] = None) -> ClustersResult:
    """SPEC §6 item 1: ReLU and tanh on S³ (d = 4), no attention, no biases, uniform tokens.
    ``sizes`` overrides entries of ``CLUSTER_SIZES[size]``."""
    _check_size(size)
    start = time.perf_counter()
    sizes = {**CLUSTER_SIZES[size], **(sizes or {})}
    curves, clusters, final = {}, {}, {}
    for act, s in zip(("relu", "tanh"), child_seeds(seed, 2)):
        cfg = build_config({**sizes, "d": 4, "activation": act, "attention": False, "seed": s, "device": device,
                            "record_every": max(1, sizes["L"] // 200)})
        res = simulate(cfg, progress=progress)
        curves[act] = {"layers": res.trajectory.layers, **_curves(res.trajectory.stats)}
        clusters[act] = summarise_clusters(res.trajectory.final, tol)
        final[act] = res.trajectory.final
    return ClustersResult(size, sizes, tol, curves, clusters, final, seed, time.perf_counter() - start)


# --------------------------------------------------------------------------- item 2

SCENARIO_SIZES = {
    "quick": dict(N=16, L=60, T=5.0, m=128, batch=2, ds=[5, 64], sigmas=[0.0, 0.1]),
    "paper": dict(N=64, L=150, T=5.0, m=512, batch=4, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
}
SCENARIO_ACTIVATIONS = ("relu", "silu", "sigmoid", "tanh", "none")
SCENARIO_GAMMAS = (1.0, 0.0, -1.0)


def scenario_point(config: dict) -> dict:
    """One scenario (a task): mean ± SE over samples of mean/min cosine and E_β per layer."""
    res = simulate(RunConfig.model_validate(config))
    return to_jsonable({"layers": res.trajectory.layers, **_curves(res.trajectory.stats)})


@dataclass
class ScenariosResult:
    """``runs[key]``: the curves of scenario ``key = activation/d/sigma/gamma``; ``keys`` their grid
    coordinates."""

    size: str
    sizes: dict
    keys: dict[str, dict]
    runs: dict[str, dict]
    seed: int
    elapsed_s: float

    def final_table(self) -> list[dict]:
        """One row per scenario: its coordinates and the final mean cosine, min cosine and E_β."""
        rows = []
        for k, coords in self.keys.items():
            r = self.runs[k]
            rows.append({**coords, **{f"final_{q}": r[q][-1] for q in ("mean_cosine", "min_cosine", "energy")},
                         "final_energy_se": r["energy_se"][-1]})
        return rows

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "keys": self.keys, "runs": self.runs,
                            "final": self.final_table()})

    def save(self, folder: Path | str) -> None:
        folder = Path(folder)
        write_json(folder / "config.json", _record("paper-scenarios", self.sizes, self.seed, self.elapsed_s))
        write_json(folder / "scenarios.json", self.to_dict())


def run_scenarios(size: Size = "quick", seed: int = 0, progress: bool = False, store: Optional[Path | str] = None,
                  scheduler: Optional[str] = None, device: str = "cpu", sizes: Optional[dict] = None) -> ScenariosResult:
    """SPEC §6 item 2: every activation (and no MLP) × d × σ × γ, uniform tokens, β = 1.
    ``sizes`` overrides entries of ``SCENARIO_SIZES[size]``."""
    _check_size(size)
    start = time.perf_counter()
    sz = {**SCENARIO_SIZES[size], **(sizes or {})}
    keys, tasks = {}, []
    grid = [(a, d, s, g) for a, d, s, g in itertools.product(SCENARIO_ACTIVATIONS, sz["ds"], sz["sigmas"], SCENARIO_GAMMAS)
            if not (a == "none" and s != sz["sigmas"][0])]  # σ does not enter without an MLP
    for (act, d, sigma, gamma), s in zip(grid, child_seeds(seed, len(grid))):
        key = f"{act}/d{d}/sigma{sigma:g}/gamma{gamma:g}"
        keys[key] = {"activation": act, "d": d, "sigma": sigma, "gamma": gamma}
        cfg = build_config({k: sz[k] for k in ("N", "L", "T", "m", "batch")} | {
            "d": d, "activation": "relu" if act == "none" else act, "mlp": act != "none", "sigma_U": sigma,
            "sigma_W": sigma, "gamma": gamma, "attention": gamma != 0.0, "beta": 1.0, "seed": s, "device": device})
        tasks.append(Task(key, scenario_point, {"config": cfg.model_dump(mode="json")}))
    runs = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="scenarios")
    return ScenariosResult(size, {k: v for k, v in sz.items()}, keys, runs, seed, time.perf_counter() - start)


# --------------------------------------------------------------------------- item 3

TABLE_SIZES = {
    # kernel draws, pairs for λ₁, pairs for λ̄, layers, horizon in noise times τ = 1/(dκ(1)), MLP width
    "quick": dict(draws=2000, pairs=64, energy_pairs=256, L=100, T_units=4.0, m=64, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
    "paper": dict(draws=20000, pairs=4096, energy_pairs=8192, L=400, T_units=8.0, m=256, ds=[5, 64, 128], sigmas=[0.0, 0.1]),
}
TABLE_ACTIVATIONS = ("relu", "sigmoid", "tanh", "silu")


def measured_kernel(activation: str, d: int, sigma: float, m: int, draws: int, seed: int, h: float = 1e-3, device: str = "cpu") -> dict:
    """κ(1) = E|G(x)|²/d and κ'(1) ≈ E|G(x) − G(y)|²/(d|x − y|²) at |x − y| = h, over ``draws``
    independent MLPs of width m (explicit weights), with SEs."""
    dev = resolve_device(device)
    gen = make_generator(seed, dev)
    X = pair_start(draws, d, h, gen, torch.float64, dev)
    G = MLPNoise(activation, m, sigma, sigma, 1.0, mode="weights").increment(X, 1.0, gen)
    dist2 = ((X[:, 1] - X[:, 0]) ** 2).sum(-1)
    k, k_se = mean_and_se((G[:, 0] ** 2).sum(-1) / d)
    kp, kp_se = mean_and_se(((G[:, 1] - G[:, 0]) ** 2).sum(-1) / (d * dist2))
    return {"kappa": float(k), "kappa_se": float(k_se), "kappa_prime": float(kp), "kappa_prime_se": float(kp_se)}


def table_point(activation: str, d: int, sigma: float, sizes: dict, seed: int, device: str = "cpu") -> dict:
    """One row of the paper's table (a task): computed and measured κ, κ', λ₁, λ̄ (transformer)."""
    s = child_seeds(seed, 3)
    cfg = build_config({"N": 2, "d": d, "activation": activation, "sigma_U": sigma, "sigma_W": sigma, "attention": False,
                        "m": sizes["m"], "L": sizes["L"], "T": 1.0, "device": device})
    p = predicted_rates(cfg, with_bound=False)
    T = sizes["T_units"] / (d * p["kappa"])
    T_near = min(T, near_sync_horizon(p["kappa"], p["kappa_prime"]))
    row = {"activation": activation, "d": d, "sigma": sigma, "T": T, "T_near": T_near, "L": sizes["L"], "m": sizes["m"],
           "kappa_pred": p["kappa"], "kappa_prime_pred": p["kappa_prime"], "lambda_1_pred": p["lambda_1_noise"],
           "lambda_bar_pred": p["lambda_bar_noise"]}
    row.update(measured_kernel(activation, d, sigma, sizes["m"], sizes["draws"], s[0], device=device))
    lyap = measure_lyapunov(cfg.with_updates(T=T), sizes["pairs"], 1e-4, s[1])
    row.update(lambda_1=lyap["lambda_1"], lambda_1_se=lyap["lambda_1_se"])
    near = cfg.with_updates(T=T_near, batch=sizes["energy_pairs"], seed=s[2])
    paths = energy_paths(near, InitConfig(kind="cluster", spread=1e-3), s[2])
    rate, se = moment_rate(np.arange(near.L + 1) * near.dt, paths, seed=s[2])
    row.update(lambda_bar=rate, lambda_bar_se=se)
    return row


@dataclass
class TableResult:
    """Rows of the paper's table: for each quantity q, ``q_pred`` (computed), ``q`` and ``q_se`` (measured)."""

    size: str
    sizes: dict
    rows: list[dict] = field(default_factory=list)
    seed: int = 0
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return to_jsonable({"size": self.size, "sizes": self.sizes, "rows": self.rows})

    def save(self, folder: Path | str) -> None:
        folder = Path(folder)
        write_json(folder / "config.json", _record("paper-table", self.sizes, self.seed, self.elapsed_s))
        write_json(folder / "table.json", self.to_dict())

    def markdown(self) -> str:
        """The table in Markdown: computed | measured ± SE for every quantity."""
        head = "| φ | d | σ | κ(1) | measured | κ'(1) | measured | λ₁ | measured | λ̄ | measured |"
        lines = [head, "|" + "---|" * 11]
        for r in self.rows:
            cells = [r["activation"], str(r["d"]), f"{r['sigma']:g}"]
            for q in ("kappa", "kappa_prime", "lambda_1", "lambda_bar"):
                cells += [f"{r[q + '_pred']:.4g}", f"{r[q]:.4g} ± {r[q + '_se']:.2g}"]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def run_table(size: Size = "quick", seed: int = 0, progress: bool = False, store: Optional[Path | str] = None,
              scheduler: Optional[str] = None, device: str = "cpu", activations: tuple[str, ...] = TABLE_ACTIVATIONS,
              sizes: Optional[dict] = None) -> TableResult:
    """SPEC §6 item 3: the table for ReLU, sigmoid, tanh, SiLU at d ∈ {5, 64, 128}, σ ∈ {0, 0.1}.
    ``sizes`` overrides entries of ``TABLE_SIZES[size]``."""
    _check_size(size)
    start = time.perf_counter()
    sz = {**TABLE_SIZES[size], **(sizes or {})}
    grid = list(itertools.product(activations, sz["ds"], sz["sigmas"]))
    tasks = [Task(f"{a}/d{d}/sigma{s:g}", table_point, dict(activation=a, d=d, sigma=s, sizes=sz, seed=sd, device=device))
             for (a, d, s), sd in zip(grid, child_seeds(seed, len(grid)))]
    res = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="table")
    return TableResult(size, sz, [res[t.key] for t in tasks], seed, time.perf_counter() - start)
