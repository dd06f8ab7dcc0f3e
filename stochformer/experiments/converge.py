"""``converge``: the pathwise error of Theorem 1.1 between the deep transformer and the limit SDE,
over a grid of depths L and widths m (SPEC §3, §6 item 4).

The coupling (SPEC §3, "Measuring it"). For one sample, one Brownian path is given by i.i.d.
normals Ξ_s ∈ R^{N×d} on the finest grid of ``refine · max(depths)`` steps of [0, T]. For a depth L:

- the SDE runs ``refine · L`` steps; each step is driven by the normalised sum q^{−1/2} Σ Ξ_s of
  its q = max(depths)/L finest normals (the same path, coarser);
- layer ℓ of the transformer is driven by r^{−1/2} Σ of the normals of its r = ``refine`` SDE
  steps, through √Δt s K_m(Y)^{1/2} Ξ with K_m = ΦΦᵀ/m + σ_W² the empirical kernel of that
  layer's fresh inner weights (symmetric root); width m = ∞ uses the exact K(Y)^{1/2}.

Errors, per sample, with X_ℓ the transformer and X̄ the SDE on its fine grid t_s = s·T/(rL):

- ``layer``: sup over layer times ℓ = 0..L of (1/N) Σ_i |X^i_ℓ − X̄^i_{t_ℓ}|²  (Theorem 1.1: ≲ 1/L + 1/m);
- ``continuous``: sup over the fine grid of (1/N) Σ_i |X^i_{⌊Lt/T⌋} − X̄^i_t|²  (≲ log L/L + 1/m).

The samples are split into parts of ``samples_per_task``; each (depth, part) is one task of [`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks]
(all widths share the SDE solve of that depth), stored as it finishes so a killed run resumes.
Means over samples carry standard errors; fitted exponents carry bootstrap intervals over samples
(resampled jointly across the grid, since every grid point sees the same samples and paths).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..core.brownian import BrownianPath, Draws
from ..config.build import initial_tokens, make_attention, make_kernel, make_noise, setup
from ..config import ExperimentConfig, MEASURED_HORIZON, RunConfig, as_config
from ..model.noise import ExactField
from ..model.sde import INTEGRATORS, LimitSDE
from ..model.transformer import Transformer
from ..io.results import Result
from ..core.runtime import child_seeds
from ..integrate import SaveAt, solve
from ..measure.stats import bootstrap, fit_power_law, mean_and_se, resampled_se, t_interval
from ..tasks import Task, run_tasks
from ..core.validation import blamed_on, validated
from .preflight import BOOTSTRAP_S, Estimate, attention_matrices, coupling_cost

#: the two sups of the error
KINDS = ("layer", "continuous")


class ConvergeConfig(ExperimentConfig):
    """``model``: the system (T, N, d, activation, attention, ``batch`` = number of samples, the
    SDE's ``integrator``); the grid is ``depths`` × (``widths`` and m = ∞), so model.L, model.m,
    model.dynamics and model.noise are not read (setting them is an error)."""

    command: ClassVar[str] = "converge"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"N": 8, "T": 1.0, "batch": 512}
    model_min: ClassVar[dict] = {"batch": (4, "samples (independent weights and noise paths)"), "T": MEASURED_HORIZON}
    model_unused: ClassVar[dict] = {"L": "the depths are `depths`", "m": "the widths are `widths` and m = ∞",
                                    "dynamics": "both the transformer and the SDE run", "noise": "the MLP is coupled "
                                    "to the SDE through its exact conditional Gaussian law"}

    depths: list[int] = Field(default_factory=lambda: [8, 16, 32, 64, 128, 256, 512],
                              description="depths L; each must divide the largest")
    widths: list[int] = Field(default_factory=lambda: [16, 32, 64, 128, 256],
                              description="finite MLP widths m (m = ∞ is always included)")
    refine: int = Field(8, ge=1, le=256, description="SDE steps per layer r, in [1, 256]")
    samples_per_task: int = Field(128, ge=1, description="samples per task (>= 1)")
    bootstrap: int = Field(1000, ge=100, le=100000, description="bootstrap resamples for the intervals, in [100, 100000]")

    @model_validator(mode="after")
    def _grid(self) -> "ConvergeConfig":
        for name in ("depths", "widths"):
            values = getattr(self, name)
            if len(values) < 2 or len(set(values)) != len(values) or any(v < 1 for v in values):
                raise ValueError(f"{name}: need at least 2 distinct integers >= 1 (got {values})")
        top = max(self.depths)
        if any(top % L for L in self.depths):
            raise ValueError(f"depths: each depth must divide the largest, {top} (got {self.depths}), so that one "
                             "Brownian path serves every depth")
        return self

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the
        transformer–SDE coupling of every width and depth (`coupling_cost`) and the attention's
        matrices.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        run = self.model
        mem, seconds = coupling_cost(run.N, run.d, run.batch, self.samples_per_task, self.widths, self.depths, self.refine)
        mem += 8.0 * attention_matrices(run, min(self.samples_per_task, run.batch), run.N)[0]
        return Estimate(mem * workers, seconds / max(1, workers) + 3 * BOOTSTRAP_S * self.bootstrap,
                        "model.N, model.d, samples_per_task or widths", "depths, refine, model.batch or bootstrap")


@dataclass
class _Lockstep:
    """Several models of one sample batch stepped together: the state is their states stacked
    along the batch (model-major); each model gets the same step randomness in turn, so the
    weights of layer ℓ are drawn for every width before layer ℓ + 1, and every model reads the
    same Brownian normals."""

    models: list

    def reset(self, batch, d, generator, dtype, device) -> None:
        for model in self.models:
            model.reset(batch // len(self.models), d, generator, dtype, device)

    def step(self, X: torch.Tensor, dt: float, draws: Draws) -> torch.Tensor:
        parts = X.chunk(len(self.models))
        return torch.cat([m.step(x, dt, Draws(draws.generator, draws.path, draws.k, draws.n)) for m, x in zip(self.models, parts)])


def _coupled_errors(cfg: RunConfig, depths: list[int], widths: list[int], refine: int, depth: int,
                    seed: int, n: int) -> dict[str, list]:
    """Per-sample sup errors at one depth for ``n`` samples: {kind: [[per sample] per width]},
    widths in order and m = ∞ last. ``seed`` fixes X₀, the Brownian path and the weights."""
    env = setup(cfg)
    device, dtype = env.device, env.dtype
    s_init, s_noise, s_weights = env.seeds(3, seed)
    g_init, g_noise, g_w = (env.generator(s) for s in (s_init, s_noise, s_weights))
    X0 = initial_tokens(cfg.init, n, cfg.N, cfg.d, g_init, dtype, device)
    kernel, attention = make_kernel(cfg), make_attention(cfg, dtype, device)
    r = refine
    # one Brownian path on the finest grid of every depth: the transformer reads it per layer, the SDE per step
    path = BrownianPath(tuple(X0.shape), refine * max(depths), generator=g_noise, dtype=dtype, device=device)
    # the config's MLP at each width (non-Gaussian weights, SPEC §7: inner weights U from the law; the
    # output is coupled through K_m^{1/2}Ξ whatever the law)
    mlps = [make_noise(cfg.model_copy(update={"m": m, "dynamics": "transformer", "noise": "auto"})) for m in widths]
    mlps.append(ExactField(kernel))
    layers = _Lockstep([Transformer(attention, mlp, cfg.order) for mlp in mlps])
    keep = SaveAt(stats=(), tokens_every=1, final=False)
    with blamed_on(cfg):
        ds = solve(layers, X0.repeat(len(mlps), 1, 1), cfg.T, depth, keep, generator=g_w, path=path)
    Xs = torch.from_numpy(ds["X"].values).to(device, dtype).view(len(mlps), n, depth + 1, cfg.N, cfg.d)

    sup = {k: torch.zeros(len(mlps), n, dtype=torch.float64) for k in KINDS}

    def measure(s: int, X_bar: torch.Tensor) -> None:
        """The errors at fine time s: the transformer at layer ⌊s/r⌋ against the SDE."""
        e = ((Xs[:, :, s // r] - X_bar) ** 2).sum(-1).mean(-1).double().cpu()
        sup["continuous"] = torch.maximum(sup["continuous"], e)
        if s % r == 0:
            sup["layer"] = torch.maximum(sup["layer"], e)

    sde = LimitSDE(attention, ExactField(kernel), INTEGRATORS[cfg.integrator], kernel.kappa1)
    measure(0, X0)
    with blamed_on(cfg):
        solve(sde, X0, cfg.T, r * depth, SaveAt(stats=(), final=False), generator=g_noise, path=path, hook=measure)
    return {k: v.tolist() for k, v in sup.items()}


def _fit_additive(L: np.ndarray, m: np.ndarray, y: np.ndarray, log_L: bool) -> np.ndarray:
    """(a, b) of err ≈ a·g(L) + b/m with g = log L/L or 1/L (1/m = 0 for m = ∞), least squares in
    relative error (weights 1/y: each point's relative residual counts equally): L, m, y (n,) → (2,)."""
    gL = (np.log(L) if log_L else 1.0) / L
    A = np.stack([gL, np.where(np.isinf(m), 0.0, 1.0 / m)], axis=1)  # (n, 2)
    return np.linalg.lstsq(A * (1.0 / y)[:, None], np.ones(len(L)), rcond=None)[0]


def _interval(point: float, boots: list, samples: int) -> dict:
    """``point`` ± Student's t (``samples`` − 1 degrees of freedom) times the SE from the bootstrap
    values ``boots`` ([`stochformer.measure.stats.resampled_se`][stochformer.measure.stats.resampled_se])."""
    se = resampled_se(boots, samples)
    return {"value": float(point), "se": se, "ci": list(t_interval(float(point), se, samples)), "n": samples}


@dataclass(repr=False)
class ConvergeResult(Result):
    """Per-sample errors ``errors[kind]``: (n_depths, n_widths + 1, samples), widths in the order of
    ``widths`` and m = ∞ last; the fits with their intervals in ``fits``.

    Attributes
    ----------
    config : ConvergeConfig
        The configuration run.
    depths : list of int
        The depths L.
    widths : list of float
        The widths m (m = ∞ last in ``errors``).
    errors : dict
        Kind → per-sample errors (n_depths, n_widths + 1, samples).
    fits : dict
        The fits with their intervals.
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    meta : dict
        Further record entries.
    """

    command: ClassVar[str] = "converge"
    summary_name: ClassVar[str] = "convergence.json"
    config: ConvergeConfig
    depths: list[int]
    widths: list[float]  # finite widths, then math.inf
    errors: dict[str, np.ndarray]
    fits: dict[str, Any]
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def mean_se(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Sample mean and its SE over samples: (n_depths, n_widths + 1) each.

        Parameters
        ----------
        kind : str
            The error's kind (a key of ``errors``).

        Returns
        -------
        tuple of numpy.ndarray
            (mean, SE), each (n_depths, n_widths + 1).
        """
        return mean_and_se(self.errors[kind], axis=-1)

    def table(self) -> list[dict]:
        """One row per (L, m): mean error and SE for both sups (m = None for ∞).

        Returns
        -------
        list of dict
            One row per quantity.
        """
        rows = []
        stats = {k: self.mean_se(k) for k in KINDS}
        for i, L in enumerate(self.depths):
            for j, m in enumerate(self.widths):
                row: dict[str, Any] = {"L": L, "m": None if math.isinf(m) else int(m)}
                for k in KINDS:
                    row[f"err_{k}"], row[f"err_{k}_se"] = float(stats[k][0][i, j]), float(stats[k][1][i, j])
                rows.append(row)
        return rows

    def to_dict(self) -> dict:
        f = self.fits
        return {
            "table": self.table(),
            "depths": self.depths,
            "widths": [None if math.isinf(m) else int(m) for m in self.widths],
            "samples": int(self.errors["layer"].shape[-1]),
            "exponent_L": f["exponent_L"]["value"],
            "exponent_L_ci": f["exponent_L"]["ci"],
            "exponent_m": f["exponent_m"]["value"],
            "exponent_m_ci": f["exponent_m"]["ci"],
            "fits": f,
            "elapsed_s": self.elapsed_s,
            **self.meta,
        }

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "error_layer": {"long_name": "sup over layers ℓ of the mean squared distance of the transformer's "
                            "tokens to the limit SDE's at t = ℓ T/L", "units": "1"},
            "error_continuous": {"long_name": "sup over the SDE's fine times t of the mean squared distance of the "
                                 "transformer's tokens (layer ⌊t L/T⌋) to the limit SDE's", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        """Per-sample errors ``error_<kind>`` (depth, width, sample), width = inf for m = ∞."""
        dims = ("depth", "width", "sample")
        return xr.Dataset({f"error_{k}": (dims, v) for k, v in self.errors.items()},
                          coords={"depth": self.depths, "width": self.widths})


def fit_convergence(depths: list[int], widths: list[float], errors: dict[str, np.ndarray], n_boot: int, seed: int) -> dict:
    """Exponents ([`stochformer.measure.stats.fit_power_law`][stochformer.measure.stats.fit_power_law]) and additive fits with bootstrap
    intervals ([`stochformer.measure.stats.bootstrap`][stochformer.measure.stats.bootstrap]; samples resampled jointly: every fit draws the
    same samples from ``seed``).

    - ``exponent_L``: layer-time error against L at m = ∞; ``exponent_L_large_m``: at the largest
      finite m; ``exponent_L_continuous``: continuous-time error at m = ∞;
    - ``exponent_m``: layer-time error against the finite m at the largest L;
    - ``additive_layer``: err ≈ a/L + b/m; ``additive_continuous``: err ≈ a·log L/L + b/m, both
      over the whole grid (m = ∞ included), with the largest relative residual.

    Parameters
    ----------
    depths : list of int
        The depths L.
    widths : list of float
        The widths m.
    errors : dict
        Kind → per-sample errors (n_depths, n_widths + 1, samples).
    n_boot : int
        Bootstrap resamples.
    seed : int
        Seed of the resampling.

    Returns
    -------
    dict
        The fits by name, each with its interval.
    """
    L = np.asarray(depths, dtype=float)
    finite = [j for j, m in enumerate(widths) if math.isfinite(m)]
    m_fin = np.asarray([widths[j] for j in finite])
    S = errors["layer"].shape[-1]

    def power(x: np.ndarray, samples: np.ndarray) -> dict:
        """stats.fit_power_law over the samples (S, n), resampled with the same rows as every fit."""
        fit = fit_power_law(x, samples, n_boot, seed)
        return {"value": fit.exponent, "se": fit.se, "ci": list(fit.ci), "n": fit.n}

    out: dict[str, Any] = {}
    out["exponent_L"] = power(L, errors["layer"][:, -1].T)
    out["exponent_L_continuous"] = power(L, errors["continuous"][:, -1].T)
    big = finite[int(np.argmax(m_fin))]
    out["exponent_L_large_m"] = {"m": int(widths[big]), **power(L, errors["layer"][:, big].T)}
    top = int(np.argmax(L))
    out["exponent_m"] = {"L": int(L[top]), **power(m_fin, errors["layer"][top, finite].T)}
    out["exponent_m_continuous"] = {"L": int(L[top]), **power(m_fin, errors["continuous"][top, finite].T)}
    Lg, Mg = np.meshgrid(L, np.asarray(widths, dtype=float), indexing="ij")
    Lf, Mf = Lg.reshape(-1), Mg.reshape(-1)
    for kind, log_L in (("layer", False), ("continuous", True)):
        gL = (np.log(Lf) if log_L else 1.0) / Lf

        def additive(e: np.ndarray, log_L: bool = log_L, gL: np.ndarray = gL) -> np.ndarray:
            """(a, b, largest relative residual) of the fit to the sample means of per-sample errors e: (nL·nM, S)."""
            y = e.mean(-1)
            a, b = _fit_additive(Lf, Mf, y, log_L)
            model = a * gL + b * np.where(np.isinf(Mf), 0.0, 1.0 / Mf)
            return np.array([a, b, np.max(np.abs(model / y - 1.0))])

        per_sample = errors[kind].reshape(-1, S)
        est, boots = additive(per_sample), np.array(bootstrap(additive, per_sample, n_boot, seed, axis=-1)).T
        out[f"additive_{kind}"] = {
            "form": "a*log(L)/L + b/m" if log_L else "a/L + b/m",
            "a": _interval(est[0], boots[0], S), "b": _interval(est[1], boots[1], S),
            "max_rel_residual": float(est[2]), "residual": _interval(est[2], boots[2], S),
        }
    return out


@validated
def run_converge(cfg: ConvergeConfig, progress: bool = False, store: Optional[Path | str] = None,
                 scheduler: Optional[str] = None) -> ConvergeResult:
    r"""Theorem 1.1's pathwise error: the transformer at every depth and width against the limit SDE.

    Each sample couples the transformer (depths × widths, and m = ∞) and the SDE on one Brownian
    path; the errors $\sup_\ell \frac1N \sum_i |X^i_\ell - \bar X^i_{t_\ell}|^2$ are fitted to
    $c\,(\log L/L + 1/m)$ (docs/convergence.md).

    Parameters
    ----------
    cfg : ConvergeConfig or dict
        The system and the grid ([`ConvergeConfig`][stochformer.experiments.converge.ConvergeConfig]).
    progress : bool, optional
        Show a progress bar.
    store : str or pathlib.Path, optional
        A folder keeping each finished (depth, part of the samples) task: a rerun resumes from it.
    scheduler : str, optional
        Where the tasks run (``run_tasks``: serial, processes, Dask).

    Returns
    -------
    ConvergeResult
        The errors per sample and the fitted rates
        ([`ConvergeResult`][stochformer.experiments.converge.ConvergeResult]).

    Raises
    ------
    ConfigError
        A field out of range, or a model field the experiment does not read, naming it.
    """
    cfg = as_config(cfg, ConvergeConfig)
    start = time.perf_counter()
    env = setup(cfg)
    per = cfg.samples_per_task
    n_parts = -(-cfg.model.batch // per)
    sizes = [min(per, cfg.model.batch - c * per) for c in range(n_parts)]
    seeds = child_seeds(cfg.model.seed, n_parts)
    base = cfg.model.model_dump(mode="json")
    widths = sorted(cfg.widths)
    depths = sorted(cfg.depths)
    tasks = [
        Task(f"L{L}-part{c}", _grid_task,
             dict(config=base, depths=depths, widths=widths, refine=cfg.refine, depth=L, seed=seeds[c], n=sizes[c]))
        for L in depths for c in range(n_parts)
    ]
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="converge")
    errors = {
        k: np.stack([np.concatenate([np.asarray(results[f"L{L}-part{c}"][k]) for c in range(n_parts)], axis=-1)
                     for L in depths])
        for k in KINDS
    }
    all_widths = [float(m) for m in widths] + [math.inf]
    fits = fit_convergence(depths, all_widths, errors, cfg.bootstrap, cfg.model.seed)
    return ConvergeResult(cfg, depths, all_widths, errors, fits, env.provenance(), time.perf_counter() - start)


def _grid_task(config: dict, depths: list[int], widths: list[int], refine: int, depth: int, seed: int, n: int) -> dict:
    """One task: all widths at one depth for one part of the samples (module level, JSON-able)."""
    cfg = RunConfig.model_validate(config)
    # the tensors are small (samples_per_task × N × N): one thread is faster than two, and processes
    # (scheduler="processes:2") use the cores without oversubscribing them
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return _coupled_errors(cfg, depths, widths, refine, depth, seed, n)
    finally:
        torch.set_num_threads(threads)
