"""The statistics of the measurements: one mean ± standard error and one power-law fit.

- [`mean_and_se`][stochformer.measure.stats.mean_and_se]: the sample mean and the standard error of the mean over independent
  samples (numpy or torch arrays, any axis);
- [`bootstrap`][stochformer.measure.stats.bootstrap]: the one bootstrap over independent samples (resampled with replacement,
  jointly across a grid whose every point sees the same samples), and [`interval`][stochformer.measure.stats.interval], its SE and
  95% percentile interval: [`fit_power_law`][stochformer.measure.stats.fit_power_law]'s intervals go through them;
- [`fit_power_law`][stochformer.measure.stats.fit_power_law]: y ≈ C x^{−p} by least squares in log–log, with the bootstrap SE of p
  over samples ([`bootstrap`][stochformer.measure.stats.bootstrap]) and a Student's t interval from it, or, given only means and
  standard errors, a parametric bootstrap; [`loglog_slope`][stochformer.measure.stats.loglog_slope] is its point estimate (also the local exponent of a
  rate law);
- [`fit_power_law_weighted`][stochformer.measure.stats.fit_power_law_weighted]: means with standard errors that may be unresolved from 0 or
  negative: weighted least squares in linear space, profile-likelihood interval (the decorrelation);
  [`fit_power_law_offset`][stochformer.measure.stats.fit_power_law_offset]: the same for a growth law above a free offset,
  y ≈ E₀ + C x^p (a weak error above the bias of the limit it is measured against);
- intervals valid at their sample size: [`t_interval`][stochformer.measure.stats.t_interval] (a mean of n >= 3 samples, Student's t),
  [`wilson_interval`][stochformer.measure.stats.wilson_interval] and [`clopper_pearson_interval`][stochformer.measure.stats.clopper_pearson_interval] (a fraction of independent trials).
  No interval is formed from fewer than `MIN_SAMPLES` samples (NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional, Sequence, Union, overload

import numpy as np
import torch

from ..core.validation import Int, PositiveInt, Seed, Values, check_int, validated

Array = Union[np.ndarray, torch.Tensor]
#: fewer samples than this give no interval (NaN): a spread from 1 or 2 samples means nothing
MIN_SAMPLES = 3
#: measured values: finite numbers (arrays, sequences or tensors; checked at every public function)
_Values = Annotated[Array, Values()]
_Positive = Annotated[Union[Sequence[float], np.ndarray], Values(ndim=1, positive=True)]
#: bootstrap resamples: at most 10⁶ (the configs' bound; more only lengthens a fit)
_Resamples = Annotated[int, Int(1, 10**6)]


def _axis(values: Array, axis: int) -> int:
    return check_int("axis", axis, -values.ndim, values.ndim - 1) if values.ndim else check_int("axis", axis, 0, -1)


#: Richardson's weights on values at n, n/2 (, n/4) steps whose bias is a·Δt (+ b·Δt²), Δt = T/n:
#: the numerators and their common denominator (the numerators sum to it)
RICHARDSON_WEIGHTS: dict[int, tuple[tuple[int, ...], int]] = {2: ((2, -1), 1), 3: ((8, -6, 1), 3)}


def richardson_steps(values: Sequence[Any], ses: Optional[Sequence[Any]] = None) -> Any:
    r"""Extrapolate to Δt → 0 a quantity measured at n, n/2 (, n/4) steps whose bias is
    $a\,\Delta t\ (+\ b\,\Delta t^2)$: $2v_1 - v_2$, or $(8v_1 - 6v_2 + v_3)/3$
    (`RICHARDSON_WEIGHTS`); with the levels' standard errors (independent runs), also the SE
    $\sqrt{\sum_i w_i^2\,\mathrm{SE}_i^2}$ of the combination.

    Parameters
    ----------
    values : sequence
        The values (numbers or arrays, element by element) at n, n/2 (, n/4) steps: 2 or 3 of them.
    ses : sequence, optional
        Their standard errors, from independent runs.

    Returns
    -------
    float or numpy.ndarray, or tuple
        The extrapolated value; with ``ses``, (value, SE).

    Raises
    ------
    ValueError
        Not 2 or 3 values, or ``ses`` of another length.
    """
    if len(values) not in RICHARDSON_WEIGHTS or (ses is not None and len(ses) != len(values)):
        raise ValueError(f"values: 2 or 3 levels, with as many ses (got {len(values)} values"
                         f"{'' if ses is None else f', {len(ses)} ses'})")
    weights, den = RICHARDSON_WEIGHTS[len(values)]
    value = sum(w * v for w, v in zip(weights, values)) / den
    if ses is None:
        return value
    return value, np.sqrt(sum((w / den * e) ** 2 for w, e in zip(weights, ses)))


@overload
def mean_and_se(values: torch.Tensor, axis: int = 0) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def mean_and_se(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]: ...
@validated
def mean_and_se(values: Annotated[Array, Values(missing=True)], axis: int = 0) -> tuple[Array, Array]:
    """Sample mean and standard error of the mean along ``axis`` (SE = 0 for one sample); torch
    in, torch out. A NaN marks a missing value: the mean and SE it enters are NaN.

    Parameters
    ----------
    values : numpy.ndarray or torch.Tensor
        Independent samples along ``axis`` (NaN: missing).
    axis : int, optional
        The samples' axis.

    Returns
    -------
    tuple
        (mean, SE), each ``values`` without ``axis``, of its type.
    """
    n = values.shape[_axis(values, axis)]
    if torch.is_tensor(values):
        mean = values.mean(axis)
        if n == 1:
            return mean, torch.zeros_like(mean)
        big = values.abs().amax(axis, keepdim=True)  # beyond 1e150 the squares overflow, below 1e-150 they underflow: the spread in units of it
        scale = torch.where((big > 1e150) | ((big < 1e-150) & (big > 0)), big, torch.ones_like(big))
        return mean, (values / scale).std(axis, correction=1) * scale.squeeze(axis) / math.sqrt(n)
    values = np.asarray(values, dtype=float)
    mean = values.mean(axis)
    if n == 1:
        return mean, np.zeros_like(mean)
    with np.errstate(invalid="ignore"):
        top = np.abs(values).max(axis, keepdims=True)
        unit = np.where((top > 1e150) | ((top < 1e-150) & (top > 0)), top, 1.0)
    return mean, (values / unit).std(axis, ddof=1) * np.squeeze(unit, axis) / math.sqrt(n)


@validated
def bootstrap(statistic: Callable[[np.ndarray], Any], samples: _Values, n_boot: _Resamples, seed: Seed,
              axis: int = 0) -> list:
    """``statistic`` of ``n_boot`` resamples of ``samples``: independent samples along ``axis``
    drawn with replacement (everything else resampled jointly). The rows come from ``seed`` and
    the number of samples alone, so fits given the same seed resample the same samples.

    Parameters
    ----------
    statistic : callable
        Maps resampled samples (the shape of ``samples``) to a value.
    samples : numpy.ndarray
        Independent samples along ``axis``.
    n_boot : int
        Resamples.
    seed : int
        Seed of the resampled rows.
    axis : int, optional
        The samples' axis.

    Returns
    -------
    list
        ``statistic`` of each resample.
    """
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
    there are too few).

    Parameters
    ----------
    boots : sequence of float
        Resampled values of a statistic (NaN ignored).

    Returns
    -------
    tuple
        (SE, (low, high)).
    """
    b = np.asarray(boots, dtype=float)
    lo, hi = np.quantile(b, [0.025, 0.975]) if len(b) else (math.nan, math.nan)
    return (float(np.std(b, ddof=1)) if len(b) > 1 else math.nan), (float(lo), float(hi))


def resampled_se(boots: Union[Sequence[float], np.ndarray], samples: int) -> float:
    """The SE of a statistic of ``samples`` independent samples from its resampled values ``boots``:
    their SD (ddof 1) times √(S/(S − 1)), since resampling S samples gives the plug-in SD (a
    sample variance with divisor S); with it, an interval takes Student's t with S − 1 degrees of
    freedom. NaN for fewer than 2 samples or values.

    Parameters
    ----------
    boots : sequence of float
        Resampled values of the statistic.
    samples : int
        S, the independent samples resampled.

    Returns
    -------
    float
        The SE (NaN for fewer than 2 samples or values).
    """
    b = np.asarray(boots, dtype=float)
    if samples < 2 or len(b) < 2:
        return math.nan
    return float(np.std(b, ddof=1)) * math.sqrt(samples / (samples - 1))


@dataclass(frozen=True)
class PowerFit:
    """y ≈ C x^{−exponent}: least-squares slope of log(mean y) on log x, with the bootstrap SE of
    the exponent, its 95% interval and ``n``, the number of samples behind it where the interval
    is Student's t (None for an interval from independent means with normal errors).

    Attributes
    ----------
    exponent : float
        p in y ≈ C x^{−p}.
    ci : tuple of float
        Its 95% interval.
    prefactor : float
        C.
    se : float
        The exponent's SE.
    n : int or None
        Samples behind a Student-t interval.
    """

    exponent: float
    ci: tuple[float, float]
    prefactor: float
    se: float = math.nan
    n: Optional[int] = None

    def to_dict(self) -> dict:
        """The fit as JSON-able values.

        Returns
        -------
        dict
            ``exponent``, ``ci`` (a list), ``prefactor`` and ``n``.
        """
        return {"exponent": self.exponent, "ci": list(self.ci), "prefactor": self.prefactor, "n": self.n}


@validated
def loglog_slope(x: _Positive, y: _Positive) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through (log x, log y): x, y positive, of one
    length >= 2.

    Parameters
    ----------
    x, y : array_like
        Positive numbers of one length >= 2.

    Returns
    -------
    tuple of float
        (slope, intercept).
    """
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"y: must have the length of x, at least 2 (got {len(x)} and {len(y)})")
    return _loglog_slope(x, y)


def _loglog_slope(x: Union[Sequence[float], np.ndarray], y: Union[Sequence[float], np.ndarray]) -> tuple[float, float]:
    with np.errstate(invalid="ignore", divide="ignore"):  # a mean <= 0: NaN, no power law (the callers say so)
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
    rows with replacement (keeping the correlation between the x values). Its SE, times √(S/(S − 1))
    (the resampling SE of S samples is the plug-in one), gives the interval p ± t·SE, t the 97.5%
    quantile of Student's t with S − 1 degrees of freedom: at S = 3 a percentile interval covers the
    exponent 72% of the time, this one 94% (``tests/test_statistics.py``). With ``se``
    (n,), ``samples`` are instead n independent positive means with these standard errors and the
    bootstrap is parametric (y + se·ξ, ξ standard normal, or Student's t with n − 1 degrees of
    freedom when each mean is of ``n`` samples), with its percentile interval. Resamples with a
    non-positive mean are discarded. Fewer than `MIN_SAMPLES` samples give no interval (NaN).

    Parameters
    ----------
    x : array_like, shape (n,)
        Positive abscissae.
    samples : numpy.ndarray, shape (S, n) or (n,)
        Independent samples at every x, or n means with ``se``.
    n_boot : int, optional
        Resamples.
    seed : int, optional
        Seed of the resampling.
    se : numpy.ndarray, shape (n,), optional
        Standard errors of the means (the parametric bootstrap).
    n : int, optional
        Samples behind each mean (Student's t in the parametric bootstrap).

    Returns
    -------
    PowerFit
        Exponent, interval, prefactor, SE and n.
    """
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
    exponents = [-_loglog_slope(x, row)[0] for row in draws if np.all(row > 0)]
    boot_se, ci = interval(exponents)
    if se is not None:
        return PowerFit(-slope, ci, float(math.exp(icpt)), boot_se, n)
    rows = samples.shape[0]
    if not few:
        boot_se = resampled_se(exponents, rows)
        ci = t_interval(-slope, boot_se, rows)
    return PowerFit(-slope, ci, float(math.exp(icpt)), boot_se, rows)


#: the exponents a profile-likelihood interval searches (an interval reaching an end is unbounded there)
PROFILE_RANGE = (-20.0, 20.0)
#: grid points of that search (spacing 0.005), refined near the best fit
PROFILE_POINTS = 8001
#: χ²₁'s 95% quantile: the likelihood-ratio threshold of a 95% interval for one parameter
CHI2_1_95 = 3.841458820694124


def _profile_rss(x: np.ndarray, y: np.ndarray, w: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each exponent p (k,): the best prefactor C(p) = Σ w y x^{−p} / Σ w x^{−2p} and the
    weighted residual sum Σ w (y − C(p) x^{−p})², each (k,)."""
    X = x[None, :] ** -p[:, None]  # (k, n)
    C = (w * y * X).sum(-1) / (w * X * X).sum(-1)
    return C, (w * (y - C[:, None] * X) ** 2).sum(-1)


def _profile_interval(rss: Callable[[np.ndarray], np.ndarray], grid: np.ndarray) -> tuple[float, float, float]:
    """The minimiser p̂ of a profiled residual sum ``rss`` (exponents (k,) → (k,)) over ``grid``
    (a grid search, then a bounded refinement within one spacing) and the hull (lo, hi) of every p
    with rss(p) − rss(p̂) ≤ χ²₁(0.95), its ends refined by root finding between the grid points
    inside and outside (an end of the grid where the hull reaches it: unbounded there)."""
    from scipy.optimize import brentq, minimize_scalar

    values = rss(grid)
    k = int(np.argmin(values))
    step = grid[1] - grid[0]

    def rss_at(q: float) -> float:
        return float(rss(np.array([q]))[0])

    best = minimize_scalar(rss_at, method="bounded",
                           bounds=(max(grid[0], grid[k] - step), min(grid[-1], grid[k] + step)), options={"xatol": 1e-12})
    p_hat = float(best.x) if best.fun <= values[k] else float(grid[k])
    rss_min = rss_at(p_hat)

    def excess(q: float) -> float:
        return rss_at(q) - rss_min - CHI2_1_95

    inside = np.nonzero(values - rss_min <= CHI2_1_95)[0]
    lo = hi = p_hat
    if len(inside):  # the hull's ends, each refined between its grid point and the next one outside
        first, last = int(inside[0]), int(inside[-1])
        lo = min(p_hat, float(grid[0]) if first == 0 else brentq(excess, grid[first - 1], grid[first], xtol=1e-10))
        hi = max(p_hat, float(grid[-1]) if last == len(grid) - 1 else brentq(excess, grid[last], grid[last + 1], xtol=1e-10))
    return p_hat, float(lo), float(hi)


@validated
def fit_power_law_weighted(
    N: _Positive, y: Annotated[np.ndarray, Values(ndim=1)], se: Annotated[np.ndarray, Values(ndim=1, positive=True)],
) -> PowerFit:
    """Decay exponent of means ``y`` (n,) with independent Gaussian standard errors ``se`` (n,)
    against N: weighted least squares of y ≈ C N^{−p} in linear space (weights w = 1/se²), so every
    size enters, also one whose mean is not resolved from 0 or is negative. C is profiled out
    exactly (for fixed p the model is linear in C), so the fit is a one-dimensional search of
    RSS(p) = Σ w (y − C(p) N^{−p})² over `PROFILE_RANGE` (a grid, then a bounded refinement).
    The 95% interval is the profile-likelihood one: every p with RSS(p) − RSS(p̂) ≤ χ²₁(0.95) =
    3.84 (its hull, on the grid); where the means do not resolve the decay it reaches an end of
    the range (unbounded there), where a percentile bootstrap of refits would give a narrow
    interval that means nothing. ``se`` = the interval's half-width / 1.96.

    Parameters
    ----------
    N : array_like, shape (n,)
        Positive sizes.
    y : numpy.ndarray, shape (n,)
        Means (any sign).
    se : numpy.ndarray, shape (n,)
        Their standard errors, positive.

    Returns
    -------
    PowerFit
        Exponent, profile-likelihood interval, prefactor and SE.
    """
    sizes, y, se = np.asarray(N, float), np.asarray(y, float), np.asarray(se, float)
    if not len(sizes) == len(y) == len(se) >= 2:
        raise ValueError(f"y, se: must have the length of N, at least 2 (got {len(sizes)}, {len(y)}, {len(se)})")
    x, w = sizes / sizes[0], 1.0 / se**2  # C is the value at the first size: a well-scaled parameter
    p_hat, lo, hi = _profile_interval(lambda p: _profile_rss(x, y, w, p)[1], np.linspace(*PROFILE_RANGE, PROFILE_POINTS))
    C = float(_profile_rss(x, y, w, np.array([p_hat]))[0][0])
    return PowerFit(p_hat, (float(lo), float(hi)), float(C * sizes[0] ** p_hat), (hi - lo) / (2 * 1.959963984540054))


#: the growth exponents `fit_power_law_offset` searches (p > 0: at p = 0 the power is the offset)
OFFSET_RANGE = (0.01, 8.0)


@dataclass(frozen=True)
class OffsetPowerFit(PowerFit):
    """y ≈ offset + prefactor · x^{exponent} (a growth law above a constant, e.g. a weak error
    above the bias of the limit it is measured against), with the exponent's 95% interval.

    Attributes
    ----------
    exponent : float
        p in y ≈ E₀ + C x^p.
    ci : tuple of float
        Its 95% interval.
    prefactor : float
        C.
    se : float
        The exponent's SE.
    n : int or None
        Samples behind a Student-t interval.
    offset : float
        E₀.
    """

    offset: float = math.nan

    def to_dict(self) -> dict:
        return {**super().to_dict(), "offset": self.offset}


def _offset_rss(x: np.ndarray, y: np.ndarray, w: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each exponent p (k,): the weighted least-squares (E₀, C) of y ≈ E₀ + C x^p (the 2 × 2
    normal equations) and the residual sum Σ w (y − E₀ − C x^p)², each (k,)."""
    X = x[None, :] ** p[:, None]  # (k, n)
    s0, s1, s2 = w.sum(), (w * X).sum(-1), (w * X * X).sum(-1)
    t0, t1 = (w * y).sum(), (w * y * X).sum(-1)
    det = s0 * s2 - s1 * s1
    C = (s0 * t1 - s1 * t0) / det
    E0 = (t0 - s1 * C) / s0
    return E0, C, (w * (y - E0[:, None] - C[:, None] * X) ** 2).sum(-1)


@validated
def fit_power_law_offset(
    x: _Positive, y: Annotated[np.ndarray, Values(ndim=1)], se: Annotated[np.ndarray, Values(ndim=1, positive=True)],
) -> OffsetPowerFit:
    """Growth exponent p of means ``y`` (n,) with independent Gaussian standard errors ``se`` (n,)
    against x (n,): weighted least squares of y ≈ E₀ + C x^p, the offset E₀ free. For fixed p the
    model is linear in (E₀, C), which are profiled out exactly, so the fit is a search of
    RSS(p) = min Σ w (y − E₀ − C x^p)² (w = 1/se²) over `OFFSET_RANGE`, with the profile-likelihood
    95% interval of `fit_power_law_weighted` (an end of the range where the data do not bound p).
    At least 3 points (with 2, any p fits exactly). ``se`` = the interval's half-width / 1.96.

    Parameters
    ----------
    x : array_like, shape (n,)
        Positive abscissae, at least 3.
    y : numpy.ndarray, shape (n,)
        Means (any sign).
    se : numpy.ndarray, shape (n,)
        Their standard errors, positive.

    Returns
    -------
    OffsetPowerFit
        ``exponent`` p̂, ``ci``, ``prefactor`` C (at x = 1), ``offset`` E₀, ``se``.
    """
    xs, y, se = np.asarray(x, float), np.asarray(y, float), np.asarray(se, float)
    if not len(xs) == len(y) == len(se) >= 3:
        raise ValueError(f"y, se: must have the length of x, at least 3 (got {len(xs)}, {len(y)}, {len(se)})")
    scale = xs.max()  # x/scale in (0, 1]: C is the value at the largest x, a well-scaled parameter
    u, w = xs / scale, 1.0 / se**2
    p_hat, lo, hi = _profile_interval(lambda p: _offset_rss(u, y, w, p)[2], np.linspace(*OFFSET_RANGE, 1597))
    E0, C, _ = (float(v[0]) for v in _offset_rss(u, y, w, np.array([p_hat])))
    return OffsetPowerFit(p_hat, (lo, hi), float(C / scale**p_hat), (hi - lo) / (2 * 1.959963984540054), None, E0)


@validated
def tagged_correlation(A: Annotated[torch.Tensor, Values(ndim=2)], B: Annotated[torch.Tensor, Values(ndim=2)]) -> tuple[float, float]:
    """Correlation of two random vectors from R paired draws A, B: (R, d),

        ρ = E⟨A − EA, B − EB⟩ / √(E|A − EA|² E|B − EB|²)

    (the trace of the cross-covariance over the geometric mean of the total variances; for d = 1
    Pearson's correlation), with its delta-method standard error std(⟨Ã_r, B̃_r⟩)/(√R ·
    denominator), exact to first order near ρ = 0.

    Parameters
    ----------
    A, B : torch.Tensor, shape (R, d)
        Paired draws.

    Returns
    -------
    tuple of float
        (ρ, SE).
    """
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
    quantile of Student's t with n − 1 degrees of freedom; (NaN, NaN) for n < `MIN_SAMPLES`.

    Parameters
    ----------
    mean : float
        The sample mean.
    se : float
        Its standard error.
    n : int
        Samples.
    level : float, optional
        The two-sided coverage, in (0, 1).

    Returns
    -------
    tuple of float
        (low, high).
    """
    from scipy.stats import t

    n = check_int("n", n, 1)
    if n < MIN_SAMPLES:
        return math.nan, math.nan
    h = float(t.ppf(0.5 + _level(level) / 2, n - 1)) * se
    return mean - h, mean + h


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a fraction ``successes``/``trials`` of independent trials: inside
    [0, 1] and close to its level at any size (also at 0 or ``trials`` successes); (NaN, NaN) for
    fewer than `MIN_SAMPLES` trials.

    Parameters
    ----------
    successes : int
        Successes, in 0..trials.
    trials : int
        Independent trials.
    level : float, optional
        The two-sided coverage, in (0, 1).

    Returns
    -------
    tuple of float
        (low, high) in [0, 1].
    """
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
    ``level`` for every true fraction; (NaN, NaN) for fewer than `MIN_SAMPLES` trials.

    Parameters
    ----------
    successes : int
        Successes, in 0..trials.
    trials : int
        Independent trials.
    level : float, optional
        The two-sided coverage, in (0, 1).

    Returns
    -------
    tuple of float
        (low, high) in [0, 1].
    """
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
    fractions, from their [`wilson_interval`][stochformer.measure.stats.wilson_interval] s: valid at small counts and near 0 or 1;
    (NaN, NaN) when either has fewer than `MIN_SAMPLES` trials.

    Parameters
    ----------
    k1, n1 : int
        Successes and trials of the first fraction.
    k2, n2 : int
        Those of the second.
    level : float, optional
        The two-sided coverage, in (0, 1).

    Returns
    -------
    tuple of float
        (low, high) of k1/n1 − k2/n2.
    """
    (k1, n1), (k2, n2) = _trials(k1, n1), _trials(k2, n2)
    (l1, u1), (l2, u2) = wilson_interval(k1, n1, level), wilson_interval(k2, n2, level)
    p1, p2 = k1 / n1, k2 / n2
    d = p1 - p2
    return d - math.hypot(p1 - l1, u2 - p2), d + math.hypot(u1 - p1, p2 - l2)
