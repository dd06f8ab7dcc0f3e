"""`solve`'s contract, tested from its definitions: the records are the same whatever the objects'
addresses, the torch output is the dataset as tensors, the hook and the path as documented, and
every refusal names its argument."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath
from stochformer.core.validation import NonFiniteError
from stochformer.integrate import SaveAt, describe, solve

ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


class Plain:
    """A user part with the default repr (an address) and public and private attributes."""

    def __init__(self, scale: float, tag: str, table: torch.Tensor) -> None:
        self.scale, self.tag, self.table, self._cache = scale, tag, table, object()


class Named(Plain):
    def __repr__(self) -> str:
        return f"Named(scale={self.scale})" + "x" * 300


class Slotted:
    __slots__ = ("scale",)

    def __init__(self, scale: float) -> None:
        self.scale = scale


class Rotate:
    """A user model on the sphere: each token moves towards its neighbour (deterministic, cheap)."""

    def __init__(self, rate: float = 1.0) -> None:
        self.rate = rate

    def reset(self, batch, d, generator, dtype, device) -> None:
        self.kick = torch.randn(d, generator=generator, dtype=dtype, device=device)

    def step(self, X, dt, draws):
        return torch.nn.functional.normalize(X + dt * self.rate * X.roll(1, dims=1) + 0.01 * self.kick, dim=-1)


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(-1e6, 1e6, allow_nan=False), tag=st.text(max_size=8), n=st.integers(0, 4))
def test_describe_never_records_an_address(scale, tag, n):
    """Two equal user objects at different addresses are described alike, and no description holds
    an address: an object with the default repr by its type and public attributes (private ones
    left out, a tensor by shape and dtype), one with its own repr by that repr cut to 200
    characters, one without attributes by its type alone."""
    a, b = Plain(scale, tag, torch.zeros(n, 2)), Plain(scale, tag, torch.zeros(n, 2))
    assert id(a) != id(b) and describe(a) == describe(b)
    assert describe(a) == {"type": f"{__name__}.Plain",
                           "attributes": {"scale": scale, "tag": tag, "table": {"tensor": [n, 2], "dtype": "float32"}}}
    assert describe(Named(scale, tag, torch.zeros(1))) == {"type": f"{__name__}.Named",
                                                            "repr": repr(Named(scale, tag, torch.zeros(1)))[:200]}
    assert describe(Slotted(scale)) == {"type": f"{__name__}.Slotted"}
    for obj in (a, Slotted(scale), [a, (b,)], {"k": a}):
        assert not ADDRESS.search(json.dumps(describe(obj))), describe(obj)


def test_a_user_model_is_recorded_alike_by_two_runs_of_one_seed():
    """The dataset's attributes of two runs of one seed with two instances of a user model are equal
    (besides the elapsed nothing differs: the model's record holds no address)."""
    X0 = sf.sphere.uniform(batch=2, N=3, d=3, seed=0)
    one, two = (solve(Rotate(0.5), X0, T=1.0, steps=3, seed=4) for _ in range(2))
    assert one.attrs == two.attrs and one.identical(two)
    assert json.loads(one.attrs["model"]) == {"type": f"{__name__}.Rotate",
                                              "attributes": {"rate": 0.5, "kick": {"tensor": [3], "dtype": "float64"}}}
