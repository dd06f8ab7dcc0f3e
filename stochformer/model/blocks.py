"""Standard transformer blocks at random initialisation, and what the paper's model predicts for
them (SPEC §7).

Blocks (one fresh block per layer, each sample a fresh network), residual branches scaled by
α₁ = T/L (attention) and α₂ = √(T/L) (MLP):

- ``paper``: the paper's layer in plain torch (SPEC §1): Y = LN(X + α₁ Attn(X)), X' = LN(Y + α₂ G(Y)),
  LN(v) = v/|v|, Q = K = √β I, V = γ I, G with fresh N(0, 1) weights (biases σ_U, σ_W).
- ``encoder_post`` / ``encoder_pre``: ``torch.nn.TransformerEncoderLayer`` (true LayerNorm,
  multi-head attention with 1/√d_h, GELU MLP of width m, biases, torch's default initialisation),
  post-LN or pre-LN (``norm_first``); the branches scaled by scaling ``out_proj`` and ``linear2``.
- ``gpt2``: pre-LN, causal multi-head attention, GELU (tanh form) MLP, weights N(0, std²), biases
  0; ``gpt2_init``: the residual projections N(0, std²/(2L)) and α₁ = α₂ = 1 instead.
- ``llama``: pre-RMSNorm, causal multi-head attention with rotary position embedding, no biases,
  SwiGLU MLP down(silu(gate x) ⊙ up x), weights N(0, std²).

The matched MLP law (`MLPLaw`) is the Gaussian law with the block's weight variances; its
kernel (`MatchedKernel`) is κ_G(ρ) = m v₂ E[φ(V₁) φ(V₂)] (× v₃ r² ρ for SwiGLU) + c₂,
(V₁, V₂) centred Gaussian with variance v₁ r² + c₁ and covariance v₁ r² ρ + c₁, where r² is the
squared norm of the normalised token (d for LayerNorm and RMSNorm with unit gain, 1 for the
sphere) and ρ the cosine of the normalised tokens (after centring for LayerNorm). The random
attention of the standard blocks has centred values and output projection, so its averaged drift
is 0 and the predictions have no attention (the ``paper`` block keeps its deterministic one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.brownian import as_draws
from .activations import get_activation
from .attention import Attention, SoftmaxAttention
from .noise import NoiseSource
from ..core.sphere import normalize

#: the block kinds of ``stochformer bridge``
BLOCKS = ("paper", "encoder_post", "encoder_pre", "gpt2", "llama")
#: blocks with the norm before each branch (the residual stream is not normalised)
PRE_NORM = frozenset({"encoder_pre", "gpt2", "llama"})
#: the norm each block applies: ``sphere`` (v/|v|), ``ln`` (centre, scale to √d), ``rms`` (scale to √d)
NORMS = {"paper": "sphere", "encoder_post": "ln", "encoder_pre": "ln", "gpt2": "ln", "llama": "rms"}


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


_PHI = {"gelu_tanh": _gelu_tanh, "swiglu": F.silu}


def phi_of(activation: str):
    """φ of an MLP law: the SwiGLU gate's silu, GPT-2's tanh GELU, or a registered activation."""
    return _PHI.get(activation) or get_activation(activation)


# ----------------------------------------------------------------- blocks


class PaperBlock(nn.Module):
    """The paper's layer (SPEC §1) as a torch module with fresh Gaussian MLP weights."""

    def __init__(self, d: int, m: int, a1: float, a2: float, activation: str = "relu", sigma_U: float = 0.0,
                 sigma_W: float = 0.0, beta: float = 1.0, gamma: float = 1.0) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(dtype=torch.float64)
        self.U, self.bU = nn.Parameter(torch.randn(m, d, **kw)), nn.Parameter(sigma_U * torch.randn(m, **kw))
        self.W, self.bW = nn.Parameter(torch.randn(d, m, **kw)), nn.Parameter(sigma_W * torch.randn(d, **kw))
        self.attn, self.phi, self.a1, self.a2 = SoftmaxAttention(beta, gamma), get_activation(activation), a1, a2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d, m = self.U.shape[1], self.U.shape[0]
        y = normalize(x + self.a1 * self.attn(x))
        g = self.phi(y @ self.U.T / math.sqrt(d) + self.bU) @ self.W.T / math.sqrt(m) + self.bW
        return normalize(y + self.a2 * g)


def encoder_block(d: int, heads: int, m: int, a1: float, a2: float, pre: bool) -> nn.Module:
    """``nn.TransformerEncoderLayer`` (GELU, no dropout, float64) with its attention branch scaled
    by ``a1`` (``out_proj``) and its MLP branch by ``a2`` (``linear2``)."""
    layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=m, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=pre, dtype=torch.float64)
    with torch.no_grad():
        for lin, a in ((layer.self_attn.out_proj, a1), (layer.linear2, a2)):
            lin.weight.mul_(a)
            lin.bias.mul_(a)
    return layer.eval()


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Causal multi-head attention with scores ⟨q, k⟩/√d_h: q, k, v (1, N, d) → (1, N, d)."""
    B, N, d = q.shape
    split = lambda t: t.view(B, N, heads, d // heads).transpose(1, 2)  # noqa: E731
    out = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
    return out.transpose(1, 2).reshape(B, N, d)


class GPT2Block(nn.Module):
    """GPT-2's block: x + a1·attn(ln₁ x), then + a2·mlp(ln₂ x); weights N(0, std²), biases 0;
    ``scaled_init``: the two residual projections N(0, std²/(2·depth)) (GPT-2's own scaling)."""

    def __init__(self, d: int, heads: int, m: int, a1: float, a2: float, std: float = 0.02,
                 scaled_init: bool = False, depth: int = 1) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(dtype=torch.float64)
        self.ln_1, self.ln_2 = nn.LayerNorm(d, **kw), nn.LayerNorm(d, **kw)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d, **kw), nn.Linear(d, d, **kw)
        self.c_fc, self.mlp_proj = nn.Linear(d, m, **kw), nn.Linear(m, d, **kw)
        with torch.no_grad():
            for lin in (self.c_attn, self.attn_proj, self.c_fc, self.mlp_proj):
                proj = lin in (self.attn_proj, self.mlp_proj)
                lin.weight.normal_(0.0, std / math.sqrt(2 * depth) if (proj and scaled_init) else std)
                lin.bias.zero_()
        self.heads, self.a1, self.a2 = heads, a1, a2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(self.ln_1(x)).chunk(3, dim=-1)
        x = x + self.a1 * self.attn_proj(_causal_attention(q, k, v, self.heads))
        return x + self.a2 * self.mlp_proj(_gelu_tanh(self.c_fc(self.ln_2(x))))


def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm with unit gain: x/√(mean x² + eps), norm √d."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rotary(x: torch.Tensor, heads: int, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of (1, N, d) per head (pairs (2i, 2i+1) of each head rotated by
    position · base^{−2i/d_h})."""
    B, N, d = x.shape
    dh = d // heads
    freq = base ** (-torch.arange(0, dh, 2, dtype=x.dtype) / dh)
    ang = torch.arange(N, dtype=x.dtype)[:, None] * freq[None, :]  # (N, dh/2)
    cos, sin = ang.cos().repeat(1, heads), ang.sin().repeat(1, heads)  # (N, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    return out


class LlamaBlock(nn.Module):
    """Llama's block: x + a1·attn(rms x) (rotary, causal, no biases), then
    + a2·down(silu(gate h) ⊙ up h), h = rms x; weights N(0, std²)."""

    def __init__(self, d: int, heads: int, m: int, a1: float, a2: float, std: float = 0.02) -> None:
        super().__init__()
        kw: dict[str, Any] = dict(bias=False, dtype=torch.float64)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, **kw) for _ in range(4))
        self.gate, self.up, self.down = nn.Linear(d, m, **kw), nn.Linear(d, m, **kw), nn.Linear(m, d, **kw)
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(0.0, std)
        self.heads, self.a1, self.a2 = heads, a1, a2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = rms_norm(x)
        q, k = rotary(self.q(h), self.heads), rotary(self.k(h), self.heads)
        x = x + self.a1 * self.o(_causal_attention(q, k, self.v(h), self.heads))
        h = rms_norm(x)
        return x + self.a2 * self.down(F.silu(self.gate(h)) * self.up(h))


# ----------------------------------------------------------------- the matched MLP law and kernel


@dataclass(frozen=True)
class MLPLaw:
    """The Gaussian MLP G(x) = W₂ φ(W₁ x + b₁) + b₂ (SwiGLU: W₂ (silu(W₁ x) ⊙ W₃ x)) with i.i.d.
    centred entries of variances w1, b1, w2, b2 (w3), width m."""

    activation: str
    m: int
    w1: float
    b1: float
    w2: float
    b2: float
    w3: float = 0.0

    def sample(self, H: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """G(h) for inputs H (batch, N, k) with fresh weights per sample: (batch, N, k)."""
        B, N, k = H.shape
        kw: dict[str, Any] = dict(generator=generator, dtype=H.dtype, device=H.device)
        W1 = torch.randn(B, k, self.m, **kw) * math.sqrt(self.w1)
        pre = H @ W1 + math.sqrt(self.b1) * torch.randn(B, 1, self.m, **kw)
        hid = phi_of(self.activation)(pre)
        if self.activation == "swiglu":
            hid = hid * (H @ (torch.randn(B, k, self.m, **kw) * math.sqrt(self.w3)))
        return hid @ (torch.randn(B, self.m, k, **kw) * math.sqrt(self.w2)) + math.sqrt(self.b2) * torch.randn(B, 1, k, **kw)


#: angles of the table that `MatchedKernel.kappa` interpolates
TABLE_POINTS = 2049


@dataclass(frozen=True)
class MatchedKernel:
    """κ(ρ) = scale · κ_G(ρ) for an `MLPLaw` at inputs of squared norm ``r2`` (module doc);
    ``scale = 1/r2`` puts the field on the unit sphere. Has the interface [`ExactField`][stochformer.model.noise.ExactField]
    needs (``kappa``, ``kappa1``, ``activation``)."""

    law: MLPLaw
    r2: float
    scale: float = 1.0
    quad_points: int = 64

    @property
    def activation(self) -> str:
        return f"matched-{self.law.activation}"

    def exact(self, rho) -> torch.Tensor:
        """κ(ρ) by 2-D Gauss–Hermite quadrature (``quad_points``² nodes per value)."""
        rho = torch.as_tensor(rho, dtype=torch.float64)
        law = self.law
        a, b = law.w1 * self.r2, law.b1
        nodes, weights = np.polynomial.hermite_e.hermegauss(self.quad_points)
        z, w = torch.as_tensor(nodes), torch.as_tensor(weights / math.sqrt(2 * math.pi))
        v = a + b
        r = ((a * rho + b) / v).clamp(-1.0, 1.0).reshape(-1, 1, 1)
        phi = phi_of(law.activation)
        v1 = math.sqrt(v) * z[None, :, None]
        v2 = math.sqrt(v) * (r * z[None, :, None] + torch.sqrt(1 - r**2) * z[None, None, :])
        e = (phi(v1) * phi(v2) * (w[:, None] * w[None, :])).sum((-1, -2)).reshape(rho.shape)
        if law.activation == "swiglu":
            e = e * (law.w3 * self.r2 * rho)
        return self.scale * (law.m * law.w2 * e + law.b2)

    @cached_property
    def _table(self) -> torch.Tensor:
        return self.exact(torch.cos(torch.linspace(0.0, math.pi, TABLE_POINTS, dtype=torch.float64)))

    def kappa(self, rho) -> torch.Tensor:
        """κ(ρ), float64, same shape as ``rho``: linear interpolation in θ = arccos ρ of
        `exact` on ``TABLE_POINTS`` angles (κ is smooth in θ even where it is not in ρ,
        e.g. ReLU at ρ = 1; interpolation error ~1e-7 relative)."""
        rho = torch.as_tensor(rho, dtype=torch.float64)
        pos = torch.arccos(rho.clamp(-1.0, 1.0)) * ((TABLE_POINTS - 1) / math.pi)
        i = pos.floor().clamp(max=TABLE_POINTS - 2).long()
        f = pos - i
        tab = self._table.to(rho.device)
        return tab[i] * (1 - f) + tab[i + 1] * f

    @property
    def kappa1(self) -> float:
        return float(self.kappa(1.0))


def block_law(kind: str, d: int, m: int, std: float = 0.02, depth: int = 1, gpt2_init: bool = False,
              activation: str = "relu", sigma_U: float = 0.0, sigma_W: float = 0.0) -> MLPLaw:
    """The Gaussian MLP law with the block's weight variances (α₂ not included; GPT-2's scaled
    projection included when ``gpt2_init``). torch's default ``nn.Linear`` initialisation is
    U(±1/√fan_in) for weights and biases: variance 1/(3 fan_in) (matched by variance only)."""
    if kind == "paper":
        return MLPLaw(activation, m, 1.0 / d, sigma_U**2, 1.0 / m, sigma_W**2)
    if kind in ("encoder_post", "encoder_pre"):
        return MLPLaw("gelu", m, 1 / (3 * d), 1 / (3 * d), 1 / (3 * m), 1 / (3 * m))
    if kind == "gpt2":
        return MLPLaw("gelu_tanh", m, std**2, 0.0, std**2 / (2 * depth if gpt2_init else 1), 0.0)
    if kind == "llama":
        return MLPLaw("swiglu", m, std**2, 0.0, std**2, 0.0, w3=std**2)
    raise ValueError(f"block: unknown block {kind!r}; valid: {', '.join(BLOCKS)}")


def apply_norm(x: torch.Tensor, norm: str) -> torch.Tensor:
    """The block's norm without gain: ``sphere`` v/|v|, ``ln`` (v − mean)/std (norm √d), ``rms``."""
    if norm == "sphere":
        return normalize(x)
    if norm == "ln":
        return F.layer_norm(x, x.shape[-1:], eps=1e-5)
    return rms_norm(x)


def make_block(kind: str, d: int, heads: int, m: int, a1: float, a2: float, std: float = 0.02, depth: int = 1,
               gpt2_init: bool = False, **paper) -> nn.Module:
    """One fresh block of ``kind`` (its weights from torch's default generator)."""
    if kind == "paper":
        return PaperBlock(d, m, a1, a2, **paper)
    if kind in ("encoder_post", "encoder_pre"):
        return encoder_block(d, heads, m, a1, a2, pre=kind == "encoder_pre")
    if kind == "gpt2":
        return GPT2Block(d, heads, m, a1, a2, std, scaled_init=gpt2_init, depth=depth)
    if kind == "llama":
        return LlamaBlock(d, heads, m, a1, a2, std)
    raise ValueError(f"block: unknown block {kind!r}; valid: {', '.join(BLOCKS)}")


def ln_basis(d: int, dtype=torch.float64) -> torch.Tensor:
    """An orthonormal basis of 1⊥ ⊂ R^d (where LayerNorm's outputs live): (d, d − 1)."""
    Qm, _ = torch.linalg.qr(torch.eye(d, dtype=dtype) - 1.0 / d)
    return Qm[:, : d - 1]


def cosine_stats(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and minimum pairwise cosine of the tokens normalised to the sphere: X (batch, N, d) → (batch,) each."""
    Z = normalize(X)
    G = Z @ Z.transpose(-1, -2)
    N = X.shape[-2]
    iu = torch.triu_indices(N, N, 1)
    c = G[..., iu[0], iu[1]]
    return c.mean(-1), c.amin(-1)


@dataclass
class BlockNetwork:
    """A network of fresh standard blocks, one drawn per step from torch's global generator (layer
    scalings in ``block``; the step size is not used)."""

    kind: str
    block: dict
    on_sphere: ClassVar[bool] = False  # the blocks' outputs are LayerNorm's, of norm √d

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Nothing to draw before the first layer."""

    def step(self, X: torch.Tensor, dt: float, draws: object) -> torch.Tensor:
        return make_block(self.kind, **self.block)(X)


@dataclass
class MatchedModel:
    """The idealised model with the matched Gaussian MLP (see `predict_model`); the step size
    is ``a2`` (and ``a1``), not the solver's."""

    pre: bool
    norm: str
    law: MLPLaw
    r: float
    a2: float
    attention: Optional[Attention] = None
    a1: float = 0.0

    @property
    def on_sphere(self) -> bool:
        """Post-norm states are unit tokens; pre-norm ones the residual stream."""
        return not self.pre

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Nothing to draw before the first layer."""

    def step(self, X: torch.Tensor, dt: float, draws) -> torch.Tensor:
        generator = as_draws(draws).generator
        if self.pre:
            return X + self.a2 * self.law.sample(apply_norm(X, self.norm), generator)
        if self.attention is not None:
            X = normalize(X + self.a1 * self.attention(X))
        return normalize(X + self.a2 * self.law.sample(self.r * X, generator) / self.r)


@dataclass
class PreNormField:
    """dx = W(dt, norm x) in R^d (Euler; no projection): the pre-norm limit of the matched kernel."""

    field: NoiseSource
    norm: str
    on_sphere: ClassVar[bool] = False  # the residual stream

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Nothing to draw before the first step."""

    def step(self, X: torch.Tensor, dt: float, draws) -> torch.Tensor:
        return X + self.field.increment(normalize(apply_norm(X, self.norm)), dt, draws)
