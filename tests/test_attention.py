"""The softmax attention of the layer (``model.attention``, SPEC §1) against its formula written
out: β scales the queries' scores and γ the values, exactly (the products skipped at 1 and made
at every other value); chunked attention beyond the exponent range, ``from_matrices``' defaults
and options, the query chunk's score block, the flop counts the roofline figures divide by. The
pathwise reference of attention in the layer and the SDE: tests/test_reference.py; the random-batch estimate: tests/test_random_batch.py; the variants of
SPEC §7: tests/test_variants.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from stochformer.model.attention import RandomBatchAttention, SoftmaxAttention, query_chunk

from conftest import close


def _attention(X: np.ndarray, beta: float, gamma: float) -> np.ndarray:
    """Σ_j softmax_j(β⟨x_i, x_j⟩) γ x_j for each token of X (N, d), written out."""
    s = beta * X @ X.T
    w = np.exp(s - s.max(1, keepdims=True))
    return gamma * (w / w.sum(1, keepdims=True)) @ X


@pytest.mark.parametrize("beta, gamma", [(1.0, 1.0), (2.0, 2.0), (2.0, 1.0), (1.0, 2.0)])
def test_attention_scales_queries_by_beta_and_values_by_gamma(beta, gamma, tokens):
    """β = 1 and γ = 1 skip a product (1·x = x exactly); every other value multiplies, 2 included."""
    X = tokens(2, 5, 3, seed=7)
    got = SoftmaxAttention(beta=beta, gamma=gamma)(X).numpy()
    ref = np.stack([_attention(x, beta, gamma) for x in X.numpy()])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


# ----------------------------------------------------------------- chunked attention beyond the exponent range, from_matrices, the query chunk


def softmax_reference(Xq: np.ndarray, Xk: np.ndarray, beta: float) -> np.ndarray:
    """Σ_j softmax_j(β⟨x_i, y_j⟩) y_j with the row maximum subtracted (exact for any β)."""
    out = np.zeros_like(Xq)
    for b in range(len(Xq)):
        s = beta * Xq[b] @ Xk[b].T
        w = np.exp(s - s.max(-1, keepdims=True))
        out[b] = (w / w.sum(-1, keepdims=True)) @ Xk[b]
    return out


def test_chunked_attention_beyond_the_exponent_range():
    """Chunked attention equals the softmax for scores far outside exp's range: queries opposite a
    cloud of keys at β = 600 (every shifted score < −709 would underflow), and β = 1050 on two
    tokens whose coordinates are spread over d = 32 (scores above 709 would overflow)."""
    r = np.random.default_rng(43)
    keys = np.array([1.0, 0.0, 0.0]) + 0.2 * r.standard_normal((2, 6, 3))
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)
    queries = -keys[:, :4] + 0.1 * r.standard_normal((2, 4, 3))
    queries /= np.linalg.norm(queries, axis=-1, keepdims=True)
    att = SoftmaxAttention(beta=600.0, gamma=1.0, chunk=2)
    close(att(torch.from_numpy(queries), torch.from_numpy(keys)), softmax_reference(queries, keys, 600.0))
    X = np.zeros((1, 2, 32))
    X[0, 0, :16] = X[0, 1, 16:] = 0.25
    X[0, 1, :16] = 1e-3
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    att = SoftmaxAttention(beta=1050.0, gamma=1.0, chunk=1)
    close(att(torch.from_numpy(X)), softmax_reference(X, X, 1050.0))


def test_attention_from_matrices_defaults_and_options():
    """β = γ = 1 by default; a missing Q or K is the identity (A = Qᵀ or K); options and dtype are
    passed on; without Q, K and V the scalar attention is used."""
    d = 3
    r = np.random.default_rng(44)
    Q, K, V = (r.standard_normal((d, d)) for _ in range(3))
    att = SoftmaxAttention.from_matrices(d)
    assert (att.beta, att.gamma, att.A, att.V, att.chunk, att.sdpa) == (1.0, 1.0, None, None, None, False)
    close(SoftmaxAttention.from_matrices(d, Q=Q).A, Q.T)
    close(SoftmaxAttention.from_matrices(d, K=K).A, K)
    close(SoftmaxAttention.from_matrices(d, Q=Q, K=K, V=V).V, V)
    att = SoftmaxAttention.from_matrices(d, 2.0, 3.0, Q=Q.tolist(), dtype=torch.float32, chunk=5, sdpa=True)
    assert (att.beta, att.gamma, att.chunk, att.sdpa, att.A.dtype, att.A.device.type) == (2.0, 3.0, 5, True, torch.float32, "cpu")
    assert SoftmaxAttention.from_matrices(d, K=K.tolist(), dtype=torch.float32).A.dtype == torch.float32


def test_query_chunk_keeps_a_score_block_within_block():
    """Rows per chunk: at most block // N (so a chunk's scores fit in ``block`` entries), at least 1,
    at most N."""
    for N, block, rows in ((100, 50, 1), (100, 150, 1), (100, 250, 2), (10, 1000, 10), (1, 5, 1)):
        assert query_chunk(N, block) == rows


# ----------------------------------------------------------------- flop counts (the roofline's numerator, benchmarks/)


def _counted(att, X: torch.Tensor) -> float:
    """Matrix-product flops per sample that PyTorch's flop counter sees in one call, the fused
    attention taken apart into its products (the math backend)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        att(X)
    return counter.get_total_flops() / X.shape[0]


@settings(max_examples=40, deadline=None)
@given(N=st.integers(2, 24), d=st.integers(2, 5), p=st.integers(2, 12), batch=st.integers(1, 3),
       with_A=st.booleans(), with_V=st.booleans(), seed=st.integers(0, 2**16))
def test_flops_are_the_products_a_call_makes(N, d, p, batch, with_A, with_V, seed):
    """``flops(N, d)`` against the products one call makes, counted by PyTorch: equal for the exact
    attention with A (queries X A, scores, X Vᵀ, weights times values); without A the scores are a
    Gram matrix, N(N+1)/2 distinct entries, N(N − 1)d flops fewer than the full product counted.
    Random batches: 4 d Σ_k b_k² over batches of sizes b_k, which is 4 N p d when p divides N or
    N ≤ p; otherwise the last batch has p + 1 to 2p − 1 tokens and the count lies in
    [flops, 2·flops)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(d, d, generator=g, dtype=torch.float64) if with_A else None
    V = torch.randn(d, d, generator=g, dtype=torch.float64) if with_V else None
    exact = SoftmaxAttention(beta=1.5, gamma=0.5) if A is None and V is None else SoftmaxAttention(A=A, V=V)
    X = torch.randn(batch, N, d, generator=g, dtype=torch.float64)
    gram_saving = 0.0 if with_A else N * (N - 1.0) * d
    assert exact.flops(N, d) == _counted(exact, X) - gram_saving
    rb = RandomBatchAttention(exact, p, seed)
    counted = _counted(rb, X)
    if N % p == 0 or N <= p:
        assert rb.flops(N, d) == counted
    else:
        assert rb.flops(N, d) <= counted < 2 * rb.flops(N, d)


def test_matrices_of_another_dtype_or_size_are_refused_naming_them():
    """A and V of one attention: one dtype and device, one size d × d; else one error naming them."""
    A64, V32, V4 = torch.eye(3, dtype=torch.float64), torch.eye(3, dtype=torch.float32), torch.eye(4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^SoftmaxAttention: its tensors must share one dtype and device "
                                         r"\(got A: float64 on cpu, V: float32 on cpu\)$"):
        SoftmaxAttention(A=A64, V=V32)
    with pytest.raises(ValueError, match=r"^V: must be d x d like A \(got A \(3, 3\), V \(4, 4\)\)$"):
        SoftmaxAttention(A=A64, V=V4)
    for kw in ({"A": A64}, {"V": V4}, {"A": A64, "V": 2 * A64}):  # either alone, or both of one size
        assert SoftmaxAttention(**kw).d == len(next(iter(kw.values())))
