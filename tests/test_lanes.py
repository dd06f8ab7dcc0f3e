"""Samples in lanes (stochformer.model.lanes, Transformer.laneable): the numbers of a run do not
depend on the lanes' width (1 on one thread), on the overlapped draws or on stepping outside
``solve``, including the layers whose singular Gram matrices send the whole layer back through
the calling thread. Small sizes are laned here by lowering LANE_WORK (sizes only decide it)."""

from __future__ import annotations

import pytest
import torch

from stochformer.model import RandomMLP, SoftmaxAttention, Transformer
from stochformer.model.attention_variants import ResampledAttention
from stochformer.model.lanes import Lanes
from stochformer.core.runtime import make_generator
from stochformer.integrate import SaveAt, solve
from stochformer.core.sphere import uniform


@pytest.fixture
def lane_small(monkeypatch):
    import stochformer.model.transformer as transformer_module

    monkeypatch.setattr(transformer_module, "LANE_WORK", 1.0)


def _run(model: Transformer, threads: int, X0: torch.Tensor, spy: list | None = None) -> torch.Tensor:
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if spy is not None:
            spy.append(model.laneable(X0))
        ds = solve(model, X0, 2.0, 12, SaveAt(every=4), seed=11)
    finally:
        torch.set_num_threads(old)
    return torch.from_numpy(ds["X_final"].values), torch.from_numpy(ds["mean_cosine"].values)


@pytest.mark.parametrize("order", ["post_ln", "parallel"])
@pytest.mark.parametrize("N,d,m,sigma", [(6, 4, 32, 0.1), (4, 6, 16, 0.0), (5, 3, 4, 0.2)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lanes_keep_the_numbers(order, N, d, m, sigma, dtype, lane_small):
    """Widths 3 and 2 (overlapped draws or not) against width 1 (one thread): the same final
    tokens and statistics, bit for bit; every route of the sampler (U or the root of YYᵀ, the
    output through ΦΦᵀ or Φ Z'); and the same as stepping the model in a loop outside ``solve``."""
    X0 = uniform(7, N, d, generator=make_generator(3), dtype=dtype)
    runs, used = [], []
    for threads, overlap in [(1, True), (2, True), (2, False), (3, True)]:
        model = Transformer(SoftmaxAttention(), RandomMLP(m, "relu", sigma, sigma, rng="parallel", overlap=overlap), order)
        runs.append(_run(model, threads, X0, used))
    assert all(used)
    for X, stats in runs[1:]:
        assert torch.equal(X, runs[0][0]) and torch.equal(stats, runs[0][1])
    model = Transformer(SoftmaxAttention(), RandomMLP(m, "relu", sigma, sigma, rng="parallel"), order)
    gen = make_generator(11)
    model.reset(7, d, gen, dtype, "cpu")
    X = X0
    for _ in range(12):
        X = model.step(X, 2.0 / 12, gen)
    assert torch.equal(X, runs[0][0])


def test_a_layer_that_needs_more_normals_goes_through_the_calling_thread(monkeypatch, lane_small):
    """Every Cholesky factorisation reports its first sample failed (as singular Gram matrices
    do): in lanes the part of each lane has a failing sample, the lanes ask for more normals,
    and the layer is computed again by the calling thread, which draws them in order: the same
    numbers as without lanes (where only sample 0 fails), and the lanes did send layers back."""
    import stochformer.model.noise as noise_module

    real_cholesky, real_more = noise_module._cholesky, noise_module.RandomMLP._more
    monkeypatch.setattr(noise_module, "_cholesky", lambda K, inner: (real_cholesky(K, inner)[0], torch.arange(K.shape[0]) < 1))
    asked = []

    def more(self, n, generator, like):
        asked.append(generator is None)
        return real_more(self, n, generator, like)

    monkeypatch.setattr(noise_module.RandomMLP, "_more", more)
    X0 = uniform(6, 5, 3, generator=make_generator(4))
    runs = [_run(Transformer(SoftmaxAttention(), RandomMLP(16, "relu", 0.1, 0.1, rng="parallel")), t, X0) for t in (1, 2)]
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert any(asked) and not all(asked)


def test_what_is_laned():
    """The benchmark's first size is (39 MFLOP a layer), a tenth of its batch is not; nor is
    randomness drawn inside attention, explicit weights, a single sample, or a product too large
    for one thread."""
    X = uniform(64, 32, 16, generator=make_generator(5))
    assert Transformer(SoftmaxAttention(), RandomMLP(256)).laneable(X)
    assert not Transformer(SoftmaxAttention(), RandomMLP(256)).laneable(X[:6])
    assert not Transformer(ResampledAttention(16), RandomMLP(256)).laneable(X)
    assert not Transformer(SoftmaxAttention(), RandomMLP(256, mode="weights")).laneable(X)
    assert not Transformer(SoftmaxAttention(), RandomMLP(1 << 16)).laneable(X[:1])
    assert not Transformer(SoftmaxAttention(), RandomMLP(1 << 16)).laneable(X)


def test_attention_flops():
    """Attention's products per sample: the symmetric scores β X Xᵀ at N(N+1)d and their product
    with the values at 2N²d; with A and V, the queries X A and values X Vᵀ at 2Nd² each and the
    scores as a general product."""
    N, d = 32, 16
    assert SoftmaxAttention().flops(N, d) == N * (N + 1) * d + 2 * N * N * d
    eye = torch.eye(d, dtype=torch.float64)
    assert SoftmaxAttention(A=eye, V=eye).flops(N, d) == 4 * N * d * d + 4 * N * N * d


def test_lanes_cover_the_batch_once_and_raise_after_all_parts():
    seen = []
    Lanes(3).run(lambda a, b: seen.extend(range(a, b)), 10)
    assert sorted(seen) == list(range(10))
    done = []

    def part(a, b):
        if a == 0:
            raise ValueError("first part")
        done.append(a)

    with pytest.raises(ValueError, match="first part"):
        Lanes(4).run(part, 8)
    assert sorted(done) == [2, 4, 6]
