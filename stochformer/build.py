"""From a validated :class:`~stochformer.config.RunConfig` to the model's pieces: kernel,
attention, noise source and the stepper (transformer layer or SDE integrator)."""

from __future__ import annotations

from typing import Optional, Protocol

import torch

from .activations import ActivationLike
from .attention import Attention
from .config import RunConfig
from .kernel import NoiseKernel
from .noise import ExactField, MLPNoise, NoiseSource, RandomFeatureField
from .rng import resolve_backend
from .sde import INTEGRATORS, LimitSDE
from .transformer import TransformerLayer


class Stepper(Protocol):
    """Maps X (batch, N, d) to the state one layer (or SDE step) later."""

    noise: Optional[NoiseSource]

    def step(self, X: torch.Tensor, generator: torch.Generator) -> torch.Tensor: ...


def make_kernel(cfg: RunConfig, activation: Optional[ActivationLike] = None) -> NoiseKernel:
    """κ for the config's activation (or the callable ``activation``), d, σ_U, σ_W and noise scale."""
    return NoiseKernel(activation or cfg.activation, cfg.d, cfg.sigma_U, cfg.sigma_W, cfg.noise_scale)


def make_attention(cfg: RunConfig, dtype=torch.float64, device="cpu", chunk: Optional[int] = None) -> Optional[Attention]:
    """The attention of ``cfg`` (None without attention); ``attention_kind`` other than softmax:
    :func:`stochformer.attention_variants.make_variant` (same call interface)."""
    if not cfg.attention:
        return None
    if cfg.attention_kind != "softmax":
        from .attention_variants import make_variant

        return make_variant(cfg, dtype, device)
    return Attention.from_config(cfg, dtype, device, chunk)


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
        return "mlp_gaussian" if cfg.weight_law == "gaussian" else "mlp"
    return "exact" if cfg.N < RF_CROSSOVER_N * cfg.features / 1024 else "random_features"


def make_noise(cfg: RunConfig, activation: Optional[ActivationLike] = None) -> Optional[NoiseSource]:
    """The noise source of ``cfg`` (None without MLP); ``activation``: a callable replacing cfg's."""
    if not cfg.mlp or cfg.noise_scale == 0:
        return None
    kind = noise_kind(cfg)
    common = dict(activation=activation or cfg.activation, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W, scale=cfg.noise_scale)
    if kind in ("mlp", "mlp_gaussian"):
        rng = resolve_backend(cfg.rng, cfg.device)
        mode = "weights" if kind == "mlp" else "gaussian"
        return MLPNoise(m=cfg.m, mode=mode, rng=rng, precision=cfg.draw_precision, law=cfg.weight_law,
                        nu=cfg.student_nu, **common)
    if kind == "random_features":
        return RandomFeatureField(features=cfg.features, **common)
    return ExactField(make_kernel(cfg, activation))


def make_stepper(
    cfg: RunConfig,
    dtype=torch.float64,
    device="cpu",
    attention: Optional[Attention] = None,
    noise: Optional[NoiseSource] = None,
    activation: Optional[ActivationLike] = None,
) -> Stepper:
    """The map X_ℓ → X_{ℓ+1}: a transformer layer, or one step of the SDE integrator.

    ``attention`` / ``noise``: prebuilt pieces (a chunked attention, a field shared between
    systems) used instead of building them from ``cfg``; ``activation``: any callable φ replacing
    ``cfg.activation`` (Python API)."""
    attention = attention if attention is not None else make_attention(cfg, dtype, device)
    noise = noise if noise is not None else make_noise(cfg, activation)
    if cfg.dynamics == "transformer":
        return TransformerLayer(cfg.dt, attention, noise, cfg.order)
    sde = LimitSDE(noise, attention, make_kernel(cfg, activation).kappa1, cfg.d)
    if cfg.integrator not in INTEGRATORS:
        raise ValueError(f"integrator: {cfg.integrator!r} is not available; valid: {', '.join(INTEGRATORS)}")
    return INTEGRATORS[cfg.integrator](sde, cfg.dt)
