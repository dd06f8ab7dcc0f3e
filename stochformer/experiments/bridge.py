"""``bridge``: standard transformer blocks at random initialisation against the paper's model and
its limit SDE for the matched kernel (SPEC §7; the blocks and the matching in
`stochformer.model.blocks`).

For each depth L: ``samples`` independent networks of L fresh blocks (residual branches scaled by
α₁ = T/L, α₂ = √(T/L), or GPT-2's own initialisation) from the same law of initial tokens; the
mean pairwise cosine of the tokens (normalised to the sphere) at every depth, mean ± SE over
networks. Beside it, each with its own samples: the idealised model at the same depth with the
matched Gaussian MLP ("model") and the limit SDE of the matched kernel ("sde"). A verdict row per
prediction and depth on the change of the mean cosine from the input to the last layer (per-sample
differences, so the spread of the initial tokens cancels): measured against predicted with the SE
of both, Student's t with Welch's degrees of freedom, rule "matches" with the stated allowance ``tol``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional, Union, cast

import numpy as np
import torch
import xarray as xr
from pydantic import Field, model_validator

from ..config import StrictConfig
from ..model.attention import SoftmaxAttention
from ..integrate import SaveAt, solve
from ..model.attention import Attention
from ..model.blocks import (
    NORMS,
    PRE_NORM,
    BlockNetwork,
    MatchedKernel,
    MatchedModel,
    MLPLaw,
    PreNormField,
    block_law,
    cosine_stats,
    ln_basis,
)
from ..model.noise import ExactField
from ..model.sde import LimitSDE, StratonovichHeun
from ..model.kernel import NoiseKernel
from ..measure.verdict import Comparison, quantile
from ..core.runtime import child_seeds, make_generator, provenance
from ..core.sphere import normalize
from ..io.results import Result
from ..measure.stats import mean_and_se
from ..core.validation import blamed_on, check_finite, validated
from .preflight import FLOPS, STEP_OVERHEAD_S, Estimate


def cosine_curve(model, X0: torch.Tensor, T: float, steps: int, every: int, generator: torch.Generator,
                 what: str) -> torch.Tensor:
    """``model`` stepped by [`solve`][stochformer.solve] from X0 (batch, N, d): the mean pairwise
    cosine of the normalised tokens (`cosine_stats`) at step 0 and every ``every`` steps,
    (batch, steps/every + 1)."""
    save = SaveAt(at=list(range(0, steps + 1, every)), stats=(), final=False, fn=lambda X: {"cosine": cosine_stats(X)[0]})
    with blamed_on(None, what):
        return torch.from_numpy(solve(model, X0, T, steps, save, generator=generator)["cosine"].values)


def run_network(kind: str, X0: torch.Tensor, L: int, seed: int, **block) -> torch.Tensor:
    """One network of L fresh blocks (weights from a torch generator seeded with ``seed``) applied
    to X0 (1, N, d): mean cosine by depth, (L + 1,)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.no_grad():
            return cosine_curve(BlockNetwork(kind, block), X0, float(L), L, 1, make_generator(seed), f"{kind} block")[0]


def predict_model(pre: bool, norm: str, law: MLPLaw, X0: torch.Tensor, r: float, L: int, a2: float,
                  generator: torch.Generator, attention: Optional[Attention] = None, a1: float = 0.0) -> torch.Tensor:
    """The idealised model with the matched Gaussian MLP at depth L: mean cosine by depth (batch, L + 1).

    Post-norm: unit tokens X0 (batch, N, k) on the sphere of the norm's space (k = d − 1 for
    LayerNorm), u ← LN(u + a1 Attn u), u ← LN(u + a2 G(r u)/r), r the norm's radius. Pre-norm: the
    residual stream x = X0 (batch, N, d), x ← x + a2 G(norm x)."""
    return cosine_curve(MatchedModel(pre, norm, law, r, a2, attention, a1), X0, float(L), L, 1, generator, "model")


def predict_sde(pre: bool, norm: str, kernel: Union[NoiseKernel, MatchedKernel], X0: torch.Tensor, horizon: float, L: int, refine: int,
                generator: torch.Generator, attention: Optional[Attention] = None) -> torch.Tensor:
    """The limit SDE of the matched kernel on ``refine``·L steps of [0, horizon]: mean cosine at
    the L + 1 layer times (batch, L + 1). Post-norm: the SDE of SPEC §3 on the unit sphere of X0's
    space (projected Heun, ``kernel`` on the unit sphere); pre-norm: dx = W(dt, norm x) in R^d
    (Euler, the field's covariance κ at the cosines of the normalised tokens), no projection."""
    field = ExactField(cast(NoiseKernel, kernel))  # a MatchedKernel has the interface ExactField needs
    model = PreNormField(field, norm) if pre else LimitSDE(attention, field, StratonovichHeun(), kernel.kappa1)
    return cosine_curve(model, X0, horizon, refine * L, refine, generator, "SDE")


class BridgeConfig(StrictConfig):
    """One block kind at one or more depths, and the sizes of the predictions."""


    block: Literal["paper", "encoder_post", "encoder_pre", "gpt2", "llama"] = "encoder_post"
    N: int = Field(8, ge=2, description="tokens (>= 2)")
    d: int = Field(32, ge=3, description="model dimension (>= 3)")
    heads: int = Field(4, ge=1, description="attention heads (must divide d; d/heads even for llama's rotary)")
    m: int = Field(128, ge=1, description="MLP width (>= 1)")
    T: float = Field(5.0, gt=0.0, description="horizon: α₁ = T/L, α₂ = √(T/L) (> 0)")
    depths: list[int] = Field(default_factory=lambda: [16, 64], description="depths L (each >= 1)")
    samples: int = Field(32, ge=4, description="independent networks per depth (>= 4)")
    pred_samples: int = Field(256, ge=4, description="samples of each prediction (>= 4)")
    refine: int = Field(2, ge=1, le=64, description="SDE steps per layer, in [1, 64]")
    std: float = Field(0.02, gt=0.0, description="weight std of the gpt2 and llama blocks (> 0)")
    gpt2_init: bool = Field(False, description="gpt2: residual projections N(0, std²/(2L)) and α₁ = α₂ = 1")
    init_spread: float = Field(0.0, ge=0.0, description="0: uniform initial tokens; > 0: a cluster of this Gaussian spread")
    tol: float = Field(0.02, ge=0.0, description="allowance of the verdict on the change of the mean cosine (finite L, m)")
    # the paper block's own fields (SPEC §1)
    activation: str = "relu"
    sigma_U: float = Field(0.0, ge=0.0)
    sigma_W: float = Field(0.0, ge=0.0)
    beta: float = 1.0
    gamma: float = 1.0
    seed: int = Field(0, ge=0, le=2**64 - 1)

    @model_validator(mode="after")
    def _check(self) -> "BridgeConfig":
        if not self.depths or min(self.depths) < 1 or len(set(self.depths)) != len(self.depths):
            raise ValueError(f"depths: need distinct integers >= 1 (got {self.depths})")
        if self.block != "paper" and self.d % self.heads:
            raise ValueError(f"heads: must divide d = {self.d} (got {self.heads})")
        if self.block == "llama" and (self.d // self.heads) % 2:
            raise ValueError(f"heads: llama's rotary embedding needs an even head dimension d/heads (got {self.d // self.heads})")
        if self.gpt2_init and self.block != "gpt2":
            raise ValueError("gpt2_init: only for block = 'gpt2'")
        from ..model.activations import ACTIVATIONS

        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation: unknown {self.activation!r}; valid: {', '.join(sorted(ACTIVATIONS))}")
        return self

    def scalings(self, L: int) -> tuple[float, float]:
        """(α₁, α₂) at depth L."""
        return (1.0, 1.0) if self.gpt2_init else (self.T / L, math.sqrt(self.T / L))

    def estimate(self, workers: int = 1) -> Estimate:
        """Peak memory and rough time of the run (`preflight`): fresh blocks (4
        d² + 2 d m weights) per layer; the predictions' N × N roots."""
        n = self.samples + self.pred_samples * (1 + self.refine)
        mem = 8.0 * (6 * self.d * self.d + 3 * self.d * self.m + 8 * n * self.N * (self.d + self.m + self.N))
        flops = sum(self.depths) * (self.samples * (4 * self.d * self.d + 2 * self.d * self.m) * (self.N + self.d)
                                   + self.pred_samples * (1 + self.refine) * (10 * self.N**3 + 4 * self.N * self.d * self.m))
        return Estimate(mem, sum(self.depths) * n * STEP_OVERHEAD_S + flops / FLOPS, "d, m, N, samples or pred_samples",
                        "depths, samples, pred_samples, refine, d or m")


def _initial(cfg: BridgeConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """Unit tokens (n, N, k) in the norm's space (k = d − 1 for LayerNorm: coordinates of 1⊥)."""
    k = cfg.d - 1 if NORMS[cfg.block] == "ln" else cfg.d
    X = torch.randn(n, cfg.N, k, generator=generator, dtype=torch.float64)
    if cfg.init_spread > 0:
        center = torch.randn(n, 1, k, generator=generator, dtype=torch.float64)
        X = normalize(center) + cfg.init_spread * X
    return normalize(X)


def _embed(cfg: BridgeConfig, U: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Unit tokens → the block's input: × √d in R^d (LayerNorm: through a basis of 1⊥); the radius."""
    norm = NORMS[cfg.block]
    if norm == "sphere":
        return U, 1.0
    r = math.sqrt(cfg.d)
    return r * (U @ ln_basis(cfg.d).T if norm == "ln" else U), r


def welch_samples(se_m: float, n_m: int, se_p: float, n_p: int) -> Optional[int]:
    """The Welch–Satterthwaite degrees of freedom ν of the difference of two independent means (SEs
    ``se_m``, ``se_p`` of ``n_m``, ``n_p`` samples), as the sample count ⌊ν⌋ + 1 of a row's Student's
    t (rounded down: the wider interval); None where both SEs are 0."""
    a, b = se_m**2, se_p**2
    if a + b == 0:
        return None
    nu = (a + b) ** 2 / (a**2 / (n_m - 1) + b**2 / (n_p - 1))
    return int(math.floor(nu)) + 1


def compare(quantity: str, measured: tuple, predicted: tuple, tol: float, note: str = "") -> Comparison:
    """Rule ``matches`` on (mean, SE) or (mean, SE, samples) triples: the measured mean with a 95%
    interval from the SE of the difference √(SE_m² + SE_p²) must reach the predicted mean within
    ``tol``; the interval's quantile is Student's t with Welch's degrees of freedom when both
    sample counts are given (`welch_samples`), else 1.96."""
    (m, se_m, *n_m), (p, se_p, *n_p) = measured, predicted
    n = welch_samples(se_m, n_m[0], se_p, n_p[0]) if n_m and n_p else None
    h = quantile(n) * math.hypot(se_m, se_p)
    return Comparison(quantity, p, m, (m - h, m + h), rule="matches", tol=tol, note=note, n=n)


def _checked(curve: torch.Tensor, cfg: BridgeConfig, what: str) -> np.ndarray:
    """A (samples, L + 1) cosine curve as an array; a non-finite entry stops the run naming its layer."""
    bad = (~torch.isfinite(curve)).any(0).nonzero()
    if len(bad):
        check_finite(curve[:, int(bad[0])], int(bad[0]), cfg, what)
    return curve.numpy()


#: the curves of a result: the block, then the two predictions
CURVES = ("measured", "model", "sde")
_LABELS = {"model": "paper's model (matched MLP)", "sde": "limit SDE (matched κ)"}


@dataclass(repr=False)
class BridgeResult(Result):
    """Per-sample mean-cosine curves ``curves[name][L]``: (samples, L + 1) for name in
    `CURVES` (the block's networks, the paper's model with the matched MLP, the limit SDE of
    the matched kernel at the layer times)."""

    command: ClassVar[str] = "bridge"
    summary_name: ClassVar[str] = "bridge.json"
    config: BridgeConfig
    curves: dict[str, dict[int, np.ndarray]]
    kappa1: float
    provenance: dict
    elapsed_s: float

    def summary(self, name: str, L: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean cosine by depth, mean and SE over samples: (L + 1,) each."""
        return mean_and_se(self.curves[name][L])

    def change(self, name: str, L: int) -> tuple[float, float, int]:
        """The change of the mean cosine from the input to the last layer, mean, SE and the number of
        samples (per-sample differences: the spread of the initial tokens cancels)."""
        c = self.curves[name][L]
        m, se = mean_and_se(c[:, -1] - c[:, 0])
        return float(m), float(se), int(c.shape[0])

    def comparisons(self) -> list[Comparison]:
        """At each depth: the measured change of the mean cosine against each prediction's."""
        rows = []
        for L in sorted(self.curves["measured"]):
            meas = self.change("measured", L)
            for name in ("model", "sde"):
                pred = self.change(name, L)
                rows.append(compare(f"{self.config.block}, L = {L}: change of the mean cosine vs {_LABELS[name]}", meas,
                                    pred, self.config.tol,
                                    f"tol = {self.config.tol:g} (finite L and m); measured − predicted = "
                                    f"{meas[0] - pred[0]:+.4f} ± {math.hypot(meas[1], pred[1]):.4f} (SE)"))
        return rows

    def to_dict(self) -> dict:
        out: dict = {"block": self.config.block, "kappa1_unit_sphere": self.kappa1, "elapsed_s": self.elapsed_s}
        for name in CURVES:
            out[name] = {str(L): {"mean": mean_and_se(c)[0].tolist(), "se": mean_and_se(c)[1].tolist(),
                                  "change": self.change(name, L)} for L, c in self.curves[name].items()}
        out["comparisons"] = [c.to_dict() for c in self.comparisons()]
        return out

    def names(self) -> dict[str, dict[str, str]]:
        labels = {"measured": f"{self.config.block} block", **_LABELS}
        out = {"pred_sample": {"long_name": "independent sample of a prediction", "units": "1"}}
        for name in CURVES:
            for L in self.curves[name]:
                out[f"{name}_L{L}"] = {"long_name": f"mean pairwise cosine, {labels[name]}, depth L = {L}", "units": "1"}
                out[f"step_L{L}"] = {"long_name": f"layer ℓ of the depth L = {L} networks", "units": "1"}
        return out

    def _dataset(self) -> xr.Dataset:
        """Per-sample curves ``<name>_L<L>``: (sample, step_L<L>) for the block's networks and
        (pred_sample, step_L<L>) for the two predictions, layer ℓ = 0..L."""
        data = {f"{name}_L{L}": (("sample" if name == "measured" else "pred_sample", f"step_L{L}"), c)
                for name in CURVES for L, c in self.curves[name].items()}
        return xr.Dataset(data, attrs={"block": self.config.block, "kappa1_unit_sphere": self.kappa1})


@validated
def run_bridge(cfg: BridgeConfig, progress: bool = False) -> BridgeResult:
    """Measure the block's networks and the two predictions at every depth (CPU, float64; one
    thread below 1024 token coordinates: the tensors are tiny and threads only add overhead)."""
    from ..core.runtime import cpu_threads_for

    with cpu_threads_for(cfg.N * cfg.d):
        return _run_bridge(cfg, progress)


def _run_bridge(cfg: BridgeConfig, progress: bool) -> BridgeResult:
    from ..core.progress import tqdm

    start = time.perf_counter()
    norm, pre = NORMS[cfg.block], cfg.block in PRE_NORM
    curves: dict[str, dict[int, np.ndarray]] = {name: {} for name in CURVES}
    kappa1 = math.nan
    paper = dict(activation=cfg.activation, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W, beta=cfg.beta, gamma=cfg.gamma)
    for L, seed in zip(sorted(cfg.depths), child_seeds(cfg.seed, len(cfg.depths))):
        s_init, s_net, s_model, s_sde = child_seeds(seed, 4)
        a1, a2 = cfg.scalings(L)
        law = block_law(cfg.block, cfg.d, cfg.m, cfg.std, L, cfg.gpt2_init, cfg.activation, cfg.sigma_U, cfg.sigma_W)
        g_init = make_generator(s_init)
        U0 = _initial(cfg, cfg.samples, g_init)
        X0, r = _embed(cfg, U0)
        nets = [run_network(cfg.block, X0[b : b + 1], L, s, d=cfg.d, heads=cfg.heads, m=cfg.m, a1=a1, a2=a2,
                            std=cfg.std, depth=L, gpt2_init=cfg.gpt2_init, **(paper if cfg.block == "paper" else {}))
                for b, s in enumerate(tqdm(child_seeds(s_net, cfg.samples), desc=f"L={L}", disable=not progress, leave=False))]
        curves["measured"][L] = _checked(torch.stack(nets), cfg, f"{cfg.block} cosines (L = {L})")
        attention = SoftmaxAttention(cfg.beta, cfg.gamma) if cfg.block == "paper" else None
        P0 = _initial(cfg, cfg.pred_samples, g_init)
        P0 = _embed(cfg, P0)[0] if pre else P0
        with torch.no_grad():
            curves["model"][L] = _checked(predict_model(pre, norm, law, P0, r, L, a2, make_generator(s_model), attention, a1),
                                          cfg, f"model cosines (L = {L})")
            kernel = (NoiseKernel(cfg.activation, cfg.d, cfg.sigma_U, cfg.sigma_W) if cfg.block == "paper"
                      else MatchedKernel(law, r * r, 1.0 if pre else 1.0 / (r * r)))
            curves["sde"][L] = _checked(predict_sde(pre, norm, kernel, P0, a2 * a2 * L, L, cfg.refine,
                                                    make_generator(s_sde), attention), cfg, f"SDE cosines (L = {L})")
        kappa1 = kernel.kappa1 if not pre else kernel.kappa1 / (r * r)
    return BridgeResult(cfg, curves, kappa1, provenance("cpu"), time.perf_counter() - start)
