"""Two tokens, exactly (SPEC §8): the overlap z = ⟨x₁, x₂⟩ as a one-dimensional diffusion on [−1, 1].

With the noise of SPEC §3 and softmax attention over the pair with Qᵀ K = βI, V = vI,

$$
dz = [b(z) + a(z)]\\,dt + \\sqrt{s(z)}\\,dB, \\qquad
b(z) = κ(z)(d−2+z^2) − (d−1)κ(1) z, \\quad
s(z) = 2(1−z^2)(κ(1) − zκ(z)), \\quad
a(z) = \\frac{2v e^{βz}(1−z^2)}{e^β + e^{βz}},
$$

with generator ``L f = ½ s f'' + (b + a) f'``. Everything about the pair follows from the scale
density ``S'(z) = exp(−∫ 2(b+a)/s)`` and the speed density ``m = 2/(s S')``: the probability of
ending antipodal, the exponents at the ends, the stationary density, the moments of the time to
synchronise. docs/theory.md derives every formula.

Numerics: the variable x = atanh z maps the ends to ±∞, where every integrand is exponential in x
(the power laws of the ends become exponentials) and smooth (also for a kinked activation: its
(1 − z)^{3/2} term is e^{−3x}-like). κ is never differenced near the ends: ``κ(1) − κ(z)`` and
``κ(z) − κ(−1)`` are integrals of κ' from the end, so ``κ(1) − zκ(z)`` and b keep their relative
accuracy down to 1 − z ~ 1e-22. The log of every integrand is held on Gauss–Legendre panels
(`quadrature`) sized to its slope, integrals are formed in log space (values from e^{−3000}
to e^{3000} occur at d = 128), and the ends beyond |x| = ``span`` are exact exponential tails with
the analytic exponents. Measured accuracy (benchmarks/bench_theory.py, against a grid with twice
the panels, 24 nodes and span 30): about 1e-12 relative for p_antipodal, the sync-time moments and
the stationary density; the stated tolerance is `TOLERANCE`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Literal, Optional, Union

import numpy as np
import torch

from ..model.kernel import NoiseKernel, first_moment_rate, lyapunov_exponent
from ..core.validation import FiniteFloat, Int, Real, validated
from .quadrature import NODES, SUB_NODES, Panels, logsumexp

#: the relative accuracy stated for the quadrature results of [`PairDiffusion`][stochformer.theory.pair.PairDiffusion] (p_antipodal,
#: hit probabilities, sync-time moments, stationary density): benchmarks/bench_theory.py measures
#: about 1e-12 against a refined grid; tests/test_theory.py checks this tolerance
TOLERANCE = 1e-8
#: |κ(1) + κ(−1)| below this times κ(1): the kernel is odd (the antipode is a fixed point of the noise)
ODD_TOLERANCE = 1e-12
#: κ(1) the pair theory takes: its times scale like 1/κ(1) and the sync time's variance like κ(1)⁻², which
#: must stay inside float64 with room for the integrals' other factors
KAPPA1_RANGE = (1e-100, 1e100)
#: the most panels of the pair's grid (d = 10⁵ without attention: 3.2·10⁵ panels, about 7 GB); their number
#: grows like the largest |g|, the drift over the diffusion: like d and like |v|/κ(1)
MAX_PANELS = 350_000
#: an end exponent within this times κ(1) + κ'(1) of 0 is neutral (neither attracting nor repelling)
NEUTRAL_TOLERANCE = 1e-12

ArrayLike = Union[float, np.ndarray, list]
EndKind = Literal["attracting", "repelling", "neutral", "entrance", "reflecting"]


def log_distances(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(1 − z) and log(1 + z) for z = tanh x, accurate at any x: log 2 − softplus(±2x).

    Parameters
    ----------
    x : numpy.ndarray
        atanh of the cosines (any real).

    Returns
    -------
    tuple of numpy.ndarray
        (log(1 − z), log(1 + z)), each of x's shape.
    """
    def softplus(u):
        return np.maximum(u, 0.0) + np.log1p(np.exp(-np.abs(u)))

    return math.log(2.0) - softplus(2 * x), math.log(2.0) - softplus(-2 * x)


def _expit(u: ArrayLike) -> np.ndarray:
    u = np.asarray(u, float)
    e = np.exp(-np.abs(u))
    return np.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def atanh(z: np.ndarray) -> np.ndarray:
    """atanh z, as ½ log((1+z)/(1−z)) with log1p.

    Parameters
    ----------
    z : numpy.ndarray
        Values in (−1, 1).

    Returns
    -------
    numpy.ndarray
        atanh z, of z's shape.
    """
    return 0.5 * (np.log1p(z) - np.log1p(-z))


def check_cosines(name: str, z: ArrayLike) -> np.ndarray:
    """``z`` as a float array of cosines in the open interval (−1, 1), else ``ValueError`` naming ``name``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    z : float or array_like
        The values.

    Returns
    -------
    numpy.ndarray
        ``z`` as floats.
    """
    try:
        arr = np.asarray(z, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number or an array of numbers in (-1, 1)") from None
    if not np.all((arr > -1.0) & (arr < 1.0)):  # False for NaN too
        raise ValueError(f"{name}: must be in the open interval (-1, 1)")
    return arr


def check_eps(eps: float) -> float:
    """``eps`` as a float in the open interval (0, 2) (the sync level 1 − ε is in (−1, 1)), else ``ValueError``.

    Parameters
    ----------
    eps : float
        The distance of the sync level from 1.

    Returns
    -------
    float
        ``eps``.
    """
    return Real(0.0, 2.0, low_open=True, high_open=True)("eps", eps)


@dataclass(frozen=True)
class End:
    """One end of [−1, 1] (SPEC §8). ``kind``: for a natural end where the diffusion vanishes
    quadratically (z = 1 always; z = −1 for an odd κ) 'attracting' (z → the end with positive
    probability, never reaching it), 'repelling' or 'neutral' by the sign of ``exponent``, the
    a.s. exponential rate of the chordal distance to the end of a pair near it; where s vanishes
    linearly (z = −1, κ(1) + κ(−1) > 0) 'entrance' (d ≥ 3: never reached, z leaves it at once) or
    'reflecting' (d = 2: reached, reflected), ``exponent`` None. ``scale_exponent``: α with
    S'(z) ~ |z ∓ 1|^α at the end.

    Attributes
    ----------
    at : float
        1 or −1.
    kind : {"attracting", "repelling", "neutral", "entrance", "reflecting"}
        The end's classification.
    exponent : float or None
        The a.s. exponential rate of the distance to a natural end (None otherwise).
    scale_exponent : float
        α of the scale density at the end.
    """

    at: float
    kind: EndKind
    exponent: Optional[float]
    scale_exponent: float

    @property
    def attracting(self) -> bool:
        return self.kind == "attracting"

    @property
    def natural(self) -> bool:
        return self.exponent is not None


@dataclass(frozen=True)
class SyncTime:
    """Moments of τ = inf{t: z_t ≥ 1 − ε} from z0 (SPEC §8: L T₁ = −1, L T₂ = −2T₁ on (−1, 1 − ε)).

    ``p_reach`` = P(τ < ∞) (< 1 when the antipode attracts too); ``mean``, ``sd``: of τ (inf when
    p_reach < 1); ``mean_given``, ``sd_given``: of τ given τ < ∞ (the same when p_reach = 1).

    Attributes
    ----------
    mean, sd : float
        E τ and its standard deviation (inf when p_reach < 1).
    p_reach : float
        P(τ < ∞).
    mean_given, sd_given : float
        The same given τ < ∞ (inf where they pass float64).
    log_mean_given : float
        log E[τ | τ < ∞], finite where the mean passes float64 (NaN where not computed).
    """

    mean: float
    sd: float
    p_reach: float
    mean_given: float
    sd_given: float
    log_mean_given: float = math.nan


@dataclass(frozen=True)
class Stationary:
    """The stationary law of z where z is positive recurrent (``exists``), density
    π(z) = m(z)/∫m, m = 2/(s S'); otherwise ``exists`` False and ``reason`` says why.

    Attributes
    ----------
    exists : bool
        Whether z is positive recurrent.
    reason : str
        Why (or why not).
    mean, sd : float or None
        Mean and standard deviation of z under π (None without a law).
    """

    exists: bool
    reason: str
    mean: Optional[float] = None
    sd: Optional[float] = None
    _pair: Optional["PairDiffusion"] = field(default=None, repr=False, compare=False)
    _log_norm: float = field(default=math.nan, repr=False, compare=False)

    def pdf(self, z: ArrayLike) -> np.ndarray:
        """π(z) for cosines z in (−1, 1); ``ValueError`` where no stationary law exists.

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray
            π(z), of z's shape.
        """
        if not self.exists or self._pair is None:
            raise ValueError(f"stationary: no stationary law ({self.reason})")
        z = check_cosines("z", z)
        x = atanh(z)
        logw, logy = log_distances(x)
        return np.exp(self._pair.log_speed(x) - logw - logy - self._log_norm)


@validated
class PairDiffusion:
    r"""The overlap $z = \langle x_1, x_2\rangle$ of two tokens (SPEC §8), a diffusion on [−1, 1]:

    $$
    dz = [b(z) + a(z)]\,dt + \sqrt{s(z)}\,dB, \qquad
    b(z) = \kappa(z)(d-2+z^2) - (d-1)\kappa(1)\,z, \qquad
    s(z) = 2(1-z^2)\big(\kappa(1) - z\kappa(z)\big),
    $$

    $a(z) = 2v\,e^{\beta z}(1-z^2)/(e^\beta + e^{\beta z})$ the softmax attention over the pair. Its queries
    (`p_antipodal`, `sync_time`, `stationary`, the ends `diagonal` and `antipode`, `beta_star`) are
    integrals of the scale density $S'(z) = \exp(-\int 2(b+a)/s)$ and the speed density
    $m = 2/(s S')$ (docs/theory.md derives each).

    Parameters
    ----------
    kernel : NoiseKernel
        The noise kernel κ ([`NoiseKernel`][stochformer.model.kernel.NoiseKernel]), with κ(1) > 0.
    beta : float, optional
        The attention's inverse temperature β ($Q^\top K = \beta I$).
    v : float, optional
        The attention's value, $V = vI$ (0: no attention).
    span : float, optional
        The panels cover $x = \operatorname{atanh} z \in [-\text{span}, \text{span}]$, in [5, 40].
    resolution : float, optional
        The largest change of a log-integrand over one panel, in [0.5, 12].
    nodes : int, optional
        Gauss–Legendre nodes per panel, in [8, 64]. The defaults give the accuracy of `TOLERANCE`
        and better (module docstring); queries then take milliseconds, the construction up to about
        a tenth of a second (benchmarks/bench_theory.py).

    Attributes
    ----------
    kappa1, kappa1_prime, kappa_m1 : float
        κ(1), κ'(1) and κ(−1).
    c_minus : float
        κ(1) + κ(−1) (0 for an odd kernel: ``odd``).
    lambda_1, lambda_bar : float
        λ₁ and λ̄ (SPEC §5).
    panels : Panels
        `quadrature.Panels` in x = atanh z; at its nodes, arrays (P, n): ``logw``, ``logy`` =
        log(1 ∓ z), ``K2`` = κ(1) − zκ(z) (s = 2(1 − z²) K2), ``mu`` = b + a, ``g`` = mu/K2,
        ``psi`` = log S', ``F_scale`` = log(S' dz/dx), ``F_speed`` = log(m dz/dx).

    Raises
    ------
    ValueError
        A kernel without noise (κ(1) = 0) or an argument out of range, naming it.

    Examples
    --------
    For the linear kernel κ(u) = u/d the probability of ending antipodal is arccos(z₀)/π:

    >>> from stochformer import NoiseKernel
    >>> from stochformer.theory import PairDiffusion
    >>> pair = PairDiffusion(NoiseKernel("linear", 3))
    >>> pair.p_antipodal([-0.5, 0.0, 0.5]).round(6)
    array([0.666667, 0.5     , 0.333333])
    >>> pair.diagonal.kind, round(pair.diagonal.exponent, 6)
    ('attracting', -0.333333)
    """

    def __init__(self, kernel: NoiseKernel, beta: FiniteFloat = 1.0, v: FiniteFloat = 0.0, *,
                 span: Annotated[float, Real(5.0, 40.0)] = 25.0,
                 resolution: Annotated[float, Real(0.5, 12.0)] = 8.0,
                 nodes: Annotated[int, Int(8, 64)] = NODES):
        self.kernel, self.beta, self.v = kernel, float(beta), float(v)
        self.d = kernel.d
        self.kappa1 = kernel.kappa1
        if not self.kappa1 > 0:
            raise ValueError(f"kernel: the pair diffusion needs noise, kappa(1) > 0 (got {self.kappa1:.3g}): noise_scale > 0, "
                             "and sigma_U, sigma_W, gain that leave the activation's output non-zero")
        lo, hi = KAPPA1_RANGE
        if not lo <= self.kappa1 <= hi:
            raise ValueError(f"kernel: the pair theory takes kappa(1) in [{lo:g}, {hi:g}] (its times scale like 1/kappa(1), the "
                             f"sync time's variance like kappa(1)^-2; got {self.kappa1:.3g}): noise_scale, gain, sigma_U and "
                             "sigma_W set it")
        self.kappa1_prime = kernel.kappa1_prime
        self.kappa_m1 = float(kernel.kappa(-1.0))
        self.kappa_m1_prime = float(kernel.kappa_prime(-1.0))
        c_minus = self.kappa1 + self.kappa_m1
        self.odd = abs(c_minus) <= ODD_TOLERANCE * self.kappa1
        if self.odd:
            self.kappa_m1, c_minus = -self.kappa1, 0.0
        self.c_minus = max(c_minus, 0.0)
        self.lambda_1 = lyapunov_exponent(self.kappa1, self.kappa1_prime, self.d)
        self.lambda_bar = first_moment_rate(self.kappa1, self.kappa1_prime, self.d)
        self.span = float(span)
        self.nodes = nodes
        self.resolution = float(resolution)
        self.panels = self._build_panels()
        self._fill(self.panels)

    # ------------------------------------------------------------------ coefficients

    @property
    def drift_ratio(self) -> str:
        """|v|/κ(1), which the drift over the diffusion grows with besides d, and the config fields
        that set it, for a limit's message."""
        return (f"|v|/kappa(1) (got {abs(self.v) / self.kappa1:.3g}; v is a config's gamma, kappa(1) = {self.kappa1:.3g} "
                "is set by noise_scale, gain, sigma_U and sigma_W)")

    @property
    def c(self) -> float:
        """κ(1) + κ'(1): s(z) ≈ 4c(1 − z)² near z = 1."""
        return self.kappa1 + self.kappa1_prime

    def _kappa_prime(self, x: np.ndarray) -> np.ndarray:
        """κ'(tanh x) at the nodes x (P, n) of a panel grid."""
        z = np.tanh(x)
        return self.kernel.kappa_prime(torch.from_numpy(z.ravel())).numpy().reshape(z.shape)

    def _fields(self, panels: Panels, kp: Optional[np.ndarray] = None) -> dict[str, np.ndarray]:
        """b + a, κ(1) − zκ(z) and their ratio at the nodes, from κ' (``kp`` at the nodes; default:
        evaluated there) integrated from the ends."""
        x = panels.x
        logw, logy = log_distances(x)
        w, y = np.exp(logw), np.exp(logy)
        J = w * y  # 1 − z² = dz/dx
        kp = self._kappa_prime(x) if kp is None else kp
        iz = int(np.flatnonzero(panels.edges == 0.0)[0])  # the panels meet at x = 0
        right = np.arange(panels.panels) >= iz
        # κ(1) − κ(z) = ∫_x^∞ κ'(z) J dx on x ≥ 0 and κ(z) − κ(−1) = ∫_{−∞}^x κ'(z) J dx on x ≤ 0
        Dp = np.zeros_like(x)
        Dm = np.zeros_like(x)
        upper = Panels(panels.edges[iz:], panels.n, panels.m)
        Dp[right] = upper.cumulative_right((kp * J)[right], end=self.kappa1_prime * math.exp(log_distances(np.array(upper.hi))[0]))[0]
        lower = Panels(panels.edges[: iz + 1], panels.n, panels.m)
        Dm[~right] = lower.cumulative((kp * J)[~right], start=self.kappa_m1_prime * math.exp(log_distances(np.array(lower.lo))[1]))[0]
        right = np.broadcast_to(right[:, None], x.shape)
        d, k1 = self.d, self.kappa1
        kz = np.where(right, k1 - Dp, self.kappa_m1 + Dm)
        K2 = np.where(right, w * k1 + (1 - w) * Dp, self.c_minus - y * self.kappa_m1 + (1 - y) * Dm)
        b = np.where(right, (d - 1) * (k1 * w - Dp), (d - 1) * (self.c_minus + Dm - k1 * y)) - J * kz
        with np.errstate(over="ignore"):  # β(1 − z) past float64 is ±inf, where expit is exactly 0 or 1
            a = 2 * self.v * J * _expit(-self.beta * w)
        return {"logw": logw, "logy": logy, "K2": K2, "mu": b + a, "g": (b + a) / K2, "kappa": kz}

    def _build_panels(self) -> Panels:
        """Panels of [−span, span] with an edge at 0, each short enough that the log-integrands
        (slope ≈ |g| + 4, g = (b + a)/(κ(1) − zκ(z)) = 2(b + a)/s · dz/dx) change by at most
        ``resolution`` over it, and at most 0.75 long."""
        h_max = 0.75  # the attention term expit(−β(1 − z)) changes over O(1) in x whatever β
        k = max(1, math.ceil(self.span / h_max))
        edges = np.linspace(-self.span, self.span, 2 * k + 1)
        edges[k] = 0.0
        pilot = Panels(edges, self.nodes, SUB_NODES)
        self._pilot = pilot
        self._pilot_kp = self._kappa_prime(pilot.x)
        with np.errstate(over="ignore", invalid="ignore"):  # an infinite |g| is refused below, by its panel count
            g = np.abs(self._fields(pilot, self._pilot_kp)["g"]).max(axis=1)
        slope = np.maximum(g, np.concatenate([[0.0], g[:-1]]))
        slope = np.maximum(slope, np.concatenate([g[1:], [0.0]])) + 4.0
        need = slope * np.diff(pilot.edges) / self.resolution
        total = float(np.sum(np.maximum(1.0, np.ceil(need)))) if np.all(np.isfinite(need)) else math.inf
        if total > MAX_PANELS:
            raise ValueError(f"v: the pair's drift over its diffusion, |g| up to {float(g.max()):.3g} (it grows like d and like "
                             f"|v|/kappa(1)), needs {total:.3g} panels, at most {MAX_PANELS} (about 7 GB): a smaller d "
                             f"(got {self.d}) or {self.drift_ratio}")
        parts = np.maximum(1, np.ceil(need)).astype(int)
        pieces = [pilot.edges[:1]] + [np.linspace(pilot.edges[p], pilot.edges[p + 1], n + 1)[1:] for p, n in enumerate(parts)]
        return Panels(np.concatenate(pieces), self.nodes, SUB_NODES)

    def _fill(self, panels: Panels) -> None:
        # κ'(tanh x) is smooth in x on the scale of the pilot panels whatever d and β (the steep parts
        # of the integrands come from g, not from κ'): interpolated from the pilot, not evaluated again
        f = self._fields(panels, self._pilot.interp(self._pilot_kp, panels.x))
        self.logw, self.logy = f["logw"], f["logy"]
        self.K2, self.mu, self.g = f["K2"], f["mu"], f["g"]
        G, G_edges = panels.cumulative(f["g"])
        zero = int(np.argmin(np.abs(panels.edges)))
        self.psi = -(G - G_edges[zero])  # log S'(z), S'(0) = 1
        self.F_scale = self.psi + self.logw + self.logy  # log(S'(z) dz/dx)
        self.F_speed = -self.psi - np.log(self.K2)  # log(m(z) dz/dx), m = 2/(s S')

    # ------------------------------------------------------------------ the ends (SPEC §8)

    @property
    def rate(self) -> float:
        """The pair's fastest smooth rate, (d + 2)(κ(1) + κ'(1)) + |v|: sets the time step of
        [`PairChain`][stochformer.theory.evolution.PairChain]."""
        return (self.d + 2) * self.c + abs(self.v)

    @property
    def g_plus(self) -> float:
        """lim_{z→1} (b + a)/(κ(1) − zκ(z)) = −(λ̄ − 2v)/c."""
        return -(self.lambda_bar - 2 * self.v) / self.c

    @property
    def g_minus(self) -> float:
        """lim_{z→−1} (b + a)/(κ(1) − zκ(z)): (λ̄ + 4v/(1 + e^{2β}))/c for an odd κ, d − 1 otherwise."""
        if self.odd:
            return (self.lambda_bar + 4 * self.v * float(_expit(-2 * self.beta))) / self.c
        return float(self.d - 1)

    def _kind(self, exponent: float) -> EndKind:
        if abs(exponent) <= NEUTRAL_TOLERANCE * self.c:
            return "neutral"
        return "attracting" if exponent < 0 else "repelling"

    @cached_property
    def diagonal(self) -> End:
        """z = 1: exponent λ₁ − v, S' ~ (1 − z)^{−(λ₁ − v)/c − 1}."""
        e = self.lambda_1 - self.v
        return End(1.0, self._kind(e), e, -e / self.c - 1.0)

    @cached_property
    def antipode(self) -> End:
        """z = −1: for an odd κ exponent λ₁ + 2v/(1 + e^{2β}); otherwise an entrance (d ≥ 3) or
        reflecting (d = 2) end with S' ~ (1 + z)^{−(d−1)/2}."""
        if self.odd:
            e = self.lambda_1 + 2 * self.v * float(_expit(-2 * self.beta))
            return End(-1.0, self._kind(e), e, -e / self.c - 1.0)
        return End(-1.0, "entrance" if self.d >= 3 else "reflecting", None, -(self.d - 1) / 2)

    @property
    def beta_star(self) -> Optional[float]:
        """For an odd κ: the β where the antipode's exponent λ₁ + 2v/(1 + e^{2β}) is 0, ½ log(−2v/λ₁ − 1)
        (for λ₁ < 0 < v: ½ log(2v/|λ₁| − 1), the antipode attracts iff β > β*). None for a κ that is not
        odd, or where no β makes the exponent 0."""
        return antipode_threshold(self.lambda_1, self.v) if self.odd else None

    # slopes of the log-integrands as x → ±∞ (exact: from the exponents)
    @property
    def _scale_slopes(self) -> tuple[float, float]:
        return 2.0 - self.g_minus, -self.g_plus - 2.0

    @property
    def _speed_slopes(self) -> tuple[float, float]:
        return self.g_minus - (2.0 if self.odd else 0.0), self.g_plus + 2.0

    # ------------------------------------------------------------------ log-space integrals

    def log_speed(self, x: np.ndarray) -> np.ndarray:
        """log(m(z) dz/dx) at x = atanh z (interpolated on the panels).

        Parameters
        ----------
        x : numpy.ndarray
            atanh of the cosines.

        Returns
        -------
        numpy.ndarray
            The log speed density in x, of x's shape.
        """
        return self.panels.interp(self.F_speed, x)

    def log_scale_density(self, z: ArrayLike) -> np.ndarray:
        """log S'(z) (S'(0) = 1) at cosines z in (−1, 1).

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray
            log S'(z), of z's shape.
        """
        x = atanh(check_cosines("z", z))
        return self.panels.interp(self.psi, x)

    @staticmethod
    def _tail(F_end: float, slope: float, decaying: float) -> float:
        """log of the exponential tail e^{F_end}/|slope| beyond an end, +inf if it does not decay
        (``decaying``: the sign the slope must have)."""
        if slope * decaying <= 0:
            return math.inf
        return F_end - math.log(abs(slope))

    def _left_tail(self, F: np.ndarray, slope: float) -> float:
        return self._tail(float(self.panels.interp(F, self.panels.lo)), slope, +1.0)

    def _right_tail(self, F: np.ndarray, slope: float) -> float:
        return self._tail(float(self.panels.interp(F, self.panels.hi)), slope, -1.0)

    def _log_from_left(self, panels: Panels, F: np.ndarray, x: np.ndarray, tail: float,
                       P: Optional[np.ndarray] = None) -> np.ndarray:
        """log ∫_{−∞}^{x} P e^{F} (tail: the log of the part left of the panels)."""
        _, edges = panels.log_cumulative(F, P, tail)
        p, _ = panels.locate(x)
        return np.logaddexp(edges[p], panels.log_part(F, p, panels.edges[p], x, P))

    def _log_from_right(self, panels: Panels, F: np.ndarray, x: np.ndarray, tail: float,
                        P: Optional[np.ndarray] = None) -> np.ndarray:
        _, edges = panels.log_cumulative_right(F, P, tail)
        p, _ = panels.locate(x)
        return np.logaddexp(edges[p + 1], panels.log_part(F, p, x, panels.edges[p + 1], P))

    # ------------------------------------------------------------------ scale function

    def log_scale_below(self, z: ArrayLike) -> np.ndarray:
        """log(S(z) − S(−1)) (+inf where S(−1) = −∞: the antipode not attainable nor attracting).

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray
            Of z's shape.
        """
        x = atanh(check_cosines("z", z))
        return self._log_from_left(self.panels, self.F_scale, x, self._left_tail(self.F_scale, self._scale_slopes[0]))

    def log_scale_above(self, z: ArrayLike) -> np.ndarray:
        """log(S(1) − S(z)) (+inf where S(1) = ∞: the diagonal does not attract).

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray
            Of z's shape.
        """
        x = atanh(check_cosines("z", z))
        return self._log_from_right(self.panels, self.F_scale, x, self._right_tail(self.F_scale, self._scale_slopes[1]))

    def scale(self, z: ArrayLike) -> np.ndarray:
        """S(z) − S(0) with S'(0) = 1 (the scale function; ±inf beyond float range).

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray
            S(z) − S(0), of z's shape.
        """
        z = check_cosines("z", z)
        x = atanh(z)
        lo = np.minimum(x, 0.0)
        hi = np.maximum(x, 0.0)
        with np.errstate(over="ignore"):
            mag = np.exp(self.panels.log_integral(self.F_scale, lo, hi))
        return np.where(x >= 0, mag, -mag)

    def p_antipodal(self, z0: ArrayLike) -> Union[float, np.ndarray]:
        """P(z_t → −1 | z_0 = z0) = (S(1) − S(z0)) / (S(1) − S(−1)) (SPEC §8).

        0 where only the diagonal attracts, 1 where only the antipode does, NaN where neither
        does (z is recurrent and converges to neither end).

        Parameters
        ----------
        z0 : float or array_like
            Starting cosines in (−1, 1).

        Returns
        -------
        float or numpy.ndarray
            A number for a number, else an array of z0's shape.
        """
        return self._end_probability(z0, antipode=True)

    def p_diagonal(self, z0: ArrayLike) -> Union[float, np.ndarray]:
        """P(z_t → 1 | z_0 = z0) = 1 − [`p_antipodal`][stochformer.theory.pair.PairDiffusion.p_antipodal] (computed from the other side).

        Parameters
        ----------
        z0 : float or array_like
            Starting cosines in (−1, 1).

        Returns
        -------
        float or numpy.ndarray
            A number for a number, else an array of z0's shape.
        """
        return self._end_probability(z0, antipode=False)

    def _end_probability(self, z0: ArrayLike, antipode: bool) -> Union[float, np.ndarray]:
        """P(z_t → −1) (``antipode``) or P(z_t → 1) from z0: 0 or 1 where only one end attracts,
        NaN where neither does, else the scale function's ratio, from the side that is accurate."""
        z0 = check_cosines("z0", z0)
        top, bottom = self.diagonal.attracting, self.antipode.attracting
        if not (top or bottom):
            out = np.full(z0.shape, np.nan)
        elif not (bottom and top):
            out = np.full(z0.shape, float(bottom == antipode))
        else:
            above, below = self.log_scale_above(z0), self.log_scale_below(z0)
            out = _expit(above - below if antipode else below - above)
        return float(out) if out.ndim == 0 else out

    def hit_probability(self, z0: ArrayLike, lower: float, upper: float) -> Union[float, np.ndarray]:
        """P(z reaches ``upper`` before ``lower`` | z_0 = z0) = (S(z0) − S(lower))/(S(upper) − S(lower)),
        for −1 < lower ≤ z0 ≤ upper < 1.

        Parameters
        ----------
        z0 : float or array_like
            Starting cosines.
        lower, upper : float
            The two levels.

        Returns
        -------
        float or numpy.ndarray
            A number for a number, else an array of z0's shape.
        """
        z0 = check_cosines("z0", z0)
        lower_, upper_ = check_cosines("lower", lower), check_cosines("upper", upper)
        if not (np.all(lower_ <= z0) and np.all(z0 <= upper_)):
            raise ValueError("z0: must lie in [lower, upper]")
        x0, xl, xu = atanh(z0), atanh(lower_), atanh(upper_)
        below = self.panels.log_integral(self.F_scale, np.broadcast_to(xl, x0.shape), x0)
        above = self.panels.log_integral(self.F_scale, x0, np.broadcast_to(xu, x0.shape))
        out = _expit(below - above)
        return float(out) if out.ndim == 0 else out

    # ------------------------------------------------------------------ time to synchronise

    def sync_time(self, z0: float, eps: float = 1e-3) -> SyncTime:
        """Moments of τ = inf{t: z_t ≥ 1 − ε} from z0 (a number): T₁ = E τ and the variance V = E τ² − T₁²
        from the boundary value problems L T₁ = −1, L V = −s T₁'² on (−1, 1 − ε) with T₁ = V = 0 at
        1 − ε and no flux at −1 (entrance, reflecting or repelling end):

        $$
        T_1(z_0) = \\int_{z_0}^{1-ε} S'(y) M(y)\\,dy, \\quad
        V(z_0) = \\int_{z_0}^{1-ε} S'(y) \\int_{-1}^{y} 2 S'(ξ) M(ξ)^2\\,dξ\\,dy, \\quad
        M(y) = \\int_{-1}^{y} m.
        $$

        Where the antipode attracts, τ = ∞ with probability 1 − p_reach; the moments given τ < ∞ are
        those of the Doob transform by h = S − S(−1) (S' → S'/h², m → m h²).

        Parameters
        ----------
        z0 : float
            The starting cosine, in (−1, 1).
        eps : float, optional
            The sync level is 1 − ε, ε in (0, 2).

        Returns
        -------
        SyncTime
            Mean, sd and P(τ < ∞), and the moments given τ < ∞.
        """
        if np.ndim(z0) != 0:
            raise ValueError("z0: must be one number in (-1, 1) (sync_time takes one start)")
        z0 = float(check_cosines("z0", z0))
        eps = check_eps(eps)
        top = 1.0 - eps
        if z0 >= top:
            return SyncTime(0.0, 0.0, 1.0, 0.0, 0.0)
        x0, xr = float(atanh(np.array(z0))), float(atanh(np.array(top)))
        short, carry = self.panels.truncate(xr)
        F_S, F_m = carry(self.F_scale), carry(self.F_speed)
        slope_S, slope_m = self._scale_slopes[0], self._speed_slopes[0]
        left = self.antipode
        if left.attracting:
            tail = self._left_tail(self.F_scale, slope_S)
            logL, _ = short.log_cumulative(F_S, tail=tail)
            log_h0 = self._log_from_left(short, F_S, np.array(x0), tail)
            p_reach = float(np.exp(log_h0 - self._log_from_left(short, F_S, np.array(xr), tail)))
            F_S, F_m = F_S - 2 * logL, F_m + 2 * logL
            slope_S, slope_m = -slope_S, slope_m + 2 * self._scale_slopes[0]
        else:
            p_reach = 1.0
        log_mean, log_var = self._moments(short, F_S, F_m, slope_S, slope_m, x0)
        mean, sd = _exp(log_mean), _exp(0.5 * log_var)
        if left.attracting:
            return SyncTime(math.inf, math.inf, p_reach, mean, sd, log_mean)
        return SyncTime(mean, sd, 1.0, mean, sd, log_mean)

    def _moments(self, short: Panels, F_S: np.ndarray, F_m: np.ndarray, slope_S: float, slope_m: float,
                 x0: float) -> tuple[float, float]:
        """log T₁(x0) and log V(x0) on the panels ``short`` ending at x_r = atanh(1 − ε) (a repelling
        diagonal makes T₁ grow like e^{c|v|/κ(1)}: past float64 at moderate |v|)."""
        def tail(F, slope):
            return self._tail(float(short.interp(F, short.lo)), slope, +1.0)

        logM, _ = short.log_cumulative(F_m, tail=tail(F_m, slope_m))
        F1 = F_S + logM  # log(S' M dz/dx)
        x = np.array(x0)
        logT1 = float(self._log_from_right(short, F1, x, -np.inf))
        F_inner = math.log(2.0) + F_S + 2 * logM
        inner, _ = short.log_cumulative(F_inner, tail=tail(F_inner, slope_S + 2 * slope_m))
        logV = float(self._log_from_right(short, F_S + inner, x, -np.inf))
        return logT1, logV

    # ------------------------------------------------------------------ stationary law

    def stationary(self) -> Stationary:
        """The stationary density π ∝ 1/(s S') = exp(∫ 2(b+a)/s)/s where z is positive recurrent: the
        diagonal repels (λ₁ − v > 0) and the antipode is an entrance or reflecting end or repels too.
        Otherwise ``exists`` is False with the reason.

        Returns
        -------
        Stationary
            The law (its ``pdf``, mean and sd) or why there is none.
        """
        top, bottom = self.diagonal, self.antipode
        if top.kind != "repelling":
            why = "attracts" if top.attracting else "is neutral (null recurrent)"
            return Stationary(False, f"the diagonal z = 1 {why}: exponent lambda_1 - v = {top.exponent:.6g}")
        if bottom.natural and bottom.kind != "repelling":
            why = "attracts" if bottom.attracting else "is neutral (null recurrent)"
            return Stationary(False, f"the antipode z = -1 {why}: exponent {bottom.exponent:.6g}")
        lo_slope, hi_slope = self._speed_slopes
        F = self.F_speed
        log_norm = float(logsumexp(np.array([self._left_tail(F, lo_slope), self.panels.log_cumulative(F)[1][-1],
                                             self._right_tail(F, hi_slope)])))

        def moment(extra: np.ndarray, lo: float, hi: float) -> float:
            G = F + extra
            parts = np.array([self._left_tail(G, lo), self.panels.log_cumulative(G)[1][-1], self._right_tail(G, hi)])
            return float(np.exp(logsumexp(parts) - log_norm))

        # E(1 − z) and E(1 − z)² (w = 1 − z: slope −2 per power at +∞)
        ew = moment(self.logw, lo_slope, hi_slope - 2)
        ew2 = moment(2 * self.logw, lo_slope, hi_slope - 4)
        reason = "z is positive recurrent: the diagonal repels" + (
            f" and the antipode is an {bottom.kind} end" if not bottom.natural else " and so does the antipode")
        return Stationary(True, reason, 1.0 - ew, math.sqrt(max(ew2 - ew * ew, 0.0)), self, log_norm)

    def stationary_density(self, z: ArrayLike) -> Optional[np.ndarray]:
        """π(z) at cosines z (array of z's shape) where z is positive recurrent, None where it is not
        ([`stationary`][stochformer.theory.pair.PairDiffusion.stationary] says why).

        Parameters
        ----------
        z : float or array_like
            Cosines in the open interval (−1, 1).

        Returns
        -------
        numpy.ndarray or None
            π(z), of z's shape.
        """
        law = self.stationary()
        return law.pdf(z) if law.exists else None

    # ------------------------------------------------------------------ a summary

    def summary(self, z0: float = 0.0, eps: float = 1e-3) -> dict:
        """The numbers of ``stochformer pair``: the ends, p_antipodal, β*, the sync-time moments and the
        stationary law's status, as a JSON-ready dict (None for a quantity that does not exist).

        Parameters
        ----------
        z0 : float, optional
            The starting cosine.
        eps : float, optional
            The sync level is 1 − ε.

        Returns
        -------
        dict
            The rates, the ends' kinds and exponents, β*, p_antipodal, the sync-time moments and
            the stationary law's mean and sd.
        """
        def num(v: Optional[float]) -> Optional[float]:
            return None if v is None or not math.isfinite(v) else float(v)

        p = self.p_antipodal(z0)
        st = self.sync_time(z0, eps)
        stat = self.stationary()
        return {
            "z0": z0, "eps": eps, "d": self.d, "beta": self.beta, "v": self.v,
            "kappa": self.kappa1, "kappa_prime": self.kappa1_prime, "odd": self.odd,
            "lambda_1": self.lambda_1, "lambda_bar": self.lambda_bar,
            "exponent_diagonal": self.diagonal.exponent, "diagonal": self.diagonal.kind,
            "exponent_antipode": self.antipode.exponent, "antipode": self.antipode.kind,
            "beta_star": self.beta_star,
            "p_antipodal": num(float(p)),
            "p_antipodal_status": ("both ends attract" if self.diagonal.attracting and self.antipode.attracting else
                                   "only the diagonal attracts" if self.diagonal.attracting else
                                   "only the antipode attracts" if self.antipode.attracting else
                                   "neither end attracts: z is recurrent"),
            "sync_time_mean": num(st.mean), "sync_time_sd": num(st.sd), "p_reach": st.p_reach,
            "sync_time_mean_given_reach": num(st.mean_given), "sync_time_sd_given_reach": num(st.sd_given),
            "sync_time_log10_mean_given_reach": num(st.log_mean_given / math.log(10)),
            "stationary": stat.exists, "stationary_reason": stat.reason,
            "stationary_mean": stat.mean, "stationary_sd": stat.sd,
        }


def _exp(log: float) -> float:
    """e^log, inf past float64 (an exponentially long time is a number too large, not an error)."""
    return math.exp(log) if log < 709.0 else math.inf


@validated
def antipode_threshold(lambda_1: FiniteFloat, v: FiniteFloat) -> Optional[float]:
    """β* solving λ₁ + 2v/(1 + e^{2β*}) = 0: ½ log(−2v/λ₁ − 1), None where no real β does (λ₁ = 0,
    or −2v/λ₁ ≤ 1). For λ₁ < 0 < v this is SPEC §8's ½ log(2v/|λ₁| − 1): the antipode of an odd
    kernel attracts iff β > β*.

    Parameters
    ----------
    lambda_1 : float
        The noise's λ₁.
    v : float
        The attention's value scale.

    Returns
    -------
    float or None
        β*, or None where no real β solves it.
    """
    if lambda_1 == 0:
        return None
    q = -2.0 * v / lambda_1 - 1.0
    return 0.5 * math.log(q) if q > 0 else None
