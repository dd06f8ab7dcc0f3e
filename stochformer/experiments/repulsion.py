"""``repulsion``: Theorem 1.4 with attention (ε ≠ 0) from uniform tokens, over a grid of attention
strengths γ (V = γI, Qᵀ K = βI) and noise scales σ = σ_U = σ_W (SPEC §5, §6 item 6).

At every grid point ``batch`` runs start from i.i.d. uniform tokens and are stepped by
[`stochformer.solve`][stochformer.solve]; measured (mean ± SE over runs):

* the E_β rate over the run, log(E E_β(μ_T) / E E_β(μ_0))/T (delta-method SE), against Theorem 1.4's
  bound ε + λ̄' (``bound``), with the largest rate the observable can show, log(E_max/E E_β(μ_0))/T
  (``reach``, [`energy_max`][stochformer.experiments.sync.energy_max]), and Assumption 2's ε = max(0, −2γ)
  ([`epsilon`][stochformer.experiments.sync.epsilon]; the energy's β must be the attention's β, which
  the config enforces) (**derived**: the noiseless flow with V = γI is
  dissipative for γ ≥ 0, ε = 0; for V = −δI the largest rate of growth of E_β, sup dlog E_β/dt,
  is 2δ, reached as the tokens come together — two tokens at cosine u give
  2δ β e^{βu} w(u)(1 − u²)/(e^β − e^{βu}), w = e^{βu}/(e^β + e^{βu}), increasing to 2δ as u → 1);
* the final mean pairwise cosine (the observed outcome: synchronised, partly clustered or apart),
  beside the linearised criterion λ₁ − γ < 0 (the stability of full synchronisation);
* the initial rate of the mean cosine, d E⟨x_i, x_j⟩/dt at t = 0 (per-run least-squares slope over
  t ≤ ``slope_time``): with the noise alone it is E[b(u₀)] over the uniform law of u₀, b the pair
  drift of [`stochformer.model.two_point.two_point_coefficients`][stochformer.model.two_point.two_point_coefficients] (SPEC §3).

At the point ``probe`` (by default ReLU d = 64, σ = 0.1, γ = −1: λ₁ − γ > 0 yet partial clustering)
the pair exponent λ̂₁ ([`measure_lyapunov`][stochformer.experiments.sync.measure_lyapunov], Δt → 0) is measured
too, and the noiseless repulsive flow is run from a near-synchronised cluster to measure its largest
energy growth rate (ε).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import xarray as xr
from pydantic import Field, model_validator

from ..config.build import GivenModels, initial_tokens, make_kernel, make_model, setup, task_model
from ..config import ExperimentConfig, InitConfig, RunConfig, as_config, build_config, check_grid_size
from ..model.two_point import two_point_coefficients
from ..io.names import RATE_UNITS
from ..io.results import Result
from ..core.runtime import child_seeds
from ..integrate import ModelSource, SaveAt, solve
from ..measure.stats import mean_and_se
from ..tasks import Task, run_tasks
from ..core.validation import blamed_on, validated
from .sync import check_extrapolation, check_small_step, check_small_steps, energy_max, epsilon_of_gamma, measure_lyapunov, pair_config, predicted_rates
from .preflight import Estimate, simulate_estimate


class RepulsionConfig(ExperimentConfig):
    """``model``: the system (activation, d, N, L, T, dynamics; ``model.batch`` runs per grid point),
    whose γ and σ_U = σ_W = σ are set by the grid ``gammas`` × ``sigmas``; the probe and the outcome
    thresholds."""

    command: ClassVar[str] = "repulsion"
    model_defaults: ClassVar[dict] = {"d": 64, "N": 16, "L": 100, "T": 5.0, "batch": 32, "dynamics": "sde"}
    model_min: ClassVar[dict] = {"L": (4, "the probe's λ₁ is extrapolated to Δt → 0 from L, L/2 and L/4 steps"),
                                 "batch": (2, "runs from uniform tokens per grid point")}
    model_unused: ClassVar[dict] = {"gamma": "gammas", "sigma_U": "sigmas (σ_U = σ_W = σ)",
                                    "sigma_W": "sigmas (σ_U = σ_W = σ)", "attention": "on wherever γ ≠ 0"}

    gammas: list[float] = Field(default_factory=lambda: [-1.0, -0.5, 0.0, 0.5, 1.0], min_length=1,
                                description="attention strengths γ (V = γI)")
    sigmas: list[float] = Field(default_factory=lambda: [0.0, 0.1, 0.3, 0.5], min_length=1,
                                description="noise bias scales σ = σ_U = σ_W (>= 0)")
    probe: tuple[float, float] = Field((-1.0, 0.1), description="(γ, σ) where λ̂₁ and the noiseless flow are measured")
    pairs: int = Field(256, ge=2, description="pairs of the probe's λ̂₁ (>= 2)")
    slope_time: float = Field(0.1, gt=0.0, description="the initial cosine rate is fitted on t <= slope_time (> 0)")
    flow_spread: float = Field(1e-3, gt=0.0, le=0.1, description="spread of the noiseless flow's initial cluster")
    sync_cos: float = Field(0.9, gt=-1.0, le=1.0, description="outcome 'synchronised': final mean cosine >= sync_cos")
    apart_cos: float = Field(0.2, gt=-1.0, le=1.0, description="outcome 'apart': final mean cosine < apart_cos")
    clear: float = Field(2.5, ge=0.0, description="the criterion predicts clearly where |λ₁ − γ|·T >= clear")

    @model_validator(mode="after")
    def _grid(self) -> "RepulsionConfig":
        run = self.model
        check_grid_size(len(self.gammas) * len(self.sigmas), "gammas, sigmas")
        if any(s < 0 for s in self.sigmas):
            raise ValueError(f"sigmas: must be >= 0 (got {self.sigmas})")
        if self.probe[1] < 0:
            raise ValueError(f"probe: σ must be >= 0 (got {self.probe[1]})")
        if run.attention_kind != "softmax" or any(getattr(run, k) is not None for k in ("Q", "K", "V")):
            raise ValueError("model.attention_kind: repulsion needs softmax attention with Qᵀ K = βI, V = γI (no Q, K, V)")
        if self.slope_time >= run.T:
            raise ValueError(f"slope_time: must be < model.T = {run.T} (got {self.slope_time})")
        if not math.isclose(run.beta, run.energy_beta, rel_tol=1e-12, abs_tol=0.0):
            raise ValueError(f"model.energy_beta: must equal the attention's model.beta = {run.beta:g} (got "
                             f"{run.energy_beta:g}): Assumption 2's ε = max(0, −2γ) is derived for E_β with the "
                             "attention's own β, and is not valid for another β")
        if self.apart_cos >= self.sync_cos:
            raise ValueError(f"apart_cos: must be < sync_cos = {self.sync_cos} (got {self.apart_cos})")
        check_extrapolation(run.L, True)
        # the criterion λ₁ − γ and the probe's λ̂₁ are Δt → 0 laws: a small step at every point (unvalidated
        # copies: the grid's values are checked above, and validating 300 × 300 points took 36 s); the grid and
        # the probe set γ and σ_U = σ_W, so the messages name them
        check_small_steps(((f"at gamma = {g:g}, sigma = {s:g}, ", run.model_copy(update=self._updates(g, s)))
                           for g in self.gammas for s in self.sigmas), False,
                          rates="model.d, gammas, sigmas, model.noise_scale or model.gain")
        check_small_step(run.model_copy(update=self._updates(*self.probe)), True,
                         where=f"at the probe (gamma = {self.probe[0]:g}, sigma = {self.probe[1]:g}), ",
                         rates="model.d, probe, model.noise_scale or model.gain")
        return self

    @staticmethod
    def _updates(gamma: float, sigma: float) -> dict[str, Any]:
        return {"gamma": gamma, "sigma_U": sigma, "sigma_W": sigma, "attention": gamma != 0.0}

    def point(self, gamma: float, sigma: float, **updates: Any) -> RunConfig:
        """The [`RunConfig`][stochformer.config.RunConfig] at (γ, σ), with attention on (off for γ = 0) and ``updates``."""
        base = self.model.model_dump(mode="json")
        base.update({**self._updates(gamma, sigma), **updates})
        return build_config(base)

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): every (γ, σ)
        point's simulate estimate, and the probe's L, L/2, L/4 steps."""
        points = [simulate_estimate(self.point(g, s)) for g in self.gammas for s in self.sigmas]
        probe = simulate_estimate(self.point(*self.probe), batch=self.pairs, N=2)
        seconds = sum(e.seconds for e in points) + 1.75 * probe.seconds  # the probe's L, L/2, L/4 steps
        return Estimate(max(e.bytes for e in points + [probe]) * workers, seconds / max(1, workers),
                        "N, batch or pairs", "L, batch, pairs or the grid")


def epsilon(gamma: float) -> float:
    """Assumption 2's ε for V = γI, Qᵀ K = βI with β the energy's β (**derived**, module docstring):
    0 for γ ≥ 0, −2γ otherwise."""
    return epsilon_of_gamma(gamma)


def flow_step_bias(gamma: float, dt: float, dynamics: str, integrator: str = "heun") -> float:
    """The step bias of the noiseless flow's largest energy growth rate against ε = −2γ (V = γI,
    γ < 0), at leading order in the separation of a near-synchronised pair: on the transformer the
    separation is divided by 1 + γΔt at every step (LN(x + Δt·γ·x̄), x̄ ≈ x), so the measured rate is
    −2 log(1 + γΔt)/Δt (exactly, as the pair comes together); with the SDE's projected Euler step
    it is multiplied by 1 − γΔt, −2 log(1 − γΔt)/Δt. Returned: the difference from −2γ (O(Δt)); 0
    for γ ≥ 0 and for the projected Heun step (second order)."""
    if gamma >= 0:
        return 0.0
    if dynamics == "transformer":
        return -2.0 * math.log1p(gamma * dt) / dt + 2.0 * gamma
    if integrator == "euler":
        return -2.0 * math.log1p(-gamma * dt) / dt + 2.0 * gamma
    return 0.0


def uniform_drift(cfg: RunConfig, nodes: int = 64) -> float:
    """E[b(u)] for u = ⟨x, y⟩ of independent uniform x, y on S^{d−1} (density ∝ (1 − u²)^{(d−3)/2}),
    b the pair drift of the noise alone (``motions.two_point_coefficients``): Gauss–Jacobi quadrature."""
    from scipy.special import roots_jacobi

    a = (cfg.d - 3) / 2
    u, w = roots_jacobi(nodes, a, a)
    drift, _ = two_point_coefficients(make_kernel(cfg), u)
    return float((drift.numpy() * w).sum() / w.sum())


def _rate(values: np.ndarray, T: float) -> tuple[float, float]:
    """log(mean E_T / mean E_0)/T and its delta-method SE, from per-run E_β: (runs, times)."""
    (m0, mT), (s0, sT) = (np.asarray(x)[[0, -1]] for x in mean_and_se(values))
    return math.log(mT / m0) / T, math.hypot(sT / mT, s0 / m0) / T


def outcome_point(config: dict, seed: int, slope_time: float, model: Optional[ModelSource] = None) -> dict:
    """One grid point (a task: JSON in and out, but for ``model``: the model run, or a factory
    building it from ``config``): the runs from uniform tokens, their mean cosine and E_β curves
    (mean, SE per time), the E_β rate, the final mean cosine and the initial cosine rate (and
    ``model``, the record of a given model)."""
    cfg = RunConfig.model_validate(config)
    env = setup(cfg)
    device, dtype = env.device, env.dtype
    stepped, record = task_model(model, cfg, env)
    gen = env.generator(seed)
    X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, gen, dtype, device)
    save = SaveAt(stats=("mean_cosine", "energy"), final=False, energy_beta=cfg.energy_beta)
    with blamed_on(cfg):
        ds = solve(make_model(cfg, dtype, device) if stepped is None else stepped, X0, cfg.T, cfg.L, save, generator=gen)
    t, cos, energy = ds["time"].values, ds["mean_cosine"].values, ds["energy"].values
    early = t <= slope_time + 1e-12
    tt = t[early] - t[early].mean()
    slopes = (cos[:, early] - cos[:, early].mean(1, keepdims=True)) @ tt / (tt @ tt)
    rate, rate_se = _rate(energy, cfg.T)
    cos_m, cos_s = mean_and_se(cos)
    e_m, e_s = mean_and_se(energy)
    init_rate, init_rate_se = mean_and_se(slopes)
    return {"final_cosine": float(cos_m[-1]), "final_cosine_se": float(cos_s[-1]), "energy_rate": rate,
            "energy_rate_se": rate_se, "initial_rate": float(init_rate), "initial_rate_se": float(init_rate_se),
            "cosine_mean": cos_m.tolist(), "cosine_se": cos_s.tolist(), "energy_mean": e_m.tolist(),
            "energy_se": e_s.tolist(), **record}


def flow_growth(config: dict, seed: int, spread: float, model: Optional[ModelSource] = None) -> dict:
    """The noiseless attention flow (``config`` without MLP) from a cluster of ``spread``: the largest
    step rate Δlog E E_β/Δt over the run (the measured ε), the times and log E E_β per time (a task;
    ``model`` as for [`outcome_point`][stochformer.experiments.repulsion.outcome_point])."""
    cfg = RunConfig.model_validate(config)
    env = setup(cfg)
    device, dtype = env.device, env.dtype
    stepped, record = task_model(model, cfg, env)
    gen = env.generator(seed)
    X0 = initial_tokens(InitConfig(kind="cluster", spread=spread), cfg.batch, cfg.N, cfg.d, gen, dtype, device)
    with blamed_on(cfg):
        ds = solve(make_model(cfg, dtype, device) if stepped is None else stepped, X0, cfg.T, cfg.L,
                   SaveAt(stats=("energy",), final=False, energy_beta=cfg.energy_beta), generator=gen)
    log_e = np.log(ds["energy"].values.mean(0))
    return {"max_rate": float(np.max(np.diff(log_e)) / cfg.dt), "times": ds["time"].values.tolist(),
            "log_energy": log_e.tolist(), **record}


@dataclass(repr=False)
class RepulsionResult(Result):
    """``points[(γ, σ) key]``: the measurements of `outcome_point` with the predictions
    (λ₁ − γ, λ̄ − 2γ, λ̄', ε, the noise's uniform drift); ``probe``: λ̂₁ and the noiseless flow at
    the probe point; ``times``: the time grid of the curves; ``boundary``: the criterion's boundary
    γ = λ₁(σ) on a fine grid of σ (``sigma``, ``gamma`` lists); ``meta``: further record entries
    (``model``: a model given by hand)."""

    command: ClassVar[str] = "repulsion"
    summary_name: ClassVar[str] = "repulsion.json"
    config: RepulsionConfig
    points: dict
    probe: dict
    times: np.ndarray
    provenance: dict
    elapsed_s: float
    boundary: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def grid(self, name: str) -> np.ndarray:
        """A measured or predicted quantity over the grid: (len(sigmas), len(gammas))."""
        c = self.config
        return np.asarray([[self.points[key(g, s)][name] for g in c.gammas] for s in c.sigmas], float)

    def outcomes(self) -> np.ndarray:
        """The observed outcome per grid point, (len(sigmas), len(gammas)): ``synchronised`` (final mean
        cosine ≥ sync_cos), ``apart`` (< apart_cos) or ``partial``."""
        c, cos = self.config, self.grid("final_cosine")
        return np.where(cos >= c.sync_cos, "synchronised", np.where(cos < c.apart_cos, "apart", "partial"))

    def agreement(self) -> np.ndarray:
        """Per grid point: 1 where the linearised criterion agrees with the outcome (λ₁ − γ < 0 and
        synchronised, or λ₁ − γ > 0 and apart), 0 where it does not, −1 where |λ₁ − γ|·T < ``clear``
        (no clear prediction at this horizon)."""
        pred, out = self.grid("lambda_1_pred"), self.outcomes()
        agree = np.where(pred < 0, out == "synchronised", out == "apart").astype(int)
        return np.where(np.abs(pred) * self.config.model.T < self.config.clear, -1, agree)

    def to_dict(self) -> dict:
        c = self.config
        return {"gammas": c.gammas, "sigmas": c.sigmas, "times": self.times, "points": self.points,
                "probe": self.probe, "boundary": self.boundary, "outcomes": self.outcomes().tolist(),
                "agreement": self.agreement(), "elapsed_s": self.elapsed_s}

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "final_cosine": {"long_name": "mean pairwise cosine at T", "units": "1"},
            "energy_rate": {"long_name": "E_β rate log(E E_β(μ_T) / E E_β(μ_0))/T", "units": RATE_UNITS},
            "bound": {"long_name": "Theorem 1.4's bound ε + λ̄' on the E_β rate", "units": RATE_UNITS},
        }

    def _dataset(self) -> xr.Dataset:
        c = self.config
        names = ("final_cosine", "final_cosine_se", "energy_rate", "energy_rate_se", "lambda_1_pred", "bound")
        return xr.Dataset({n: (("sigma", "gamma"), self.grid(n)) for n in names},
                          coords={"sigma": c.sigmas, "gamma": c.gammas})


def key(gamma: float, sigma: float) -> str:
    return f"gamma{gamma:g}/sigma{sigma:g}"


@validated
def run_repulsion(cfg: RepulsionConfig, progress: bool = False, store: Optional[Path | str] = None,
                  scheduler: Optional[str] = None, model: Optional[ModelSource] = None) -> RepulsionResult:
    """Every grid point as a task (``store`` makes it resumable), then the probe's λ̂₁ and the
    noiseless flow. All configs are validated before any work.

    Parameters
    ----------
    cfg : RepulsionConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).
    store : str or pathlib.Path, optional
        A folder of finished tasks, so a killed run resumes.
    scheduler : str, optional
        Where the tasks run (as for ``run_tasks``).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with each run's config (every grid point's, the
        noiseless flow's, the probe's pairs'), whose model runs instead of the config's (the
        predictions still come from the configs); checked before any work, recorded in
        ``result.meta["model"]`` ([`GivenModels`][stochformer.config.build.GivenModels]); not with
        ``store``; with a process or Dask ``scheduler`` it must pickle. (One model object is refused:
        the runs differ in γ, σ and the MLP.)

    Returns
    -------
    RepulsionResult
        The grid's outcomes beside the predictions, the probe and the boundary.
    """
    cfg = as_config(cfg, RepulsionConfig)
    run = cfg.model
    start = time.perf_counter()
    grid = {key(g, s): (g, s, cfg.point(g, s)) for s in cfg.sigmas for g in cfg.gammas}
    g_probe, s_probe = cfg.probe
    probe_cfg = cfg.point(g_probe, s_probe)
    flow_cfg = cfg.point(g_probe, 0.0, mlp=False)
    given = GivenModels.check(model, [p for _, _, p in grid.values()] + [flow_cfg, pair_config(probe_cfg)], "repulsion",
                              scheduler, store, prefix="model.")
    seeds = child_seeds(run.seed, len(grid) + 2)
    tasks = [Task(k, outcome_point, dict(config=p.model_dump(mode="json"), seed=sd, slope_time=cfg.slope_time,
                                         **given.task_kwargs()))
             for (k, (_, _, p)), sd in zip(grid.items(), seeds)]
    tasks.append(Task("probe-flow", flow_growth, dict(config=flow_cfg.model_dump(mode="json"), seed=seeds[-1],
                                                      spread=cfg.flow_spread, **given.task_kwargs())))
    results = run_tasks(tasks, store=store, scheduler=scheduler, progress=progress, desc="repulsion")
    for t in tasks:
        given.add(t.key, results[t.key].pop("model", None))
    points = {}
    for k, (g, s, p) in grid.items():
        pred = predicted_rates(p)
        eps = epsilon(g)
        points[k] = {**results[k], "gamma": g, "sigma": s,
                     "lambda_1_pred": pred["lambda_1_pred"], "lambda_bar_pred": pred["lambda_bar_pred"],
                     "lambda_bar_noise": pred["lambda_bar_noise"], "lambda_bar_prime": pred["lambda_bar_prime_pred"],
                     "epsilon": eps, "bound": eps + pred["lambda_bar_prime_pred"],
                     "reach": math.log(energy_max(run.N, run.energy_beta) / results[k]["energy_mean"][0]) / run.T,
                     "uniform_drift": uniform_drift(p) if p.mlp else 0.0}
    lyap = measure_lyapunov(probe_cfg, cfg.pairs, 1e-4, seeds[-2], progress, extrapolate=True,
                            model=given.get(pair_config(probe_cfg), "probe-lyapunov"))
    probe = {"gamma": g_probe, "sigma": s_probe, "lambda_1_pred": predicted_rates(probe_cfg)["lambda_1_pred"],
             "lambda_1": lyap["lambda_1"], "lambda_1_se": lyap["lambda_1_se"],
             "lambda_1_extrap_err": lyap["lambda_1_extrap_err"], "epsilon": epsilon(g_probe),
             "flow": results["probe-flow"], "flow_bias": flow_step_bias(g_probe, flow_cfg.dt, flow_cfg.dynamics, flow_cfg.integrator),
             "flow_dt": flow_cfg.dt, "dynamics": flow_cfg.dynamics}
    if key(g_probe, s_probe) in points:
        probe["final_cosine"] = points[key(g_probe, s_probe)]["final_cosine"]
    times = np.arange(run.L + 1) * run.dt
    fine = np.linspace(min(cfg.sigmas), max(cfg.sigmas), 61)
    boundary = {"sigma": fine.tolist(),
                "gamma": [predicted_rates(cfg.point(0.0, float(s)), with_bound=False)["lambda_1_noise"] for s in fine]}
    return RepulsionResult(cfg, points, probe, times, setup(cfg).provenance(),
                           time.perf_counter() - start, boundary, given.meta())
