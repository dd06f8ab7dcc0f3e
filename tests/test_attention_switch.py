"""Which path `SoftmaxAttention` takes: the query-chunked product exactly where the docstring says
(more tokens than ``chunk``, nothing requiring grad), the dense product otherwise."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer.model.attention as attention
from stochformer.core.sphere import uniform
from stochformer.model.attention import SoftmaxAttention


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), N=st.integers(1, 9), d=st.integers(2, 5), chunk=st.integers(1, 9),
       grad=st.sampled_from(["", "X", "keys"]))
def test_chunked_exactly_for_more_tokens_than_chunk_and_no_graph(B, N, d, chunk, grad):
    """`_chunked` runs iff there are more queries than ``chunk`` (the token axis, -2, not the batch
    or the dimension) and neither the queries nor the keys (so the values) require grad; the two
    paths give the same numbers to rounding, and the gradient in what requires it is finite."""
    X = uniform(batch=B, N=N, d=d, seed=N + 7 * d).clone().requires_grad_(grad == "X")
    keys = uniform(batch=B, N=N + 1, d=d, seed=N + 7 * d + 1).clone().requires_grad_(grad == "keys")
    A = V = 0.5 * torch.eye(d, dtype=torch.float64) + 0.1
    calls = []

    def spy(*args):
        calls.append(args[-1])
        return chunked(*args)

    chunked = attention._chunked
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attention, "_chunked", spy)
        out = SoftmaxAttention(beta=1.5, A=A, V=V, chunk=chunk)(X, keys)
    assert calls == ([chunk] if N > chunk and not grad else [])
    dense = SoftmaxAttention(beta=1.5, A=A, V=V)(X, keys)
    torch.testing.assert_close(out, dense, rtol=0, atol=1e-12)
    if grad:
        (g,) = torch.autograd.grad(out.square().sum(), X if grad == "X" else keys)
        assert torch.isfinite(g).all()
    with torch.no_grad():  # no graph: chunked again
        calls.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(attention, "_chunked", spy)
            SoftmaxAttention(beta=1.5, A=A, V=V, chunk=chunk)(X, keys)
        assert calls == ([chunk] if N > chunk else [])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sdpa", [True, False])
def test_the_fused_kernel_exactly_where_sdpa_asks_for_it(sdpa, dtype, device):
    """``sdpa=True`` takes ``scaled_dot_product_attention`` in both dtypes, except float64 on CUDA
    (no fused kernel there: the chunked path); ``sdpa=False`` never takes it. Both give the dense
    numbers to the dtype's rounding."""
    X = uniform(batch=2, N=6, d=3, seed=3).to(dtype=dtype, device=device)
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].dtype)
        return fused(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        out = SoftmaxAttention(beta=1.5, chunk=2, sdpa=sdpa)(X)
    assert calls == ([dtype] if sdpa and not (device == "cuda" and dtype == torch.float64) else [])
    dense = SoftmaxAttention(beta=1.5)(X)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(out, dense, rtol=0, atol=tol)
