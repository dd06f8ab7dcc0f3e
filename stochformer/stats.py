"""The statistics of the measurements: one mean ± standard error and one power-law fit.

- :func:`mean_and_se`: the sample mean and the standard error of the mean over independent
  samples (numpy or torch arrays, any axis);
- :func:`fit_power_law`: y ≈ C x^{−p} by least squares in log–log, with a 95% bootstrap interval
  for p (``scipy.stats.bootstrap``, percentile method), resampling independent samples jointly
  across the grid (every grid point sees the same samples), or, given only means and standard
  errors, a weighted fit in linear space with a parametric bootstrap.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence, Union

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
    lo, hi = np.quantile(boots, [0.025, 0.975]) if boots else (math.nan, math.nan)
    return PowerFit(p, (float(lo), float(hi)), float(C * N[0] ** p))


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
