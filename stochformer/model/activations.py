"""Activation functions φ of the random MLP (SPEC §1), by name or as any callable.

Every activation is a function ``Tensor -> Tensor`` applied elementwise. Named ones are listed in
`ACTIVATIONS`; [`get_activation`][stochformer.model.activations.get_activation] also accepts any Python callable.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Union

import torch

from ..core.validation import callable_name, callable_record, check_output, first_call, import_object

Activation = Callable[[torch.Tensor], torch.Tensor]
ActivationLike = Union[str, Activation]

LEAKY_RELU_SLOPE = 0.01


def _linear(x: torch.Tensor) -> torch.Tensor:
    return x


def _leaky_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x, LEAKY_RELU_SLOPE)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    # exact GELU x Φ(x) (not the tanh approximation)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


ACTIVATIONS: dict[str, Activation] = {
    "relu": torch.relu,
    "leaky_relu": _leaky_relu,
    "gelu": _gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": torch.nn.functional.silu,
    "erf": torch.erf,
    "sin": torch.sin,
    "linear": _linear,
}

#: Odd activations: with no biases the noise field is odd, and synchronisation is only up to sign
#: (SPEC §5, last item).
ODD_ACTIVATIONS = frozenset({"tanh", "erf", "sin", "linear"})

#: Activations with a kink (not C¹): the kernel K(u) then has a (1 − u)^{3/2} term at u = 1 (for ReLU
#: the arc-cosine kernel), so quantities measured at a pair distance δ carry a bias of order δ.
KINKED_ACTIVATIONS = frozenset({"relu", "leaky_relu"})


def get_activation(activation: ActivationLike) -> Activation:
    """Return the elementwise function for a name in `ACTIVATIONS` or a callable; a user's
    callable comes back checked on its first call (it must return a finite tensor of its input's
    shape: ``ValueError`` naming it otherwise).

    Parameters
    ----------
    activation : str or callable
        A name in `ACTIVATIONS`, an import string ``"package.module:function"``, or an elementwise
        ``Tensor -> Tensor`` callable.

    Returns
    -------
    callable
        The elementwise function φ.

    Raises
    ------
    ValueError
        An unknown name (listing the valid ones), or an import string that names no callable.
    """
    if callable(activation):
        return activation if any(activation is fn for fn in ACTIVATIONS.values()) else _first_call_checked(activation)
    if isinstance(activation, str) and ":" in activation:
        fn = import_object(activation, "activation")
        if not callable(fn):
            raise ValueError(f"activation: {activation!r} names a {type(fn).__name__}, not a callable")
        return _first_call_checked(fn)
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        valid = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(
            f"activation: unknown activation {activation!r}; valid names are {valid} "
            "(or an import string 'package.module:function', or any callable from the Python API)"
        ) from None


def _first_call_checked(fn: Activation) -> Activation:
    checked: list[bool] = []

    @functools.wraps(fn)
    def phi(x: torch.Tensor) -> torch.Tensor:
        if checked:
            return fn(x)
        y = first_call(f"activation ({callable_name(fn)})", False, x, fn, x)
        check_output(f"activation ({callable_name(fn)})", y, x)
        checked.append(True)
        return y

    return phi


def activation_name(activation: ActivationLike) -> str:
    """A printable name: the registry name, the callable's ``__name__``, a partial's ``f(k=v, …)``,
    an instance's own repr, or where that repr is the default one ``Class(name=value, …)`` with its
    recorded parameters (`callable_record`; never a memory address).

    Parameters
    ----------
    activation : str or callable
        As for [`get_activation`][stochformer.model.activations.get_activation].

    Returns
    -------
    str
        The name.
    """
    if isinstance(activation, str):
        return activation
    if hasattr(activation, "__name__"):
        return activation.__name__
    params = callable_record(activation).get("parameters", {})
    if isinstance(activation, functools.partial):
        name = getattr(activation.func, "__name__", type(activation.func).__name__)
        params = {**{f"arg{i}": a for i, a in enumerate(params["args"])}, **params["keywords"]}
    elif " at 0x" not in repr(activation):
        return repr(activation)  # the instance's own description
    else:
        name = type(activation).__name__
    inside = ", ".join(f"{k}={v}" for k, v in params.items()) if isinstance(params, dict) else params
    return f"{name}({inside})"
