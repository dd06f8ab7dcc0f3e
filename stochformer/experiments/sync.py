"""``sync``: measured synchronisation rates beside the closed forms of SPEC §5.

Two estimators, for the deep transformer and for the limit SDE alike (any stepper of
[`stochformer.config.build.make_model`][stochformer.config.build.make_model], stepped by [`stochformer.solve`][stochformer.solve]); layers ℓ are mapped to times t = ℓ Δt, Δt = T/L, so every
rate is per unit time t and comparable with λ₁, λ̄, λ̄' of [`stochformer.model.kernel`][stochformer.model.kernel] (which carry
the noise scale s through κ → s²κ).

* **Lyapunov exponent** (Benettin): N = 2 tokens, token 1 a companion of token 0 at chordal
  distance ``eps``. After every step the log of the distance ratio is accumulated and the
  companion is put back at distance ``eps`` along the current separation, so the pair stays in
  the linear regime for any horizon. Per sample ``S_T = Σ log(δ_{ℓ+1}/δ_ℓ⁺)``;
  ``λ̂₁ = mean(S_T)/T`` with SE ``std(S_T)/(T√n)`` (samples are independent). With attention
  Qᵀ K = βI, V = γI the pair contracts at the extra rate γ: the prediction is λ₁ − γ.
* **First-moment rate of the energy**: E[E_β(μ_t)] ∝ e^{rate·t}. The rate is the least-squares
  slope of log(sample mean of E_β) against t; its SE is the bootstrap SE over samples (resampling
  whole paths). Near synchronisation (a tight cluster) the prediction is λ̄ − 2γ; from uniform
  tokens Theorem 1.4 bounds the rate by ε + λ̄', Assumption 2's ε = max(0, −2γ) for attention
  Qᵀ K = βI, V = γI with β the energy's β ([`epsilon`][stochformer.experiments.sync.epsilon]; derived in
  `stochformer.experiments.repulsion`). The energy can grow at most to its largest value
  E_max = ½(1 − 1/N)(e^β − e^{−β/(N−1)}) ([`energy_max`][stochformer.experiments.sync.energy_max]), so a bound above the rate that takes
  E_β from its value at the start of the fit window to E_max (``energy_rate_uniform_reach``) cannot
  be seen to fail.
* **Δt → 0** (``extrapolate``, default): both estimators run the same samples at L, L/2 and L/4
  steps on one Brownian path and report the Richardson value ([`richardson`][stochformer.experiments.sync.richardson]) with its
  extrapolation error beside the SE (``*_extrap_err``); the energy rates' SE is that of the same
  combination of jointly resampled bootstrap slopes.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Optional, TypeVar

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..core.brownian import BrownianPath
from ..config.build import GivenModels, Setup, initial_tokens, make_kernel, make_model, setup
from ..config import ExperimentConfig, MEASURED_HORIZON, InitConfig, RunConfig, as_config
from ..model.activations import KINKED_ACTIVATIONS
from ..model.kernel import NoiseKernel, fastest_rate, first_moment_rate, lambda_bar_prime, lyapunov_exponent
from ..integrate import Model, ModelSource, SaveAt, solve
from ..core.sphere import normalize, tangent, uniform
from ..io.names import TIME_UNITS, numeric_attrs
from ..io.results import Result
from ..measure.stats import mean_and_se, resampled_se, richardson_steps
from ..core.progress import ProgressMeter
from ..core.validation import blamed_on, experiment_fields, validated
from .preflight import Estimate, simulate_estimate


#: Step counts of the Δt → 0 extrapolation, as divisors of L: L, L/2, L/4 on one Brownian path.
EXTRAPOLATION_LEVELS = (1, 2, 4)
#: The per-pair log-distance paths the dataset keeps: those of the first pairs, at most this many
#: (so ``log_growth`` is at most PAIR_PATHS × (L + 1) numbers: 64 × 1001 float64 = 0.5 MB at L = 1000).
PAIR_PATHS = 64


class SyncConfig(ExperimentConfig):
    """``model``: the system whose rates are measured (``model.batch``: independent runs for each
    energy rate); the sizes of the three measurements of [`run_sync`][stochformer.experiments.sync.run_sync]."""

    command: ClassVar[str] = "sync"
    model_defaults: ClassVar[dict] = {"batch": 512}
    model_min: ClassVar[dict] = {"T": MEASURED_HORIZON,
                                 "batch": (2, "independent runs for each energy rate")}

    pairs: int = Field(256, ge=2, description="independent pairs for the Lyapunov exponent (>= 2)")
    eps: float = Field(1e-4, ge=1e-12, le=1e-2, description="pair separation of the Benettin estimator, in [1e-12, 0.01] "
                       "(a smaller one is lost to float64's resolution of unit vectors, 2.2e-16)")
    near_spread: Optional[float] = Field(
        None, ge=1e-6, le=0.1, description="spread of the near-synchronised cluster, in [1e-6, 0.1] (its 1 - cosine, "
        "about spread², stays well above float64's resolution); default from the kernel's regularity (near_sync_spread)")
    uniform_start: bool = Field(True, description="also measure the energy rate from uniform tokens")
    fit_from: float = Field(0.5, ge=0.0, lt=1.0, description="uniform start: fit the rate on t >= fit_from·T, in [0, 1)")
    near_horizon: Optional[float] = Field(
        None, ge=1e-6, le=1e4, description="horizon of the near-synchronisation energy run, in [1e-6, 10^4], taken in "
        "steps of the model's T/L; default min(T, 1/(2(κ(1)+κ'(1)))), where the log-variance of a pair's 1 − cosine "
        "reaches 2")
    bootstrap: int = Field(400, ge=10, le=1000000, description="bootstrap resamples for the energy-rate SE, in [10, 10^6]")
    extrapolate: bool = Field(True, description="λ₁ and the energy rates extrapolated to Δt → 0 from L, L/2, L/4 steps "
                              "(L a multiple of 4)")

    @model_validator(mode="after")
    def _levels(self) -> "SyncConfig":
        check_extrapolation(self.model.L, self.extrapolate)
        check_small_step(self.model, self.extrapolate)
        if self.model.energy_beta < sys.float_info.min:
            raise ValueError(f"model.energy_beta: a subnormal β (below {sys.float_info.min:.3g}) loses the measured energy "
                             f"rates to rounding (got {self.model.energy_beta:g})")
        if self.near_horizon is not None and near_steps(self.model.L, self.model.T, self.near_horizon, self.extrapolate) > NEAR_STEPS_MAX:
            raise ValueError(f"near_horizon: the near-synchronisation run takes steps of model.T / model.L = "
                             f"{self.model.T / self.model.L:.3g}, so {self.near_horizon:g} would take more than "
                             f"{NEAR_STEPS_MAX} steps; a smaller near_horizon, or a larger model.T / model.L")
        per = EXTRAPOLATION_LEVELS[-1] if self.extrapolate else 1  # the coarsest run has L/per steps
        # the window's count of times never falls as the steps grow: only runs short of the fewest are counted
        if self.uniform_start and self.model.L // per < steps_for_a_slope(self.fit_from):
            held = int(fit_window(self.model.L // per, 1.0, self.fit_from).sum())
            raise ValueError(f"fit_from: the rate from uniform tokens is a slope fitted on t >= fit_from·T, which holds "
                             f"{held} of the {self.model.L // per + 1} times of its coarsest run; a slope needs 2: "
                             f"model.L >= {per * steps_for_a_slope(self.fit_from)}, a smaller fit_from (got "
                             f"{self.fit_from}), or uniform_start = false")
        return self

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the pairs and the
        energy runs at the model's size, three runs (L, L/2, L/4).

        Parameters
        ----------
        workers : int, optional
            Processes the run's tasks are spread over.

        Returns
        -------
        Estimate
            Peak memory (bytes) and a rough time.
        """
        by_pairs = 2 * self.pairs >= self.model.batch  # the pair runs hold the larger batch
        e = simulate_estimate(self.model, batch=max(self.model.batch, 2 * self.pairs))
        fields = experiment_fields(e.memory_fields, "pairs" if by_pairs else "model.batch")
        # the near-synchronisation run: its default horizon is at most T, so at most L steps
        near = near_steps(self.model.L, self.model.T, self.near_horizon, self.extrapolate) if self.near_horizon else self.model.L
        return Estimate(e.bytes, e.seconds * (3 + near / self.model.L), fields,
                        "model.L, pairs, model.batch, near_horizon or the grid")


#: the most steps of the near-synchronisation run (`SyncConfig.near_horizon`)
NEAR_STEPS_MAX = 10**7


def near_steps(L: int, T: float, horizon: float, extrapolate: bool) -> int:
    """The steps of the near-synchronisation run: its horizon in steps of the model's T/L, rounded up
    to a multiple of the extrapolation's coarsest factor (at least 2).

    Parameters
    ----------
    L : int
        The model's steps.
    T : float
        The model's horizon.
    horizon : float
        The near-synchronisation run's horizon.
    extrapolate : bool
        Whether the run is extrapolated to Δt → 0 (its steps a multiple of 4).

    Returns
    -------
    int
        The steps (2**62 for a horizon beyond what any run could take).
    """
    unit = EXTRAPOLATION_LEVELS[-1] if extrapolate else 1
    steps = L * horizon / (T * unit)
    return max(2, unit * math.ceil(steps)) if math.isfinite(steps) and steps < 2**62 else 2**62


def fit_window(n: int, T: float, fit_from: float) -> np.ndarray:
    """The times of a rate's fit, t >= fit_from·T, among the n + 1 times k·T/n of a run of n steps
    (the bound less 10⁻¹²·T: a time that rounding puts just below it is in).

    Parameters
    ----------
    n : int
        Steps.
    T : float
        The horizon.
    fit_from : float
        The window's start, a fraction of T.

    Returns
    -------
    numpy.ndarray of bool, shape (n + 1,)
        The times in the window.
    """
    return np.arange(n + 1) * (T / n) >= fit_from * T - 1e-12 * T


def steps_for_a_slope(fit_from: float) -> int:
    """The fewest steps n of a run whose `fit_window` holds 2 times: n (1 − fit_from) >= 1, up to the
    window's rounding (checked up to 10⁶ steps).

    Parameters
    ----------
    fit_from : float
        The window's start, a fraction of T in [0, 1).

    Returns
    -------
    int
        n.
    """
    n = max(1, math.ceil(1 / (1 - fit_from)) - 1)
    while n <= 10**6 and fit_window(n, 1.0, fit_from).sum() < 2:
        n += 1
    return n


def check_extrapolation(L: int, extrapolate: bool) -> None:
    """The Δt → 0 extrapolation runs L, L/2 and L/4 steps: L must be a multiple of 4.

    Parameters
    ----------
    L : int
        Layers.
    extrapolate : bool
        Whether the extrapolation runs.
    """
    if extrapolate and L % EXTRAPOLATION_LEVELS[-1]:
        raise ValueError(f"model.L: must be a multiple of {EXTRAPOLATION_LEVELS[-1]} for the Δt → 0 extrapolation "
                         f"(L, L/2, L/4 steps; got {L}), or set extrapolate = false")


#: the most the coarsest step run times the fastest predicted rate may be
#: ([`check_small_step`][stochformer.experiments.sync.check_small_step]): one e-fold per step. The
#: predictions are the Δt → 0 limit; the Richardson value's bias grows with this product (the
#: spectrum, ReLU, d = 4: 0.4% at 0.36, 1.6% at 0.46, 3.5% at 0.64, 8% at 0.84, 27% at 3.1;
#: docs/spectrum.md), and far past it a step is not a step of the SDE at all
SMALL_STEP = 1.0


@functools.lru_cache(maxsize=4096)
def _kappas_at_one(kern: NoiseKernel) -> tuple[float, float]:
    """(κ(1), κ'(1)) of a kernel of a named activation, the values the predictions use, kept (a
    grid checks every point, and Mehler's series takes tens of ms per kernel)."""
    return kern.kappa1, kern.kappa1_prime


def _fastest(run: RunConfig) -> tuple[float, float, float, float]:
    """κ(1), κ'(1), γ and the fastest predicted rate max(``fastest_rate``, |γ|) of ``run``."""
    k = kp = 0.0
    if run.mlp and run.noise_scale > 0:
        kern = make_kernel(run)
        named = isinstance(kern, NoiseKernel) and isinstance(kern.activation, str)
        k, kp = _kappas_at_one(kern) if named else (kern.kappa1, kern.kappa1_prime)
    gamma = attention_gamma(run) or 0.0
    return k, kp, gamma, max(fastest_rate(k, kp, run.d), abs(gamma))


def _per_coarsest(extrapolate: bool) -> int:
    """Steps of the finest level per step of the coarsest (L/4 of L with the extrapolation)."""
    return EXTRAPOLATION_LEVELS[-1] if extrapolate else 1


def small_step_depth(run: RunConfig, extrapolate: bool) -> Optional[int]:
    """The smallest L (a multiple of 4 with the extrapolation) whose coarsest step is small for
    ``run`` ([`check_small_step`][stochformer.experiments.sync.check_small_step]).

    Parameters
    ----------
    run : RunConfig
        The model (its L is not read).
    extrapolate : bool
        Whether the extrapolation runs (steps L, L/2, L/4).

    Returns
    -------
    int or None
        That L; None where it would pass 2**62 (or the rate passes float64).
    """
    rate, per = _fastest(run)[3], _per_coarsest(extrapolate)
    if not rate * run.T < 2**60:
        return None
    need = max(1, math.ceil(per * run.T * rate / SMALL_STEP))
    return need + -need % per


class StepNotSmall(ValueError):
    """A run's coarsest step is not small beside its predictions' fastest rate
    ([`check_small_step`][stochformer.experiments.sync.check_small_step])."""


def step_product(run: RunConfig, extrapolate: bool) -> float:
    """The coarsest step run (T/(L/4) with the Δt → 0 extrapolation, else T/L) times the fastest
    predicted rate max(the noise's [`fastest_rate`][stochformer.model.kernel.fastest_rate], |γ|).

    Parameters
    ----------
    run : RunConfig
        The model.
    extrapolate : bool
        Whether the extrapolation runs (steps L, L/2, L/4).

    Returns
    -------
    float
        The product, which [`check_small_step`][stochformer.experiments.sync.check_small_step]
        bounds by ``SMALL_STEP``.
    """
    return _fastest(run)[3] * run.T / (run.L // _per_coarsest(extrapolate))


#: the fields besides T that set a run's fastest predicted rate, as a message names them
RATE_FIELDS = "model.d, gamma or the noise (sigma_U, sigma_W, noise_scale, gain)"


def check_small_steps(points: Iterable[tuple[str, RunConfig]], extrapolate: bool, steps: str = "model.L",
                      horizon: str = "model.T", rates: str = RATE_FIELDS) -> None:
    """[`check_small_step`][stochformer.experiments.sync.check_small_step] over a grid's points: the
    error names the point with the largest product, so that the L it asks for passes at every point
    of the same T.

    Parameters
    ----------
    points : iterable of (str, RunConfig)
        (``where``, run) of every point: the message's opening words and the model there.
    extrapolate : bool
        Whether the extrapolation runs (steps L, L/2, L/4).
    steps, horizon, rates : str, optional
        The config's names of L, T and the fields that set the rate.

    Raises
    ------
    StepNotSmall
        At the point of the largest product, when it exceeds ``SMALL_STEP``.
    """
    worst, top = None, -math.inf
    for where, run in points:
        product = step_product(run, extrapolate)
        if product > top:
            worst, top = (where, run), product
    if worst is not None:
        check_small_step(worst[1], extrapolate, steps, horizon, worst[0], rates)


def check_small_step(run: RunConfig, extrapolate: bool, steps: str = "model.L", horizon: str = "model.T",
                     where: str = "", rates: str = RATE_FIELDS) -> None:
    """The coarsest step run (T/(L/4) with the Δt → 0 extrapolation, else T/L) times the fastest
    rate of the predictions is at most ``SMALL_STEP``: the noise's
    [`fastest_rate`][stochformer.model.kernel.fastest_rate] (SPEC §8) and the attention's |γ|.

    Parameters
    ----------
    run : RunConfig
        The model.
    extrapolate : bool
        Whether the extrapolation runs (steps L, L/2, L/4).
    steps, horizon : str, optional
        The config's names of L and T (an experiment that runs ``run`` as a part names its own).
    where : str, optional
        Which of an experiment's runs this is, the message's opening words (``"at gamma = 1, "``).
    rates : str, optional
        The config's names of the other fields that set the rate (``RATE_FIELDS``).

    Raises
    ------
    StepNotSmall
        A ValueError naming ``steps``, the product, the smallest L that passes and the other fields
        that set it.
    """
    k, kp, gamma, rate = _fastest(run)
    step = run.T / (run.L // _per_coarsest(extrapolate))
    product = rate * step
    if product <= SMALL_STEP:
        return
    need = small_step_depth(run, extrapolate)
    fix = f"raise {steps} to at least {need}, or lower" if need is not None else "lower"
    noise = f"d = {run.d}, κ(1) = {k:.3g}, κ'(1) = {kp:.3g}" + (f", gamma = {gamma:.3g}" if gamma else "")
    raise StepNotSmall(f"{steps}: {where}the coarsest step T/{'(L/4)' if extrapolate else 'L'} = {step:.3g} × the fastest "
                     f"predicted rate {rate:.3g} ({noise}) = {product:.3g} > {SMALL_STEP:g}, not a small step: {fix} "
                     f"{horizon}, {rates}")


# --------------------------------------------------------------------------- predictions


def attention_gamma(cfg: RunConfig) -> Optional[float]:
    """γ of the near-synchronisation attention terms: 0 without attention, γ for V = γI, None when V
    is an explicit matrix or the attention is a variant other than L² (equal to softmax on the
    sphere) (no closed form derived; SPEC §7).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.

    Returns
    -------
    float or None
        γ.
    """
    if not cfg.attention:
        return 0.0
    return cfg.gamma_value if cfg.V is None and cfg.attention_kind in ("softmax", "l2") else None


def near_sync_horizon(kappa: float, kappa_prime: float) -> float:
    """1/(2(κ + κ')): near synchronisation 1 − ⟨x, y⟩ of a pair is close to a geometric Brownian motion
    whose log has variance 4(κ + κ') t (SPEC §5 two-point motion); the sample mean of n such paths
    estimates the first moment well only while that variance is O(1), so the first-moment rate is
    measured on t ≤ 1/(2(κ + κ')) (log-variance ≤ 2). ``inf`` without noise.

    Parameters
    ----------
    kappa : float
        κ(1).
    kappa_prime : float
        κ'(1).

    Returns
    -------
    float
        The horizon.
    """
    return math.inf if kappa + kappa_prime <= 0 else 1.0 / (2.0 * (kappa + kappa_prime))


#: Per-coordinate spread of a near-synchronised cluster for a smooth kernel: the rate's bias is of
#: order d·spread² there (2e-4 at d = 128).
SMOOTH_SPREAD = 1e-3
#: Chordal size √d·spread of the cluster for a kinked activation (KINKED_ACTIVATIONS, or any callable,
#: whose regularity is unknown): the (1 − u)^{3/2} term of the kernel lowers the measured λ̄ by about
#: 0.15·√d·spread (measured for ReLU: docs/synchronisation.md), 1.5e-5 at this size.
KINKED_CHORD = 1e-4


def near_sync_spread(activation, d: int) -> float:
    """Per-coordinate spread of the near-synchronisation cluster, chosen from the kernel's regularity
    at u = 1: SMOOTH_SPREAD for a smooth activation, KINKED_CHORD/√d for a kinked one or a callable.

    Parameters
    ----------
    activation : str or callable
        φ.
    d : int
        Token dimension.

    Returns
    -------
    float
        The spread.
    """
    if isinstance(activation, str) and activation not in KINKED_ACTIVATIONS:
        return SMOOTH_SPREAD
    return KINKED_CHORD / math.sqrt(d)


def epsilon_of_gamma(gamma: float) -> float:
    """Assumption 2's ε for V = γI, Qᵀ K = βI with β the energy's β (**derived**,
    `stochformer.experiments.repulsion`): 0 for γ ≥ 0, −2γ otherwise.

    Parameters
    ----------
    gamma : float
        The attention's γ.

    Returns
    -------
    float
        ε.
    """
    return max(0.0, -2.0 * gamma)


def epsilon(cfg: RunConfig) -> tuple[Optional[float], str]:
    """Assumption 2's ε for the attention of ``cfg`` and why: 0 without attention, max(0, −2γ) for
    softmax (or L²) attention with Qᵀ K = βI, V = γI and β = ``energy_beta`` (the energy's β);
    None where it is not derived (an explicit Q, K or V, another variant, or β ≠ energy_beta: the
    energy of the flow is then not E_β and ε = 2δ does not follow).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.

    Returns
    -------
    tuple
        (ε or None, the reason).
    """
    if not cfg.attention:
        return 0.0, "no attention: ε = 0"
    if cfg.attention_kind not in ("softmax", "l2") or any(getattr(cfg, k) is not None for k in ("Q", "K", "V")):
        return None, "ε not derived for this attention (explicit Q, K or V, or a variant)"
    if not math.isclose(cfg.beta, cfg.energy_beta, rel_tol=1e-12, abs_tol=0.0):
        return None, (f"ε not derived: attention β = {cfg.beta:g} differs from the energy's β = {cfg.energy_beta:g} "
                      "(ε = 2δ holds for E_β with the attention's own β)")
    g = cfg.gamma_value
    return epsilon_of_gamma(g), ("ε = 0 (γ ≥ 0: the flow is dissipative)" if g >= 0 else f"ε = −2γ = {-2 * g:g}")


def energy_max(N: int, beta: float) -> float:
    """The largest E_β of N unit tokens: ½(1 − 1/N)(e^β − e^{−β/(N−1)}) (the diagonal gives e^β/N;
    by Jensen the mean of e^{β⟨x_i, x_j⟩} over i ≠ j is at least e^{β·mean}, and the mean cosine
    over i ≠ j is at least −1/(N − 1)).

    Parameters
    ----------
    N : int
        Tokens, >= 2.
    beta : float
        The energy's β.

    Returns
    -------
    float
        The largest E_β.
    """
    return 0.5 * (1 - 1 / N) * (math.expm1(beta) - math.expm1(-beta / (N - 1)))  # exact as β → 0


def predicted_rates(cfg: RunConfig, with_bound: bool = True) -> dict[str, Any]:
    """κ(1), κ'(1), λ₁, λ̄ (``*_noise``: noise only, noise scale included), the attention-shifted predictions
    ``lambda_1_pred = λ₁ − γ``, ``lambda_bar_pred = λ̄ − 2γ``, Theorem 1.4's ``λ̄'`` (noise only),
    Assumption 2's ``epsilon`` ([`epsilon`][stochformer.experiments.sync.epsilon], with ``epsilon_note``) and the bound
    ``bound_pred = ε + λ̄'`` (None where ε is not derived). Without noise (``mlp = false`` or s = 0)
    the noise terms are 0.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    with_bound : bool, optional
        Also compute Theorem 1.4's λ̄' (a search over u).

    Returns
    -------
    dict
        The predictions by name (None where not derived).
    """
    if cfg.mlp and cfg.noise_scale > 0:
        kern = make_kernel(cfg)
        k, kp = kern.kappa1, kern.kappa1_prime
        lam1, lbar = lyapunov_exponent(k, kp, cfg.d), first_moment_rate(k, kp, cfg.d)
        lbp = lambda_bar_prime(kern, cfg.energy_beta) if with_bound else None
    else:
        k = kp = lam1 = lbar = lbp = 0.0
    g = attention_gamma(cfg)
    eps, why = epsilon(cfg)
    return {
        "kappa": k,
        "kappa_prime": kp,
        "lambda_1_noise": lam1,
        "lambda_bar_noise": lbar,
        "gamma": g,
        "lambda_1_pred": None if g is None else lam1 - g,
        "lambda_bar_pred": None if g is None else lbar - 2 * g,
        "lambda_bar_prime_pred": lbp,
        "epsilon": eps,
        "epsilon_note": why,
        "bound_pred": None if eps is None or lbp is None else eps + lbp,
    }


# --------------------------------------------------------------------------- estimators


def separation(X: torch.Tensor) -> torch.Tensor:
    """Chordal distance |x₁ − x₀| of a pair X: (batch, 2, d) → (batch,).

    Parameters
    ----------
    X : torch.Tensor, shape (batch, 2, d)
        Pairs.

    Returns
    -------
    torch.Tensor, shape (batch,)
        |x₁ − x₀|.
    """
    return torch.linalg.vector_norm(X[:, 1] - X[:, 0], dim=-1)


def companion(x: torch.Tensor, direction: torch.Tensor, eps: float) -> torch.Tensor:
    """LN(x + eps·u), u the unit tangent part of ``direction`` at x: (batch, d) → (batch, d).

    Parameters
    ----------
    x : torch.Tensor, shape (batch, d)
        Unit tokens.
    direction : torch.Tensor, shape (batch, d)
        Directions (their tangent part is used).
    eps : float
        The distance.

    Returns
    -------
    torch.Tensor, shape (batch, d)
        Unit tokens near x.
    """
    u = tangent(x, direction)
    return normalize(x + eps * u / torch.linalg.vector_norm(u, dim=-1, keepdim=True))


def pair_start(batch: int, d: int, eps: float, generator: torch.Generator, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """A uniform token and a companion at distance ≈ eps in a uniform tangent direction: (batch, 2, d).

    Parameters
    ----------
    batch : int
        Pairs.
    d : int
        Token dimension.
    eps : float
        The initial distance.
    generator : torch.Generator
        The draws.
    dtype : torch.dtype, optional
        The tokens' dtype.
    device : str or torch.device, optional
        Their device.

    Returns
    -------
    torch.Tensor, shape (batch, 2, d)
        The pairs.
    """
    x = uniform(batch, 1, d, generator=generator, dtype=dtype, device=device)[:, 0]
    v = torch.randn(batch, d, generator=generator, dtype=dtype, device=device)
    return torch.stack([x, companion(x, v, eps)], dim=1)


def benettin(
    model: Model, X0: torch.Tensor, T: float, L: int, generator: torch.Generator, eps: float, progress: bool = False,
    path: Optional[BrownianPath] = None,
) -> np.ndarray:
    """Cumulative log-growth of a pair's separation, renormalised to ``eps`` after every step
    (a [`solve`][stochformer.solve] hook).

    X0: (batch, 2, d); ``path``: a shared Brownian path (couplings across step sizes). Returns S:
    (batch, L+1), S[:, 0] = 0, S[:, ℓ] = Σ_{k<ℓ} log(δ_{k+1}/δ_k⁺).

    Parameters
    ----------
    model : Model
        The step.
    X0 : torch.Tensor, shape (batch, 2, d)
        The pairs.
    T : float
        The horizon.
    L : int
        Steps.
    generator : torch.Generator
        The run's generator.
    eps : float
        The renormalised separation.
    progress : bool, optional
        Show progress bars (on a terminal).
    path : BrownianPath, optional
        A shared Brownian path.

    Returns
    -------
    numpy.ndarray, shape (batch, L + 1)
        S, the cumulative log-growth.
    """
    S = torch.zeros(X0.shape[0], L + 1, dtype=torch.float64)
    before = [separation(X0)]

    def renormalise(ell: int, X: torch.Tensor) -> torch.Tensor:
        after = separation(X)
        S[:, ell] = S[:, ell - 1] + torch.log(after / before[0]).double().cpu()
        X = torch.stack([X[:, 0], companion(X[:, 0], X[:, 1] - X[:, 0], eps)], dim=1)
        before[0] = separation(X)
        return X

    with blamed_on(None, "pair tokens"):
        solve(model, X0, T, L, SaveAt(stats=(), final=False), generator=generator, path=path, hook=renormalise,
              progress=ProgressMeter("lyapunov") if progress else None)
    return S.numpy()


def endpoint_rate(S: np.ndarray, T: float) -> tuple[float, float]:
    """λ̂ = mean(S_T)/T and its SE std(S_T)/(T√n), from S: (n, n_times).

    Parameters
    ----------
    S : numpy.ndarray, shape (n, n_times)
        Cumulative log-growth.
    T : float
        The horizon.

    Returns
    -------
    tuple of float
        (λ̂, SE).
    """
    end = S[:, -1]
    return float(end.mean() / T), float(end.std(ddof=1) / (T * math.sqrt(len(end))))


def log_mean_slope(t: np.ndarray, values: np.ndarray, mask: Optional[np.ndarray] = None) -> float:
    """Least-squares slope of log(mean over samples) against t. values: (n, n_times).

    Parameters
    ----------
    t : numpy.ndarray, shape (n_times,)
        Times.
    values : numpy.ndarray, shape (n, n_times)
        Positive paths.
    mask : numpy.ndarray of bool, shape (n_times,), optional
        The times fitted (default: all).

    Returns
    -------
    float
        The slope.
    """
    mask = np.ones(len(t), bool) if mask is None else mask
    times = len(np.unique(t[mask]))
    if times < 2:
        raise ValueError(f"mask: a slope needs at least 2 distinct times in the fit window (got {times})")
    y = np.log(values[:, mask].mean(axis=0))
    return float(np.polyfit(t[mask], y, 1)[0])


def moment_rate(
    t: np.ndarray, values: np.ndarray, mask: Optional[np.ndarray] = None, n_boot: int = 400, seed: int = 0
) -> tuple[float, float]:
    """First-moment rate of positive paths ``values: (n, n_times)`` at times ``t``: the slope of
    log(sample mean) against t (on ``mask``), and its bootstrap SE over the n samples
    ([`stochformer.measure.stats.resampled_se`][stochformer.measure.stats.resampled_se]).

    Parameters
    ----------
    t : numpy.ndarray, shape (n_times,)
        Times.
    values : numpy.ndarray, shape (n, n_times)
        Positive paths.
    mask : numpy.ndarray of bool, shape (n_times,), optional
        The times fitted (default: all).
    n_boot : int, optional
        Bootstrap resamples.
    seed : int, optional
        Seed of the resampling.

    Returns
    -------
    tuple of float
        (rate, SE).
    """
    rate, boot = moment_rate_bootstrap(t, values, mask, n_boot, seed)
    return rate, resampled_se(boot, values.shape[0])


def moment_rate_bootstrap(
    t: np.ndarray, values: np.ndarray, mask: Optional[np.ndarray] = None, n_boot: int = 400, seed: int = 0
) -> tuple[float, np.ndarray]:
    """[`moment_rate`][stochformer.experiments.sync.moment_rate]'s slope and its ``n_boot`` bootstrap slopes (resampling whole paths; the
    resampled indices depend only on ``seed``, n_boot and n, so runs of the same samples at other
    step sizes are resampled jointly).

    Parameters
    ----------
    t : numpy.ndarray, shape (n_times,)
        Times.
    values : numpy.ndarray, shape (n, n_times)
        Positive paths.
    mask : numpy.ndarray of bool, shape (n_times,), optional
        The times fitted (default: all).
    n_boot : int, optional
        Bootstrap resamples.
    seed : int, optional
        Seed of the resampling.

    Returns
    -------
    tuple
        (rate, the bootstrap slopes (n_boot,)).
    """
    mask = np.ones(len(t), bool) if mask is None else mask
    rate = log_mean_slope(t, values, mask)
    rng = np.random.default_rng(seed)
    v = values[:, mask]
    tt = t[mask] - t[mask].mean()
    n = v.shape[0]
    idx = rng.integers(0, n, size=(n_boot, n))
    # the resampled means as one product: how often each path is drawn, (n_boot, n), times the
    # paths; gathering v[idx] instead is an (n_boot, n, n_t) array (10 GB at the full table's sizes)
    counts = np.bincount((np.arange(n_boot)[:, None] * n + idx).ravel(), minlength=n_boot * n).reshape(n_boot, n)
    y = np.log(counts @ v / n)  # (n_boot, n_t)
    return rate, ((y - y.mean(axis=1, keepdims=True)) @ tt) / (tt @ tt)


# --------------------------------------------------------------------------- the experiment


@dataclass(repr=False)
class SyncResult(Result):
    """Measured and predicted rates for one config (see [`run_sync`][stochformer.experiments.sync.run_sync]).

    ``times``: (L+1,) times t = ℓ T/L (``near_times`` for the near-synchronisation run); ``log_growth``: (mean, se) of the cumulative log-separation;
    ``energy_near`` / ``energy_uniform``: (mean, se) of E_β per time (None if not run).

    Attributes
    ----------
    config : SyncConfig
        The configuration run.
    measured, predicted : dict
        The rates measured (with SEs) and their closed forms.
    times, near_times : numpy.ndarray
        The time axes.
    log_growth, energy_near, energy_uniform : tuple of numpy.ndarray
        (mean, SE) curves.
    """

    command: ClassVar[str] = "sync"
    summary_name: ClassVar[str] = "sync.json"
    config: SyncConfig
    measured: dict
    predicted: dict
    times: np.ndarray
    near_times: np.ndarray
    log_growth: tuple[np.ndarray, np.ndarray]
    energy_near: tuple[np.ndarray, np.ndarray]
    energy_uniform: Optional[tuple[np.ndarray, np.ndarray]]
    fit_mask_uniform: Optional[np.ndarray]
    provenance: dict
    elapsed_s: float
    log_growth_pairs: Optional[np.ndarray] = None
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``sync.json``: the measured rates with SEs beside the predictions and the curves.

        Returns
        -------
        dict
            JSON-able.
        """
        curves = {
            "times": self.times,
            "log_growth_mean": self.log_growth[0],
            "log_growth_se": self.log_growth[1],
            "near_times": self.near_times,
            "energy_near_mean": self.energy_near[0],
            "energy_near_se": self.energy_near[1],
        }
        if self.energy_uniform is not None:
            curves.update(energy_uniform_mean=self.energy_uniform[0], energy_uniform_se=self.energy_uniform[1])
        return {**self.measured, **self.predicted, "dynamics": self.config.model.dynamics, "curves": curves}

    def table(self) -> list[dict]:
        """Rows (quantity, measured, SE, extrapolation error ``err`` (0 where not extrapolated),
        predicted, ``n`` (the paths behind an energy rate's SE, for Student's t; None for λ₁, a mean
        over many pairs), ``rule``: "matches" or, for Theorem 1.4's bound ε + λ̄', "at_most"; z =
        (measured − predicted)/√(SE² + err²) for a "matches" row only (None for the bound: an
        inequality has no z-score); ``reach``: the largest rate the observable can show, for the bound).

        Returns
        -------
        list of dict
            One row per quantity.
        """
        m, p = self.measured, self.predicted
        limit = ", Δt → 0" if self.config.extrapolate else ""
        rows = [
            (f"lambda_1 (pair log-distance{limit})", m["lambda_1"], m["lambda_1_se"], m["lambda_1_extrap_err"],
             p["lambda_1_pred"], None),
            (f"energy rate near sync{limit}", m["energy_rate"], m["energy_rate_se"], m.get("energy_rate_extrap_err", 0.0),
             p["lambda_bar_pred"], m.get("energy_rate_n")),
        ]
        if m.get("energy_rate_uniform") is not None:
            rows.append((f"energy rate from uniform (bound ε + λ̄'{limit})", m["energy_rate_uniform"],
                         m["energy_rate_uniform_se"], m.get("energy_rate_uniform_extrap_err", 0.0), p.get("bound_pred"),
                         m.get("energy_rate_uniform_n")))
        out = []
        for name, val, se, err, pred, n in rows:
            bound = "bound" in name
            z = None if bound or pred is None or not (se or err) else (val - pred) / math.hypot(se, err)
            row = {"quantity": name, "measured": val, "se": se, "err": err, "predicted": pred, "z": z, "n": n,
                   "rule": "at_most" if bound else "matches"}
            if bound:
                row.update(reach=m.get("energy_rate_uniform_reach"), epsilon=p.get("epsilon"),
                           lambda_bar_prime=p.get("lambda_bar_prime_pred"), note=p.get("epsilon_note", ""))
            out.append(row)
        return out

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "near_time": {"long_name": "time t of the near-synchronisation run", "units": TIME_UNITS},
            "near_step": {"long_name": "step (layer) of the near-synchronisation run", "units": "1"},
            "energy_near": {"long_name": "interaction energy E_β from a near-synchronised cluster", "units": "1"},
            "energy_uniform": {"long_name": "interaction energy E_β from uniform tokens", "units": "1"},
            "fit_uniform": {"long_name": "1 where t is in the fit window of the energy rate from uniform tokens, else 0", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        """Curves (sample mean and SE) over ``time`` (with ``step``) and ``near_time`` (with
        ``near_step``); ``log_growth``: (pair, time), the cumulative log-distance of the first
        `PAIR_PATHS` pairs (of the run at L steps); the rates and predictions as attributes
        (None ones left out)."""
        data: dict[str, tuple[Any, np.ndarray]] = {
            "log_growth_mean": ("time", self.log_growth[0]), "log_growth_se": ("time", self.log_growth[1]),
            "energy_near_mean": ("near_time", self.energy_near[0]), "energy_near_se": ("near_time", self.energy_near[1]),
        }
        if self.log_growth_pairs is not None:
            data["log_growth"] = (("pair", "time"), self.log_growth_pairs)
        if self.energy_uniform is not None:
            data.update(energy_uniform_mean=("time", self.energy_uniform[0]), energy_uniform_se=("time", self.energy_uniform[1]))
        if self.fit_mask_uniform is not None:
            data["fit_uniform"] = ("time", np.asarray(self.fit_mask_uniform, dtype=np.int8))
        coords = {"time": self.times, "step": ("time", np.arange(len(self.times))),
                  "near_time": self.near_times, "near_step": ("near_time", np.arange(len(self.near_times)))}
        ds = xr.Dataset(data, coords=coords)
        ds.attrs.update(numeric_attrs({**self.measured, **self.predicted}))
        return ds


#: a value of `richardson`: a number, or an array extrapolated element by element
_Extrapolated = TypeVar("_Extrapolated", float, np.ndarray)


def richardson(values: dict[int, _Extrapolated]) -> tuple[_Extrapolated, _Extrapolated]:
    """Extrapolate a quantity with a bias a·Δt + b·Δt² + … in Δt = T/n to Δt → 0 from its values at
    n = L, L/2, L/4 steps (``values: {n: value}``; arrays work too, element by element): the
    second-order Richardson value (8λ(L) − 6λ(L/2) + λ(L/4))/3, and as its extrapolation error the
    distance to the first-order value 2λ(L) − λ(L/2) (what the Δt² term moved it).

    Parameters
    ----------
    values : dict
        n → value (a number or an array) at n = L, L/2, L/4.

    Returns
    -------
    tuple
        (the extrapolated value, its error).
    """
    L = max(values)
    levels = [values[L], values[L // 2], values[L // 4]]
    second = richardson_steps(levels)
    return second, abs(second - richardson_steps(levels[:2]))


def coupling_path(noise, shape: tuple[int, ...], steps: int, seed: int, dtype, device) -> Optional[BrownianPath]:
    """The one Brownian path of the Δt → 0 extrapolation: normals of the noise source's shape for
    tokens ``shape = (batch, N, d)`` on ``steps`` fine steps (None without noise).

    Parameters
    ----------
    noise : NoiseSource or None
        The noise source.
    shape : tuple of int
        (batch, N, d) of the tokens.
    steps : int
        Fine steps.
    seed : int
        The path's seed.
    dtype : torch.dtype
        The normals' dtype.
    device : str or torch.device
        Their device.

    Returns
    -------
    BrownianPath or None
        The path.
    """
    if noise is None:
        return None
    parts = noise.path_shape(shape[0], shape[-1]) if hasattr(noise, "path_shape") else shape
    return BrownianPath(parts, steps, seed=seed, dtype=dtype, device=device)


def pair_config(cfg: RunConfig) -> RunConfig:
    """The config [`measure_lyapunov`][stochformer.experiments.sync.measure_lyapunov] runs for ``cfg``:
    N = 2 tokens started as a pair (the config a factory given as ``model=`` is called with).

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.

    Returns
    -------
    RunConfig
        ``cfg`` with N = 2 and ``init.kind = "pair"``.
    """
    return cfg.model_copy(update={"N": 2, "init": InitConfig(kind="pair")})


def measure_lyapunov(cfg: RunConfig, pairs: int, eps: float = 1e-4, seed: Optional[int] = None, progress: bool = False,
                     extrapolate: bool = True, env: Optional[Setup] = None, model: Optional[Model] = None) -> dict:
    """Benettin estimate of the pair exponent for ``cfg`` (N is forced to 2): λ̂₁, its SE and the
    mean/SE curve of the cumulative log-growth (at L steps). JSON-able (usable as a task).

    ``extrapolate``: also run L/2 and L/4 steps from the same pairs on the same Brownian path
    (common random numbers, so the differences are sharp) and report the Δt → 0 value of
    [`richardson`][stochformer.experiments.sync.richardson] as ``lambda_1`` (``lambda_1_se``: the SE over pairs of the per-pair
    combination; ``lambda_1_extrap_err``: the extrapolation error; ``lambda_1_steps``: {steps:
    λ̂₁}); needs L divisible by 4. Otherwise ``lambda_1`` is the estimate at L steps.

    ``env``: the run's [`Setup`][stochformer.config.build.Setup] (default ``setup(cfg)``); ``model``: a
    model stepped instead of the config's (checked by the caller for
    [`pair_config`][stochformer.experiments.sync.pair_config] of ``cfg``:
    [`GivenModels`][stochformer.config.build.GivenModels]). Either is the same object at every step count.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    pairs : int
        Pairs (the batch).
    eps : float, optional
        The renormalised separation.
    seed : int, optional
        The seed (default: the config's).
    progress : bool, optional
        Show progress bars (on a terminal).
    extrapolate : bool, optional
        Also run L/2 and L/4 steps and extrapolate Δt → 0.
    env : Setup, optional
        The run's device, dtype and seeds (default: resolved from ``cfg``).
    model : Model, optional
        A model stepped instead of the one ``cfg`` describes.

    Returns
    -------
    dict
        λ̂₁, its SE (and extrapolation error) and the mean/SE curve, JSON-able.
    """
    cfg = pair_config(cfg)
    check_extrapolation(cfg.L, extrapolate)
    env = env or setup(cfg)
    dtype, device = env.dtype, env.device
    seed = cfg.seed if seed is None else seed
    gen = env.generator(seed)
    X0 = pair_start(pairs, cfg.d, eps, gen, dtype, device)
    model = make_model(cfg, dtype, device) if model is None else model
    if not extrapolate:
        with blamed_on(cfg):
            S = benettin(model, X0, cfg.T, cfg.L, gen, eps, progress)
        lam, se = endpoint_rate(S, cfg.T)
        mean, sem = mean_and_se(torch.from_numpy(S))
        return {"lambda_1": lam, "lambda_1_se": se, "log_growth_mean": mean.numpy(), "log_growth_se": sem.numpy(),
                "log_growth": S[:PAIR_PATHS]}
    s_model, s_path = env.seeds(2, seed)
    path = coupling_path(getattr(model, "noise", None), tuple(X0.shape), cfg.L, s_path, dtype, device)
    ends, curves, first = {}, None, None
    for k in EXTRAPOLATION_LEVELS:
        n = cfg.L // k
        with blamed_on(cfg):
            S = benettin(model, X0, cfg.T, n, env.generator(s_model), eps, progress, path)
        ends[n] = S[:, -1] / cfg.T
        curves = curves or mean_and_se(torch.from_numpy(S))
        first = S[:PAIR_PATHS] if first is None else first
    assert curves is not None, "EXTRAPOLATION_LEVELS: not empty"
    lam, err = richardson({n: float(v.mean()) for n, v in ends.items()})
    per_pair = richardson(ends)[0]  # the same linear combination, pair by pair
    return {"lambda_1": lam, "lambda_1_se": float(per_pair.std(ddof=1) / math.sqrt(pairs)),
            "lambda_1_extrap_err": err, "lambda_1_steps": {str(n): float(v.mean()) for n, v in ends.items()},
            "log_growth_mean": curves[0].numpy(), "log_growth_se": curves[1].numpy(), "log_growth": first}


def energy_paths(cfg: RunConfig, init: InitConfig, seed: int, progress: bool = False, env: Optional[Setup] = None,
                 model: Optional[Model] = None) -> np.ndarray:
    """E_β per sample and layer for ``cfg`` started from ``init``: (batch, L+1). ``env``, ``model``:
    as for [`measure_lyapunov`][stochformer.experiments.sync.measure_lyapunov].

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    init : InitConfig
        The initial tokens' law.
    seed : int
        The seed.
    progress : bool, optional
        Show progress bars (on a terminal).
    env : Setup, optional
        The run's device, dtype and seeds (default: resolved from ``cfg``).
    model : Model, optional
        A model stepped instead of the one ``cfg`` describes.

    Returns
    -------
    numpy.ndarray, shape (batch, L + 1)
        E_β per sample and layer.
    """
    env = env or setup(cfg)
    dtype, device = env.dtype, env.device
    gen = env.generator(seed)
    X0 = initial_tokens(init, cfg.batch, cfg.N, cfg.d, gen, dtype, device)
    save = SaveAt(stats=("energy",), final=False, energy_beta=cfg.energy_beta)
    with blamed_on(cfg):
        ds = solve((make_model(cfg, dtype, device) if model is None else model), X0, cfg.T, cfg.L, save, generator=gen,
                   progress=ProgressMeter("energy") if progress else None)
    return ds["energy"].values


def energy_levels(cfg: RunConfig, init: InitConfig, seed: int, progress: bool = False, env: Optional[Setup] = None,
                  model: Optional[Model] = None) -> dict[int, np.ndarray]:
    """E_β per sample and step for ``cfg`` started from ``init`` at n = L, L/2, L/4 steps
    (`EXTRAPOLATION_LEVELS`): the same initial tokens, driven by one [`BrownianPath`][stochformer.experiments.sync.BrownianPath]
    (common random numbers, as [`measure_lyapunov`][stochformer.experiments.sync.measure_lyapunov]): ``{n: (batch, n+1)}``; L a multiple of 4.
    ``env``, ``model``: as for ``measure_lyapunov``.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    init : InitConfig
        The initial tokens' law.
    seed : int
        The seed.
    progress : bool, optional
        Show progress bars (on a terminal).
    env : Setup, optional
        The run's device, dtype and seeds (default: resolved from ``cfg``).
    model : Model, optional
        A model stepped instead of the one ``cfg`` describes.

    Returns
    -------
    dict
        n → E_β paths (batch, n + 1).
    """
    check_extrapolation(cfg.L, True)
    env = env or setup(cfg)
    dtype, device = env.dtype, env.device
    s_init, s_model, s_path = env.seeds(3, seed)
    X0 = initial_tokens(init, cfg.batch, cfg.N, cfg.d, env.generator(s_init), dtype, device)
    model = make_model(cfg, dtype, device) if model is None else model
    path = coupling_path(getattr(model, "noise", None), tuple(X0.shape), cfg.L, s_path, dtype, device)
    save = SaveAt(stats=("energy",), final=False, energy_beta=cfg.energy_beta)
    out = {}
    for k in EXTRAPOLATION_LEVELS:
        n = cfg.L // k
        with blamed_on(cfg):
            ds = solve(model, X0, cfg.T, n, save,
                       generator=env.generator(s_model), path=path,
                       progress=ProgressMeter(f"energy ({n} steps)") if progress else None)
        out[n] = ds["energy"].values
    return out


def extrapolated_moment_rate(T: float, levels: dict[int, np.ndarray], fit_from: float = 0.0, n_boot: int = 400,
                             seed: int = 0) -> dict:
    """The first-moment rate ([`moment_rate`][stochformer.experiments.sync.moment_rate], fitted on t ≥ fit_from·T) of the paths ``levels:
    {n: (batch, n+1)}`` at n steps of [0, T]. With one level: ``rate``, ``se`` and ``err = 0``. With
    n = L, L/2, L/4 ([`energy_levels`][stochformer.experiments.sync.energy_levels]): ``rate`` the [`richardson`][stochformer.experiments.sync.richardson] value, ``err`` its
    extrapolation error, ``se`` the SD of the same combination of the jointly resampled bootstrap
    slopes, and ``steps``: {n: rate at n steps}. ``paths``: the number S of paths; ``se`` is
    [`stochformer.measure.stats.resampled_se`][stochformer.measure.stats.resampled_se] of S samples (for Student's t with S − 1 degrees of freedom).

    Parameters
    ----------
    T : float
        The horizon.
    levels : dict
        n → paths (batch, n + 1).
    fit_from : float, optional
        Fit on t >= fit_from·T.
    n_boot : int, optional
        Bootstrap resamples.
    seed : int, optional
        Seed of the resampling.

    Returns
    -------
    dict
        ``rate``, ``se``, ``err`` and the fit window.
    """
    rates, boots = {}, {}
    for n, values in levels.items():
        rates[n], boots[n] = moment_rate_bootstrap(np.arange(n + 1) * (T / n), values, fit_window(n, T, fit_from), n_boot, seed)
    paths = next(iter(levels.values())).shape[0]
    if len(levels) == 1:
        (n,) = levels
        return {"rate": rates[n], "se": resampled_se(boots[n], paths), "err": 0.0, "steps": {}, "paths": paths}
    rate, err = richardson(rates)
    return {"rate": rate, "se": resampled_se(richardson(boots)[0], paths), "err": err,
            "steps": {str(n): r for n, r in rates.items()}, "paths": paths}


def growth_reach(t: np.ndarray, energy_mean: np.ndarray, mask: np.ndarray, N: int, beta: float) -> Optional[float]:
    """The largest rate at which the mean energy can grow over the fit window ``mask`` of times ``t``:
    from its value at the window's start to [`energy_max`][stochformer.experiments.sync.energy_max] over the window's length (None when
    the window is empty or the energy is not positive there).

    Parameters
    ----------
    t : numpy.ndarray
        Times.
    energy_mean : numpy.ndarray
        The mean energy at t.
    mask : numpy.ndarray of bool
        The fit window.
    N : int
        Tokens.
    beta : float
        The energy's β.

    Returns
    -------
    float or None
        The largest rate.
    """
    idx = np.nonzero(mask)[0]
    if len(idx) < 2 or not energy_mean[idx[0]] > 0 or not energy_max(N, beta) > 0:
        return None
    return float(math.log(energy_max(N, beta) / energy_mean[idx[0]]) / (t[idx[-1]] - t[idx[0]]))


def _energy_rate(cfg: RunConfig, init: InitConfig, seed: int, fit_from: float, n_boot: int, extrapolate: bool,
                 progress: bool, env: Setup, model: Optional[Model]) -> tuple[dict, np.ndarray]:
    """The energy rate of ``cfg`` from ``init`` (extrapolated to Δt → 0 or at L steps) and the paths at L steps."""
    levels = (energy_levels(cfg, init, seed, progress, env, model) if extrapolate
              else {cfg.L: energy_paths(cfg, init, seed, progress, env, model)})
    return extrapolated_moment_rate(cfg.T, levels, fit_from, n_boot, seed), levels[cfg.L]


@validated
def run_sync(cfg: SyncConfig, progress: bool = False, model: Optional[ModelSource] = None) -> SyncResult:
    """Measure λ₁ (pairs), the energy rate near synchronisation (cluster of ``near_spread``) and
    from uniform tokens, for ``cfg.model.dynamics``; return them beside the closed forms.

    ``model``: a ``Transformer`` (``model.dynamics = "transformer"``) or ``LimitSDE`` (``"sde"``)
    or any [`Model`][stochformer.integrate.Model] built by hand for ``model.d``, stepped in every
    measurement instead of the one ``cfg.model`` describes; or a factory ``model(run_cfg) -> model``
    called with each measurement's config (the pairs' [`pair_config`][stochformer.experiments.sync.pair_config],
    the near-synchronisation run's shorter horizon, the uniform run's ``cfg.model``). Checked before
    any work ([`GivenModels`][stochformer.config.build.GivenModels]: ``TypeError`` naming ``model``,
    ``ConfigError`` naming ``model.d``); the predictions still come from ``cfg.model``, and
    ``result.meta["model"]`` records the model. ``model = make_model(cfg.model)`` (or ``model =
    make_model``) gives the numbers of the run without it.

    Parameters
    ----------
    cfg : SyncConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).
    model : Model or callable, optional
        A model built by hand, or a factory building one from a run's config.

    Returns
    -------
    SyncResult
        The measured rates beside the predictions.
    """
    cfg = as_config(cfg, SyncConfig)
    run = cfg.model
    predicted = predicted_rates(run)
    T_near = cfg.near_horizon or min(run.T, near_sync_horizon(predicted["kappa"], predicted["kappa_prime"]))
    L_near = near_steps(run.L, run.T, T_near, cfg.extrapolate)
    near_cfg = run.model_copy(update={"T": T_near, "L": L_near})
    given = GivenModels.check(model, [pair_config(run), near_cfg] + ([run] if cfg.uniform_start else []), "sync",
                              prefix="model.")
    env = setup(cfg)
    start = time.perf_counter()
    seeds = env.seeds(3)
    times = np.arange(run.L + 1) * run.dt
    lyap = measure_lyapunov(run, cfg.pairs, cfg.eps, seeds[0], progress, cfg.extrapolate, env,
                            given.get(pair_config(run), "lyapunov"))
    near_times = np.arange(L_near + 1) * near_cfg.dt
    spread = cfg.near_spread or near_sync_spread(run.activation, run.d)
    fit, near = _energy_rate(near_cfg, InitConfig(kind="cluster", spread=spread), seeds[1], 0.0, cfg.bootstrap,
                             cfg.extrapolate, progress, env, given.get(near_cfg, "near"))
    measured = {"lambda_1": lyap["lambda_1"], "lambda_1_se": lyap["lambda_1_se"],
                "lambda_1_extrap_err": lyap.get("lambda_1_extrap_err", 0.0), "energy_rate": fit["rate"],
                "energy_rate_se": fit["se"], "energy_rate_extrap_err": fit["err"], "energy_rate_n": fit["paths"],
                "near_spread": spread}
    measured.update({f"lambda_1_at_{n}_steps": v for n, v in lyap.get("lambda_1_steps", {}).items()})
    measured.update({f"energy_rate_at_{n}_steps": v for n, v in fit["steps"].items()})
    uni_curve = mask = None
    if cfg.uniform_start:
        fit_u, uni = _energy_rate(run, InitConfig(kind="uniform"), seeds[2], cfg.fit_from, cfg.bootstrap,
                                  cfg.extrapolate, progress, env, given.get(run, "uniform"))
        mask = fit_window(run.L, run.T, cfg.fit_from)
        measured.update(energy_rate_uniform=fit_u["rate"], energy_rate_uniform_se=fit_u["se"],
                        energy_rate_uniform_extrap_err=fit_u["err"], energy_rate_uniform_n=fit_u["paths"])
        measured.update({f"energy_rate_uniform_at_{n}_steps": v for n, v in fit_u["steps"].items()})
        uni_mean, uni_se = mean_and_se(torch.from_numpy(uni))
        uni_curve = (uni_mean.numpy(), uni_se.numpy())
        measured["energy_rate_uniform_reach"] = growth_reach(times, uni_curve[0], mask, run.N, run.energy_beta)
    near_mean, near_se = mean_and_se(torch.from_numpy(near))
    near_curve = (near_mean.numpy(), near_se.numpy())
    return SyncResult(
        config=cfg,
        measured=measured,
        predicted=predicted,
        times=times,
        near_times=near_times,
        log_growth=(lyap["log_growth_mean"], lyap["log_growth_se"]),
        energy_near=near_curve,
        energy_uniform=uni_curve,
        fit_mask_uniform=mask,
        provenance=env.provenance(),
        elapsed_s=time.perf_counter() - start,
        log_growth_pairs=lyap["log_growth"],
        meta=given.meta(),
    )
