"""The fast samplers of the random MLP (``RandomMLP(mode="gaussian")`` with ``rng`` and
``precision``; ``stochformer.model.rng.NormalDraws``): same law as SPEC §1–2, reproducible per seed."""

from __future__ import annotations

import math

import numpy as np

import pytest
import torch
from scipy import stats

from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import RandomMLP, _cholesky, gram_output_cheaper
from stochformer.model.rng import NormalDraws, resolve_backend
from stochformer.core.runtime import make_generator

F64 = torch.float64
SAMPLERS = [("parallel", "full"), ("parallel", "float32"), ("torch", "float32")]


def _tokens(N: int, d: int) -> torch.Tensor:
    """N fixed unit tokens in R^d with assorted cosines."""
    x = torch.zeros(N, d, dtype=F64)
    x[:, :3] = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [-0.3, 0.1, 0.9]], dtype=F64)[:N]
    x[N - 1, -1] += 0.5
    return x / x.norm(dim=-1, keepdim=True)


def _covariance_z(noise: RandomMLP, x: torch.Tensor, B: int, dt: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Monte Carlo estimate of E[ΔW_ia ΔW_jb] over B independent draws at the tokens x (N, d) and
    its standard error: (Nd, Nd) each."""
    N, d = x.shape
    G = noise.increment(x.expand(B, N, d).clone(), dt, make_generator(seed)).reshape(B, N * d)
    prod = G[:, :, None] * G[:, None, :]
    return prod.mean(0), prod.std(0) / math.sqrt(B)


@pytest.mark.parametrize("rng,precision", SAMPLERS)
@pytest.mark.parametrize("N,d,m", [(3, 3, 8), (3, 5, 8), (3, 5, 2)])
def test_each_sampler_has_kernel_kappa(rng, precision, N, d, m):
    """E[ΔW_ia ΔW_jb] = Δt s² κ(⟨x_i, x_j⟩) δ_ab at finite m (SPEC §2) for each sampler; the sizes
    reach the three draws: U directly (d ≤ N), the Gram root of YYᵀ/d (d > N), and the output
    through the Gram root of ΦΦᵀ (m > N) or through Φ Z' (m ≤ N). B = 40000 draws, every entry
    within 5 SE (SE from the sample variance of the products); the test would see σ_W² dropped."""
    B, s, dt, sigma_U, sigma_W = 40000, 1.3, 0.25, 0.5, 0.3
    x = _tokens(N, d)
    noise = RandomMLP(m, "relu", sigma_U, sigma_W, scale=s, mode="gaussian", rng=rng, precision=precision)
    mean, se = _covariance_z(noise, x, B, dt, seed=11)
    kappa = NoiseKernel("relu", d, sigma_U, sigma_W, scale=s).kappa((x @ x.T).clamp(-1, 1))
    expected = dt * torch.kron(kappa, torch.eye(d, dtype=F64))
    assert float(((mean - expected) / se).abs().max()) < 5.0
    wrong = dt * torch.kron(kappa - s**2 * sigma_W**2, torch.eye(d, dtype=F64))
    assert float(((mean - wrong) / se).abs().max()) > 10.0


def test_routes_chosen_as_documented():
    """The output goes through the N × N Gram root only when m > N and it is cheaper on a CPU."""
    assert not gram_output_cheaper(3, 5, 2, torch.device("cpu"))  # m ≤ N
    assert gram_output_cheaper(3, 3, 8, torch.device("cpu"))
    assert gram_output_cheaper(64, 64, 1024, torch.device("cpu"))
    assert not gram_output_cheaper(32, 16, 256, torch.device("cuda"))  # normals are cheap there


def test_singular_gram_factorised_within_rounding():
    """Two equal tokens make YYᵀ/d exactly singular (its plain Cholesky fails); the retry with
    d·ε·max K_ii on the diagonal succeeds and C Cᵀ = K to that size (the rounding of the Gram)."""
    N, d = 3, 4
    x = torch.zeros(N, d, dtype=F64)
    x[0, 0] = x[1, 0] = 1.0
    x[2, 1] = 1.0
    K = (x @ x.T / d).expand(2, N, N)
    assert bool((torch.linalg.cholesky_ex(K).info > 0).all())
    C, bad = _cholesky(K.clone(), d)  # it shifts K in place
    assert bad is None
    assert float((C @ C.transpose(-1, -2) - K).abs().max()) <= 4 * d * torch.finfo(F64).eps * 0.25



@pytest.mark.parametrize("N,d,m", [(8, 4, 32), (4, 8, 32), (8, 4, 4)])
def test_increments_do_not_share_the_layers_memory(N, d, m):
    """The pre-activations of every layer are written into one tensor kept by the noise source;
    an increment returned earlier is not changed by later layers (each route: U, the root of
    YYᵀ, and the output through ΦΦᵀ or Φ Z')."""
    noise = RandomMLP(m, "relu", 0.1, 0.1, rng="parallel")
    gen = make_generator(6)
    X = torch.nn.functional.normalize(torch.randn(3, N, d, generator=make_generator(7), dtype=F64), dim=-1)
    first = noise.increment(X, 0.1, gen)
    kept = first.clone()
    second = noise.increment(X, 0.1, gen)
    assert torch.equal(first, kept) and not torch.equal(first, second)

@pytest.mark.parametrize("rng", ["parallel", "torch"])
@pytest.mark.parametrize("fail", [False, True])
def test_synchronised_tokens_keep_the_law(rng, fail, monkeypatch):
    """Two equal tokens (d = 4 > N = 3: YYᵀ/d and ΦΦᵀ singular): E[ΔW ΔWᵀ] = Δt κ ⊗ I with κ(1)
    between the equal tokens. ``fail``: every Cholesky factorisation reports failure, so all
    samples go through the explicit redraws (U, then Φᵀ Z'), which must have the same law.
    B = 40000 draws, 5 SE."""
    import stochformer.model.noise as noise_module

    if fail:
        monkeypatch.setattr(noise_module, "_cholesky", lambda K, inner: (K, torch.ones(K.shape[:-2], dtype=torch.bool)))
    N, d, m, B, dt = 3, 4, 8, 40000, 0.5
    x = torch.zeros(N, d, dtype=F64)
    x[0, 0] = x[1, 0] = 1.0
    x[2, 1] = 1.0
    noise = RandomMLP(m, "relu", 0.4, 0.2, mode="gaussian", rng=rng)
    mean, se = _covariance_z(noise, x, B, dt, seed=12)
    kappa = NoiseKernel("relu", d, 0.4, 0.2).kappa((x @ x.T).clamp(-1, 1))
    assert float(((mean - dt * torch.kron(kappa, torch.eye(d, dtype=F64))) / se).abs().max()) < 5.0


@pytest.mark.parametrize("rng,precision", SAMPLERS)
def test_each_sampler_keeps_the_conditional_covariance(rng, precision):
    """Given the inner weights (the hidden block of the draws frozen), the output rows are Gaussian
    with token covariance Δt s² (ΦΦᵀ/m + σ_W²) (SPEC §2), with independent output coordinates.
    The hidden normals are the same for all B samples; the output normals are fresh. 5 SE."""
    N, d, m, B, dt, s, sigma_U, sigma_W = 4, 3, 16, 40000, 0.5, 1.2, 0.4, 0.2
    noise = RandomMLP(m, "tanh", sigma_U, sigma_W, scale=s, mode="gaussian", rng=rng, precision=precision)
    draw = noise._draw
    x = _tokens(3, d)
    x = torch.cat([x, x[:1] * -1.0])  # N = 4 tokens
    n_hid1 = noise._n_hidden(1, N, d, torch.float64)
    hid1 = draw(n_hid1, make_generator(3), F64, "cpu")  # one sample's U and b_U

    def frozen(n, generator, dtype, device):
        # layout of the buffer: per sample Uᵀ (r, m) and b_U (m), then the output normals
        return torch.cat([hid1.repeat(B), draw(n - B * n_hid1, generator, dtype, device)])

    noise._draw = frozen
    Phi = noise._hidden_from(x[None], noise._split(hid1, x[None], hidden_only=True), make_generator(0))[0]  # (N, m)
    G = noise.increment(x.expand(B, N, d).clone(), dt, make_generator(5))
    expected = dt * s**2 * (Phi @ Phi.T / m + sigma_W**2)
    prod = torch.einsum("bia,bja->bija", G, G)
    z = (prod.mean(0) - expected[:, :, None]) / (prod.std(0) / math.sqrt(B))
    assert float(z.abs().max()) < 5.0
    cross = G[:, :, 0, None] * G[:, None, :, 1]
    assert float((cross.mean(0) / (cross.std(0) / math.sqrt(B))).abs().max()) < 5.0


@pytest.mark.parametrize("precision", ["full", "float32"])
def test_parallel_draws_are_standard_normal(precision):
    """NormalDraws('parallel'): 2^20 draws (4 streams) pass a Kolmogorov–Smirnov test against
    N(0, 1) (p > 1e-4), mean and variance within 5 SE, and the streams are not copies."""
    n = 1 << 20
    z = NormalDraws("parallel", precision)(n, make_generator(8), F64, "cpu")
    assert z.dtype == F64 and z.shape == (n,)
    assert stats.kstest(z.numpy(), "norm").pvalue > 1e-4
    assert abs(float(z.mean())) < 5 / math.sqrt(n)
    assert abs(float(z.var()) - 1) < 5 * math.sqrt(2 / n)
    q = n // 4
    corr = torch.corrcoef(z.view(4, q))  # the 4 stream pieces
    assert float((corr - torch.eye(4, dtype=F64)).abs().max()) < 5 / math.sqrt(q)


@pytest.mark.parametrize("rng,precision", SAMPLERS + [("torch", "full")])
def test_same_seed_same_numbers(rng, precision):
    """Same generator seed ⇒ identical increments; another seed ⇒ different; for the parallel
    backend the numbers do not depend on the number of threads (sizes large enough for threads)."""
    noise = RandomMLP(256, "relu", 0.1, 0.1, mode="gaussian", rng=rng, precision=precision)
    X = torch.nn.functional.normalize(torch.randn(16, 32, 16, dtype=F64, generator=make_generator(1)), dim=-1)
    a = noise.increment(X, 0.1, make_generator(3))
    b = noise.increment(X, 0.1, make_generator(3))
    c = noise.increment(X, 0.1, make_generator(4))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(noise.increment(X, 0.1, make_generator(3)), a)
    finally:
        torch.set_num_threads(threads)


def test_simulate_reproducible_with_each_rng():
    """run_simulate(cfg) twice with the same seed gives identical results for rng = auto (parallel on
    a CPU), torch, and the float32 opt-in; the rng choice is resolved by device."""
    base = RunConfig(N=8, d=4, m=32, L=5, batch=4, seed=5, sigma_U=0.1)
    for upd in ({}, {"rng": "torch"}, {"draw_precision": "float32"}):
        cfg = base.with_updates(**upd)
        a, b = run_simulate(cfg).data["X_final"].values, run_simulate(cfg).data["X_final"].values
        assert (a == b).all()
    assert resolve_backend("auto", "cpu") == "parallel" and resolve_backend("auto", "cuda") == "torch"
    with pytest.raises(ValueError, match="rng"):
        resolve_backend("mt", "cpu")


def test_draws_ahead_are_the_same_numbers_served_in_order():
    """NormalDraws(ahead=k): a refill draws twice the request (twice the last refill while the
    generator is untouched, at most k) and later calls are consecutive pieces of it; a generator
    touched since that draw (re-seeded, another generator, or reset()) starts afresh, so the
    numbers stay a function of the seed and the calls."""
    k = 1 << 16

    def direct(n: int, gen: torch.Generator) -> torch.Tensor:
        return NormalDraws("parallel")(n, gen, F64, "cpu")

    ahead = NormalDraws("parallel", ahead=k)
    gen = make_generator(2)
    pieces = [ahead(n, gen, F64, "cpu") for n in (20000, 10000, 10000)]  # one refill of 40000
    assert torch.equal(torch.cat(pieces), direct(40000, make_generator(2)))
    twin = torch.Generator().set_state(gen.get_state())
    assert torch.equal(ahead(100, gen, F64, "cpu"), direct(k, twin)[:100])  # exhausted: min(k, 80000)
    gen.manual_seed(2)  # re-seeded: the first numbers again, not the rest of the buffer
    assert torch.equal(ahead(20000, gen, F64, "cpu"), direct(40000, make_generator(2))[:20000])
    assert torch.equal(ahead(20000, make_generator(2), F64, "cpu"), direct(40000, make_generator(2))[:20000])
    gen = make_generator(2)
    assert torch.equal(ahead(100, gen, F64, "cpu"), direct(200, make_generator(2))[:100])
    twin = torch.Generator().set_state(gen.get_state())
    ahead.reset()  # without it the next call would get the buffer's numbers 100:150
    assert torch.equal(ahead(50, gen, F64, "cpu"), direct(100, twin)[:50])
    assert torch.equal(ahead(k + 1, make_generator(2), F64, "cpu"), direct(k + 1, make_generator(2)))  # n ≥ k: direct



def test_refills_reuse_memory_only_when_nothing_served_is_alive():
    """A refill writes into the previous refills' memory (no fresh pages) only when no view served
    from it is alive: a view kept by a caller keeps its numbers; the numbers are those of fresh
    memory either way."""
    k = 1 << 12
    ahead, fresh = NormalDraws("parallel", ahead=k), NormalDraws("parallel", ahead=k)
    gen, twin = make_generator(4), make_generator(4)
    kept = ahead(k // 2, gen, F64, "cpu")  # refill of k
    copy = kept.clone()
    assert torch.equal(kept, fresh(k // 2, twin, F64, "cpu"))
    ahead(k // 2 + 1, gen, F64, "cpu")  # does not fit: a refill while `kept` is alive
    fresh(k // 2 + 1, twin, F64, "cpu")
    assert torch.equal(kept, copy)
    ptr = ahead._buffer.z.data_ptr()
    del kept
    z = ahead(k // 2 + 1, gen, F64, "cpu")  # nothing else alive: the same memory again
    assert z.data_ptr() == ptr and torch.equal(z, fresh(k // 2 + 1, twin, F64, "cpu"))

def test_short_runs_draw_little_ahead():
    """Refills double from twice the first request: 40 calls of 100 normals draw 200 + 400 + … ≤
    2 · 4000 + 200 normals in all, not the 2²² of a full buffer."""
    ahead = NormalDraws("parallel", ahead=1 << 22)
    gen, drawn = make_generator(3), []
    real = ahead._refill
    object.__setattr__(ahead, "_refill", lambda size, *a: drawn.append(size) or real(size, *a))
    for _ in range(40):
        ahead(100, gen, F64, "cpu")
    assert drawn[:3] == [200, 400, 800] and sum(drawn) <= 2 * 4000 + 200


def test_draws_ahead_fill_only_what_is_served():
    """In float64 a refill draws now the whole requests of the current size that fit, and the rest
    of its pieces only when served: the numbers are those of drawing the whole buffer at once, and
    the tail no request reaches is never drawn."""
    ahead = NormalDraws("parallel", ahead=10000)
    gen, twin = make_generator(5), make_generator(5)
    first = [ahead(3000, gen, F64, "cpu") for _ in range(2)]  # refill of 6000
    assert torch.equal(torch.cat(first), NormalDraws("parallel")(6000, twin, F64, "cpu"))
    second = [ahead(3000, gen, F64, "cpu") for _ in range(3)]  # refill of 10000: 9000 drawn now
    assert ahead._buffer.streams.done[-1] == 9000  # the last of 4 pieces, 7500..10000, up to 9000
    second.append(ahead(500, gen, F64, "cpu"))  # beyond: drawn on demand, in order
    assert ahead._buffer.streams.done[-1] == 9500
    assert torch.equal(torch.cat(second), NormalDraws("parallel")(10000, twin, F64, "cpu")[:9500])


@pytest.mark.parametrize("N,d,m", [(3, 3, 8), (3, 5, 8)])
def test_float32_tokens_keep_kernel_kappa(N, d, m):
    """dtype float32 end to end (tokens, draws, products): E[ΔW_ia ΔW_jb] = Δt s² κ(⟨x_i, x_j⟩) δ_ab
    within 5 SE, through the explicit routes that float32 uses (U and Φ Z', never a Gram root)."""
    B, s, dt = 40000, 1.3, 0.25
    x = _tokens(N, d).float()
    noise = RandomMLP(m, "relu", 0.5, 0.3, scale=s, mode="gaussian", rng="parallel")
    mean, se = _covariance_z(noise, x, B, dt, seed=13)
    assert mean.dtype == torch.float32
    kappa = NoiseKernel("relu", d, 0.5, 0.3, scale=s).kappa((x.double() @ x.double().T).clamp(-1, 1))
    expected = dt * torch.kron(kappa, torch.eye(d, dtype=F64))
    assert float(((mean.double() - expected) / se.double()).abs().max()) < 5.0


def test_gram_roots_only_in_float64():
    """A Gram root resolves rows only down to √(inner·ε): float64 keeps the cheaper routes, float32
    draws U (m·d normals) and the output through Φ Z' (m·d)."""
    from stochformer.model.noise import _hidden_rank, _output_through_gram

    cpu = torch.device("cpu")
    assert _hidden_rank(3, 5, F64) == 3 and _hidden_rank(3, 5, torch.float32) == 5
    assert _output_through_gram(64, 64, 1024, cpu, F64) and not _output_through_gram(64, 64, 1024, cpu, torch.float32)
    noise = RandomMLP(1024, "relu", 0.1, 0.1)
    assert noise.cost(64, 64, cpu, torch.float32)["normals"] == 1024 * 64 * 2 + 1024 + 64


def test_streams_filled_in_goes_or_on_threads_hold_the_same_numbers():
    """A refill's pieces filled in several goes (the parts of a buffer served in turn) and on one
    or several threads hold the numbers of one thread filling them all at once."""
    from stochformer.model.rng import _Streams

    n, seeds = 1 << 18, [11, 12, 13, 14]
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ref = np.empty(n)
        _Streams(ref, seeds).fill(n)
        torch.set_num_threads(2)
        out = np.empty(n)
        streams = _Streams(out, seeds)
        for upto in (1000, n // 3, n // 3, n - 7, n):
            streams.fill(upto)
            assert streams.filled == upto and (out[:upto] == ref[:upto]).all()
    finally:
        torch.set_num_threads(old)
    assert streams.done == streams.edges[1:]
