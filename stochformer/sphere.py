"""Geometry of S^{d−1} and initial tokens.

Convention: token arrays are ``X: (batch, N, d)`` with unit rows.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .config import InitConfig


def normalize(X: torch.Tensor) -> torch.Tensor:
    """LN(v) = v/|v| on the last axis (the idealised LayerNorm of SPEC §1)."""
    return X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)


def tangent(X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """P_x v = v − ⟨x, v⟩ x, rowwise. X: (..., d) unit rows, V: (..., d)."""
    return V - (X * V).sum(-1, keepdim=True) * X


def gram(X: torch.Tensor) -> torch.Tensor:
    """Cosines ⟨x_i, x_j⟩: (batch, N, d) → (batch, N, N)."""
    return X @ X.transpose(-1, -2)


def uniform(shape: tuple[int, ...], d: int, generator: torch.Generator, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """i.i.d. uniform points on S^{d−1}: shape (*shape, d)."""
    return normalize(torch.randn(*shape, d, generator=generator, dtype=dtype, device=device))


def random_rotations(batch: int, d: int, generator: torch.Generator, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Haar-distributed orthogonal matrices (batch, d, d) (QR with the sign fix)."""
    A = torch.randn(batch, d, d, generator=generator, dtype=dtype, device=device)
    Qm, R = torch.linalg.qr(A)
    return Qm * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)


def initial_tokens(
    init: InitConfig, batch: int, N: int, d: int, generator: torch.Generator, dtype=torch.float64, device="cpu"
) -> torch.Tensor:
    """Initial tokens X₀: (batch, N, d), unit rows, as described by ``init``."""
    kw = dict(dtype=dtype, device=device)
    if init.kind == "uniform":
        return uniform((batch, N), d, generator, **kw)
    if init.kind == "cluster":
        center = torch.zeros(d, **kw)
        if init.center is None:
            center[0] = 1.0
        else:
            center = normalize(torch.tensor(init.center, **kw))
        noise = init.spread * torch.randn(batch, N, d, generator=generator, **kw)
        return normalize(center + noise)
    if init.kind == "pair":
        c = init.cosine
        pair = torch.zeros(2, d, **kw)
        pair[0, 0] = 1.0
        pair[1, 0], pair[1, 1] = c, math.sqrt(max(0.0, 1.0 - c * c))
        return pair @ random_rotations(batch, d, generator, **kw).transpose(-1, -2)
    return load_tokens(init.path, batch, N, d, dtype=dtype, device=device)


def load_tokens(path, batch: int, N: int, d: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Tokens from a .npy file of shape (N, d) (shared by all samples) or (batch, N, d)."""
    arr = load_token_array(path, batch, N, d).astype(np.float64)
    arr = arr / np.abs(arr).max(axis=-1, keepdims=True)  # rows of any magnitude normalise without overflow
    X = torch.as_tensor(arr, dtype=dtype, device=device)
    return normalize(X.expand(batch, N, d).clone())


def load_token_array(path, batch: int, N: int, d: int) -> np.ndarray:
    """Read and check a .npy token array ((N, d) or (batch, N, d), finite, no zero row).

    Raises ``ValueError`` naming ``init.path``; also used by config validation, before any work."""
    def check(shape: tuple, dtype: np.dtype) -> None:
        if dtype.kind not in "fiu":
            raise ValueError(f"init.path: array has dtype {dtype}; expected real numbers")
        if shape not in ((N, d), (batch, N, d)):
            raise ValueError(f"init.path: array has shape {shape}; expected ({N}, {d}) or ({batch}, {N}, {d})")

    try:  # the header first: a wrong shape or type is refused before any data is read
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"init.path: cannot read {path} as a .npy array: {exc}") from None
    check(shape, dtype)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, MemoryError) as exc:
        raise ValueError(f"init.path: cannot read {path} as a .npy array: {exc}") from None
    check(arr.shape, arr.dtype)
    if not np.all(np.isfinite(arr)):
        raise ValueError("init.path: array contains non-finite values")
    if np.any(np.abs(arr).max(axis=-1) == 0):
        raise ValueError("init.path: array has a zero row; tokens must be non-zero (they are normalised)")
    return arr
