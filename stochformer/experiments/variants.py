"""Checks of the model's variants (SPEC §7): the deterministic attention flows, the laws of the
MLP weights, and per-layer random attention against its averaged drift.

- `equiangular_tokens`, `equiangular_rhs`, `attention_flow`: n ≤ d equiangular
  tokens under the noiseless attention flow (Q = K = V = I, inverse temperature β) stay
  equiangular with dρ/dt = 2e^{βρ}(1−ρ)((n−1)ρ+1)/(e^β + (n−1)e^{βρ}) (softmax) or
  (2/n)e^{βρ}(1−ρ)((n−1)ρ+1) (USA); post-LN (x ← LN(x + Δt Attn(x))) gives 1 − ρ ~ e^{−2t}
  (softmax), pre-LN (x ← x + Δt Attn(LN x), the residual stream not projected) 1 − ρ ~ 1/t².
- `mlp_covariance`: the empirical E⟨G(x), G(y)⟩/d of the explicit-weights MLP for a weight law.
- `run_resampled`: the transformer with Q, K, V drawn afresh every layer at several depths
  L, against the model whose attention is the averaged drift b̄ ([`AveragedAttention`][stochformer.model.attention_variants.AveragedAttention]),
  from the same initial tokens and with the same MLP draws.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional

import numpy as np
import torch
import xarray as xr
from pydantic import Field, field_validator, model_validator
from scipy import stats

from ..config.build import GivenModels, initial_tokens, make_model, make_noise, setup
from ..config import ExperimentConfig, StrictConfig, as_config
from ..model.attention import start_run
from ..model.attention_variants import AveragedAttention, MultiHeadAttention, ResampledAttention
from ..model.noise import RandomMLP
from ..model.transformer import Transformer
from ..core.runtime import child_seeds, make_generator, provenance
from ..io.results import Result
from ..integrate import Model, ModelSource, SaveAt, solve
from ..core.sphere import normalize
from ..measure.stats import mean_and_se
from ..core.validation import blamed_on, validated
from .preflight import FLOPS, STEP_OVERHEAD_S, Estimate, simulate_estimate

# ----------------------------------------------------------------- deterministic flows


def equiangular_tokens(n: int, d: int, rho: float, dtype=torch.float64) -> torch.Tensor:
    """n ≤ d unit tokens with all pairwise cosines ρ > −1/(n−1): (1, n, d), rows of the root of
    the Gram matrix (1 − ρ) I + ρ 11ᵀ padded with zeros."""
    if n > d or not -1.0 / (n - 1) < rho < 1.0:
        raise ValueError(f"equiangular tokens need n <= d and -1/(n-1) < rho < 1 (got n={n}, d={d}, rho={rho})")
    G = (1 - rho) * torch.eye(n, dtype=dtype) + rho
    e, V = torch.linalg.eigh(G)
    X = (V * e.clamp_min(0).sqrt()) @ V.T
    return torch.cat([X, torch.zeros(n, d - n, dtype=dtype)], dim=1).unsqueeze(0)


def equiangular_rhs(kind: str, beta: float, n: int) -> Callable[[float], float]:
    """dρ/dt of equiangular tokens under Q = K = V = I (SPEC §7): ``kind`` = softmax or usa."""
    if kind == "softmax":
        return lambda r: 2 * math.exp(beta * r) * (1 - r) * ((n - 1) * r + 1) / (math.exp(beta) + (n - 1) * math.exp(beta * r))
    if kind == "usa":
        return lambda r: (2 / n) * math.exp(beta * r) * (1 - r) * ((n - 1) * r + 1)
    raise ValueError(f"kind: the equiangular ODE is stated for 'softmax' and 'usa' (got {kind!r})")


@dataclass
class AttentionFlow:
    """The noiseless flow of an attention, a model for [`solve`][stochformer.solve]: ``post``
    x ← LN(x + Δt Attn(x)), ``pre`` x ← x + Δt Attn(LN x) (the residual stream, not on the sphere)."""

    attention: Callable[[torch.Tensor], torch.Tensor]
    norm: str = "post"

    @property
    def on_sphere(self) -> bool:
        """Post-LN states are unit tokens; pre-LN ones the residual stream."""
        return self.norm == "post"

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """The start of a run: a random attention starts its draws (the run's attention stream)."""
        start_run(self.attention, batch, d, generator, dtype, device)

    def step(self, X: torch.Tensor, dt: float, draws: object) -> torch.Tensor:
        return normalize(X + dt * self.attention(X)) if self.norm == "post" else X + dt * self.attention(normalize(X))


def attention_flow(X0: torch.Tensor, attention, dt: float, steps: int, norm: str = "post",
                   every: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noiseless flow of ``attention`` from X0 (batch, n, d) (`AttentionFlow`, stepped
    by [`solve`][stochformer.solve] over T = steps·dt). Returns times (k,), mean and spread (max − min)
    of the pairwise cosines of the normalised tokens (batch, k), every ``every`` steps (step 0
    included)."""
    if norm not in ("post", "pre"):
        raise ValueError(f"norm: 'post' or 'pre' (got {norm!r})")
    n = X0.shape[-2]
    iu = torch.triu_indices(n, n, 1)

    def cosines(X: torch.Tensor) -> dict[str, torch.Tensor]:
        Z = normalize(X)
        c = (Z @ Z.transpose(-1, -2))[..., iu[0], iu[1]]
        return {"mean": c.mean(-1), "spread": c.amax(-1) - c.amin(-1)}

    save = SaveAt(at=list(range(0, steps + 1, every)), stats=(), final=False, fn=cosines)
    with blamed_on(None, "attention flow"):
        ds = solve(AttentionFlow(attention, norm), X0, steps * dt, steps, save, seed=0)
    return ds["step"].values * dt, ds["mean"].values, ds["spread"].values


@dataclass(frozen=True)
class LineFit:
    """y ≈ a + slope·x by least squares, with the 95% interval of the slope (t quantile × stderr)."""

    slope: float
    ci: tuple[float, float]
    points: int

    def to_dict(self) -> dict:
        return {"value": self.slope, "ci": list(self.ci), "points": self.points}


def fit_line(x, y) -> LineFit:
    """Least-squares slope of y on x with its 95% interval (residual-based, n − 2 degrees of freedom)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    r = stats.linregress(x, y)
    h = stats.t.ppf(0.975, len(x) - 2) * r.stderr
    return LineFit(float(r.slope), (float(r.slope - h), float(r.slope + h)), len(x))


# ----------------------------------------------------------------- weight laws


def mlp_covariance(x: torch.Tensor, y: torch.Tensor, law: str, activation: str = "relu", m: int = 4096,
                   draws: int = 64, sigma_U: float = 0.0, sigma_W: float = 0.0, nu: float = 5.0,
                   seed: int = 0, conditional: bool = False) -> tuple[float, float]:
    """E⟨G(x), G(y)⟩/d over ``draws`` independent explicit-weights MLPs of width m with weights
    from ``law``, and its standard error: x, y (d,) unit vectors. ``conditional``: take the mean
    over the outer weights exactly, (1/m) Σ_k φ_k(x) φ_k(y) + σ_W² (the inner weights' law only,
    far smaller SE). Equals κ(⟨x, y⟩) for Gaussian weights; for other laws the outer weights do not
    change it (unit variance), the inner ones through the law of u·x/√d (Gaussian only as d → ∞)."""
    noise = RandomMLP(width=m, activation=activation, sigma_U=sigma_U, sigma_W=sigma_W, mode="weights", law=law, nu=nu)
    g = make_generator(seed)
    X = torch.stack([x, y]).to(torch.float64).expand(draws, 2, -1).contiguous()
    if conditional:
        v = noise.empirical_kernel(X, g)[:, 0, 1]
    else:
        G = noise.increment(X, 1.0, g)  # (draws, 2, d): G(x), G(y) (dt = 1)
        v = (G[:, 0] * G[:, 1]).sum(-1) / x.shape[-1]
    return float(v.mean()), float(v.std(correction=1) / math.sqrt(draws))


# ----------------------------------------------------------------- per-layer random attention


class ResampledConfig(ExperimentConfig):
    """Per-layer random attention (Q, K, V fresh in every layer: √β I + σZ/√d, γI + σZ/√d) at the
    depths ``depths`` against the averaged drift b̄ of ``model.attention_draws`` draws at the
    largest depth. ``model``: the transformer (``batch``: samples, initial tokens and weight
    draws); the experiment sets the attention kind and the depth; the MLP (if on) is the same in
    both."""

    command: ClassVar[str] = "resampled"
    model_defaults: ClassVar[dict] = {"batch": 64}
    model_fixed: ClassVar[dict] = {"dynamics": ("transformer", "the per-layer random attention is a transformer")}
    model_min: ClassVar[dict] = {"batch": (4, "samples (initial tokens and weight draws)")}
    model_unused: ClassVar[dict] = {"L": "the depths are `depths`",
                                    "attention_kind": "both 'resampled' and 'averaged' run"}

    depths: list[int] = Field(default_factory=lambda: [4, 16, 64, 256], description="depths L (at least 2)")

    @model_validator(mode="after")
    def _depths(self) -> "ResampledConfig":
        if len(self.depths) < 2 or len(set(self.depths)) != len(self.depths) or min(self.depths) < 1:
            raise ValueError(f"depths: need at least 2 distinct integers >= 1 (got {self.depths})")
        return self

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the resampled and
        the averaged attention at the deepest depth, scaled by the depths."""
        runs = [simulate_estimate(self.model.with_updates(attention_kind=k, L=max(self.depths))) for k in ("resampled", "averaged")]
        scale = sum(self.depths) / max(self.depths)
        return Estimate(max(e.bytes for e in runs), sum(e.seconds for e in runs) * scale,
                        "model.d, model.batch, model.N or model.attention_draws", "depths, model.batch or model.N")


@dataclass
class ResampledResult:
    """``final[L]``: (batch,) final mean cosine of the resampled model at depth L; ``reference``:
    (batch,) of the averaged-drift model at the largest depth (same X₀); ``curves[L]``: (batch,
    L + 1) mean cosine by layer; ``sq_error[L]``: (batch,) sup over the common times of the squared
    difference of the mean-cosine paths; ``meta``: further record entries (``model``: a model given
    by hand)."""

    config: ResampledConfig
    depths: list[int]
    final: dict[int, np.ndarray]
    reference: np.ndarray
    reference_curve: np.ndarray
    curves: dict[int, np.ndarray]
    sq_error: dict[int, np.ndarray]
    provenance: dict
    elapsed_s: float
    meta: dict = field(default_factory=dict)

    def differences(self) -> list[dict]:
        """Per depth: mean of final − reference (paired samples) with its SE, and the mean squared error."""
        rows = []
        for L in self.depths:
            diff, diff_se = mean_and_se(self.final[L] - self.reference)
            sq, sq_se = mean_and_se(self.sq_error[L])
            rows.append({"L": L, "diff": float(diff), "diff_se": float(diff_se), "sq_error": float(sq),
                         "sq_error_se": float(sq_se)})
        return rows

    def to_dict(self) -> dict:
        return {"depths": self.depths, "rows": self.differences(), "reference_mean": float(self.reference.mean()),
                "elapsed_s": self.elapsed_s}


def _run_layers(X0: torch.Tensor, model: Model, T: float, L: int, gen: torch.Generator) -> np.ndarray:
    """Mean cosine by layer: (batch, L + 1)."""
    return solve(model, X0, T, L, SaveAt(stats=("mean_cosine",), final=False), generator=gen)["mean_cosine"].values


@validated
def run_resampled(cfg: ResampledConfig, progress: bool = False, model: Optional[ModelSource] = None) -> ResampledResult:
    """The resampled-attention transformer at every depth and the averaged-drift one at the largest
    (both from the same X₀, each depth's MLP from the same seed; the resampled Q, K, V from that
    run's attention stream, so the MLP's draws are the reference's).

    Parameters
    ----------
    cfg : ResampledConfig
        A validated configuration.
    progress : bool, optional
        Unused (the runs are short).
    model : callable, optional
        A factory ``model(run_cfg) -> model`` called with the reference's config (``cfg.model``
        with ``attention_kind = "averaged"`` and the largest depth) and each depth's (``"resampled"``,
        ``L``), whose models run instead of the config's; checked before any work, recorded in
        ``result.meta["model"]`` ([`GivenModels`][stochformer.config.build.GivenModels]). (One model
        object is refused: the runs differ in ``attention_kind``.)

    Returns
    -------
    ResampledResult
        The final mean cosines and curves per depth beside the reference's.
    """
    cfg = as_config(cfg, ResampledConfig)
    run = cfg.model
    depths = sorted(cfg.depths)
    top = depths[-1]
    ref_cfg = run.with_updates(attention_kind="averaged", L=top)
    depth_cfgs = {L: run.with_updates(attention_kind="resampled", L=L) for L in depths}
    given = GivenModels.check(model, [ref_cfg, *depth_cfgs.values()], "resampled", prefix="model.")
    start = time.perf_counter()
    env = setup(run)
    device, dtype = env.device, env.dtype
    s_init, s_mlp = env.seeds(2)
    X0 = initial_tokens(run.init, run.batch, run.N, run.d, env.generator(s_init), dtype, device)
    gamma = run.gamma_value

    def averaged() -> Transformer:
        avg = AveragedAttention.from_law(run.d, run.beta, gamma, run.attention_std, run.attention_draws,
                                         run.attention_seed, dtype, device)
        return Transformer(avg, make_noise(run), run.order)

    def resampled() -> Transformer:
        attn = ResampledAttention(run.d, run.beta, gamma, run.attention_std)  # draws: the run's attention stream
        return Transformer(attn, make_noise(run), run.order)

    with torch.no_grad():
        ref = _run_layers(X0, given.model(ref_cfg, "averaged", averaged), run.T, top, env.generator(s_mlp))
        final, curves, sq = {}, {}, {}
        for L in depths:
            c = _run_layers(X0, given.model(depth_cfgs[L], f"resampled L={L}", resampled), run.T, L, env.generator(s_mlp))
            curves[L], final[L] = c, c[:, -1]
            sq[L] = ((c - ref[:, :: top // L][:, : L + 1]) ** 2).max(-1) if top % L == 0 else (c[:, -1] - ref[:, -1]) ** 2
    return ResampledResult(cfg, depths, final, ref[:, -1], ref, curves, sq, env.provenance(), time.perf_counter() - start,
                           given.meta())


# ----------------------------------------------------------------- all checks at once (report)


class VariantsConfig(StrictConfig):
    """Sizes of `run_variants`: the deterministic flows (β, step, horizon), the weight-law
    covariances (d, m, draws) and the per-layer random attention (depths, samples, draws)."""


    beta: float = Field(1.0, gt=0.0, le=10.0, description="inverse temperature of the flows, in (0, 10]")
    flow_steps: int = Field(200, ge=20, description="Heun steps of the equiangular check over t in [0, 2] (>= 20)")
    law_d: int = Field(64, ge=2, description="dimension of the weight-law covariance check (>= 2)")
    law_m: int = Field(1024, ge=1, description="MLP width of the weight-law check (>= 1)")
    law_draws: int = Field(32, ge=4, description="independent MLPs per law (>= 4)")
    depths: list[int] = Field(default_factory=lambda: [4, 16, 64], description="depths of the random-attention check")
    samples: int = Field(32, ge=4, description="samples of the random-attention check (>= 4)")
    attention_draws: int = Field(128, ge=1, description="draws of the averaged drift (>= 1)")
    seed: int = Field(0, ge=0, le=2**64 - 1)

    @field_validator("depths")
    @classmethod
    def _depths(cls, v: list[int]) -> list[int]:
        if len(v) < 2 or min(v) < 1 or len(set(v)) != len(v) or any(max(v) % L for L in v):
            raise ValueError(f"need at least 2 distinct depths >= 1, each dividing the largest (got {v})")
        return v

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): the weight laws'
        draws, the per-layer random attention and the noiseless flows."""
        d, m, M = self.law_d, self.law_m, self.attention_draws
        mem = 8.0 * (4 * self.law_draws * m * d + 2 * M * d * d + 8 * self.samples * M * d)
        flops = self.law_draws * 8 * m * d * d + sum(self.depths) * self.samples * M * 8 * d * d + self.flow_steps * 1e4
        return Estimate(mem, flops / FLOPS + sum(self.depths) * STEP_OVERHEAD_S, "law_d, law_m, law_draws or attention_draws",
                        "law_draws, law_m, depths, samples or attention_draws")


def _equiangular_check(kind: str, beta: float, steps: int, n: int = 4, d: int = 5, rho0: float = 0.1, T: float = 2.0) -> dict:
    """Heun (noiseless SDE integrator) from equiangular tokens against the ODE of SPEC §7."""
    from scipy.integrate import solve_ivp

    from ..config import build_config

    cfg = build_config({"N": n, "d": d, "L": steps, "T": T, "beta": beta, "mlp": False, "dynamics": "sde",
                        "attention_kind": kind})
    t = np.linspace(0, T, steps + 1)
    ode = solve_ivp(lambda _, r: [equiangular_rhs(kind, beta, n)(r[0])], (0, T), [rho0], rtol=1e-12, atol=1e-14, t_eval=t).y[0]
    iu = torch.triu_indices(n, n, 1)
    ds = solve(make_model(cfg), equiangular_tokens(n, d, rho0), T, steps, SaveAt(stats=(), tokens_every=1, final=False), seed=0)
    Xs = torch.from_numpy(ds["X"].values)[0, 1:]  # (steps, n, d)
    c = (Xs @ Xs.transpose(-1, -2))[:, iu[0], iu[1]]
    sim = [rho0] + c.mean(-1).tolist()
    spread = float((c.amax(-1) - c.amin(-1)).max())
    return {"t": t.tolist(), "rho_ode": ode.tolist(), "rho_sim": sim, "max_error": float(np.abs(np.asarray(sim) - ode).max()),
            "max_spread": spread}


def _decay_fits(beta: float) -> dict:
    """Softmax and USA post-LN (slope of log(1 − ρ) in t) and softmax pre-LN (slope in log t)
    from three orthogonal tokens in d = 3; windows where 1 − ρ lies in [1e-12, 1e-3] (post) and
    t ∈ [50, 200] (pre)."""
    from ..model.attention import SoftmaxAttention
    from ..model.attention_variants import UnnormalisedAttention

    X0 = equiangular_tokens(3, 3, 0.0)
    eye = torch.eye(3, dtype=torch.float64)
    out = {}
    for key, attn, dt, steps, every in (("post", SoftmaxAttention(beta=beta), 0.01, 1200, 10),
                                        ("usa_post", UnnormalisedAttention(beta * eye, eye), 0.002, 1500, 10),
                                        ("pre", SoftmaxAttention(beta=beta), 0.2, 1000, 25)):
        t, c, _ = attention_flow(X0, attn, dt, steps, "pre" if key == "pre" else "post", every)
        gap = 1 - c[0]
        sel = (t >= 50) if key == "pre" else (gap > 1e-12) & (gap < 1e-3)
        fit = fit_line(np.log(t[sel]) if key == "pre" else t[sel], np.log(gap[sel]))
        out[key] = {"t": t[sel].tolist(), "one_minus_rho": gap[sel].tolist(), "slope": fit.to_dict(), "dt": dt}
    return out


def _law_checks(cfg: VariantsConfig) -> dict:
    """κ against the measured MLP covariance for every law (d = law_d, delocalised pair at cosine
    0.5, ReLU, σ_U = σ_W = 0.3), and the Rademacher departure at d = 2 (module tests' pair)."""
    from ..model.kernel import NoiseKernel
    from ..model.noise import WEIGHT_LAWS

    d = cfg.law_d
    g = make_generator(cfg.seed)
    x = normalize(torch.sign(torch.randn(d, generator=g, dtype=torch.float64)))
    z = normalize(torch.sign(torch.randn(d, generator=g, dtype=torch.float64)))
    y = 0.5 * x + math.sqrt(0.75) * normalize(z - (z @ x) * x)
    kappa = float(NoiseKernel("relu", d, 0.3, 0.3).kappa(float(x @ y)))
    laws = {}
    for law, s in zip(WEIGHT_LAWS, child_seeds(cfg.seed, len(WEIGHT_LAWS))):
        laws[law] = mlp_covariance(x, y, law, "relu", cfg.law_m, cfg.law_draws, 0.3, 0.3, seed=s)
    e1, e12 = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([1.0, 1.0], dtype=torch.float64) / math.sqrt(2)
    small_draws = 64
    small = mlp_covariance(e1, e12, "rademacher", "relu", 1024, small_draws, seed=cfg.seed + 1, conditional=True)
    return {"d": d, "cosine": float(x @ y), "kappa": kappa, "laws": {k: list(v) for k, v in laws.items()},
            "draws": cfg.law_draws,
            "small_d": {"measured": list(small), "draws": small_draws, "exact": 1 / (4 * math.sqrt(2)),
                        "kappa": float(NoiseKernel("relu", 2).kappa(1 / math.sqrt(2)))}}


@dataclass(repr=False)
class VariantsResult(Result):
    """Every check of SPEC §7 that does not need the standard blocks.

    Attributes
    ----------
    config : VariantsConfig
        The sizes run.
    one_head_max_diff : float
        max |multi-head (H = 1, d_h = d, O = I) − single head| over 4 samples of 6 tokens in d = 4.
    sinkhorn_max_sum_error : float
        max |row or column sum − 1| of the Sinkhorn weights.
    equiangular : dict
        ``"softmax"``, ``"usa"`` → ``t``, ``rho_ode``, ``rho_sim`` (steps + 1,), ``max_error``,
        ``max_spread``: equiangular tokens under Heun against the ODE of SPEC §7.
    normalisation : dict
        ``"post"``, ``"usa_post"``, ``"pre"`` → the fitted decay of 1 − ρ (``slope``: value, 95% ci,
        points), the fitted ``t``, ``one_minus_rho`` and the step ``dt``.
    weight_laws : dict
        κ at the pair's cosine and, per law, the measured covariance (mean, SE) over ``draws`` MLPs;
        ``small_d``: the Rademacher pair in d = 2 with its exact value.
    resampled : dict
        Per depth the final mean cosine minus the averaged drift's (``rows``) and the fitted decay
        exponent in L of the squared path difference (``sq_error_exponent``).
    provenance : dict
        Versions and device.
    elapsed_s : float
        The run time in seconds.
    """

    config: VariantsConfig
    one_head_max_diff: float
    sinkhorn_max_sum_error: float
    equiangular: dict
    normalisation: dict
    weight_laws: dict
    resampled: dict
    provenance: dict
    elapsed_s: float
    command: ClassVar[str] = "variants"
    summary_name: ClassVar[str] = "variants.json"

    def to_dict(self) -> dict:
        return {"one_head_max_diff": self.one_head_max_diff, "sinkhorn_max_sum_error": self.sinkhorn_max_sum_error,
                "equiangular": self.equiangular, "normalisation": self.normalisation, "weight_laws": self.weight_laws,
                "resampled": self.resampled, "elapsed_s": self.elapsed_s}

    def names(self) -> dict[str, dict[str, str]]:
        """The names of the dataset's own variables and coordinates beside `NAMES`."""
        return {
            "flow": {"long_name": "attention of the equiangular flow (softmax or USA)", "units": "1"},
            "rho_ode": {"long_name": "cosine ρ of the equiangular tokens, the ODE of SPEC §7", "units": "1"},
            "rho_sim": {"long_name": "mean pairwise cosine ρ of the equiangular tokens, simulated (Heun)", "units": "1"},
            "law": {"long_name": "law of the MLP weights", "units": "1"},
            "law_covariance": {"long_name": "E⟨G(x), G(y)⟩/d of the MLP over its weight draws, measured", "units": "1"},
            "law_covariance_se": {"long_name": "standard error of law_covariance", "units": "1"},
            "cosine_difference": {"long_name": "final mean cosine, per-layer random attention minus averaged drift",
                                  "units": "1"},
            "cosine_difference_se": {"long_name": "standard error of cosine_difference", "units": "1"},
            "path_sq_error": {"long_name": "sup over t of the squared mean-cosine path difference, mean over samples",
                              "units": "1"},
            "path_sq_error_se": {"long_name": "standard error of path_sq_error", "units": "1"},
        }

    def _dataset(self) -> xr.Dataset:
        """The equiangular curves (flow, time), the weight laws' covariances (law) and the per-layer
        random attention against its averaged drift (depth); the scalar checks and the fitted slopes
        as attributes."""
        flows = list(self.equiangular)
        laws = self.weight_laws["laws"]
        rows = self.resampled["rows"]
        data = {
            "rho_ode": (("flow", "time"), np.stack([self.equiangular[k]["rho_ode"] for k in flows])),
            "rho_sim": (("flow", "time"), np.stack([self.equiangular[k]["rho_sim"] for k in flows])),
            "law_covariance": ("law", [m for m, _ in laws.values()]),
            "law_covariance_se": ("law", [se for _, se in laws.values()]),
            "cosine_difference": ("depth", [r["diff"] for r in rows]),
            "cosine_difference_se": ("depth", [r["diff_se"] for r in rows]),
            "path_sq_error": ("depth", [r["sq_error"] for r in rows]),
            "path_sq_error_se": ("depth", [r["sq_error_se"] for r in rows]),
        }
        attrs = {"one_head_max_diff": self.one_head_max_diff, "sinkhorn_max_sum_error": self.sinkhorn_max_sum_error,
                 "law_kappa": self.weight_laws["kappa"], "law_cosine": self.weight_laws["cosine"],
                 "sq_error_exponent": self.resampled["sq_error_exponent"]["exponent"],
                 **{f"slope_{k}": v["slope"]["value"] for k, v in self.normalisation.items()}}
        coords = {"flow": flows, "time": np.asarray(self.equiangular[flows[0]]["t"]), "law": list(laws),
                  "depth": [r["L"] for r in rows]}
        return xr.Dataset(data, coords=coords, attrs=attrs)


@validated
def run_variants(cfg: VariantsConfig) -> VariantsResult:
    """Every check of SPEC §7 that does not need the standard blocks (one CPU thread: every tensor
    is tiny).

    Parameters
    ----------
    cfg : VariantsConfig
        The sizes of the checks and the seed.

    Returns
    -------
    VariantsResult
        The numbers of every check.
    """
    from ..core.runtime import cpu_threads_for

    cfg = as_config(cfg, VariantsConfig)
    with cpu_threads_for(0):
        return _run_variants(cfg)


def _run_variants(cfg: VariantsConfig) -> VariantsResult:
    from ..model.attention import SoftmaxAttention
    from ..model.attention_variants import SinkhornAttention
    from ..measure.stats import fit_power_law

    start = time.perf_counter()
    g = make_generator(cfg.seed)
    X = normalize(torch.randn(4, 6, 4, generator=g, dtype=torch.float64))
    Q, K, V = (torch.randn(4, 4, generator=g, dtype=torch.float64) / 2 for _ in range(3))
    one_head = float((MultiHeadAttention.split(Q, K, V, 1)(X) - SoftmaxAttention(A=Q.T @ K, V=V)(X)).abs().max())
    S = SinkhornAttention(3 * Q.T @ K, V, iters=5000, tol=1e-13).weights(X)
    sums = float(max((S.sum(-1) - 1).abs().max(), (S.sum(-2) - 1).abs().max()))
    with torch.no_grad():
        res = run_resampled(ResampledConfig.model_validate(
            {"model": dict(N=5, d=4, T=2.0, mlp=False, batch=cfg.samples, attention_draws=cfg.attention_draws, seed=cfg.seed),
             "depths": cfg.depths}))
    depths = res.depths
    fit = fit_power_law(depths, np.stack([res.sq_error[L] for L in depths], axis=1), n_boot=400, seed=cfg.seed)
    equiangular = {k: _equiangular_check(k, cfg.beta, cfg.flow_steps) for k in ("softmax", "usa")}
    normalisation, laws = _decay_fits(cfg.beta), _law_checks(cfg)
    return VariantsResult(cfg, one_head, sums, equiangular, normalisation, laws,
                          {**res.to_dict(), "sq_error_exponent": fit.to_dict()}, provenance("cpu"), time.perf_counter() - start)
