"""The Lyapunov spectrum of N tokens at a cluster with attention (SPEC §8,
experiments.cluster_spectrum): {λ_i} ∪ {λ_i + c}, c = −log(1 + γΔt)/Δt → −γ, checked sample by
sample against one token at the cluster's centre on the same draws, on the transformer and on the
limit SDE (c = −γ as Δt → 0), and the stability criterion λ₁ < −δ under V = −δI."""

from __future__ import annotations

import math

import pytest
import torch

from stochformer.experiments.cluster_spectrum import cluster_spectrum, cluster_stability, stability_rows
from stochformer.measure.verdict import FAILS, HOLDS
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import RandomMLP
from stochformer.model.sde import LimitSDE
from stochformer.model.tangent import ExactJet, MLPJet
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


# --------------------------------------------------------------------------- the limit SDE


def _sde_run(gamma: float, steps: int, N: int = 4, d: int = 4, activation: str = "tanh", seed: int = 5):
    jet = ExactJet(NoiseKernel(activation, d))
    return cluster_spectrum(LimitSDE(SoftmaxAttention(beta=1.0, gamma=gamma), jet, "heun"), jet, N, d, 1.0, steps, 16, seed)


@pytest.mark.parametrize("gamma", [1.0, -0.5])
def test_sde_cluster_spectrum_is_the_centres_and_minus_gamma(gamma):
    """The limit SDE (Heun, the exact field's jet), N = 4 tokens at consensus: the consensus block is the
    centre's spectrum sample by sample, and the relative blocks' shift (tokens − centre, per sample) is
    −γ once extrapolated in Δt (Richardson over Δt = 1/25, 1/50: the step's bias is first order,
    measured 0.007 at Δt = 1/25 for γ = 1); tolerance 4.5 SE of the extrapolated mean."""
    coarse, fine = _sde_run(gamma, 25), _sde_run(gamma, 50)
    for r in (coarse, fine):
        assert r.tokens.shape == (16, 4, 3)
        assert float((r.tokens[:, 0] - r.centre).abs().max()) < TOL  # measured ≤ 3e-6
    g_c, g_f = coarse.relative_gap(), fine.relative_gap()
    extrapolated = 2 * float(g_f.mean()) - float(g_c.mean())
    se = math.hypot(2 * float(g_f.std()) / 4, float(g_c.std()) / 4)
    assert abs(extrapolated + gamma) < 4.5 * se, (extrapolated, se)
    # wrong shifts are rejected: none, the opposite sign, twice λ̄'s −2γ
    for wrong in (0.0, gamma, -2 * gamma):
        assert abs(extrapolated - wrong) > 20 * se, wrong


def test_stability_rule_on_the_sde_and_on_wrong_criteria():
    """V = −δI on N = 4 tokens of the limit SDE: ReLU d = 5 (λ₁ = −0.1) with δ = 1 spreads (prediction
    λ₁ + δ = 0.9), sigmoid d = 5 (λ₁ = −0.511) with δ = 0.2 stays together (−0.311); each row holds
    with the criterion λ₁ < −δ and fails with a wrong one (λ₁ < +δ, or the predictions swapped)."""
    results = [cluster_stability("relu", 5, 0.0, delta=1.0, steps=100, batch=16, seed=1),
               cluster_stability("sigmoid", 5, 0.0, delta=0.2, steps=100, batch=16, seed=2)]
    assert [r.predicted_stable for r in results] == [False, True]
    for r in results:
        assert abs(r.measured - (r.lambda_1 + r.delta)) < 4.5 * r.se + 0.05, r  # 0.05: the step's bias at Δt = 0.05
    assert [row.verdict for row in stability_rows(results)] == [HOLDS, HOLDS]
    # the tokens themselves (the step is nonlinear): most samples spread, most contract (single samples fluctuate:
    # the finite-time exponent's SD is √((κ + κ')/T) ≈ 0.2)
    assert results[0].contracted < 0.5 < results[1].contracted
    assert stability_rows(results, [r.lambda_1 < r.delta for r in results])[0].verdict == FAILS
    assert [row.verdict for row in stability_rows(results, [True, False])] == [FAILS, FAILS]


def test_sde_refuses_what_it_cannot_split():
    jet = ExactJet(NoiseKernel("tanh", 3))
    with pytest.raises(ValueError, match="jet"):
        cluster_spectrum(LimitSDE(SoftmaxAttention(gamma=1.0), jet, "heun"),
                         MLPJet(RandomMLP(width=8, activation="tanh", mode="weights")), 4, 3, 1.0, 10, 2)
    with pytest.raises(ValueError, match="jet"):
        cluster_spectrum(Transformer(SoftmaxAttention(gamma=1.0), None, "post_ln"), jet, 4, 3, 1.0, 10, 2)
    with pytest.raises(ValueError, match=r"k: frame vectors per block must be in 1..d-1 = 2 \(got 3\)"):
        cluster_spectrum(LimitSDE(SoftmaxAttention(gamma=1.0), jet, "heun"), jet, 4, 3, 1.0, 10, 2, k=3)
