"""Distances between empirical measures on the sphere and their rates (SPEC §4).

W₂² between two clouds (uniform weights), exact through POT's network simplex or sliced, and the
rates that bound it: r_d(N) of Proposition 1.2 and the sharp order for measures with a density.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..core.extras import require


@dataclass(frozen=True)
class W2Result:
    """W₂² between two empirical measures (uniform weights), and how it was computed.

    Attributes
    ----------
    value : float
        W₂² (or the sliced distance).
    method : {"exact", "sliced"}
        How it was computed.
    warning : str or None
        POT's message when the iteration cap was hit (the value is then an upper bound).
    """

    value: float
    method: str  # "exact" (POT network simplex) or "sliced" (Euclidean projections)
    warning: Optional[str] = None  # POT's message when the iteration cap was hit


def w2_exact(X: np.ndarray, Y: np.ndarray, max_iter: int = 10**8) -> W2Result:
    """Exact W₂² (squared Euclidean cost) between the empirical measures of X (n, d) and Y (m, d),
    by POT's network simplex with the iteration cap raised to ``max_iter``; a cap warning is
    caught and returned (the value is then only an upper bound).

    Parameters
    ----------
    X : numpy.ndarray, shape (n, d)
        The first cloud.
    Y : numpy.ndarray, shape (m, d)
        The second cloud.
    max_iter : int, optional
        The network simplex's iteration cap.

    Returns
    -------
    W2Result
        The value, ``method="exact"`` and any warning.
    """
    ot = require("ot", "exact W₂")

    M = ot.dist(X, Y, metric="sqeuclidean")
    a, b = np.full(len(X), 1.0 / len(X)), np.full(len(Y), 1.0 / len(Y))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cost, log = ot.emd2(a, b, M, numItermax=max_iter, log=True)
    msgs = [str(w.message) for w in caught] + ([log["warning"]] if log.get("warning") else [])
    return W2Result(float(cost), "exact", "; ".join(msgs) or None)


def w2_sliced(X: np.ndarray, Y: np.ndarray, projections: int = 200, seed: int = 0) -> W2Result:
    """Sliced W₂² (mean over ``projections`` random directions of the 1-D W₂², Euclidean
    projections of the points in R^d): a different, smaller distance than W₂², labelled as such.

    Parameters
    ----------
    X : numpy.ndarray, shape (n, d)
        The first cloud.
    Y : numpy.ndarray, shape (m, d)
        The second cloud.
    projections : int, optional
        Random directions.
    seed : int, optional
        Seed of the directions.

    Returns
    -------
    W2Result
        The value and ``method="sliced"``.
    """
    ot = require("ot", "sliced W₂")

    sw = ot.sliced_wasserstein_distance(X, Y, n_projections=projections, p=2, seed=seed)
    return W2Result(float(sw) ** 2, "sliced")


def w2_squared(X: np.ndarray, Y: np.ndarray, exact_max: int, projections: int = 200, seed: int = 0) -> W2Result:
    """Exact W₂² when both clouds have at most ``exact_max`` points, sliced W₂² beyond.

    Parameters
    ----------
    X : numpy.ndarray, shape (n, d)
        The first cloud.
    Y : numpy.ndarray, shape (m, d)
        The second cloud.
    exact_max : int
        The most points for the exact distance.
    projections : int, optional
        Random directions of the sliced distance.
    seed : int, optional
        Seed of the directions.

    Returns
    -------
    W2Result
        Exact or sliced, labelled.
    """
    if max(len(X), len(Y)) <= exact_max:
        return w2_exact(X, Y)
    return w2_sliced(X, Y, projections, seed)


def rate_function(d: int, N) -> np.ndarray:
    """r_d(N) of Proposition 1.2 (SPEC §4): N^{-1/2} (d < 4), N^{-1/2} log(1+N) (d = 4), N^{-2/d} (d > 4).

    Parameters
    ----------
    d : int
        The ambient dimension.
    N : int or array_like
        Sample sizes.

    Returns
    -------
    numpy.ndarray
        r_d(N), of N's shape.
    """
    N = np.asarray(N, dtype=float)
    if d < 4:
        return N**-0.5
    if d == 4:
        return N**-0.5 * np.log1p(N)
    return N ** (-2.0 / d)


def sphere_rate(d: int, N) -> np.ndarray:
    """The sharp order of E W₂²(μ^N, μ) for i.i.d. samples of a measure with a bounded, positive
    density on S^{d−1}, a manifold of dimension k = d − 1: N^{-1} (k = 1), log(1+N)/N (k = 2,
    Ajtai–Komlós–Tusnády), N^{-2/k} (k ≥ 3). r_d(N) is a bound for any measure on R^d and is not
    attained by such measures.

    Parameters
    ----------
    d : int
        The ambient dimension (the sphere has dimension d − 1).
    N : int or array_like
        Sample sizes.

    Returns
    -------
    numpy.ndarray
        The order, of N's shape (without its constant).
    """
    N, k = np.asarray(N, dtype=float), d - 1
    if k == 1:
        return 1.0 / N
    if k == 2:
        return np.log1p(N) / N
    return N ** (-2.0 / k)
