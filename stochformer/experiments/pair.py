"""``pair``: the exact two-token theory of SPEC §8 for a run configuration (no simulation).

The configuration is a [`RunConfig`][stochformer.config.RunConfig] (its fields given directly, as for
``stochformer rates``: activation, d, sigma_U, sigma_W, noise_scale for κ; attention, beta, gamma for
the softmax attention Qᵀ K = βI, V = γI over the pair; energy_beta and N for the energy) with the
queries' own fields z0, eps and t. `pair_report` gathers the numbers of
[`PairDiffusion`][stochformer.theory.PairDiffusion] and of the energy.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import Field, model_validator

from ..config.build import make_kernel
from ..config import RunConfig
from ..theory import PairDiffusion, energy_decay_rate, expectation, expected_energy


#: the largest d of `PairConfig`: `PairDiffusion` takes about 3.2·d panels (d = 10⁵: 40 s, 7 GB)
PAIR_D_MAX = 10**5


class PairConfig(RunConfig):
    """A [`RunConfig`][stochformer.config.RunConfig] and the pair's start z0, sync level 1 − eps and time t."""

    z0: float = Field(0.0, gt=-1.0, lt=1.0, description="initial cosine of the two tokens, in (-1, 1)")
    eps: float = Field(1e-3, ge=1e-12, lt=2.0, description="sync level: the time to reach z >= 1 - eps, eps in [1e-12, 2) "
                       "(a smaller one is below float64's resolution of z near 1)")
    t: float = Field(1.0, ge=0.0, le=1e4, description="time of E[z_t] and of the energy, in [0, 10^4]")

    @model_validator(mode="after")
    def _pair_model(self) -> "PairConfig":
        if self.attention and (self.attention_kind != "softmax" or any(m is not None for m in (self.Q, self.K, self.V))):
            raise ValueError("attention_kind: the pair theory is derived for softmax attention with Q^T K = beta I, "
                             f"V = gamma I (got attention_kind = {self.attention_kind!r}"
                             + (", explicit Q, K or V" if any(m is not None for m in (self.Q, self.K, self.V)) else "") + ")")
        if self.d > PAIR_D_MAX:
            raise ValueError(f"d: the pair theory resolves its diffusion on about 3.2·d panels (40 s and 7 GB at d = "
                             f"10^5 on 2 cores): d <= {PAIR_D_MAX} (got {self.d})")
        if not self.mlp or self.noise_scale == 0:
            raise ValueError("noise_scale: the pair diffusion needs the MLP noise (mlp = true and noise_scale > 0)")
        return self


def pair_diffusion(cfg: RunConfig) -> PairDiffusion:
    """The pair diffusion of ``cfg``: κ from its MLP fields, attention β and v = γ (0 without attention)."""
    return PairDiffusion(make_kernel(cfg), cfg.beta, cfg.gamma_value if cfg.attention else 0.0)


def _finite(v: Optional[float]) -> Optional[float]:
    return None if v is None or not math.isfinite(v) else float(v)


def pair_report(cfg: PairConfig) -> dict[str, Any]:
    """Everything ``stochformer pair --json`` prints: [`PairDiffusion.summary`][stochformer.theory.pair.PairDiffusion.summary] at (z0, eps), E[z_t]
    from z0, the exact E[E_β(μ^N_t)] from uniform tokens (None with a reason where the pair law does
    not give it: attention with N ≠ 2) and its long-time rate beside Theorem 1.4's bound."""
    pair = pair_diffusion(cfg)
    out = pair.summary(cfg.z0, cfg.eps)
    out["t"] = cfg.t
    out["mean_z_t"] = float(expectation(pair, lambda z: z, [cfg.t], z0=cfg.z0)[0])
    out["N"] = cfg.N
    if pair.v != 0 and cfg.N != 2:
        out["energy_t"], out["energy_0"] = None, None
        out["energy_reason"] = f"with attention the pair law gives the energy of N = 2 tokens only (N = {cfg.N})"
    else:
        e0, et = expected_energy(pair, [0.0, cfg.t], cfg.N, cfg.energy_beta)
        out["energy_0"], out["energy_t"] = _finite(float(e0)), _finite(float(et))
        out["energy_reason"] = "exact: every pair follows the pair diffusion" if pair.v == 0 else "exact for N = 2"
        if out["energy_0"] is None or out["energy_t"] is None:
            out["energy_reason"] = (f"E_beta does not fit in float64 at energy_beta = {cfg.energy_beta:g} (e^beta = "
                                    f"{math.exp(min(cfg.energy_beta, 709)):.3g}); a smaller energy_beta")
    rate = energy_decay_rate(pair, cfg.energy_beta)
    out.update({"energy_beta": cfg.energy_beta, "energy_rate": _finite(rate.rate), "energy_rate_kind": rate.kind,
                "lambda_bar_prime": _finite(rate.lambda_bar_prime), "energy_rate_gap": _finite(rate.gap)})
    return out
