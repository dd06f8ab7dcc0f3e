"""The statistics of the measurements: one mean ± standard error and one power-law fit.

- :func:`mean_and_se`: the sample mean and the standard error of the mean over independent
  samples (numpy or torch arrays, any axis);
- :func:`bootstrap`: the one bootstrap over independent samples (resampled with replacement,
  jointly across a grid whose every point sees the same samples), and :func:`interval`, its SE and
  95% percentile interval: every fit with an interval here goes through them;
- :func:`fit_power_law`: y ≈ C x^{−p} by least squares in log–log, with a 95% percentile
  bootstrap interval and SE for p (:func:`bootstrap`), or, given only means and standard errors, a
  parametric bootstrap; :func:`loglog_slope` is its point estimate (also the local exponent of a
  rate law);
- :func:`fit_power_law_weighted`: means with standard errors that may be unresolved from 0 or
  negative: weighted least squares in linear space, parametric bootstrap (the decorrelation);
- intervals valid at their sample size: :func:`t_interval` (a mean of n >= 3 samples, Student's t),
  :func:`wilson_interval` and :func:`clopper_pearson_interval` (a fraction of independent trials).
  No interval is formed from fewer than :data:`MIN_SAMPLES` samples (NaN).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

from .validation import Int, PositiveInt, Seed, Values, check_int, validated

Array = Union[np.ndarray, torch.Tensor]
#: fewer samples than this give no interval (NaN): a spread from 1 or 2 samples means nothing
MIN_SAMPLES = 3
#: measured values: finite numbers (arrays, sequences or tensors; checked at every public function)
_Values = Annotated[Array, Values()]
_Positive = Annotated[Sequence[float], Values(ndim=1, positive=True)]
#: bootstrap resamples: at most 10⁶ (the configs' bound; more only lengthens a fit)
_Resamples = Annotated[int, Int(1, 10**6)]


def _axis(values: Array, axis: int) -> int:
    return check_int("axis", axis, -values.ndim, values.ndim - 1) if values.ndim else check_int("axis", axis, 0, -1)


@validated
def mean_and_se(values: Annotated[Array, Values(missing=True)], axis: int = 0) -> tuple[Array, Array]:
    """Sample mean and standard error of the mean along ``axis`` (SE = 0 for one sample); torch
    in, torch out. A NaN marks a missing value: the mean and SE it enters are NaN."""
    n = values.shape[_axis(values, axis)]
    if torch.is_tensor(values):
        mean = values.mean(axis)
        se = values.std(axis, correction=1) / math.sqrt(n) if n > 1 else torch.zeros_like(mean)
        return mean, se
    values = np.asarray(values, dtype=float)
    mean = values.mean(axis)
    se = values.std(axis, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(mean)
    return mean, se


@validated
def bootstrap(statistic: Callable[[np.ndarray], Any], samples: _Values, n_boot: _Resamples, seed: Seed,
              axis: int = 0) -> list:
    """``statistic`` of ``n_boot`` resamples of ``samples``: independent samples along ``axis``
    drawn with replacement (everything else resampled jointly). The rows come from ``seed`` and
    the number of samples alone, so fits given the same seed resample the same samples."""
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[_axis(samples, axis)]
    where: list = [slice(None)] * samples.ndim
    out = []
    for rows in np.random.default_rng(seed).integers(0, n, size=(n_boot, n)):
        where[axis] = rows
        out.append(statistic(samples[tuple(where)]))
    return out


@validated
def interval(boots: Annotated[Sequence[float], Values(ndim=1, empty=True)]) -> tuple[float, tuple[float, float]]:
    """The bootstrap SE and 95% percentile interval of the resampled values ``boots`` (NaN when
    there are too few)."""
    boots = np.asarray(boots, dtype=float)
    lo, hi = np.quantile(boots, [0.025, 0.975]) if len(boots) else (math.nan, math.nan)
    return (float(np.std(boots, ddof=1)) if len(boots) > 1 else math.nan), (float(lo), float(hi))


@dataclass(frozen=True)
class PowerFit:
    """y ≈ C x^{−exponent}: least-squares slope of log(mean y) on log x, with the bootstrap SE of
    the exponent and its 95% percentile interval."""

    exponent: float
    ci: tuple[float, float]
    prefactor: float
    se: float = math.nan

    def to_dict(self) -> dict:
        return {"exponent": self.exponent, "ci": list(self.ci), "prefactor": self.prefactor}


@validated
def loglog_slope(x: _Positive, y: _Positive) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through (log x, log y): x, y positive, of one
    length >= 2."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"y: must have the length of x, at least 2 (got {len(x)} and {len(y)})")
    return _loglog_slope(x, y)


def _loglog_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    b, a = np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)
    return float(b), float(a)


@validated
def fit_power_law(
    x: _Positive, samples: _Values, n_boot: _Resamples = 2000, seed: Seed = 0,
    se: Optional[Annotated[np.ndarray, Values(ndim=1)]] = None, n: Optional[PositiveInt] = None,
) -> PowerFit:
    """The decay exponent p of y ≈ C x^{−p} with a bootstrap interval — the one power-law fit.

    ``samples`` (S, n): S independent samples at every x (n,) (the same samples at every x, e.g.
    one field and initial draw per row); the fit is to the sample mean, and the bootstrap resamples
    rows with replacement (keeping the correlation between the x values). With ``se`` (n,),
    ``samples`` are instead n independent positive means with these standard errors and the
    bootstrap is parametric (y + se·ξ, ξ standard normal, or Student's t with n − 1 degrees of
    freedom when each mean is of ``n`` samples). Resamples with a non-positive mean are discarded.
    Fewer than :data:`MIN_SAMPLES` samples give no interval (NaN)."""
    shape, points = np.shape(samples), len(x)
    if se is None and (len(shape) != 2 or shape[1] != points):
        raise ValueError(f"samples: must be (S, n) samples at the n = {points} values of x (got shape {shape})")
    if se is not None and (shape != (points,) or len(se) != points):
        raise ValueError(f"se: with se, samples and se must be the n = {points} means and their SEs (got {shape} and {len(se)})")
    if se is None:
        samples = np.asarray(samples, dtype=float)
        y = samples.mean(0)
        few = samples.shape[0] < MIN_SAMPLES
        draws = [] if few else bootstrap(lambda rows: rows.mean(0), samples, n_boot, seed)
    else:
        y = np.asarray(samples, dtype=float)
        rng = np.random.default_rng(seed)
        few = n is not None and n < MIN_SAMPLES
        xi = rng.standard_normal((n_boot, len(y))) if n is None else rng.standard_t(max(n - 1, 1), (n_boot, len(y)))
        draws = [] if few else list(y + np.asarray(se, float) * xi)
    slope, icpt = _loglog_slope(x, y)  # NaN where a mean is not positive (no power law to fit)
    boot_se, ci = interval([-_loglog_slope(x, row)[0] for row in draws if np.all(row > 0)])
    return PowerFit(-slope, ci, float(math.exp(icpt)), boot_se)


@validated
def fit_power_law_weighted(
    N: _Positive, y: Annotated[np.ndarray, Values(ndim=1)], se: Annotated[np.ndarray, Values(ndim=1, positive=True)],
    n_boot: _Resamples = 2000, seed: Seed = 0,
) -> PowerFit:
    """Decay exponent of means ``y`` (n,) with independent standard errors ``se`` (n,) against N:
    weighted least squares of y ≈ C N^{−p} in linear space (weights 1/se²), so every size enters,
    also one whose mean is not resolved from 0 or is negative. 95% interval from a parametric
    bootstrap: refits of y + se·ξ (ξ standard normal)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    N, y, se = np.asarray(N, float), np.asarray(y, float), np.asarray(se, float)
    if not len(N) == len(y) == len(se) >= 2:
        raise ValueError(f"y, se: must have the length of N, at least 2 (got {len(N)}, {len(y)}, {len(se)})")
    x = N / N[0]  # C is the value at the first size: a well-scaled parameter

    def law(x, C, p):
        return C * x ** (-p)

    def fit(values: np.ndarray) -> tuple[float, float]:
        with warnings.catch_warnings():  # the parameter covariance is not used (the interval is bootstrapped)
            warnings.simplefilter("ignore", OptimizeWarning)
            (C, p), _ = curve_fit(law, x, values, p0=(values[0] if values[0] > 0 else float(np.abs(values).max()), 1.0),
                                  sigma=se, absolute_sigma=True, maxfev=2000)
        return float(C), float(p)

    C, p = fit(y)
    rng = np.random.default_rng(seed)
    boots = []
    for row in y + se * rng.standard_normal((n_boot, len(y))):
        try:
            boots.append(fit(row)[1])
        except RuntimeError:  # no convergence on this draw
            continue
    boot_se, ci = interval(boots)
    return PowerFit(p, ci, float(C * N[0] ** p), boot_se)


@validated
def tagged_correlation(A: Annotated[torch.Tensor, Values(ndim=2)], B: Annotated[torch.Tensor, Values(ndim=2)]) -> tuple[float, float]:
    """Correlation of two random vectors from R paired draws A, B: (R, d),

        ρ = E⟨A − EA, B − EB⟩ / √(E|A − EA|² E|B − EB|²)

    (the trace of the cross-covariance over the geometric mean of the total variances; for d = 1
    Pearson's correlation), with its delta-method standard error std(⟨Ã_r, B̃_r⟩)/(√R ·
    denominator), exact to first order near ρ = 0."""
    A, B = torch.as_tensor(A).double(), torch.as_tensor(B).double()
    if A.shape != B.shape or A.shape[0] < 2:
        raise ValueError(f"B: must have the shape (R, d) of A with R >= 2 draws (got {tuple(A.shape)} and {tuple(B.shape)})")
    R = A.shape[0]
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    prod = (Ac * Bc).sum(-1)
    denom = math.sqrt(float((Ac**2).sum(-1).mean()) * float((Bc**2).sum(-1).mean()))
    rho = float(prod.mean()) / denom
    se = float(prod.std(correction=1)) / math.sqrt(R) / denom
    return rho, se


def _level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must be in (0, 1) (got {level})")
    return level


def _trials(successes: int, trials: int) -> tuple[int, int]:
    trials = check_int("trials", trials, 1)
    return check_int("successes", successes, 0, trials), trials


def t_interval(mean: float, se: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The interval mean ± t·se of a mean of ``n`` independent samples, t the two-sided ``level``
    quantile of Student's t with n − 1 degrees of freedom; (NaN, NaN) for n < :data:`MIN_SAMPLES`."""
    from scipy.stats import t

    n = check_int("n", n, 1)
    if n < MIN_SAMPLES:
        return math.nan, math.nan
    h = float(t.ppf(0.5 + _level(level) / 2, n - 1)) * se
    return mean - h, mean + h


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a fraction ``successes``/``trials`` of independent trials: inside
    [0, 1] and close to its level at any size (also at 0 or ``trials`` successes); (NaN, NaN) for
    fewer than :data:`MIN_SAMPLES` trials."""
    from scipy.stats import norm

    k, n = _trials(successes, trials)
    if n < MIN_SAMPLES:
        return math.nan, math.nan
    z = float(norm.ppf(0.5 + _level(level) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The Clopper–Pearson (exact binomial) interval of ``successes``/``trials``: coverage at least
    ``level`` for every true fraction; (NaN, NaN) for fewer than :data:`MIN_SAMPLES` trials."""
    from scipy.stats import beta

    k, n = _trials(successes, trials)
    if n < MIN_SAMPLES:
        return math.nan, math.nan
    a = (1 - _level(level)) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, level: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of the difference k1/n1 − k2/n2 of two independent
    fractions, from their :func:`wilson_interval` s: valid at small counts and near 0 or 1;
    (NaN, NaN) when either has fewer than :data:`MIN_SAMPLES` trials."""
    (k1, n1), (k2, n2) = _trials(k1, n1), _trials(k2, n2)
    (l1, u1), (l2, u2) = wilson_interval(k1, n1, level), wilson_interval(k2, n2, level)
    p1, p2 = k1 / n1, k2 / n2
    d = p1 - p2
    return d - math.hypot(p1 - l1, u2 - p2), d + math.hypot(u1 - p1, p2 - l2)
