"""The Lyapunov spectrum of N tokens at a cluster with attention (SPEC §8,
experiments.cluster_spectrum): {λ_i} ∪ {λ_i + c}, c = −log(1 + γΔt)/Δt → −γ, checked sample by
sample against one token at the cluster's centre on the same draws."""

from __future__ import annotations

import math

import pytest
import torch

from stochformer.experiments.cluster_spectrum import cluster_spectrum
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.noise import RandomMLP
from stochformer.model.tangent import MLPJet
from stochformer.model.transformer import Transformer

#: measured |tokens − predicted| at spread 10⁻⁶ over these cases: ≤ 1e-5 (second-order terms, O(spread))
TOL = 1e-4


def _run(gamma: float, N: int = 4, d: int = 4, spread: float = 1e-6, activation: str = "tanh", steps: int = 50):
    model = Transformer(SoftmaxAttention(beta=1.0, gamma=gamma), None, "post_ln")
    return cluster_spectrum(model, MLPJet(RandomMLP(width=64, activation=activation, mode="weights")), N, d, 1.0, steps, 16, 3,
                            spread=spread)


@pytest.mark.parametrize("gamma, N, d, activation", [(1.0, 4, 4, "tanh"), (-0.05, 5, 3, "relu"), (0.5, 6, 2, "erf")])
def test_cluster_spectrum_is_the_centres_and_its_shift(gamma, N, d, activation):
    r = _run(gamma, N, d, activation=activation)
    assert r.tokens.shape == (16, N, d - 1)
    assert float((r.tokens - r.predicted()).abs().max()) < TOL
    dt = 1.0 / 50
    assert r.shift == pytest.approx(-math.log1p(gamma * dt) / dt, rel=1e-12)
    # wrong predictions are rejected: no shift, the continuous-time −γ, the first-order sign slip log(1 − γΔt)/Δt
    # (each where it differs from c by more than the tolerance: the last two differ by O(γ²Δt))
    for wrong in (0.0, -gamma, math.log1p(-gamma * dt) / dt):
        if abs(wrong - r.shift) > 100 * TOL:
            assert float((r.tokens - r.predicted(wrong)).abs().max()) > 50 * TOL, wrong


def test_far_from_a_cluster_the_split_fails():
    """The statement is about a cluster: tokens 0.3 apart do not have the centre's spectrum."""
    r = _run(1.0, spread=0.3)
    assert float((r.tokens - r.predicted()).abs().max()) > 100 * TOL


def test_stability_of_a_repulsive_cluster_is_lambda1_against_delta():
    """V = −δI: the relative modes grow iff λ₁ + c > 0, c ≈ δ; a cluster with δ above −λ₁ spreads."""
    stable, unstable = _run(-0.05, steps=100), _run(-3.0, steps=100)
    lam1 = stable.centre.max(-1).values
    assert bool(((stable.tokens[:, 1:].amax((-1, -2)) < 0) == (lam1 + stable.shift < 0)).all())
    assert bool((unstable.tokens[:, 1:].amax((-1, -2)) > 0).all())


def test_refuses_what_it_cannot_split():
    jet = MLPJet(RandomMLP(width=8, activation="tanh", mode="weights"))
    with pytest.raises(ValueError, match="order"):
        cluster_spectrum(Transformer(SoftmaxAttention(gamma=1.0), None, "parallel"), jet, 4, 3, 1.0, 10, 2)
    with pytest.raises(ValueError, match="jet"):
        cluster_spectrum(Transformer(SoftmaxAttention(gamma=1.0), None, "post_ln"), MLPJet(RandomMLP(width=8)), 4, 3, 1.0, 10, 2)
    with pytest.raises(ValueError, match="V = gamma"):
        A = SoftmaxAttention.from_matrices(3, V=torch.eye(3))
        cluster_spectrum(Transformer(A, None, "post_ln"), jet, 4, 3, 1.0, 10, 2)
    with pytest.raises(ValueError, match="N, d"):
        cluster_spectrum(Transformer(SoftmaxAttention(gamma=1.0), None, "post_ln"), jet, 1, 3, 1.0, 10, 2)
