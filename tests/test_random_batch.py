"""Random-batch attention (model.attention.RandomBatchAttention, SPEC §4): its batches, its
reproducibility, and the law of its error against the exact attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.config import RunConfig
from stochformer.config.build import make_attention, make_particles
from stochformer.core.sphere import uniform
from stochformer.model.attention import RandomBatchAttention, SoftmaxAttention


def _exact_without_self(X: torch.Tensor, beta: float) -> torch.Tensor:
    S = beta * X @ X.transpose(-1, -2)
    S.diagonal(dim1=-2, dim2=-1).fill_(-math.inf)
    return torch.softmax(S, dim=-1) @ X


@settings(max_examples=60, deadline=None)
@given(N=st.integers(2, 48), p=st.integers(2, 20), batch=st.integers(1, 3), seed=st.integers(0, 2**32))
def test_batches_partition_the_tokens(N, p, batch, seed):
    """On the basis vectors e_1..e_N (equal scores off the diagonal) token i's output is the mean of
    its batch-mates, so the weight matrix shows the partition: zero diagonal, rows summing to 1,
    classes that are cliques with uniform weights, all of size p but one of size p..2p-1 (one class
    of N when N < 2p)."""
    X = torch.eye(N, dtype=torch.float64).expand(batch, N, N).contiguous()
    W = RandomBatchAttention(SoftmaxAttention(beta=3.0), p, seed)(X)
    for w in W:
        assert torch.all(w.diagonal() == 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(N, dtype=w.dtype), rtol=0, atol=1e-12)
        mates = w > 0
        torch.testing.assert_close(mates, mates.T)  # i attends to j iff j attends to i
        classes = {tuple(np.flatnonzero((mates[i] | (torch.arange(N) == i)).numpy())) for i in range(N)}
        sizes = sorted(len(c) for c in classes)
        assert sum(sizes) == N  # disjoint classes covering every token
        for c in classes:
            sub = w[list(c)][:, list(c)]
            torch.testing.assert_close(sub + torch.eye(len(c), dtype=w.dtype) / (len(c) - 1),
                                       torch.full_like(sub, 1 / (len(c) - 1)), rtol=0, atol=1e-12)
        if N < 2 * p:
            assert sizes == [N]
        else:
            assert sizes[:-1] == [p] * (len(sizes) - 1) and p <= sizes[-1] < 2 * p


@settings(max_examples=40, deadline=None)
@given(N=st.integers(2, 40), d=st.integers(2, 6), beta=st.floats(-4, 4), seed=st.integers(0, 2**16))
def test_one_batch_is_exact_attention_over_the_others(N, d, beta, seed):
    """With p >= N every token is in one batch: the exact softmax over j != i."""
    X = uniform(2, N, d, generator=torch.Generator().manual_seed(seed))
    out = RandomBatchAttention(SoftmaxAttention(beta=beta), max(N, 2), seed)(X)
    torch.testing.assert_close(out, _exact_without_self(X, beta), rtol=0, atol=1e-12)


def test_each_output_is_in_the_hull_of_the_other_tokens():
    """A convex combination of values of other tokens: along any direction u, ⟨u, out_i⟩ lies
    between the smallest and largest ⟨u, x_j⟩ over j != i."""
    g = torch.Generator().manual_seed(3)
    X = uniform(2, 300, 5, generator=g)
    out = RandomBatchAttention(SoftmaxAttention(beta=2.0), 16, 1)(X)
    for u in torch.randn(20, 5, generator=g, dtype=torch.float64):
        a, b = X @ u, out @ u
        lo = torch.stack([torch.cat([a[:, :i], a[:, i + 1:]], 1).amin(1) for i in range(300)], 1)
        hi = torch.stack([torch.cat([a[:, :i], a[:, i + 1:]], 1).amax(1) for i in range(300)], 1)
        assert torch.all(b >= lo - 1e-12) and torch.all(b <= hi + 1e-12)


def test_runs_reproduce_and_seeds_differ():
    X = uniform(1, 200, 4, generator=torch.Generator().manual_seed(0))
    rb = RandomBatchAttention(SoftmaxAttention(beta=1.0), 8, 5)
    first = [rb(X) for _ in range(3)]
    rb.reset(1, 4, None, X.dtype, X.device)
    again = [rb(X) for _ in range(3)]
    for a, b in zip(first, again):
        assert torch.equal(a, b)  # a reused object gives a run's numbers again
    assert not torch.equal(first[0], first[1])  # a fresh partition at every call
    assert not torch.equal(first[0], RandomBatchAttention(SoftmaxAttention(beta=1.0), 8, 6)(X))


def test_matrices_of_the_exact_attention_are_used():
    """Q, K, V of the exact attention enter as in SoftmaxAttention (one batch: over j != i)."""
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(3, 3, generator=g, dtype=torch.float64) for _ in range(3))
    exact = SoftmaxAttention.from_matrices(3, Q=Q, K=K, V=V)
    X = uniform(1, 12, 3, generator=g)
    S = (X @ Q.T) @ (X @ K.T).transpose(-1, -2)
    S.diagonal(dim1=-2, dim2=-1).fill_(-math.inf)
    ref = torch.softmax(S, -1) @ (X @ V.T)
    torch.testing.assert_close(RandomBatchAttention(exact, 12, seed=0)(X), ref, rtol=0, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=2, unique=True), L=st.integers(1, 3))
def test_runs_of_one_model_draw_their_partitions_from_the_run(seeds, L):
    """A model object with random-batch attention: the same seed gives the same numbers, reused
    run after run; another seed other partitions (the run's attention stream), so the final tokens
    (no noise: they depend on the seed only through the partitions) differ; the run's generator is
    left as the exact attention leaves it (the noise's draws are the same)."""
    from stochformer.core.runtime import make_generator
    from stochformer.integrate import SaveAt, solve
    from stochformer.model.noise import RandomMLP
    from stochformer.model.transformer import Transformer

    X0 = uniform(1, 40, 3, generator=torch.Generator().manual_seed(L))
    model = Transformer(RandomBatchAttention(SoftmaxAttention(beta=2.0), 4), None)
    runs = [solve(model, X0, 1.0, L, SaveAt(stats=(), final=True), seed=s)["X_final"].values for s in (*seeds, seeds[0])]
    assert np.array_equal(runs[0], runs[2]) and not np.array_equal(runs[0], runs[1])
    ends = []
    for att in (RandomBatchAttention(SoftmaxAttention(beta=2.0), 4), SoftmaxAttention(beta=2.0)):
        g = make_generator(seeds[0])
        solve(Transformer(att, RandomMLP(width=8)), X0, 1.0, L, SaveAt(stats=(), final=True), generator=g)
        ends.append(g.get_state())
    assert torch.equal(ends[0], ends[1])


@pytest.mark.parametrize("N, p", [(400, 8), (400, 32), (401, 50), (1000, 3)])
def test_error_has_the_sampling_law_of_a_partition(N, p):
    """At β = 0 every weight is 1/(|B(i)| − 1), so RB(x_i) is the mean of n = |B(i)| − 1 others
    drawn without replacement from the M = N − 1 others: unbiased, with variance
    S_i² (M − n)/(n M) (S_i² the others' variance, ddof 1). Token i is in the last batch, of r
    tokens, with probability r/N. The quantity: the mean over tokens of |RB(x_i) − x̄_{−i}|²,
    averaged over R = 300 partitions, against that exact expectation, to 4.5 standard errors
    (spread over the independent partitions). A wrong law — draws with replacement, variance
    S_i²/n — is rejected where it differs by more than the noise (p/N ≥ 0.05: by ≥ 8 %)."""
    d, R = 3, 300
    X = uniform(1, N, d, generator=torch.Generator().manual_seed(11))
    M = N - 1
    others = (X.sum(-2, keepdim=True) - X) / M  # x̄_{−i}: (1, N, d)
    S2 = ((X[:, None, :, :] - others[:, :, None, :]) ** 2).sum(-1)  # |x_j − x̄_{−i}|²: (1, N, N)
    S2 = (S2.sum(-1) - S2.diagonal(dim1=-2, dim2=-1)) / (M - 1)
    r = N - max(N // p - 1, 0) * p

    def law(n: int, fpc: bool) -> float:
        return (M - n) / (n * M) if fpc else 1.0 / n

    rb = RandomBatchAttention(SoftmaxAttention(beta=0.0), p, 7)
    mse = np.array([float(((rb(X) - others) ** 2).sum(-1).mean()) for _ in range(R)])
    se = mse.std(ddof=1) / math.sqrt(R)
    for fpc, holds in ((True, True), (False, False)):
        if not holds and p / N < 0.05:
            continue  # the factor (M − n)/M is within 2 % of 1: the two laws are one at this R
        weight = (1 - r / N) * law(p - 1, fpc) + (r / N) * law(r - 1, fpc)
        predicted = float(S2.mean()) * weight
        assert (abs(mse.mean() - predicted) < 4.5 * se) == holds, (fpc, mse.mean(), predicted, se)


def test_config_field_builds_it_and_refuses_other_kinds():
    cfg = RunConfig(N=64, d=4, dynamics="sde", attention_batch=8)
    att = make_attention(cfg)
    assert isinstance(att, RandomBatchAttention) and att.p == 8
    assert isinstance(make_attention(RunConfig(N=64, d=4, dynamics="sde")), SoftmaxAttention)
    for bad in ({"attention_batch": 1}, {"attention_batch": 8, "attention_kind": "l2"},
                {"attention_batch": 8, "attention": False}):
        with pytest.raises(ValueError, match="attention_batch"):
            RunConfig(N=64, d=4, dynamics="sde", **bad)


def test_particle_step_with_random_batches_tracks_the_exact_one():
    """One mean-field step without noise: with random batches the tokens stay on the sphere, and
    they differ from the exact step's by less than the attention's difference times Δt (≤ 2γΔt)."""
    cfg = RunConfig(N=256, d=4, dynamics="sde", attention_batch=16, T=0.1, L=10, beta=1.0, noise_scale=0.0)
    X = uniform(1, 256, 4, generator=torch.Generator().manual_seed(2))
    rb = make_particles(cfg, None, 256)
    ex = make_particles(cfg.with_updates(attention_batch=None), None, 256)
    rb.reset(1, 4, torch.Generator().manual_seed(0), X.dtype, X.device)  # a run's start: the batches' stream
    a, b = rb.step(X, cfg.dt, torch.Generator().manual_seed(0)), ex.step(X, cfg.dt, torch.Generator().manual_seed(0))
    torch.testing.assert_close(torch.linalg.vector_norm(a, dim=-1), torch.ones(1, 256, dtype=a.dtype))
    gap = float((a - b).norm(dim=-1).max())
    assert 0 < gap <= 2 * cfg.dt


def test_a_fixed_seed_outranks_the_runs_stream():
    """With ``seed`` fixed, a run's ``reset`` restarts the permutations from that seed and ignores
    the run's attention stream: runs with any stream give the numbers of the object's first call
    outside a run. With ``seed=None`` the stream decides: one stream, one partition; two streams,
    two partitions."""
    X = uniform(2, 60, 3, generator=torch.Generator().manual_seed(4))

    def after_reset(rb: RandomBatchAttention, stream_seed: int) -> torch.Tensor:
        rb.reset(2, 3, torch.Generator().manual_seed(stream_seed), X.dtype, X.device)
        return rb(X)

    fixed = RandomBatchAttention(SoftmaxAttention(beta=2.0), 4, seed=9)
    outside = RandomBatchAttention(SoftmaxAttention(beta=2.0), 4, seed=9)(X)
    for stream_seed in (0, 1, 9):
        assert torch.equal(after_reset(fixed, stream_seed), outside)
    free = RandomBatchAttention(SoftmaxAttention(beta=2.0), 4)
    assert torch.equal(after_reset(free, 0), after_reset(free, 0))
    assert not torch.equal(after_reset(free, 0), after_reset(free, 1))


def test_refusals_name_what_is_wrong():
    """Keys other than the tokens, fewer than two tokens, a call outside a run without a seed: one
    error each, saying what to change."""
    X = uniform(1, 6, 3, generator=torch.Generator().manual_seed(0))
    rb = RandomBatchAttention(SoftmaxAttention(beta=1.0), 2, seed=0)
    torch.testing.assert_close(rb(X, keys=X), RandomBatchAttention(SoftmaxAttention(beta=1.0), 2, seed=0)(X),
                               rtol=0, atol=0)  # the tokens as their own keys: allowed
    with pytest.raises(ValueError, match=r"^RandomBatchAttention: the batches are drawn among the tokens themselves "
                                         r"\(keys must be None\)$"):
        rb(X, keys=X.clone())
    with pytest.raises(ValueError, match=r"^RandomBatchAttention: needs N >= 2 tokens, .*\(got N = 1\)$"):
        rb(X[:, :1])
    with pytest.raises(RuntimeError, match=r"^RandomBatchAttention: no draws on cpu: a run starts them"):
        RandomBatchAttention(SoftmaxAttention(beta=1.0), 2)(X)
