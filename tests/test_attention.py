"""The softmax attention of the layer (``model.attention``, SPEC §1) against its formula written
out: β scales the queries' scores and γ the values, exactly (the products skipped at 1 and made
at every other value). The pathwise reference of attention in the layer and the SDE:
tests/test_reference.py; the random-batch estimate: tests/test_random_batch.py; the variants of
SPEC §7: tests/test_variants.py."""

from __future__ import annotations

import numpy as np
import pytest

from stochformer.model.attention import SoftmaxAttention


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
