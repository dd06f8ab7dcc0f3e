"""Geometry of S^{d−1} and initial tokens.

Convention: token arrays are ``X: (batch, N, d)`` with unit rows. The initial-token functions
take either a ``seed`` or a ``generator`` (the run's, so that a run's draws follow one stream):

```python
X0 = sphere.uniform(batch=16, N=64, d=4, seed=0)
```
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from .validation import (
    Cosine,
    DeviceLike,
    FloatDtype,
    NonNegativeFloat,
    PositiveInt,
    Seed,
    check_int,
    check_memory,
    check_tensor,
    same_device,
    validated,
)

#: token dimensions d >= 2 (S^{d−1} has a tangent space)
_D_MIN = 2


def normalize(X: torch.Tensor) -> torch.Tensor:
    r"""The idealised LayerNorm of SPEC §1, $\mathrm{LN}(v) = v/|v|$, on the last axis.

    Parameters
    ----------
    X : torch.Tensor, shape (..., d)
        Non-zero vectors (a zero row gives NaN).

    Returns
    -------
    torch.Tensor, shape (..., d)
        The rows scaled to unit norm, same dtype and device.
    """
    return X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)


def tangent(X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    r"""The projection onto the tangent space of the sphere at x, rowwise:

    $$
    P_x v = v - \langle x, v\rangle\, x .
    $$

    Parameters
    ----------
    X : torch.Tensor, shape (..., d)
        Unit rows (the base points).
    V : torch.Tensor, shape (..., d)
        The vectors to project (broadcast against ``X``).

    Returns
    -------
    torch.Tensor, shape (..., d)
        $P_x v$, orthogonal to each row of ``X``.
    """
    return V - (X * V).sum(-1, keepdim=True) * X


def gram(X: torch.Tensor) -> torch.Tensor:
    r"""The Gram matrix of the tokens, $G_{ij} = \langle x_i, x_j\rangle$ (cosines for unit rows).

    Parameters
    ----------
    X : torch.Tensor, shape (batch, N, d)
        Tokens.

    Returns
    -------
    torch.Tensor, shape (batch, N, N)
        Symmetric, with the squared norms on the diagonal.
    """
    return X @ X.transpose(-1, -2)


def _gen(seed: Optional[int], generator: Optional[torch.Generator], device) -> torch.Generator:
    if generator is not None:
        if not same_device(generator.device, device):
            raise ValueError(f"generator: is on {generator.device}, the tokens on {torch.device(device)}; "
                             "give them the same device")
        return generator
    if seed is None:
        raise ValueError("seed: give a seed or a generator")
    return torch.Generator(device=device).manual_seed(int(seed))


@validated
def uniform(
    batch: PositiveInt, N: PositiveInt, d: PositiveInt, seed: Optional[Seed] = None, generator: Optional[torch.Generator] = None,
    dtype: FloatDtype = torch.float64, device: DeviceLike = "cpu",
) -> torch.Tensor:
    r"""i.i.d. uniform tokens on the sphere $S^{d-1}$: normalised standard normals.

    Parameters
    ----------
    batch : int
        Independent samples, >= 1.
    N : int
        Tokens per sample, >= 1.
    d : int
        Token dimension, >= 2.
    seed : int, optional
        Seed of a fresh generator (give ``seed`` or ``generator``).
    generator : torch.Generator, optional
        The generator to draw from, on ``device``.
    dtype : torch.dtype, optional
        float32 or float64 (the default).
    device : str or torch.device, optional
        Where the tokens live.

    Returns
    -------
    torch.Tensor, shape (batch, N, d)
        Unit rows.

    Raises
    ------
    ValueError
        An argument out of range (naming it), or tokens too large for the memory.

    Examples
    --------
    >>> from stochformer import sphere
    >>> X = sphere.uniform(batch=2, N=5, d=3, seed=0)
    >>> X.shape, bool((X.norm(dim=-1) - 1).abs().max() < 1e-12)
    (torch.Size([2, 5, 3]), True)
    """
    check_int("d", d, _D_MIN)
    check_memory("batch, N, d", 3.0 * batch * N * d * dtype.itemsize)
    return normalize(torch.randn(batch, N, d, generator=_gen(seed, generator, device), dtype=dtype, device=device))


@validated
def random_rotations(batch: PositiveInt, d: PositiveInt, generator: torch.Generator, dtype: FloatDtype = torch.float64,
                     device: DeviceLike = "cpu") -> torch.Tensor:
    """Haar-distributed orthogonal matrices: the Q of the QR decomposition of a standard Gaussian
    matrix, its columns' signs fixed by the diagonal of R (so the law is exactly Haar).

    Parameters
    ----------
    batch : int
        Number of matrices, >= 1.
    d : int
        Their size, >= 1.
    generator : torch.Generator
        The generator to draw from, on ``device``.
    dtype : torch.dtype, optional
        float32 or float64 (the default).
    device : str or torch.device, optional
        Where the matrices live.

    Returns
    -------
    torch.Tensor, shape (batch, d, d)
        Orthogonal matrices.
    """
    _gen(None, generator, device)
    check_memory("batch, d", 4.0 * batch * d * d * dtype.itemsize)
    A = torch.randn(batch, d, d, generator=generator, dtype=dtype, device=device)
    Qm, R = torch.linalg.qr(A)
    return Qm * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)


@validated
def cluster(
    batch: PositiveInt, N: PositiveInt, d: PositiveInt, spread: NonNegativeFloat = 0.1, center: Optional[Sequence[float]] = None,
    seed: Optional[Seed] = None, generator: Optional[torch.Generator] = None, dtype: FloatDtype = torch.float64,
    device: DeviceLike = "cpu",
) -> torch.Tensor:
    r"""Tokens clustered around one direction: $x = \mathrm{LN}(c + s\,g)$ with g standard Gaussian
    in $\mathbb{R}^d$, c the unit vector of ``center`` and s = ``spread``.

    Parameters
    ----------
    batch : int
        Independent samples, >= 1.
    N : int
        Tokens per sample, >= 1.
    d : int
        Token dimension, >= 2.
    spread : float, optional
        s >= 0: 0 puts every token at c; large s tends to the uniform law.
    center : sequence of float, optional
        d finite numbers, not all 0 (normalised); default $e_1$.
    seed : int, optional
        Seed of a fresh generator (give ``seed`` or ``generator``).
    generator : torch.Generator, optional
        The generator to draw from, on ``device``.
    dtype : torch.dtype, optional
        float32 or float64 (the default).
    device : str or torch.device, optional
        Where the tokens live.

    Returns
    -------
    torch.Tensor, shape (batch, N, d)
        Unit rows.
    """
    check_int("d", d, _D_MIN)
    check_memory("batch, N, d", 3.0 * batch * N * d * dtype.itemsize)
    kw: dict[str, Any] = dict(dtype=dtype, device=device)
    c = torch.zeros(d, **kw)
    if center is None:
        c[0] = 1.0
    else:
        given = check_tensor("center", center, ("d",))
        if given.shape != (d,) or not bool(given.abs().max() > 0):
            raise ValueError(f"center: must be a non-zero vector of d = {d} finite numbers (got shape {tuple(given.shape)})")
        c = normalize((given / given.abs().max()).to(**kw))
    g = torch.randn(batch, N, d, generator=_gen(seed, generator, device), **kw)
    # LN(c + spread g) = LN(c / spread + g): the larger term scaled to order 1 (no overflow of |·|²)
    return normalize(c + spread * g) if spread <= 1 else normalize(c / spread + g)


@validated
def pair(
    batch: PositiveInt, d: PositiveInt, cosine: Cosine = 0.5, seed: Optional[Seed] = None,
    generator: Optional[torch.Generator] = None, dtype: FloatDtype = torch.float64, device: DeviceLike = "cpu",
) -> torch.Tensor:
    r"""Two tokens with $\langle x_1, x_2\rangle$ = ``cosine``, the pair rotated by an independent
    Haar rotation per sample (so each token is uniform on the sphere).

    Parameters
    ----------
    batch : int
        Independent samples, >= 1.
    d : int
        Token dimension, >= 2.
    cosine : float, optional
        The pair's cosine, in [−1, 1].
    seed : int, optional
        Seed of a fresh generator (give ``seed`` or ``generator``).
    generator : torch.Generator, optional
        The generator to draw from, on ``device``.
    dtype : torch.dtype, optional
        float32 or float64 (the default).
    device : str or torch.device, optional
        Where the tokens live.

    Returns
    -------
    torch.Tensor, shape (batch, 2, d)
        Unit rows.
    """
    check_int("d", d, _D_MIN)  # the memory check is random_rotations' (its draws are all pair reserves)
    kw: dict[str, Any] = dict(dtype=dtype, device=device)
    P = torch.zeros(2, d, **kw)
    P[0, 0] = 1.0
    P[1, 0], P[1, 1] = cosine, math.sqrt(max(0.0, 1.0 - cosine * cosine))
    return P @ random_rotations(batch, d, _gen(seed, generator, device), **kw).transpose(-1, -2)
