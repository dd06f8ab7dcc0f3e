"""The config layer's only bridge to the library: from a validated
:class:`~stochformer.config.RunConfig` to the objects :func:`stochformer.solve` takes — initial
tokens, attention, noise source, and the model (transformer or limit SDE)."""

from __future__ import annotations

from typing import Optional, Union

import torch

from . import sphere
from .config import InitConfig, RunConfig
from .model.activations import ActivationLike
from .model.attention import DEFAULT_BLOCK, Attention, SoftmaxAttention, query_chunk
from .model.kernel import NoiseKernel
from .model.noise import ExactField, NoiseSource, RandomFeatureField, RandomMLP
from .model.rng import resolve_backend
from .model.sde import INTEGRATORS, LimitSDE
from .model.transformer import Transformer

Model = Union[Transformer, LimitSDE]


def initial_tokens(
    init: InitConfig, batch: int, N: int, d: int, generator: torch.Generator, dtype=torch.float64, device="cpu"
) -> torch.Tensor:
    """Initial tokens X₀: (batch, N, d), unit rows, as described by ``init``."""
    kw = dict(generator=generator, dtype=dtype, device=device)
    if init.kind == "uniform":
        return sphere.uniform(batch, N, d, **kw)
    if init.kind == "cluster":
        return sphere.cluster(batch, N, d, init.spread, init.center, **kw)
    if init.kind == "pair":
        return sphere.pair(batch, d, init.cosine, **kw)
    return sphere.load_tokens(init.path, batch, N, d, dtype=dtype, device=device)


def make_kernel(cfg: RunConfig, activation: Optional[ActivationLike] = None) -> NoiseKernel:
    """κ for the config's activation (or the callable ``activation``), d, σ_U, σ_W and noise scale."""
    return NoiseKernel(activation or cfg.activation, cfg.d, cfg.sigma_U, cfg.sigma_W, cfg.noise_scale)


def make_attention(
    cfg: RunConfig, dtype=torch.float64, device="cpu", chunk: Optional[int] = None, sdpa: bool = False
) -> Optional[SoftmaxAttention]:
    """The config's attention (None when ``attention = false``)."""
    if not cfg.attention:
        return None
    return SoftmaxAttention.from_matrices(cfg.d, cfg.beta, cfg.gamma_value, cfg.Q, cfg.K, cfg.V, dtype, device, chunk, sdpa)


#: N from which one SDE step with a random-feature field of width 1024 costs at most half the step
#: with the exact field (benchmarks/bench_sde.py, docs/benchmarks.md "Limit SDE"); for width M the
#: crossover is RF_CROSSOVER_N · M/1024 (an empirical law fitted to that table).
RF_CROSSOVER_N = 92.0


def noise_kind(cfg: RunConfig) -> str:
    """The resolved noise source name: ``auto`` → mlp_gaussian for the transformer; for the SDE the
    exact field below the crossover N*(features) = RF_CROSSOVER_N · features/1024, random
    features (of width ``features``) from it on."""
    if cfg.noise != "auto":
        return cfg.noise
    if cfg.dynamics == "transformer":
        return "mlp_gaussian"
    return "exact" if cfg.N < RF_CROSSOVER_N * cfg.features / 1024 else "random_features"


def make_noise(cfg: RunConfig, activation: Optional[ActivationLike] = None, token_chunk: Optional[int] = None) -> Optional[NoiseSource]:
    """The noise source of ``cfg`` (None without MLP); ``activation``: a callable replacing cfg's."""
    if not cfg.mlp or cfg.noise_scale == 0:
        return None
    kind = noise_kind(cfg)
    common = dict(activation=activation or cfg.activation, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W, scale=cfg.noise_scale)
    if kind in ("mlp", "mlp_gaussian"):
        rng = resolve_backend(cfg.rng, cfg.device)
        mode = "weights" if kind == "mlp" else "gaussian"
        return RandomMLP(width=cfg.m, mode=mode, rng=rng, precision=cfg.draw_precision, **common)
    if kind == "random_features":
        return RandomFeatureField(features=cfg.features, token_chunk=token_chunk, **common)
    return ExactField(make_kernel(cfg, activation))


def make_model(
    cfg: RunConfig,
    dtype=torch.float64,
    device="cpu",
    attention: Optional[Attention] = None,
    noise: Optional[NoiseSource] = None,
    activation: Optional[ActivationLike] = None,
) -> Model:
    """The model of ``cfg``: a :class:`Transformer` or a :class:`LimitSDE` with its integrator.

    ``attention`` / ``noise``: prebuilt pieces (a chunked attention, a field shared between
    systems) used instead of building them from ``cfg``; ``activation``: any callable φ replacing
    ``cfg.activation``."""
    attention = attention if attention is not None else make_attention(cfg, dtype, device)
    noise = noise if noise is not None else make_noise(cfg, activation)
    if cfg.dynamics == "transformer":
        return Transformer(attention, noise, cfg.order)
    return LimitSDE(attention, noise, INTEGRATORS[cfg.integrator], make_kernel(cfg, activation).kappa1)


def make_field(
    cfg: RunConfig, fields: int, generator: torch.Generator, dtype=torch.float64, device="cpu",
    token_chunk: Optional[int] = 4096,
) -> RandomFeatureField:
    """``fields`` independent random-feature fields of width ``cfg.features`` (activation, σ_U,
    σ_W, noise scale from ``cfg``), their features drawn now from ``generator``: a field to share
    between systems of any N (SPEC §4)."""
    field = RandomFeatureField(
        activation=cfg.activation, features=cfg.features, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W,
        scale=cfg.noise_scale, token_chunk=token_chunk,
    )
    field.draw(fields, cfg.d, generator, dtype, device)
    return field


def make_particles(
    cfg: RunConfig, field: Optional[RandomFeatureField], N: int, dtype=torch.float64, device="cpu",
    block: int = DEFAULT_BLOCK, sdpa: bool = True,
) -> LimitSDE:
    """The mean-field particle system (SPEC §4): the limit SDE of ``cfg`` for N tokens with
    memory-linear attention (query chunks sized by :func:`query_chunk`, or fused SDPA) driven by
    ``field``."""
    if cfg.dynamics != "sde":
        raise ValueError("dynamics: the particle solver integrates the limit SDE (dynamics = 'sde')")
    use_field = cfg.mlp and cfg.noise_scale > 0
    if use_field and field is None:
        raise ValueError("the particle solver needs a field (make_field) when the noise is on")
    attention = make_attention(cfg, dtype, device, query_chunk(N, block), sdpa)
    return make_model(cfg, dtype, device, attention=attention, noise=field if use_field else None)
