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
  negative: weighted least squares in linear space, parametric bootstrap (the decorrelation).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]


def mean_and_se(values: Array, axis: int = 0) -> tuple[Array, Array]:
    """Sample mean and standard error of the mean along ``axis`` (SE = 0 for one sample); torch
    in, torch out."""
    n = values.shape[axis]
    if torch.is_tensor(values):
        mean = values.mean(axis)
        se = values.std(axis, correction=1) / math.sqrt(n) if n > 1 else torch.zeros_like(mean)
        return mean, se
    values = np.asarray(values, dtype=float)
    mean = values.mean(axis)
    se = values.std(axis, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(mean)
    return mean, se


def bootstrap(statistic: Callable[[np.ndarray], Any], samples: np.ndarray, n_boot: int, seed: int,
              axis: int = 0) -> list:
    """``statistic`` of ``n_boot`` resamples of ``samples``: independent samples along ``axis``
    drawn with replacement (everything else resampled jointly). The rows come from ``seed`` and
    the number of samples alone, so fits given the same seed resample the same samples."""
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[axis]
    where: list = [slice(None)] * samples.ndim
    out = []
    for rows in np.random.default_rng(seed).integers(0, n, size=(n_boot, n)):
        where[axis] = rows
        out.append(statistic(samples[tuple(where)]))
    return out


def interval(boots: Sequence[float]) -> tuple[float, tuple[float, float]]:
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


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through (log x, log y)."""
    b, a = np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)
    return float(b), float(a)


def fit_power_law(
    x: Sequence[float], samples: np.ndarray, n_boot: int = 2000, seed: int = 0, se: Optional[np.ndarray] = None
) -> PowerFit:
    """The decay exponent p of y ≈ C x^{−p} with a bootstrap interval — the one power-law fit.

    ``samples`` (S, n): S independent samples at every x (n,) (the same samples at every x, e.g.
    one field and initial draw per row); the fit is to the sample mean, and the bootstrap resamples
    rows with replacement (keeping the correlation between the x values). With ``se`` (n,),
    ``samples`` are instead n independent positive means with these standard errors and the
    bootstrap is parametric (y + se·ξ). Resamples with a non-positive mean are discarded."""
    if se is None:
        samples = np.asarray(samples, dtype=float)
        y = samples.mean(0)
        draws = bootstrap(lambda rows: rows.mean(0), samples, n_boot, seed)
    else:
        y = np.asarray(samples, dtype=float)
        draws = list(y + np.asarray(se, float) * np.random.default_rng(seed).standard_normal((n_boot, len(y))))
    slope, icpt = loglog_slope(x, y)
    boot_se, ci = interval([-loglog_slope(x, row)[0] for row in draws if np.all(row > 0)])
    return PowerFit(-slope, ci, float(math.exp(icpt)), boot_se)


def fit_power_law_weighted(
    N: Sequence[float], y: np.ndarray, se: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> PowerFit:
    """Decay exponent of means ``y`` (n,) with independent standard errors ``se`` (n,) against N:
    weighted least squares of y ≈ C N^{−p} in linear space (weights 1/se²), so every size enters,
    also one whose mean is not resolved from 0 or is negative. 95% interval from a parametric
    bootstrap: refits of y + se·ξ (ξ standard normal)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    N, y, se = np.asarray(N, float), np.asarray(y, float), np.asarray(se, float)
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
