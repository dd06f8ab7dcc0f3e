r"""Two tokens under value-matrix noise ([`ValueNoise`][stochformer.model.value_noise.ValueNoise];
docs/neighbours.md): the overlap z = ⟨x₁, x₂⟩ is the diffusion

$$
dz = (1-z^2)\big[t(z)\,(d-2) - r(z)\,z\big]\,dt + \sqrt{2\,r(z)}\,(1-z^2)\,dB,
\qquad r = p^2 + q^2,\; t = 2pq,\; q = \frac{e^{\beta z}}{e^\beta + e^{\beta z}} = 1 - p
$$

(SPEC §8's b and s with κ(1) → Γ₁₁ = |a₁|² = r + tz and κ(z) → Γ₁₂ = ⟨a₁, a₂⟩ = t + rz). In
x = atanh z its scale density is, with ρ = t/r,

$$
S'(z)\,\frac{dz}{dx} = e^{F(x)}, \qquad F(x) = -\log\cosh x - (d-2)\int_0^x \rho(\tanh x')\,dx',
$$

so F has slope −(d − 1) as x → ∞ (the diagonal always attracts) and 1 − (d − 2) sech 2β as
x → −∞ (ρ(−1) = sech 2β): the antipode is reached with positive probability iff
(d − 2) sech 2β < 1, i.e. for d = 2 always, for d ≥ 3 iff cosh 2β > d − 2
(β > β_c(d) = ½ arccosh(d − 2)); this is also where its Lyapunov exponent
(d − 2) sech²β − (1 + tanh²β) is negative. P(antipodal | z₀) = ∫_{x₀}^∞ e^F / ∫ e^F, computed on
the log-space panels of `theory.quadrature` with exact exponential tails.
"""

from __future__ import annotations

import math
from typing import Annotated, Union

import numpy as np

from ..core.validation import Int, NonNegativeFloat, Real, validated
from .pair import ArrayLike, End, EndKind, atanh, check_cosines, log_distances
from .quadrature import NODES, SUB_NODES, Panels

#: the largest change of F over one panel (the panels' width is at most this over the slope d)
RESOLUTION = 4.0


def _sech(u: float) -> float:
    """sech u = 2e^{−|u|}/(1 + e^{−2|u|}) (no overflow)."""
    e = math.exp(-abs(u))
    return 2 * e / (1 + e * e)


def antipode_reachable(beta: float, d: int) -> bool:
    """Whether two tokens end antipodal with positive probability: (d − 2) sech 2β < 1.

    Parameters
    ----------
    beta : float
        The attention's β, >= 0.
    d : int
        Token dimension, >= 2.

    Returns
    -------
    bool
        True where the antipode is reachable.
    """
    return (d - 2) * _sech(2.0 * beta) < 1.0


def critical_beta(d: int) -> float:
    """β_c(d) = ½ arccosh(d − 2) for d >= 3: the antipode is reachable iff β > β_c (d = 2: 0, reachable
    at every β >= 0).

    Parameters
    ----------
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        β_c(d).
    """
    if d < 2:
        raise ValueError(f"d: must be >= 2 (got {d})")
    return 0.5 * math.acosh(d - 2) if d >= 3 else 0.0


def antipode_exponent(beta: float, d: int) -> float:
    """The drift of log(1 + z) at the antipode, (d − 2) sech²β − (1 + tanh²β) (< 0: attracting).

    Parameters
    ----------
    beta : float
        The attention's β, >= 0.
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        The exponent.
    """
    return (d - 2) * _sech(beta) ** 2 - (1.0 + math.tanh(beta) ** 2)


@validated
class ValuePair:
    r"""The pair diffusion of value-matrix noise (module docstring) at inverse temperature β in
    dimension d: its scale function in x = atanh z and the probability of ending antipodal.

    Parameters
    ----------
    beta : float
        β >= 0.
    d : int
        The token dimension, >= 2.
    span : float, optional
        The panels cover x ∈ [−span, span], in [5, 40] (beyond: exact exponential tails).

    Examples
    --------
    On the circle the value noise does not matter, P(antipodal | z₀) = arccos(z₀)/π:

    >>> from stochformer.theory.value_noise import ValuePair
    >>> ValuePair(beta=3.0, d=2).p_antipodal([-0.5, 0.0, 0.5]).round(6)
    array([0.666667, 0.5     , 0.333333])
    >>> ValuePair(beta=0.3, d=4).p_antipodal(0.0)      # β below β_c(4) = 0.658: never antipodal
    0.0
    """

    def __init__(self, beta: NonNegativeFloat, d: Annotated[int, Int(2)], *,
                 span: Annotated[float, Real(5.0, 40.0)] = 25.0):
        self.beta, self.d, self.span = float(beta), int(d), float(span)
        self.slope_minus = 1.0 - (self.d - 2) * _sech(2.0 * self.beta)
        self.slope_plus = -(self.d - 1.0)
        h = min(0.75, RESOLUTION / max(self.d, 1))
        k = max(1, math.ceil(self.span / h))
        edges = np.linspace(-self.span, self.span, 2 * k + 1)
        edges[k] = 0.0
        self.panels = Panels(edges, NODES, SUB_NODES)
        x = self.panels.x
        self.logw, self.logy = log_distances(x)
        tau2 = self._tau(x) ** 2
        rho = (1 - tau2) / (1 + tau2)
        G, G_edges = self.panels.cumulative(rho)
        logcosh = np.abs(x) + np.log1p(np.exp(-2 * np.abs(x))) - math.log(2.0)
        self.F = -logcosh - (self.d - 2) * (G - G_edges[k])
        # what the chain of `theory.evolution` reads: the log scale and speed densities in x (m = 2/(s S'),
        # s = 2r(1 − z²)², so log(m dz/dx) = −F − log r, r = (1 + τ²)/2) and g = −F' = z + (d − 2)ρ
        self.F_scale = self.F
        self.F_speed = -self.F - np.log(0.5 * (1 + tau2))
        self.g = np.tanh(x) + (self.d - 2) * rho

    def _tau(self, x: np.ndarray) -> np.ndarray:
        """τ = p − q = tanh(β(1 − z)/2) at x = atanh z (1 − z from x, accurate near z = 1)."""
        return np.tanh(0.5 * self.beta * np.exp(log_distances(np.asarray(x, float))[0]))

    def rho(self, x: np.ndarray) -> np.ndarray:
        """ρ = t/r = 2pq/(p² + q²) = (1 − τ²)/(1 + τ²) at x = atanh z.

        Parameters
        ----------
        x : numpy.ndarray
            atanh of the cosines.

        Returns
        -------
        numpy.ndarray
            ρ, of x's shape.
        """
        tau2 = self._tau(x) ** 2
        return (1 - tau2) / (1 + tau2)

    @property
    def rate(self) -> float:
        """The pair's fastest smooth rate, d + 2 (r ≤ 1, t ≤ ½): sets the time step of
        [`PairChain`][stochformer.theory.evolution.PairChain]."""
        return self.d + 2.0

    @property
    def antipode(self) -> End:
        """The end z = −1, natural (s vanishes quadratically): its exponent is
        [`antipode_exponent`][stochformer.theory.value_noise.antipode_exponent], and S'(z) ~ (1 + z)^α
        with α = (1 − (d − 2) sech 2β)/2 − 1."""
        e = antipode_exponent(self.beta, self.d)
        kind: EndKind = "attracting" if e < 0 else ("repelling" if e > 0 else "neutral")
        return End(-1.0, kind, e, 0.5 * self.slope_minus - 1.0)

    def _tails(self) -> tuple[float, float]:
        """log of ∫ e^F beyond the left and the right end of the panels (+inf if it diverges)."""
        lo = float(self.panels.interp(self.F, self.panels.lo))
        hi = float(self.panels.interp(self.F, self.panels.hi))
        left = lo - math.log(self.slope_minus) if self.slope_minus > 0 else math.inf
        return left, hi - math.log(-self.slope_plus)

    @property
    def reachable(self) -> bool:
        """[`antipode_reachable`][stochformer.theory.value_noise.antipode_reachable] (β, d)."""
        return self.slope_minus > 0

    def p_antipodal(self, z0: ArrayLike) -> Union[float, np.ndarray]:
        """P(z_t → −1 | z_0 = z0) = (S(1) − S(z0))/(S(1) − S(−1)): array of z0's shape (0 where the
        antipode is not reachable).

        Parameters
        ----------
        z0 : float or array_like
            Starting cosines in (−1, 1).

        Returns
        -------
        float or numpy.ndarray
            A number for a number, else an array of z0's shape.
        """
        out = self._p_at(atanh(check_cosines("z0", z0)))
        return float(out) if out.ndim == 0 else out

    def _p_at(self, x: np.ndarray) -> np.ndarray:
        """P(antipodal) from x = atanh z₀ (any shape)."""
        if not self.reachable:
            return np.zeros(np.shape(x))
        x = np.clip(x, self.panels.lo, self.panels.hi)
        left, right = self._tails()
        below = np.logaddexp(left, self.panels.log_integral(self.F, np.full(x.shape, self.panels.lo), x))
        above = np.logaddexp(right, self.panels.log_integral(self.F, x, np.full(x.shape, self.panels.hi)))
        return 1.0 / (1.0 + np.exp(below - above))

    def p_antipodal_uniform(self) -> float:
        """P(antipodal) for two independent uniform tokens: the mean of `p_antipodal` over the law of
        z₀ = ⟨x₁, x₂⟩, density ∝ (1 − z²)^{(d−3)/2} (∝ sech^{d−1} x in x).

        Returns
        -------
        float
            The probability.
        """
        if not self.reachable:
            return 0.0
        x = self.panels.x
        p = self._p_at(x)
        logw = -(self.d - 1) * (np.abs(x) + np.log1p(np.exp(-2 * np.abs(x))) - math.log(2.0))
        wts = self.panels.weights * np.exp(logw - logw.max())
        return float((p * wts).sum() / wts.sum())


def transition(betas: ArrayLike, dims: ArrayLike) -> np.ndarray:
    """P(antipodal) for independent uniform tokens over a grid.

    Parameters
    ----------
    betas : float or array_like
        The β's (>= 0).
    dims : int or array_like
        The dimensions d (>= 2).

    Returns
    -------
    numpy.ndarray, shape (len(dims), len(betas))
        ``ValuePair(β, d).p_antipodal_uniform()``.
    """
    return np.array([[ValuePair(float(b), int(d)).p_antipodal_uniform() for b in np.atleast_1d(betas)]
                     for d in np.atleast_1d(dims)])
