"""The statistics of the measurements: one mean ± standard error and one power-law fit.

- :func:`mean_and_se`: the sample mean and the standard error of the mean over independent
  samples (numpy or torch arrays, any axis);
- :func:`fit_power_law`: y ≈ C x^{−p} by least squares in log–log, with a 95% percentile
  bootstrap interval and SE for p, resampling independent samples jointly across the grid (every
  grid point sees the same samples), or, given only means and standard errors, a parametric
  bootstrap; :func:`loglog_slope` is its point estimate (also the local exponent of a rate law).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

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
    rng = np.random.default_rng(seed)
    if se is None:
        samples = np.asarray(samples, dtype=float)
        y = samples.mean(0)
        idx = rng.integers(0, samples.shape[0], size=(n_boot, samples.shape[0]))
        draws = (samples[i].mean(0) for i in idx)
    else:
        y = np.asarray(samples, dtype=float)
        draws = iter(y + np.asarray(se, float) * rng.standard_normal((n_boot, len(y))))
    slope, icpt = loglog_slope(x, y)
    boots = -np.array([loglog_slope(x, row)[0] for row in draws if np.all(row > 0)])
    lo, hi = np.quantile(boots, [0.025, 0.975]) if len(boots) else (math.nan, math.nan)
    boot_se = float(np.std(boots, ddof=1)) if len(boots) > 1 else math.nan
    return PowerFit(-slope, (float(lo), float(hi)), float(math.exp(icpt)), boot_se)


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
