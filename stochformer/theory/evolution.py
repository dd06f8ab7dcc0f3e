"""The law of the pair overlap z_t at any time (SPEC §8): Kolmogorov's equations for the pair diffusion.

The diffusion z of [`PairDiffusion`][stochformer.theory.pair.PairDiffusion] (or of value-matrix
noise, [`ValuePair`][stochformer.theory.value_noise.ValuePair]) is approximated by a
birth–death chain on cells of equal width h in x = atanh z (the natural variable at the ends,
where the diffusion is geometric). The chain is built from the diffusion's own scale and speed
(Feller's form ``L = (1/m) d/dz (1/S') d/dz``): with nodes x_i, cell edges e_i,

$$
q_{i→i±1} = \\frac{1}{M_i\\,ΔS_{i±½}}, \\qquad
M_i = \\int_{e_i}^{e_{i+1}} m\\,dz, \\qquad ΔS_{i+½} = \\int_{x_i}^{x_{i+1}} S'\\,dz,
$$

both integrals exact (the log-space quadrature of `quadrature`). So the chain has the
diffusion's hitting probabilities exactly at its nodes, is a Markov generator for any drift (no
condition on h |b/s|), and its time scale is right to O(h²); [`expectation`][stochformer.theory.evolution.expectation] combines h and h/2
(Richardson) to O(h⁴). The ends: a natural end (geometric) is cut at |x| = ``span`` (1 ∓ z ≈ 4e-18
at 20), where the chain reflects: mass that would go on towards the end stays at 1 ∓ z ≤ 1e-17; an
entrance or reflecting end (s vanishing linearly) is cut at x = −12 (1 + z ≈ 8e-11), or closer where
the chain's start reaches it with probability below e^{−50}, and the chain reflects there, since z
leaves such an end at once.

Time: ``u' = Q u`` (backward, E[f(z_t) | z_0]) or ``p' = Qᵀ p`` (forward, the law of z_t) by implicit
Euler with three step sizes extrapolated to third order (`PairChain._solve`): unconditionally
stable for the very stiff rates near an entrance end (up to ~1e13), to about 1e-6 relative in t.
Cost: the cells grow like d and the steps like 1/d; a chain over `MAX_CELLS` cells or a time
integration over `MAX_WORK` cell updates is refused (``ValueError`` naming d or t).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional, Sequence, Union

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu
from scipy.linalg import eigh_tridiagonal

from ..core.validation import Int, Real, validated
from .pair import PairDiffusion, atanh, check_cosines, log_distances
from .value_noise import ValuePair

#: a pair diffusion the chain is built from: its scale and speed densities on panels in x = atanh z
#: (``panels``, ``F_scale``, ``F_speed``, ``g``, ``logw``, ``logy``), ``d``, ``antipode`` and ``rate``
Pair = Union[PairDiffusion, ValuePair]

def _what_speeds(pair: Pair) -> str:
    """What the pair's fastest rate grows with, in a config's fields (for the time limit's message)."""
    if isinstance(pair, PairDiffusion):
        return (f"rate = (d + 2)(kappa(1) + kappa'(1)) + |v|: a smaller d, kappa(1) + kappa'(1) (got {pair.c:.3g}; set by "
                f"noise_scale, gain, sigma_U and sigma_W) or |v| (got {abs(pair.v):.3g}; a config's gamma)")
    return "rate = d + 2: a smaller d"


#: times: a number or an increasing sequence of numbers >= 0
Times = Union[float, Sequence[float], np.ndarray]

#: cell width in x of the chain (the Richardson partner has h/2)
CELL_WIDTH = 0.05
#: the cell widths accepted
CellWidth = Annotated[float, Real(1e-4, 1.0)]
#: the base time step times the pair's fastest smooth rate ([`PairChain.time_step`][stochformer.theory.evolution.PairChain.time_step])
STEP = 0.04
#: the most cells of one chain (memory: a few hundred bytes a cell)
MAX_CELLS = 100_000
#: the most cell updates (cells × time steps, all three levels) of one time integration (about 10 s on one core)
MAX_WORK = 3e8
#: Gauss–Legendre nodes of the rule on one cell
CELL_NODES = 8
#: where a natural end is cut (|x| = atanh |z|)
NATURAL_SPAN = 20.0
#: where an entrance or reflecting end is cut (x = atanh z, z ≈ −1 + 8e-11)
LINEAR_SPAN = 12.0


@validated
class PairChain:
    """The birth–death chain of ``pair`` on cells of width about ``h`` in x = atanh z (module docstring).

    ``x``, ``z``: nodes (n,); ``edges`` (n + 1,) in x; ``Q``: the generator (sparse, rows sum to 0);
    ``log_mass``: log M_i, ``log_dscale``: log ΔS_{i+½} (n − 1,).

    Parameters
    ----------
    pair : PairDiffusion or ValuePair
        The diffusion of the overlap z.
    h : float, optional
        The cell width in x = atanh z.
    start : float, optional
        A cosine the chain must resolve (an entrance end is cut below it).
    """

    def __init__(self, pair: Pair, h: CellWidth = CELL_WIDTH, start: Optional[float] = None):
        self.pair = pair
        lo = -NATURAL_SPAN if pair.antipode.natural else self._entrance_cut(start)
        hi = NATURAL_SPAN
        g_max = float(np.abs(pair.g[(pair.panels.x >= lo) & (pair.panels.x <= hi)]).max())
        # cells at most 2/3 of the diffusion length s/(2|b + a|) = 1/|g| at h = CELL_WIDTH (h/2: half that)
        n = int(math.ceil((hi - lo) / h * max(1.0, 1.5 * g_max * CELL_WIDTH)))
        if n > MAX_CELLS:
            raise ValueError(f"d: the pair's chain would need {n} cells (their number grows like the drift over the "
                             f"diffusion, |g| up to {g_max:.3g}), at most {MAX_CELLS}; reduce d (got {pair.d}), "
                             + (f"{pair.drift_ratio}, " if isinstance(pair, PairDiffusion) else "") + f"or raise h (got {h:g})")
        self.h = (hi - lo) / n
        self.edges = lo + self.h * np.arange(n + 1)
        self.x = 0.5 * (self.edges[:-1] + self.edges[1:])
        self.logw, self.logy = log_distances(self.x)
        self.z = np.tanh(self.x)
        P = pair.panels
        # a cell is short (the log-integrands change by at most about 2/3 over it): 8-point rules suffice
        self.log_mass = P.log_integral(pair.F_speed, self.edges[:-1], self.edges[1:], sub=CELL_NODES)
        self.log_dscale = P.log_integral(pair.F_scale, self.x[:-1], self.x[1:], sub=CELL_NODES)
        up = np.exp(-self.log_mass[:-1] - self.log_dscale)  # q_{i→i+1}, i < n−1
        down = np.exp(-self.log_mass[1:] - self.log_dscale)  # q_{i→i−1}, i ≥ 1
        self.up, self.down = up, down
        diag = -(np.concatenate([up, [0.0]]) + np.concatenate([[0.0], down]))
        self.Q = sp.diags([down, diag, up], [-1, 0, 1], format="csc")

    @property
    def n(self) -> int:
        return len(self.x)

    def _entrance_cut(self, start: Optional[float]) -> float:
        """Where to cut an entrance or reflecting end: at x = −LINEAR_SPAN, or closer where a pair
        started at ``start`` (a cosine; None: anywhere the uniform law has mass above e^{−50} of its
        peak, x ≥ x₁) reaches it with probability below e^{−50} (the scale ratio
        (S(x₁ + 1) − S(x₁))/(S(x₁) − S(x)))."""
        pair, P = self.pair, self.pair.panels
        if start is None:
            F0 = 0.5 * (pair.d - 1) * (pair.logw + pair.logy)
            x1 = float(P.x[F0 > F0.max() - 50].min())
        else:
            x1 = float(atanh(np.array(start)))
        x1 = max(x1, -LINEAR_SPAN + 1)
        near = float(P.log_integral(pair.F_scale, x1, min(x1 + 1, P.hi)))
        for cut in np.arange(x1 - 1, -LINEAR_SPAN, -0.5):
            if near - float(P.log_integral(pair.F_scale, cut, x1)) < -50:
                return float(cut)
        return -LINEAR_SPAN

    def values(self, f: Callable[..., np.ndarray], distances: bool = False) -> np.ndarray:
        """f at the nodes: f(z), or with ``distances`` f(1 − z, 1 + z) (both accurate near the ends).

        Parameters
        ----------
        f : callable
            Vectorised: an array of cosines (or the two arrays of distances) to an array of values.
        distances : bool, optional
            Call f with 1 − z and 1 + z.

        Returns
        -------
        numpy.ndarray, shape (n,)
            f at the nodes.
        """
        out = f(np.exp(self.logw), np.exp(self.logy)) if distances else f(self.z)
        return np.asarray(out, float) * np.ones(self.n)

    @property
    def time_step(self) -> float:
        """The base step δ of the time integration: `STEP` over the pair's fastest smooth rate
        (``pair.rate``)."""
        return STEP / self.pair.rate

    def _solve(self, A: sp.spmatrix, y0: np.ndarray, times: np.ndarray) -> np.ndarray:
        """y(t) for y' = A y at ``times`` (sorted, ≥ 0): (len(times), n). Implicit Euler with steps δ,
        δ/2 and δ/4, extrapolated (Aitken–Neville) to O(δ³): every step is a contraction for a
        generator A (no condition on its stiffness) and the stiff modes stay damped."""
        times = np.asarray(times, float)
        base = self.time_step
        work = 7 * (times.max(initial=0.0) / base) * self.n
        if work > MAX_WORK:
            raise ValueError(f"t: the pair's law up to t = {times.max():g} needs about {work:.2g} cell updates (the steps "
                             f"shrink like 1/rate, the pair's fastest rate {self.pair.rate:.3g}), at most {MAX_WORK:.0g}: "
                             f"t <= {MAX_WORK / (7 * self.n) * base:.3g} here, or a slower pair: {_what_speeds(self.pair)}")
        eye = sp.identity(self.n, format="csc")
        levels = []
        for k in (1, 2, 4):
            y, t, out, lus = np.array(y0, float), 0.0, [], {}
            for target in times:
                span = target - t
                if span > 0:
                    steps = max(1, int(math.ceil(span / base - 1e-9))) * k
                    delta = span / steps
                    key = round(delta, 15)
                    if key not in lus:
                        lus[key] = splu(eye - delta * A)
                    lu = lus[key]
                    for _ in range(steps):
                        y = lu.solve(y)
                    t = target
                out.append(y)
            levels.append(np.array(out))
        return richardson(levels, ratio=2.0)

    def backward(self, f_values: np.ndarray, times: Times) -> np.ndarray:
        """u(t, x_i) = E[f(z_t) | z_0 = z_i] at ``times`` (the backward equation ∂_t u = L u, u(0) = f).

        Parameters
        ----------
        f_values : numpy.ndarray, shape (n,)
            f at the nodes ([`values`][stochformer.theory.evolution.PairChain.values]).
        times : float or sequence of float
            Times >= 0, increasing.

        Returns
        -------
        numpy.ndarray, shape (len(times), n)
            u at each time and node.
        """
        return self._solve(self.Q, np.asarray(f_values, float), _times(times))

    def forward(self, p0: np.ndarray, times: Times) -> np.ndarray:
        """The chain's law p(t) (cell masses) at ``times`` from p(0) = p0 (∂_t p = Lᵀ p).

        Parameters
        ----------
        p0 : numpy.ndarray, shape (n,)
            The initial cell masses.
        times : float or sequence of float
            Times >= 0, increasing.

        Returns
        -------
        numpy.ndarray, shape (len(times), n)
            The cell masses at each time.
        """
        return self._solve(self.Q.T.tocsc(), np.asarray(p0, float), _times(times))

    def at(self, u: np.ndarray, z0: float) -> np.ndarray:
        """Nodal arrays at z0 by 4-point Lagrange interpolation in x (O(h⁴)).

        Parameters
        ----------
        u : numpy.ndarray, shape (..., n)
            Values at the nodes.
        z0 : float
            A cosine in (−1, 1).

        Returns
        -------
        numpy.ndarray, shape (...)
            u at z0.
        """
        x0 = float(atanh(np.array(z0)))
        j = int(np.clip(np.floor((x0 - self.x[0]) / self.h) - 1, 0, self.n - 4))
        xs = self.x[j: j + 4]
        L = np.array([np.prod([(x0 - xs[m]) / (xs[k] - xs[m]) for m in range(4) if m != k]) for k in range(4)])
        return u[..., j: j + 4] @ L

    def point_mass(self, z0: float) -> np.ndarray:
        """A law concentrated at z0, split between the two nearest nodes in proportion to x.

        Parameters
        ----------
        z0 : float
            A cosine in (−1, 1).

        Returns
        -------
        numpy.ndarray, shape (n,)
            Cell masses summing to 1.
        """
        x0 = float(atanh(np.array(z0)))
        p = np.zeros(self.n)
        u = (x0 - self.x[0]) / self.h
        j = int(np.clip(np.floor(u), 0, self.n - 2))
        frac = float(np.clip(u - j, 0.0, 1.0))
        p[j], p[j + 1] = 1 - frac, frac
        return p

    def uniform_law(self) -> np.ndarray:
        """The law of z = ⟨x₁, x₂⟩ for independent uniform tokens on S^{d−1}, density
        (1 − z²)^{(d−3)/2}/B(½, (d−1)/2), as cell masses (the end cells take the tails).

        Returns
        -------
        numpy.ndarray, shape (n,)
            Cell masses summing to 1.
        """
        pair, d = self.pair, self.pair.d
        P = pair.panels
        F0 = 0.5 * (d - 1) * (pair.logw + pair.logy)
        log_b = math.lgamma(0.5) + math.lgamma((d - 1) / 2) - math.lgamma(d / 2)
        lo = np.concatenate([[P.lo], self.edges[1:-1]])
        hi = np.concatenate([self.edges[1:-1], [P.hi]])
        logm = P.log_integral(F0, lo, hi, sub=CELL_NODES) - log_b
        return np.exp(logm)

    def top_eigenvalues(self, kill_left: bool, kill_right: bool, k: int = 2) -> np.ndarray:
        """The k largest eigenvalues of the chain's generator (k,), decreasing, ends killing (Dirichlet:
        exit at the rate to one more node beyond) or reflecting; from the symmetric form
        D^{1/2} Q D^{−1/2}, D = diag(M).

        Parameters
        ----------
        kill_left, kill_right : bool
            Whether each end kills (else reflects).
        k : int, optional
            How many eigenvalues.

        Returns
        -------
        numpy.ndarray, shape (k,)
            The eigenvalues, decreasing.
        """
        off = np.exp(-0.5 * (self.log_mass[:-1] + self.log_mass[1:]) - self.log_dscale)
        diag = -(np.concatenate([self.up, [0.0]]) + np.concatenate([[0.0], self.down]))
        P, F = self.pair.panels, self.pair.F_scale
        if kill_left:  # the exit to a node one cell beyond
            diag[0] -= math.exp(-self.log_mass[0] - float(P.log_integral(F, self.x[0] - self.h, self.x[0])))
        if kill_right:
            diag[-1] -= math.exp(-self.log_mass[-1] - float(P.log_integral(F, self.x[-1], self.x[-1] + self.h)))
        # bisection to a tiny absolute tolerance: the matrix is diagonally dominant, so its small
        # eigenvalues come out to high relative accuracy although its norm reaches ~1e13 (the rates
        # near an entrance end); the default tolerance eps·‖B‖ would not resolve them
        vals = eigh_tridiagonal(diag, off, eigvals_only=True, select="i", select_range=(self.n - k, self.n - 1),
                                lapack_driver="stebz", tol=1e-300)
        return np.sort(vals)[::-1]


def _times(times: Times) -> np.ndarray:
    t = np.atleast_1d(np.asarray(times, float))
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0) or np.any(np.diff(t) < 0):
        raise ValueError("times: must be finite, >= 0 and increasing")
    return t


@dataclass(frozen=True)
class Law:
    """The law of z_t on the chain's cells: ``edges`` in z (n + 1,), cell ``mass`` (n,) summing to 1,
    ``z`` the cells' nodes (n,).

    Attributes
    ----------
    edges : numpy.ndarray, shape (n + 1,)
        The cells' edges in z.
    mass : numpy.ndarray, shape (n,)
        The cells' masses, summing to 1.
    z : numpy.ndarray, shape (n,)
        The cells' nodes.
    """

    edges: np.ndarray
    mass: np.ndarray
    z: np.ndarray

    def mean(self) -> float:
        """E z_t (the mass of each cell at its node).

        Returns
        -------
        float
            The mean cosine.
        """
        return float(self.mass @ self.z)

    def density(self) -> np.ndarray:
        """Mass per unit z of each cell.

        Returns
        -------
        numpy.ndarray, shape (n,)
            The density.
        """
        return self.mass / np.diff(self.edges)

    def cdf(self, q: float) -> float:
        """P(z_t ≤ q), linear within the cell holding q.

        Parameters
        ----------
        q : float
            A cosine.

        Returns
        -------
        float
            The probability.
        """
        i = int(np.clip(np.searchsorted(self.edges, q) - 1, 0, len(self.mass) - 1))
        frac = (q - self.edges[i]) / (self.edges[i + 1] - self.edges[i])
        return float(self.mass[:i].sum() + np.clip(frac, 0, 1) * self.mass[i])


@validated
def law(pair: Pair, z0: float, t: Annotated[float, Real(0.0)], h: CellWidth = CELL_WIDTH) -> Law:
    """The law of z_t given z_0 = z0 (forward equation on the chain of cell width h).

    Parameters
    ----------
    pair : PairDiffusion or ValuePair
        The diffusion of the overlap z.
    z0 : float
        The starting cosine, in (−1, 1).
    t : float
        The time, >= 0.
    h : float, optional
        The cell width in x = atanh z.

    Returns
    -------
    Law
        The cell masses at time t.
    """
    z0 = float(check_cosines("z0", z0))
    chain = PairChain(pair, h, z0)
    p = chain.forward(chain.point_mass(z0), [t])[0]
    p = np.clip(p, 0.0, None)
    return Law(np.tanh(chain.edges), p / p.sum(), chain.z)


@validated
def expectation(pair: Pair, f: Callable[..., np.ndarray], times: Times,
                z0: Optional[float] = None, h: CellWidth = CELL_WIDTH, levels: Annotated[int, Int(1, 4)] = 2,
                weights: Optional[Callable[[PairChain], np.ndarray]] = None, distances: bool = False) -> np.ndarray:
    """E[f(z_t)] at ``times`` from z_0 = z0, or with z_0 drawn from ``weights(chain)`` (cell masses;
    default with z0 None: the law of ⟨x₁, x₂⟩ for independent uniform tokens): (len(times),).

    ``f`` maps an array of cosines to an array of values (vectorised), or with ``distances`` the
    arrays 1 − z and 1 + z (accurate near the ends) to values. The chains of width h, h/2, …
    (``levels`` of them) are combined by Richardson extrapolation in h² (levels = 2:
    (4 E_{h/2} − E_h)/3, error O(h⁴); 3: O(h⁶)).

    Parameters
    ----------
    pair : PairDiffusion or ValuePair
        The diffusion of the overlap z.
    f : callable
        Vectorised observable (of z, or of 1 − z and 1 + z with ``distances``).
    times : float or sequence of float
        Times >= 0, increasing.
    z0 : float, optional
        The starting cosine (None: drawn from ``weights``).
    h : float, optional
        The coarsest cell width.
    levels : int, optional
        Chains combined by Richardson extrapolation, 1..4.
    weights : callable, optional
        chain ↦ cell masses of the initial law (default: the uniform tokens' law).
    distances : bool, optional
        Call f with 1 − z and 1 + z.

    Returns
    -------
    numpy.ndarray, shape (len(times),)
        E f(z_t).
    """
    if z0 is not None:
        z0 = float(check_cosines("z0", z0))
    ts = _times(times)

    def one(width: float) -> np.ndarray:
        chain = PairChain(pair, width, z0)
        u = chain.backward(chain.values(f, distances), ts)
        if z0 is not None:
            return chain.at(u, z0)
        w = (weights or PairChain.uniform_law)(chain)
        return u @ w

    return richardson([one(h / 2 ** k) for k in range(levels)])


def richardson(values: Sequence[Any], ratio: float = 4.0) -> Any:
    """Aitken–Neville extrapolation of values at h, h/2, h/4, … with an error expansion in h²
    (``ratio`` = 2² per halving): the last entry of the table.

    Parameters
    ----------
    values : sequence
        Numbers or arrays at h, h/2, h/4, …
    ratio : float, optional
        The factor of the leading error term per halving.

    Returns
    -------
    float or numpy.ndarray
        The extrapolated value.
    """
    table = list(values)
    if not table:
        raise ValueError("richardson: needs at least one value")
    factor = ratio
    while len(table) > 1:
        table = [(factor * b - a) / (factor - 1) for a, b in zip(table[:-1], table[1:])]
        factor *= ratio
    return table[0]
