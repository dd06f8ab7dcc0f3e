"""The many-token particle solver of the mean-field limit (SPEC §4).

N tokens follow the limit SDE of SPEC §3, driven by one random-feature field
(:class:`~stochformer.noise.RandomFeatureField`): a function of position, so that systems of
different N (a reference and its subsystems, SPEC §4 couplings) can be driven by *the same*
field — same frozen features and same Brownian increments. Memory is linear in N: attention is
computed in query chunks (or by PyTorch's fused ``scaled_dot_product_attention``), the field in
token chunks, and the large-N diagnostics (E_β, mean token) in row blocks; no (N, N) matrix is
ever formed.

Also here: distances between empirical measures (exact W₂² through POT, sliced W₂²) and the
statistics of the propagation-of-chaos experiment (log–log fits with bootstrap intervals,
conditional correlation of two tagged tokens).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .attention import DEFAULT_BLOCK, Attention, query_chunk
from .build import Stepper, make_attention, make_stepper
from .config import RunConfig
from .diagnostics import energy, mean_token
from .extras import require
from .noise import RandomFeatureField
from .runtime import make_generator


def make_field(
    cfg: RunConfig, fields: int, generator: torch.Generator, dtype=torch.float64, device="cpu",
    token_chunk: Optional[int] = 4096,
) -> RandomFeatureField:
    """``fields`` independent random-feature fields of width ``cfg.features`` (activation, σ_U,
    σ_W, noise scale from ``cfg``), their features drawn now from ``generator``."""
    field = RandomFeatureField(
        activation=cfg.activation, features=cfg.features, sigma_U=cfg.sigma_U, sigma_W=cfg.sigma_W,
        scale=cfg.noise_scale, token_chunk=token_chunk,
    )
    field.reset(fields, cfg.d, generator, dtype, device)
    return field


def particle_stepper(
    cfg: RunConfig, field: Optional[RandomFeatureField], N: int, dtype=torch.float64, device="cpu",
    block: int = DEFAULT_BLOCK, sdpa: bool = True,
) -> Stepper:
    """The SDE integrator of ``cfg.integrator`` for N tokens with memory-linear attention
    (query chunks sized by :func:`query_chunk`, or fused SDPA) driven by ``field``."""
    if cfg.dynamics != "sde":
        raise ValueError("dynamics: the particle solver integrates the limit SDE (dynamics = 'sde')")
    if cfg.attention and cfg.attention_kind != "softmax":  # a variant (SPEC §7): dense, same interface
        attention = make_attention(cfg, dtype, device)
    else:
        attention = Attention.from_config(cfg, dtype, device, query_chunk(N, block), sdpa) if cfg.attention else None
    use_field = cfg.mlp and cfg.noise_scale > 0
    if use_field and field is None:
        raise ValueError("the particle solver needs a field (make_field) when the noise is on")
    return make_stepper(cfg, dtype, device, attention=attention, noise=field if use_field else None)


@contextlib.contextmanager
def cpu_threads_for(tokens: int, small: int = 1024) -> Iterator[None]:
    """One torch CPU thread while handling fewer than ``small`` tokens in all (the per-operation
    cost of a parallel region then exceeds the work; on a busy machine by orders of magnitude),
    the current setting otherwise."""
    old = torch.get_num_threads()
    if tokens < small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def evolve_particles(
    X0: torch.Tensor, stepper: Stepper, L: int, noise_seed: int, record_steps: Sequence[int] = (),
    progress: bool = False, desc: str = "particles",
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Apply ``stepper`` L times to X0: (batch, N, d). The field's Brownian increments come from a
    generator seeded with ``noise_seed`` and used for nothing else, so systems with the same field
    and seed see the same increments whatever their N. Returns the final state and the states at
    ``record_steps`` (0 allowed), on X0's device."""
    gen = make_generator(noise_seed, X0.device)
    wanted = set(int(s) for s in record_steps)
    X, saved = X0, {}
    if 0 in wanted:
        saved[0] = X0.clone()
    for ell in tqdm(range(1, L + 1), desc=desc, disable=not progress, leave=False, mininterval=0.5):
        X = stepper.step(X, gen)
        if ell in wanted:
            saved[ell] = X.clone()
    return X, [saved[s] for s in sorted(wanted)]


def cloud_summary(X: torch.Tensor, beta: float = 1.0, block: int = DEFAULT_BLOCK) -> dict[str, torch.Tensor]:
    """Large-N statistics of token clouds X: (batch, N, d): E_β (blocked, no (N, N) matrix), the
    mean token (batch, d) and its norm |∫x dμ| (batch,)."""
    m = mean_token(X)
    return {
        "energy": energy(X, beta, chunk=query_chunk(X.shape[-2], block)),
        "mean_token": m,
        "mean_token_norm": torch.linalg.vector_norm(m, dim=-1),
    }


# ----------------------------------------------------------------- distances between measures


@dataclass(frozen=True)
class W2Result:
    """W₂² between two empirical measures (uniform weights), and how it was computed."""

    value: float
    method: str  # "exact" (POT network simplex) or "sliced" (Euclidean projections)
    warning: Optional[str] = None  # POT's message when the iteration cap was hit


def w2_exact(X: np.ndarray, Y: np.ndarray, max_iter: int = 10**8) -> W2Result:
    """Exact W₂² (squared Euclidean cost) between the empirical measures of X (n, d) and Y (m, d),
    by POT's network simplex with the iteration cap raised to ``max_iter``; a cap warning is
    caught and returned (the value is then only an upper bound)."""
    ot = require("ot", "exact W₂")

    M = ot.dist(X, Y, metric="sqeuclidean")
    a, b = np.full(len(X), 1.0 / len(X)), np.full(len(Y), 1.0 / len(Y))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cost, log = ot.emd2(a, b, M, numItermax=max_iter, log=True)
    msgs = [str(w.message) for w in caught] + ([log["warning"]] if log.get("warning") else [])
    return W2Result(float(cost), "exact", "; ".join(msgs) or None)


def w2_sliced(X: np.ndarray, Y: np.ndarray, projections: int = 200, seed: int = 0) -> W2Result:
    """Sliced W₂² (mean over ``projections`` random directions of the 1-D W₂², Euclidean
    projections of the points in R^d): a different, smaller distance than W₂², labelled as such."""
    ot = require("ot", "sliced W₂")

    sw = ot.sliced_wasserstein_distance(X, Y, n_projections=projections, p=2, seed=seed)
    return W2Result(float(sw) ** 2, "sliced")


def w2_squared(X: np.ndarray, Y: np.ndarray, exact_max: int, projections: int = 200, seed: int = 0) -> W2Result:
    """Exact W₂² when both clouds have at most ``exact_max`` points, sliced W₂² beyond."""
    if max(len(X), len(Y)) <= exact_max:
        return w2_exact(X, Y)
    return w2_sliced(X, Y, projections, seed)


# ----------------------------------------------------------------- statistics


def rate_function(d: int, N) -> np.ndarray:
    """r_d(N) of Proposition 1.2 (SPEC §4): N^{-1/2} (d < 4), N^{-1/2} log(1+N) (d = 4), N^{-2/d} (d > 4)."""
    N = np.asarray(N, dtype=float)
    if d < 4:
        return N**-0.5
    if d == 4:
        return N**-0.5 * np.log1p(N)
    return N ** (-2.0 / d)


def sphere_rate(d: int, N) -> np.ndarray:
    """The sharp order of E W₂²(μ^N, μ) for i.i.d. samples of a measure with a bounded, positive
    density on S^{d−1}, a manifold of dimension k = d − 1: N^{-1} (k = 1), log(1+N)/N (k = 2,
    Ajtai–Komlós–Tusnády), N^{-2/k} (k ≥ 3). r_d(N) is a bound for any measure on R^d and is not
    attained by such measures."""
    N, k = np.asarray(N, dtype=float), d - 1
    if k == 1:
        return 1.0 / N
    if k == 2:
        return np.log1p(N) / N
    return N ** (-2.0 / k)


@dataclass(frozen=True)
class PowerFit:
    """y ≈ C N^{-exponent}: least-squares slope of log(mean y) on log N, 95% bootstrap interval."""

    exponent: float
    ci: tuple[float, float]
    prefactor: float

    def to_dict(self) -> dict:
        return {"exponent": self.exponent, "ci": list(self.ci), "prefactor": self.prefactor}


def _loglog_slope(logN: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    b, a = np.polyfit(logN, np.log(y), 1)
    return float(b), float(a)


def fit_power_law(N: Sequence[float], samples: np.ndarray, n_boot: int = 2000, seed: int = 0) -> PowerFit:
    """Fit the decay exponent of the sample mean of ``samples`` (S, n) (S independent samples, the
    same samples at every N: one row = one field and initial draw) against N (n,). The interval
    resamples rows (S) with replacement, so it keeps the correlation between N values."""
    logN, samples = np.log(np.asarray(N, dtype=float)), np.asarray(samples, dtype=float)
    slope, icpt = _loglog_slope(logN, samples.mean(0))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, samples.shape[0], size=(n_boot, samples.shape[0]))
    boots = np.array([_loglog_slope(logN, samples[i].mean(0))[0] for i in idx if np.all(samples[i].mean(0) > 0)])
    lo, hi = np.quantile(-boots, [0.025, 0.975]) if len(boots) else (math.nan, math.nan)
    return PowerFit(-slope, (float(lo), float(hi)), float(math.exp(icpt)))


def fit_power_law_se(N: Sequence[float], y: np.ndarray, se: np.ndarray, n_boot: int = 2000, seed: int = 0) -> PowerFit:
    """Decay exponent of positive means ``y`` (n,) with independent standard errors ``se`` (n,)
    against N: slope of log y on log N; 95% interval from a parametric bootstrap (y + se·ξ,
    draws with a non-positive value discarded)."""
    logN, y, se = np.log(np.asarray(N, dtype=float)), np.asarray(y, float), np.asarray(se, float)
    slope, icpt = _loglog_slope(logN, y)
    rng = np.random.default_rng(seed)
    draws = y + se * rng.standard_normal((n_boot, len(y)))
    boots = np.array([_loglog_slope(logN, row)[0] for row in draws if np.all(row > 0)])
    lo, hi = np.quantile(-boots, [0.025, 0.975]) if len(boots) else (math.nan, math.nan)
    return PowerFit(-slope, (float(lo), float(hi)), float(math.exp(icpt)))


def tagged_correlation(A: torch.Tensor, B: torch.Tensor) -> tuple[float, float]:
    """Correlation of two random vectors from R paired draws A, B: (R, d),

        ρ = E⟨A − EA, B − EB⟩ / √(E|A − EA|² E|B − EB|²)

    (the trace of the cross-covariance over the geometric mean of the total variances; for d = 1
    Pearson's correlation), with its delta-method standard error std(⟨Ã_r, B̃_r⟩)/(√R ·
    denominator), exact to first order near ρ = 0."""
    A, B = A.double(), B.double()
    R = A.shape[0]
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    prod = (Ac * Bc).sum(-1)
    denom = math.sqrt(float((Ac**2).sum(-1).mean()) * float((Bc**2).sum(-1).mean()))
    rho = float(prod.mean()) / denom
    se = float(prod.std(correction=1)) / math.sqrt(R) / denom
    return rho, se
