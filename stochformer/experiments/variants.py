"""Checks of the model's variants (SPEC §7): the deterministic attention flows, the laws of the
MLP weights, and per-layer random attention against its averaged drift.

- :func:`equiangular_tokens`, :func:`equiangular_rhs`, :func:`attention_flow`: n ≤ d equiangular
  tokens under the noiseless attention flow (Q = K = V = I, inverse temperature β) stay
  equiangular with dρ/dt = 2e^{βρ}(1−ρ)((n−1)ρ+1)/(e^β + (n−1)e^{βρ}) (softmax) or
  (2/n)e^{βρ}(1−ρ)((n−1)ρ+1) (USA); post-LN (x ← LN(x + Δt Attn(x))) gives 1 − ρ ~ e^{−2t}
  (softmax), pre-LN (x ← x + Δt Attn(LN x), the residual stream not projected) 1 − ρ ~ 1/t².
- :func:`mlp_covariance`: the empirical E⟨G(x), G(y)⟩/d of the explicit-weights MLP for a weight law.
- :func:`run_resampled`: the transformer with Q, K, V drawn afresh every layer at several depths
  L, against the model whose attention is the averaged drift b̄ (:class:`AveragedAttention`),
  from the same initial tokens and with the same MLP draws.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy import stats

from ..attention_variants import AveragedAttention, ResampledAttention
from ..build import make_noise
from ..config import RunConfig
from ..diagnostics import mean_cosine
from ..noise import MLPNoise
from ..runtime import DTYPES, child_seeds, make_generator, provenance, resolve_device
from ..sphere import initial_tokens, normalize
from ..transformer import TransformerLayer

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


def attention_flow(X0: torch.Tensor, attention, dt: float, steps: int, norm: str = "post",
                   every: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noiseless flow of ``attention`` from X0 (batch, n, d): ``post`` x ← LN(x + Δt Attn(x)),
    ``pre`` x ← x + Δt Attn(LN x). Returns times (k,), mean and spread (max − min) of the pairwise
    cosines of the normalised tokens (batch, k), every ``every`` steps (step 0 included)."""
    if norm not in ("post", "pre"):
        raise ValueError(f"norm: 'post' or 'pre' (got {norm!r})")
    X, times, means, spreads = X0, [], [], []
    n = X0.shape[-2]
    iu = torch.triu_indices(n, n, 1)

    def record(s: int) -> None:
        Z = normalize(X)
        c = (Z @ Z.transpose(-1, -2))[..., iu[0], iu[1]]
        times.append(s * dt)
        means.append(c.mean(-1))
        spreads.append(c.amax(-1) - c.amin(-1))

    record(0)
    for s in range(1, steps + 1):
        X = normalize(X + dt * attention(X)) if norm == "post" else X + dt * attention(normalize(X))
        if s % every == 0:
            record(s)
    return np.asarray(times), torch.stack(means, -1).numpy(), torch.stack(spreads, -1).numpy()


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
    noise = MLPNoise(activation=activation, m=m, sigma_U=sigma_U, sigma_W=sigma_W, mode="weights", law=law, nu=nu)
    g = make_generator(seed)
    X = torch.stack([x, y]).to(torch.float64).expand(draws, 2, -1).contiguous()
    if conditional:
        v = noise.empirical_kernel(X, g)[:, 0, 1]
    else:
        G = noise.increment(X, 1.0, g)  # (draws, 2, d): G(x), G(y) (dt = 1)
        v = (G[:, 0] * G[:, 1]).sum(-1) / x.shape[-1]
    return float(v.mean()), float(v.std(correction=1) / math.sqrt(draws))


# ----------------------------------------------------------------- per-layer random attention


class ResampledConfig(RunConfig):
    """Per-layer random attention (Q, K, V fresh in every layer: √β I + σZ/√d, γI + σZ/√d) at the
    depths ``depths`` against the averaged drift b̄ of ``attention_draws`` draws at the largest
    depth. ``attention_kind`` is set by the experiment; the MLP (if on) is the same in both."""

    depths: list[int] = Field(default_factory=lambda: [4, 16, 64, 256], description="depths L (at least 2)")
    batch: int = Field(64, ge=4, description="samples (initial tokens and weight draws), >= 4")

    @model_validator(mode="after")
    def _depths(self) -> "ResampledConfig":
        if len(self.depths) < 2 or len(set(self.depths)) != len(self.depths) or min(self.depths) < 1:
            raise ValueError(f"depths: need at least 2 distinct integers >= 1 (got {self.depths})")
        if self.dynamics != "transformer":
            raise ValueError("dynamics: the per-layer random attention is a transformer (dynamics = 'transformer')")
        return self


@dataclass
class ResampledResult:
    """``final[L]``: (batch,) final mean cosine of the resampled model at depth L; ``reference``:
    (batch,) of the averaged-drift model at the largest depth (same X₀); ``curves[L]``: (batch,
    L + 1) mean cosine by layer; ``sq_error[L]``: (batch,) sup over the common times of the squared
    difference of the mean-cosine paths."""

    config: ResampledConfig
    depths: list[int]
    final: dict[int, np.ndarray]
    reference: np.ndarray
    reference_curve: np.ndarray
    curves: dict[int, np.ndarray]
    sq_error: dict[int, np.ndarray]
    provenance: dict
    elapsed_s: float

    def differences(self) -> list[dict]:
        """Per depth: mean of final − reference (paired samples) with its SE, and the mean squared error."""
        rows = []
        for L in self.depths:
            diff = self.final[L] - self.reference
            rows.append({"L": L, "diff": float(diff.mean()), "diff_se": float(diff.std(ddof=1) / math.sqrt(len(diff))),
                         "sq_error": float(self.sq_error[L].mean()),
                         "sq_error_se": float(self.sq_error[L].std(ddof=1) / math.sqrt(len(diff)))})
        return rows

    def to_dict(self) -> dict:
        return {"depths": self.depths, "rows": self.differences(), "reference_mean": float(self.reference.mean()),
                "elapsed_s": self.elapsed_s}


def _run_layers(X0: torch.Tensor, layer: TransformerLayer, L: int, gen: torch.Generator) -> torch.Tensor:
    """Mean cosine by layer: (batch, L + 1)."""
    X, out = X0, [mean_cosine(X0)]
    for _ in range(L):
        X = layer.step(X, gen)
        out.append(mean_cosine(X))
    return torch.stack(out, -1)


def run_resampled(cfg: ResampledConfig, progress: bool = False) -> ResampledResult:
    """The resampled-attention transformer at every depth and the averaged-drift one at the largest
    (both from the same X₀, each depth's MLP from the same seed)."""
    start = time.perf_counter()
    device, dtype = resolve_device(cfg.device), DTYPES[cfg.dtype]
    s_init, s_mlp, s_attn = child_seeds(cfg.seed, 3)
    X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, make_generator(s_init, device), dtype, device)
    depths = sorted(cfg.depths)
    top = depths[-1]
    gamma = cfg.gamma_value
    with torch.no_grad():
        avg = AveragedAttention.from_law(cfg.d, cfg.beta, gamma, cfg.attention_std, cfg.attention_draws,
                                         cfg.attention_seed, dtype, device)
        ref = _run_layers(X0, TransformerLayer(cfg.T / top, avg, make_noise(cfg), cfg.order), top,
                          make_generator(s_mlp, device)).cpu().numpy()
        final, curves, sq = {}, {}, {}
        for L in depths:
            attn = ResampledAttention(cfg.d, cfg.beta, gamma, cfg.attention_std, s_attn)
            c = _run_layers(X0, TransformerLayer(cfg.T / L, attn, make_noise(cfg), cfg.order), L,
                            make_generator(s_mlp, device)).cpu().numpy()
            curves[L], final[L] = c, c[:, -1]
            sq[L] = ((c - ref[:, :: top // L][:, : L + 1]) ** 2).max(-1) if top % L == 0 else (c[:, -1] - ref[:, -1]) ** 2
    return ResampledResult(cfg, depths, final, ref[:, -1], ref, curves, sq, provenance(device), time.perf_counter() - start)
