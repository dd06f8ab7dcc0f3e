"""The noise sources (``model.noise``) and their kernel κ (``model.kernel``), exactly, at the edges
the pathwise reference tests (tests/test_reference.py) leave free: cosines rounded past ±1,
overflow messages, first-pivot Cholesky failures, ties of the MLP sampler's cost model, the
float64 root of the exact field, the float32 draws and the draw-ahead of the MLP sampler, the
rejection rounds of the Gamma sampler; the MLP noise's kernel and root in float64 for float32
tokens, its reused pre-activation buffer, and every tensor made on the tokens' device whatever
torch's default device. Values are exact or to 1e-12 in float64 (the laws, statistically:
tests/test_kernel.py, tests/test_mlp_sampler.py)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.model.kernel import NoiseKernel, first_moment_rate, lambda_bar_prime, theorem14_F
from stochformer.model.noise import (WEIGHT_LAWS, ExactField, LayerNormals, RandomFeatureField, RandomMLP, _clenshaw,
                                     _gamma, draw_weights, gamma_variates, gram_output_cheaper, sqrt_psd, whiten)
from stochformer.core.sphere import normalize
from stochformer.model.noise import _cholesky, _gram_roots_resolve, _hidden_rank

from conftest import close

F64 = torch.float64


# ----------------------------------------------------------------- NoiseKernel


@pytest.mark.parametrize("sigma_U", [0.0, 3.0])
def test_kernel_takes_cosines_rounded_past_one_as_plus_minus_one(sigma_U):
    """A cosine rounded past ±1 by at most 1e-6 is accepted. Where the correlation c/v reaches ±1
    (ρ = ±1 for σ_U = 0; ρ = 1 for σ_U = 3, c/v computed as (ρ a + 1)/(a + 1), a = 1/(d σ_U²)) it is
    clamped there, so κ and κ' are exactly κ(±1), κ'(±1); at ρ = −1 − ε with σ_U = 3, c/v is inside
    (−1, 1) and κ is finite. Beyond 1e-6 the cosine is refused."""
    k = NoiseKernel("relu", 3, sigma_U, 0.2)
    for edge in (1.0, -1.0):
        past = torch.tensor([edge * (1 + 1e-6), edge * (1 + 1e-7)], dtype=F64)
        at = torch.full((2,), edge, dtype=F64)
        for f in (k.kappa, k.kappa_prime):
            assert torch.equal(f(past), f(at)) if sigma_U < 1 or edge > 0 else bool(torch.isfinite(f(past)).all())
        with pytest.raises(ValueError, match=r"^rho: must be cosines, finite numbers in \[-1, 1\]$"):
            k.kappa(edge * (1 + 2e-6))


def test_kappa_prime_beyond_float64_names_itself():
    """κ' = (s²/d) E[φ'φ'] that overflows (s = 1e200) is refused naming κ' and the fields."""
    with pytest.raises(ValueError, match=r"^NoiseKernel: kappa_prime does not fit in float64 for activation=relu, d=3, "
                       r"sigma_U=0, sigma_W=0, scale=1e\+200; reduce sigma_U, sigma_W or scale \(a config's noise_scale\)$"):
        NoiseKernel("relu", 3, scale=1e200).kappa_prime(0.3)


def test_lambda_bar_prime_where_the_grid_matters():
    """λ̄' = −min(min F(u), −λ̄) over u = −1 + 2s, s on ``grid`` points of [0, 1) (4001 by default),
    and u = 1 − 10^(−t), t on 200 points of [1, 7], all in float64, for a kernel whose F has an
    interior minimum (φ = tanh(5x), d = 3, σ_U = 0.8, 24 Gauss–Hermite points: v = 0.97, below the
    Mehler threshold; F is lowest near u = 0.98): on coarse grids the minimum is one of the points
    towards 1, on the default grid a point of the uniform grid."""
    k = NoiseKernel(lambda x: torch.tanh(5 * x), 3, 0.8, quad_points=24)
    lam_bar = first_moment_rate(k.kappa1, k.kappa1_prime, 3)
    for grid in (3, 58, 4001):
        s = torch.linspace(0.0, 1.0, grid, dtype=F64)[:-1]
        F = theorem14_F(k, torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=F64)]), 0.5)
        assert float(F.min()) < -lam_bar - 1.0
        got = lambda_bar_prime(k, 0.5) if grid == 4001 else lambda_bar_prime(k, 0.5, grid)
        assert abs(got + float(F.min())) < 1e-12, grid


# ----------------------------------------------------------------- sqrt_psd


def test_cholesky_root_falls_back_when_the_first_pivot_fails():
    """``cholesky``: a PSD matrix whose first pivot is 0 (LAPACK's info = 1) falls back to the
    symmetric root, S Sᵀ = K; a positive definite matrix of the same batch keeps its Cholesky factor;
    a batch of PSD rank-one matrices (every factorisation fails) is rooted too."""
    K = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 2.0]], [[4.0, 2.0, 0.0], [2.0, 5.0, 1.0], [0.0, 1.0, 3.0]]],
                     dtype=F64)
    assert torch.linalg.cholesky_ex(K).info.tolist() == [1, 0]
    S = sqrt_psd(K, "cholesky")
    close(S @ S.transpose(-1, -2), K)
    close(S[1], torch.linalg.cholesky(K[1]))
    J = torch.ones(2, 3, 3, dtype=F64) * torch.tensor([1.0, 4.0], dtype=F64)[:, None, None]
    S = sqrt_psd(J, "cholesky")
    close(S @ S.transpose(-1, -2), J)


# ----------------------------------------------------------------- the MLP sampler's cost model


def test_gram_output_route_not_taken_at_equal_cost():
    """The output goes through the Gram root only when it costs strictly less: at N = 12, d = 3,
    m = 60 on a CPU (a normal = 100 flops) both routes cost c N d + 2 m N² + N³/3 + 2 N² d =
    c m d + 2 m N d = 22320 flops, and Φ Z' is kept; one more hidden unit tips it."""
    N, d, c = 12, 3, 100.0
    for m, cheaper in ((59, False), (60, False), (61, True)):
        gram, direct = c * N * d + 2 * m * N * N + N**3 / 3 + 2 * N * N * d, c * m * d + 2 * m * N * d
        assert (gram < direct) == cheaper and (m != 60 or gram == direct == 22320.0)
        assert gram_output_cheaper(N, d, m, torch.device("cpu")) == cheaper


# ----------------------------------------------------------------- the Gamma sampler


def test_gamma_rejection_rounds_at_low_acceptance():
    """Marsaglia–Tsang rounds when many candidates are rejected (a = 0.4: about 28%, so the first
    round of ⌊1.2 n⌋ + 16 candidates is short and further rounds of ⌊1.2·(still needed)⌋ + 16 fill
    the rest): the variates are the accepted d·v of the rounds in order, normals then uniforms."""
    a, n = 0.4, 3000
    gen = torch.Generator().manual_seed(21)
    ref = torch.Generator()
    ref.set_state(gen.get_state())
    got = _gamma(a, (60, 50), gen, torch.zeros(1, dtype=F64))
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out: list[np.ndarray] = []
    rounds = 0
    while sum(map(len, out)) < n:
        need = n - sum(map(len, out))
        k = int(1.2 * need) + 16
        x = torch.randn(k, generator=ref, dtype=F64).numpy()
        u = torch.rand(k, generator=ref, dtype=F64).numpy()
        v = (1 + c * x) ** 3
        with np.errstate(invalid="ignore", divide="ignore"):
            keep = (v > 0) & (np.log(u) < 0.5 * x * x + d - d * v + d * np.log(np.where(v > 0, v, 1.0)))
        out.append((d * v)[keep][:need])
        rounds += 1
    assert rounds >= 3
    assert got.shape == (60, 50)
    close(got.reshape(-1), torch.from_numpy(np.concatenate(out)))
    assert torch.equal(gen.get_state(), ref.get_state())


# ----------------------------------------------------------------- RandomMLP


def test_mlp_float32_draws_are_float32_normals(tokens):
    """``precision="float32"`` (torch backend): the hidden layer's normals are torch.randn in float32
    cast to float64 (per sample Uᵀ, then b_U), Φ = φ(X Uᵀ/√d + σ_U b_U) to 1e-12; the default draws
    float64."""
    B, N, d, m, sU = 2, 5, 3, 8, 0.3
    X = tokens(B, N, d, seed=61)
    for precision, dtype in (("float32", torch.float32), ("full", F64)):
        gen = torch.Generator().manual_seed(5)
        ref = torch.Generator()
        ref.set_state(gen.get_state())
        Phi = RandomMLP(m, "tanh", sU, precision=precision).hidden(X, gen)
        z = torch.randn(B * m * (d + 1), generator=ref, dtype=dtype).double().view(B, d + 1, m)
        Ut, bU = z[:, :d], z[:, d:]
        close(Phi, torch.tanh(X @ Ut / math.sqrt(d) + sU * bU))


def test_mlp_parallel_sampler_draws_ahead(tokens):
    """With ``rng="parallel"`` the normals of several layers are drawn at once: a second layer of
    the same size is served from the first draw and leaves the generator untouched; with ``torch``
    every layer draws from the generator."""
    X = tokens(2, 5, 3, seed=62)
    for rng, untouched in (("parallel", True), ("torch", False)):
        mlp = RandomMLP(8, "relu", 0.3, 0.2, rng=rng)
        gen = torch.Generator().manual_seed(5)
        mlp.reset(2, 3, gen, F64, "cpu")
        mlp.increment(X, 0.1, gen)
        state = gen.get_state()
        mlp.increment(X, 0.1, gen)
        assert torch.equal(gen.get_state(), state) == untouched, rng


# ----------------------------------------------------------------- ExactField


def test_exact_field_clamps_cosines_rounded_past_one():
    """K(X)_ij = κ(⟨x_i, x_j⟩) with the float64 cosines clamped to [−1, 1]: for antipodal pairs
    x, −x some renormalised cosines round past ±1 (checked), and K is exactly κ of the clamped
    cosines (linear κ, d = 2, where κ(1 + ε) ≠ κ(1) in float64)."""
    v = torch.tensor([[a, b] for a in range(1, 8) for b in range(1, 8)], dtype=F64)
    X = torch.stack([v, -v], dim=1)  # (49, 2, 2): pairs x, −x
    Xd = normalize(X)
    G = Xd @ Xd.transpose(-1, -2)
    assert bool((G > 1).any()) and bool((G < -1).any())
    kernel = NoiseKernel("linear", 2)
    assert not torch.equal(kernel.kappa(G), kernel.kappa(G.clamp(-1.0, 1.0)))
    assert torch.equal(ExactField(kernel).covariance(X), kernel.kappa(G.clamp(-1.0, 1.0)))


def test_exact_field_uses_the_chebyshev_interpolant(tokens, monkeypatch):
    """A smooth κ (tanh) is evaluated through its Chebyshev interpolant, fitted once when the field
    is made: the covariance calls no quadrature (κ itself) and equals κ to 1e-12."""
    kernel = NoiseKernel("tanh", 3, 0.2, 0.1)
    field = ExactField(kernel)
    X = tokens(2, 6, 3, seed=63)
    Xd = normalize(X)
    ref = kernel.kappa((Xd @ Xd.transpose(-1, -2)).clamp(-1.0, 1.0))
    calls = []
    kappa = NoiseKernel.kappa
    monkeypatch.setattr(NoiseKernel, "kappa", lambda self, rho: calls.append(1) or kappa(self, rho))
    close(field.covariance(X), ref)
    assert not calls


def test_exact_field_root_in_float64_for_float32_tokens():
    """For float32 tokens K(X) and its root are computed in float64 (a float32 root cannot tell
    tokens 1e-3 apart): the increment is √dt S Ξ with S the float64 root, cast to float32, for
    both root methods."""
    r = np.random.default_rng(3)
    centre = r.standard_normal(3)
    X = centre / np.linalg.norm(centre) + 1e-3 * r.standard_normal((1, 5, 3))
    X = torch.from_numpy(X / np.linalg.norm(X, axis=-1, keepdims=True)).float()
    xi = torch.randn(1, 5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    for method in ("symmetric", "cholesky"):
        field = ExactField(NoiseKernel("relu", 3), method)
        got = field.increment(X, 0.04, Draws(torch.Generator(), BrownianPath.from_normals(xi[None])))
        S = sqrt_psd(field.covariance(X, F64), method)
        assert got.dtype == torch.float32
        close(got, 0.2 * (S @ xi.double()), 1e-7)


# ----------------------------------------------------------------- RandomFeatureField


def test_random_feature_field_kernel_is_its_own():
    """The random-feature field's κ is NoiseKernel(activation, d, σ_U, σ_W, s) of its own fields."""
    field = RandomFeatureField("tanh", features=7, sigma_U=0.3, sigma_W=0.2, scale=1.5)
    assert field.noise_kernel(5) == NoiseKernel("tanh", 5, 0.3, 0.2, 1.5)


# ----------------------------------------------------------------- whiten: the normals behind a field value


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), d=st.integers(1, 4), copies=st.integers(0, 3), seed=st.integers(0, 2**31 - 1))
def test_whiten_gives_normals_that_the_symmetric_root_maps_back(n, d, copies, seed):
    """For K = κ at n tokens, ``copies`` of them repeated (rank ≤ n), K^{1/2} whiten(K, K^{1/2}Ξ) =
    K^{1/2}Ξ up to the part of the null space (eigenvalues below WHITEN_RTOL · max: at most
    √(10⁻¹²)·|Ξ| ≈ 10⁻⁵ per entry)."""
    g = torch.Generator().manual_seed(seed)
    X = normalize(torch.randn(1, n, 3, generator=g, dtype=F64))
    X = torch.cat([X, X[:, : min(copies, n)]], dim=1)
    K = ExactField(NoiseKernel("tanh", 3, 0.5, 0.2)).covariance(X, F64)[0]
    xi = torch.randn(K.shape[0], d, generator=g, dtype=F64)
    S = sqrt_psd(K)
    close(S @ whiten(K, S @ xi, g), S @ xi, 1e-5)


@settings(max_examples=60, deadline=None)
@given(rank=st.integers(0, 5), null=st.integers(0, 3), d=st.integers(1, 3), scale=st.sampled_from([1e-6, 1.0, 1e6]),
       single=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_whiten_is_its_formula_and_draws_the_null_space_from_its_generator(rank, null, d, scale, single, seed):
    """whiten(K, G, g) = V c with K = V diag(λ) Vᵀ (float64 whatever the inputs' dtype), c = Vᵀ G / √λ
    on the eigenvalues above WHITEN_RTOL · max |λ| (a relative threshold: the same split at any scale
    of K) and, below it, fresh N(0, 1) rows drawn from ``g`` in order (one row per null direction); a
    K of rank 0 gives normals only. Written out from its definition, to 1e-9 relative."""
    from stochformer.model.noise import WHITEN_RTOL, _eigh

    n = max(1, rank + null)
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=F64))
    lam = torch.cat([0.5 + 1.5 * torch.rand(min(rank, n), generator=g, dtype=F64), torch.zeros(n - min(rank, n), dtype=F64)])
    K = scale * (Q * lam) @ Q.T
    G = torch.randn(n, d, generator=g, dtype=F64) * math.sqrt(scale)
    dtype = torch.float32 if single else F64
    K_in, G_in = K.to(dtype), G.to(dtype)
    evals, evecs = _eigh(K_in.to(F64))
    keep = evals > WHITEN_RTOL * evals.abs().max()
    coef = evecs.T @ G_in.to(F64)
    coef[keep] /= evals[keep].sqrt()[:, None]
    state = torch.Generator().manual_seed(seed + 1)
    coef[~keep] = torch.randn(int((~keep).sum()), d, generator=state, dtype=F64)
    out = whiten(K_in, G_in, torch.Generator().manual_seed(seed + 1))
    assert out.dtype == F64 and (single or rank >= n or not keep.all())  # in float64 the zero eigenvalues are null
    assert torch.allclose(out, evecs @ coef, rtol=1e-9, atol=1e-9 * float(out.abs().max())), (out, evecs @ coef)


def test_whiten_recovers_the_normals_of_a_well_conditioned_kernel():
    """Orthogonal tokens (K = κ(0) off the diagonal, κ(1) on it: eigenvalues far apart from 0):
    whiten(K, K^{1/2}Ξ) = Ξ to 1e-12."""
    g = torch.Generator().manual_seed(3)
    K = ExactField(NoiseKernel("relu", 4, 0.0, 0.3)).covariance(torch.eye(4, dtype=F64)[None], F64)[0]
    xi = torch.randn(4, 2, generator=g, dtype=F64)
    close(whiten(K, sqrt_psd(K) @ xi, g), xi)


def test_whiten_gives_exactly_standard_normals_on_a_singular_kernel():
    """Three points, two of them equal (K of rank 2): over 20 000 draws of G = K^{1/2}Ξ, the whitened
    vectors' covariance is the identity, each entry within 5 SE (SE of a sample covariance entry
    ≈ 1/√n, 2/√n on the diagonal: 0.007 and 0.014)."""
    g = torch.Generator().manual_seed(11)
    X = normalize(torch.tensor([[[1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [1.0, 0.2, 0.0]]], dtype=F64))
    K = ExactField(NoiseKernel("relu", 3, 0.0, 0.0)).covariance(X, F64)[0]
    n = 20_000
    G = sqrt_psd(K) @ torch.randn(3, n, generator=g, dtype=F64)
    out = whiten(K, G, g)
    cov = (out @ out.T / n).numpy()
    se = np.full((3, 3), 1 / math.sqrt(n)) + np.eye(3) / math.sqrt(n)
    assert np.all(np.abs(cov - np.eye(3)) < 5 * se), cov


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 3 * (1 << 15) + 7), seed=st.integers(0, 2**31 - 1))
def test_clenshaw_in_chunks_equals_the_whole_recurrence_bit_for_bit(size, seed):
    """The chunked Clenshaw sum is the elementwise recurrence b ← 2x·b − b' + c_k on any number of
    entries (chunk boundaries included): bit for bit against the one-buffer form."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(size, generator=g, dtype=F64) * 2 - 1
    coef = torch.randn(20, generator=g, dtype=F64)
    b1, b2 = torch.zeros_like(x), torch.zeros_like(x)
    for c in coef[1:].flip(0):
        b1, b2 = 2 * x * b1 - b2 + c, b1
    assert torch.equal(_clenshaw(coef, x), x * b1 - b2 + coef[0])


# ----------------------------------------------------------------- the MLP noise's precision


def test_coupled_mlp_increment_takes_kernel_and_root_in_float64_for_float32_tokens(tokens):
    """Driven by a float64 Brownian path, a float32 step is √dt·s·(K_m^{1/2} in float64, cast) @ Ξ
    with K_m from the same inner weights in float64 and Ξ the path's normals cast to float32."""
    X = tokens(3, 4, 5, seed=2).float()
    mlp = RandomMLP(width=16, activation="tanh", sigma_U=0.3, sigma_W=0.2, scale=0.7)
    path = BrownianPath((3, 4, 5), 1, seed=11)
    got = mlp.increment(X, 0.25, Draws(torch.Generator().manual_seed(5), path))
    assert got.dtype == torch.float32
    K = mlp.empirical_kernel(X, torch.Generator().manual_seed(5), torch.float64)
    xi = path.increment(0, 1)[0].float()
    ref = 0.7 * 0.5 * (sqrt_psd(K).float() @ xi)
    assert torch.equal(got, ref)
    # the float32 kernel is not the same matrix (so the float64 one is what the step used)
    K32 = mlp.empirical_kernel(X, torch.Generator().manual_seed(5), torch.float32)
    assert not torch.equal(0.7 * 0.5 * (sqrt_psd(K32) @ xi), ref)


@pytest.mark.parametrize("N, d, m", [(6, 3, 8), (3, 6, 40)])  # U drawn (d ≤ N) and the Cholesky path (d > N)
def test_reused_preactivation_buffer_never_changes_a_step(N, d, m, tokens):
    """One RandomMLP called with float64, then float32, then another batch size, then float64 again
    gives exactly what a fresh one gives with the same generator state, without warnings (a buffer
    of the wrong shape would be resized by torch with a warning, one of the wrong dtype refused)."""
    shared = RandomMLP(width=m, activation="relu", sigma_U=0.5, sigma_W=0.1)
    calls = [(2, torch.float64), (2, torch.float32), (3, torch.float32), (3, torch.float64), (2, torch.float64)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed, (B, dtype) in enumerate(calls):
            X = tokens(B, N, d, seed=seed).to(dtype)
            got = shared.increment(X, 0.1, torch.Generator().manual_seed(seed))
            fresh = RandomMLP(width=m, activation="relu", sigma_U=0.5, sigma_W=0.1)
            assert got.dtype == dtype
            assert torch.equal(got, fresh.increment(X, 0.1, torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("mode", ["gaussian", "weights"])
@pytest.mark.parametrize("N, d, m", [(6, 3, 8), (3, 6, 40)])
@pytest.mark.parametrize("synchronised", [False, True])  # singular Gram matrices: the fallback draws
def test_mlp_noise_lives_on_the_tokens_device_whatever_the_default_device(mode, N, d, m, synchronised, tokens):
    """Every tensor of a step is made on the tokens' device, not torch's default device: under
    ``torch.device("meta")`` a step of CPU tokens gives exactly the step made without it."""
    X = tokens(2, N, d, seed=3)
    if synchronised:
        X = X[:, :1].expand(-1, N, -1).clone()

    def step() -> torch.Tensor:
        return RandomMLP(width=m, sigma_U=0.4, sigma_W=0.3, mode=mode).increment(X, 0.1, torch.Generator().manual_seed(4))

    ref = step()
    with torch.device("meta"):
        got = step()
    assert got.device == X.device and torch.equal(got, ref)


# ----------------------------------------------------------------- tensors on the device passed
# The meta device stands for an accelerator: its tensors have shapes, dtypes and a device but no
# values, so a tensor made on torch's default device (the CPU) instead of the one passed shows.

@pytest.mark.parametrize("law", [law for law in WEIGHT_LAWS if law != "student_t"])
def test_weights_are_drawn_on_the_device_of_like(law):
    """draw_weights makes the weights on ``like``'s device, in its dtype (Student-t's Gamma step
    keeps a data-dependent number of draws, which a meta tensor cannot: see the next test)."""
    like = torch.empty(0, dtype=torch.float32, device="meta")
    w = draw_weights((2, 3), torch.Generator().manual_seed(0), like, law)
    assert w.device.type == "meta" and w.shape == (2, 3) and w.dtype == torch.float32


@pytest.mark.parametrize("law", WEIGHT_LAWS)
def test_weights_of_cpu_tokens_whatever_the_default_device(law):
    """Under ``torch.device("meta")`` the weights of CPU tokens are the ones drawn without it, on
    the CPU: every draw of every law, Student-t's Gamma variates and their buffer included, is made
    on ``like``'s device, not on the default one."""
    like = torch.empty(0, dtype=torch.float64)
    ref = draw_weights((4, 5), torch.Generator().manual_seed(2), like, law)
    with torch.device("meta"):
        got = draw_weights((4, 5), torch.Generator().manual_seed(2), like, law)
    assert got.device.type == "cpu" and torch.equal(got, ref)


@pytest.mark.parametrize("sigma_W", [0.0, 0.3])
def test_random_feature_field_lives_on_the_device_passed(sigma_W, tokens):
    """A random-feature field drawn (by reset or draw) for device="meta" has its features u and b
    on it, and a step of meta tokens is a meta tensor of their shape and dtype. A step of CPU
    tokens under ``torch.device("meta")`` is the step made without it: the Brownian normals, B^0's
    too, are drawn on the tokens' device (a meta tensor times a CPU one would still be meta)."""
    for start in ("reset", "draw"):
        field = RandomFeatureField(features=8, sigma_U=0.5, sigma_W=sigma_W, token_chunk=2)
        getattr(field, start)(2, 3, torch.Generator().manual_seed(0), torch.float32, "meta")
        assert field._u.device.type == field._b.device.type == "meta", start
        assert field._u.shape == (2, 3, 8) and field._b.shape == (2, 1, 8) and field._u.dtype == torch.float32
        X = torch.empty(2, 5, 3, dtype=torch.float32, device="meta")
        out = field.increment(X, 0.1, torch.Generator().manual_seed(1))
        assert out.device.type == "meta" and out.shape == X.shape and out.dtype == torch.float32
    field = RandomFeatureField(features=8, sigma_U=0.5, sigma_W=sigma_W)
    field.reset(2, 3, torch.Generator().manual_seed(0), torch.float64, "cpu")
    X = tokens(2, 5, 3, seed=1)
    ref = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    with torch.device("meta"):
        got = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    assert got.device.type == "cpu" and torch.equal(got, ref)


@pytest.mark.parametrize("mode", ["gaussian", "weights"])
def test_mlp_features_live_on_the_tokens_device(mode):
    """RandomMLP.hidden draws its normals on the tokens' device: meta tokens (N ≥ d, so U is drawn
    and no Cholesky factor is needed) give meta features (batch, N, m) in their dtype."""
    X = torch.empty(2, 5, 3, dtype=torch.float32, device="meta")
    phi = RandomMLP(width=8, sigma_U=0.5, sigma_W=0.3, mode=mode).hidden(X, torch.Generator().manual_seed(0))
    assert phi.device.type == "meta" and phi.shape == (2, 5, 8) and phi.dtype == torch.float32


# ----------------------------------------------------------------- the noise sources' draws, weight laws, the MLP sampler's routes and fallbacks, the exact field


def test_random_feature_field_keeps_its_features_and_refuses_another_d():
    """reset draws the features once; a second reset for the same d keeps them (the field is a
    function of position), one for another d is refused naming both."""
    field = RandomFeatureField("relu", features=7)
    field.reset(2, 3, torch.Generator().manual_seed(0), torch.float64, "cpu")
    u = field._u
    field.reset(2, 3, torch.Generator().manual_seed(1), torch.float64, "cpu")
    assert field._u is u
    with pytest.raises(ValueError, match="^RandomFeatureField: drawn for d = 3, the tokens have d = 4$"):
        field.reset(2, 4, torch.Generator().manual_seed(1), torch.float64, "cpu")


def test_noise_sources_draw_only_their_documented_normals(replay, tokens):
    """Without σ_W no b_W is drawn: after a step the generator is where the documented draws leave
    it (the next layer's weights depend on it), and a path of one part (``path_shape``) suffices."""
    B, N, d, m = 2, 3, 3, 5
    X = tokens(B, N, d, seed=41)
    gen = torch.Generator().manual_seed(2)
    ref = replay(gen)
    RandomMLP(m, "relu", mode="weights").increment(X, 0.1, gen)
    torch.randn(B, m, d, generator=ref, dtype=torch.float64)  # U
    torch.randn(B, m, d, generator=ref, dtype=torch.float64)  # W
    assert torch.equal(gen.get_state(), ref.get_state())
    field = RandomFeatureField("relu", features=m)
    field.reset(B, d, gen, torch.float64, "cpu")
    ref = replay(gen)
    field.increment(X, 0.1, gen)
    torch.randn(B, m, d, generator=ref, dtype=torch.float64)  # Z
    assert torch.equal(gen.get_state(), ref.get_state())
    Z = torch.randn(1, *field.path_shape(B, d)[0], generator=ref, dtype=torch.float64)
    assert field.path_shape(B, d) == [(B, m, d)]
    assert RandomFeatureField("relu", 5, sigma_W=0.5).path_shape(2, 3) == [(2, 5, 3), (2, 1, 3)]
    got = field.increment(X, 0.1, Draws(gen, BrownianPath.from_normals(Z)))
    close(got, math.sqrt(0.1) * (field.features_at(X) @ Z[0] / math.sqrt(m)).numpy())


def test_random_feature_field_errors_before_use_and_for_a_wrong_batch(tokens):
    X = tokens(2, 3, 3)
    with pytest.raises(RuntimeError, match=r"^RandomFeatureField.draw\(...\) \(or reset\) must be called before use$"):
        RandomFeatureField("relu", features=4).increment(X, 0.1, torch.Generator())
    field = RandomFeatureField("relu", features=4)
    field.reset(3, 3, torch.Generator().manual_seed(0), torch.float64, "cpu")
    with pytest.raises(ValueError, match=r"^RandomFeatureField: tokens have batch 2 but the field has 3 samples \(need equal, or 1\)$"):
        field.increment(X, 0.1, torch.Generator())


def test_mlp_student_t_weights_and_empirical_kernel_dtype(replay, tokens):
    """Explicit Student-t weights use the MLP's ν (U and W from ``draw_weights(…, ν)``); K_m is
    returned in the dtype asked for (float64 for float32 tokens), else in the tokens' dtype."""
    B, N, d, m, nu, dt, s = 2, 3, 4, 6, 9.0, 0.1, 1.3
    X = tokens(B, N, d, seed=42)
    mlp = RandomMLP(m, "tanh", scale=s, mode="weights", law="student_t", nu=nu)
    gen = torch.Generator().manual_seed(3)
    ref = replay(gen)
    U = draw_weights((B, m, d), ref, X, "student_t", nu)
    W = draw_weights((B, m, d), ref, X, "student_t", nu)
    expect = s * math.sqrt(dt) * torch.tanh(X @ U.transpose(-1, -2) / math.sqrt(d)) @ W / math.sqrt(m)
    close(mlp.increment(X, dt, gen), expect.numpy())
    g = RandomMLP(m, "relu")
    K = g.empirical_kernel(X.float(), torch.Generator().manual_seed(4), torch.float64)
    assert K.dtype == torch.float64
    assert g.empirical_kernel(X, torch.Generator().manual_seed(4)).dtype == torch.float64
    assert g.empirical_kernel(X.float(), torch.Generator().manual_seed(4)).dtype == torch.float32


def gamma_reference(a: float, n: int, g: torch.Generator) -> np.ndarray:
    """Gamma(a, 1) by Marsaglia–Tsang: d = a − ⅓, c = 1/√(9d); candidates x ~ N(0, 1), u ~ U(0, 1)
    in rounds of ⌊1.2·(still needed)⌋ + 16 (normals, then uniforms), v = (1 + c x)³, kept when
    v > 0 and log u < x²/2 + d − d v + d log v, as d·v, in order."""
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out: list[float] = []
    while len(out) < n:
        k = int(1.2 * (n - len(out))) + 16
        x = torch.randn(k, generator=g, dtype=torch.float64).numpy()
        u = torch.rand(k, generator=g, dtype=torch.float64).numpy()
        for xi, ui in zip(x, u):
            v = (1 + c * xi) ** 3
            if v > 0 and math.log(ui) < 0.5 * xi * xi + d - d * v + d * math.log(v) and len(out) < n:
                out.append(d * v)
    return np.array(out)


@pytest.mark.parametrize("law", ["gaussian", "rademacher", "uniform", "student_t"])
def test_draw_weights_each_law(replay, law):
    """Weights of mean 0 and variance 1 from the generator: N(0, 1); 2b − 1 with b ∈ {0, 1}
    uniform; √3 (2u − 1); Student-t, t = z / √(2 Gamma(ν/2)/ν) · √((ν − 2)/ν), the normals z
    first; ν = 5 by default (the config's ``student_nu``)."""
    shape, like = (3, 40), torch.zeros(1, dtype=torch.float64)
    for nu in (5.0, 9.0):
        gen = torch.Generator().manual_seed(6)
        ref = replay(gen)
        got = draw_weights(shape, gen, like, law, nu) if nu != 5.0 else draw_weights(shape, gen, like, law)
        if law == "gaussian":
            expect = torch.randn(shape, generator=ref, dtype=torch.float64).numpy()
        elif law == "rademacher":
            expect = 2.0 * torch.randint(0, 2, shape, generator=ref).numpy() - 1.0
            assert set(np.unique(expect)) == {-1.0, 1.0}
        elif law == "uniform":
            expect = math.sqrt(3.0) * (2 * torch.rand(shape, generator=ref, dtype=torch.float64).numpy() - 1)
        else:
            z = torch.randn(shape, generator=ref, dtype=torch.float64).numpy()
            chi2 = gamma_reference(nu / 2, math.prod(shape), ref).reshape(shape) * 2 / nu
            expect = z / np.sqrt(chi2) * math.sqrt((nu - 2) / nu)
        assert got.dtype == torch.float64 and torch.equal(gen.get_state(), ref.get_state())
        close(got, expect)
    assert torch.equal(draw_weights(shape, torch.Generator().manual_seed(1), like),
                       torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    assert draw_weights(shape, torch.Generator(), like.float(), law).dtype == torch.float32


def test_draw_weights_errors():
    like = torch.zeros(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="^weight_law: unknown law 'cauchy'; valid: gaussian, rademacher, uniform, student_t$"):
        draw_weights((2,), torch.Generator(), like, "cauchy")
    for nu in (4.0, 3.5):
        with pytest.raises(ValueError, match=rf"^student_nu: must be > 4 for a finite fourth moment \(got {nu}\)$"):
            draw_weights((2,), torch.Generator(), like, "student_t", nu)
    assert torch.isfinite(draw_weights((50,), torch.Generator(), like, "student_t", 4.5)).all()


def test_gram_output_cost_model():
    """The output goes through the root of ΦΦᵀ when c N d + 2 m N² + N³/3 + 2 N² d < c m d + 2 m N d,
    c the cost of a normal (100 flops on a CPU, 2 on CUDA and other devices), and never for m ≤ N;
    Gram roots only in float64 (float32 draws U: d normals per hidden unit)."""
    for device, c in (("cpu", 100.0), ("cuda", 2.0), ("meta", 2.0)):
        for N in (1, 2, 3, 5, 8, 16, 40):
            for d in (1, 2, 3, 4, 16, 64):
                for m in (1, 2, 4, 8, 16, 64, 256, 1024):
                    gram = c * N * d + 2 * m * N * N + N**3 / 3 + 2 * N * N * d
                    expect = m > N and gram < c * m * d + 2 * m * N * d
                    assert gram_output_cheaper(N, d, m, torch.device(device)) == expect, (device, N, d, m)
    assert gram_output_cheaper(4, 4, 5, torch.device("cpu")) and not gram_output_cheaper(4, 4, 4, torch.device("cpu"))
    assert _gram_roots_resolve(torch.float64) and not _gram_roots_resolve(torch.float32)
    assert (_hidden_rank(3, 5, torch.float64), _hidden_rank(3, 5, torch.float32), _hidden_rank(5, 3, torch.float64)) == (3, 5, 3)


def test_shifted_cholesky_per_matrix():
    """Each Gram matrix K = AᵀA (A with ``inner`` rows) of a batch is factorised with its own shift
    δ = inner · ε · max_i K_ii on the diagonal, so a rank-one K (synchronised tokens) factorises; a
    zero matrix (every feature 0) is reported failed."""
    r = np.random.default_rng(45)
    A = r.standard_normal((2, 2, 6, 3)) * np.array([1.0, 1e6])[None, :, None, None]  # scales 1 and 1e12
    K = np.einsum("xykn,xykm->xynm", A, A)
    C, bad = _cholesky(torch.from_numpy(K.copy()), 6)  # it shifts K in place
    assert bad is None
    eps = np.finfo(np.float64).eps
    for x in range(2):
        for y in range(2):
            ref = np.linalg.cholesky(K[x, y] + 6 * eps * K[x, y].diagonal().max() * np.eye(3))
            close(C[x, y] / math.sqrt(K[x, y].diagonal().max()), ref / math.sqrt(K[x, y].diagonal().max()))
    K0 = torch.zeros(2, 3, 3, dtype=torch.float64)
    K0[1] = torch.eye(3)
    _, bad = _cholesky(K0, 4)
    assert bad.tolist() == [True, False]
    J = torch.ones(2, 4, 4, dtype=torch.float64)  # synchronised tokens: rank 1, plain Cholesky fails
    assert bool((torch.linalg.cholesky_ex(J)[1] > 0).all())
    C, bad = _cholesky(J.clone(), 8)
    assert bad is None
    close(C @ C.transpose(-1, -2), (J + 8 * np.finfo(np.float64).eps * torch.eye(4, dtype=torch.float64)).numpy())


def test_mlp_hidden_fallback_when_the_gram_root_fails(replay, tokens):
    """Conditionally Gaussian features with d > N: a sample whose Y Yᵀ cannot be factorised (here a
    zero cloud) gets pre-activations Y Uᵀ from m·d further normals drawn after the buffer (zero for
    zero tokens, so Φ = φ(σ_U b_U)); the other sample keeps its route."""
    B, N, d, m, sU = 2, 2, 4, 3, 0.5
    X = tokens(B, N, d, seed=46)
    X[0] = 0.0
    mlp = RandomMLP(m, "tanh", sigma_U=sU)
    gen = torch.Generator().manual_seed(7)
    ref = replay(gen)
    Phi = mlp.hidden(X, gen)
    z = torch.randn(B * m * (N + 1), generator=ref, dtype=torch.float64)
    torch.randn(m * d, generator=ref, dtype=torch.float64)
    assert torch.equal(gen.get_state(), ref.get_state())
    bU = z.view(B, N + 1, m)[:, N]  # per sample Zᵀ (N, m), then b_U
    close(Phi[0], np.tanh(sU * bU[0].numpy())[None].repeat(N, 0))
    assert torch.isfinite(Phi).all() and Phi.shape == (B, N, m)
    with pytest.raises(ValueError, match=r"^weight_law: 'uniform' needs explicit weights \(mode = 'weights'\)$"):
        RandomMLP(law="uniform")


def test_mlp_output_fallback_when_phi_phi_t_is_singular(replay):
    """Output through the root of ΦΦᵀ (m > N, float64): samples whose ΦΦᵀ cannot be factorised
    (here zero clouds, Φ = relu(0) = 0) draw Φ Z' from m·d normals each after the buffer instead,
    so their increment is the bias s √dt σ_W b_W alone."""
    B, N, d, m, dt, sW = 3, 2, 4, 8, 0.1, 0.2
    assert gram_output_cheaper(N, d, m, torch.device("cpu"))
    X = torch.zeros(B, N, d, dtype=torch.float64)
    X[2] = torch.eye(d, dtype=torch.float64)[:N]
    gen = torch.Generator().manual_seed(8)
    ref = replay(gen)
    got = RandomMLP(m, "relu", sigma_W=sW).increment(X, dt, gen)
    n_hid, n_out = B * m * N, B * N * d
    z = torch.randn(n_hid + n_out + B * d, generator=ref, dtype=torch.float64)
    torch.randn(2 * m * d, generator=ref, dtype=torch.float64)  # U for the two zero clouds
    torch.randn(2 * m * d, generator=ref, dtype=torch.float64)  # Z' for their outputs
    assert torch.equal(gen.get_state(), ref.get_state())
    bW = z[n_hid + n_out:].view(B, 1, d)
    close(got[:2], (math.sqrt(dt) * sW * bW[:2]).expand(2, N, d).numpy())


def test_exact_field_covariance_roots_and_refusals(tokens):
    """K(X)_ij = κ(⟨x_i, x_j⟩) of the tokens renormalised in float64 (clamped to [−1, 1]), returned in
    the tokens' dtype; Chebyshev interpolation for a smooth κ equals κ to 1e-12; the increment's
    root is taken in float64; a kernel for another d is refused. sqrt_psd: S Sᵀ = K, also where
    the Cholesky factorisation fails (a singular matrix of the batch) or K has a rounding-negative
    eigenvalue."""
    X = tokens(2, 4, 3, seed=50)
    for name in ("relu", "tanh"):
        kern = NoiseKernel(name, 3, 0.2, 0.1)
        field = ExactField(kern)
        G = np.clip(np.einsum("bik,bjk->bij", X.numpy(), X.numpy()), -1, 1)
        close(field.covariance(X), kern.kappa(torch.from_numpy(G)).numpy())
        K32 = field.covariance(X.float())
        assert K32.dtype == torch.float32
        Xd = normalize(X.float().double())
        close(K32.double(), kern.kappa((Xd @ Xd.transpose(-1, -2)).clamp(-1, 1)).float().double().numpy())
        assert field.covariance(X.float(), torch.float64).dtype == torch.float64
    xi = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    field = ExactField(NoiseKernel("relu", 3), "cholesky")
    got = field.increment(X.float(), 0.04, Draws(torch.Generator(), BrownianPath.from_normals(xi[None])))
    S = torch.linalg.cholesky(field.covariance(X.float(), torch.float64)).float()
    assert got.dtype == torch.float32
    close(got.double(), (0.2 * (S @ xi)).double().numpy(), 1e-6)
    with pytest.raises(ValueError, match="^ExactField: its kernel is for d = 3, the tokens have d = 4$"):
        field.noise_kernel(4)
    assert field.noise_kernel(3) is field.kernel
    v = torch.tensor([[1.0, 2.0, 2.0], [1.0, 0.0, -1.0]], dtype=torch.float64)
    K = torch.stack([v.T @ v, torch.eye(3, dtype=torch.float64)])  # rank 2, identity
    K[0] -= 1e-14 * torch.eye(3, dtype=torch.float64)  # a rounding-negative eigenvalue
    for method in ("symmetric", "cholesky"):
        S = sqrt_psd(K, method)
        assert torch.isfinite(S).all()
        close(S @ S.transpose(-1, -2), (K + torch.stack([1e-14 * torch.eye(3, dtype=torch.float64), 0 * K[1]])).numpy(), 1e-12)
    close(sqrt_psd(K[1:], "cholesky"), np.eye(3)[None])


def test_gamma_sampler_against_marsaglia_tsang(replay):
    """Gamma(a) for a = 1 (a tenth of the candidates rejected, some with v ≤ 0) and a = 2.5, 2000
    variates in the requested shape, the generator left where the reference leaves it."""
    for a, shape in ((1.0, (2000,)), (2.5, (40, 50))):
        gen = torch.Generator().manual_seed(13)
        ref = replay(gen)
        got = _gamma(a, shape, gen, torch.zeros(1, dtype=torch.float64))
        assert got.shape == shape
        close(got.reshape(-1), gamma_reference(a, 2000, ref))
        assert torch.equal(gen.get_state(), ref.get_state())


def _psd(n: int, rank: int, seed: int) -> torch.Tensor:
    """A symmetric PSD matrix of the given rank (rank < n: singular, like synchronised tokens)."""
    A = torch.randn(n, rank, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return A @ A.T


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 12), rank=st.integers(1, 12), k=st.integers(1, 5), batch=st.integers(1, 3),
       method=st.sampled_from(["symmetric", "cholesky"]), seed=st.integers(0, 2**31))
def test_root_times_is_the_root_applied(n, rank, k, batch, method, seed):
    """root_times(K, Z) = sqrt_psd(K) Z (two thin products instead of forming the root), to rounding,
    for full-rank and singular K."""
    from stochformer.model.noise import root_times, sqrt_psd
    K = torch.stack([_psd(n, min(rank, n), seed + i) for i in range(batch)])
    Z = torch.randn(batch, n, k, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64)
    got, want = root_times(K, Z, method), sqrt_psd(K, method) @ Z
    assert float((got - want).abs().max()) <= 1e-12 * max(1.0, float(K.abs().max()))
    S = sqrt_psd(K, method)  # and S Sᵀ = K: root_times applies a root of K, not another matrix
    assert float((S @ S.transpose(-1, -2) - K).abs().max()) <= 1e-10 * max(1.0, float(K.abs().max()))


def test_small_factorisations_run_in_one_thread_and_restore_the_setting(monkeypatch):
    """eigh and Cholesky of small CPU matrices run with one torch thread (MKL's threads cost more than
    they share there), the thread count is restored after, also when the factorisation raises."""
    import stochformer.model.noise as noise
    seen = []
    real = torch.linalg.eigh

    def recording(K):
        seen.append(torch.get_num_threads())
        return real(K)

    monkeypatch.setattr(torch.linalg, "eigh", recording)
    before = torch.get_num_threads()
    noise.sqrt_psd(_psd(6, 6, 0).expand(3, 6, 6))
    assert seen == [1] and torch.get_num_threads() == before
    big = _psd(noise.SMALL_LAPACK + 1, 4, 1)
    noise.sqrt_psd(big)
    assert seen[-1] == before  # a large matrix keeps the threads

    def failing(K):
        raise RuntimeError("injected")

    monkeypatch.setattr(torch.linalg, "eigh", failing)
    with pytest.raises(RuntimeError, match="injected"):
        noise.sqrt_psd(_psd(4, 4, 2))
    assert torch.get_num_threads() == before


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=0, max_size=2), n=st.integers(1, 12), threads=st.integers(1, 4),
       seed=st.integers(0, 2**31))
def test_small_eigh_split_over_threads_is_one_call(shape, n, threads, seed):
    """The batch split over worker threads gives, bit for bit, one single-threaded eigh call on the
    whole batch, for any batch shape and thread count: the numbers do not depend on the threads."""
    import stochformer.model.noise as noise
    from stochformer.core.runtime import one_cpu_thread
    A = torch.randn(*shape, n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    K = A @ A.transpose(-1, -2)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w, V = noise._eigh(K)
    finally:
        torch.set_num_threads(old)
    with one_cpu_thread():
        w0, V0 = torch.linalg.eigh(K)
    assert torch.equal(w, w0) and torch.equal(V, V0) and torch.get_num_threads() == old


def test_eigh_inside_a_worker_thread_does_not_wait_on_its_own_pool():
    """Called from one of the pool's own threads (every worker busy), the split runs in that thread:
    no deadlock."""
    from stochformer.core.runtime import thread_pool
    import stochformer.model.noise as noise
    K = _psd(5, 5, 3).expand(64, 5, 5).contiguous()
    pool = thread_pool()
    futures = [pool.submit(noise._eigh, K) for _ in range(pool._max_workers)]
    for f in futures:
        assert torch.equal(f.result(timeout=60)[0], torch.linalg.eigh(K)[0])


def test_a_forked_child_gets_its_own_pool():
    import multiprocessing
    from stochformer.core.runtime import thread_pool
    thread_pool().submit(int).result()  # the parent's pool exists (with threads) before the fork
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as p:
        assert p.apply(_child_pool_works, ()) == 7


def _child_pool_works() -> int:
    from stochformer.core.runtime import thread_pool
    return thread_pool().submit(lambda: 7).result(timeout=60)


def test_a_forked_child_factorises_in_its_own_thread():
    """In a process forked after import, small eigen-problems do not go to worker threads (the
    child's copy of the parent's thread and OpenMP state), and give the same numbers."""
    import multiprocessing
    K = _psd(6, 6, 4).expand(32, 6, 6).contiguous()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as p:
        got, used_pool = p.apply(_child_eigh, (K,))
    from stochformer.core.runtime import one_cpu_thread
    with one_cpu_thread():
        want = torch.linalg.eigh(K)[0]
    assert not used_pool and torch.equal(got, want)


def _child_eigh(K):
    import stochformer.core.runtime as runtime
    import stochformer.model.noise as noise
    assert runtime.forked()
    used = []
    real = noise.thread_pool
    noise.thread_pool = lambda: used.append(1) or real()
    try:
        return noise._eigh(K)[0], bool(used)
    finally:
        noise.thread_pool = real


@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu"])
def test_exact_covariance_under_autograd_is_the_same_numbers_with_the_true_gradient(activation):
    """K(X) of the exact field with X needing a gradient (the closed form for ReLU, Clenshaw's
    recurrence on the Chebyshev interpolant otherwise): the same numbers as without, a finite
    gradient (the diagonal, ⟨x_i, x_i⟩ = 1, is out of the graph: kept, it would meet arccos's
    infinite slope at 1), and that gradient is the derivative (torch.autograd.gradcheck, central
    differences in float64)."""
    field = ExactField(NoiseKernel(activation, 3))
    X = normalize(torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    X.requires_grad_(True)
    K = field.covariance(X)
    torch.testing.assert_close(K, field.covariance(X.detach()), rtol=0, atol=0)
    (grad,) = torch.autograd.grad(K.sum(), X)
    assert torch.isfinite(grad).all()
    weights = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda Y: (field.covariance(Y) * weights).sum(), (X,), eps=1e-6, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(coef=st.lists(st.floats(-2, 2), min_size=1, max_size=12), seed=st.integers(0, 2**16))
def test_clenshaw_is_the_chebyshev_series_with_its_derivative(coef, seed):
    """Σ_k c_k T_k(x) by Clenshaw's recurrence against NumPy's chebval, in the buffered path and
    the autograd path (the same values), whose gradient is the series of the derivative (chebder)."""
    from numpy.polynomial import chebyshev

    x = torch.rand(3, 7, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1
    c = torch.tensor(coef, dtype=torch.float64)
    want = chebyshev.chebval(x.numpy(), np.array(coef))
    np.testing.assert_allclose(_clenshaw(c, x).numpy(), want, rtol=0, atol=1e-12)
    xg = x.clone().requires_grad_(True)
    y = _clenshaw(c, xg)
    torch.testing.assert_close(y.detach(), _clenshaw(c, x), rtol=0, atol=0)
    (grad,) = torch.autograd.grad(y.sum(), xg)
    slope = chebyshev.chebval(x.numpy(), chebyshev.chebder(np.array(coef))) if len(coef) > 1 else np.zeros(x.shape)
    np.testing.assert_allclose(grad.numpy(), slope, rtol=0, atol=1e-10)


@pytest.mark.parametrize("a", [1.0, 2.5, 7.0])
def test_gamma_variates_have_the_gamma_law_and_follow_like(a):
    """Gamma(a, 1) from the generator alone: mean a and variance a. Quantity: the sample mean and
    variance of n = 40 000 draws against a, to 4.5 standard errors (SE √(a/n) for the mean and
    √((2a² + 6a)/n) for the variance, from Gamma's fourth central moment 3a² + 6a); the same
    generator state gives the same draws; dtype and device follow ``like``; a < 1 is refused."""
    n = 40_000
    like = torch.zeros((), dtype=torch.float32)
    g = torch.Generator().manual_seed(int(10 * a))
    x = gamma_variates(a, (200, 200), g, like)
    assert x.shape == (200, 200) and x.dtype == torch.float32 and bool((x > 0).all())
    again = gamma_variates(a, (200, 200), torch.Generator().manual_seed(int(10 * a)), like)
    assert torch.equal(x, again)
    v = x.double().flatten()
    assert abs(float(v.mean()) - a) < 4.5 * math.sqrt(a / n)
    assert abs(float(v.var()) - a) < 4.5 * math.sqrt((2 * a * a + 6 * a) / n)
    with pytest.raises(ValueError, match=r"^a: must be >= 1 \(got 0\.5\)$"):
        gamma_variates(0.5, (3,), g, like)


@pytest.mark.parametrize("output, bias", [(True, True), (False, True), (True, False), (False, False)])
def test_layer_normals_of_some_samples_are_views_of_theirs(output, bias):
    """LayerNormals.samples(a, b): rows a..b−1 of every field present (views of the same memory),
    None where a field is absent, and the same ``gram``."""
    g = torch.Generator().manual_seed(0)
    full = LayerNormals(torch.randn(5, 3, 4, generator=g), torch.randn(5, 6, 2, generator=g) if output else None,
                        torch.randn(5, 1, 2, generator=g) if bias else None, gram=output)
    part = full.samples(1, 4)
    for name in ("hidden", "output", "bias_W"):
        whole, rows = getattr(full, name), getattr(part, name)
        if whole is None:
            assert rows is None, name
        else:
            assert torch.equal(rows, whole[1:4]) and rows.data_ptr() == whole[1].data_ptr(), name
    assert part.gram is full.gram


def test_a_covariance_that_broke_down_within_a_step_is_a_non_finite_state(monkeypatch):
    """LAPACK failing on the exact field's covariance (injected: it does so on some non-finite
    matrices) is `NonFiniteError` when the covariance holds NaN or infinite entries (a state that
    broke down within a step, before the loop's check), which a run blames on its config's likely
    fields; on a finite covariance the failure is LAPACK's, unchanged."""
    from stochformer.core.validation import NonFiniteError
    from stochformer.model import noise

    def fails(K):
        raise RuntimeError("linalg.eigh: The algorithm failed to converge")

    monkeypatch.setattr(noise, "_eigh_small", fails)
    monkeypatch.setattr(noise.torch.linalg, "eigh", fails)
    for n in (3, 40):  # LAPACK's small path and torch's
        for bad in (math.nan, math.inf):
            K = torch.eye(n, dtype=torch.float64).repeat(2, 1, 1)
            K[1, 0, 1] = bad
            with pytest.raises(NonFiniteError, match=r"^non-finite tokens in a covariance within a step"):
                noise._eigh(K)
        with pytest.raises(RuntimeError, match="failed to converge"):
            noise._eigh(torch.eye(n, dtype=torch.float64).repeat(2, 1, 1))


@settings(max_examples=30, deadline=None)
@given(d_kernel=st.integers(2, 5), d=st.integers(2, 5), N=st.integers(2, 5))
def test_an_exact_field_refuses_tokens_of_another_dimension_than_its_kernel(d_kernel, d, N):
    """ExactField(κ in dimension d_kernel).increment on tokens of dimension d (N of them, N and d
    independent): an increment of their shape when d = d_kernel, else one ValueError naming both."""
    field = ExactField(NoiseKernel("relu", d_kernel))
    X = normalize(torch.randn(2, N, d, generator=torch.Generator().manual_seed(d * 10 + N), dtype=F64))
    if d == d_kernel:
        assert field.increment(X, 0.1, torch.Generator().manual_seed(0)).shape == X.shape
    else:
        with pytest.raises(ValueError, match=rf"^ExactField: its kernel is for d = {d_kernel}, the tokens have d = {d}$"):
            field.increment(X, 0.1, torch.Generator().manual_seed(0))
