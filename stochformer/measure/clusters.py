"""Cluster structure of a token cloud (SPEC §5, §6 item 1).

Tokens ``X: (batch, N, d)`` (or ``(N, d)``), unit rows. Two tokens are *linked* when their cosine
is at least ``1 − tol``; clusters are the connected components of that graph (single linkage).
An odd noise field synchronises tokens only up to sign, so the attractor is a pair of antipodal
clusters; [`antipodal_pairs`][stochformer.measure.clusters.antipodal_pairs] counts cluster pairs whose centres have cosine ``≤ −1 + tol``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.sparse.csgraph import connected_components

from ..core.sphere import gram, normalize


def _batched(X) -> torch.Tensor:
    X = torch.as_tensor(X, dtype=torch.float64)
    return X.unsqueeze(0) if X.dim() == 2 else X


def cluster_labels(X, tol: float = 1e-2, up_to_sign: bool = False) -> np.ndarray:
    """Cluster label of every token: (batch, N) ints, clusters numbered 0, 1, ... by first token.
    ``up_to_sign``: clusters of points of projective space {x, −x} (linked when |cos| ≥ 1 − tol),
    so two antipodal clusters are one.

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.
    tol : float, optional
        Tokens with cosine >= 1 − tol are linked (single linkage).
    up_to_sign : bool, optional
        Link x and −x too (clusters of projective space).

    Returns
    -------
    numpy.ndarray, shape (batch, N)
        Integer labels.
    """
    G = gram(_batched(X)).cpu().numpy()
    G = np.abs(G) if up_to_sign else G
    labels = np.empty(G.shape[:2], dtype=np.int64)
    for b in range(G.shape[0]):  # one graph per sample; the tokens inside are handled by scipy
        labels[b] = connected_components(G[b] >= 1.0 - tol, directed=False)[1]
    return labels


def count_clusters(X, tol: float = 1e-2, up_to_sign: bool = False) -> np.ndarray:
    """Number of clusters per sample at tolerance ``tol`` (of projective space with ``up_to_sign``):
    (batch,) ints.

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.
    tol : float, optional
        Tokens with cosine >= 1 − tol are linked (single linkage).
    up_to_sign : bool, optional
        Link x and −x too (clusters of projective space).

    Returns
    -------
    numpy.ndarray, shape (batch,)
        Clusters per sample.
    """
    return cluster_labels(X, tol, up_to_sign).max(axis=1) + 1


def cluster_centres(X, labels: np.ndarray) -> list[np.ndarray]:
    """Per sample, the normalised mean of each cluster: a list of (n_clusters_b, d) arrays.

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.
    labels : numpy.ndarray, shape (batch, N)
        Labels of [`cluster_labels`][stochformer.measure.clusters.cluster_labels].

    Returns
    -------
    list of numpy.ndarray
        Per sample, (n_clusters, d) unit centres.
    """
    Xb = _batched(X)
    out = []
    for b in range(Xb.shape[0]):
        lab = torch.as_tensor(labels[b])
        k = int(lab.max()) + 1
        sums = torch.zeros(k, Xb.shape[-1], dtype=Xb.dtype).index_add_(0, lab, Xb[b])
        out.append(normalize(sums).numpy())
    return out


def antipodal_pairs(X, tol: float = 1e-2) -> np.ndarray:
    """Number of pairs of clusters whose centres have cosine ≤ −1 + tol, per sample: (batch,).

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.
    tol : float, optional
        The clustering tolerance, and how close to −1 a centres' cosine must be.

    Returns
    -------
    numpy.ndarray, shape (batch,)
        Antipodal cluster pairs per sample.
    """
    labels = cluster_labels(X, tol)
    counts = []
    for C in cluster_centres(X, labels):
        cos = C @ C.T
        counts.append(int(np.triu(cos <= -1.0 + tol, k=1).sum()))
    return np.asarray(counts)


def pair_cosines(X) -> np.ndarray:
    """Cosines ⟨x_i, x_j⟩ over pairs i < j: (batch, N(N−1)/2).

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.

    Returns
    -------
    numpy.ndarray, shape (batch, N(N−1)/2)
        The cosines, pairs in row-major order of i < j.
    """
    G = gram(_batched(X))
    i, j = torch.triu_indices(G.shape[-1], G.shape[-1], offset=1, device=G.device)
    return G[:, i, j].cpu().numpy()


@dataclass
class ClusterSummary:
    """Cluster statistics of a batch of clouds at tolerance ``tol`` (all per-sample arrays (batch,)).

    ``n_projective``: clusters of points {x, −x} of projective space (an antipodal pair counts once);
    ``frac_near_plus`` / ``frac_near_minus``: fraction of pairs with cosine ≥ 1 − tol / ≤ −1 + tol;
    ``histogram``: counts of all pair cosines in ``bins`` (pooled over samples).

    Attributes
    ----------
    tol : float
        The clustering tolerance.
    n_clusters, n_projective, n_antipodal : numpy.ndarray, shape (batch,)
        Clusters, clusters of projective space and antipodal cluster pairs.
    frac_near_plus, frac_near_minus : numpy.ndarray, shape (batch,)
        Fractions of pairs near +1 and −1.
    bins : numpy.ndarray
        The histogram's edges on [−1, 1].
    histogram : numpy.ndarray
        Counts of the pair cosines, pooled over samples.
    """

    tol: float
    n_clusters: np.ndarray
    n_projective: np.ndarray
    n_antipodal: np.ndarray
    frac_near_plus: np.ndarray
    frac_near_minus: np.ndarray
    bins: np.ndarray
    histogram: np.ndarray

    def to_dict(self) -> dict:
        """The summary as JSON-able values.

        Returns
        -------
        dict
            The fields, arrays as lists.
        """
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in asdict(self).items()}


def summarise_clusters(X, tol: float = 1e-2, bins: int = 40) -> ClusterSummary:
    """Clusters, antipodal cluster pairs and the distribution of pair cosines of X: (batch, N, d).

    Parameters
    ----------
    X : torch.Tensor or numpy.ndarray, shape (batch, N, d)
        Token clouds, unit rows.
    tol : float, optional
        The clustering tolerance.
    bins : int, optional
        Bins of the histogram of pair cosines.

    Returns
    -------
    ClusterSummary
        The per-sample counts and the pooled histogram.
    """
    cos = pair_cosines(X)
    edges = np.linspace(-1.0, 1.0, bins + 1)
    hist, _ = np.histogram(np.clip(cos, -1.0, 1.0), bins=edges)
    return ClusterSummary(
        tol=tol,
        n_clusters=count_clusters(X, tol),
        n_projective=count_clusters(X, tol, up_to_sign=True),
        n_antipodal=antipodal_pairs(X, tol),
        frac_near_plus=(cos >= 1.0 - tol).mean(axis=1),
        frac_near_minus=(cos <= -1.0 + tol).mean(axis=1),
        bins=edges,
        histogram=hist,
    )
