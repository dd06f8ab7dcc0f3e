"""The validation boundary of the Python API, and the non-finite state check of the stepping loops.

Every public function and constructor is wrapped by `validated`, which checks each argument
against its annotation before any work: a ``ValueError`` naming the argument and its valid range
(as scipy does), or an `ArgumentTypeError` (a ``TypeError`` that is also a ``ValueError``)
for a wrong type. The annotations are the reusable types below (``PositiveInt``, ``Seed``,
``FiniteFloat``, ``Probability``, ``Tokens(...)`` …), ``Literal`` choices, classes and protocols.
Numbers arrive as Python or numpy scalars (``np.int64(3)`` is an int; ``True`` and ``1.5`` are
not); tensors as tensors, numpy arrays or nested lists (converted to float64). Checks run once
at the boundary, never per step: a user callable's output (activation, attention, hook, step,
noise source) is checked on its first call by `check_output`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import numbers
import os
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterator, Literal, Optional, TypeVar, Union

import numpy as np
import torch


#: the largest integer a field may take (int64: NetCDF attributes, torch and numpy integers)
INT_MAX = 2**63 - 1
#: seeds torch's generators take without wrapping: 0 <= seed <= 2**64 - 1
SEED_MAX = 2**64 - 1
#: characters of a value shown in an error message (a 100 k-character value is not echoed)
SHOWN = 60


def available_memory() -> int:
    """Memory available to a new allocation (``MemAvailable`` on Linux, else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 1 << 62


def check_memory(what: str, nbytes: float) -> None:
    """``ValueError`` naming ``what`` (the arguments that size it) when an allocation of ``nbytes``
    exceeds the memory available now: refused before it is attempted."""
    free = available_memory()
    if nbytes > free:
        raise ValueError(f"{what}: needs about {nbytes / 2**30:.3g} GiB of memory, more than the {free / 2**30:.3g} GiB "
                         "available now")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocator's failure (CPU or CUDA, torch or numpy)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower()


@contextlib.contextmanager
def memory_errors(what: str, reduce: str) -> Iterator[None]:
    """Within: an allocator's failure (`out_of_memory`) becomes one ``ValueError`` saying
    ``what`` needed more memory than is available and what to ``reduce``."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:
        if not out_of_memory(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{what}: needs more memory than is available ({clip(first, 120)}); reduce {reduce}") from None


class NonFiniteError(ValueError):
    """The state became NaN or infinite; the message names what broke down, where, and the likely
    cause.

    Parameters
    ----------
    event : str
        What happened and where, e.g. ``"non-finite {what} at layer 3"``; ``{what}`` stands for the
        name of the state.
    cause : str
        The likely cause (`likely_fields`).
    what : str, optional
        The name of the state (None: the event names no state, e.g. a part's first output; such
        an error is not re-blamed by `blamed_on`).
    """

    def __init__(self, event: str, cause: str, what: Optional[str] = None) -> None:
        self.event, self.cause, self.what = event, cause, what
        super().__init__(f"{event.replace('{what}', what or '')}: the run was stopped and nothing was written; "
                         f"likely cause: {cause}")

    def __reduce__(self) -> tuple:  # pickled whole (a run in another process), not by its message alone
        return type(self), (self.event, self.cause, self.what)

    def blamed(self, cfg: Any, what: Optional[str] = None) -> NonFiniteError:
        """The same breakdown, blamed on the likely fields of ``cfg`` (`likely_fields`; None, or
        fields that name nothing in particular: the cause as before) and naming the state ``what``
        (None: as before; an error that names no state, such as a part's first output, keeps its event)."""
        cause = self.cause if cfg is None else likely_fields(cfg)
        if cause.startswith(GENERIC_CAUSES) and not self.cause.startswith(GENERIC_CAUSES):
            cause = self.cause
        what = None if self.what is None else what or self.what
        return self if (cause, what) == (self.cause, self.what) else NonFiniteError(self.event, cause, what)


@contextlib.contextmanager
def blamed_on(cfg: Any, what: Optional[str] = None) -> Iterator[None]:
    """Within: a `NonFiniteError` of the state is re-raised naming the likely fields of ``cfg``,
    the config a run was built from, instead of the model's parameters (None: those kept), and the
    state as ``what`` (e.g. ``"particles"``; None: as raised). The run itself
    ([`solve`][stochformer.integrate.solve]) knows only the model; the caller knows the config.

    Examples
    --------
    >>> from stochformer.core.validation import NonFiniteError, blamed_on
    >>> class Config:
    ...     T, L, beta = 1.0, 10, 1e6
    >>> try:
    ...     with blamed_on(Config(), "particles"):
    ...         raise NonFiniteError("non-finite {what} at layer 3", "unknown", "tokens")
    ... except NonFiniteError as err:
    ...     print(err)
    non-finite particles at layer 3: the run was stopped and nothing was written; likely cause: beta = 1e+06
    """
    try:
        yield
    except NonFiniteError as err:
        raise err.blamed(cfg, what) from None


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a ``TypeError``, and a ``ValueError`` for callers that catch
    every bad argument as one kind."""


def short(value: Any, limit: int = SHOWN) -> str:
    """A short printable form of ``value`` for a message: tensors and arrays by dtype and shape,
    anything else by ``repr`` cut to ``limit`` characters."""
    if torch.is_tensor(value):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ still gets a message
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def clip(text: str, limit: int = SHOWN) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[: max(1, limit - 20)]}…({len(text)} characters)"


# --------------------------------------------------------------------------- scalar checks


def _plain_scalar(value: Any) -> Any:
    """A 0-d torch tensor (not on the meta device) as the Python number it holds; anything else as
    it is (a 0-d bool tensor becomes a bool, so it is refused as a number like ``True``)."""
    if torch.is_tensor(value) and value.ndim == 0 and value.device.type != "meta":
        return value.item()
    return value


def check_int(name: str, value: Any, low: Optional[int] = 1, high: Optional[int] = None) -> int:
    """``value`` as an int in [low, high] (Python or numpy integers or a 0-d tensor of one, not
    bools), else ``ValueError`` naming ``name`` and the range (`ArgumentTypeError` for a non-integer)."""
    if type(value) is int and (low is None or value >= low) and (high is None or value <= high):
        return value
    valid = "an integer" + (f" >= {low}" if low is not None else "") + (f" and <= {high}" if high is not None else "")
    value = _plain_scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name}: must be {valid} (got {short(value)})")
    n = int(value)
    if (low is not None and n < low) or (high is not None and n > high):
        raise ValueError(f"{name}: must be {valid} (got {short(value)})")
    return n


def check_float(name: str, value: Any, low: Optional[float] = None, high: Optional[float] = None,
                low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite float in the range (Python or numpy reals or a 0-d tensor of one, not bools), else
    ``ValueError`` naming ``name`` and the range (`ArgumentTypeError` for a non-number)."""
    if type(value) is float and math.isfinite(value) and (low is None or (value > low if low_open else value >= low)) \
            and (high is None or (value < high if high_open else value <= high)):
        return value
    bounds = ([f"{'>' if low_open else '>='} {low:g}"] if low is not None else []) + \
        ([f"{'<' if high_open else '<='} {high:g}"] if high is not None else [])
    valid = " and ".join(["a finite number", *bounds])
    value = _plain_scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name}: must be {valid} (got {short(value)})")
    x = float(value)
    if not math.isfinite(x) or (low is not None and (x <= low if low_open else x < low)) \
            or (high is not None and (x >= high if high_open else x > high)):
        raise ValueError(f"{name}: must be {valid} (got {short(value)})")
    return x


class Check:
    """An argument check, used as ``Annotated[T, check]``: ``check(name, value)`` returns the value
    (converted: numpy scalars to Python numbers, arrays to tensors) or raises."""

    def __call__(self, name: str, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return "a valid value"


@dataclass(frozen=True)
class Int(Check):
    low: Optional[int] = None
    high: Optional[int] = None

    def __call__(self, name: str, value: Any) -> int:
        return check_int(name, value, self.low, self.high)

    def describe(self) -> str:
        return "an integer" + (f" >= {self.low}" if self.low is not None else "") + \
            (f" and <= {self.high}" if self.high is not None else "")


@dataclass(frozen=True)
class Real(Check):
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False

    def __call__(self, name: str, value: Any) -> float:
        return check_float(name, value, self.low, self.high, self.low_open, self.high_open)

    def describe(self) -> str:
        bounds = ([f"{'>' if self.low_open else '>='} {self.low:g}"] if self.low is not None else []) + \
            ([f"{'<' if self.high_open else '<='} {self.high:g}"] if self.high is not None else [])
        return " and ".join(["a finite number", *bounds])


@dataclass(frozen=True)
class Flag(Check):
    def __call__(self, name: str, value: Any) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentTypeError(f"{name}: must be True or False (got {short(value)})")
        return bool(value)

    def describe(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class Choice(Check):
    names: tuple

    def __call__(self, name: str, value: Any) -> Any:
        if not isinstance(value, str) or value not in self.names:
            raise ValueError(f"{name}: must be one of {', '.join(map(repr, self.names))} (got {short(value)})")
        return value

    def describe(self) -> str:
        return "one of " + ", ".join(map(repr, self.names))


@dataclass(frozen=True)
class Methods(Check):
    """An object with the methods ``names`` (what the caller uses of a protocol)."""

    names: tuple

    def __call__(self, name: str, value: Any) -> Any:
        if not all(callable(getattr(value, n, None)) for n in self.names):
            raise ArgumentTypeError(f"{name}: must be {self.describe()} (got {short(value)})")
        return value

    def describe(self) -> str:
        return "an object with " + ", ".join(f"{n}(...)" for n in self.names)


@dataclass(frozen=True)
class Ints(Check):
    """A sequence of integers >= ``low`` (a list, tuple, range or 1-D array), as a tuple."""

    low: Optional[int] = None

    def __call__(self, name: str, value: Any) -> tuple[int, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, range, np.ndarray, torch.Tensor)):
            raise ArgumentTypeError(f"{name}: must be {self.describe()} (got {short(value)})")
        if torch.is_tensor(value) and value.device.type == "meta":
            raise ArgumentTypeError(f"{name}: must be {self.describe()} (got {short(value)}, which holds no numbers)")
        items = value.tolist() if isinstance(value, (np.ndarray, torch.Tensor)) else value
        if not isinstance(items, (list, tuple, range)):  # a 0-d array
            raise ArgumentTypeError(f"{name}: must be {self.describe()} (got {short(value)})")
        return tuple(check_int(f"{name}[{i}]", v, self.low) for i, v in enumerate(items))

    def describe(self) -> str:
        return "a sequence of integers" + (f" >= {self.low}" if self.low is not None else "")


@dataclass(frozen=True)
class Names(Check):
    """Names out of ``names`` (a sequence, or one name), as a tuple."""

    names: tuple

    def __call__(self, name: str, value: Any) -> tuple[str, ...]:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ArgumentTypeError(f"{name}: must be a sequence of names out of {', '.join(self.names)} (got {short(value)})")
        bad = [short(v) for v in items if not isinstance(v, str) or v not in self.names]
        if bad:
            raise ValueError(f"{name}: unknown names {', '.join(bad)}; valid: {', '.join(self.names)}")
        return tuple(items)

    def describe(self) -> str:
        return "a sequence of names"


@dataclass(frozen=True)
class Shape(Check):
    """A tensor shape (a sequence of integers >= 1) as a tuple; with ``parts``, also a list of
    such shapes (returned as a list of tuples)."""

    parts: bool = False

    def _one(self, name: str, value: Any) -> tuple[int, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, torch.Size)) or not value:
            raise ArgumentTypeError(f"{name}: must be a non-empty sequence of sizes >= 1 (got {short(value)})")
        return tuple(check_int(f"{name}[{i}]", v, 1, INT_MAX) for i, v in enumerate(value))

    def __call__(self, name: str, value: Any) -> Any:
        if self.parts and isinstance(value, list) and value and all(isinstance(v, (list, tuple, torch.Size)) for v in value):
            return [self._one(f"{name}[{i}]", v) for i, v in enumerate(value)]
        return self._one(name, value)

    def describe(self) -> str:
        return "a shape"


#: the floating dtypes tokens and parameters may have
FLOAT_DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class Dtype(Check):
    def __call__(self, name: str, value: Any) -> torch.dtype:
        dtype = FLOAT_DTYPES.get(value, value) if isinstance(value, str) else value
        for t in FLOAT_DTYPES.values():
            if dtype is t:
                return t
        raise ArgumentTypeError(f"{name}: must be torch.float32 or torch.float64 (or their names; got {short(value)})")

    def describe(self) -> str:
        return "torch.float32 or torch.float64"


def check_device(name: str, value: Any) -> torch.device:
    """A device to compute on: ``cpu`` or an available ``cuda`` device, as a str or a torch.device
    (``meta`` holds no numbers: refused)."""
    if not isinstance(value, (str, torch.device)):
        raise ArgumentTypeError(f"{name}: must be a device name such as 'cpu' or 'cuda', or a torch.device (got {short(value)})")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name}: must be 'cpu', 'cuda' or 'cuda:<index>' (got {short(value)})") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: must be 'cpu', 'cuda' or 'cuda:<index>' (got {short(value)}"
                         + ("; a meta tensor holds no numbers)" if device.type == "meta" else ")"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: {str(device)!r} requested but no CUDA device is available (use 'cpu')")
    return device


@dataclass(frozen=True)
class Device(Check):
    def __call__(self, name: str, value: Any) -> torch.device:
        return check_device(name, value)

    def describe(self) -> str:
        return "a device"


# --------------------------------------------------------------------------- tensors


def as_real_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` as a real floating tensor: a float32/float64 tensor as it is (detached); numpy
    arrays, numpy scalars and nested lists of real numbers converted to float64; anything else an
    `ArgumentTypeError` naming ``name``."""
    if torch.is_tensor(value):
        if value.dtype not in FLOAT_DTYPES.values():
            raise ArgumentTypeError(f"{name}: must be a real floating tensor, float32 or float64 (got {short(value)}; "
                                    "convert it with .double())")
        if value.device.type != "meta":  # shapes only: kept, and never given values to check
            check_device(f"{name}.device", value.device)
        return value.detach()
    if isinstance(value, (str, bytes, dict, set)) or value is None or callable(value):
        raise ArgumentTypeError(f"{name}: must be a tensor, a numpy array or a nested list of numbers (got {short(value)})")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):  # ragged lists, unconvertible objects
        raise ArgumentTypeError(f"{name}: must be a tensor, a numpy array or a nested list of numbers of equal lengths "
                                f"(got {short(value)})") from None
    if arr.dtype.kind not in "fiu":
        raise ArgumentTypeError(f"{name}: must hold real numbers (got {short(value)}, dtype {arr.dtype})")
    return torch.as_tensor(arr.astype(np.float64), device="cpu")  # host data: never on the default device


def rows_off_sphere(X: torch.Tensor) -> Optional[tuple[float, float]]:
    """The smallest and largest row norm of X when some row is not of unit norm to rounding
    (√ε of the dtype: 1.5e-8 in float64, 3.5e-4 in float32), else None."""
    if X.numel() == 0:
        return None
    norms = torch.linalg.vector_norm(X.to(torch.float64), dim=-1)
    tol = math.sqrt(torch.finfo(X.dtype).eps) * 4
    if bool(((norms - 1).abs() <= tol).all()):
        return None
    return float(norms.min()), float(norms.max())


@dataclass(frozen=True)
class Values(Check):
    """Measured numbers: a numpy array, a sequence or a tensor of finite real numbers (tensors stay
    tensors, the rest becomes a float64 array) with ``ndim`` axes (None: any, at least one
    entry), entries > 0 when ``positive``; ``empty``: an empty sequence is allowed; ``missing``:
    NaN entries are allowed (they mark values that are missing, and propagate)."""

    ndim: Optional[int] = None
    positive: bool = False
    empty: bool = False
    missing: bool = False

    def __call__(self, name: str, value: Any) -> Any:
        if torch.is_tensor(value) and value.device.type == "meta":
            raise ValueError(f"{name}: a meta tensor holds no numbers (got {short(value)})")
        arr = as_real_tensor(name, value) if torch.is_tensor(value) else as_real_tensor(name, value).numpy()
        shape = tuple(arr.shape)
        if (self.ndim is not None and len(shape) != self.ndim) or not shape:
            raise ValueError(f"{name}: expected {self.ndim or 'at least one'} axes, got shape {shape}")
        if not self.empty and 0 in shape:
            raise ValueError(f"{name}: must not be empty (got shape {shape})")
        values = torch.as_tensor(arr)
        if values.numel() and not bool((torch.isfinite(values) | (torch.isnan(values) if self.missing else False)).all()):
            raise ValueError(f"{name}: must hold finite numbers (it has {'infinite' if self.missing else 'NaN or infinite'} "
                             "entries)")
        if self.positive and values.numel() and not bool((values > 0).all()):
            raise ValueError(f"{name}: must hold numbers > 0 (got a minimum of {float(values.min()):.3g})")
        return arr

    def describe(self) -> str:
        return "an array of finite numbers"


def check_unit_rows(name: str, X: torch.Tensor) -> torch.Tensor:
    """``X`` if its rows have unit norm to rounding, else ``ValueError`` naming ``name``."""
    off = rows_off_sphere(X)
    if off is not None:
        raise ValueError(f"{name}: rows must have unit norm (tokens on the sphere; got norms from {off[0]:.3g} to "
                         f"{off[1]:.3g}); normalise them with stochformer.core.sphere.normalize")
    return X


def check_tensor(name: str, value: Any, dims: tuple[str, ...], low: tuple[int, ...] = (), unit: bool = False,
                 bounds: Optional[tuple[float, float]] = None, leading: bool = False, what: str = "a tensor",
                 finite: bool = True) -> torch.Tensor:
    """``value`` as a finite real floating tensor with axes named ``dims`` (each size >= the
    matching entry of ``low``, default 1; ``leading``: any further leading axes), unit rows
    (``unit``) and entries within ``bounds``; else an error naming ``name``. ``finite=False``
    leaves the finiteness to the caller (the solver's `check_finite`, naming the layer)."""
    X = as_real_tensor(name, value)
    shape = "(" + ", ".join((["..."] if leading else []) + list(dims)) + ")"
    if X.dim() != len(dims) and not (leading and X.dim() >= len(dims)):
        raise ValueError(f"{name}: expected {what} of shape {shape}, got {tuple(X.shape)}")
    mins = (1,) * (len(dims) - len(low)) + tuple(low) if len(low) < len(dims) else tuple(low)
    sizes = X.shape[X.dim() - len(dims):]
    seen: dict[str, int] = {}
    for axis, size, least in zip(dims, sizes, mins):
        if size < least:
            raise ValueError(f"{name}: {axis} must be >= {least} (got shape {tuple(X.shape)}, {axis} = {size})")
        if seen.setdefault(axis, size) != size:
            raise ValueError(f"{name}: expected {what} of shape {shape}, got {tuple(X.shape)}")
    if any(s == 0 for s in X.shape):
        raise ValueError(f"{name}: must not be empty (got shape {tuple(X.shape)})")
    if X.device.type == "meta":  # shapes only: no values to check
        return X
    if finite and not bool(torch.isfinite(X).all()):
        raise ValueError(f"{name}: must hold finite numbers (it has NaN or infinite entries)")
    if bounds is not None and not bool(((X >= bounds[0]) & (X <= bounds[1])).all()):
        raise ValueError(f"{name}: entries must lie in [{bounds[0]:g}, {bounds[1]:g}] (got {float(X.min()):.3g} to {float(X.max()):.3g})")
    return check_unit_rows(name, X) if unit else X


@dataclass(frozen=True)
class TensorCheck(Check):
    dims: tuple[str, ...]
    low: tuple[int, ...] = ()
    unit: bool = False
    bounds: Optional[tuple[float, float]] = None
    leading: bool = False
    what: str = "a tensor"
    finite: bool = True

    def __call__(self, name: str, value: Any) -> torch.Tensor:
        return check_tensor(name, value, self.dims, self.low, self.unit, self.bounds, self.leading, self.what, self.finite)

    def describe(self) -> str:
        return f"{self.what} of shape ({', '.join(self.dims)})"


#: tokens (batch, N, d) with unit rows, batch >= 1, N >= 1, d >= 2
UnitTokens = Annotated[torch.Tensor, TensorCheck(("batch", "N", "d"), (1, 1, 2), unit=True, what="tokens")]
#: states (batch, N, d) of any norm (a model off the sphere: a pre-norm residual stream), finite or not
#: (the solver's `check_finite` names the non-finite initial state)
States = Annotated[torch.Tensor, TensorCheck(("batch", "N", "d"), (1, 1, 2), what="tokens", finite=False)]
#: token clouds (..., N, d) with unit rows
Clouds = Annotated[torch.Tensor, TensorCheck(("N", "d"), (1, 2), unit=True, leading=True, what="tokens")]
#: a square matrix (d, d), d >= 2
Matrix = Annotated[torch.Tensor, TensorCheck(("d", "d"), (2, 2))]
#: a stack of square matrices (M, d, d)
Matrices = Annotated[torch.Tensor, TensorCheck(("M", "d", "d"), (1, 2, 2))]
#: a finite real tensor of any shape (not empty)
RealTensor = Annotated[torch.Tensor, TensorCheck((), leading=True)]
#: heads' matrices (H, d_h, d)
HeadMatrices = Annotated[torch.Tensor, TensorCheck(("H", "d_h", "d"))]


def same_device(a: Union[str, torch.device], b: Union[str, torch.device]) -> bool:
    """Whether two devices are the same (``cuda`` is the current CUDA device)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def check_parts(owner: str, tensors: dict[str, Optional[torch.Tensor]]) -> None:
    """The tensors of one model part share a dtype and a device (``ValueError`` naming them)."""
    given = {k: t for k, t in tensors.items() if t is not None}
    kinds = {(t.dtype, t.device) for t in given.values()}
    if len(kinds) > 1:
        what = ", ".join(f"{k}: {str(t.dtype).removeprefix('torch.')} on {t.device}" for k, t in given.items())
        raise ValueError(f"{owner}: its tensors must share one dtype and device (got {what})")


def check_fits(owner: str, part: Any, d: int, dtype: torch.dtype, device: Union[str, torch.device]) -> None:
    """A model part (attention, noise source) fits tokens of dimension ``d``, ``dtype`` and
    ``device``: its ``d`` (if it has one) is d, and its tensor fields have that dtype and device;
    else ``ValueError`` naming the part. Called once per run, by the models' ``reset``."""
    dim = getattr(part, "d", None)
    if isinstance(dim, int) and not isinstance(dim, bool) and dim != d:
        raise ValueError(f"{owner}: {type(part).__name__} is built for d = {dim}, the tokens have d = {d}")
    if not dataclasses.is_dataclass(part):
        return
    for f in dataclasses.fields(part):
        t = getattr(part, f.name, None)
        if f.name.startswith("_") or not torch.is_tensor(t):
            continue
        if t.dtype != dtype or not same_device(t.device, device):
            raise ValueError(f"{owner}: {type(part).__name__}.{f.name} is {str(t.dtype).removeprefix('torch.')} on {t.device}, "
                             f"the tokens {str(dtype).removeprefix('torch.')} on {torch.device(device)}; give them the same "
                             "dtype and device")


# --------------------------------------------------------------------------- user callables


def import_object(spec: str, field: str) -> Any:
    """The object an import string names: ``"package.module:attribute"`` (the attribute may be
    dotted, ``"module:Class.method"``), as a config file or ``--set`` gives a user's own part.
    Importing runs the module's code, as any Python import does: use only configurations you trust.
    ``ValueError`` naming ``field`` if the string is malformed or nothing can be imported."""
    import pkgutil

    module, sep, attr = spec.partition(":")
    if not (sep and module and attr) or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ValueError(f"{field}: {clip(spec)!r} is not an import string 'package.module:attribute'")
    try:
        return pkgutil.resolve_name(spec)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{field}: cannot import {clip(spec)!r}: {clip(str(exc))}") from None


def callable_name(fn: Any) -> str:
    """``module.qualname`` of a callable (or its type's) for messages."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def part_name(obj: Any) -> str:
    """``module.name`` of a model part: the object's module (else its type's) and its ``__qualname__``,
    else its ``__name__``, else its repr, unless that repr is the default one with a memory address
    (``<… object at 0x…>``): then its type's ``__qualname__``."""
    module = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if name is None:
        text = repr(obj)
        name = type(obj).__qualname__ if " at 0x" in text else text
    return f"{module}.{name}"


def callable_record(fn: Any) -> dict[str, Any]:
    """What a run records of a callable part: ``callable``, its `part_name`, and ``parameters``:
    a ``functools.partial``'s arguments, a function's defaults, an instance's public attributes
    (numbers, strings, lists of them; a tensor by shape and dtype; any other value as
    ``"unrecorded: <type>"``), or ``"unrecorded"`` where they cannot be read (the values a closure
    captured, an instance without ``__dict__``); no ``parameters`` key where there are none. Never a
    memory address."""
    record = _callable_record(fn)
    if record.get("parameters") == {}:
        del record["parameters"]
    return record


def _callable_record(fn: Any) -> dict[str, Any]:
    if isinstance(fn, functools.partial):
        return {"callable": part_name(fn.func),
                "parameters": {"args": [_recorded(a) for a in fn.args],
                               "keywords": {k: _recorded(v) for k, v in fn.keywords.items()}}}
    if isinstance(fn, types.FunctionType):
        if fn.__closure__:
            return {"callable": part_name(fn), "parameters": "unrecorded (values captured by a closure)"}
        defaults = {k: _recorded(p.default) for k, p in inspect.signature(fn).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        return {"callable": part_name(fn), "parameters": defaults}
    if isinstance(fn, (types.BuiltinFunctionType, types.MethodType, type)) or not hasattr(fn, "__dict__"):
        named = hasattr(fn, "__qualname__") or hasattr(fn, "__name__")  # a builtin, a ufunc: nothing to record
        return {"callable": part_name(fn), "parameters": {} if named else "unrecorded"}
    return {"callable": part_name(fn), "parameters": _public_attributes(fn)}


def object_record(obj: Any) -> dict[str, Any]:
    """What a run records of a part that is neither a dataclass nor a callable: ``type``, its type's
    `part_name`, and ``repr``, its repr cut to 200 characters, or, where that repr is the default
    one with a memory address (``<… object at 0x…>``), ``attributes``: its public attributes as
    `callable_record` records an instance's. Never a memory address: two runs of one seed record the
    same."""
    out: dict[str, Any] = {"type": part_name(type(obj))}
    text = repr(obj)
    if " at 0x" not in text:
        out["repr"] = text[:200]
    elif hasattr(obj, "__dict__"):
        out["attributes"] = _public_attributes(obj)
    return out


def _public_attributes(obj: Any) -> dict[str, Any]:
    """An instance's public attributes as a run records them (`_recorded`)."""
    return {k: _recorded(v) for k, v in vars(obj).items() if not k.startswith("_")}


def _recorded(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_recorded(v) for v in value]
    if torch.is_tensor(value):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    return f"unrecorded: {callable_name(type(value))}"


def check_output(who: str, out: Any, like: torch.Tensor, unit: bool = False) -> torch.Tensor:
    """The output of the user callable ``who`` (e.g. ``"activation foo.phi"``) on the input
    ``like``: a tensor of its shape, dtype and device with finite entries (unit rows when
    ``unit``), else ``ValueError`` naming it. Called on a callable's first call only (the hot loops
    stay unchecked)."""
    shape = tuple(like.shape)
    if not torch.is_tensor(out):
        raise ValueError(f"{who}: must return a tensor of shape {tuple(shape)} (got {short(out)})")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{who}: returned shape {tuple(out.shape)}, expected {tuple(shape)} (no broadcasting)")
    _check_output_kind(who, out, like)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{who}: returned non-finite values (NaN or infinite) on its first call")
    if unit:
        off = rows_off_sphere(out)
        if off is not None:
            raise ValueError(f"{who}: returned rows of norm {off[0]:.3g} to {off[1]:.3g}; a model on the sphere must "
                             "return unit rows (or set on_sphere = False)")
    return out


def _check_output_kind(who: str, out: torch.Tensor, like: torch.Tensor) -> None:
    """``out`` holds real floating numbers of the dtype and device of ``like`` (not on the meta
    device); else ``ValueError`` naming ``who`` and what it should return."""
    if not out.is_floating_point() or out.device.type == "meta" or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(f"{who}: must return a {str(like.dtype).removeprefix('torch.')} tensor on {like.device} "
                         f"(the dtype and device of its input) (got {short(out)})")


def first_output(seen: set, key: str, part: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a call of a model's part ``key`` (its ``attention``, its noise source's
    ``increment``; ``args[0]``: the tokens), checked the first time ``key`` is not in ``seen`` (the
    model clears ``seen`` at the start of every run): by `check_output` against the tokens, and an
    exception a part of one's own raises becomes one ``ValueError`` naming it (`first_call`).
    One of stochformer's own parts that returns non-finite numbers broke down numerically:
    `NonFiniteError` naming its large parameters."""
    if key in seen:
        return fn(*args)
    like, who = args[0], f"{key} ({callable_name(part)})"
    own = (getattr(type(part), "__module__", "") or "").startswith("stochformer")
    out = first_call(who, own, like, fn, *args)
    check_part_output(who, own, out, like, lambda: NonFiniteError(
        f"non-finite {key} increment on its first call",
        ", ".join(_large_parameters(part, f"{key}.")) or "the step size and the part's scales"))
    seen.add(key)
    return out


def check_part_output(who: str, own: bool, out: Any, like: torch.Tensor, breakdown: Callable[[], NonFiniteError],
                      unit: bool = False) -> torch.Tensor:
    """The first output of the part ``who`` on the tensor ``like``. One of stochformer's own parts
    (``own``) that returns non-finite numbers of the right shape met a state or scale its numbers
    cannot hold: ``breakdown()``, blamed on the run's fields (built only then); anything else is
    checked as a user's callable's output (`check_output`: a user's non-finite output is that
    callable's error)."""
    if own and torch.is_tensor(out) and out.shape == like.shape and not bool(torch.isfinite(out).all()):
        raise breakdown()
    return check_output(who, out, like, unit)


def first_call(who: str, own: bool, like: torch.Tensor, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, the first call of the callable ``who`` on the tensor ``like``: an exception a
    user's callable (not ``own``, one of stochformer's) raises becomes `first_call_failed`'s one line."""
    if own:
        return fn(*args)
    try:
        return fn(*args)
    except Exception as exc:
        raise first_call_failed(who, exc, like) from exc


def first_call_failed(who: str, exc: Exception, like: torch.Tensor) -> Exception:
    """What the first call of a user's callable ``who`` on the tensor ``like`` raising ``exc``
    becomes: a ``ValueError`` of one line naming it, the exception and the input; running out of
    memory stays what it is (a run names its own sizes)."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return exc
    text = " ".join(str(exc).split()) or "no message"
    return ValueError(f"{who}: raised {type(exc).__name__} on its first call ({clip(text, 200)}), given a "
                      f"{str(like.dtype).removeprefix('torch.')} tensor of shape {tuple(like.shape)} on {like.device}; "
                      "it must map such a tensor to one of the same shape")


# --------------------------------------------------------------------------- the decorator

PositiveInt = Annotated[int, Int(1)]
NonNegativeInt = Annotated[int, Int(0)]
Seed = Annotated[int, Int(0, SEED_MAX)]
FiniteFloat = Annotated[float, Real()]
PositiveFloat = Annotated[float, Real(0.0, low_open=True)]
NonNegativeFloat = Annotated[float, Real(0.0)]
Probability = Annotated[float, Real(0.0, 1.0)]
Cosine = Annotated[float, Real(-1.0, 1.0)]
FloatDtype = Annotated[torch.dtype, Dtype()]
DeviceLike = Annotated[Union[str, torch.device], Device()]
Bool = Annotated[bool, Flag()]
#: β of E_β: e^β must be finite
EnergyBeta = Annotated[float, Real(0.0, 700.0, low_open=True)]

_Checker = Callable[[str, Any], Any]


def _isinstance_check(tp: type) -> _Checker:
    if getattr(tp, "_is_protocol", False):
        attrs = getattr(tp, "__protocol_attrs__", None) or typing._get_protocol_attrs(tp)  # type: ignore[attr-defined]
        names = sorted(n for n in attrs if not n.startswith("_") or n == "__call__")
        need = ", ".join(f"{n}(...)" for n in names) or "the protocol's methods"
        valid = f"an object with {need} ({tp.__name__})"
        ok: Callable[[Any], bool] = (lambda v: callable(v)) if names == ["__call__"] else \
            (lambda v: all(callable(getattr(v, n, None)) for n in names))
    else:
        valid, ok = f"a {tp.__module__.split('.')[0]}.{tp.__qualname__}".replace("builtins.", ""), (lambda v: isinstance(v, tp))

    def check(name: str, value: Any) -> Any:
        if not ok(value):
            raise ArgumentTypeError(f"{name}: must be {valid} (got {short(value)})")
        return value

    check.describe = lambda: valid  # type: ignore[attr-defined]
    return check


def _config_check(tp: type) -> _Checker:
    def check(name: str, value: Any) -> Any:
        from ..config import as_config

        return as_config(value, tp, name)

    return check


def _union_check(members: list[_Checker], optional: bool) -> _Checker:
    def check(name: str, value: Any) -> Any:
        if value is None and optional:
            return None
        errors: list[ValueError] = []
        for member in members:
            try:
                return member(name, value)
            except ValueError as exc:
                errors.append(exc)
        values = [e for e in errors if not isinstance(e, ArgumentTypeError)]
        if values:  # the right type with a wrong value: that type's message
            raise values[0]
        kinds = [getattr(m, "describe", lambda: "")() for m in members] + (["None"] if optional else [])
        raise ArgumentTypeError(f"{name}: must be {' or '.join(k for k in kinds if k)} (got {short(value)})")

    return check


def _plain(fn: Callable[[str, Any], Any], text: str) -> _Checker:
    fn.describe = lambda: text  # type: ignore[attr-defined]
    return fn


def checker(tp: Any) -> Optional[_Checker]:
    """The check of an annotation (None: nothing to check)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        checks = [m for m in tp.__metadata__ if isinstance(m, Check)]
        if not checks:
            return checker(args[0])
        base = args[0]
        if typing.get_origin(base) in (Union, types.UnionType) and type(None) in typing.get_args(base):
            return _union_check([checks[0]], optional=True)  # Annotated[Optional[T], check]: None passes
        return checks[0]
    if origin in (Union, types.UnionType):
        optional = type(None) in args
        members = [c for c in (checker(a) for a in args if a is not type(None)) if c is not None]
        if len(members) < len([a for a in args if a is not type(None)]):  # an unchecked member: accept anything
            return None
        return _union_check(members, optional)
    if origin is Literal:
        return Choice(args)
    if tp is bool:
        return Flag()
    if tp is int:
        return _plain(lambda n, v: check_int(n, v, None), "an integer")
    if tp is float:
        return _plain(lambda n, v: check_float(n, v), "a finite number")
    if tp is str:
        return _isinstance_check(str)
    if origin is not None and getattr(origin, "__name__", "") == "Callable" or tp is typing.Callable:
        return _plain(lambda n, v: v if callable(v) else _raise(ArgumentTypeError(f"{n}: must be callable (got {short(v)})")),
                      "a callable")
    if isinstance(tp, type):
        if hasattr(tp, "model_validate") and hasattr(tp, "model_fields"):
            return _config_check(tp)
        if tp is not object and tp is not Any:
            return _isinstance_check(tp)
    return None


def _raise(exc: Exception) -> Any:
    raise exc


def _hints(obj: Any) -> dict[str, _Checker]:
    hints = typing.get_type_hints(obj, include_extras=True)
    hints.pop("return", None)
    return {name: c for name, tp in hints.items() if not name.startswith("_") and (c := checker(tp)) is not None}


F = TypeVar("F")


def validated(obj: F) -> F:
    """Check the arguments of a function, or the constructor arguments of a (data)class, against
    their annotations before the call (see the module docstring). Arguments left at their
    defaults are not checked."""
    if isinstance(obj, type):
        init = obj.__init__  # type: ignore[misc]
        wrapped = _wrap(init, lambda: _hints(obj if dataclasses.is_dataclass(obj) else init))
        obj.__init__ = wrapped  # type: ignore[misc]
        return obj
    return _wrap(obj, lambda: _hints(obj))  # type: ignore[arg-type, return-value]


def _wrap(fn: Callable, hints: Callable[[], dict[str, _Checker]]) -> Callable:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
    checks: list[dict[str, _Checker]] = []
    owner = getattr(fn, "__qualname__", "call").removesuffix(".__init__")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not checks:
            checks.append(hints())
        if not simple or len(args) > len(positional) or not keywords.issuperset(kwargs) \
                or any(n in kwargs for n in positional[: len(args)]):
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise ArgumentTypeError(f"{owner}: {exc}") from None
            if not simple:
                return fn(*args, **kwargs)
        table = checks[0]
        if table:
            args = tuple(table[n](n, a) if n in table else a for n, a in zip(positional, args))
            for name, value in kwargs.items():
                if name in table:
                    kwargs[name] = table[name](name, value)
        return fn(*args, **kwargs)

    return wrapper


# --------------------------------------------------------------------------- the stepping loop


def _large_parameters(model: Any, where: str = "", depth: int = 0) -> list[str]:
    """The numbers of a model and its parts (dataclass fields, two levels) beyond 1e3 in size."""
    found: list[str] = []
    if not dataclasses.is_dataclass(model) or depth > 2:
        return found
    for f in dataclasses.fields(model):
        value = getattr(model, f.name, None)
        name = f"{where}{f.name}"
        if f.name.startswith("_"):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > 1e3 and f.name != "seed":
            found.append(f"{name} = {value:.3g}")
        elif torch.is_tensor(value) and value.numel() and value.device.type != "meta" and float(value.abs().max()) > 1e3:
            found.append(f"{name} (entries up to {float(value.abs().max()):.3g})")
        else:
            found += _large_parameters(value, f"{name}.", depth + 1)
    return found


#: how `likely_fields` begins when it names no field in particular
GENERIC_CAUSES = ("the step size and ", "the step T/L and ", "the step model.T/model.L and ")

#: a model's field names as words of a message (not already part of a dotted name)
_MODEL_WORDS = re.compile(r"(?<![\w.])(batch|L|N|m|d|T|record_every|features|path_stride|Q|K|V|beta|gamma|sigma_U|sigma_W|"
                          r"noise_scale|gain)(?!\w)")


def experiment_fields(text: str, batch: str = "model.batch") -> str:
    """A model's field names in the message ``text`` as an experiment's: ``model.`` before each,
    and ``batch`` read as what sets the batch there (e.g. ``pairs``); names already dotted stay.

    Examples
    --------
    >>> experiment_fields("the step T/L = 2 (raise L or lower T), sigma_U = 1e+150, L or batch", "pairs")
    'the step model.T/model.L = 2 (raise model.L or lower model.T), model.sigma_U = 1e+150, model.L or pairs'
    """
    return _MODEL_WORDS.sub(lambda f: batch if f[1] == "batch" else f"model.{f[1]}", text)


def likely_fields(cfg: Any) -> str:
    """The config fields that most likely drive a state to infinity: large entries of the
    attention matrices, large β, γ, biases or noise scale, or a large step T/L; for a model
    instead of a config, its parts' large parameters."""
    if cfg is None:
        return "the step size and the scales of the attention and the noise"
    if not hasattr(cfg, "L") and hasattr(getattr(cfg, "model", None), "L"):  # an experiment: its model's fields
        return experiment_fields(likely_fields(cfg.model))
    if not hasattr(cfg, "L"):  # a model: its parameters
        return ", ".join(_large_parameters(cfg)) or "the step size and the scales of the attention and the noise"
    found = []
    for name in ("Q", "K", "V"):
        mat = getattr(cfg, name, None)
        if mat is not None:
            top = max(abs(x) for row in mat for x in row)
            if top > 1e3:
                found.append(f"{name} (entries up to {top:.3g})")
    for name in ("beta", "gamma_value", "sigma_U", "sigma_W", "noise_scale", "gain"):
        value = getattr(cfg, name, None)
        if isinstance(value, (int, float)) and abs(value) > 1e3:
            found.append(f"{name.removesuffix('_value')} = {value:.3g}")
    dt = getattr(cfg, "T", 0.0) / max(1, getattr(cfg, "L", 1))
    if dt > 1:
        found.append(f"the step T/L = {dt:.3g} (raise L or lower T)")
    return ", ".join(found) or "the step T/L and the scales of beta, gamma, Q, K, V, sigma_U, sigma_W, noise_scale, gain"


def check_finite(X: torch.Tensor, layer: int, cfg: Any = None, what: str = "tokens") -> torch.Tensor:
    """Return ``X`` if every entry is finite; else raise `NonFiniteError` naming ``what``, ``layer``
    and the fields of ``cfg`` (a config, or a model: its large parameters) that likely caused it.
    One sum per call: a NaN or an infinity makes
    the sum non-finite, and only then (or if finite entries overflow it) is every entry checked
    (``torch.isfinite`` is several passes over X: 10× the sum, about 3% of a layer)."""
    if not math.isfinite(float(X.sum())) and not bool(torch.isfinite(X).all()):
        raise NonFiniteError(f"non-finite {{what}} at layer {layer}", likely_fields(cfg), what)
    return X
