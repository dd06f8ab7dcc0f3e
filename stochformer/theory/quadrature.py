"""Panel quadrature on an interval of the real line, in log space (the numerics of SPEC §8's pair theory).

A function of x is held by its values at the Gauss–Legendre nodes of consecutive panels
``[e_p, e_{p+1}]`` (``n`` nodes each: values of shape (P, n)). Two kinds of integral are formed:

* plain cumulative integrals ``∫_{e_0}^{x} f`` of a smooth f (exact for the degree n−1
  interpolant of f on every panel);
* integrals of ``P(x) e^{F(x)}`` with F smooth but possibly steep and of any size (|F| up to
  10³ and more) and P ≥ 0 smooth, returned as logarithms. F and P are interpolated on each panel
  (barycentric Lagrange through the nodes) and ``P e^{F}`` is integrated over the wanted part of
  the panel by an ``m``-point Gauss–Legendre rule, the largest term factored out (log-sum-exp).
  With n = 16, m = 24 this is accurate to about 1e-14 relative as long as F changes by at most
  about 10 over a panel and varies smoothly (the panels are sized for this by the callers).

Tails beyond the ends of the panels are added from the asymptotic slope k of F there:
``∫_{e_P}^{∞} e^{F} = e^{F(e_P)}/|k|`` (k < 0), ``∫_{−∞}^{e_0} e^{F} = e^{F(e_0)}/k`` (k > 0);
``inf`` where the slope does not give a finite tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

#: Gauss–Legendre nodes per panel (values are held there)
NODES = 16
#: Gauss–Legendre nodes of the rule on a part of a panel
SUB_NODES = 24


def logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """log Σ e^{a} along ``axis`` (−inf for an empty or all −inf sum; +inf if any term is +inf)."""
    a = np.asarray(a, float)
    m = np.max(a, axis=axis, keepdims=True) if a.shape[axis] else np.full(a.shape[:axis] + (1,) + a.shape[axis + 1:], -np.inf)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.sum(np.exp(a - safe), axis=axis, keepdims=True)
        out = np.log(s) + safe
    out = np.where(np.isposinf(m), np.inf, out)
    return np.squeeze(out, axis=axis)


def barycentric_weights(t: np.ndarray) -> np.ndarray:
    """Weights λ_k = 1/Π_{i≠k}(t_k − t_i) of barycentric Lagrange interpolation through nodes t (n,)."""
    diff = t[:, None] - t[None, :]
    np.fill_diagonal(diff, 1.0)
    return 1.0 / np.prod(diff, axis=1)


def interpolation_matrix(t: np.ndarray, lam: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Matrix M of shape s.shape + (n,) with Σ_k M[..., k] f(t_k) = the interpolant of f at s."""
    s = np.asarray(s, float)
    diff = s[..., None] - t
    exact = diff == 0.0
    q = lam / np.where(exact, 1.0, diff)
    M = q / q.sum(axis=-1, keepdims=True)
    hit = exact.any(axis=-1)
    if hit.any():
        M[hit] = exact[hit].astype(float)
    return M


@dataclass(frozen=True)
class _Reference:
    """The reference panel [−1, 1]: nodes, weights, barycentric weights, the plain spectral
    integration matrix and the sub-rules of [−1, t_j] and [t_j, 1]."""

    n: int
    m: int

    @cached_property
    def rule(self) -> tuple[np.ndarray, np.ndarray]:
        return np.polynomial.legendre.leggauss(self.n)

    @cached_property
    def sub_rule(self) -> tuple[np.ndarray, np.ndarray]:
        return np.polynomial.legendre.leggauss(self.m)

    @cached_property
    def lam(self) -> np.ndarray:
        return barycentric_weights(self.rule[0])

    @cached_property
    def integration(self) -> np.ndarray:
        """C (n, n): ∫_{−1}^{t_j} p = Σ_k C_jk p(t_k) for polynomials p of degree < n."""
        t = self.rule[0]
        V = np.polynomial.legendre.legvander(t, self.n - 1)  # V[j, i] = P_i(t_j)
        ints = np.stack([np.polynomial.legendre.legval(t, np.polynomial.legendre.legint(np.eye(self.n)[i], lbnd=-1))
                         for i in range(self.n)], axis=1)  # ints[j, i] = ∫_{-1}^{t_j} P_i
        return ints @ np.linalg.inv(V)

    def part(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For parts [lo, hi] of [−1, 1] (arrays of one shape S): the interpolation matrix to the
        sub-rule's nodes (S + (m, n)) and the sub-rule's weights (S + (m,))."""
        tau, om = self.sub_rule
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        half = (hi - lo)[..., None] / 2
        s = lo[..., None] + half * (tau + 1)
        return interpolation_matrix(self.rule[0], self.lam, s), half * om

    @cached_property
    def left_parts(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.rule[0]
        return self.part(np.full(self.n, -1.0), t)

    @cached_property
    def right_parts(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.rule[0]
        return self.part(t, np.full(self.n, 1.0))


_REFERENCES: dict[tuple[int, int], _Reference] = {}


def reference(n: int = NODES, m: int = SUB_NODES) -> _Reference:
    key = (n, m)
    if key not in _REFERENCES:
        _REFERENCES[key] = _Reference(n, m)
    return _REFERENCES[key]


class Panels:
    """Consecutive panels with edges ``edges`` (P + 1,), increasing, and ``n`` Gauss–Legendre nodes each.

    Nodal arrays have shape (P, n). ``x`` are the nodes, ``weights`` the Gauss–Legendre weights."""

    def __init__(self, edges: np.ndarray, n: int = NODES, m: int = SUB_NODES):
        edges = np.asarray(edges, float)
        if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0):
            raise ValueError("edges: must be an increasing 1-D array of at least 2 numbers")
        self.edges = edges
        self.n, self.m = n, m
        self.ref = reference(n, m)
        t, w = self.ref.rule
        self.half = np.diff(edges) / 2  # (P,)
        self.x = edges[:-1, None] + self.half[:, None] * (t + 1)
        self.weights = self.half[:, None] * w

    @property
    def panels(self) -> int:
        return len(self.edges) - 1

    @property
    def lo(self) -> float:
        return float(self.edges[0])

    @property
    def hi(self) -> float:
        return float(self.edges[-1])

    def locate(self, x) -> tuple[np.ndarray, np.ndarray]:
        """Panel index of each x (clipped to the panels) and its reference coordinate in [−1, 1]."""
        x = np.asarray(x, float)
        p = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.panels - 1)
        u = np.clip((x - self.edges[p]) / self.half[p] - 1.0, -1.0, 1.0)
        return p, u

    def interp(self, values: np.ndarray, x) -> np.ndarray:
        """The panel-wise interpolant of nodal ``values`` (P, n) at points x (any shape; clipped to the panels)."""
        p, u = self.locate(x)
        M = interpolation_matrix(self.ref.rule[0], self.ref.lam, u)
        return np.einsum("...k,...k->...", M, values[p])

    # ------------------------------------------------------------------ plain integrals

    def cumulative(self, values: np.ndarray, start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """``start + ∫_{e_0}^{x} f`` at the nodes (P, n) and at the edges (P + 1,)."""
        within = (values @ self.ref.integration.T) * self.half[:, None]
        totals = (values * self.weights).sum(axis=1)
        at_edges = start + np.concatenate([[0.0], np.cumsum(totals)])
        return at_edges[:-1, None] + within, at_edges

    def cumulative_right(self, values: np.ndarray, end: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """``end + ∫_{x}^{e_P} f`` at the nodes and at the edges (summed from the right: no
        cancellation against the values left of x)."""
        within = (values @ self.ref.integration.T) * self.half[:, None]
        totals = (values * self.weights).sum(axis=1)
        at_edges = end + np.concatenate([np.cumsum(totals[::-1])[::-1], [0.0]])
        return at_edges[1:, None] + (totals[:, None] - within), at_edges

    # ------------------------------------------------------------------ log-space integrals

    def _log_terms(self, F_sub: np.ndarray, w_sub: np.ndarray, P_sub: Optional[np.ndarray]) -> np.ndarray:
        with np.errstate(divide="ignore"):
            logw = np.log(w_sub)
            if P_sub is not None:
                logw = logw + np.log(np.clip(P_sub, 0.0, None))
        return logsumexp(F_sub + logw, axis=-1)

    def log_panels(self, F: np.ndarray, P: Optional[np.ndarray] = None) -> np.ndarray:
        """log ∫ P e^{F} over each whole panel (P,), from the nodal values (no interpolation)."""
        with np.errstate(divide="ignore"):
            logw = np.log(self.weights) + (np.log(np.clip(P, 0.0, None)) if P is not None else 0.0)
        return logsumexp(F + logw, axis=1)

    def _log_within(self, F: np.ndarray, P: Optional[np.ndarray], side: str) -> np.ndarray:
        """log ∫ P e^{F} from each panel's left edge to each node ("left"), or from each node to the
        panel's right edge ("right"): (P, n)."""
        M, w = self.ref.left_parts if side == "left" else self.ref.right_parts  # (n, m, n), (n, m)
        F_sub = np.einsum("jlk,pk->pjl", M, F)
        P_sub = None if P is None else np.einsum("jlk,pk->pjl", M, P)
        return self._log_terms(F_sub, w[None] * self.half[:, None, None], P_sub)

    def log_cumulative(self, F: np.ndarray, P: Optional[np.ndarray] = None, tail: float = -np.inf
                       ) -> tuple[np.ndarray, np.ndarray]:
        """log(e^{tail} + ∫_{e_0}^{x} P e^{F}) at the nodes (P, n) and at the edges (P + 1,)."""
        at_edges = np.logaddexp.accumulate(np.concatenate([[tail], self.log_panels(F, P)]))
        return np.logaddexp(at_edges[:-1, None], self._log_within(F, P, "left")), at_edges

    def log_cumulative_right(self, F: np.ndarray, P: Optional[np.ndarray] = None, tail: float = -np.inf
                             ) -> tuple[np.ndarray, np.ndarray]:
        """log(e^{tail} + ∫_{x}^{e_P} P e^{F}) at the nodes and at the edges."""
        rev = np.logaddexp.accumulate(np.concatenate([[tail], self.log_panels(F, P)[::-1]]))
        at_edges = rev[::-1]
        return np.logaddexp(at_edges[1:, None], self._log_within(F, P, "right")), at_edges

    def log_part(self, F: np.ndarray, p: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 P: Optional[np.ndarray] = None, sub: Optional[int] = None) -> np.ndarray:
        """log ∫_{lo}^{hi} P e^{F} within panel p (arrays of one shape; lo ≤ hi inside panel p), by a
        ``sub``-point rule (default the grid's m)."""
        p = np.asarray(p)
        ref = self.ref if sub is None else reference(self.n, sub)
        ulo = (np.asarray(lo, float) - self.edges[p]) / self.half[p] - 1.0
        uhi = (np.asarray(hi, float) - self.edges[p]) / self.half[p] - 1.0
        M, w = ref.part(np.clip(ulo, -1, 1), np.clip(uhi, -1, 1))
        F_sub = np.einsum("...lk,...k->...l", M, F[p])
        P_sub = None if P is None else np.einsum("...lk,...k->...l", M, P[p])
        return self._log_terms(F_sub, w * self.half[p][..., None], P_sub)

    def log_integral(self, F: np.ndarray, a, b, P: Optional[np.ndarray] = None, sub: Optional[int] = None) -> np.ndarray:
        """log ∫_{a}^{b} P e^{F} for arrays a ≤ b inside the panels (any shape; −inf where a = b); the
        parts of panels by ``sub``-point rules (default the grid's m; fewer for short intervals)."""
        a, b = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float))
        if np.any(b < a):
            raise ValueError("log_integral: needs a <= b")
        shape = a.shape
        a, b = a.ravel(), b.ravel()
        pa, _ = self.locate(a)
        pb, _ = self.locate(b)
        out = np.empty(a.shape)
        same = pa == pb
        if same.any():
            out[same] = self.log_part(F, pa[same], a[same], b[same], P, sub)
        apart = np.flatnonzero(~same)
        if len(apart):
            i, j = pa[apart], pb[apart]
            first = self.log_part(F, i, a[apart], self.edges[i + 1], P, sub)
            last = self.log_part(F, j, self.edges[j], b[apart], P, sub)
            whole = self.log_panels(F, P)
            middle = np.array([logsumexp(whole[u + 1:v]) if v > u + 1 else -np.inf for u, v in zip(i, j)])
            out[apart] = logsumexp(np.stack([first, middle, last]), axis=0)
        return out.reshape(shape)

    # ------------------------------------------------------------------ a shorter grid

    def truncate(self, hi: float) -> tuple["Panels", "Carry"]:
        """The panels up to ``hi`` (the panel holding hi cut there), and the map of nodal arrays onto them."""
        if not self.lo < hi <= self.hi:
            raise ValueError(f"truncate: hi must be in ({self.lo:g}, {self.hi:g}]")
        p = int(np.clip(np.searchsorted(self.edges, hi, side="left") - 1, 0, self.panels - 1))
        edges = np.concatenate([self.edges[: p + 1], [hi]])
        if hi - edges[-2] < 1e-9 * max(1.0, self.half[p]) and p > 0:  # hi on an edge: drop the sliver
            edges = np.concatenate([self.edges[:p], [hi]])
            p -= 1
        short = Panels(edges, self.n, self.m)
        return short, Carry(self, short, p)


class Carry:
    """Nodal arrays of ``full`` carried onto ``short`` = ``full`` truncated in panel p (the last
    panel of ``short`` is interpolated from panel p of ``full``)."""

    def __init__(self, full: Panels, short: Panels, p: int):
        self.full, self.short, self.p = full, short, p
        _, u = full.locate(short.x[-1])
        self.M = interpolation_matrix(full.ref.rule[0], full.ref.lam, u)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        head = values[: self.short.panels - 1]
        return np.concatenate([head, (self.M @ values[self.p])[None]], axis=0)
