r"""Neighbouring models beside the paper's common noise (SPEC §7; docs/neighbours.md): measured
quantities for random quadratic forms on the sphere and for independent noise on every token.

- **Random quadratic forms** (Engel & Shalova; Shalova): two tokens driven by one
  [`QuadraticField`][stochformer.model.quadratic.QuadraticField]; the distance of a token to the
  random attractor is the angle θ to the other token of the pair (forced: the single attracting
  point) or min(θ, π − θ) (unforced: the antipodal pair), since the overlap of two tokens is a
  Markov process of its own and the attractor's point at time t is, in law, a token started
  independently (a uniform point). Measured: E dist(X_t, A) ± SE beside the exact value
  ([`theory.evolution.expectation`][stochformer.theory.evolution.expectation] on the
  [`PairDiffusion`][stochformer.theory.pair.PairDiffusion] of the field's pair kernel) and the
  published bounds (π/√2) e^{−t/2} and π e^{−λ_γ t}, λ_γ = 2γ²(n − 1)/(γ² + 4).
- **Independent noise**: pairs driven by one [`ExactField`][stochformer.model.noise.ExactField] or by
  [`IndependentField`][stochformer.model.independent.IndependentField] with the same κ: E z_T ± SE
  beside the exact common-noise value and the independent one z₀ e^{−(d−1)κ(1)T}.
- **Homogenized transformers** (Koubbi, Geshkovski, Rigollet):
  [`HomogenizedAttention`][stochformer.model.homogenized.HomogenizedAttention]; at β = 0 the mean
  overlap m(t) = |x̄|² beside the logistic u′ = u(1 − u) on the time τ = σ_V²(d − 1)t
  ([`mean_overlap`][stochformer.experiments.neighbours.mean_overlap]); at large β a pair's E z and
  E z² on the time t = s/σ_V² beside the exact law of the linear kernel κ(u) = σ_V² u
  ([`large_beta_pair`][stochformer.experiments.neighbours.large_beta_pair]).
- **Value-matrix noise**: [`ValueNoise`][stochformer.model.value_noise.ValueNoise]; the fraction of
  pairs ending antipodal beside P(antipodal) of its scale function
  ([`value_antipodal`][stochformer.experiments.neighbours.value_antipodal]).

Each check has ``rows()``: [`Comparison`][stochformer.measure.verdict.Comparison] rows (predicted
against measured, with their verdicts), which take an optional wrong prediction in place of the
theory's (the tests show that the rule rejects it). [`run_neighbours`][stochformer.experiments.neighbours.run_neighbours]
runs every check at the sizes of a [`NeighboursConfig`][stochformer.experiments.neighbours.NeighboursConfig]
(the report's ``neighbours`` section) and adds the exact curves its figures draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
from pydantic import Field, field_validator

from ..config import StrictConfig
from ..core.progress import ProgressMeter
from ..core.runtime import child_seeds, provenance
from ..core.sphere import uniform
from ..core.validation import Cosine, NonNegativeFloat, PositiveFloat, PositiveInt, Seed, validated
from ..integrate import SaveAt, solve
from ..integrate import Model
from ..measure.stats import OffsetPowerFit, fit_power_law_offset, mean_and_se
from ..measure.verdict import Comparison, judge
from ..model.homogenized import HomogenizedAttention, HomogenizedLayers
from ..model.independent import IndependentField
from ..model.kernel import NoiseKernel
from ..model.noise import ExactField, NoiseSource
from ..model.quadratic import QuadraticField
from ..model.sde import LimitSDE
from ..model.value_noise import ValueNoise
from ..theory.evolution import PairChain, expectation, law
from ..theory.pair import PairDiffusion
from ..theory.value_noise import ValuePair, critical_beta


def forcing_rate(gamma: float, n: float) -> float:
    """λ_γ = 2γ²(n − 1)/(γ² + 4), the rate of the forced bound E dist ≤ π e^{−λ_γ t}.

    Parameters
    ----------
    gamma : float
        The forcing γ.
    n : float
        The dimension n of the published bound.

    Returns
    -------
    float
        λ_γ.
    """
    return 2.0 * gamma**2 * (n - 1) / (gamma**2 + 4.0)


def unforced_bound(t: np.ndarray) -> np.ndarray:
    """(π/√2) e^{−t/2}, the bound on E dist(X_t, A) without forcing.

    Parameters
    ----------
    t : numpy.ndarray
        Times.

    Returns
    -------
    numpy.ndarray
        The bound, of t's shape.
    """
    return math.pi / math.sqrt(2.0) * np.exp(-0.5 * np.asarray(t, float))


def forced_bound(t: np.ndarray, gamma: float, n: float) -> np.ndarray:
    """π e^{−λ_γ t} with λ_γ = `forcing_rate` (γ, n).

    Parameters
    ----------
    t : numpy.ndarray
        Times.
    gamma : float
        The forcing γ.
    n : float
        The dimension n of the bound.

    Returns
    -------
    numpy.ndarray
        The bound, of t's shape.
    """
    return math.pi * np.exp(-forcing_rate(gamma, n) * np.asarray(t, float))


def quadratic_generator(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients of L₀ f = −2z(1−z²) f′ + 2(1−z²)² f″ (drift, ½ · diffusion) at cosines z.

    Parameters
    ----------
    z : numpy.ndarray
        Cosines.

    Returns
    -------
    tuple of numpy.ndarray
        (drift, ½ · diffusion), of z's shape.
    """
    z = np.asarray(z, float)
    return -2.0 * z * (1 - z * z), 2.0 * (1 - z * z) ** 2


def pair_start(pairs: int, d: int, z0: Optional[float], seed: int) -> torch.Tensor:
    """Two tokens per sample (pairs, 2, d): independent uniform points (z0 None) or e₁ and
    z0 e₁ + √(1 − z0²) e₂ (the laws used are rotation invariant).

    Parameters
    ----------
    pairs : int
        Samples.
    d : int
        Token dimension.
    z0 : float or None
        The pairs' cosine (None: independent uniform tokens).
    seed : int
        The seed.

    Returns
    -------
    torch.Tensor, shape (pairs, 2, d)
        The pairs.
    """
    if z0 is None:
        return uniform(pairs, 2, d, seed=seed)
    X = torch.zeros(pairs, 2, d, dtype=torch.float64)
    X[:, 0, 0] = 1.0
    X[:, 1, 0] = z0
    X[:, 1, 1] = math.sqrt(max(0.0, 1.0 - z0 * z0))
    return X


def _angles(X: torch.Tensor) -> dict[str, torch.Tensor]:
    """θ = 2 arcsin(|x − y|/2), π − θ = 2 arcsin(|x + y|/2) (accurate near both ends) and z."""
    x, y = X[:, 0], X[:, 1]
    return {"theta": 2 * torch.asin(((x - y).norm(dim=-1) / 2).clamp(max=1.0)),
            "anti": 2 * torch.asin(((x + y).norm(dim=-1) / 2).clamp(max=1.0)),
            "z": (x * y).sum(-1)}


def simulate_pairs(noise: NoiseSource, X0: torch.Tensor, T: float, steps: int, at: Sequence[int],
                   seed: int) -> dict[str, np.ndarray]:
    """θ, π − θ and z of each pair at the steps ``at``: arrays (pairs, len(at)), stepped by
    [`solve`][stochformer.solve] on a [`LimitSDE`][stochformer.model.sde.LimitSDE] (Stratonovich Heun)
    with ``noise``.

    Parameters
    ----------
    noise : NoiseSource
        The field.
    X0 : torch.Tensor, shape (pairs, 2, d)
        The pairs.
    T : float
        The horizon.
    steps : int
        Steps.
    at : sequence of int
        The recorded steps.
    seed : int
        The seed.

    Returns
    -------
    dict of str to numpy.ndarray
        ``theta``, ``anti`` (π − θ) and ``z``, each (pairs, len(at)).
    """
    return _pair_angles(LimitSDE(noise=noise), X0, T, steps, at, seed)


def _pair_angles(model: Model, X0: torch.Tensor, T: float, steps: int, at: Sequence[int],
                 seed: int) -> dict[str, np.ndarray]:
    out = solve(model, X0, T=T, steps=steps, seed=seed, save=SaveAt(at=list(at), stats=(), final=False, fn=_angles))
    return {k: out[k].values for k in ("theta", "anti", "z")}


def angle(w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """θ = 2 arcsin √(w/2) from w = 1 − z (and y = 1 + z, unused): the angle, accurate near z = 1
    (the form [`expectation`][stochformer.theory.evolution.expectation] takes with ``distances``).

    Parameters
    ----------
    w : numpy.ndarray
        1 − z.
    y : numpy.ndarray
        1 + z.

    Returns
    -------
    numpy.ndarray
        θ.
    """
    return 2 * np.arcsin(np.sqrt(np.clip(w / 2, 0.0, 1.0)))


def antipodal_angle(w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min(θ, π − θ) from w = 1 − z and y = 1 + z: the distance to the antipodal pair {±y}.

    Parameters
    ----------
    w : numpy.ndarray
        1 − z.
    y : numpy.ndarray
        1 + z.

    Returns
    -------
    numpy.ndarray
        min(θ, π − θ).
    """
    return np.minimum(angle(w, y), angle(y, w))


@dataclass(frozen=True)
class AttractorCheck:
    """E dist(X_t, A) at ``times`` (t,): ``mean`` ± ``se`` over ``pairs`` simulated pairs, the exact
    ``exact`` (Kolmogorov equation of the pair kernel) and ``bound`` (the published one; forced:
    with n = d, the reading of docs/neighbours.md); ``z`` the z-scores (mean − exact)/se.

    Attributes
    ----------
    d : int
        Token dimension.
    gamma : float
        The forcing γ.
    times : numpy.ndarray, shape (t,)
        The times.
    mean, se : numpy.ndarray, shape (t,)
        The simulated mean and its SE.
    exact : numpy.ndarray, shape (t,)
        The exact value.
    bound : numpy.ndarray, shape (t,)
        The published bound.
    pairs : int
        Simulated pairs.
    """

    d: int
    gamma: float
    times: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    exact: np.ndarray
    bound: np.ndarray
    pairs: int

    @property
    def z(self) -> np.ndarray:
        return (self.mean - self.exact) / self.se

    @property
    def model(self) -> str:
        return f"quadratic forms, d = {self.d}" + (f", γ = {self.gamma:g}" if self.gamma > 0 else "")

    def rows(self, exact: Optional[np.ndarray] = None, bound: Optional[np.ndarray] = None) -> list[Comparison]:
        """Per time: E dist(X_t, A) ``matches`` the exact value, and is ``at_most`` the published bound
        (Student's t over the pairs). ``exact``, ``bound``: values to test in place of the theory's.

        Parameters
        ----------
        exact : numpy.ndarray, shape (t,), optional
            Values per time to test in place of the exact ones.
        bound : numpy.ndarray, shape (t,), optional
            Values per time to test in place of the published bound.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        ex = self.exact if exact is None else np.asarray(exact, float)
        bd = self.bound if bound is None else np.asarray(bound, float)
        law = "π e^{−λ_γ t}, λ_γ = 2γ²(n−1)/(γ²+4), n = d" if self.gamma > 0 else "(π/√2) e^{−t/2}"
        rows = []
        for t, e, b, m, s in zip(self.times, ex, bd, self.mean, self.se):
            rows.append(Comparison.from_mean_se(f"E dist(X_t, A) at t = {t:g} ({self.model}) vs exact", float(e),
                                                float(m), float(s), n=self.pairs,
                                                note="exact: Kolmogorov equation of the pair kernel 2ρ + γ²"))
            rows.append(Comparison.from_mean_se(f"E dist(X_t, A) at t = {t:g} ({self.model}) vs the published bound",
                                                float(b), float(m), float(s), n=self.pairs, rule="at_most",
                                                note=f"bound {law}"))
        return judge(rows)


@validated
def attractor_distance(d: PositiveInt = 3, gamma: NonNegativeFloat = 0.0, T: PositiveFloat = 6.0,
                       steps: PositiveInt = 600, points: PositiveInt = 3, pairs: PositiveInt = 8000,
                       z0: Optional[Cosine] = 0.0, seed: Seed = 0) -> AttractorCheck:
    """E dist(X_t, A) at ``points`` equally spaced times up to T for random quadratic forms with
    forcing γ (module docstring): from z0 (None: independent uniform tokens).

    Parameters
    ----------
    d : int, optional
        Token dimension.
    gamma : float, optional
        The forcing γ, >= 0.
    T : float, optional
        The horizon.
    steps : int, optional
        Steps.
    points : int, optional
        Times checked.
    pairs : int, optional
        Simulated pairs.
    z0 : float, optional
        The initial cosine (None: uniform tokens).
    seed : int, optional
        The seed.

    Returns
    -------
    AttractorCheck
        Simulated, exact and bound.
    """
    at = [round(steps * (k + 1) / points) for k in range(points)]
    times = np.array(at, float) * T / steps
    sim = simulate_pairs(QuadraticField(gamma), pair_start(pairs, d, z0, seed), T, steps, at, seed + 1)
    dist = sim["theta"] if gamma > 0 else np.minimum(sim["theta"], sim["anti"])
    mean, se = mean_and_se(dist, axis=0)
    pair = PairDiffusion(QuadraticField(gamma).pair_kernel(d))
    exact = expectation(pair, angle if gamma > 0 else antipodal_angle, times, z0=z0, distances=True)
    bound = forced_bound(times, gamma, d) if gamma > 0 else unforced_bound(times)
    return AttractorCheck(d, float(gamma), times, np.asarray(mean), np.asarray(se), np.asarray(exact), bound, pairs)


def forcing_scale(gamma: float, d: int) -> float:
    """The distance w* = γ²(d − 1)/2 from the antipode (in w = 1 + z) at which the forcing's drift
    2γ²(d − 1) of the pair overlap equals the unforced drift 4w: below it the forcing pushes the
    pair off the antipode, above it the unforced flow draws it in (docs/neighbours.md).

    Parameters
    ----------
    gamma : float
        The forcing γ.
    d : int
        Token dimension.

    Returns
    -------
    float
        w*.
    """
    return gamma * gamma * (d - 1) / 2


@dataclass(frozen=True)
class MetaAttractorTimes:
    """The antipodal meta-attractor of random quadratic forms with small forcing, from the exact
    pair law (SPEC §8 with κ(ρ) = 2ρ + γ²): for each γ of ``gamma`` (k,), ``reach`` (k,) the time at
    which P(1 + z_t ≤ w*) (w* = [`forcing_scale`][stochformer.experiments.neighbours.forcing_scale])
    first reaches half its largest value over [0, ``horizon``] (pairs of independent uniform tokens),
    and ``escape_rate`` (k,) the decay rate of the pairs held at the antipode (minus the second
    eigenvalue of the pair chain, both ends reflecting). ``slope`` is the least-squares slope of
    ``reach`` against log(1/γ), ``local_slopes`` (k − 1,) those between successive γ.

    Parameters
    ----------
    d : int
        Token dimension.
    gamma : numpy.ndarray, shape (k,)
        The forcings, decreasing.
    reach : numpy.ndarray, shape (k,)
        The reach times.
    plateau : numpy.ndarray, shape (k,)
        The largest P(1 + z_t ≤ w*) over the window.
    escape_rate : numpy.ndarray, shape (k,)
        The rates at which the held pairs leave the antipode.
    horizon : float
        The time window.
    """

    d: int
    gamma: np.ndarray
    reach: np.ndarray
    plateau: np.ndarray
    escape_rate: np.ndarray
    horizon: float

    @property
    def local_slopes(self) -> np.ndarray:
        """Slopes of ``reach`` against log(1/γ) between successive γ (k − 1,)."""
        return np.diff(self.reach) / np.diff(-np.log(self.gamma))

    @property
    def slope(self) -> float:
        """The least-squares slope of ``reach`` against log(1/γ)."""
        return float(np.polyfit(-np.log(self.gamma), self.reach, 1)[0])

    def slope_agrees(self, predicted: float, tol: float = 0.02) -> bool:
        """Whether a predicted slope lies within ``tol`` of the range of the local slopes.

        Parameters
        ----------
        predicted : float
            The slope of t against log(1/γ) claimed.
        tol : float, optional
            The margin beyond the local slopes' range (their range is the curvature of t in log(1/γ)).

        Returns
        -------
        bool
            The verdict.
        """
        s = self.local_slopes
        return bool(s.min() - tol <= predicted <= s.max() + tol)


@validated
def meta_attractor_times(gammas: Sequence[float] = (1e-2, 10 ** -2.5, 1e-3, 10 ** -3.5, 1e-4), d: PositiveInt = 3,
                         horizon: PositiveFloat = 14.0, points: PositiveInt = 281) -> MetaAttractorTimes:
    r"""How long the antipodal meta-attractor of random quadratic forms with forcing γ matters, from
    the exact law of a pair's overlap (no simulation): the time the pairs drawn to the antipode take
    to reach the forcing's scale w* = γ²(d − 1)/2, and the rate at which they leave it.

    Near the antipode, w = 1 + z follows $dw = (4w + 2\gamma^2(d-1))\,dt + \sqrt{16w^2 + 8\gamma^2 w}\,dB$:
    log w falls at the rate 4 until w ≈ w*, so the reach time is $	frac14\log(1/w^*) + O(1) =
    	frac12\log(1/\gamma) - 	frac14\log	frac{d-1}{2} + O(1)$; the held mass then leaves at a rate
    proportional to γ (the speed measure near the antipode, $\propto w^{-3/2}$, has mass ∝ 1/γ above w*).

    Parameters
    ----------
    gammas : sequence of float, optional
        The forcings γ, in (0, 0.1], decreasing (w* must stay above the chain's cut at 1 + z ≈ 1e-10).
    d : int, optional
        Token dimension, >= 2.
    horizon : float, optional
        The time window of the law (the reach times must fall within it).
    points : int, optional
        Equally spaced times on [0, horizon], >= 3.

    Returns
    -------
    MetaAttractorTimes
        Reach times, plateaus P(1 + z ≤ w*), escape rates, by γ.
    """
    g = np.asarray(gammas, float)
    if g.ndim != 1 or len(g) < 2 or np.any(~np.isfinite(g)) or np.any(g <= 0) or np.any(g > 0.1) \
            or np.any(np.diff(g) >= 0) or g.min() ** 2 * (d - 1) / 2 < 1e-9:
        raise ValueError("gammas: at least two decreasing values in (0, 0.1] with γ²(d − 1)/2 >= 1e-9")
    if d < 2 or points < 3:
        raise ValueError("d: must be >= 2; points: must be >= 3")
    times = np.linspace(0.0, horizon, points)
    reach, plateau, escape = [], [], []
    for gamma in g:
        pair = PairDiffusion(QuadraticField(float(gamma)).pair_kernel(d))
        w_star = forcing_scale(float(gamma), d)
        p = expectation(pair, lambda w, y: (y <= w_star).astype(float), times, z0=None, distances=True, levels=1)
        half = 0.5 * p.max()
        i = int(np.argmax(p >= half))
        if i == 0 or p.max() <= 0:
            raise ValueError(f"horizon: {horizon} does not resolve the reach time at γ = {gamma:g}")
        reach.append(times[i - 1] + (half - p[i - 1]) / (p[i] - p[i - 1]) * (times[i] - times[i - 1]))
        plateau.append(p.max())
        escape.append(-PairChain(pair).top_eigenvalues(False, False, 2)[1])
    return MetaAttractorTimes(d, g, np.array(reach), np.array(plateau), np.array(escape), float(horizon))


@dataclass(frozen=True)
class ContrastCheck:
    """E z_T ± SE for pairs from z0 under the common field (``common``) and independent fields
    (``independent``) of one kernel, beside the exact values ``common_exact`` (the pair diffusion)
    and ``independent_exact`` = z0 e^{−(d−1)κ(1)T}; ``lambda_1`` of the kernel (SPEC §5).

    Attributes
    ----------
    d : int
        Token dimension.
    T : float
        The horizon.
    common, independent : tuple of float
        (E z_T, SE) under one field and under independent fields.
    common_exact, independent_exact : float
        The exact values.
    lambda_1 : float
        The kernel's λ₁.
    pairs : int
        Simulated pairs.
    """

    d: int
    T: float
    common: tuple[float, float]
    independent: tuple[float, float]
    common_exact: float
    independent_exact: float
    lambda_1: float
    pairs: int = 0

    def rows(self, common: Optional[float] = None, independent: Optional[float] = None) -> list[Comparison]:
        """E z_T under the common field ``matches`` its exact value (alternative: the independent
        value) and under independent fields ``matches`` z₀ e^{−(d−1)κ(1)T} (alternative: the common
        value); ``common``, ``independent``: values to test in place of these.

        Parameters
        ----------
        common : float, optional
            A value to test in place of the common field's exact E z_T.
        independent : float, optional
            A value to test in place of z₀ e^{−(d−1)κ(1)T}.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        pc = self.common_exact if common is None else float(common)
        pi = self.independent_exact if independent is None else float(independent)
        where = f"d = {self.d}, T = {self.T:g}, λ₁ = {self.lambda_1:.3g}"
        return judge([
            Comparison.from_mean_se(f"E z_T, common field ({where})", pc, *self.common, n=self.pairs,
                                    alternative=self.independent_exact, note="exact: the pair diffusion of κ (SPEC §8)"),
            Comparison.from_mean_se(f"E z_T, independent fields ({where})", pi, *self.independent, n=self.pairs,
                                    alternative=self.common_exact, note="z₀ e^{−(d−1)κ(1)T}: no synchronisation"),
        ])


@validated
def independent_contrast(kernel: NoiseKernel, T: PositiveFloat = 4.0, steps: PositiveInt = 400,
                         pairs: PositiveInt = 4000, z0: Cosine = 0.5, seed: Seed = 0) -> ContrastCheck:
    """The overlap E z_T of two tokens driven by one field and by independent fields of ``kernel``.

    Parameters
    ----------
    kernel : NoiseKernel
        κ.
    T : float, optional
        The horizon.
    steps : int, optional
        Steps.
    pairs : int, optional
        Simulated pairs.
    z0 : float, optional
        The initial cosine.
    seed : int, optional
        The seed.

    Returns
    -------
    ContrastCheck
        Both overlaps and their exact values.
    """
    d = kernel.d
    X0 = pair_start(pairs, d, z0, seed)
    res = []
    for noise in (ExactField(kernel), IndependentField(kernel)):
        z = simulate_pairs(noise, X0, T, steps, [steps], seed + 1)["z"][:, 0]
        m, s = mean_and_se(z)
        res.append((float(m), float(s)))
    pair = PairDiffusion(kernel)
    exact = float(expectation(pair, lambda z: z, [T], z0=z0)[0])
    indep = z0 * math.exp(-(d - 1) * kernel.kappa1 * T)
    return ContrastCheck(d, float(T), res[0], res[1], exact, indep, float(pair.lambda_1), pairs)


# ----------------------------------------------------------------------------- homogenized transformers


def logistic(u0: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """The solution u0 e^τ/(1 − u0 + u0 e^τ) of u′ = u(1 − u): broadcast over u0 and τ.

    Parameters
    ----------
    u0 : numpy.ndarray
        Initial values.
    tau : numpy.ndarray
        Times (broadcast against u0).

    Returns
    -------
    numpy.ndarray
        u(τ).
    """
    u0, tau = np.asarray(u0, float), np.asarray(tau, float)
    e = np.exp(tau)
    return u0 * e / (1 - u0 + u0 * e)


@dataclass(frozen=True)
class OverlapCheck:
    """m(t) = |x̄|² of N tokens under [`HomogenizedAttention`][stochformer.model.homogenized.HomogenizedAttention]
    at β = 0: ``mean`` ± ``se`` over ``batch`` samples at ``times`` (t,), beside ``predicted``, the
    mean over samples of the logistic from each sample's m(0) on τ = σ_V²(d − 1)t, and ``band``, the
    rows' tolerance: half the spread between the logistic on σ_V²(d − 2)t and on σ_V² d t (the O(1/d)
    range of the exact drift, docs/neighbours.md) plus ``lag``, the delay of E m behind the logistic
    that the noise's own spread of m causes (`variance_lag`; O(t²/d), vanishing as d → ∞); ``m0``
    each sample's m(0) (batch,).

    Attributes
    ----------
    d, N : int
        Token dimension and tokens.
    sigma_V : float
        The value noise's scale.
    times : numpy.ndarray, shape (t,)
        The times.
    mean, se : numpy.ndarray, shape (t,)
        m(t) and its SE.
    predicted, band : numpy.ndarray, shape (t,)
        The logistic prediction and the rows' tolerance.
    batch : int
        Samples.
    m0 : numpy.ndarray, shape (batch,), optional
        Each sample's m(0).
    lag : numpy.ndarray, shape (t,), optional
        The delay of E m behind the logistic from the spread of m (`variance_lag`).
    """

    d: int
    N: int
    sigma_V: float
    times: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    predicted: np.ndarray
    band: np.ndarray
    batch: int
    m0: Optional[np.ndarray] = None
    lag: Optional[np.ndarray] = None

    def rows(self, predicted: Optional[np.ndarray] = None) -> list[Comparison]:
        """One ``matches`` row per time (``predicted``: a prediction to test in place of the logistic).

        Parameters
        ----------
        predicted : numpy.ndarray, optional
            A prediction per time in place of the logistic.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        p = self.predicted if predicted is None else np.asarray(predicted, float)
        return judge([Comparison.from_mean_se(f"m(t = {t:g})", float(pi), float(m), float(s), n=self.batch, tol=float(b))
                      for t, pi, m, s, b in zip(self.times, p, self.mean, self.se, self.band)])


def _mean_overlap(X: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"m": (X.mean(dim=1) ** 2).sum(-1)}


@validated
def mean_overlap(d: PositiveInt = 64, N: PositiveInt = 16, heads: PositiveInt = 2, sigma_V: Optional[PositiveFloat] = None,
                 T: PositiveFloat = 3.0, steps: PositiveInt = 150, points: PositiveInt = 3, batch: PositiveInt = 64,
                 seed: Seed = 0) -> OverlapCheck:
    """m(t) at β = 0 (module docstring) from uniform tokens, at ``points`` equally spaced times up to
    T (σ_V None: 1/√d, so τ ≈ t).

    Parameters
    ----------
    d : int, optional
        Token dimension.
    N : int, optional
        Tokens.
    heads : int, optional
        Heads.
    sigma_V : float, optional
        The value noise's scale (None: 1/√d).
    T : float, optional
        The horizon.
    steps : int, optional
        Steps.
    points : int, optional
        Times checked.
    batch : int, optional
        Samples.
    seed : int, optional
        The seed.

    Returns
    -------
    OverlapCheck
        Measured and predicted m(t).
    """
    sv = 1.0 / math.sqrt(d) if sigma_V is None else float(sigma_V)
    at = [round(steps * (k + 1) / points) for k in range(points)]
    times = np.array(at, float) * T / steps
    X0 = uniform(batch, N, d, seed=seed)
    m0 = _mean_overlap(X0)["m"].numpy()[:, None]
    out = solve(LimitSDE(noise=HomogenizedAttention(beta=0.0, heads=heads, sigma_V=sv)), X0, T=T, steps=steps,
                seed=seed + 1, save=SaveAt(at=at, stats=(), final=False, fn=_mean_overlap))
    m = out["m"].values
    mean, se = mean_and_se(m, axis=0)
    tau = sv * sv * (d - 1) * times
    curves = logistic(m0, tau)  # (batch, points): each sample's logistic
    pred = curves.mean(axis=0)
    band = 0.5 * np.abs(logistic(m0, sv * sv * d * times).mean(0) - logistic(m0, sv * sv * (d - 2) * times).mean(0))
    spread = np.clip(m.var(axis=0, ddof=1) - curves.var(axis=0, ddof=1), 0.0, None)
    grid = np.concatenate([[0.0], tau])
    lag = variance_lag(grid, logistic(np.full(1, m0.mean()), grid), np.concatenate([[0.0], spread]))[1:]
    return OverlapCheck(d, N, sv, times, np.asarray(mean), np.asarray(se), pred, band + lag, batch, m0[:, 0], lag)


def variance_lag(tau: np.ndarray, u: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """The delay e(τ_k) of E m behind the logistic u, at the times ``tau`` (k,: 0 first, increasing),
    caused by ``spread`` (k,), the variance of m across samples not due to their initial values
    (0 at τ = 0): since E[m(1 − m)] = E m(1 − E m) − Var m, linearising u′ = u(1 − u) about u gives
    e′ = (1 − 2u) e + Var m, so e(τ_k) = ∫₀^{τ_k} u′(τ_k)/u′(s) · Var m(s) ds (u′(τ)/u′(s) is the
    flow's derivative), here by the trapezoid rule over ``tau``. Returns (k,), e(0) = 0.

    Parameters
    ----------
    tau : numpy.ndarray, shape (k,)
        Times, 0 first, increasing.
    u : numpy.ndarray, shape (k,)
        The logistic at ``tau``, in (0, 1).
    spread : numpy.ndarray, shape (k,)
        Var m across samples not due to their initial values (0 at τ = 0).

    Returns
    -------
    numpy.ndarray, shape (k,)
        The delay e(τ_k), e(0) = 0.
    """
    s, uu, v = (np.asarray(a, float) for a in (tau, u, spread))
    du = uu * (1 - uu)
    out = [0.0]
    for k in range(1, len(s)):
        f = du[k] / du[: k + 1] * v[: k + 1]
        out.append(float(np.sum(0.5 * (f[1:] + f[:-1]) * np.diff(s[: k + 1]))))
    return np.array(out)


@dataclass(frozen=True)
class LargeBetaPairCheck:
    """A pair under [`HomogenizedAttention`][stochformer.model.homogenized.HomogenizedAttention] at large β
    from z0, at the time t = s/σ_V² (s on the scale of du = −u(1−u²)ds + √2(1−u²)dB): E z and E z² ±
    SE beside the exact law of the linear kernel κ(u) = σ_V² u (``exact_z``, ``exact_z2``).

    Attributes
    ----------
    d : int
        Token dimension.
    beta : float
        The attention's β.
    z0 : float
        The initial cosine.
    s : float
        The time on the diffusion's scale.
    moments : dict
        ``z`` and ``z2`` → (mean, SE).
    exact : dict
        ``z`` and ``z2`` → exact value.
    pairs : int
        Simulated pairs.
    """

    d: int
    beta: float
    z0: float
    s: float
    moments: dict[str, tuple[float, float]]
    exact: dict[str, float]
    pairs: int

    def rows(self, predicted: Optional[dict[str, float]] = None) -> list[Comparison]:
        """``matches`` rows for E z and E z² (``predicted``: values to test in place of the exact law).

        Parameters
        ----------
        predicted : dict, optional
            Values to test in place of the exact law.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        p = self.exact if predicted is None else predicted
        return judge([Comparison.from_mean_se(f"E {k}(s = {self.s:g})", float(p[k]), m, se, n=self.pairs)
                      for k, (m, se) in self.moments.items()])


def linear_pair_moments(d: int, z0: float, s: float) -> dict[str, float]:
    """E z and E z² at time s of du = −u(1−u²)ds + √2(1−u²)dB (the pair diffusion of the linear
    kernel κ(u) = u/d at time s·d: [`expectation`][stochformer.theory.evolution.expectation]).

    Parameters
    ----------
    d : int
        Token dimension.
    z0 : float
        The initial cosine.
    s : float
        The time.

    Returns
    -------
    dict
        ``z`` and ``z2``.
    """
    pair = PairDiffusion(NoiseKernel("linear", d))
    vals = [float(expectation(pair, f, [s * d], z0=z0)[0]) for f in (lambda z: z, lambda z: z * z)]
    return {"z": vals[0], "z2": vals[1]}


@validated
def large_beta_pair(d: PositiveInt = 64, beta: PositiveFloat = 200.0, z0: Cosine = -0.5, s: PositiveFloat = 0.1,
                    dt: PositiveFloat = 0.05, heads: PositiveInt = 1, pairs: PositiveInt = 4000,
                    seed: Seed = 0) -> LargeBetaPairCheck:
    """E z and E z² of pairs from z0 at the time t = s·d, σ_V² = 1/d, σ_A = 1/√d (β_eff = β), step dt
    (α = dt σ_V² (d − 1)/H per head).

    Parameters
    ----------
    d : int, optional
        Token dimension.
    beta : float, optional
        The attention's β.
    z0 : float, optional
        The initial cosine.
    s : float, optional
        The time on the diffusion's scale.
    dt : float, optional
        The step.
    heads : int, optional
        Heads.
    pairs : int, optional
        Simulated pairs.
    seed : int, optional
        The seed.

    Returns
    -------
    LargeBetaPairCheck
        Measured and exact moments.
    """
    T = s * d
    steps = max(1, round(T / dt))
    noise = HomogenizedAttention(beta=beta, heads=heads, sigma_V=1.0 / math.sqrt(d))
    z = simulate_pairs(noise, pair_start(pairs, d, z0, seed), T, steps, [steps], seed + 1)["z"][:, 0]
    moments = {}
    for k, v in (("z", z), ("z2", z * z)):
        m, se = mean_and_se(v)
        moments[k] = (float(m), float(se))
    return LargeBetaPairCheck(d, float(beta), float(z0), float(s), moments, linear_pair_moments(d, z0, s), pairs)


@dataclass(frozen=True)
class AlignedCheck:
    """Pairs under [`HomogenizedLayers`][stochformer.model.homogenized.HomogenizedLayers] at large β
    from z0, run to the slow time s (t = s·d, σ_V² = 1/d) by the layers' Gram chain
    ([`gram_step`][stochformer.model.homogenized.HomogenizedLayers.gram_step], exact in law at every
    d): ``above`` of ``pairs`` have z_s > 0; ``exact`` is P(z_s > 0) under the linear kernel's pair
    diffusion du = −u(1−u²)ds + √2(1−u²)dB, ``limit`` its long-time value, the probability of ending
    aligned, arcsin(z0)/π + ½ (the scale function); ``undecided`` the fraction with |z_s| < 0.9.

    Attributes
    ----------
    d : int
        Token dimension.
    beta : float
        The attention's β (β_eff = β: σ_A = 1/√d).
    eta : float
        The residual step η (layers: s·d/η).
    z0 : float
        The initial cosine.
    s : float
        The slow time.
    above, pairs : int
        Pairs with z_s > 0, and all pairs.
    undecided : float
        The fraction with |z_s| < 0.9.
    exact : float
        P(z_s > 0) under the linear kernel.
    limit : float
        P(aligned | z0) = arcsin(z0)/π + ½.
    """

    d: int
    beta: float
    eta: float
    z0: float
    s: float
    above: int
    pairs: int
    undecided: float
    exact: float
    limit: float

    def rows(self, predicted: Optional[float] = None) -> list[Comparison]:
        """One ``matches`` row: P(z_s > 0) with its Wilson interval against the linear kernel's exact
        P(z_s > 0), judged against the alternative prediction + `ALIGNED_SHIFT` (the shift measured at
        d = 16, docs/neighbours.md: tokens that partly attend to each other near the diagonal).

        Parameters
        ----------
        predicted : float, optional
            A probability to test in place of the linear kernel's.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        p = self.exact if predicted is None else float(predicted)
        return judge([Comparison.from_fraction(
            f"P(z_s > 0), s = {self.s:g}, z₀ = {self.z0:g}, d = {self.d} (layers, η = {self.eta:g})", p, self.above,
            self.pairs, alternative=min(p + ALIGNED_SHIFT, 1.0),
            note=f"linear kernel's law at s; it ends aligned with P = arcsin(z₀)/π + ½ = {self.limit:.4f}; "
                 f"{self.undecided:.3f} of the pairs still have |z_s| < 0.9")])


#: the shift of P(z_s > 0) from the linear kernel's law that the finite-d attention zone caused at
#: d = 16 (0.62 against ½ from z₀ = 0): the alternative of the aligned-fraction row
ALIGNED_SHIFT = 0.12


def linear_above(z0: float, s: float) -> float:
    """P(z_s > 0) for the linear kernel's pair diffusion from z0 (its exact law,
    [`law`][stochformer.theory.evolution.law]). The pair diffusion of κ(u) = c·u is
    dz = −c z(1−z²)dt + √(2c)(1−z²)dB in every d, so κ(u) = u/d at t = s·d is κ(u) = u at t = s,
    computed in d = 3 (the chain's cost grows with d).

    Parameters
    ----------
    z0 : float
        The initial cosine.
    s : float
        The slow time.

    Returns
    -------
    float
        The probability.
    """
    return 1.0 - law(PairDiffusion(NoiseKernel("linear", 3, scale=math.sqrt(3.0))), z0, s).cdf(0.0)


@validated
def aligned_fraction(d: PositiveInt = 1024, beta: PositiveFloat = 200.0, z0: Cosine = 0.5, s: PositiveFloat = 4.0,
                     eta: PositiveFloat = 0.2, heads: PositiveInt = 1, pairs: PositiveInt = 2000,
                     seed: Seed = 0, progress: Optional[ProgressMeter] = None) -> AlignedCheck:
    """The fraction of pairs with z_s > 0 under the discrete homogenized layers at large β (σ_V² = 1/d,
    σ_A = 1/√d, β_eff = β), run on their Gram chain: s·d/η layers at O(1) cost per pair and layer
    whatever d, so that d can be large (>= 10³), where the attention zone near the diagonal
    (1 − z ≲ 18/d) is thin. Measured: the fraction still exceeds the linear kernel's law over long
    times, by about 0.047 from z₀ = 0.5 at d = 1024 and 4096 (docs/neighbours.md).

    Parameters
    ----------
    d : int, optional
        Token dimension, >= 2.
    beta : float, optional
        The attention's β.
    z0 : float, optional
        The initial cosine.
    s : float, optional
        The slow time (t = s·d).
    eta : float, optional
        The residual step η, in (0, 1].
    heads : int, optional
        Heads.
    pairs : int, optional
        Simulated pairs.
    seed : int, optional
        The seed.
    progress : ProgressMeter, optional
        Shows the layers done.

    Returns
    -------
    AlignedCheck
        The count beside the linear kernel's law.
    """
    if d < 2:
        raise ValueError(f"d: must be >= 2 for a pair (got {d})")
    if not eta <= 1:
        raise ValueError(f"eta: must be in (0, 1] (got {eta})")
    layers = max(1, round(s * d / eta))
    model = HomogenizedLayers(HomogenizedAttention(beta=beta, heads=heads, sigma_V=1.0 / math.sqrt(d)))
    gen = torch.Generator().manual_seed(seed)
    G = torch.eye(2, dtype=torch.float64).repeat(pairs, 1, 1)
    G[:, 0, 1] = G[:, 1, 0] = float(z0)
    steps = range(layers) if progress is None else progress.track(range(layers))
    for _ in steps:
        G = model.gram_step(G, float(eta), d, gen)
    z = G[:, 0, 1].numpy()
    return AlignedCheck(d, float(beta), float(eta), float(z0), float(s), int((z > 0).sum()), pairs,
                        float((np.abs(z) < 0.9).mean()), linear_above(float(z0), float(s)),
                        math.asin(z0) / math.pi + 0.5)


#: the weak-error exponent in η of the homogenized layers at a fixed time, as the issue states the
#: error η·max(η, α) (α ∝ η at fixed H, σ_V, d), and that of a first-order weak error (the alternative)
WEAK_EXPONENT, FIRST_ORDER = 2.0, 1.0


@dataclass(frozen=True)
class WeakErrorCheck:
    """E z² of a pair under [`HomogenizedLayers`][stochformer.model.homogenized.HomogenizedLayers]
    (the discrete layers, one per η) at the slow time s (t = s·d), from z0, for each η of ``etas``
    (k,): ``mean`` ± ``se`` (k,) over ``pairs`` independent pairs per η (``mean_z``, ``se_z``: E z),
    ``exact`` the limit's value (the linear kernel), and ``fit`` of E z²(η) ≈ E₀ + C η^p (E₀ free:
    it absorbs the finite-d bias of the limit itself; docs/neighbours.md).

    Attributes
    ----------
    d : int
        Token dimension.
    beta : float
        The attention's β.
    z0 : float
        The initial cosine.
    s : float
        The slow time (t = s·d).
    etas : numpy.ndarray, shape (k,)
        The residual steps η, increasing.
    mean, se : numpy.ndarray, shape (k,)
        E z² per η and its SE.
    mean_z, se_z : numpy.ndarray, shape (k,)
        E z per η and its SE.
    exact : float
        The limit's E z² (the linear kernel).
    fit : OffsetPowerFit
        The fit of E z²(η) ≈ E₀ + C η^p.
    pairs : int
        Simulated pairs per η.
    """

    d: int
    beta: float
    z0: float
    s: float
    etas: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    mean_z: np.ndarray
    se_z: np.ndarray
    exact: float
    fit: OffsetPowerFit
    pairs: int

    @property
    def error(self) -> np.ndarray:
        """E z²(η) − the linear kernel's value, (k,)."""
        return self.mean - self.exact

    def rows(self, predicted: Optional[float] = None) -> list[Comparison]:
        """One ``matches`` row: the fitted exponent p (profile-likelihood 95% interval) against
        `WEAK_EXPONENT` = 2, judged against the first-order exponent 1 (``predicted``: an exponent to
        test in place of 2; its alternative is then 2).

        Parameters
        ----------
        predicted : float, optional
            An exponent to test in place of `WEAK_EXPONENT`.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        p = WEAK_EXPONENT if predicted is None else float(predicted)
        alt = WEAK_EXPONENT if p == FIRST_ORDER else FIRST_ORDER
        etas = ", ".join(f"{e:g}" for e in self.etas)
        return judge([Comparison(f"weak error exponent of E z²(s = {self.s:g}) in η (layers, d = {self.d}, η = {etas})",
                                 p, self.fit.exponent, self.fit.ci, alternative=alt,
                                 note=f"fit E₀ + C η^p, {self.pairs} pairs per η; η·max(η, α) with α ∝ η: 2; "
                                      "first-order weak error: 1")])


@validated
def weak_error(d: PositiveInt = 64, beta: PositiveFloat = 200.0, z0: Cosine = -0.5, s: PositiveFloat = 0.08,
               etas: Sequence[float] = (0.04, 0.08, 0.16, 0.32, 0.64), heads: PositiveInt = 1,
               pairs: PositiveInt = 4000, seed: Seed = 0) -> WeakErrorCheck:
    """The weak error of the discrete homogenized layers against their limit, over the residual
    steps ``etas`` (at least 3 distinct values, each in (0, 1] and a whole number of layers in
    t = s·d): E z and E z² of pairs from z0 after s·d/η layers (σ_V² = 1/d, σ_A = 1/√d, β_eff = β,
    α = η σ_V²(d − 1)/H per head), each η from its own seed (independent means), and the fit of
    E z²(η) = E₀ + C η^p ([`fit_power_law_offset`][stochformer.measure.stats.fit_power_law_offset]).

    Parameters
    ----------
    d : int, optional
        Token dimension.
    beta : float, optional
        The attention's β.
    z0 : float, optional
        The initial cosine.
    s : float, optional
        The slow time (t = s·d).
    etas : sequence of float, optional
        The residual steps η: at least 3 distinct values, each in (0, 1] and a whole number of
        layers in t = s·d.
    heads : int, optional
        Heads.
    pairs : int, optional
        Simulated pairs per η.
    seed : int, optional
        The seed.

    Returns
    -------
    WeakErrorCheck
        E z and E z² per η, the limit's value and the fit.
    """
    T = s * d
    grid = np.sort(np.asarray(etas, float))
    layers = np.round(T / grid)
    if len(np.unique(grid)) < 3 or not np.all((grid > 0) & (grid <= 1)) or np.any(np.abs(layers * grid - T) > 1e-9 * T):
        raise ValueError(f"etas: at least 3 distinct values in (0, 1], each a whole number of layers in t = s·d = {T:g} "
                         f"(got {list(etas)})")
    noise = HomogenizedAttention(beta=beta, heads=heads, sigma_V=1.0 / math.sqrt(d))
    X0 = pair_start(pairs, d, z0, seed)
    stats = []
    for eta, n, child in zip(grid, layers.astype(int), child_seeds(seed, len(grid))):
        z = _pair_angles(HomogenizedLayers(noise), X0, n * float(eta), int(n), [int(n)], child)["z"][:, 0]
        stats.append([*mean_and_se(z * z), *mean_and_se(z)])
    m2, se2, m1, se1 = (np.array(c, float) for c in zip(*stats))
    exact = linear_pair_moments(d, z0, s)["z2"]
    return WeakErrorCheck(d, float(beta), float(z0), float(s), grid, m2, se2, m1, se1, exact,
                          fit_power_law_offset(grid, m2, se2), pairs)


# ----------------------------------------------------------------------------- value-matrix noise


#: bound on the simulated scheme's step bias of P(z_T < 0) under value noise, as a multiple of √Δt: the
#: bias measured against the exact law at T shrinks like Δt^0.6 and its largest |bias|/√Δt was 0.062
#: (docs/neighbours.md)
VALUE_STEP_BIAS = 0.08


@dataclass(frozen=True)
class AntipodalCheck:
    """Pairs from z0 under [`ValueNoise`][stochformer.model.value_noise.ValueNoise] at T: ``antipodal``
    of ``pairs`` ended with z_T < 0; ``exact`` P(Z_T < 0) of the pair diffusion at T (the forward
    equation, [`law`][stochformer.theory.evolution.law] of
    [`ValuePair`][stochformer.theory.value_noise.ValuePair]); ``predicted`` its limit T → ∞,
    P(antipodal | z0); ``undecided`` the fraction with |z_T| < 1 − ``eps``; ``dt`` the step.

    Attributes
    ----------
    d : int
        Token dimension.
    beta : float
        The attention's β.
    z0 : float
        The initial cosine.
    T : float
        The horizon.
    antipodal, pairs : int
        Pairs ended with z_T < 0, and all pairs.
    undecided : float
        The fraction not yet near an end.
    predicted : float
        P(antipodal | z0), the limit T → ∞.
    exact : float
        P(Z_T < 0 | z0) at T.
    dt : float
        The simulation's step.
    """

    d: int
    beta: float
    z0: float
    T: float
    antipodal: int
    pairs: int
    undecided: float
    predicted: float
    exact: float
    dt: float

    def rows(self, predicted: Optional[float] = None) -> list[Comparison]:
        """One ``matches`` row: P(z_T < 0) with its Wilson interval against the exact law at T, within the
        step bias ``VALUE_STEP_BIAS``·√Δt, judged against the linear kernel's arccos(z₀)/π.

        Parameters
        ----------
        predicted : float, optional
            A probability to test in place of the exact law's.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        p = self.exact if predicted is None else float(predicted)
        tol = VALUE_STEP_BIAS * math.sqrt(self.dt)
        return judge([Comparison.from_fraction(
            f"P(z_T < 0), d = {self.d}, β = {self.beta:g}", p, self.antipodal, self.pairs, tol=tol,
            alternative=math.acos(self.z0) / math.pi,
            note=f"exact law at T = {self.T:g} (forward equation of the pair diffusion), whose limit T → ∞ is "
                 f"P(antipodal) = {self.predicted:.4g} (scale function); tol = {VALUE_STEP_BIAS:g}√Δt = {tol:.2g} "
                 "(the scheme's step bias); alternative arccos(z₀)/π (the linear kernel: large β, or d = 2)")])


@validated
def value_antipodal(d: PositiveInt = 3, beta: PositiveFloat = 1.0, z0: Cosine = 0.0, T: PositiveFloat = 10.0,
                    steps: PositiveInt = 400, pairs: PositiveInt = 2000, eps: PositiveFloat = 0.01,
                    seed: Seed = 0) -> AntipodalCheck:
    """The fraction of pairs from z0 with z_T < 0 under value-matrix noise at β in dimension d, beside the
    exact law at T and its limit P(antipodal).

    Parameters
    ----------
    d : int, optional
        Token dimension.
    beta : float, optional
        The attention's β.
    z0 : float, optional
        The initial cosine.
    T : float, optional
        The horizon.
    steps : int, optional
        Steps.
    pairs : int, optional
        Simulated pairs.
    eps : float, optional
        Pairs with |z_T| < 1 − eps are undecided.
    seed : int, optional
        The seed.

    Returns
    -------
    AntipodalCheck
        The counts, the exact law at T and its limit.
    """
    z = simulate_pairs(ValueNoise(beta), pair_start(pairs, d, z0, seed), T, steps, [steps], seed + 1)["z"][:, 0]
    pair = ValuePair(beta, d)
    return AntipodalCheck(d, float(beta), float(z0), float(T), int((z < 0).sum()), pairs,
                          float((np.abs(z) < 1 - eps).mean()), float(pair.p_antipodal(z0)),
                          law(pair, float(z0), float(T)).cdf(0.0), float(T) / steps)


# ----------------------------------------------------------------------------- all checks at once (report)


class NeighboursConfig(StrictConfig):
    """Sizes of [`run_neighbours`][stochformer.experiments.neighbours.run_neighbours]: the quadratic
    forms (d, forcing γ, pairs, steps on t ≤ 2), independent against common noise (ReLU κ of noise
    scale 2 on the circle and on S², pairs from z₀ = 0.5 to T = 4), the homogenized transformer at
    β = 0 (d, N, samples) and at large β (pairs, step), and value-matrix noise at the (d, β) points
    across the threshold (d − 2) sech 2β = 1 (pairs from z₀ = 0, T = 10), with the (β, d) grid of
    its figure."""

    quadratic_d: int = Field(3, ge=2, le=64, description="dimension of the quadratic-form runs, in [2, 64]")
    gamma: float = Field(1.0, gt=0.0, le=10.0, description="forcing γ of the forced quadratic-form run, in (0, 10]")
    attractor_pairs: int = Field(2000, ge=3, description="pairs of each quadratic-form run (>= 3)")
    attractor_steps: int = Field(400, ge=4, description="steps on t in [0, 2] of the quadratic-form runs (>= 4)")
    contrast_pairs: int = Field(1000, ge=3, description="pairs of each common/independent run (>= 3)")
    contrast_steps: int = Field(400, ge=4, description="steps on t in [0, 4] of the common/independent runs (>= 4)")
    overlap_d: int = Field(64, ge=3, le=1024, description="dimension of the β = 0 homogenized run, in [3, 1024]")
    overlap_N: int = Field(16, ge=2, le=1024, description="tokens of the β = 0 homogenized run, in [2, 1024]")
    overlap_batch: int = Field(64, ge=3, description="samples of the β = 0 homogenized run (>= 3)")
    overlap_steps: int = Field(400, ge=6, description="steps on t in [0, 3] of the β = 0 homogenized run (>= 6)")
    large_beta_pairs: int = Field(600, ge=3, description="pairs of the large-β homogenized run (>= 3)")
    large_beta_dt: float = Field(0.025, gt=0.0, le=0.1, description="step of the large-β homogenized run, in (0, 0.1]")
    aligned_pairs: int = Field(2000, ge=0, description="pairs of the long large-β run of the homogenized layers on "
                                                        "their Gram chain (>= 3; 0: not run, its row not measured)")
    aligned_d: int = Field(1024, ge=2, le=1_000_000, description="dimension of that run, in [2, 10^6]")
    aligned_eta: float = Field(0.4, gt=0.0, le=1.0, description="residual step η of that run, in (0, 1]")
    value_points: list[list[float]] = Field([[3, 1.0], [4, 2.0], [4, 0.3]], min_length=1,
                                            description="(d, β) of the value-noise runs: d an integer >= 2, β > 0")
    value_pairs: int = Field(2000, ge=3, description="pairs of each value-noise run (>= 3)")
    value_steps: int = Field(400, ge=4, description="steps on t in [0, 10] of the value-noise runs (>= 4)")
    value_betas: list[float] = Field([0.25 * k for k in range(1, 13)], min_length=2,
                                     description="β of the value-noise figure's grid (each > 0)")
    value_dims: list[int] = Field(list(range(3, 13)), min_length=2, description="d of the value-noise figure's grid (each >= 2)")
    weak_pairs: int = Field(4000, ge=0, description="pairs per η of the weak-error sweep of the homogenized layers "
                                                     "(>= 3; 0: not run, its row not measured)")
    weak_etas: list[float] = Field([0.04, 0.08, 0.16, 0.32, 0.64], min_length=4,
                                   description="residual steps η of the weak-error sweep: at least 4, each in (0, 1] "
                                               "and a whole number of layers in t = 5.12")
    seed: int = Field(0, ge=0, le=2**32 - 1)

    @field_validator("value_points")
    @classmethod
    def _points(cls, v: list[list[float]]) -> list[list[float]]:
        for p in v:
            if len(p) != 2 or p[0] != int(p[0]) or p[0] < 2 or not p[1] > 0:
                raise ValueError(f"each point is [d, beta] with d an integer >= 2 and beta > 0 (got {p})")
        return v

    @field_validator("value_betas")
    @classmethod
    def _betas(cls, v: list[float]) -> list[float]:
        if not all(b > 0 for b in v):
            raise ValueError(f"every beta must be > 0 (got {v})")
        return v

    @field_validator("weak_pairs", "aligned_pairs")
    @classmethod
    def _pairs_or_none(cls, v: int, info: Any) -> int:
        if 0 < v < 3:
            raise ValueError(f"{info.field_name} must be 0 (not run) or >= 3 (got {v})")
        return v

    @field_validator("weak_etas")
    @classmethod
    def _weak_etas(cls, v: list[float]) -> list[float]:
        T = LARGE_BETA_S * LARGE_BETA_D
        if len(set(v)) < 4 or not all(0 < e <= 1 and abs(round(T / e) * e - T) <= 1e-9 * T for e in v):
            raise ValueError(f"weak_etas must hold at least 4 distinct values in (0, 1], each a whole number of "
                             f"layers in t = {T:g} (got {v})")
        return v

    @field_validator("value_dims")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if not all(d >= 2 for d in v):
            raise ValueError(f"every d must be >= 2 (got {v})")
        return v


#: the horizons of the report's runs: quadratic forms, common/independent, homogenized β = 0, value noise
ATTRACTOR_T, CONTRAST_T, OVERLAP_T, VALUE_T = 2.0, 4.0, 3.0, 10.0
#: the large-β homogenized run: d, β_eff, z₀ and the slow time s (t = s·d)
LARGE_BETA_D, LARGE_BETA_BETA, LARGE_BETA_Z0, LARGE_BETA_S = 64, 200.0, -0.5, 0.08
#: the long large-β run of the layers (Gram chain): z₀ and the slow time s, where 6-12% of the pairs are undecided
ALIGNED_Z0, ALIGNED_S = 0.5, 4.0
#: the times (points) kept on each curve of the report's runs
POINTS = 4


@dataclass(frozen=True)
class NeighboursResult:
    """Every check of [`run_neighbours`][stochformer.experiments.neighbours.run_neighbours] and the exact
    curves of its figures (``curves``: plain lists), with the run's ``provenance``.

    Attributes
    ----------
    unforced, forced : AttractorCheck
        Random quadratic forms without and with forcing.
    contrast : list of ContrastCheck
        Common against independent noise, one per d.
    overlap : OverlapCheck
        Homogenized attention at β = 0.
    large_beta : LargeBetaPairCheck
        Homogenized attention at large β.
    value : list of AntipodalCheck
        Value-matrix noise, one per (d, β) point.
    weak : WeakErrorCheck or None
        The weak-error sweep of the homogenized layers (None: not run).
    aligned : AlignedCheck or None
        The long large-β run of the layers at large d (None: not run).
    curves : dict
        The exact curves of the figures: ``unforced``, ``forced``, ``logistic``, ``linear``,
        ``aligned`` and ``value``.
    provenance : dict
        Versions and device.
    """

    unforced: AttractorCheck
    forced: AttractorCheck
    contrast: list[ContrastCheck]
    overlap: OverlapCheck
    large_beta: LargeBetaPairCheck
    value: list[AntipodalCheck]
    weak: Optional[WeakErrorCheck]
    aligned: Optional[AlignedCheck]
    curves: dict
    provenance: dict

    def to_dict(self) -> dict:
        """Every number, JSON-ready (arrays as lists).

        Returns
        -------
        dict
            Each check and ``curves`` as plain values (without ``provenance``).
        """
        def plain(obj: Any) -> Any:
            if isinstance(obj, np.ndarray):
                return obj.tolist()
            if isinstance(obj, (np.floating, np.integer)):
                return obj.item()
            if isinstance(obj, dict):
                return {k: plain(v) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return [plain(v) for v in obj]
            if hasattr(obj, "__dataclass_fields__"):
                return {k: plain(getattr(obj, k)) for k in obj.__dataclass_fields__}
            return obj

        return plain({"unforced": self.unforced, "forced": self.forced, "contrast": self.contrast,
                      "overlap": self.overlap, "large_beta": self.large_beta, "value": self.value,
                      "weak": self.weak, "aligned": self.aligned, "curves": self.curves})

    def rows(self) -> list[Comparison]:
        """Every check's rows (their own predictions), judged as one family.

        Returns
        -------
        list of Comparison
            The rows, judged by the report's rules.
        """
        rows = self.unforced.rows() + self.forced.rows()
        for c in self.contrast:
            rows += c.rows()
        rows += self.overlap.rows() + self.large_beta.rows()
        for v in self.value:
            rows += v.rows()
        rows += self.weak.rows() if self.weak is not None else [not_run_weak_error()]
        rows += self.aligned.rows() if self.aligned is not None else [Comparison(
            "P(z_s > 0) of the homogenized layers at large d", linear_above(ALIGNED_Z0, ALIGNED_S),
            note="not run at this size (the long run costs tens of seconds)")]
        return judge(rows)


def not_run_weak_error() -> Comparison:
    """The weak-error row of a run without the sweep (``weak_pairs`` = 0): not measured.

    Returns
    -------
    Comparison
        The row, `WEAK_EXPONENT` against `FIRST_ORDER`, without a measurement.
    """
    return Comparison("weak error exponent of E z² in η (homogenized layers)", WEAK_EXPONENT, alternative=FIRST_ORDER,
                      note="not run at this size (the sweep costs tens of seconds)")


def _attractor_curves(d: int, gamma: float, z0: float, times: np.ndarray) -> dict:
    pair = PairDiffusion(QuadraticField(gamma).pair_kernel(d))
    exact = expectation(pair, angle if gamma > 0 else antipodal_angle, times, z0=z0, distances=True, levels=1)
    bound = forced_bound(times, gamma, d) if gamma > 0 else unforced_bound(times)
    return {"t": times, "exact": exact, "bound": bound}


def run_neighbours(cfg: NeighboursConfig) -> NeighboursResult:
    """Every check of this module at the sizes of ``cfg`` (seeds: independent children of
    ``cfg.seed``), with the exact curves the figures draw: E dist on a grid of t, the logistic from
    each sample's m(0), E z and E z² of the linear kernel over s, P(aligned | u₀) by the scale
    function beside arcsin(u₀)/π + ½, and P(antipodal | z₀ = 0) of value noise over the (β, d) grid.

    Parameters
    ----------
    cfg : NeighboursConfig
        The sizes and the seed.

    Returns
    -------
    NeighboursResult
        Every check, the figures' exact curves and the provenance.
    """
    seeds = iter(child_seeds(cfg.seed, 8 + len(cfg.value_points)))
    d = cfg.quadratic_d
    unforced = attractor_distance(d=d, gamma=0.0, T=ATTRACTOR_T, steps=cfg.attractor_steps, points=POINTS,
                                  pairs=cfg.attractor_pairs, z0=0.0, seed=next(seeds))
    forced = attractor_distance(d=d, gamma=cfg.gamma, T=ATTRACTOR_T, steps=cfg.attractor_steps, points=POINTS,
                                pairs=cfg.attractor_pairs, z0=-0.99, seed=next(seeds))
    contrast = [independent_contrast(NoiseKernel("relu", k, scale=2.0), T=CONTRAST_T, steps=cfg.contrast_steps,
                                     pairs=cfg.contrast_pairs, z0=0.5, seed=next(seeds)) for k in (2, 3)]
    overlap = mean_overlap(d=cfg.overlap_d, N=cfg.overlap_N, heads=2, T=OVERLAP_T, steps=cfg.overlap_steps,
                           points=POINTS, batch=cfg.overlap_batch, seed=next(seeds))
    large = large_beta_pair(d=LARGE_BETA_D, beta=LARGE_BETA_BETA, z0=LARGE_BETA_Z0, s=LARGE_BETA_S, dt=cfg.large_beta_dt,
                            pairs=cfg.large_beta_pairs, seed=next(seeds))
    value = [value_antipodal(d=int(k), beta=float(b), z0=0.0, T=VALUE_T, steps=cfg.value_steps, pairs=cfg.value_pairs,
                             seed=next(seeds)) for k, b in cfg.value_points]
    weak = None if cfg.weak_pairs == 0 else weak_error(
        d=LARGE_BETA_D, beta=LARGE_BETA_BETA, z0=LARGE_BETA_Z0, s=LARGE_BETA_S, etas=cfg.weak_etas, pairs=cfg.weak_pairs,
        seed=next(seeds))
    aligned = None if cfg.aligned_pairs == 0 else aligned_fraction(
        d=cfg.aligned_d, beta=LARGE_BETA_BETA, z0=ALIGNED_Z0, s=ALIGNED_S, eta=cfg.aligned_eta, pairs=cfg.aligned_pairs,
        seed=next(seeds))

    fine = np.linspace(ATTRACTOR_T / 40, ATTRACTOR_T, 40)
    tau = np.linspace(0.0, OVERLAP_T, 61)
    rate = overlap.sigma_V**2 * (overlap.d - 1)
    m0 = overlap.m0 if overlap.m0 is not None else np.full(1, 1.0 / overlap.N)
    s = np.linspace(0.0, 1.25 * large.s, 26)[1:]
    linear = PairDiffusion(NoiseKernel("linear", large.d))
    u0 = np.linspace(-0.95, 0.95, 39)
    curves = {
        "unforced": _attractor_curves(d, 0.0, 0.0, fine),
        "forced": _attractor_curves(d, cfg.gamma, -0.99, fine),
        "logistic": {"t": tau, "m": logistic(m0[:, None], rate * tau).mean(0)},
        "linear": {"s": s, "z": expectation(linear, lambda z: z, s * large.d, z0=large.z0, levels=1),
                   "z2": expectation(linear, lambda z: z * z, s * large.d, z0=large.z0, levels=1)},
        "aligned": {"u0": u0, "scale_function": linear.p_diagonal(u0), "arcsin": np.arcsin(u0) / np.pi + 0.5},
        "value": {"beta": list(cfg.value_betas), "d": list(cfg.value_dims),
                  "p": [[ValuePair(float(b), int(k)).p_antipodal(0.0) for b in cfg.value_betas] for k in cfg.value_dims],
                  "beta_c": [critical_beta(int(k)) for k in cfg.value_dims]},
    }
    return NeighboursResult(unforced, forced, contrast, overlap, large, value, weak, aligned, curves, provenance("cpu"))
