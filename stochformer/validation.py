"""Argument checks for the Python API (``ValueError`` naming the argument and its valid range, as
scipy does) and the non-finite state check of the stepping loops."""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import torch


#: the largest integer a field may take (int64: NetCDF attributes, torch and numpy integers)
INT_MAX = 2**63 - 1


class NonFiniteError(ValueError):
    """The state became NaN or infinite; the message names the layer and the likely fields."""


def check_int(name: str, value: Any, low: int = 1, high: Optional[int] = None) -> int:
    """``value`` as an int in [low, high], else ``ValueError`` naming ``name`` and the range."""
    valid = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: must be {valid} (got {value!r})")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name}: must be {valid} (got {value!r})")
    return int(value)


def check_float(name: str, value: Any, low: Optional[float] = None, high: Optional[float] = None,
                low_open: bool = False) -> float:
    """``value`` as a finite float in the range, else ``ValueError`` naming ``name`` and the range."""
    bounds = ([f"{'>' if low_open else '>='} {low:g}"] if low is not None else []) + ([f"<= {high:g}"] if high is not None else [])
    valid = " and ".join(["a finite number", *bounds])
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be {valid} (got {value!r})") from None
    if isinstance(value, bool) or not math.isfinite(x) or (low is not None and (x <= low if low_open else x < low)) \
            or (high is not None and x > high):
        raise ValueError(f"{name}: must be {valid} (got {value!r})")
    return x


def likely_fields(cfg: Any) -> str:
    """The config fields that most likely drive a state to infinity: large entries of the
    attention matrices, large β, γ, biases or noise scale, or a large step T/L."""
    if cfg is None:
        return "the step size and the scales of the attention and the noise"
    found = []
    for name in ("Q", "K", "V"):
        mat = getattr(cfg, name, None)
        if mat is not None:
            top = max(abs(x) for row in mat for x in row)
            if top > 1e3:
                found.append(f"{name} (entries up to {top:.3g})")
    for name in ("beta", "gamma_value", "sigma_U", "sigma_W", "noise_scale"):
        value = getattr(cfg, name, None)
        if isinstance(value, (int, float)) and abs(value) > 1e3:
            found.append(f"{name.removesuffix('_value')} = {value:.3g}")
    dt = getattr(cfg, "T", 0.0) / max(1, getattr(cfg, "L", 1))
    if dt > 1:
        found.append(f"the step T/L = {dt:.3g} (raise L or lower T)")
    return ", ".join(found) or "the step T/L and the scales of beta, gamma, Q, K, V, sigma_U, sigma_W, noise_scale"


def check_finite(X: torch.Tensor, layer: int, cfg: Any = None, what: str = "tokens") -> torch.Tensor:
    """Return ``X`` if every entry is finite; else raise :class:`NonFiniteError` naming ``layer``
    and the fields of ``cfg`` that likely caused it. One sum per call: a NaN or an infinity makes
    the sum non-finite, and only then (or if finite entries overflow it) is every entry checked
    (``torch.isfinite`` is several passes over X: 10× the sum, about 3% of a layer)."""
    if not math.isfinite(float(X.sum())) and not bool(torch.isfinite(X).all()):
        raise NonFiniteError(f"non-finite {what} at layer {layer}: the run was stopped and nothing was written; "
                             f"likely cause: {likely_fields(cfg)}")
    return X
