"""``spectrum``: the whole Lyapunov spectrum of one token's tangent flow, measured by Benettin's
method beside the closed form of SPEC §8 (derived in docs/spectrum.md).

One token (N = 1: attention plays no part) is stepped by the transformer's layer (SPEC §1, the
random MLP) or by the limit SDE (SPEC §3) together with a frame of k = d − 1 orthonormal tangent
vectors ([`TangentFlow`][stochformer.model.tangent.TangentFlow], stepped by [`stochformer.solve`][stochformer.solve]).
Each step's tangent map is the derivative of the step with its randomness held fixed, through the
1-jet of the noise at the token (closed form, or ``jacobian = "autodiff"``: ``torch.func.jvp`` of
the model's own step); after every step a hook renormalises the frame by QR (JV = Q R,
[`reorthonormalise`][stochformer.model.tangent.reorthonormalise]) and accumulates log R_ii. Per sample the
exponent estimates are λ̂_i = Σ_steps log R_ii / T (samples independent: SE = SD/√n).

* **Δt → 0** (``extrapolate``, default): the same samples run L, L/2 and L/4 steps on one
  [`BrownianPath`][stochformer.core.brownian.BrownianPath] (the jet's normals; common random numbers) and the
  per-sample [`richardson`][stochformer.experiments.sync.richardson] combination is averaged (its SD/√n
  is the SE; the distance to the first-order value is the extrapolation error ``err``).
* **1/m → 0** (the transformer, ``extrapolate_width``, default): the same at widths m, m/2, m/4 on
  the same path, combined by the same Richardson weights in 1/m after the one in Δt; ``err`` adds
  both extrapolation errors in quadrature.
* **The finite-time law** of the top vector on the same runs: log|v_t| = Σ log R_11 is a Brownian
  motion with drift λ₁ and variance rate κ + κ' (SPEC §8): its variance rate Var(log|v_T|)/T, and
  the mean-square growth rate g(2) ([`moment_exponent`][stochformer.model.kernel.moment_exponent], = λ̄) fitted
  as the slope of log(mean |v_t|²) against t on t ≤ ``moment_horizon`` (default
  min(T, 1/(2(κ + κ'))), where the variance of log|v_t|² reaches 2). Both are extrapolated with
  the same weights; their SEs are bootstrap SEs over samples, resampled jointly across levels.
* **Sum rule and spacing**: Σ λ̂_i against −(d−1)κ'/2 − (d−1)²κ/2, and the mean spacing
  (λ̂₁ − λ̂_k)/(k − 1) against κ' (per sample, then averaged).

Every rate is per unit time t = layer · T/L and includes the noise scale s through κ → s²κ.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..core.brownian import BrownianPath
from ..config.build import make_kernel, noise_kind, setup
from ..config import ExperimentConfig, MEASURED_HORIZON, RunConfig, as_config
from ..io.store import to_jsonable
from ..model.kernel import first_moment_rate, lyapunov_spectrum, moment_exponent, stability_index
from ..model.noise import RandomMLP
from ..model.rng import resolve_backend
from ..model.sde import INTEGRATORS, LimitSDE
from ..model.tangent import ExactJet, FieldJet, MLPJet, TangentFlow, frame_state, reorthonormalise, tangent_frame
from ..model.transformer import Transformer
from ..io.names import RATE_UNITS
from ..io.results import Result
from ..core.runtime import child_seeds, cpu_threads_for, make_generator
from ..integrate import SaveAt, solve
from ..core.sphere import uniform
from ..measure.stats import bootstrap, mean_and_se, resampled_se
from ..core.progress import ProgressMeter
from ..core.validation import blamed_on, validated
from .sync import EXTRAPOLATION_LEVELS, check_extrapolation, check_small_step, coupling_path, moment_rate_bootstrap, near_sync_horizon, richardson
from .preflight import BOOTSTRAP_S, FLOPS, STEP_OVERHEAD_S, Estimate

#: flops-equivalent of one token's tangent step per sample: per d² (the frame's elementwise work and
#: its renormalisation) and, for the transformer, per d·m (the jet's features and Gram); read off
#: runs on 2 cores (d = 4 and 16: 0.1 s per SDE step of 1000 samples at d = 16, docs/spectrum.md)
SPECTRUM_FLOPS_D2, SPECTRUM_FLOPS_DM = 2000.0, 40.0

#: how the tangent map of a step is computed (``TangentFlow.jacobian``)
Jacobian = Literal["closed_form", "autodiff"]

#: the noise sources whose jet is known (``model.noise`` after ``build.noise_kind``), per dynamics
JET_NOISE = {"sde": ("exact",), "transformer": ("mlp", "mlp_gaussian")}


class SpectrumConfig(ExperimentConfig):
    """``model``: the noise of one token (no attention; ``model.batch`` independent samples), by
    default ReLU without biases at d = 4 (κ = κ' = 1/8), T = 4 on L = 64 steps, m = 256; the
    extrapolations and the finite-time law's window."""

    command: ClassVar[str] = "spectrum"
    needs_noise: ClassVar[bool] = True
    model_defaults: ClassVar[dict] = {"d": 4, "T": 4.0, "L": 64, "m": 256, "batch": 1000}
    model_fixed: ClassVar[dict] = {"attention": (False, "the spectrum is that of the noise on one token")}
    model_min: ClassVar[dict] = {"batch": (2, "independent samples for the standard errors"), "T": MEASURED_HORIZON,
                                 "d": (3, "a spectrum of d - 1 >= 2 exponents")}
    model_unused: ClassVar[dict] = {
        "N": "one token is stepped with its frame of d - 1 tangent vectors",
        "init": "a uniform token with a uniform orthonormal tangent frame",
        "features": "the SDE is driven by the exact field's jet",
        "record_every": "the log-growth is kept at every step",
        "path_stride": "no token paths are kept",
        "energy_beta": "no energy is measured",
        "draw_precision": "the normals are drawn in model.dtype",
    }

    extrapolate: bool = Field(True, description="extrapolate to Δt → 0 from L, L/2, L/4 steps on one Brownian path "
                              "(L a multiple of 4)")
    extrapolate_width: Optional[bool] = Field(
        None, description="transformer: extrapolate to 1/m → 0 from widths m, m/2, m/4 (m a multiple of 4); "
        "default true for the transformer; not for the SDE")
    moment_horizon: Optional[float] = Field(
        None, gt=0.0, description="fit g(2) on t <= moment_horizon (> 0, at most T); default min(T, 1/(2(κ+κ')))")
    bootstrap: int = Field(400, ge=10, le=1000000, description="bootstrap resamples of the finite-time law's SEs, in [10, 10^6]")
    jacobian: Jacobian = Field(
        "closed_form", description="the tangent map of a step: 'closed_form' or 'autodiff' (torch.func.jvp of the "
        "model's own step; slower, the same numbers to rounding)")

    @model_validator(mode="after")
    def _check(self) -> "SpectrumConfig":
        run = self.model
        check_extrapolation(run.L, self.extrapolate)
        kind = noise_kind(run)
        if kind not in JET_NOISE[run.dynamics]:
            raise ValueError(f"model.noise: the spectrum of the {run.dynamics} needs the noise "
                             f"{' or '.join(JET_NOISE[run.dynamics])} (or 'auto'), whose jet at a token is known (got {kind!r})")
        if run.dynamics == "sde" and self.extrapolate_width:
            raise ValueError("extrapolate_width: the SDE has no width (m = ∞); remove it")
        if self.width_levels and run.m % 4:
            raise ValueError(f"model.m: must be a multiple of 4 for the 1/m extrapolation (widths m, m/2, m/4; got "
                             f"{run.m}), or set extrapolate_width = false")
        if self.moment_horizon is not None and self.moment_horizon > run.T:
            raise ValueError(f"moment_horizon: must be at most model.T = {run.T:g} (got {self.moment_horizon:g})")
        check_small_step(run, self.extrapolate)
        return self

    @property
    def width_levels(self) -> bool:
        """Whether the transformer is run at widths m, m/2, m/4."""
        return self.model.dynamics == "transformer" and self.extrapolate_width is not False

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of [`run_spectrum`][stochformer.experiments.spectrum.run_spectrum] (`preflight`):
        every level (steps L, L/2, L/4; widths m, m/2, m/4) keeps the top vector's log-growth at every
        step, and one step holds the frame, the jet and (transformer) the hidden units of the widest width.

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
        B, d, m = run.batch, run.d, run.m
        tr = run.dynamics == "transformer"
        levels = (3 if self.extrapolate else 1) * (3 if self.width_levels else 1)
        steps = run.L * (1.75 if self.extrapolate else 1.0) * (3 if self.width_levels else 1)
        kept = 8.0 * B * levels * (run.L + 2 + d)
        work = 8.0 * B * (12.0 * d * d + (4.0 * d * m if tr else 0.0))
        per_step = STEP_OVERHEAD_S * 40 + B * (SPECTRUM_FLOPS_D2 * d * d + (SPECTRUM_FLOPS_DM * d * m if tr else 0.0)) / FLOPS
        return Estimate(kept + work, steps * per_step + BOOTSTRAP_S * self.bootstrap, "model.batch, model.L, model.d or model.m",
                        "model.L, model.batch, model.d, model.m or bootstrap")


# --------------------------------------------------------------------------- the model and the run


def spectrum_flow(cfg: RunConfig, width: Optional[int] = None, jacobian: Jacobian = "closed_form") -> TangentFlow:
    """The [`TangentFlow`][stochformer.model.tangent.TangentFlow] of ``cfg`` (its ``width`` in place of
    ``cfg.m``): the transformer's layer with the jet of the random MLP (``noise = "mlp"``: explicit
    weights; otherwise the conditional Gaussian jet driven by Brownian normals), or the SDE with the
    exact field's jet and ``cfg.integrator``. A narrower ``width`` draws cfg.m hidden units and uses
    its first ``width`` (``MLPJet.draw_width``): the widths of one seed are nested networks.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    width : int, optional
        The MLP's width in place of ``cfg.m``.
    jacobian : {"closed_form", "autodiff"}, optional
        How the tangent map is applied.

    Returns
    -------
    TangentFlow
        The flow.
    """
    kernel = make_kernel(cfg)
    jet: FieldJet
    if cfg.dynamics == "sde":
        jet = ExactJet(kernel)
        model: Any = LimitSDE(None, jet, INTEGRATORS[cfg.integrator], kernel.kappa1)  # the jet: its κ(1)
    else:
        mode: Literal["weights", "gaussian"] = "weights" if noise_kind(cfg) == "mlp" else "gaussian"
        mlp = RandomMLP(width or cfg.m, cfg.activation, cfg.sigma_U, cfg.sigma_W, cfg.noise_scale, mode,
                        resolve_backend(cfg.rng, cfg.device), law=cfg.weight_law, nu=cfg.student_nu, gain=cfg.gain)
        jet = MLPJet(mlp, max(cfg.m, width or cfg.m))
        model = Transformer(None, None, cfg.order)
    return TangentFlow(model, jet, jacobian)


def uses_path(flow: TangentFlow) -> bool:
    """Whether the flow's jet is driven by Brownian normals (the exact field; the MLP's Gaussian jet).

    Parameters
    ----------
    flow : TangentFlow
        The flow.

    Returns
    -------
    bool
        True where a Brownian path can drive it.
    """
    return isinstance(flow.jet, ExactJet) or flow.jet.mode == "gaussian"


class Growth(NamedTuple):
    """The log-growth of one Benettin run of ``steps`` steps over [0, T]: ``rates`` (samples, k)
    Σ log R_ii/T per sample; ``log_norm`` (samples, steps + 1) the cumulative log|v_t/v_0| of the
    top vector (Σ log R_11); ``volume_mean``, ``volume_se`` (steps + 1, k) the mean and SE over
    samples of the cumulative Σ log R_ii; ``final`` (samples, 1 + k, d) the last state.

    Attributes
    ----------
    rates : numpy.ndarray, shape (samples, k)
        Σ log R_ii / T per sample.
    log_norm : numpy.ndarray, shape (samples, steps + 1)
        The top vector's cumulative log-growth.
    volume_mean, volume_se : numpy.ndarray, shape (steps + 1, k)
        Mean and SE of the cumulative Σ log R_ii.
    final : torch.Tensor, shape (samples, 1 + k, d)
        The last state.
    """

    rates: np.ndarray
    log_norm: np.ndarray
    volume_mean: np.ndarray
    volume_se: np.ndarray
    final: torch.Tensor


def tangent_growth(flow: TangentFlow, S0: torch.Tensor, T: float, steps: int, generator: torch.Generator,
                   path: Optional[BrownianPath] = None, progress: bool = False) -> Growth:
    """Benettin's method: step the state S0 (samples, 1 + k, d) (a token and an orthonormal tangent
    frame) ``steps`` times over [0, T] with [`stochformer.solve`][stochformer.solve], renormalising the frame after
    every step by a hook ([`reorthonormalise`][stochformer.model.tangent.reorthonormalise]) and accumulating
    log R_ii. ``path``: a shared Brownian path (couplings across step sizes and widths). Runs on one
    torch thread: the per-sample products are d × d, where a second thread costs more than it gives
    (measured 3–12× slower on two busy cores; docs/spectrum.md, "Cost").

    Parameters
    ----------
    flow : TangentFlow
        The flow.
    S0 : torch.Tensor, shape (samples, 1 + k, d)
        A token and an orthonormal tangent frame.
    T : float
        The horizon.
    steps : int
        Steps.
    generator : torch.Generator
        The run's generator.
    path : BrownianPath, optional
        A shared Brownian path.
    progress : bool, optional
        Show progress bars (on a terminal).

    Returns
    -------
    Growth
        The log-growth.
    """
    B, k = S0.shape[0], S0.shape[1] - 1
    total = torch.zeros(B, k, dtype=torch.float64)
    top = torch.zeros(B, steps + 1, dtype=torch.float64)
    sums = torch.zeros(steps + 1, k, dtype=torch.float64)
    squares = torch.zeros(steps + 1, k, dtype=torch.float64)

    def renormalise(ell: int, S: torch.Tensor) -> torch.Tensor:
        S, log_r = reorthonormalise(S)
        total.add_(log_r.double().cpu())
        top[:, ell] = total[:, 0]
        sums[ell] = total.sum(0)
        squares[ell] = (total * total).sum(0)
        return S

    with cpu_threads_for(0), blamed_on(None, "a token and its tangent frame"):
        ds = solve(flow, S0, T, steps, SaveAt(stats=(), final=True), generator=generator, path=path, hook=renormalise,
                   progress=ProgressMeter(f"spectrum ({steps} steps)") if progress else None)
    mean = sums / B
    se = ((squares - B * mean * mean).clamp_min(0) / (B - 1)).sqrt() / math.sqrt(B)
    final = torch.from_numpy(ds["X_final"].values)
    return Growth((total / T).numpy(), top.numpy(), mean.numpy(), se.numpy(), final)


def initial_state(batch: int, d: int, seed: int, dtype: torch.dtype = torch.float64, device: Any = "cpu") -> torch.Tensor:
    """A uniform token and a uniform orthonormal frame of its d − 1 tangent vectors: (batch, d, d).

    Parameters
    ----------
    batch : int
        Samples.
    d : int
        Token dimension.
    seed : int
        The seed.
    dtype : torch.dtype, optional
        The state's dtype.
    device : str or torch.device, optional
        Its device.

    Returns
    -------
    torch.Tensor, shape (batch, d, d)
        [x; frame].
    """
    gen = make_generator(seed, device)
    x = uniform(batch, 1, d, generator=gen, dtype=dtype, device=device)
    return frame_state(x, tangent_frame(x, generator=gen))


def spectrum_levels(cfg: RunConfig, seed: int, extrapolate: bool = True, width_levels: bool = False,
                    jacobian: Jacobian = "closed_form", progress: bool = False) -> dict[tuple[int, int], Growth]:
    """The Benettin runs of ``cfg`` from the same initial tokens and frames: {(width, steps): Growth}
    at steps L (and L/2, L/4 with ``extrapolate``) and, with ``width_levels``, widths m, m/2, m/4
    (width 0 for the SDE), all driven by one Brownian path where the jet takes one.

    Parameters
    ----------
    cfg : RunConfig
        A validated configuration.
    seed : int
        The seed.
    extrapolate : bool, optional
        Also L/2 and L/4 steps.
    width_levels : bool, optional
        Also widths m/2 and m/4.
    jacobian : {"closed_form", "autodiff"}, optional
        How the tangent map is applied.
    progress : bool, optional
        Show progress bars (on a terminal).

    Returns
    -------
    dict
        (width, steps) → Growth.
    """
    env = setup(cfg)
    device, dtype = env.device, env.dtype
    s_init, s_model, s_path = env.seeds(3, seed)
    S0 = initial_state(cfg.batch, cfg.d, s_init, dtype, device)
    steps = [cfg.L // k for k in EXTRAPOLATION_LEVELS] if extrapolate else [cfg.L]
    widths = [cfg.m // k for k in EXTRAPOLATION_LEVELS] if width_levels else ([cfg.m] if cfg.dynamics == "transformer" else [0])
    flows = {w: spectrum_flow(cfg, w or None, jacobian) for w in widths}
    coupled = (len(steps) > 1 or len(widths) > 1) and uses_path(flows[widths[0]])
    shape = (cfg.batch, cfg.d, cfg.d)  # the jet's normals: (samples, 1 + k, d), k = d − 1
    path = coupling_path(flows[widths[0]].jet, shape, cfg.L, s_path, dtype, device) if coupled else None
    return {(w, n): tangent_growth(flows[w], S0, cfg.T, n, env.generator(s_model), path, progress)
            for w in widths for n in steps}


# --------------------------------------------------------------------------- extrapolation


def extrapolate_levels(values: dict[tuple[int, int], Any]) -> tuple[Any, Any]:
    """Δt → 0, then 1/m → 0: the [`richardson`][stochformer.experiments.sync.richardson] value over the steps
    (when three, L, L/2, L/4) at each width, then over the widths (when three); ``values``:
    {(width, steps): value}, the values numbers or arrays (combined element by element). Returns the
    value and its extrapolation error: the errors in steps (at the widest width) and in width, in
    quadrature (0 for one level).

    Parameters
    ----------
    values : dict
        (width, steps) → value.

    Returns
    -------
    tuple
        (the extrapolated value, its error).
    """
    widths = sorted({w for w, _ in values})
    per_width = {}
    err_steps = 0.0
    for w in widths:
        row = {n: v for (ww, n), v in values.items() if ww == w}
        per_width[w], err = richardson(row) if len(row) == 3 else (next(iter(row.values())), 0.0 * next(iter(row.values())))
        if w == widths[-1]:
            err_steps = err
    value, err_width = richardson(per_width) if len(per_width) == 3 else (per_width[widths[-1]], 0.0 * err_steps)
    return value, np.hypot(err_width, err_steps)


def _combined(samples: dict[tuple[int, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, SE and extrapolation error of per-sample values {(width, steps): (samples, ...)}: the
    per-sample combination of [`extrapolate_levels`][stochformer.experiments.spectrum.extrapolate_levels] averaged (SE = its SD/√n), the error from
    the levels' means."""
    per_sample, _ = extrapolate_levels(samples)
    mean, se = mean_and_se(np.asarray(per_sample, float))
    _, err = extrapolate_levels({key: v.mean(0) for key, v in samples.items()})
    return np.asarray(mean), np.asarray(se), np.asarray(err)


def _bootstrapped(estimates: dict[tuple[int, int], tuple[float, np.ndarray]], n: int) -> dict:
    """A statistic with its bootstrap values per level {(width, steps): (value, boots)} (resampled
    jointly): the extrapolated value, its SE ([`resampled_se`][stochformer.measure.stats.resampled_se] of the same
    combination of the boots over n samples) and extrapolation error, and the values per level."""
    value, err = extrapolate_levels({key: v for key, (v, _) in estimates.items()})
    boots, _ = extrapolate_levels({key: np.asarray(b) for key, (_, b) in estimates.items()})
    return {"measured": float(value), "se": resampled_se(boots, n), "err": float(err),
            "levels": {_level_name(key): float(v) for key, (v, _) in estimates.items()}}


def _level_name(key: tuple[int, int]) -> str:
    width, steps = key
    return f"steps={steps}" if not width else f"m={width},steps={steps}"


def moment_window(T: float, coarsest: int, horizon: float) -> tuple[int, float]:
    """Steps of the coarsest level inside [0, horizon] (at least 1) and the window's length.

    Parameters
    ----------
    T : float
        The horizon.
    coarsest : int
        Steps of the coarsest level.
    horizon : float
        The window's end.

    Returns
    -------
    tuple
        (steps, the window's length).
    """
    steps = max(1, math.floor(coarsest * horizon / T + 1e-9))
    return steps, steps * T / coarsest


# --------------------------------------------------------------------------- predictions


def predicted_spectrum(kappa: float, kappa_prime: float, d: int) -> dict:
    """SPEC §8's closed forms: the spectrum λ_i, its sum −(d−1)κ'/2 − (d−1)²κ/2, the spacing κ', the
    variance rate κ + κ' of log|v_t|, g(2) = λ̄ and the stability index p* = −2λ₁/(κ + κ').

    Parameters
    ----------
    kappa : float
        κ(1).
    kappa_prime : float
        κ'(1).
    d : int
        Token dimension.

    Returns
    -------
    dict
        The closed forms by name.
    """
    spectrum = lyapunov_spectrum(kappa, kappa_prime, d)
    return {"spectrum": spectrum, "sum": -0.5 * (d - 1) * kappa_prime - 0.5 * (d - 1) ** 2 * kappa,
            "spacing": kappa_prime, "variance_rate": kappa + kappa_prime,
            "moment_exponent_2": moment_exponent(2.0, kappa, kappa_prime, d),
            "lambda_bar": first_moment_rate(kappa, kappa_prime, d),
            "stability_index": stability_index(kappa, kappa_prime, d), "kappa": kappa, "kappa_prime": kappa_prime}


# --------------------------------------------------------------------------- result


@dataclass(repr=False)
class SpectrumResult(Result):
    """Measured and predicted spectrum for one config (see [`run_spectrum`][stochformer.experiments.spectrum.run_spectrum]).

    ``measured``, ``se``, ``err``, ``predicted``: (k,) per exponent, k = d − 1 (``err``: the
    extrapolation error, 0 where not extrapolated); ``law``: the sum, the spacing, the variance rate
    and g(2), each a dict with measured, se, err, predicted; ``levels``: the exponents' means per
    level; ``predictions``: [`predicted_spectrum`][stochformer.experiments.spectrum.predicted_spectrum]; ``times`` (steps + 1,) of the finest level,
    with ``volume`` (mean, se) (steps + 1, k) the cumulative Σ log R_ii and ``log_norm`` (mean, se)
    (steps + 1,) of the top vector there.

    Attributes
    ----------
    config : SpectrumConfig
        The configuration run.
    measured, se, err, predicted : numpy.ndarray, shape (k,)
        Per exponent.
    law : dict
        The sum, spacing, variance rate and g(2), each measured, se, err, predicted.
    levels, predictions : dict
        Per-level means; the predictions.
    times : numpy.ndarray
        The time axis.
    volume : tuple of numpy.ndarray
        (mean, SE) of the cumulative Σ log R_ii.
    """

    command: ClassVar[str] = "spectrum"
    summary_name: ClassVar[str] = "spectrum.json"
    config: SpectrumConfig
    measured: np.ndarray
    se: np.ndarray
    err: np.ndarray
    predicted: np.ndarray
    law: dict
    levels: dict
    predictions: dict
    times: np.ndarray
    volume: tuple[np.ndarray, np.ndarray]
    log_norm: tuple[np.ndarray, np.ndarray]
    provenance: dict
    elapsed_s: float

    @property
    def z(self) -> np.ndarray:
        """(measured − predicted)/√(SE² + err²) per exponent."""
        return (self.measured - self.predicted) / np.hypot(self.se, self.err)

    def to_dict(self) -> dict:
        """``spectrum.json``: the lists ``measured``, ``se``, ``err``, ``predicted``, ``z`` (index i − 1
        for λ_i), the finite-time law and sum rule in ``law``, the per-level means, the predictions.

        Returns
        -------
        dict
            JSON-able.
        """
        run = self.config.model
        return to_jsonable({"measured": self.measured, "se": self.se, "err": self.err, "predicted": self.predicted,
                            "z": self.z, "law": self.law, "levels": self.levels, "predictions": self.predictions,
                            "dynamics": run.dynamics, "d": run.d, "extrapolated_dt": self.config.extrapolate,
                            "extrapolated_width": self.config.width_levels, "samples": run.batch})

    def table(self) -> list[dict]:
        """Rows (quantity, measured, se, err, predicted, z) for every exponent and the law.

        Returns
        -------
        list of dict
            One row per quantity.
        """
        rows: list[dict[str, Any]] = [{"quantity": f"lambda_{i + 1}", "measured": float(m), "se": float(s), "err": float(e),
                 "predicted": float(p)} for i, (m, s, e, p) in enumerate(zip(self.measured, self.se, self.err, self.predicted))]
        names = {"sum": "sum of the spectrum", "spacing": "mean spacing (kappa')",
                 "variance_rate": "Var log|v_t| / t (kappa + kappa')", "moment_exponent_2": "g(2) = lambda_bar"}
        rows += [{"quantity": names[key], **{f: self.law[key][f] for f in ("measured", "se", "err", "predicted")}}
                 for key in names]
        for row in rows:
            scale = math.hypot(row["se"], row["err"])
            row["z"] = (row["measured"] - row["predicted"]) / scale if scale > 0 else None
        return rows

    def names(self) -> dict[str, dict[str, str]]:
        return {
            "lyapunov": {"long_name": "Lyapunov exponent λ_i of one token's tangent flow", "units": RATE_UNITS},
            "lyapunov_pred": {"long_name": "predicted Lyapunov exponent λ_i", "units": RATE_UNITS},
            "log_volume": {"long_name": "cumulative Σ_{j ≤ i} log R_jj of the tangent frame", "units": "1"},
            "log_norm": {"long_name": "cumulative log|v_t/v_0| of the top tangent vector", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        """``lyapunov`` (with ``_se``, ``_extrap_err``, ``_pred``): (exponent,), i = 1 … d − 1;
        ``log_volume_mean``/``_se``: (time, exponent); ``log_norm_mean``/``_se``: (time,), with ``step``."""
        exps = np.arange(1, len(self.measured) + 1)
        data = {"lyapunov": ("exponent", self.measured), "lyapunov_se": ("exponent", self.se),
                "lyapunov_extrap_err": ("exponent", self.err), "lyapunov_pred": ("exponent", self.predicted),
                "log_volume_mean": (("time", "exponent"), self.volume[0]),
                "log_volume_se": (("time", "exponent"), self.volume[1]),
                "log_norm_mean": ("time", self.log_norm[0]), "log_norm_se": ("time", self.log_norm[1])}
        ds = xr.Dataset(data, coords={"exponent": exps, "time": self.times, "step": ("time", np.arange(len(self.times)))})
        for key, row in self.law.items():
            ds.attrs.update({f"{key}_{f}": row[f] for f in ("measured", "se", "err", "predicted")})
        return ds


@validated
def run_spectrum(cfg: SpectrumConfig, progress: bool = False) -> SpectrumResult:
    """Measure the d − 1 exponents of one token's tangent flow (Benettin), the sum rule, the spacing
    and the finite-time law of the top vector for ``cfg.model.dynamics``; return them beside SPEC
    §8's closed forms (module docstring).

    Parameters
    ----------
    cfg : SpectrumConfig
        A validated configuration.
    progress : bool, optional
        Show progress bars (on a terminal).

    Returns
    -------
    SpectrumResult
        The measured spectrum beside the predictions.
    """
    cfg = as_config(cfg, SpectrumConfig)
    run = cfg.model
    start = time.perf_counter()
    kern = make_kernel(run)
    pred = predicted_spectrum(kern.kappa1, kern.kappa1_prime, run.d)
    runs = spectrum_levels(run, run.seed, cfg.extrapolate, cfg.width_levels, cfg.jacobian, progress)
    B, k, T = run.batch, run.d - 1, run.T
    rates = {key: g.rates for key, g in runs.items()}
    mean, se, err = _combined(rates)
    spread = {key: r.sum(1) for key, r in rates.items()}
    spacing = {key: (r[:, 0] - r[:, -1]) / (k - 1) for key, r in rates.items()}
    law: dict[str, dict] = {}
    for name, values, predicted in (("sum", spread, pred["sum"]), ("spacing", spacing, pred["spacing"])):
        m, s, e = _combined(values)
        law[name] = {"measured": float(m), "se": float(s), "err": float(e), "predicted": predicted}
    seed = child_seeds(run.seed, 4)[3]
    finals = {key: g.log_norm[:, -1] for key, g in runs.items()}
    law["variance_rate"] = {**_bootstrapped(
        {key: (float(v.var(ddof=1) / T), np.asarray(bootstrap(lambda s: s.var(ddof=1) / T, v, cfg.bootstrap, seed)))
         for key, v in finals.items()}, B), "predicted": pred["variance_rate"]}
    horizon = cfg.moment_horizon or min(T, near_sync_horizon(pred["kappa"], pred["kappa_prime"]))
    coarsest = min(n for _, n in runs)
    window, t_window = moment_window(T, coarsest, horizon)
    moments = {}
    for (w, n), g in runs.items():
        steps = window * n // coarsest
        t = np.arange(steps + 1) * (T / n)
        moments[(w, n)] = moment_rate_bootstrap(t, np.exp(2 * g.log_norm[:, : steps + 1]), None, cfg.bootstrap, seed)
    law["moment_exponent_2"] = {**_bootstrapped(moments, B), "predicted": pred["moment_exponent_2"],
                                "window": t_window}
    finest = runs[max(w for w, _ in runs), max(n for _, n in runs)]
    steps = finest.log_norm.shape[1] - 1
    return SpectrumResult(
        config=cfg,
        measured=mean, se=se, err=err, predicted=np.asarray(pred["spectrum"]),
        law=law,
        levels={_level_name(key): r.mean(0) for key, r in rates.items()},
        predictions=pred,
        times=np.arange(steps + 1) * (T / steps),
        volume=(finest.volume_mean, finest.volume_se),
        log_norm=tuple(np.asarray(x) for x in mean_and_se(finest.log_norm)),  # type: ignore[arg-type]
        provenance=setup(cfg).provenance(),
        elapsed_s=time.perf_counter() - start,
    )
