"""The activation registry (SPEC §1) against the definitions its flags stand for: which φ are odd
(synchronisation only up to sign, SPEC §5), which have a kink (the kernel's (1 − u)^{3/2} term), how
a user's callable or import string is taken and checked, and how a part is named in a record."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.model.activations import (
    ACTIVATIONS,
    KINKED_ACTIVATIONS,
    LEAKY_RELU_SLOPE,
    ODD_ACTIVATIONS,
    activation_name,
    get_activation,
)

finite = st.floats(-20.0, 20.0, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(xs=st.lists(finite, min_size=1, max_size=16))
def test_odd_activations_are_exactly_the_odd_functions(xs: list[float]) -> None:
    """φ ∈ ODD_ACTIVATIONS ⇔ φ(−x) = −φ(x): on any points for the odd ones; the others differ
    from odd somewhere on a fixed grid (so the flag is neither too wide nor too narrow)."""
    x = torch.tensor(xs, dtype=torch.float64)
    grid = torch.linspace(-3.0, 3.0, 61, dtype=torch.float64)
    assert ODD_ACTIVATIONS <= set(ACTIVATIONS)
    for name, phi in ACTIVATIONS.items():
        if name in ODD_ACTIVATIONS:
            torch.testing.assert_close(phi(-x), -phi(x), rtol=0.0, atol=1e-15)
        else:
            assert float((phi(-grid) + phi(grid)).abs().max()) > 1e-3, name


def test_kinked_activations_are_exactly_those_with_a_derivative_jump() -> None:
    """φ ∈ KINKED_ACTIVATIONS ⇔ φ is not C¹: its one-sided difference quotients at the kink 0
    differ (ReLU 1 against 0, leaky ReLU 1 against the slope); for the smooth ones they agree to
    O(h) at 0 and everywhere on a grid."""
    h = 1e-6
    pts = torch.linspace(-3.0, 3.0, 61, dtype=torch.float64)
    for name, phi in ACTIVATIONS.items():
        right = (phi(pts + h) - phi(pts)) / h
        left = (phi(pts) - phi(pts - h)) / h
        jump = float((right - left).abs().max())
        assert (jump > 0.5 * (1 - LEAKY_RELU_SLOPE)) == (name in KINKED_ACTIVATIONS), (name, jump)
    leaky = ACTIVATIONS["leaky_relu"]
    assert LEAKY_RELU_SLOPE == 0.01
    torch.testing.assert_close(leaky(torch.tensor([-2.0, 3.0], dtype=torch.float64)),
                               torch.tensor([-2.0 * LEAKY_RELU_SLOPE, 3.0], dtype=torch.float64), rtol=0.0, atol=0.0)


def test_named_activations_come_back_as_themselves() -> None:
    """A name, or the registry's own function passed as a callable, gives the registry's function
    (no checking wrapper: it is known to be elementwise and finite)."""
    for name, phi in ACTIVATIONS.items():
        assert get_activation(name) is phi
        assert get_activation(phi) is phi
        assert activation_name(name) == name


def test_import_strings() -> None:
    """``"module:attribute"`` names a callable, returned checked on its first call; anything else is
    one ValueError naming the field."""
    phi = get_activation("torch:cos")
    assert phi.__wrapped__ is torch.cos
    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    torch.testing.assert_close(phi(x), torch.cos(x), rtol=0.0, atol=0.0)
    with pytest.raises(ValueError, match=r"^activation: 'torch:pi' names a float, not a callable$"):
        get_activation("torch:pi")
    with pytest.raises(ValueError, match=r"^activation: cannot import 'no_such_module_xyz:f'"):
        get_activation("no_such_module_xyz:f")
    with pytest.raises(ValueError, match=r"^activation: unknown activation 'swish'; valid names are "):
        get_activation("swish")


@pytest.mark.parametrize("bad, message", [
    (lambda x: x[..., :1], r"returned shape \(2, 1\), expected \(2, 3\)"),
    (lambda x: x / 0.0, r"returned non-finite values"),
    (lambda x: x.float(), r"must return a float64 tensor"),
    (lambda x: 1.0, r"must return a tensor of shape \(2, 3\)"),
])
def test_a_users_callable_is_checked_on_its_first_call(bad, message) -> None:
    """The first call of a user's φ raises one ValueError naming the activation and the callable
    when it returns something that is not a finite float64 tensor of its input's shape."""
    phi = get_activation(bad)
    with pytest.raises(ValueError, match=r"^activation \(.*<lambda>\): " + message):
        phi(torch.ones(2, 3, dtype=torch.float64))


def test_a_users_callable_is_checked_once() -> None:
    """Only the first call is checked (the hot loops stay unchecked): a φ that is fine on its first
    call passes its later outputs through as they are."""
    calls = []

    def phi(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x if len(calls) == 1 else x[..., :1]

    wrapped = get_activation(phi)
    x = torch.ones(2, 3, dtype=torch.float64)
    assert wrapped(x).shape == (2, 3)
    assert wrapped(x).shape == (2, 1)
    assert wrapped.__name__ == "phi" and activation_name(phi) == "phi"


class _Scaled:
    def __init__(self, a: float) -> None:
        self.a = a

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * x


class _Slotted:
    __slots__ = ()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Plain:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Described(_Scaled):
    def __repr__(self) -> str:
        return f"described {self.a}"


def test_activation_names_never_show_an_address() -> None:
    """Records name a φ by its registry name, ``__name__``, a partial's ``f(arg0=…, k=v)``, an
    instance's own repr, or ``Class(field=value)`` for an instance with the default repr."""
    leaky = functools.partial(torch.nn.functional.leaky_relu, negative_slope=0.2)
    assert activation_name(leaky) == "leaky_relu(negative_slope=0.2)"
    assert activation_name(functools.partial(torch.mul, 2.0)) == "mul(arg0=2.0)"
    assert activation_name(_Scaled(2.5)) == "_Scaled(a=2.5)"
    assert activation_name(_Described(1.0)) == "described 1.0"
    assert activation_name(_Slotted()) == "_Slotted(unrecorded)"
    assert activation_name(_Plain()) == "_Plain()"
    two = functools.partial(torch.nn.functional.elu, alpha=0.5, inplace=False)
    assert activation_name(two) == "elu(alpha=0.5, inplace=False)"
    assert activation_name(functools.partial(_Scaled(2.0))) == "_Scaled()"
    for fn in (leaky, _Scaled(2.5), _Described(1.0), _Slotted(), _Plain(), functools.partial(_Scaled(2.0))):
        assert " at 0x" not in activation_name(fn)
