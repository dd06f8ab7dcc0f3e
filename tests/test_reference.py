"""Pathwise reference tests: every model piece against a direct, slow implementation of SPEC §1–§4
written here (numpy, one token at a time), fed the same draws, agreeing to 1e-12 in float64.

The statistical tests check laws within a few standard errors; they cannot see a model that is
wrong by a term that vanishes in a limit (e.g. a post-LN layer whose MLP acts on the
pre-attention token). These tests pin the discrete model, the noise sources, the attention paths,
one step of each SDE integrator and the mean-field particle step exactly. Where the code draws a
law in a cheaper way than the formula (the conditionally Gaussian MLP), the reference is given the
same normals and follows the documented construction.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.config.build import initial_tokens, make_attention, make_field, make_particles
from stochformer.model.activations import ACTIVATIONS, activation_name, get_activation
from stochformer.config import InitConfig, RunConfig
from stochformer.measure.diagnostics import (
    energy,
    mean_cosine,
    mean_token,
    min_cosine,
    pair_statistics,
)
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.kernel import NoiseKernel, rates
from stochformer.model.noise import (
    ExactField,
    RandomFeatureField,
    RandomMLP,
    gram_output_cheaper,
    sqrt_psd,
)
from stochformer.model.sde import EulerMaruyama, LimitSDE, StratonovichHeun
from stochformer.model.transformer import Transformer
from stochformer.integrate import SaveAt, solve
from stochformer.core.sphere import gram, normalize, random_rotations, tangent, uniform
from stochformer.measure.stats import mean_and_se

from conftest import close

# ----------------------------------------------------------------- the reference (SPEC §1–§4)

PHI = {
    "relu": lambda x: max(x, 0.0),
    "tanh": math.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    "silu": lambda x: x / (1.0 + math.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
}


def ln(v: np.ndarray) -> np.ndarray:
    """LN(v) = v/|v|."""
    return v / math.sqrt(float(np.dot(v, v)))


def proj(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """P_x v = v − ⟨x, v⟩ x."""
    return v - float(np.dot(x, v)) * x


def attn(Xq: np.ndarray, Xk: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Attn(x_i) = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j for each query x_i in Xq over the cloud Xk."""
    out = np.zeros((len(Xq), V.shape[0]))
    for i, x in enumerate(Xq):
        s = np.array([float(np.dot(Q @ x, K @ y)) for y in Xk])
        w = np.exp(s - s.max())
        w /= w.sum()
        for j, y in enumerate(Xk):
            out[i] += w[j] * (V @ y)
    return out


def mlp(y: np.ndarray, U: np.ndarray, bU: np.ndarray, W: np.ndarray, bW: np.ndarray, phi) -> np.ndarray:
    """G^m(y) = (1/√m) W φ(U y/√d + b_U) + b_W, U (m, d), W (d, m)."""
    m, d = U.shape
    h = np.array([phi(float(np.dot(U[k], y)) / math.sqrt(d) + bU[k]) for k in range(m)])
    return W @ h / math.sqrt(m) + bW


def features(X: np.ndarray, U: np.ndarray, bU: np.ndarray, phi) -> np.ndarray:
    """Φ_ik = φ(u_k·x_i/√d + b_k): (N, m)."""
    d = X.shape[1]
    return np.array([[phi(float(np.dot(u, x)) / math.sqrt(d) + b) for u, b in zip(U, bU)] for x in X])


def kappa(rho: float, activation: str, d: int, sigma_U: float, sigma_W: float, scale: float = 1.0) -> float:
    """κ(ρ) = s² (E[φ(V₁)φ(V₂)] + σ_W²), Var Vᵢ = 1/d + σ_U², Cov = ρ/d + σ_U² (SPEC §2): the
    arc-cosine closed form for relu, 2-D Gauss–Hermite (120² nodes) otherwise."""
    v, c = 1.0 / d + sigma_U**2, rho / d + sigma_U**2
    if activation == "relu":
        theta = math.acos(max(-1.0, min(1.0, c / v)))
        base = v * (math.sin(theta) + (math.pi - theta) * math.cos(theta)) / (2 * math.pi)
    else:
        z, w = np.polynomial.hermite_e.hermegauss(120)
        w = w / math.sqrt(2 * math.pi)
        r = max(-1.0, min(1.0, c / v))
        phi = np.vectorize(PHI[activation])
        V1 = math.sqrt(v) * z[:, None]
        V2 = math.sqrt(v) * (r * z[:, None] + math.sqrt(1 - r * r) * z[None, :])
        base = float(np.sum(w[:, None] * w[None, :] * phi(V1) * phi(V2)))
    return scale**2 * (base + sigma_W**2)


def sym_root(K: np.ndarray) -> np.ndarray:
    """The symmetric square root of a symmetric positive definite matrix."""
    e, Vec = np.linalg.eigh(K)
    return Vec @ np.diag(np.sqrt(np.clip(e, 0.0, None))) @ Vec.T


def randn(g: torch.Generator, *shape: int) -> np.ndarray:
    return torch.randn(*shape, generator=g, dtype=torch.float64).numpy()


def qkv(d: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """General Q, K, V ∈ R^{d×d} (entries N(0, 1/d) around the identity)."""
    r = np.random.default_rng(seed)
    return tuple(np.eye(d) + r.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))


def coupled(gen: torch.Generator, xi) -> Draws:
    """The step randomness with the given normals Ξ (batch, N, d) as the Brownian path's."""
    return Draws(gen, BrownianPath.from_normals(torch.as_tensor(xi)[None]))


def attention_of(Q: np.ndarray, K: np.ndarray, V: np.ndarray, **kw) -> SoftmaxAttention:
    return SoftmaxAttention(A=torch.from_numpy(Q.T @ K), V=torch.from_numpy(V), **kw)


# ----------------------------------------------------------------- activations


def test_activations():
    """Each named φ elementwise against its formula; names of callables; unknown names refused."""
    x = np.linspace(-3.0, 3.0, 13)
    formulas = {
        **{k: np.vectorize(f) for k, f in PHI.items()},
        "leaky_relu": lambda v: np.where(v > 0, v, 0.01 * v),
        "erf": np.vectorize(math.erf),
        "sin": np.sin,
        "linear": lambda v: v,
    }
    assert set(formulas) == set(ACTIVATIONS)
    for name, f in formulas.items():
        close(get_activation(name)(torch.from_numpy(x)), f(x))
        assert activation_name(name) == name
    assert get_activation(math.cos).__wrapped__ is math.cos and activation_name(math.cos) == "cos"

    class Odd:
        def __call__(self, v):
            return v

        def __repr__(self):
            return "Odd()"

    assert activation_name(Odd()) == "Odd()"
    valid = ", ".join(sorted(ACTIVATIONS))
    with pytest.raises(ValueError) as exc:
        get_activation("swish")
    assert str(exc.value) == f"activation: unknown activation 'swish'; valid names are {valid} (or an import string 'package.module:function', or any callable from the Python API)"


# ----------------------------------------------------------------- attention


@pytest.mark.parametrize("path", ["dense", "chunked", "chunked_rowmax", "sdpa"])
@pytest.mark.parametrize("matrices", ["explicit", "scalar"])
@pytest.mark.parametrize("other_keys", [False, True])
def test_attention_paths(path, matrices, other_keys, tokens):
    """Each attention path (dense, query chunks with the Cauchy–Schwarz shift, chunks with the row
    maximum at large scores, fused SDPA) equals Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j."""
    B, n, N, d = 2, 7, 5, 3
    X = tokens(B, n, d, seed=1)
    keys = tokens(B, N, d, seed=2) if other_keys else None
    big = path == "chunked_rowmax"  # scores of several hundred: 2·max|score| leaves the exponent range
    if matrices == "explicit":
        Q, K, V = qkv(d)
        K = 1000.0 * K / np.linalg.norm(Q.T @ K, 2) if big else K
        at = {"A": torch.from_numpy(Q.T @ K), "V": torch.from_numpy(V)}
    else:
        beta, gamma = (400.0 if big else 1.7), -0.6
        Q, K, V = beta * np.eye(d), np.eye(d), gamma * np.eye(d)
        at = {"beta": beta, "gamma": gamma}
    kw = {"dense": {}, "chunked": {"chunk": 3}, "chunked_rowmax": {"chunk": 2}, "sdpa": {"sdpa": True}}[path]
    got = SoftmaxAttention(**at, **kw)(X, keys=keys)
    Xk = X if keys is None else keys
    ref = np.stack([attn(X[b].numpy(), Xk[b].numpy(), Q, K, V) for b in range(B)])
    close(got, ref)


def test_attention_from_config_uses_q_transpose_k(tokens):
    """Q, K, V given in the config: ⟨Q x, K y⟩ = xᵀ QᵀK y (not Q Kᵀ), values V x."""
    d = 3
    Q, K, V = qkv(d, seed=3)
    cfg = RunConfig(d=d, Q=Q.tolist(), K=K.tolist(), V=V.tolist())
    X = tokens(2, 5, d, seed=4)
    ref = np.stack([attn(x, x, Q, K, V) for x in X.numpy()])
    close(make_attention(cfg)(X), ref)


# ----------------------------------------------------------------- the MLP noise


def weights_mode_draws(g: torch.Generator, B: int, m: int, d: int, sigma_U: float, sigma_W: float):
    """The explicit-weights mode's draws, in its documented order: U (B, m, d); b_U/σ_U (B, 1, m)
    if σ_U > 0; Wᵀ (B, m, d); b_W/σ_W (B, 1, d) if σ_W > 0."""
    U = randn(g, B, m, d)
    bU = sigma_U * randn(g, B, 1, m)[:, 0] if sigma_U > 0 else np.zeros((B, m))
    W = randn(g, B, m, d).transpose(0, 2, 1)
    bW = sigma_W * randn(g, B, 1, d)[:, 0] if sigma_W > 0 else np.zeros((B, d))
    return U, bU, W, bW


MLP_CASES = [("relu", 0.3, 0.2, 1.0), ("tanh", 0.0, 0.0, 1.0), ("silu", 0.5, 0.0, 0.7), ("sigmoid", 0.0, 0.4, 1.3)]


@pytest.mark.parametrize("activation,sigma_U,sigma_W,scale", MLP_CASES)
def test_mlp_weights_mode(activation, sigma_U, sigma_W, scale, tokens, gen, replay):
    """mode="weights": √dt · s · G^m(x_i) with U, W, b_U, b_W drawn explicitly (SPEC §1)."""
    B, N, d, m, dt = 2, 4, 3, 6, 0.3
    X = tokens(B, N, d)
    noise = RandomMLP(width=m, activation=activation, sigma_U=sigma_U, sigma_W=sigma_W, scale=scale, mode="weights")
    U, bU, W, bW = weights_mode_draws(replay(gen), B, m, d, sigma_U, sigma_W)
    got = noise.increment(X, dt, gen)
    phi = PHI[activation]
    ref = np.stack([[scale * math.sqrt(dt) * mlp(x, U[b], bU[b], W[b], bW[b], phi) for x in X[b].numpy()] for b in range(B)])
    close(got, ref)


def u_from_cholesky(X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """For N < d: the inner weights U (m, d) with X Uᵀ/√d = C Zᵀ, C Cᵀ = XXᵀ/d, Z (m, N), namely
    U = √d Z Cᵀ (X⁺)ᵀ with X⁺ = Xᵀ(XXᵀ)⁻¹ — the MLP that the d > N route realises."""
    d = X.shape[1]
    C = np.linalg.cholesky(X @ X.T / d)
    return math.sqrt(d) * Z @ C.T @ np.linalg.inv(X @ X.T) @ X


def gaussian_mode_reference(X: np.ndarray, z: np.ndarray, m: int, sigma_U: float, sigma_W: float, phi, gram: bool):
    """G^m at the tokens from the conditionally Gaussian construction (SPEC §2), given its flat
    normals z = [per sample: hidden (r, m), b_U/σ_U (m) | output (B, N or m, d) | b_W/σ_W (B, d)]:

    - pre-activations H = X Uᵀ/√d with Uᵀ = the hidden block (d ≤ N), or H = C Zᵀ with C Cᵀ = XXᵀ/d
      and Zᵀ the hidden block (d > N): columns N(0, XXᵀ/d) either way;
    - Φ = φ(H + b_U); given Φ the output is Gaussian with token covariance ΦΦᵀ/m: Φ W/√m with
      Wᵀ = the output block (m, d), or (``gram``) S Z''/√m with S the Cholesky factor of ΦΦᵀ."""
    B, N, d = X.shape
    r = min(N, d)
    rows = r + (sigma_U > 0)
    block, z = z[: B * rows * m].reshape(B, rows, m), z[B * rows * m :]
    hid = block[:, :r].transpose(0, 2, 1)  # (B, m, r)
    bU = sigma_U * block[:, r] if sigma_U > 0 else np.zeros((B, m))
    rows = N if gram else m
    out, z = z[: B * rows * d].reshape(B, rows, d), z[B * rows * d :]
    bW = sigma_W * z[:B * d].reshape(B, d) if sigma_W > 0 else np.zeros((B, d))
    G = np.zeros((B, N, d))
    for b in range(B):
        U = hid[b] if d <= N else u_from_cholesky(X[b], hid[b])
        if gram:
            Phi = features(X[b], U, bU[b], phi)
            S = np.linalg.cholesky(Phi @ Phi.T)
            G[b] = S @ out[b] / math.sqrt(m) + bW[b]
        else:
            G[b] = np.stack([mlp(x, U, bU[b], out[b].T, bW[b], phi) for x in X[b]])
    return G


# (N, d, m, the output is drawn through the Gram root): d ≤ N and d > N, each output route
GAUSSIAN_SHAPES = [(6, 3, 4, False), (3, 2, 40, True), (3, 6, 3, False), (3, 6, 30, True)]


@pytest.mark.parametrize("N,d,m,gram", GAUSSIAN_SHAPES)
@pytest.mark.parametrize("activation,sigma_U,sigma_W,scale", MLP_CASES)
def test_mlp_gaussian_mode(N, d, m, gram, activation, sigma_U, sigma_W, scale, tokens, gen, replay):
    """mode="gaussian", given the same normals: the documented construction, G^m(x) = the MLP with
    those U, b_U (or the Cholesky route to the same pre-activations when d > N) and the output
    drawn given Φ."""
    assert gram_output_cheaper(N, d, m, torch.device("cpu")) == gram  # the route this case covers
    B, dt = 2, 0.3
    X = tokens(B, N, d, seed=5)
    noise = RandomMLP(width=m, activation=activation, sigma_U=sigma_U, sigma_W=sigma_W, scale=scale, mode="gaussian")
    r = min(N, d)
    n = B * m * (r + (sigma_U > 0)) + B * (N if gram else m) * d + B * d * (sigma_W > 0)
    z = randn(replay(gen), n)
    got = noise.increment(X, dt, gen)
    ref = scale * math.sqrt(dt) * gaussian_mode_reference(X.numpy(), z, m, sigma_U, sigma_W, PHI[activation], gram)
    close(got, ref)


@pytest.mark.parametrize("N,d,m,gram", GAUSSIAN_SHAPES)
@pytest.mark.parametrize("sigma_U,sigma_W", [(0.0, 0.0), (0.3, 0.2)])
def test_mlp_gaussian_mode_cost(N, d, m, gram, sigma_U, sigma_W, tokens, gen, replay):
    """``cost``: the normals one call draws (the generator ends where that many draws leave it) and
    the flops of its products (2nkp for a general one, n(n+1)k for a symmetric or triangular one)
    and Cholesky factorisations (n³/3 each)."""
    noise = RandomMLP(width=m, sigma_U=sigma_U, sigma_W=sigma_W, mode="gaussian")
    cost = noise.cost(N, d)
    g = replay(gen)
    torch.randn(int(cost["normals"]), generator=g, dtype=torch.float64)
    noise.increment(tokens(1, N, d, seed=8), 0.1, gen)
    assert torch.equal(gen.get_state(), g.get_state())
    if d > N:
        flops = N * (N + 1) * d + N**3 / 3 + N * (N + 1) * m  # Y Yᵀ, its Cholesky factor C, C Zᵀ
    else:
        flops = 2 * N * d * m  # Y Uᵀ
    if gram:
        flops += N * (N + 1) * m + N**3 / 3 + N * (N + 1) * d  # ΦΦᵀ, its factor S, S Z''
    else:
        flops += 2 * m * N * d  # Φ Z'
    assert cost["flops"] == pytest.approx(flops, rel=1e-15)


@pytest.mark.parametrize("mode", ["weights", "gaussian"])
@pytest.mark.parametrize("N,d", [(5, 3), (3, 5)])
def test_mlp_coupling_given_normals(mode, N, d, tokens, gen, replay):
    """The coupling of SPEC §3: given the inner weights, √dt s K_m^{1/2} Ξ with
    K_m = ΦΦᵀ/m + σ_W² and the symmetric root; Φ from the same U, b_U as the reference."""
    B, m, dt, sigma_U, sigma_W, scale = 2, 9, 0.2, 0.4, 0.3, 1.2
    X = tokens(B, N, d, seed=6)
    xi = torch.from_numpy(np.random.default_rng(9).standard_normal((B, N, d)))
    noise = RandomMLP(width=m, activation="tanh", sigma_U=sigma_U, sigma_W=sigma_W, scale=scale, mode=mode)
    g = replay(gen)
    if mode == "weights":
        U, bU, _, _ = weights_mode_draws(g, B, m, d, sigma_U, 0.0)
    else:
        r = min(N, d)
        block = randn(g, B * m * (r + 1)).reshape(B, r + 1, m)  # per sample Uᵀ (or Zᵀ) and b_U
        hid, bU = block[:, :r].transpose(0, 2, 1), sigma_U * block[:, r]
        Xn = X.numpy()
        U = np.stack([hid[b] if d <= N else u_from_cholesky(Xn[b], hid[b]) for b in range(B)])
    got = noise.increment(X, dt, coupled(gen, xi))
    ref = np.zeros((B, N, d))
    for b in range(B):
        Phi = features(X[b].numpy(), U[b], bU[b], math.tanh)
        ref[b] = scale * math.sqrt(dt) * sym_root(Phi @ Phi.T / m + sigma_W**2) @ xi[b].numpy()
    close(got, ref)


# ----------------------------------------------------------------- one transformer layer


class FrozenMLP:
    """A noise source with given weights U (B, m, d), b_U (B, m), W (B, d, m), b_W (B, d):
    ΔW(x) = √dt · s · G^m(x), computed by the reference ``mlp`` at whatever tokens it is handed."""

    def __init__(self, U, bU, W, bW, scale: float, activation: str = "tanh"):
        self.U, self.bU, self.W, self.bW, self.scale, self.phi = U, bU, W, bW, scale, PHI[activation]

    @classmethod
    def random(cls, B: int, m: int, d: int, scale: float, seed: int = 11) -> FrozenMLP:
        r = np.random.default_rng(seed)
        U, W = r.standard_normal((B, m, d)), r.standard_normal((B, d, m))
        return cls(U, 0.3 * r.standard_normal((B, m)), W, 0.2 * r.standard_normal((B, d)), scale)

    def G(self, b: int, x: np.ndarray) -> np.ndarray:
        return mlp(x, self.U[b], self.bU[b], self.W[b], self.bW[b], self.phi)

    def reset(self, batch, d, generator, dtype, device) -> None:
        pass

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        c = self.scale * math.sqrt(dt)
        return torch.from_numpy(np.stack([[c * self.G(b, x) for x in Xb] for b, Xb in enumerate(X.numpy())]))


def layer_reference(X: np.ndarray, dt: float, order: str, QKV, frozen) -> np.ndarray:
    """One layer (SPEC §1), token by token.

    post_ln: Y = LN(x + Δt Attn_X(x)), X' = LN(Y + √Δt s G^m(Y)) — the MLP at the post-attention token;
    parallel: X' = LN(x + Δt Attn_X(x) + √Δt s G^m(x)). An absent block contributes nothing (and
    an absent attention block no normalisation)."""
    out = np.zeros_like(X)
    for b, Xb in enumerate(X):
        A = attn(Xb, Xb, *QKV) if QKV is not None else None
        for i, x in enumerate(Xb):
            a = dt * A[i] if A is not None else 0.0
            if order == "post_ln":
                y = ln(x + a) if A is not None else x
                out[b, i] = ln(y + frozen.scale * math.sqrt(dt) * frozen.G(b, y)) if frozen is not None else y
            else:
                g = frozen.scale * math.sqrt(dt) * frozen.G(b, x) if frozen is not None else 0.0
                out[b, i] = ln(x + a + g)
    return out


@pytest.mark.parametrize("order", ["post_ln", "parallel"])
@pytest.mark.parametrize("with_attention", [True, False])
@pytest.mark.parametrize("with_mlp", [True, False])
def test_transformer_layer(order, with_attention, with_mlp, tokens, gen):
    """TransformerLayer.step equals the layer of SPEC §1 in both orders, with and without each block
    (large Δt = 0.4 so that every term is visible; the MLP as a frozen noise source)."""
    B, N, d, m, dt = 2, 5, 3, 7, 0.4
    X = tokens(B, N, d, seed=12)
    QKV = qkv(d) if with_attention else None
    frozen = FrozenMLP.random(B, m, d, scale=1.3) if with_mlp else None
    layer = Transformer(attention_of(*QKV) if with_attention else None, frozen, order)
    close(layer.step(X, dt, gen), layer_reference(X.numpy(), dt, order, QKV, frozen))


class MLPBeforeAttention(Transformer):
    """A wrong post-LN layer that passes the statistical tests: the MLP acts on the pre-attention
    token, X' = LN(Y + √Δt s G^m(X)) (the difference vanishes only as Δt → 0)."""

    def step(self, X, dt, draws):
        Y = normalize(X + dt * self.attention(X))
        return normalize(Y + self.noise.increment(X, dt, draws))


def test_reference_tells_the_mlp_before_attention_mutant_apart(tokens, gen):
    """The layer reference rejects the wrong model above by far more than the tolerance."""
    B, N, d, m, dt = 2, 5, 3, 7, 0.4
    X = tokens(B, N, d, seed=12)
    QKV, frozen = qkv(d), FrozenMLP.random(B, m, d, scale=1.3)
    wrong = MLPBeforeAttention(attention_of(*QKV), frozen, "post_ln").step(X, dt, gen).numpy()
    assert np.max(np.abs(wrong - layer_reference(X.numpy(), dt, "post_ln", QKV, frozen))) > 1e-3


@pytest.mark.parametrize("order", ["post_ln", "parallel"])
def test_transformer_layer_with_drawn_weights_and_with_normals(order, tokens, gen, replay):
    """The layer with the explicit-weights MLP (weights from the same draws), and the coupled layer
    driven by given normals Ξ (√Δt s K_m^{1/2} Ξ at the token the MLP acts on)."""
    B, N, d, m, dt, sU, sW, s = 2, 5, 3, 6, 0.3, 0.2, 0.1, 0.9
    X = tokens(B, N, d, seed=13)
    QKV = qkv(d, seed=14)
    noise = RandomMLP(width=m, activation="relu", sigma_U=sU, sigma_W=sW, scale=s, mode="weights")
    layer = Transformer(attention_of(*QKV), noise, order)
    Xn = X.numpy()

    frozen = FrozenMLP(*weights_mode_draws(replay(gen), B, m, d, sU, sW), s, "relu")
    close(layer.step(X, dt, gen), layer_reference(Xn, dt, order, QKV, frozen))

    xi = np.random.default_rng(15).standard_normal((B, N, d))
    U, bU, _, _ = weights_mode_draws(replay(gen), B, m, d, sU, 0.0)
    got = layer.step(X, dt, coupled(gen, xi))
    ref = np.zeros_like(Xn)
    for b in range(B):
        A = attn(Xn[b], Xn[b], *QKV)
        Y = np.stack([ln(x + dt * a) for x, a in zip(Xn[b], A)]) if order == "post_ln" else Xn[b]
        Phi = features(Y, U[b], bU[b], PHI["relu"])
        dW = s * math.sqrt(dt) * sym_root(Phi @ Phi.T / m + sW**2) @ xi[b]
        ref[b] = np.stack([ln(Y[i] + dW[i]) if order == "post_ln" else ln(Xn[b][i] + dt * A[i] + dW[i]) for i in range(N)])
    close(got, ref)


# ----------------------------------------------------------------- the limit field and the SDE


@pytest.mark.parametrize("activation,sigma_U,sigma_W,scale", [("relu", 0.3, 0.2, 1.4), ("tanh", 0.2, 0.0, 1.0)])
@pytest.mark.parametrize("method", ["symmetric", "cholesky"])
def test_exact_field_increment(activation, sigma_U, sigma_W, scale, method, tokens, gen, replay):
    """ExactField: √dt K^{1/2} Ξ with K_ij = κ(⟨x_i, x_j⟩) (SPEC §3), for given normals and for its
    own draws; the symmetric root, or the Cholesky factor."""
    B, N, d, dt = 2, 4, 3, 0.25
    X = tokens(B, N, d, seed=16)
    field = ExactField(NoiseKernel(activation, d, sigma_U, sigma_W, scale), method)
    Xn = X.numpy()
    K = np.array([[[kappa(float(np.dot(x, y)), activation, d, sigma_U, sigma_W, scale) for y in Xb] for x in Xb] for Xb in Xn])
    close(field.covariance(X), K)
    root = [sym_root(k) if method == "symmetric" else np.linalg.cholesky(k) for k in K]
    xi = randn(replay(gen), B, N, d)
    close(field.increment(X, dt, gen), math.sqrt(dt) * np.stack([r @ x for r, x in zip(root, xi)]))
    xi2 = np.random.default_rng(17).standard_normal((B, N, d))
    close(field.increment(X, dt, coupled(gen, xi2)), math.sqrt(dt) * np.stack([r @ x for r, x in zip(root, xi2)]))


def test_sqrt_psd_is_a_root(tokens):
    """sqrt_psd: the symmetric root of K (eigenvalues clamped at 0) and a lower factor with
    L Lᵀ = K, also for a singular K (two equal tokens), where Cholesky falls back."""
    X = tokens(1, 4, 3, seed=18).numpy()[0]
    X[1] = X[0]
    K = np.stack([np.exp(X @ X.T), np.eye(4) + 0.5])  # singular (rank 3), definite
    Kt = torch.from_numpy(K)
    close(sqrt_psd(Kt), np.stack([sym_root(k) for k in K]), 1e-7)  # √ of a rounding-size eigenvalue
    close(sqrt_psd(Kt[1:]), sym_root(K[1])[None])
    L = sqrt_psd(Kt, "cholesky")
    close(L @ L.transpose(-1, -2), K)
    close(L[1:], np.linalg.cholesky(K[1])[None])


def euler_reference(X, dt, QKV, kappa1, dW, noise: bool):
    """X' = LN( x + Δt [P_x Attn(x) − κ(1)(d−1)/2 · x] + P_x ΔW ) (SPEC §3, Itô)."""
    d = X.shape[-1]
    out = np.zeros_like(X)
    for b, Xb in enumerate(X):
        A = attn(Xb, Xb, *QKV) if QKV is not None else np.zeros_like(Xb)
        for i, x in enumerate(Xb):
            drift = proj(x, A[i]) - (0.5 * kappa1 * (d - 1) * x if noise else 0.0)
            out[b, i] = ln(x + dt * drift + proj(x, dW[b, i]))
    return out


def heun_reference(X, dt, QKV, dW):
    """Projected Stratonovich Heun (sde.StratonovichHeun):
    X̃ = LN(x + Δt P_x Attn_X(x) + P_x ΔW),
    X' = LN(x + Δt/2 (P_x Attn_X(x) + P_x̃ Attn_X̃(x̃)) + ½ (P_x + P_x̃) ΔW)."""
    out = np.zeros_like(X)
    for b, Xb in enumerate(X):
        A = attn(Xb, Xb, *QKV) if QKV is not None else np.zeros_like(Xb)
        Xt = np.stack([ln(x + dt * proj(x, A[i]) + proj(x, dW[b, i])) for i, x in enumerate(Xb)])
        At = attn(Xt, Xt, *QKV) if QKV is not None else np.zeros_like(Xb)
        for i, (x, xt) in enumerate(zip(Xb, Xt)):
            drift = 0.5 * (proj(x, A[i]) + proj(xt, At[i]))
            out[b, i] = ln(x + dt * drift + 0.5 * (proj(x, dW[b, i]) + proj(xt, dW[b, i])))
    return out


@pytest.mark.parametrize("scheme", ["euler", "heun"])
@pytest.mark.parametrize("with_attention", [True, False])
@pytest.mark.parametrize("with_noise", [True, False])
def test_sde_step_given_increment(scheme, with_attention, with_noise, tokens, gen):
    """One step of each integrator with a given field increment ΔW."""
    B, N, d, dt = 2, 4, 3, 0.2
    X = tokens(B, N, d, seed=19)
    QKV = qkv(d, seed=20) if with_attention else None
    k1 = kappa(1.0, "relu", d, 0.3, 0.2)
    noise = ExactField(NoiseKernel("relu", d, 0.3, 0.2)) if with_noise else None
    sde = LimitSDE(attention_of(*QKV) if with_attention else None, noise, kappa1=k1)
    dW = 0.4 * np.random.default_rng(21).standard_normal((B, N, d))
    Xn = X.numpy()
    if not with_noise:  # no field: no increment to draw
        sde.integrator = EulerMaruyama() if scheme == "euler" else StratonovichHeun()
        zero = np.zeros_like(dW)
        close(sde.step(X, dt, gen), euler_reference(Xn, dt, QKV, k1, zero, False) if scheme == "euler" else heun_reference(Xn, dt, QKV, zero))
    if scheme == "euler":
        got = EulerMaruyama().step(sde, X, dt, torch.from_numpy(dW))
        ref = euler_reference(Xn, dt, QKV, k1, dW, with_noise)
    else:
        got = StratonovichHeun().step(sde, X, dt, torch.from_numpy(dW))
        ref = heun_reference(Xn, dt, QKV, dW)
    close(got, ref)


@pytest.mark.parametrize("scheme", ["euler", "heun"])
def test_sde_step_given_normals(scheme, tokens, gen):
    """One step driven by normals Ξ: ΔW = √Δt K(X)^{1/2} Ξ with the exact kernel, then the scheme."""
    B, N, d, dt, sU, sW, s = 2, 4, 3, 0.2, 0.3, 0.2, 1.1
    X = tokens(B, N, d, seed=22)
    QKV = qkv(d, seed=23)
    k1 = kappa(1.0, "relu", d, sU, sW, s)
    integrator = EulerMaruyama() if scheme == "euler" else StratonovichHeun()
    sde = LimitSDE(attention_of(*QKV), ExactField(NoiseKernel("relu", d, sU, sW, s)), integrator, k1)
    xi = np.random.default_rng(24).standard_normal((B, N, d))
    Xn = X.numpy()
    dW = np.stack([
        math.sqrt(dt) * sym_root(np.array([[kappa(float(np.dot(x, y)), "relu", d, sU, sW, s) for y in Xb] for x in Xb])) @ xb
        for Xb, xb in zip(Xn, xi)
    ])
    ref = euler_reference(Xn, dt, QKV, k1, dW, True) if scheme == "euler" else heun_reference(Xn, dt, QKV, dW)
    close(sde.step(X, dt, coupled(gen, xi)), ref)


# ----------------------------------------------------------------- the mean-field particle step


def rf_reference(X, u, b, Z, bW, scale, dt, phi):
    """W(dt, x) = s √dt ( (1/√M) Σ_k φ(u_k·x/√d + b_k) Z_k + σ_W b_W ) for one field (u (d, M),
    b (M,), Z (M, d), bW (d,) already times σ_W), at each token x of X (n, d)."""
    M = u.shape[1]
    Phi = features(X, u.T, b, phi)
    return scale * math.sqrt(dt) * (Phi @ Z / math.sqrt(M) + bW)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("token_chunk", [None, 2])
def test_random_feature_field_increment(shared, token_chunk, tokens, gen, replay):
    """RandomFeatureField: features u_k ~ N(0, I_d), b_k ~ N(0, σ_U²) drawn at reset, increments
    s √dt ((1/√M) Σ_k φ(u_k·x/√d + b_k) Z_k + σ_W Z_0) with fresh Z per step; one field (F = 1)
    is shared by all clouds."""
    B, N, d, M, dt, sU, sW, s = 3, 5, 3, 8, 0.1, 0.3, 0.2, 1.2
    F = 1 if shared else B
    X = tokens(B, N, d, seed=25)
    field = RandomFeatureField("silu", M, sU, sW, s, token_chunk=token_chunk)
    gf = torch.Generator().manual_seed(5)
    g = replay(gf)
    u, b = randn(g, F, d, M), sU * randn(g, F, 1, M)[:, 0]
    field.reset(F, d, gf, torch.float64, "cpu")
    g = replay(gen)
    Z, bW = randn(g, F, M, d), sW * randn(g, F, 1, d)[:, 0]
    got = field.increment(X, dt, gen)
    f = [0] * B if shared else range(B)
    ref = np.stack([rf_reference(X[i].numpy(), u[k], b[k], Z[k], bW[k], s, dt, PHI["silu"]) for i, k in zip(range(B), f)])
    close(got, ref)


@pytest.mark.parametrize("integrator", ["euler", "heun"])
@pytest.mark.parametrize("sdpa", [False, True])
def test_mean_field_particle_step(integrator, sdpa, tokens, gen, replay):
    """One step of the particle solver (SPEC §4): the chosen integrator with memory-linear attention
    (query chunks of 2 rows, or fused SDPA) and the random-feature field, equals the reference
    step with the field's own features and increments."""
    B, N, d, M, sU, sW, s = 2, 6, 3, 10, 0.2, 0.3, 0.8
    cfg = RunConfig(
        dynamics="sde", noise="random_features", rng="torch", features=M, d=d, N=N, T=0.6, L=3, integrator=integrator,
        activation="relu", sigma_U=sU, sigma_W=sW, noise_scale=s, beta=1.5, gamma="repulsive",
    )
    gf = torch.Generator().manual_seed(6)
    g = replay(gf)
    u, b = randn(g, B, d, M), sU * randn(g, B, 1, M)[:, 0]
    field = make_field(cfg, B, gf)
    stepper = make_particles(cfg, field, N, block=2 * N, sdpa=sdpa)
    X = tokens(B, N, d, seed=26)
    g = replay(gen)
    Z, bW = randn(g, B, M, d), sW * randn(g, B, 1, d)[:, 0]
    Xn, dt = X.numpy(), cfg.dt
    dW = np.stack([rf_reference(Xn[k], u[k], b[k], Z[k], bW[k], s, dt, PHI["relu"]) for k in range(B)])
    QKV = (1.5 * np.eye(d), np.eye(d), -1.0 * np.eye(d))
    k1 = kappa(1.0, "relu", d, sU, sW, s)
    ref = euler_reference(Xn, dt, QKV, k1, dW, True) if integrator == "euler" else heun_reference(Xn, dt, QKV, dW)
    close(stepper.step(X, dt, gen), ref)


# ----------------------------------------------------------------- sphere geometry and diagnostics


def test_initial_tokens(gen, replay):
    """uniform: LN of i.i.d. normals; cluster: LN(c + spread·normals) around e₁ or a given centre;
    pair: e₁ and (c, √(1−c²), 0, …) rotated by a Haar rotation R = QR-factor with sign(diag R) > 0."""
    B, N, d = 2, 3, 4
    g = replay(gen)
    close(uniform(B, N, d, generator=gen), np.stack([[ln(v) for v in Z] for Z in randn(g, B, N, d)]))
    close(initial_tokens(InitConfig(kind="uniform"), B, N, d, gen), np.stack([[ln(v) for v in Z] for Z in randn(g, B, N, d)]))
    for center in (None, [0.0, 2.0, 0.0, 1.0]):
        c = np.eye(d)[0] if center is None else ln(np.array(center))
        ref = np.stack([[ln(c + 0.3 * v) for v in Z] for Z in randn(g, B, N, d)])
        close(initial_tokens(InitConfig(kind="cluster", spread=0.3, center=center), B, N, d, gen), ref)
    R, g2 = [], replay(g)
    for A in randn(g, B, d, d):
        Qm, Rm = np.linalg.qr(A)
        R.append(Qm * np.sign(np.diag(Rm)))
    close(random_rotations(B, d, g2), np.stack(R))
    p = np.zeros((2, d))
    p[0, 0], p[1, 0], p[1, 1] = 1.0, 0.4, math.sqrt(1 - 0.16)
    close(initial_tokens(InitConfig(kind="pair", cosine=0.4), B, 2, d, gen), np.stack([p @ r.T for r in R]))


def test_diagnostics(tokens):
    """Mean and minimum cosine over pairs i < j, E_β = ½ N⁻² Σ_ij (e^β − e^{β⟨x_i,x_j⟩}), the mean
    token, in one pass or in row blocks; mean ± standard error."""
    B, N, d, beta = 2, 5, 3, 1.7
    X = tokens(B, N, d, seed=27)
    Xn = X.numpy()
    pairs = [[float(np.dot(Xb[i], Xb[j])) for i in range(N) for j in range(i + 1, N)] for Xb in Xn]
    E = [0.5 * sum(math.exp(beta) - math.exp(beta * float(np.dot(x, y))) for x in Xb for y in Xb) / N**2 for Xb in Xn]
    close(mean_cosine(X), np.array([np.mean(p) for p in pairs]))
    close(min_cosine(X), np.array([min(p) for p in pairs]))
    close(mean_token(X), Xn.mean(axis=1))
    for chunk in (None, 2):
        close(energy(X, beta, chunk=chunk), np.array(E))
    for block in (None, 2 * N, 1):
        stats = pair_statistics(X, beta, block=block)
        close(stats["mean_cosine"], np.array([np.mean(p) for p in pairs]))
        close(stats["min_cosine"], np.array([min(p) for p in pairs]))
        close(stats["energy"], np.array(E))
    v = torch.tensor([[1.0, 2.0], [2.0, 5.0], [6.0, 2.0]], dtype=torch.float64)
    m, se = mean_and_se(v)
    close(m, np.array([3.0, 3.0]))
    close(se, np.array([math.sqrt(7.0 / 3.0), 1.0]))
    m, se = mean_and_se(v[:1])
    close(se, np.zeros(2))


def test_gram_and_tangent(tokens):
    """Gram matrix ⟨x_i, x_j⟩ and P_x v = v − ⟨x, v⟩x for non-tangent v."""
    X = tokens(2, 4, 3, seed=28)
    V = torch.from_numpy(np.random.default_rng(29).standard_normal((2, 4, 3)))
    Xn, Vn = X.numpy(), V.numpy()
    close(gram(X), np.stack([[[float(np.dot(x, y)) for y in Xb] for x in Xb] for Xb in Xn]))
    close(tangent(X, V), np.stack([[proj(x, v) for x, v in zip(Xb, Vb)] for Xb, Vb in zip(Xn, Vn)]))


@pytest.mark.parametrize("scheme", ["euler", "heun"])
def test_integrate_is_repeated_steps_on_the_aggregated_path(scheme, tokens, gen):
    """solve(sde, X₀, …, path) applies one step per coarse step of the path; a coarse step of the
    BrownianPath sums its q fine normals and divides by √q (the same Brownian path on the coarser grid)."""
    B, N, d, dt = 3, 3, 3, 0.1
    X = tokens(B, N, d, seed=30)
    integrator = EulerMaruyama() if scheme == "euler" else StratonovichHeun()
    sde = LimitSDE(attention_of(*qkv(d, seed=31)), ExactField(NoiseKernel("relu", d, 0.2, 0.1)), integrator,
                   kappa(1.0, "relu", d, 0.2, 0.1))
    xi = np.random.default_rng(32).standard_normal((6, B, N, d))
    path = BrownianPath.from_normals(torch.from_numpy(xi))
    coarse = torch.stack([path.increment(k, 2)[0] for k in range(2)])
    close(coarse, np.stack([xi[0:3].sum(0), xi[3:6].sum(0)]) / math.sqrt(3))
    ref = X
    for k in range(2):
        ref = sde.step(ref, dt, Draws(gen, path, k, 2))
    close(torch.from_numpy(solve(sde, X, 2 * dt, 2, SaveAt(stats=()), generator=gen, path=path)["X_final"].values), ref.numpy())
    with pytest.raises(ValueError, match="^BrownianPath: 4 steps do not divide the path's 6 fine steps$"):
        path.increment(0, 4)


def test_particle_solver_assembly_and_loop(tokens):
    """make_field passes the config's activation, width, σ_U, σ_W and noise scale to the field;
    make_particles drops the field when the noise is off and refuses a missing one; solve applies
    the step L times with a generator seeded by ``seed`` and records the requested layers (0 = the
    initial state)."""
    d, N = 3, 4
    cfg = RunConfig(dynamics="sde", noise="random_features", features=7, d=d, N=N, T=0.4, L=4, activation="tanh",
                    sigma_U=0.3, sigma_W=0.2, noise_scale=1.5)
    field = make_field(cfg, 2, torch.Generator().manual_seed(0))
    assert (field.activation, field.features, field.sigma_U, field.sigma_W, field.scale, field.token_chunk) == ("tanh", 7, 0.3, 0.2, 1.5, 4096)
    assert field.features_at(tokens(2, N, d)).shape == (2, N, 7)
    assert make_particles(cfg, field, N).noise is field
    for off in ({"mlp": False}, {"noise_scale": 0.0}):
        assert make_particles(cfg.with_updates(**off), field, N).noise is None
    with pytest.raises(ValueError, match=r"^the particle solver needs a field \(make_field\) when the noise is on$"):
        make_particles(cfg, None, N)
    with pytest.raises(ValueError, match=r"^dynamics: the particle solver integrates the limit SDE \(dynamics = 'sde'\)$"):
        make_particles(cfg.with_updates(dynamics="transformer"), field, N)

    class Count:
        """A model that adds one normal from the generator to every coordinate (off the sphere)."""

        on_sphere = False

        def reset(self, batch, d, generator, dtype, device):
            pass

        def step(self, X, dt, draws):
            return X + torch.randn(X.shape, generator=draws.generator, dtype=X.dtype)

    X0 = tokens(2, N, d)
    ds = solve(Count(), X0, 0.3, 3, SaveAt(stats=(), tokens_at=[3, 0, 1]), seed=5)
    final, saved = torch.from_numpy(ds["X_final"].values), list(torch.from_numpy(ds["X"].values).unbind(1))
    g = torch.Generator().manual_seed(5)
    ref = [X0.numpy()]
    for _ in range(3):
        ref.append(ref[-1] + randn(g, 2, N, d))
    close(final, ref[3])
    assert len(saved) == 3
    for got, k in zip(saved, (0, 1, 3)):
        close(got, ref[k])


def test_rates_record_their_beta_and_gamma():
    """rates(kernel) uses β = 1, γ = 0 by default and records both; the totals shift by −γ and −2γ."""
    k = NoiseKernel("relu", 5, 0.1, 0.2)
    r = rates(k)
    assert (r.beta, r.gamma, r.lambda_1_total, r.lambda_bar_total) == (1.0, 0.0, r.lambda_1, r.lambda_bar)
    assert r == rates(k, 1.0, 0.0)
    s = rates(k, beta=2.0, gamma=0.5)
    assert (s.beta, s.gamma, s.lambda_1_total, s.lambda_bar_total) == (2.0, 0.5, s.lambda_1 - 0.5, s.lambda_bar - 1.0)
    assert s.to_dict()["gamma"] == 0.5
