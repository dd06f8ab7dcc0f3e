"""Initial tokens read from a file: ``init.path`` of a configuration, a ``.npy`` array of shape
(N, d), shared by all samples, or (batch, N, d); checked (shape, real dtype, finite, no zero row)
from its header before its data is read, and normalised onto the sphere."""

from __future__ import annotations

import numpy as np
import torch

from ..core.sphere import normalize
from ..core.validation import DeviceLike, FloatDtype, PositiveInt, validated
from .outputs import InputError, open_input


@validated
def load_tokens(path, batch: PositiveInt, N: PositiveInt, d: PositiveInt, dtype: FloatDtype = torch.float64,
                device: DeviceLike = "cpu") -> torch.Tensor:
    """Tokens from a .npy file of shape (N, d) (shared by all samples) or (batch, N, d)."""
    arr = load_token_array(path, batch, N, d).astype(np.float64)
    arr = arr / np.abs(arr).max(axis=-1, keepdims=True)  # rows of any magnitude normalise without overflow
    X = torch.as_tensor(arr, dtype=dtype, device=device)
    return normalize(X.expand(batch, N, d).clone())


def load_token_array(path, batch: int, N: int, d: int) -> np.ndarray:
    """Read and check a .npy token array ((N, d) or (batch, N, d), finite, no zero row).

    Raises ``ValueError`` naming ``init.path``; also used by config validation, before any work."""
    limit = (1 << 16) + 16 * batch * N * d  # the header and the largest real dtype the config allows
    try:  # the header first: a wrong shape or type is refused before any data is read
        with open_input(path, "init.path", limit) as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
            if dtype.kind not in "fiu":
                raise ValueError(f"init.path: array has dtype {dtype}; expected real numbers")
            if shape not in ((N, d), (batch, N, d)):
                raise ValueError(f"init.path: array has shape {shape}; expected ({N}, {d}) or ({batch}, {N}, {d})")
            fh.seek(0)
            arr = np.load(fh, allow_pickle=False)
    except (OSError, EOFError, MemoryError) as exc:
        raise ValueError(f"init.path: cannot read {path} as a .npy array: {exc}") from None
    except InputError as exc:  # missing, not a regular file, or bigger than the config implies
        raise ValueError(f"init.path: cannot read {path} as a .npy array: {str(exc).removeprefix('init.path: ')}") from None
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith("init.path") else f"init.path: cannot read {path} as a .npy array: {msg}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError("init.path: array contains non-finite values")
    if np.any(np.abs(arr).max(axis=-1) == 0):
        raise ValueError("init.path: array has a zero row; tokens must be non-zero (they are normalised)")
    return arr
