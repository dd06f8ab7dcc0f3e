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
from stochformer.model.noise import RandomFeatureField
from stochformer.sphere import cluster, pair, uniform

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
