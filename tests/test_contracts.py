"""Exact checks of what the pathwise reference tests leave free: defaults, argument handling, edge
cases and error messages of the science modules. Each pins a documented behaviour that a
surviving mutant of ``tools/mutation.py`` changed (docs/testing.md); values are exact or to
1e-12 in float64, as in ``tests/test_reference.py``."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from stochformer.config.build import initial_tokens
from stochformer.config import InitConfig, RunConfig
from stochformer.measure.diagnostics import energy, mean_cosine, pair_statistics
from stochformer.core.brownian import BrownianPath, Draws, as_draws
from stochformer.measure.distances import w2_exact, w2_sliced
from stochformer.model.attention import SoftmaxAttention, query_chunk
from stochformer.core.extras import MissingExtraError
from stochformer.model.kernel import (
    NoiseKernel,
    first_moment_rate,
    lambda_bar_prime,
    lyapunov_exponent,
    rates,
    theorem14_F,
)
from stochformer.model.activations import activation_name, get_activation
from stochformer.model.noise import (
    ExactField,
    RandomFeatureField,
    RandomMLP,
    _cholesky,
    _gamma,
    gram_output_cheaper,
    _gram_roots_resolve,
    _hidden_rank,
    draw_weights,
    sqrt_psd,
)
from stochformer.model.sde import LimitSDE
from stochformer.model.transformer import Transformer
from stochformer.integrate import SaveAt, custom_parts, describe, solve
from stochformer.core.sphere import cluster, normalize, pair, uniform
from stochformer.io.tokens import load_token_array, load_tokens
from stochformer.measure.stats import fit_power_law_weighted, mean_and_se
from stochformer.core.validation import NonFiniteError, blamed_on

from conftest import TOL, close



# ----------------------------------------------------------------- initial tokens


def test_initial_tokens_from_a_seed_and_their_defaults():
    """A ``seed`` is a CPU generator seeded with it (the same tokens as that generator gives); the
    Python defaults are the config's (spread 0.1, cosine 0.5); a float32 pair is float32; neither
    seed nor generator is refused with one message."""
    B, N, d = 2, 3, 4
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    assert torch.equal(uniform(B, N, d, seed=3), uniform(B, N, d, generator=g(3)))
    assert torch.equal(cluster(B, N, d, seed=4), initial_tokens(InitConfig(kind="cluster"), B, N, d, g(4)))
    assert InitConfig().spread == 0.1 and InitConfig().cosine == 0.5
    assert torch.equal(cluster(B, N, d, seed=4), cluster(B, N, d, 0.1, generator=g(4)))
    P = pair(B, d, seed=5)
    assert torch.equal(P, initial_tokens(InitConfig(kind="pair"), B, 2, d, g(5)))
    close((P[:, 0] * P[:, 1]).sum(-1), np.full(B, 0.5))
    close(torch.linalg.vector_norm(P, dim=-1), np.ones((B, 2)))
    P32 = pair(B, d, seed=5, dtype=torch.float32)
    assert P32.dtype == torch.float32
    close((P32[:, 0] * P32[:, 1]).sum(-1).double(), np.full(B, 0.5), 1e-6)
    for make in (lambda: uniform(B, N, d), lambda: cluster(B, N, d), lambda: pair(B, d)):
        with pytest.raises(ValueError, match="^seed: give a seed or a generator$"):
            make()


# ----------------------------------------------------------------- diagnostics


def test_energy_and_statistics_defaults_and_shapes(tokens):
    """E_β's β is 1 by default, in ``energy`` and ``pair_statistics``; a Gram entry above 1 (rounding
    of ⟨x, x⟩) counts as 1, so E_β ≥ 0 exactly: E = −½ e^β N⁻² Σ expm1(β(min(G_ij, 1) − 1)); the
    mean cosine of an unbatched cloud (N, d) and of a (b₁, b₂, N, d) batch."""
    X = tokens(2, 5, 3, seed=40)
    assert torch.equal(energy(X), energy(X, 1.0))
    for name in ("energy", "min_cosine", "mean_cosine"):
        assert torch.equal(pair_statistics(X)[name], pair_statistics(X, 1.0)[name])
    Y = (1 + 1e-9) * X  # ⟨y, y⟩ = 1 + 2e-9 > 1: rounding (unit rows to √ε are accepted)
    G = np.minimum(np.einsum("bik,bjk->bij", Y.numpy(), Y.numpy()), 1.0)
    ref = -0.5 * math.e * np.expm1(G - 1.0).sum((-1, -2)) / 25
    close(energy(Y), ref)
    close(pair_statistics(Y)["energy"], ref)
    Xn = X.numpy()
    ref_cos = [np.mean([float(np.dot(x[i], x[j])) for i in range(5) for j in range(i + 1, 5)]) for x in Xn]
    close(mean_cosine(X[0]), np.array(ref_cos[0]))
    close(mean_cosine(X.reshape(1, 2, 5, 3)), np.array([ref_cos]))


# ----------------------------------------------------------------- noise sources


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


def replay(g: torch.Generator) -> torch.Generator:
    r = torch.Generator()
    r.set_state(g.get_state())
    return r


def test_noise_sources_draw_only_their_documented_normals(tokens):
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


def test_mlp_student_t_weights_and_empirical_kernel_dtype(tokens):
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


# ----------------------------------------------------------------- statistics and token files


def test_mean_and_se_numpy_and_torch_along_any_axis():
    """Mean and SE = s/√n (s with n − 1) along ``axis``, for numpy (any axis, integer input) and torch;
    SE = 0 for one sample, a proper SE from two on."""
    v = np.array([[1, 2, 4], [2, 5, 4]])  # n = 2 along axis 0, n = 3 along axis 1
    for values in (v, torch.from_numpy(v.astype(float))):
        m, se = mean_and_se(values)
        close(m, np.array([1.5, 3.5, 4.0]))
        close(se, np.array([0.5, 1.5, 0.0]))
        m, se = mean_and_se(values, axis=1)
        close(m, np.array([7 / 3, 11 / 3]))
        close(se, np.sqrt(np.array([7 / 3, 7 / 3]) / 3))
        m, se = mean_and_se(values[:1])
        close(se, np.zeros(3))
        assert type(se) is type(m)


def test_load_tokens_rows_of_any_magnitude(tmp_path):
    """Each row is scaled by its own largest entry before normalising: rows of 1e200 and 1e-200 in
    one file both come out as unit vectors, without overflow or underflow."""
    arr = np.array([[3e200, 4e200], [3e-200, -4e-200], [1.0, 0.0]])
    np.save(tmp_path / "x.npy", arr)
    close(load_tokens(tmp_path / "x.npy", 1, 3, 2), np.array([[[0.6, 0.8], [0.6, -0.8], [1.0, 0.0]]]))


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
def test_draw_weights_each_law(law):
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


def test_save_schedule():
    """Statistics every k steps plus step 0 and the last; explicit steps sorted and deduplicated,
    each in 0..L (one message naming the range otherwise)."""
    assert SaveAt(every=3).stat_steps(7) == [0, 3, 6, 7]
    assert SaveAt(every=1).stat_steps(2) == [0, 1, 2]
    assert SaveAt(every=4).stat_steps(8) == [0, 4, 8]
    assert SaveAt(at=[5, 0, 2, 5]).stat_steps(5) == [0, 2, 5]
    assert SaveAt(stats=()).stat_steps(5) == []
    assert SaveAt(tokens_every=2).token_steps(5) == [0, 2, 4, 5]
    assert SaveAt(tokens_at=[1]).token_steps(5) == [1]
    for at, got in (([0, 3, 9], "0..9"), ([-1, 3], "-1..3"), ([2, 3, 9], "2..9"), ([-1], "-1..-1")):
        with pytest.raises(ValueError, match=rf"^SaveAt: steps to save must lie in 0\.\.5 \(got {got}\)$"):
            SaveAt(at=at).stat_steps(5)


# ----------------------------------------------------------------- attention


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


# ----------------------------------------------------------------- the MLP sampler's routes


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


def test_load_token_array_format_versions_and_truncated_data(tmp_path):
    """A .npy file of format 2.0 is read like 1.0; a file whose header is valid but whose data is
    cut short is refused with the one ``init.path`` message."""
    arr = np.arange(1.0, 13.0).reshape(4, 3)
    with open(tmp_path / "v2.npy", "wb") as fh:
        np.lib.format.write_array(fh, arr, version=(2, 0))
    assert np.array_equal(load_token_array(tmp_path / "v2.npy", 2, 4, 3), arr)
    np.save(tmp_path / "cut.npy", arr)
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match=r"^init\.path: cannot read .*cut\.npy as a \.npy array: .+"):
        load_token_array(tmp_path / "cut.npy", 2, 4, 3)


def test_mlp_hidden_fallback_when_the_gram_root_fails(tokens):
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


def test_mlp_output_fallback_when_phi_phi_t_is_singular():
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


# ----------------------------------------------------------------- the limit SDE and the rates


def test_limit_sde_reset_and_ito_correction():
    """reset draws the noise source's per-run state with the given batch, d, generator and dtype;
    the Itô drift is −κ(1)(d − 1)/2 · x with κ(1) given, or the noise kernel's for the tokens' d."""
    field = RandomFeatureField("relu", features=5, sigma_U=0.3)
    sde = LimitSDE(None, field)
    gen = torch.Generator().manual_seed(9)
    ref = replay(gen)
    sde.reset(2, 3, gen, torch.float32, "cpu")
    u = torch.randn(2, 3, 5, generator=ref, dtype=torch.float32)
    b = 0.3 * torch.randn(2, 1, 5, generator=ref, dtype=torch.float32)
    assert field._u.dtype == torch.float32 and torch.equal(field._u, u) and torch.equal(field._b, b)
    layer = Transformer(None, RandomFeatureField("relu", features=5, sigma_U=0.3))
    layer.reset(2, 3, replay(ref), torch.float32, "cpu")
    assert layer.noise._u.dtype == torch.float32 and torch.equal(layer.noise._u, torch.randn(2, 3, 5, generator=replay(ref), dtype=torch.float32))
    mlp = RandomMLP(4, "tanh", 0.2, 0.1, 1.5)
    sde = LimitSDE(None, mlp)
    for d in (3, 4, 3):
        X = torch.ones(2, 2, d, dtype=torch.float64)
        close(sde.ito_correction(X), (-0.5 * NoiseKernel("tanh", d, 0.2, 0.1, 1.5).kappa1 * (d - 1) * X).numpy())
    close(LimitSDE(None, mlp, kappa1=0.7).ito_correction(X), (-0.7 * X).numpy())
    LimitSDE().reset(2, 3, gen, torch.float64, "cpu")  # no noise: nothing to draw
    assert torch.equal(gen.get_state(), ref.get_state())


def test_rates_arguments_and_overflow():
    """β in (0, 700], γ finite, d ≥ 2, each refused with a message naming it; γ up to where λ̄ − 2γ
    still fits in float64; rates beyond float64 refused naming the fields to reduce."""
    k = NoiseKernel("relu", 5, 0.1, 0.2)
    assert rates(k, beta=700.0).beta == 700.0
    for beta, valid in ((0.0, "0.0"), (700.5, "700.5"), (math.nan, "nan")):
        with pytest.raises(ValueError, match=rf"^beta: must be a finite number and > 0 and <= 700 \(got {valid}\)$"):
            rates(k, beta=beta)
    with pytest.raises(ValueError, match=r"^gamma: must be a finite number \(got inf\)$"):
        rates(k, gamma=math.inf)
    big = rates(k, gamma=7e307)
    assert big.lambda_bar_total == big.lambda_bar - 1.4e308
    for f in (lyapunov_exponent, first_moment_rate):
        with pytest.raises(ValueError, match=r"^d: must be an integer >= 2 \(got 1\)$"):
            f(1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"^rates: the rates do not fit in float64 \(kappa\(1\) = 1e\+308, d = 5\); "
                       r"reduce sigma_U, sigma_W, scale, d or gamma$"):
        rates(NoiseKernel("relu", 5, 0.0, 1e154))


# ----------------------------------------------------------------- W₂


def test_w2_exact_is_the_best_matching_and_reports_the_cap():
    """Exact W₂² between two clouds of 4 points with uniform weights is the smallest mean squared
    distance over the 4! matchings; the iteration cap's warning is returned, each message once per
    occurrence joined by '; '; sliced W₂² is POT's sliced distance with 200 projections, squared."""
    import itertools

    ot = pytest.importorskip("ot")
    r = np.random.default_rng(47)
    X, Y = r.standard_normal((4, 3)), r.standard_normal((4, 3))
    best = min(np.mean([np.sum((X[i] - Y[p[i]]) ** 2) for i in range(4)]) for p in itertools.permutations(range(4)))
    res = w2_exact(X, Y)
    assert (res.method, res.warning) == ("exact", None) and abs(res.value - best) < TOL
    X, Y = r.standard_normal((30, 3)), r.standard_normal((30, 3))
    capped = w2_exact(X, Y, max_iter=3)
    parts = capped.warning.split("; ")
    assert len(parts) >= 2 and all(p.startswith("numItermax reached before optimality") for p in parts)
    sliced = w2_sliced(X, Y)
    assert sliced.method == "sliced"
    assert abs(sliced.value - float(ot.sliced_wasserstein_distance(X, Y, n_projections=200, p=2, seed=0)) ** 2) < TOL


# ----------------------------------------------------------------- the stepping loop


def test_solve_records_what_save_asks_and_describes_the_run(tokens):
    """solve with a hook: the hook sees (k, X_k) and its result replaces X_k; statistics (β and
    block from SaveAt) of the states at the saved steps, in float64 from the renormalised state
    whatever the model's dtype; snapshots; time = step · Δt; attributes T, steps, seed, path and
    the model's description (fields, tensors by shape and dtype, callables by name)."""
    B, N, d, T, L = 2, 4, 3, 0.3, 3
    X0 = tokens(B, N, d, seed=48)
    A = torch.from_numpy(np.random.default_rng(49).standard_normal((d, d)))
    model = Transformer(SoftmaxAttention(A=A, V=torch.eye(d, dtype=torch.float64)), None, "post_ln")
    seen: list[int] = []

    def hook(k, X):
        seen.append(k)
        return normalize(X + 0.1) if k == 2 else None

    save = SaveAt(every=2, tokens_every=1, energy_beta=2.0, block=4)
    ds = solve(model, X0, T, L, save, seed=5, hook=hook)
    states = [X0]
    for k in range(1, L + 1):
        X = model.step(states[-1], T / L, torch.Generator())
        states.append(normalize(X + 0.1) if k == 2 else X)
    assert seen == [1, 2, 3]
    close(ds["X_final"].values, states[-1].numpy())
    close(ds["X"].values, torch.stack(states, 1).numpy())
    assert ds["step"].values.tolist() == [0, 2, 3] and ds["snapshot_step"].values.tolist() == [0, 1, 2, 3]
    assert ds["X"].dims == ("sample", "snapshot", "token", "dim") and ds["X_final"].dims == ("sample", "token", "dim")
    assert ds["energy"].dims == ("sample", "time") and ds["step"].dims == ("time",) and ds["snapshot_time"].dims == ("snapshot",)
    assert ds["sample"].values.tolist() == [0, 1] and ds["snapshot_step"].dims == ("snapshot",) and ds["time"].dims == ("time",)
    close(ds["time"].values, np.array([0.0, 0.2, 0.3]))
    close(ds["snapshot_time"].values, np.array([0.0, 0.1, 0.2, 0.3]))
    for name in ("mean_cosine", "energy", "min_cosine"):
        ref = torch.stack([pair_statistics(states[k], 2.0)[name] for k in (0, 2, 3)], -1)
        close(ds[name].values, ref.numpy())
    assert (ds.attrs["T"], ds.attrs["steps"], ds.attrs["seed"]) == (T, L, 5)
    assert ds.attrs["path"] == "none (normals from the generator)" and json.loads(ds.attrs["custom_parts"]) == []
    assert json.loads(ds.attrs["model"]) == {
        "type": "stochformer.model.transformer.Transformer", "noise": None, "order": "post_ln",
        "attention": {"type": "stochformer.model.attention.SoftmaxAttention", "beta": 1.0, "gamma": 1.0,
                      "A": {"tensor": [3, 3], "dtype": "float64"}, "V": {"tensor": [3, 3], "dtype": "float64"},
                      "chunk": None, "sdpa": False}}
    assert describe([normalize, "x", 2]) == [{"callable": "stochformer.core.sphere.normalize"}, "x", 2]
    assert describe(RandomMLP(4))["activation"] == "relu" and "_phi" not in describe(RandomMLP(4))
    # float32 states: statistics of the state renormalised in float64
    X32 = X0.float()
    ds = solve(Transformer(None, None), X32, T, 1, SaveAt(), seed=5)
    close(ds["mean_cosine"].values[:, 0], mean_cosine(normalize(X32.double())).numpy())
    close(ds["min_cosine"].values[:, 0], pair_statistics(normalize(X32.double()))["min_cosine"].numpy())


def test_solve_refuses_bad_input_and_stops_on_a_non_finite_state(tokens):
    X0 = tokens(1, 3, 3)
    with pytest.raises(ValueError, match=r"^seed: give a seed or a generator \(every run is seeded\)$"):
        solve(Transformer(), X0, 1.0, 2)
    with pytest.raises(ValueError, match=r"^X0: expected tokens of shape \(batch, N, d\), got \(3, 3\)$"):
        solve(Transformer(), X0[0], 1.0, 2, seed=0)

    class Blowup:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def step(self, X, dt, draws):
            return X / 0.0 if draws.k == 1 else X

    with pytest.raises(NonFiniteError, match=r"^non-finite particles at layer 2: the run was stopped and nothing was "
                       r"written; likely cause: the step size and the scales of the attention and the noise$"):
        with blamed_on(None, "particles"):
            solve(Blowup(), X0, 1.0, 3, seed=0)
    bad = X0.clone()
    bad[0, 0, 0] = math.nan
    with pytest.raises(NonFiniteError, match=r"^non-finite tokens at layer 0: .* likely cause: the step T/L and the scales"):
        with blamed_on(RunConfig()):
            solve(Transformer(), bad, 1.0, 3, seed=0)


def weighted_fit_reference(N, y, se):
    """By brute force: RSS(p) = min over C of Σ (y − C (N/N₀)^{−p})²/se² on a grid of spacing 10⁻⁴
    over [−20, 20]; (p̂ the grid's minimiser, the hull of {p : RSS(p) − RSS(p̂) ≤ 3.8415} (χ²₁'s
    95% quantile), C(p̂) · N₀^p̂)."""
    x, w = N / N[0], 1.0 / se**2
    p = np.linspace(-20.0, 20.0, 400001)
    X = x[None, :] ** -p[:, None]
    C = (w * y * X).sum(1) / (w * X * X).sum(1)
    rss = (w * (y - C[:, None] * X) ** 2).sum(1)
    k = int(np.argmin(rss))
    inside = p[rss - rss[k] <= 3.841458820694124]
    return p[k], (inside.min(), inside.max()), C[k] * N[0] ** p[k]


def test_weighted_power_fit_against_its_construction():
    """fit_power_law_weighted is the profiled weighted fit and profile-likelihood interval of its
    docstring (to the brute-force grid's 10⁻⁴); on exact data y = 3 N^{−0.7} it returns p = 0.7 and
    C = 3 with an interval around 0.7; unresolved means give an interval that reaches the search
    range's ends; se is the interval's half-width over 1.96."""
    N = np.array([8.0, 16.0, 32.0, 64.0])
    for y, se in ((np.array([0.02, 0.3, 0.2, 0.12]), np.array([0.05, 0.04, 0.03, 0.02])),
                  (3.0 * N**-0.6 + np.array([0.01, -0.02, 0.005, 0.0]), np.array([0.05, 0.04, 0.03, 0.02]))):
        fit = fit_power_law_weighted(N, y, se)
        p, (lo, hi), C = weighted_fit_reference(N, y, se)
        assert abs(fit.exponent - p) < 2e-4 and abs(fit.ci[0] - lo) < 2e-4 and abs(fit.ci[1] - hi) < 2e-4
        assert abs(fit.prefactor / C - 1) < 1e-3 and fit.se == pytest.approx((fit.ci[1] - fit.ci[0]) / 3.919927969, rel=1e-9)
    exact = fit_power_law_weighted(N, 3.0 * N**-0.7, 1e-3 * N**-0.7)
    assert abs(exact.exponent - 0.7) < 1e-9 and abs(exact.prefactor - 3.0) < 1e-9 and exact.ci[0] < 0.7 < exact.ci[1]
    noise = fit_power_law_weighted(np.array([4.0, 8.0]), np.array([0.1, 0.05]), np.array([0.18, 0.18]))
    assert noise.ci == (-20.0, 20.0)


def gelu_tanh(x):
    return torch.tanh(x) * 0.5


@dataclass
class Damped:
    """A noise source defined outside stochformer (a dataclass with a public and a private field)."""

    scale: float = 0.0
    activation: object = gelu_tanh
    _hidden: int = 3

    def reset(self, batch, d, generator, dtype, device):
        pass

    def increment(self, X, dt, draws):
        return self.scale * X


def test_run_attributes_and_custom_parts(tokens):
    """The attributes of a run with a generator and a path: seed "none", the path's repr, versions
    and device; parts not defined by stochformer (a class, a callable, a dataclass's fields) are
    listed by where they sit, named by module and qualified name; stochformer's own and the named
    activations are not."""
    X0 = tokens(1, 2, 3)
    path = BrownianPath.from_normals(torch.zeros(2, 1, 2, 3, dtype=torch.float64))
    model = LimitSDE(None, Damped(), kappa1=0.0)
    ds = solve(model, X0, 1.0, 2, SaveAt(stats=()), generator=torch.Generator(), path=path)
    assert "seed" not in ds.attrs and ds.attrs["path"] == repr(path) == "BrownianPath(shape=(1, 2, 3), steps=2)"
    versions = json.loads(ds.attrs["versions"])
    assert ds.attrs["device"] == versions["device"] and ds.attrs["device"].startswith("cpu") and versions["torch"] == torch.__version__
    here = f"{__name__}"
    assert json.loads(ds.attrs["custom_parts"]) == [f"model.noise: {here}.Damped", f"model.noise.activation: {here}.gelu_tanh"]
    assert json.loads(ds.attrs["model"])["noise"] == {"type": f"{here}.Damped", "scale": 0.0,
                                                      "activation": {"callable": f"{here}.gelu_tanh"}}
    assert custom_parts(Transformer(SoftmaxAttention(), RandomMLP(4, "tanh"))) == []
    assert custom_parts(RandomMLP(4, torch.relu)) == []  # a named activation passed as the function
    assert custom_parts(Transformer(None, RandomMLP(4, gelu_tanh)), "m") == [f"m.noise.activation: {here}.gelu_tanh"]
    assert custom_parts(Damped(), "x") == [f"x: {here}.Damped", f"x.activation: {here}.gelu_tanh"]
    assert custom_parts(object(), "o") == ["o: builtins.object"]


def test_save_at_refuses_bad_fields():
    SaveAt(every=1, tokens_every=1)
    for kw in ({"every": 0}, {"tokens_every": 0}):
        with pytest.raises(ValueError, match=rf"^{next(iter(kw))}: must be an integer >= 1 \(got 0\)$"):
            SaveAt(**kw)
    with pytest.raises(ValueError, match=r"^stats: unknown names 'foo'; valid: mean_cosine, energy, min_cosine$"):
        SaveAt(stats=("energy", "foo"))


def test_w2_names_the_missing_extra(monkeypatch):
    """Without POT, W₂ refuses with the feature's name and the extra to install."""
    import sys

    monkeypatch.setitem(sys.modules, "ot", None)  # import ot raises ImportError
    X = np.zeros((2, 3))
    for f, feature in ((w2_exact, "exact W₂"), (w2_sliced, "sliced W₂")):
        with pytest.raises(MissingExtraError, match=rf"^{feature} needs POT, which is not installed: "
                           r"install the extra stochformer\[ot\] \(or stochformer\[all\]\): "
                           r"python -m pip install '\.\[ot\]' in the source tree$"):
            f(X, X)


def test_lambda_bar_prime_on_its_grid():
    """λ̄' = −min(min F(u), −λ̄) over u = −1 + 2s (s on 4001 points of [0, 1), by default) and
    1 − 10^(−1…−7) (200 points towards 1); β checked by name."""
    k = NoiseKernel("tanh", 6, 0.2, 0.1)
    lam_bar = first_moment_rate(k.kappa1, k.kappa1_prime, 6)
    for grid in (4001, 11):
        s = torch.linspace(0.0, 1.0, grid, dtype=torch.float64)[:-1]
        u = torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=torch.float64)])
        ref = -min(float(theorem14_F(k, u, 1.5).min()), -lam_bar)
        got = lambda_bar_prime(k, 1.5) if grid == 4001 else lambda_bar_prime(k, 1.5, grid)
        assert abs(got - ref) < TOL
    with pytest.raises(ValueError, match=r"^beta: must be a finite number and > 0 and <= 700 \(got 0\)$"):
        lambda_bar_prime(k, 0)
    lambda_bar_prime(k, 1.0, 3)
    with pytest.raises(ValueError, match=r"^grid: must be an integer >= 3 and <= 10000000 \(got 2\)$"):
        lambda_bar_prime(k, 1.0, 2)
    for f in (rates, lambda_bar_prime):
        with pytest.raises(ValueError, match=r"^kernel: must be a stochformer.NoiseKernel \(got 'relu'\)$"):
            f("relu", 1.0)


# ----------------------------------------------------------------- the noise kernel


def kernel_reference(name: str, rho: float, d: int, sU: float, sW: float, s: float) -> tuple[float, float]:
    """(κ(ρ), κ'(ρ)) from the closed forms of E[φ(V₁)φ(V₂)] and (1/d)E[φ'(V₁)φ'(V₂)], Var Vᵢ = v = 1/d + σ_U²,
    Cov = c = ρ/d + σ_U²: arc-cosine (relu, leaky relu with slope a: φ = relu(x) − a relu(−x)), c
    (linear), (2/π) arcsin(2c/(1 + 2v)) (erf), e^{−v} sinh c and e^{−v} cosh c (sin)."""
    v, c = 1 / d + sU * sU, rho / d + sU * sU
    th = math.acos(max(-1.0, min(1.0, c / v)))
    arc = lambda t: v * (math.sin(t) + (math.pi - t) * math.cos(t)) / (2 * math.pi)  # noqa: E731
    a = 0.01
    base, prime = {
        "relu": (arc(th), (math.pi - th) / (2 * math.pi)),
        "leaky_relu": ((1 + a * a) * arc(th) - 2 * a * arc(math.pi - th), (1 + a * a) * (math.pi - th) / (2 * math.pi) + a * th / math.pi),
        "linear": (c, 1.0),
        "erf": (2 / math.pi * math.asin(2 * c / (1 + 2 * v)), 4 / math.pi / math.sqrt((1 + 2 * v) ** 2 - 4 * c * c)),
        "sin": (math.exp(-v) * math.sinh(c), math.exp(-v) * math.cosh(c)),
    }[name]
    return s * s * (base + sW * sW), s * s * prime / d


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "linear", "erf", "sin"])
def test_kernel_closed_forms_at_small_and_large_bias(name):
    """κ and κ' against their closed forms for σ_U below and above 1 (the two ways of forming c/v),
    ρ from −1 to 1, in one call on a tensor of cosines."""
    rho = [-1.0, -0.3, 0.4, 1.0]
    for d, sU, sW, s in ((3, 0.3, 0.2, 1.3), (4, 3.0, 0.5, 0.7)):
        k = NoiseKernel(name, d, sU, sW, s)
        ref = np.array([kernel_reference(name, r, d, sU, sW, s) for r in rho])
        close(k.kappa(torch.tensor(rho, dtype=torch.float64)), ref[:, 0])
        close(k.kappa_prime(rho), ref[:, 1])
        assert k.kappa1 == float(k.kappa(1.0)) and k.kappa1_prime == float(k.kappa_prime(1.0))


def test_kernel_huge_bias_and_refusals():
    """With σ_U = 1e160 (σ_U² overflows) the erf kernel is 1 + σ_W² at every ρ and κ' is finite;
    arguments and a κ beyond float64 are refused naming the field."""
    k = NoiseKernel("erf", 3, 1e160, 0.5)
    close(k.kappa(torch.tensor([-1.0, 0.0, 1.0])), np.full(3, 1.25))
    assert 0 < float(k.kappa_prime(0.3)) < 1e-150
    cases = {
        "^d: must be an integer >= 2 and <= 9223372036854775807 \\(got 1\\)$": dict(d=1),
        "^sigma_U: must be a finite number and >= 0 \\(got -0.1\\)$": dict(sigma_U=-0.1),
        "^sigma_W: must be a finite number and >= 0 \\(got -0.1\\)$": dict(sigma_W=-0.1),
        "^scale: must be a finite number and >= 0 \\(got -1.0\\)$": dict(scale=-1.0),
        "^quad_points: must be an integer >= 2 and <= 1000 \\(got 1001\\)$": dict(quad_points=1001),
        "^activation: unknown activation 'nope'; valid names are ": dict(activation="nope"),
    }
    for message, kw in cases.items():
        with pytest.raises(ValueError, match=message):
            NoiseKernel(**({"activation": "relu", "d": 3} | kw))
    NoiseKernel("relu", 2, 0.0, 0.0, 0.0, quad_points=2)
    k = NoiseKernel("relu", 3)
    assert float(k.kappa(1 + 1e-7)) == float(k.kappa(1.0))  # rounding of a cosine is allowed
    for bad in (1.01, math.nan, [0.2, -1.5]):
        with pytest.raises(ValueError, match=r"^rho: must be cosines, finite numbers in \[-1, 1\]$"):
            k.kappa(bad)
    with pytest.raises(ValueError, match=r"^rho: must be cosines \(numbers in \[-1, 1\]\), got 'x'$"):
        k.kappa_prime("x")
    with pytest.raises(ValueError, match=r"^NoiseKernel: kappa does not fit in float64 for activation=relu, d=3, "
                       r"sigma_U=1e\+160, sigma_W=0, scale=1; reduce sigma_U, sigma_W or scale$"):
        NoiseKernel("relu", 3, 1e160).kappa(0.5)


# ----------------------------------------------------------------- Brownian paths and draws


def test_brownian_path_from_a_seed_replays_and_refuses():
    """A path of fine normals from a seeded CPU generator (parts drawn in order at every fine
    step); coarse increments q^{−½} Σ of their q fine normals, read in any order (an earlier step
    replays the stream from its start); bad arguments refused with one message each."""
    g = torch.Generator().manual_seed(11)
    fine = [[torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(1, 3, generator=g, dtype=torch.float64)]
            for _ in range(4)]
    path = BrownianPath([(2, 3), (1, 3)], 4, seed=11)
    assert path.shape == [(2, 3), (1, 3)] and path.steps == 4 and path.dtype == torch.float64 and path.device.type == "cpu"
    assert BrownianPath((2, 3), 4, seed=11).shape == (2, 3)
    for k in (3, 1):
        close(path.increment(k, 4)[1], fine[k][1].numpy())
    for k in (1, 0):
        for part in (0, 1):
            close(path.increment(k, 2)[part], ((fine[2 * k][part] + fine[2 * k + 1][part]) / math.sqrt(2)).numpy())
    close(path.increment(0, 1)[0], (sum(f[0] for f in fine) / 2).numpy())
    p32 = BrownianPath((2,), 2, generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    assert p32.increment(1, 2)[0].dtype == torch.float32
    with pytest.raises(ValueError, match=r"^steps: must be an integer >= 1 \(got 0\)$"):
        BrownianPath((2,), 0, seed=1)
    with pytest.raises(ValueError, match="^BrownianPath: give a seed or a generator$"):
        BrownianPath((2,), 3)
    with pytest.raises(ValueError, match=r"^normals: expected shape \(3, 2\), got \(3, 1\)$"):
        BrownianPath((2,), 3, normals=torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"^BrownianPath: step 4 outside 0\.\.3$"):
        path.increment(4, 4)
    with pytest.raises(ValueError, match=r"^BrownianPath: step -1 outside 0\.\.1$"):
        path.increment(-1, 2)
    with pytest.raises(ValueError, match=r"^BrownianPath: 0 steps do not divide the path's 4 fine steps$"):
        path.increment(0, 0)
    given = BrownianPath.from_normals(torch.arange(6.0).view(3, 2))
    assert given.shape == (2,) and given.steps == 3 and given.dtype == torch.float32
    close(given.increment(2, 3)[0], np.array([4.0, 5.0]))


def test_draws_serve_the_path_parts_in_order():
    """Draws.brownian: fresh normals from the generator without a path (shape, dtype); with one,
    the step's parts in order, converted to the dtype asked for, refusing a part of another shape
    (but for leading axes that broadcast: equal, or one of them 1) or one more part than the path has."""
    g = torch.Generator().manual_seed(12)
    ref = replay(g)
    z = Draws(g).brownian((2, 3), torch.float32, "cpu")
    assert z.dtype == torch.float32 and torch.equal(z, torch.randn(2, 3, generator=ref, dtype=torch.float32))
    path = BrownianPath([(2, 4, 3), (2, 1, 3)], 2, generator=torch.Generator().manual_seed(0))
    draws = Draws(g, path, 1, 2)
    assert draws.coupled and not Draws(g).coupled
    a, b = path.increment(1, 2)
    assert torch.equal(draws.brownian((1, 4, 3), torch.float64, "cpu"), a)
    assert torch.equal(draws.brownian((2, 1, 3), torch.float32, "cpu"), b.float())
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(7, 1, 3\) \(part 0\); "):
        Draws(g, path, 0, 2).brownian((7, 1, 3), torch.float64, "cpu")  # leading axes 7 and 2 do not broadcast
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(1, 1, 3\) \(part 2\); "
                       r"the path has parts \[\(2, 4, 3\), \(2, 1, 3\)\]$"):
        draws.brownian((1, 1, 3), torch.float64, "cpu")
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(1, 5, 3\) \(part 0\); "):
        Draws(g, path, 0, 2).brownian((1, 5, 3), torch.float64, "cpu")
    assert as_draws(g).generator is g and as_draws(g).path is None and as_draws(draws) is draws


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


def test_get_activation_names_and_callables():
    f = lambda x: x * 2  # noqa: E731
    assert get_activation(f).__wrapped__ is f and get_activation("relu") is torch.relu and activation_name(f) == "<lambda>"
    with pytest.raises(ValueError, match="^activation: unknown activation 'nope'; valid names are erf, gelu, leaky_relu, "
                       r"linear, relu, sigmoid, silu, sin, tanh \(or an import string 'package.module:function', or any callable from the Python API\)$"):
        get_activation("nope")


def test_gamma_sampler_against_marsaglia_tsang():
    """Gamma(a) for a = 1 (a tenth of the candidates rejected, some with v ≤ 0) and a = 2.5, 2000
    variates in the requested shape, the generator left where the reference leaves it."""
    for a, shape in ((1.0, (2000,)), (2.5, (40, 50))):
        gen = torch.Generator().manual_seed(13)
        ref = replay(gen)
        got = _gamma(a, shape, gen, torch.zeros(1, dtype=torch.float64))
        assert got.shape == shape
        close(got.reshape(-1), gamma_reference(a, 2000, ref))
        assert torch.equal(gen.get_state(), ref.get_state())
