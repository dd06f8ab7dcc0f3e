"""The random-feature field's fused increment (one product for the features, φ in place, buffers
kept across steps) gives the numbers of the plain formula, for every shape, chunking, activation
and shared or per-sample field; the buffers kept across steps never leak into a later result."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer.model.noise as noise
from stochformer.core.brownian import BrownianPath, Draws
from stochformer.model.activations import get_activation
from stochformer.model.noise import RandomFeatureField


def reference_increment(field: RandomFeatureField, X: torch.Tensor, dt: float, draws: Draws) -> torch.Tensor:
    """The plain formula, pass by pass: s √dt ( φ(X u/√d + b) Z /√M + σ_W Z⁰ )."""
    B, N, d = X.shape
    u, b = field._u, field._b
    F = u.shape[0]
    Z = draws.brownian((F, field.features, d), X.dtype, X.device)
    Xf = X.reshape(1, B * N, d) if F == 1 and B > 1 else X
    phi = get_activation(field.activation)(Xf @ u / math.sqrt(d) + b)
    out = (phi @ Z).reshape(B, N, d) / math.sqrt(field.features)
    if field.sigma_W > 0:
        out = out + field.sigma_W * draws.brownian((F, 1, d), X.dtype, X.device)
    return (field.scale * math.sqrt(dt)) * out


def _field(activation, M, sigma_U, sigma_W, chunk, F, d, seed):
    field = RandomFeatureField(activation, features=M, sigma_U=sigma_U, sigma_W=sigma_W, scale=1.3, token_chunk=chunk)
    field.reset(F, d, torch.Generator().manual_seed(seed), torch.float64, "cpu")
    return field


def _close(new: torch.Tensor, old: torch.Tensor) -> None:
    scale = float(old.abs().max()) or 1.0
    assert float((new - old).abs().max()) <= 1e-13 * scale


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(1, 4), N=st.integers(1, 9), d=st.integers(1, 6), M=st.integers(1, 40),
    shared=st.booleans(), chunk=st.one_of(st.none(), st.integers(1, 10)),
    activation=st.sampled_from(["relu", "tanh", "gelu", "linear"]),
    sigma_U=st.sampled_from([0.0, 0.7]), sigma_W=st.sampled_from([0.0, 0.4]), seed=st.integers(0, 2**31),
)
def test_fused_increment_equals_the_formula(B, N, d, M, shared, chunk, activation, sigma_U, sigma_W, seed):
    F = 1 if shared else B
    field = _field(activation, M, sigma_U, sigma_W, chunk, F, d, seed)
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(B, N, d, generator=g, dtype=torch.float64)
    for _ in range(3):  # the kept buffers are reused from the second step on
        state = g.get_state()
        new = field.increment(X, 0.05, Draws(g))
        g.set_state(state)
        old = reference_increment(field, X, 0.05, Draws(g))
        _close(new, old)
        X = X + new


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(2, 6), N=st.integers(1, 7), d=st.integers(1, 5), M=st.integers(1, 30),
    chunk=st.one_of(st.none(), st.integers(1, 8)), block=st.integers(1, 300),
    activation=st.sampled_from(["relu", "tanh"]), sigma_W=st.sampled_from([0.0, 0.4]), seed=st.integers(0, 2**31),
)
def test_sample_blocks_give_the_same_numbers(B, N, d, M, chunk, block, activation, sigma_W, seed):
    """Features formed a block of samples at a time (FEATURE_BLOCK entries) give, bit for bit, the
    increment of one pass over all samples, step after step (buffers kept across steps)."""
    runs = []
    for limit in (block, 1 << 40):
        field = _field(activation, M, 0.5, sigma_W, chunk, B, d, seed)
        g = torch.Generator().manual_seed(seed + 1)
        X = torch.randn(B, N, d, generator=g, dtype=torch.float64)
        steps = []
        old, noise.FEATURE_BLOCK = noise.FEATURE_BLOCK, limit
        try:
            for _ in range(3):
                steps.append(field.increment(X, 0.05, Draws(g)))
                X = X + steps[-1]
        finally:
            noise.FEATURE_BLOCK = old
        runs.append(torch.stack(steps))
    assert torch.equal(runs[0], runs[1])


def test_gradients_flow_through_sample_blocks(monkeypatch):
    monkeypatch.setattr(noise, "FEATURE_BLOCK", 5)  # one sample per block
    field = _field("tanh", 8, 0.5, 0.0, None, 3, 2, 0)
    X = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    field.increment(X, 0.1, Draws(torch.Generator().manual_seed(2))).pow(2).sum().backward()
    gX = X.grad.clone()
    X.grad = None
    reference_increment(field, X, 0.1, Draws(torch.Generator().manual_seed(2))).pow(2).sum().backward()
    assert torch.allclose(gX, X.grad, rtol=1e-12, atol=1e-14)


def test_results_do_not_share_the_kept_buffers():
    field = _field("relu", 32, 0.5, 0.3, None, 2, 3, 0)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    first = field.increment(X, 0.1, Draws(g))
    kept = first.clone()
    field.increment(X, 0.1, Draws(g))
    assert torch.equal(first, kept)


def test_changed_features_are_used():
    """[u/√d; b] is made again once u or b changes (in place or replaced)."""
    field = _field("relu", 16, 0.5, 0.0, None, 1, 3, 0)
    X = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    field.increment(X, 0.1, Draws(torch.Generator().manual_seed(3)))
    field._u.mul_(2.0)
    field._b.add_(0.25)
    _close(field.increment(X, 0.1, Draws(torch.Generator().manual_seed(3))),
           reference_increment(field, X, 0.1, Draws(torch.Generator().manual_seed(3))))
    field._u = -field._u
    _close(field.increment(X, 0.1, Draws(torch.Generator().manual_seed(3))),
           reference_increment(field, X, 0.1, Draws(torch.Generator().manual_seed(3))))


def test_path_driven_increment_equals_the_formula():
    field = _field("relu", 24, 0.5, 0.3, 3, 2, 3, 0)
    path = BrownianPath(field.path_shape(2, 3), 4, seed=5)
    X = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    for k in range(4):
        _close(field.increment(X, 0.25, Draws(g, path, k, 4)), reference_increment(field, X, 0.25, Draws(g, path, k, 4)))


def test_gradients_flow_through_the_features():
    field = _field("tanh", 8, 0.5, 0.0, None, 1, 2, 0)
    X = torch.randn(1, 3, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    field.increment(X, 0.1, Draws(torch.Generator().manual_seed(2))).sum().backward()
    gX = X.grad.clone()
    X.grad = None
    reference_increment(field, X, 0.1, Draws(torch.Generator().manual_seed(2))).sum().backward()
    assert torch.allclose(gX, X.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtypes(dtype):
    field = RandomFeatureField("relu", features=64, sigma_U=0.5)
    field.reset(3, 4, torch.Generator().manual_seed(0), dtype, "cpu")
    X = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(1), dtype=dtype)
    new = field.increment(X, 0.1, Draws(torch.Generator().manual_seed(2)))
    old = reference_increment(field, X, 0.1, Draws(torch.Generator().manual_seed(2)))
    assert new.dtype == dtype
    tol = 1e-13 if dtype == torch.float64 else 1e-5
    assert float((new - old).abs().max()) <= tol * float(old.abs().max())
