"""Exact checks of what the pathwise reference tests leave free: defaults, argument handling, edge
cases and error messages of the science modules. Each pins a documented behaviour that a
surviving mutant of ``tools/mutation.py`` changed (docs/testing.md); values are exact or to
1e-12 in float64, as in ``tests/test_reference.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from stochformer.build import initial_tokens
from stochformer.config import InitConfig
from stochformer.diagnostics import energy, mean_cosine, pair_statistics
from stochformer.brownian import BrownianPath, Draws
from stochformer.model.noise import RandomFeatureField, RandomMLP, draw_weights
from stochformer.sphere import cluster, load_tokens, pair, uniform
from stochformer.stats import mean_and_se

TOL = 1e-12


def close(got, ref, tol: float = TOL) -> None:
    got = got.detach().numpy() if torch.is_tensor(got) else np.asarray(got)
    assert got.shape == np.shape(ref)
    err = float(np.max(np.abs(got - ref)))
    assert err < tol, f"max |code − reference| = {err:.3g}"


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
    Y = 1.1 * X  # ⟨y, y⟩ = 1.21 > 1
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
