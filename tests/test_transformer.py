"""The discrete model of SPEC §1: unit norm, reproducibility, the attention-only Euler limit, the MLP
covariance at finite width, attention options and the initial tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.integrate import solve_ivp

from stochformer.model.activations import ACTIVATIONS
from stochformer.config.build import initial_tokens, make_attention, make_model
from stochformer.model.attention import SoftmaxAttention
from stochformer.config import InitConfig, build_config
from stochformer.experiments.simulate import run_simulate
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import RandomMLP
from stochformer.core.runtime import make_generator


def small(**fields) -> object:
    base = dict(N=6, d=4, L=6, T=3.0, m=16, batch=3, sigma_U=0.3, sigma_W=0.2, path_stride=1)
    base.update(fields)
    return build_config(base)


# --- unit norm and reproducibility -------------------------------------------------------------------


@pytest.mark.parametrize("noise", ["mlp", "mlp_gaussian"])
@pytest.mark.parametrize("order", ["post_ln", "parallel"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_unit_norm_float64(activation, order, noise):
    """Every token of every recorded layer has norm 1 to 1e-12 (large steps: Δt = 0.5)."""
    res = run_simulate(small(activation=activation, order=order, noise=noise))
    paths = res.data["X"].values  # (batch, L + 1, N, d)
    assert paths.shape == (3, 7, 6, 4)
    assert np.abs(np.linalg.norm(paths, axis=-1) - 1.0).max() < 1e-12
    assert np.all(np.isfinite(res.data["energy"].values))


@pytest.mark.parametrize("noise", ["mlp", "mlp_gaussian"])
def test_same_seed_same_numbers_different_seed_different(noise):
    cfg = small(noise=noise, seed=11)
    a, b, c = run_simulate(cfg), run_simulate(cfg), run_simulate(cfg.with_updates(seed=12))
    np.testing.assert_array_equal(a.data["X"].values, b.data["X"].values)
    for k in ("mean_cosine", "energy", "min_cosine"):
        np.testing.assert_array_equal(a.data[k].values, b.data[k].values)
    assert not np.allclose(a.data["X_final"].values, c.data["X_final"].values)
    # the MLP is random: a different seed changes the path even from the same initial tokens
    d1 = run_simulate(cfg.with_updates(init={"kind": "cluster", "spread": 0.5}))
    d2 = run_simulate(cfg.with_updates(init={"kind": "cluster", "spread": 0.5}, seed=12))
    assert not np.allclose(d1.data["X_final"].values, d2.data["X_final"].values)


# --- with the MLP off: projected Euler for the attention ODE ------------------------------------------


def _attention_ode(Q: np.ndarray, K: np.ndarray, V: np.ndarray, N: int, d: int):
    """dx_i/dt = P_{x_i} Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j, written directly from SPEC §1."""

    def rhs(_t, y):
        X = y.reshape(N, d)
        S = (X @ Q.T) @ (X @ K.T).T  # S_ij = ⟨Q x_i, K x_j⟩
        P = np.exp(S - S.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        A = P @ (X @ V.T)  # rows Σ_j P_ij V x_j
        return (A - np.sum(A * X, axis=1, keepdims=True) * X).ravel()

    return rhs


@pytest.mark.parametrize("order", ["post_ln", "parallel"])
def test_attention_only_is_first_order_euler(order):
    """With mlp = false a layer is LN(x + Δt Attn(x)), a projected Euler step of the ODE: the error
    at time T against a DOP853 solution (tol 1e-13) decays like 1/L. General Q, K, V."""
    N, d, T = 5, 3, 1.5
    rng = np.random.default_rng(3)
    Q, K, V = (np.eye(d) + 0.6 * rng.standard_normal((d, d)) for _ in range(3))
    X0 = rng.standard_normal((N, d))
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    ref = solve_ivp(_attention_ode(Q, K, V, N, d), (0, T), X0.ravel(), method="DOP853", rtol=1e-13, atol=1e-13)
    XT = ref.y[:, -1].reshape(N, d)
    Ls = np.array([16, 32, 64, 128, 256, 512])
    errs = []
    for L in Ls:
        cfg = build_config(dict(N=N, d=d, L=int(L), T=T, mlp=False, order=order, batch=1,
                                Q=Q.tolist(), K=K.tolist(), V=V.tolist()))
        model, X = make_model(cfg), torch.from_numpy(X0)[None].clone()
        for _ in range(L):
            X = model.step(X, cfg.dt, make_generator(0))
        errs.append(np.abs(X[0].numpy() - XT).max())
    fit = stats.linregress(np.log(Ls), np.log(errs))
    half = stats.t.ppf(0.975, len(Ls) - 2) * fit.stderr  # 95% interval of the slope
    assert -1.1 < fit.slope - half and fit.slope + half < -0.9, (fit.slope, half, errs)
    assert errs[-1] < 1e-2  # and the limit is the ODE's solution, not merely a 1/L-rate to elsewhere


def test_explicit_qkv_match_scalar_options():
    """Q = √β I, K = √β I, V = γ I give the same attention as beta, gamma; Q alone gives A = Qᵀ."""
    gen = make_generator(1)
    X = initial_tokens(InitConfig(), 2, 7, 4, gen)
    eye = torch.eye(4, dtype=torch.float64)
    scalar = SoftmaxAttention(beta=2.0, gamma=-0.5)
    explicit = make_attention(build_config(dict(d=4, Q=(2**0.5 * eye).tolist(), K=(2**0.5 * eye).tolist(),
                                                       V=(-0.5 * eye).tolist())))
    torch.testing.assert_close(explicit(X), scalar(X), rtol=1e-13, atol=1e-14)
    # a direct softmax with scores ⟨Q x_i, K x_j⟩ and values V x_j for non-symmetric matrices
    g = torch.Generator().manual_seed(5)
    Q, K, V = (torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(3))
    att = make_attention(build_config(dict(d=4, Q=Q.tolist(), K=K.tolist(), V=V.tolist())))
    S = torch.einsum("bia,bja->bij", X @ Q.T, X @ K.T)
    torch.testing.assert_close(att(X), torch.softmax(S, -1) @ (X @ V.T), rtol=1e-12, atol=1e-13)
    # chunked queries give the same numbers
    chunked = SoftmaxAttention(A=att.A, V=att.V, chunk=3)
    torch.testing.assert_close(chunked(X), att(X), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("word,value", [("attractive", 1.0), ("none", 0.0), ("repulsive", -1.0)])
def test_gamma_words(word, value):
    cfg_word = small(gamma=word, mlp=False, L=4)
    assert cfg_word.gamma_value == value
    a, b = run_simulate(cfg_word), run_simulate(small(gamma=value, mlp=False, L=4))
    np.testing.assert_array_equal(a.data["X"].values, b.data["X"].values)
    moved = np.abs(a.data["X_final"].values - a.data["X"].values[:, 0]).max()
    assert (moved < 1e-15) if value == 0 else (moved > 1e-3)
    if value != 0:  # attractive raises the mean cosine, repulsive lowers it
        mc = a.data["mean_cosine"].values
        assert np.all(np.sign(mc[:, -1] - mc[:, 0]) == np.sign(value))


def test_switches_no_attention_no_mlp():
    base = small(L=3)
    static = run_simulate(base.with_updates(mlp=False, attention=False)).data
    np.testing.assert_array_equal(static["X_final"].values, static["X"].values[:, 0])
    mlp_only = make_model(base.with_updates(attention=False))
    att_only = make_model(base.with_updates(mlp=False))
    assert mlp_only.attention is None and mlp_only.noise is not None
    assert att_only.noise is None and att_only.attention is not None


# --- the MLP at finite width has covariance κ ---------------------------------------------------------


@pytest.mark.parametrize("mode,d,m", [("weights", 3, 8), ("gaussian", 3, 8), ("gaussian", 5, 2)])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_mlp_covariance_matches_kappa(mode, d, m, activation):
    """E[G(x_i)_a G(x_j)_b] = s² Δt κ(⟨x_i, x_j⟩) δ_ab for the increment √Δt s G^m at small width m,
    biases on (σ_U = 0.5, σ_W = 0.3), N = 3 tokens (m > N and m < N, d ≤ N and d > N reach the
    gaussian sampler's different draws). Monte Carlo over B independent weight draws; every one of
    the (N d)² entries is within 5 standard errors (SE from the sample variance of the products)."""
    N, B, s, dt = 3, 40000, 1.3, 0.25
    sigma_U, sigma_W = 0.5, 0.3
    x = torch.zeros(N, d, dtype=torch.float64)
    x[:, :3] = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [-0.3, 0.1, 0.9]], dtype=torch.float64)
    x[2, -1] += 0.5
    x = x / x.norm(dim=-1, keepdim=True)
    noise = RandomMLP(m, activation, sigma_U, sigma_W, scale=s, mode=mode)
    G = noise.increment(x.expand(B, N, d).clone(), dt, make_generator(2024)).reshape(B, N * d)
    prod = G[:, :, None] * G[:, None, :]  # (B, Nd, Nd)
    mean, se = prod.mean(0), prod.std(0) / math.sqrt(B)
    kappa = NoiseKernel(activation, d, sigma_U, sigma_W, scale=s).kappa((x @ x.T).clamp(-1, 1))
    expected = dt * torch.kron(kappa, torch.eye(d, dtype=torch.float64))
    z = (mean - expected) / se
    assert float(z.abs().max()) < 5.0, float(z.abs().max())
    # the test has power: dropping σ_W² from κ would be detected on the diagonal blocks
    wrong = dt * torch.kron(kappa - s**2 * sigma_W**2, torch.eye(d, dtype=torch.float64))
    assert float(((mean - wrong) / se).abs().max()) > 10.0


@pytest.mark.parametrize("mode", ["weights", "gaussian"])
def test_mlp_conditional_covariance_given_inner_weights(mode):
    """Given the hidden features Φ (fixed U, b_U), the output rows are Gaussian with token
    covariance ΦΦᵀ/m + σ_W² (SPEC §2): the exact conditional law the gaussian sampler draws from.
    Φ is frozen by replacing the methods that compute it; Monte Carlo over B outer draws, 5 SE."""
    N, d, m, B, sigma_W = 4, 3, 16, 40000, 0.2
    noise = RandomMLP(m, "tanh", 0.4, sigma_W, mode=mode)
    X = initial_tokens(InitConfig(), 1, N, d, make_generator(7))
    Phi = noise.hidden(X, make_generator(99))  # (1, N, m)
    noise.hidden = lambda X_, *args: Phi.expand(X_.shape[0], N, m)
    if hasattr(noise, "_hidden_from"):  # the gaussian sampler computes Φ from its own normals
        noise._hidden_from = noise.hidden
    G = noise.increment(X.expand(B, N, d).clone(), 1.0, make_generator(5))  # (B, N, d)
    expected = Phi[0] @ Phi[0].T / m + sigma_W**2  # (N, N), the same for every output coordinate a
    prod = torch.einsum("bia,bja->bija", G, G)
    mean, se = prod.mean(0), prod.std(0) / math.sqrt(B)
    z = (mean - expected[:, :, None]) / se
    assert float(z.abs().max()) < 5.0
    cross = (G[:, :, 0, None] * G[:, :, None, 1])  # different output coordinates are independent
    assert float((cross.mean(0) / (cross.std(0) / math.sqrt(B))).abs().max()) < 5.0


# --- initial tokens -------------------------------------------------------------------------------------


def _unit(X: torch.Tensor) -> bool:
    return bool((torch.linalg.vector_norm(X, dim=-1) - 1).abs().max() < 1e-13)


def test_init_uniform_and_cluster():
    gen = make_generator(0)
    U = initial_tokens(InitConfig(kind="uniform"), 5, 7, 4, gen)
    assert U.shape == (5, 7, 4) and U.dtype == torch.float64 and _unit(U)
    C = initial_tokens(InitConfig(kind="cluster", center=[0.0, 0.0, 2.0, 0.0], spread=0.05), 5, 7, 4, gen)
    assert C.shape == (5, 7, 4) and _unit(C)
    assert float(C[..., 2].min()) > 0.95  # all within the spread of the normalised centre e₃
    U32 = initial_tokens(InitConfig(), 2, 3, 5, gen, dtype=torch.float32)
    assert U32.dtype == torch.float32


@pytest.mark.parametrize("cosine", [-1.0, -0.3, 0.0, 0.5, 0.999])
def test_init_pair_has_requested_cosine(cosine):
    P = initial_tokens(InitConfig(kind="pair", cosine=cosine), 6, 2, 5, make_generator(3))
    assert P.shape == (6, 2, 5) and _unit(P)
    torch.testing.assert_close((P[:, 0] * P[:, 1]).sum(-1), torch.full((6,), cosine, dtype=torch.float64),
                               rtol=0, atol=1e-13)
    assert not torch.allclose(P[0], P[1])  # randomly rotated per sample


def test_init_npy_both_shapes(tmp_path):
    rng = np.random.default_rng(0)
    shared = 3.0 * rng.standard_normal((4, 3))
    np.save(tmp_path / "shared.npy", shared)
    X = initial_tokens(InitConfig(kind="npy", path=tmp_path / "shared.npy"), 2, 4, 3, make_generator(0))
    assert X.shape == (2, 4, 3) and _unit(X)
    expected = shared / np.linalg.norm(shared, axis=1, keepdims=True)
    np.testing.assert_allclose(X[1].numpy(), expected, rtol=1e-14)
    per_sample = rng.standard_normal((2, 4, 3))
    np.save(tmp_path / "batch.npy", per_sample)
    cfg = build_config(dict(N=4, d=3, batch=2, init=dict(kind="npy", path=str(tmp_path / "batch.npy"))))
    Y = initial_tokens(cfg.init, 2, 4, 3, make_generator(0))
    np.testing.assert_allclose(Y.numpy(), per_sample / np.linalg.norm(per_sample, axis=-1, keepdims=True), rtol=1e-14)


def test_simulate_accepts_any_callable_activation(tmp_path):
    """A callable φ from the Python API is used by the transformer and by the SDE (its κ(1) by
    quadrature): φ = tanh as a lambda gives the same numbers as the name 'tanh' (same seed, same
    sampler, same quadrature), another φ does not, and the callable's name is recorded."""
    from stochformer.config import RunConfig
    from stochformer.experiments.simulate import run_simulate
    from stochformer.io.store import read_json

    phi = lambda x: torch.tanh(x)  # noqa: E731
    for dynamics in ("transformer", "sde"):
        cfg = RunConfig(N=5, d=4, L=10, T=1.0, m=16, batch=3, dynamics=dynamics, seed=3, activation="tanh")
        by_name = run_simulate(cfg).data["X_final"].values
        res = run_simulate(cfg, activation=phi)
        assert np.allclose(res.data["X_final"].values, by_name, atol=1e-10)
        assert not np.allclose(run_simulate(cfg, activation=torch.sin).data["X_final"].values, by_name, atol=1e-3)
    res.save(tmp_path)
    assert read_json(tmp_path / "config.json")["activation_callable"] == "<lambda>"


def test_blocked_statistics_equal_dense_and_simulate_many_tokens():
    """pair_statistics in row blocks equals the one-block computation to 1e-12 (float64), and
    simulate with N² above the block size (chunked attention, blocked statistics) equals the same
    run with dense pieces."""
    from stochformer.model.attention import DEFAULT_BLOCK
    from stochformer.config import RunConfig
    from stochformer.measure.diagnostics import pair_statistics
    from stochformer.integrate import SaveAt, solve
    from stochformer.core.sphere import uniform

    X = uniform(3, 37, 4, generator=make_generator(0))
    dense = pair_statistics(X, 2.0)
    for block in (37, 100, 37 * 37 - 1):
        blocked = pair_statistics(X, 2.0, block=block)
        for k in dense:
            assert torch.allclose(blocked[k], dense[k], atol=1e-12, rtol=0), k

    N = int(DEFAULT_BLOCK**0.5) + 8  # N² > DEFAULT_BLOCK: simulate takes the memory-linear path
    cfg = RunConfig(N=N, d=3, L=2, T=0.5, m=8, batch=1, seed=1, record_every=1)
    res = run_simulate(cfg)
    g = make_generator(1)
    X0 = initial_tokens(cfg.init, 1, N, 3, g)
    dense = solve(make_model(cfg), X0, cfg.T, cfg.L, SaveAt(), generator=g)
    assert np.allclose(res.data["X_final"].values, dense["X_final"].values, atol=1e-12)
    for k in ("mean_cosine", "energy", "min_cosine"):
        assert np.allclose(res.data[k].values, dense[k].values, atol=1e-12)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "both"])
def test_check_finite_catches_every_non_finite_entry_and_only_those(bad):
    """One NaN or infinity anywhere (also +inf and −inf together, whose sum is NaN) stops a run
    naming the layer; finite entries whose sum overflows do not."""
    from stochformer.core.validation import NonFiniteError, check_finite

    X = torch.zeros(2, 3, 4, dtype=torch.float64)
    if bad == "both":
        X[0, 0, 0], X[1, 2, 3] = math.inf, -math.inf
    else:
        X[1, 2, 3] = bad
    with pytest.raises(NonFiniteError, match="at layer 7"):
        check_finite(X, 7)
    huge = torch.full((2, 3, 4), torch.finfo(torch.float64).max, dtype=torch.float64)
    assert math.isinf(float(huge.sum())) and check_finite(huge, 7) is huge


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_run_refuses_a_noise_part_whose_tensors_are_of_another_dtype(dtype):
    """A noise source of one's own (a dataclass) holding a float64 tensor runs with float64 tokens
    and is refused, naming the part, its field and both dtypes, at the start of a float32 run."""
    import dataclasses

    import stochformer as sf

    @dataclasses.dataclass
    class Scaled:
        scale: torch.Tensor

        def reset(self, batch, d, generator, dtype, device):
            pass

        def increment(self, X, dt, draws):
            return self.scale * math.sqrt(dt) * torch.ones_like(X)

    model = sf.Transformer(None, Scaled(torch.tensor(0.1, dtype=torch.float64)))
    X0 = sf.sphere.uniform(batch=2, N=3, d=3, seed=0).to(dtype)
    if dtype == torch.float64:
        assert sf.solve(model, X0, 1.0, 2, seed=0)["mean_cosine"].shape == (2, 3)  # (batch, time)
    else:
        with pytest.raises(ValueError, match=r"^noise: Scaled\.scale is float64 on cpu, the tokens float32 on cpu"):
            sf.solve(model, X0, 1.0, 2, seed=0)
