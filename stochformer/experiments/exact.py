"""``exact``: the exact results of SPEC §8 beside simulations of the same system, for the report's
"exact theory" section.

Four parts, each an exact prediction and a measurement that can disagree with it:

* **Two tokens across β*** (SPEC §8, the pair diffusion; docs/theory.md): for every attention β of
  ``betas`` (Qᵀ K = βI, V = γI, softmax over the pair), ``model.batch`` independent pairs start at
  cosine ``z0`` and run ``model.L`` steps to ``model.T`` (``model.dynamics``: the limit SDE or the
  transformer); measured: the fraction with z_T < 0, with its Clopper–Pearson interval; predicted:
  P(Z_T < 0) of the exact law at T ([`law`][stochformer.theory.law], the forward equation), beside
  the probability of ending antipodal ([`PairDiffusion.p_antipodal`][stochformer.theory.pair.PairDiffusion.p_antipodal],
  the scale function: the T → ∞ limit of that law's mass below 0) and the threshold β*.
* **The Lyapunov spectrum** of one token ([`run_spectrum`][stochformer.experiments.spectrum.run_spectrum]
  on the limit SDE): λ̂_i against λ_i = ((d − 1 − 2i)/2) κ' − ((d − 1)/2) κ.
* **The energy decay** without attention: the exact E[E_β(μ^N_t)] from uniform tokens
  ([`expected_energy`][stochformer.theory.expected_energy]), its long-time rate
  ([`energy_decay_rate`][stochformer.theory.energy_decay_rate]) and Theorem 1.4's bound
  E_β(μ_0)·e^{λ̄' t}, beside the limit SDE's ``energy_batch`` runs of ``energy_N`` tokens.
* **Clusters under repulsive attention** (``cluster_settings``, none by default): N = 4 tokens near
  consensus with V = −δI in the limit SDE, the relative modes' top exponent against the criterion
  λ₁ < −δ ([`cluster_stability`][stochformer.experiments.cluster_spectrum.cluster_stability]).
* **The order-to-chaos phase diagram** over the gain g and σ_U from the formula
  ([`gain_phase`][stochformer.model.kernel.gain_phase]), with λ̂₁ measured by Benettin's method at
  the points ``phase_points``.

Every rate is per unit time t = layer · T/L.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..config import ExperimentConfig, InitConfig, RunConfig, as_config
from ..config.build import GivenModels, initial_tokens, make_kernel, make_model, setup
from ..core.runtime import child_seeds
from ..core.validation import validated
from ..integrate import Model, ModelSource, SaveAt, solve
from ..io.names import RATE_UNITS
from ..io.results import Result
from ..io.store import to_jsonable
from ..measure.stats import RICHARDSON_WEIGHTS, clopper_pearson_interval, mean_and_se, richardson_steps
from ..model.kernel import GainPhase, NoiseKernel, gain_phase
from ..model.two_point import two_point_coefficients
from ..theory import PairDiffusion, energy_decay_rate, expected_energy, law
from .preflight import FLOPS, STEP_OVERHEAD_S, Estimate
from .cluster_spectrum import cluster_stability
from .spectrum import SpectrumConfig, SpectrumResult, run_spectrum
from .sync import check_small_step, small_step_depth


#: the least steps of a spectrum run's finest level when ``spectrum_L`` is not given
SPECTRUM_L = 64


class ExactConfig(ExperimentConfig):
    """``model``: the two-token runs (N = 2 with softmax attention; ``model.beta`` is replaced by each
    of ``betas``), by default erf at d = 4 without biases (an odd κ: the antipode has a threshold
    β*), γ = 1, the limit SDE, T = 10 on L = 200 steps, 400 pairs. The spectrum, the energy and the
    phase diagram use the same activation, d, σ_U, σ_W, noise scale and gain."""

    command: ClassVar[str] = "exact"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"activation": "erf", "d": 4, "dynamics": "sde", "T": 10.0, "L": 200, "batch": 400,
                                      "gamma": 1.0}
    model_fixed: ClassVar[dict] = {"N": (2, "the pair diffusion is that of two tokens"),
                                   "attention": (True, "the threshold β* is that of the attention")}
    model_min: ClassVar[dict] = {"d": (3, "the pair diffusion of SPEC §8 needs d >= 3")}
    model_unused: ClassVar[dict] = {
        "init": "a pair of tokens at cosine z0, randomly rotated",
        "beta": "the attention's β runs over betas",
        "record_every": "only the final overlap is kept",
        "path_stride": "no token paths are kept",
    }

    betas: list[float] = Field([0.5, 1.0, 2.0, 4.0], min_length=1,
                               description="the attention β of the pair runs (each > 0), across β*")
    z0: float = Field(0.0, gt=-1.0, lt=1.0, description="initial cosine of the pair, in (-1, 1)")
    beta_grid: int = Field(41, ge=2, le=10000, description="points of the theory line over β, in [2, 10^4]")
    spectrum_batch: int = Field(400, ge=2, description="samples of the spectrum (>= 2)")
    spectrum_L: Optional[int] = Field(
        None, ge=4, description="steps of the spectrum's finest level (a multiple of 4); default: for each spectrum run "
        "(the model's noise, each phase point) the least multiple of 4 that is at least 64 and a small step there")
    spectrum_T: float = Field(2.0, gt=0.0, description="horizon of the spectrum (> 0)")
    energy_N: int = Field(8, ge=2, description="tokens of the energy runs (>= 2)")
    energy_batch: int = Field(100, ge=2, description="independent energy runs (>= 2)")
    energy_T: float = Field(2.0, gt=0.0, description="horizon of the energy runs (> 0)")
    energy_L: int = Field(200, ge=1, description="steps of the energy runs (>= 1)")
    energy_every: int = Field(50, ge=1, description="the energy is kept every energy_every steps (>= 1)")
    energy_levels: int = Field(2, ge=1, le=2, description="1: the energy runs on energy_L steps; 2: also on energy_L/2 "
                               "(independent runs) and the mean extrapolated to Δt → 0 (energy_L, energy_every even)")
    energy_sigma: Optional[float] = Field(
        1.0, ge=0.0, description="σ_U = σ_W of the energy runs (>= 0; None: the model's own): biases make the noise "
        "coercive (λ̄' < 0), where Theorem 1.4's bound is a decay")
    gains: list[float] = Field([0.25, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0], min_length=2,
                               description="gains g of the phase diagram (each >= 0)")
    sigmas: list[float] = Field([0.0, 0.25, 0.5], min_length=2, description="σ_U of the phase diagram (each >= 0)")
    phase_points: list[list[float]] = Field([[2.0, 0.0], [10.0, 0.0]],
                                            description="(g, σ_U) where λ₁ is measured on the phase diagram")
    cluster_settings: list[list[Any]] = Field(
        [], description="(activation, d, σ_U = σ_W) where a cluster under V = −δI is measured against λ₁ < −δ "
        "(the paper's Figure 2–6 settings: experiments.cluster_spectrum.PAPER_SETTINGS); [] for none")
    cluster_delta: float = Field(1.0, gt=0.0, description="δ of the clusters' repulsive attention V = −δI (> 0)")
    cluster_batch: int = Field(16, ge=3, description="samples per cluster setting (>= 3)")
    cluster_steps: int = Field(150, ge=1, description="steps of the cluster runs over T = 5 (>= 1)")

    @model_validator(mode="after")
    def _check(self) -> "ExactConfig":
        if self.model.attention_kind != "softmax" or any(m is not None for m in (self.model.Q, self.model.K, self.model.V)):
            raise ValueError("model.attention_kind: the pair theory is derived for softmax attention with Q^T K = beta I, "
                             "V = gamma I")
        for name, values in (("betas", self.betas), ("gains", self.gains), ("sigmas", self.sigmas)):
            low_ok = (lambda x: x > 0) if name == "betas" else (lambda x: x >= 0)
            if not all(math.isfinite(x) and low_ok(x) for x in values):
                raise ValueError(f"{name}: every value must be finite and {'> 0' if name == 'betas' else '>= 0'} "
                                 f"(got {values})")
        for p in self.phase_points:
            if len(p) != 2 or not all(math.isfinite(x) and x >= 0 for x in p):
                raise ValueError(f"phase_points: each point is [g, sigma_U], both finite and >= 0 (got {p})")
        for c in self.cluster_settings:
            if (len(c) != 3 or not isinstance(c[0], str) or isinstance(c[1], bool) or not isinstance(c[1], int) or c[1] < 3
                    or isinstance(c[2], bool) or not isinstance(c[2], (int, float)) or not (math.isfinite(c[2]) and c[2] >= 0)):
                raise ValueError(f"cluster_settings: each is [activation, d >= 3, sigma >= 0] (got {c})")
            NoiseKernel(c[0], c[1], sigma_U=float(c[2]), sigma_W=float(c[2]))  # an unknown activation is named here, before any run
        if self.energy_levels == 2 and (self.energy_L % 2 or self.energy_every % 2):
            raise ValueError(f"energy_L, energy_every: must be even for energy_levels = 2 (steps L and L/2; got "
                             f"{self.energy_L}, {self.energy_every})")
        if self.spectrum_L is not None and self.spectrum_L % 4:
            raise ValueError(f"spectrum_L: must be a multiple of 4 (steps L, L/2, L/4; got {self.spectrum_L})")
        for updates in self.spectrum_points:  # every spectrum run takes small steps, checked before any run
            where = f"at phase_points ({updates['gain']:g}, {updates['sigma_U']:g}), " if updates else ""
            run = RunConfig(**_spectrum_model(self, attention=False, L=self.spectrum_steps(**updates), **updates))
            check_small_step(run, True, "spectrum_L", "spectrum_T", where)
        return self

    @property
    def spectrum_points(self) -> list[dict]:
        """The spectrum runs, as updates of the model's noise: the model's own ({}), then each phase point's."""
        return [{}, *({"gain": g, "sigma_U": s} for g, s in self.phase_points)]

    def spectrum_steps(self, **updates: Any) -> int:
        """L of the spectrum run with ``updates`` of the model's noise: ``spectrum_L``, or by default the
        least multiple of 4 that is at least ``SPECTRUM_L`` and a small step (`sync.small_step_depth`).

        Parameters
        ----------
        **updates
            ``gain`` and ``sigma_U`` of a phase point (none: the model's own noise).

        Returns
        -------
        int
            The finest level's steps.
        """
        if self.spectrum_L is not None:
            return self.spectrum_L
        run = RunConfig(**{**_spectrum_model(self, attention=False, **updates), "L": SPECTRUM_L})
        return max(SPECTRUM_L, small_step_depth(run, True) or SPECTRUM_L)

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the pair runs (two tokens per
        sample, one per β), the spectrum runs (the spectrum's and one per phase point: a d × d
        frame per sample on the levels L, L/2, L/4) and the energy runs (the exact field's
        N × N kernel and its factor per step); the theory lines cost milliseconds.

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        d, B = self.model.d, self.model.batch
        pair_steps = len(self.betas) * self.model.L
        spectrum_steps = sum(self.spectrum_steps(**updates) for updates in self.spectrum_points) * 7 // 4
        n = self.energy_N
        energy_steps = self.energy_L * (3 if self.energy_levels == 2 else 2) // 2
        flops = (pair_steps * B * 40.0 * d + spectrum_steps * self.spectrum_batch * 12.0 * d**3
                 + energy_steps * self.energy_batch * (n**3 / 3 + 20.0 * n * n * d))
        steps = pair_steps + spectrum_steps + energy_steps
        mem = 8.0 * max(8 * B * d, 8 * self.spectrum_batch * d * d, 3 * self.energy_batch * n * (n + d))
        return Estimate(mem, steps * STEP_OVERHEAD_S + flops / FLOPS, "model.batch, spectrum_batch or energy_batch",
                        "betas, model.L, spectrum_L, phase_points or energy_L")


@dataclass(repr=False)
class ExactResult(Result):
    """The four parts (module docstring).

    ``pair``: per β of ``betas`` (lists in that order) ``p_T`` (P(Z_T < 0), exact), ``p_T_free``
    (the same without attention, the alternative), ``p_antipodal`` (T = ∞), ``below`` (pairs with
    z_T < 0), ``n``, ``ci`` (Clopper–Pearson 95%), ``p_hat``; ``beta_star`` (None where the
    antipode has no threshold); ``line``: ``beta`` (beta_grid,) and ``p_antipodal`` on it.
    ``spectrum``: the [`SpectrumResult`][stochformer.experiments.spectrum.SpectrumResult].
    ``energy``: ``times`` (k,), ``exact`` (k,), ``mean``, ``se`` (k,), ``bound`` (k,) =
    E_β(μ_0)·e^{λ̄' t} at the measured mean start, ``rate`` (the exact long-time rate and its kind),
    ``lambda_bar_prime``, ``n``. ``phase``: the [`GainPhase`][stochformer.model.kernel.GainPhase];
    ``points``: per point g, σ_U, λ₁ predicted, measured, se, err. ``clusters``: per setting of
    ``cluster_settings`` the [`ClusterStability`][stochformer.experiments.cluster_spectrum.ClusterStability]
    as a dict.

    Attributes
    ----------
    config : ExactConfig
        The configuration run.
    pair : dict
        The two-token part.
    spectrum : SpectrumResult
        The spectrum part.
    energy : dict
        The energy part.
    phase : GainPhase
        The gain phase diagram.
    points : list of dict
        The measured phase points.
    clusters : list of dict
        The cluster-stability settings measured (`ClusterStability` as dicts).
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    meta : dict
        Further record entries (``model``: a model given by hand).
    """

    command: ClassVar[str] = "exact"
    summary_name: ClassVar[str] = "exact.json"
    config: ExactConfig
    pair: dict
    spectrum: SpectrumResult
    energy: dict
    phase: GainPhase
    points: list[dict]
    clusters: list[dict]
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        ph = self.phase
        return to_jsonable({
            "pair": self.pair, "spectrum": self.spectrum.to_dict(), "energy": self.energy,
            "phase": {"gains": ph.gains, "sigmas": ph.sigmas, "lambda_1": ph.lambda_1,
                      "g_c": [None if not math.isfinite(x) else float(x) for x in ph.g_c]},
            "points": self.points, "clusters": self.clusters, "d": self.config.model.d, "activation": self.config.model.activation})

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "p_below_exact": {"long_name": "P(z_T < 0) of the pair diffusion (exact law at T)", "units": "1"},
            "p_below": {"long_name": "fraction of simulated pairs with z_T < 0", "units": "1"},
            "p_antipodal": {"long_name": "P(the pair ends antipodal) (scale function; NaN where undefined)", "units": "1"},
            "energy_exact": {"long_name": "exact E[E_β(μ_t)] (backward equation)", "units": "1"},
            "energy_mean": {"long_name": "E_β(μ_t): sample mean of the simulated runs", "units": "1"},
            "energy_se": {"long_name": "E_β(μ_t): standard error of the mean", "units": "1"},
            "lambda_1_gain": {"long_name": "top Lyapunov exponent λ_1 (formula) over gain and σ_U", "units": RATE_UNITS},
            "gain": {"long_name": "gain g: std of the inner weights U", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        """``p_below_exact``, ``p_below``, ``p_antipodal`` (NaN where undefined): (beta,);
        ``energy_exact``, ``energy_mean``, ``energy_se``: (time,); ``lambda_1_gain``: (sigma_U, gain)."""
        pr, en, ph = self.pair, self.energy, self.phase
        pa = [math.nan if x is None else x for x in pr["p_antipodal"]]
        return xr.Dataset(
            {"p_below_exact": ("beta", np.asarray(pr["p_T"])), "p_below": ("beta", np.asarray(pr["p_hat"])),
             "p_antipodal": ("beta", np.asarray(pa, float)), "energy_exact": ("time", np.asarray(en["exact"])),
             "energy_mean": ("time", np.asarray(en["mean"])), "energy_se": ("time", np.asarray(en["se"])),
             "lambda_1_gain": (("sigma_U", "gain"), ph.lambda_1)},
            coords={"beta": np.asarray(pr["beta"], float), "time": np.asarray(en["times"], float),
                    "sigma_U": ph.sigmas, "gain": ph.gains})


def pair_runs(cfg: ExactConfig, beta: float, seed: int, model: Optional[Model] = None) -> np.ndarray:
    """The final overlaps z_T (batch,) of ``model.batch`` pairs started at cosine z0 with attention β.

    Parameters
    ----------
    cfg : ExactConfig
        The configuration.
    beta : float
        The attention's β.
    seed : int
        The seed.
    model : Model, optional
        A model stepped instead of the config's (that of ``model.with_updates(beta=beta)``).

    Returns
    -------
    numpy.ndarray, shape (batch,)
        z_T.
    """
    run = cfg.model.with_updates(beta=beta)
    env = setup(run)
    g = env.generator(seed)
    X0 = initial_tokens(InitConfig(kind="pair", cosine=cfg.z0), run.batch, 2, run.d, g, env.dtype, env.device)
    model = make_model(run, env.dtype, env.device) if model is None else model
    X = solve(model, X0, run.T, run.L, SaveAt(stats=()), generator=g)["X_final"].values
    X = np.asarray(X, dtype=float)
    return np.einsum("bd,bd->b", X[:, 0], X[:, 1])


def sync_time_runs(cfg: ExactConfig, beta: float, seed: int, eps: float = 0.1) -> np.ndarray:
    r"""The time τ = inf{t: z_t ≥ 1 − ε} of ``model.batch`` pairs started at cosine z0 with attention β
    (SPEC §8, [`PairDiffusion.sync_time`][stochformer.theory.pair.PairDiffusion.sync_time]), up to
    the horizon ``model.T``, as conditional moments given the overlaps at the steps.

    Between two steps the overlap is taken as a Brownian bridge of variance s(z_{k−1}) Δt
    (s(z) = 2(1 − z²)(κ(1) − zκ(z)), SPEC §8), which crosses the level b = 1 − ε with probability
    $p_k = \exp(-2(b - z_{k-1})(b - z_k)/(s(z_{k-1})\,\Delta t))$. The survival
    $q_k = \prod_{j \le k} (1 - p_j)\,\mathbb 1\{z_j < b\}$ estimates P(τ > t_k | the steps), and by the
    trapezoidal rule $E[τ ∧ T] = \int_0^T q\,dt$, $E[(τ ∧ T)^2] = \int_0^T 2t\,q\,dt$: the monitoring
    bias is then first order in Δt for small Δt (not √Δt as for the first step found above b;
    docs/theory.md measures from which Δt on), and Richardson's extrapolation applies
    (`extrapolated_pair_means` with ``runs`` this function). A pair is dropped from the runs once its
    q is 0 (the runs go on in chunks of L/24 steps; each step's noise is fresh, so the law is the same).

    Parameters
    ----------
    cfg : ExactConfig
        The pair runs (``model``: dynamics, kernel, γ, the horizon T, L, batch; ``z0`` < 1 − ε).
    beta : float
        The attention's β.
    seed : int
        The seed.
    eps : float, optional
        The sync level is 1 − ε, ε in (0, 2).

    Returns
    -------
    numpy.ndarray, shape (batch, 3)
        Per pair: E[τ ∧ T | steps], E[(τ ∧ T)² | steps] and q at T (the probability of not having
        reached the level by the horizon).
    """
    if not 0.0 < eps < 2.0 or not cfg.z0 < 1.0 - eps:
        raise ValueError(f"eps: must lie in (0, 2) with z0 < 1 - eps (got eps = {eps}, z0 = {cfg.z0})")
    run = cfg.model.with_updates(beta=beta)
    env = setup(run)
    g = env.generator(seed)
    X = initial_tokens(InitConfig(kind="pair", cosine=cfg.z0), run.batch, 2, run.d, g, env.dtype, env.device)
    model = make_model(run, env.dtype, env.device)
    nodes = np.linspace(-1.0, 1.0, 4001)
    s_nodes = two_point_coefficients(make_kernel(run), torch.from_numpy(nodes))[1].numpy()
    top, dt = 1.0 - eps, run.T / run.L
    z, q = np.full(run.batch, cfg.z0), np.ones(run.batch)
    first, second = np.zeros(run.batch), np.zeros(run.batch)
    live = np.arange(run.batch)  # the pairs with q > 0: the others add nothing more
    done = 0

    def track(k: int, X: torch.Tensor) -> None:
        z_new = torch.einsum("bd,bd->b", X[:, 0], X[:, 1]).detach().cpu().double().numpy()
        z_old, q_old, t = z[live], q[live], (done + k) * dt
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            gap = 2.0 * (top - z_old) * np.maximum(top - z_new, 0.0) / (np.interp(z_old, nodes, s_nodes) * dt)
            q_new = np.where((q_old > 0) & (z_new < top), q_old * -np.expm1(-gap), 0.0)
        first[live] += 0.5 * dt * (q_old + q_new)
        second[live] += dt * ((t - dt) * q_old + t * q_new)
        z[live], q[live] = z_new, q_new

    # the runs go on in chunks, each with the pairs still below the level: the noise of each step
    # is fresh (the field is white in time, the transformer draws its weights per layer)
    chunk = max(1, run.L // 24)
    while done < run.L and live.size:
        steps = min(chunk, run.L - done)
        X = solve(model, X, steps * dt, steps, SaveAt(stats=()), generator=g, hook=track, output="torch")["X_final"]
        done += steps
        keep = q[live] > 0
        live, X = live[keep], X[torch.from_numpy(keep).to(X.device)]
    return np.stack([first, second, q], axis=1)


#: Richardson weights of the values at L, L/2 (first order in Δt) and L, L/2, L/4 (second order)
def extrapolated_pair_means(cfg: ExactConfig, beta: float, statistics: dict[str, Callable[[np.ndarray], np.ndarray]],
                            seed: int, levels: int = 2,
                            runs: Callable[[ExactConfig, float, int], np.ndarray] = pair_runs) -> dict[str, dict[str, Any]]:
    """Means of statistics of the final overlaps z_T over ``model.batch`` pairs started at cosine
    ``z0`` (`pair_runs`), extrapolated to Δt → 0.

    Independent runs on L, L/2 (, L/4) steps (L = ``model.L``) give means m_i with standard errors
    SE_i; the extrapolated value is Σ w_i m_i with Richardson's weights ([`richardson_steps`][stochformer.measure.stats.richardson_steps]:
    (2, −1) removes a bias a·Δt, (8/3, −2, 1/3) also b·Δt²) and its SE √(Σ w_i² SE_i²).

    Parameters
    ----------
    cfg : ExactConfig
        The pair runs (``model``: dynamics, kernel, γ, T, L, batch; ``z0``).
    beta : float
        The attention's β.
    statistics : dict of str to callable
        name ↦ f, f mapping the level's runs (``runs``: z_T (batch,) by default) to per-pair values
        (batch,) whose mean is the statistic.
    seed : int
        Seed of the runs (one child seed per level).
    levels : {2, 3}
        Step sizes; ``model.L`` must be a multiple of 2^(levels − 1).
    runs : callable, optional
        ``runs(cfg, beta, seed)``: the per-pair values (batch, …) of one level that the statistics
        map (default `pair_runs`, z_T; `sync_time_runs`: the moments of the sync time).

    Returns
    -------
    dict
        Per statistic: ``value``, ``se`` and ``by_level``, the (steps, mean, se) behind it.
    """
    if levels not in RICHARDSON_WEIGHTS or cfg.model.L % (2 ** (levels - 1)):
        raise ValueError(f"levels: 2 or 3, with model.L a multiple of 2^(levels - 1) (got {levels}, L = {cfg.model.L})")
    per_level = []
    for i, s in enumerate(child_seeds(seed, levels)):
        steps = cfg.model.L // 2 ** i
        z = runs(cfg.model_copy(update={"model": cfg.model.with_updates(L=steps)}), beta, s)
        per_level.append((steps, {name: mean_and_se(f(z)) for name, f in statistics.items()}))
    out = {}
    for name in statistics:
        means = [float(level[name][0]) for _, level in per_level]
        ses = [float(level[name][1]) for _, level in per_level]
        value, se = richardson_steps(means, ses)
        out[name] = {"value": float(value), "se": float(se),
                     "by_level": [(steps, m, e) for (steps, _), m, e in zip(per_level, means, ses)]}
    return out


def pair_part(cfg: ExactConfig, seed: int, given: Optional[GivenModels] = None) -> dict:
    """The two-token part: measured and exact P(Z_T < 0) per β, p_antipodal and β* (module docstring).

    Parameters
    ----------
    cfg : ExactConfig
        The configuration.
    seed : int
        The seed.
    given : GivenModels, optional
        A model given by hand for each β's runs (``pair beta=β``).

    Returns
    -------
    dict
        Per β, the measured and exact probabilities, and the theory's line.
    """
    run = cfg.model
    kern = make_kernel(run)
    v = run.gamma_value
    free = float(law(PairDiffusion(kern, 1.0, 0.0), cfg.z0, run.T).cdf(0.0))
    out: dict[str, Any] = {key: [] for key in ("beta", "p_T", "p_T_free", "p_antipodal", "below", "n", "ci", "p_hat")}
    for beta, s in zip(cfg.betas, child_seeds(seed, len(cfg.betas))):
        pair = PairDiffusion(kern, beta, v)
        z = pair_runs(cfg, beta, s, given.get(cfg.model.with_updates(beta=beta), f"pair beta={beta:g}")
                      if given is not None else None)
        k = int((z < 0).sum())
        pa = pair.p_antipodal(cfg.z0)
        out["beta"].append(beta)
        out["p_T"].append(float(law(pair, cfg.z0, run.T).cdf(0.0)))
        out["p_T_free"].append(free)
        out["p_antipodal"].append(None if not math.isfinite(pa) else float(pa))
        out["below"].append(k)
        out["n"].append(len(z))
        out["ci"].append(list(clopper_pearson_interval(k, len(z))))
        out["p_hat"].append(k / len(z))
    top = max(cfg.betas) * 1.25
    grid = np.linspace(top / cfg.beta_grid, top, cfg.beta_grid)
    line = [PairDiffusion(kern, float(b), v).p_antipodal(cfg.z0) for b in grid]
    out["line"] = {"beta": grid.tolist(), "p_antipodal": [None if not math.isfinite(p) else float(p) for p in line]}
    out["beta_star"] = PairDiffusion(kern, 1.0, v).beta_star
    out.update({"z0": cfg.z0, "T": run.T, "v": v, "dt": run.T / run.L, "dynamics": run.dynamics})
    return out


def _spectrum_model(cfg: ExactConfig, **updates: Any) -> dict:
    """The model of the spectrum's runs: the limit SDE of one token with the config's noise."""
    run = cfg.model
    return {"dynamics": "sde", "activation": run.activation, "d": run.d, "sigma_U": run.sigma_U, "sigma_W": run.sigma_W,
            "noise_scale": run.noise_scale, "gain": run.gain, "batch": cfg.spectrum_batch, "T": cfg.spectrum_T,
            "dtype": run.dtype, "device": run.device, **updates}


def _spectrum_config(cfg: ExactConfig, seed: int, **updates: Any) -> SpectrumConfig:
    """The spectrum run with ``updates`` (a phase point's gain and sigma_U) of the model's noise."""
    return SpectrumConfig.model_validate({"model": _spectrum_model(cfg, seed=seed, L=cfg.spectrum_steps(**updates), **updates)})


def _energy_values(erun: Any, steps: int, every: int, energy_beta: float, seed: int, model: Optional[Model] = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The times (k,) and E_β(μ_t) (batch, k) of ``erun.batch`` runs of ``erun`` (or of ``model``) from
    uniform tokens on ``steps`` steps."""
    env = setup(erun)
    g = env.generator(seed)
    X0 = initial_tokens(InitConfig(kind="uniform"), erun.batch, erun.N, erun.d, g, env.dtype, env.device)
    model = make_model(erun, env.dtype, env.device) if model is None else model
    E = solve(model, X0, erun.T, steps, SaveAt(stats=("energy",), every=every,
                                                        energy_beta=energy_beta), generator=g)["energy"]
    values = np.asarray(E.values, dtype=float)
    times = np.asarray(E["time"].values if "time" in E.coords else np.linspace(0, erun.T, values.shape[1]), dtype=float)
    return times, values


def extrapolated_energy(erun: RunConfig, every: int, energy_beta: float, seed: int, levels: int = 2,
                        model: Optional[Model] = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The mean interaction energy E_β(μ_t) of ``erun.batch`` runs of ``erun`` (any dynamics, N, attention)
    from uniform tokens, on ``erun.L`` steps and, with ``levels = 2``, as many independent runs on
    L/2 steps: the mean is then 2m(L) − m(L/2) (a first-order step bias removed), its SE
    √(4 SE_L² + SE_{L/2}²).

    Parameters
    ----------
    erun : RunConfig
        The runs (``L`` and, with two levels, ``every`` even).
    every : int
        The energy is kept every ``every`` steps of the finest level.
    energy_beta : float
        The energy's β.
    seed : int
        The seed (the finest level's; the coarse level a child seed of it).
    levels : {1, 2}
        Step sizes.
    model : Model, optional
        A model stepped instead of the one ``erun`` describes, at every level.

    Returns
    -------
    tuple
        ``times`` (k,), the (extrapolated) ``mean`` (k,) and its ``se`` (k,), per level the
        (mean, se) and the finest level's values (batch, k).
    """
    if levels not in (1, 2) or (levels == 2 and (erun.L % 2 or every % 2)):
        raise ValueError(f"levels: 1 or 2, with L and every even for 2 (got {levels}, L = {erun.L}, every = {every})")
    seeds = [seed] + child_seeds(seed, 1) if levels == 2 else [seed]
    runs = [_energy_values(erun, erun.L // 2**i, every // 2**i, energy_beta, s, model) for i, s in enumerate(seeds)]
    times, values = runs[0]
    stats = [mean_and_se(v) for _, v in runs]
    if levels == 2:
        mean, se = richardson_steps([m for m, _ in stats], [e for _, e in stats])
    else:
        mean, se = stats[0]
    return times, mean, se, stats, values


def energy_config(cfg: ExactConfig) -> RunConfig:
    """The runs of the energy part: ``model`` without attention, as the limit SDE, with the
    ``energy_*`` sizes (and σ_U = σ_W = ``energy_sigma`` if set).

    Parameters
    ----------
    cfg : ExactConfig
        The configuration.

    Returns
    -------
    RunConfig
        The energy runs' config.
    """
    sig = {} if cfg.energy_sigma is None else {"sigma_U": cfg.energy_sigma, "sigma_W": cfg.energy_sigma}
    return cfg.model.with_updates(attention=False, N=cfg.energy_N, batch=cfg.energy_batch, T=cfg.energy_T, L=cfg.energy_L,
                                  dynamics="sde", **sig)


def energy_part(cfg: ExactConfig, seed: int, given: Optional[GivenModels] = None) -> dict:
    """The energy part: the exact E[E_β(μ^N_t)] from uniform tokens, its long-time rate and Theorem
    1.4's bound, beside ``energy_batch`` runs of the limit SDE without attention on ``energy_L`` steps
    and, with ``energy_levels = 2``, as many independent runs on ``energy_L/2`` steps: the mean is then
    2m(L) − m(L/2) (the Heun step's first-order bias removed; docs/theory.md measures it), its SE
    √(4 SE_L² + SE_{L/2}²); ``mean_by_level`` keeps both. The mean rate (``ratio``) and the bound's
    start E_β(μ_0) are the finest level's.

    Parameters
    ----------
    cfg : ExactConfig
        The configuration.
    seed : int
        The seed.
    given : GivenModels, optional
        A model given by hand for the energy runs (``energy``).

    Returns
    -------
    dict
        The exact and measured energies, the rate and the bound.
    """
    run = cfg.model
    erun = energy_config(cfg)
    pair = PairDiffusion(make_kernel(erun), 1.0, 0.0)
    times, mean, se, stats, values = extrapolated_energy(erun, cfg.energy_every, run.energy_beta, seed, cfg.energy_levels,
                                                         given.get(erun, "energy") if given is not None else None)
    exact = expected_energy(pair, times, erun.N, run.energy_beta)
    rate = energy_decay_rate(pair, run.energy_beta)
    ratio = values[:, -1] / values[:, 0]
    r_mean, r_se = mean_and_se(ratio)
    return {"times": times, "exact": exact, "mean": mean, "se": se, "n": erun.batch, "N": erun.N,
            "levels": [cfg.energy_L // 2**i for i in range(len(stats))], "mean_by_level": [m for m, _ in stats],
            "bound": float(stats[0][0][0]) * np.exp(rate.lambda_bar_prime * times), "lambda_bar_prime": rate.lambda_bar_prime,
            "rate": rate.rate, "rate_kind": rate.kind, "lambda_bar": rate.lambda_bar,
            "ratio": float(r_mean), "ratio_se": float(r_se), "T": erun.T, "sigma_U": erun.sigma_U,
            "sigma_W": erun.sigma_W, "energy_beta": run.energy_beta}


@validated
def run_exact(cfg: ExactConfig, progress: bool = False, model: Optional[ModelSource] = None) -> ExactResult:
    """The parts of the module docstring for ``cfg`` (seeds split from ``model.seed``).

    Parameters
    ----------
    cfg : ExactConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with the config of the pair runs at each β
        (``cfg.model`` with that β) and of the energy runs ([`energy_config`][stochformer.experiments.exact.energy_config]),
        whose models run there instead of the config's; the exact laws still come from ``cfg.model``'s
        kernel, and the spectrum and cluster parts (tangent flows and closed forms, no model to
        replace) are the config's. Checked before any work, recorded in ``result.meta["model"]``
        ([`GivenModels`][stochformer.config.build.GivenModels]). (One model object is refused: the
        runs differ in β and attention.)

    Returns
    -------
    ExactResult
        The parts.
    """
    cfg = as_config(cfg, ExactConfig)
    run = cfg.model
    given = GivenModels.check(model, [run.with_updates(beta=b) for b in cfg.betas] + [energy_config(cfg)], "exact",
                              prefix="model.")
    start = time.perf_counter()
    s_pair, s_spec, s_energy, s_phase, s_cluster = child_seeds(run.seed, 5)  # the first four as before: spawn is by index
    pair = pair_part(cfg, s_pair, given)
    spectrum = run_spectrum(_spectrum_config(cfg, s_spec), progress=progress)
    energy = energy_part(cfg, s_energy, given)
    kern = make_kernel(run)
    phase = gain_phase(kern, cfg.gains, cfg.sigmas)
    points = []
    for (g, s), seed in zip(cfg.phase_points, child_seeds(s_phase, max(1, len(cfg.phase_points)))):
        res = run_spectrum(_spectrum_config(cfg, seed, gain=g, sigma_U=s), progress=progress)
        points.append({"gain": g, "sigma_U": s, "predicted": float(res.predicted[0]), "measured": float(res.measured[0]),
                       "se": float(res.se[0]), "err": float(res.err[0]), "n": cfg.spectrum_batch})
    clusters = [cluster_stability(a, d, float(sig), delta=cfg.cluster_delta, steps=cfg.cluster_steps, batch=cfg.cluster_batch,
                                  seed=seed)._asdict()
                for (a, d, sig), seed in zip(cfg.cluster_settings, child_seeds(s_cluster, max(1, len(cfg.cluster_settings))))]
    return ExactResult(config=cfg, pair=pair, spectrum=spectrum, energy=energy, phase=phase, points=points, clusters=clusters,
                       provenance=setup(run).provenance(), elapsed_s=time.perf_counter() - start, meta=given.meta())
