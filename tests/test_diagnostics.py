"""The measurements of a token cloud (``measure.diagnostics``) against SPEC §5's formulas: the
cloud summary and its blocking, the pair statistics' defaults and shapes. float64, deterministic
(the pair statistics' pathwise references: tests/test_reference.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

import stochformer.measure.diagnostics as diagnostics
from stochformer.measure.diagnostics import cloud_summary
from stochformer.measure.diagnostics import energy, mean_cosine, pair_statistics

from conftest import close


def _energy_reference(X: torch.Tensor, beta: float) -> torch.Tensor:
    """E_β(μ) = ½ (1/N²) Σ_ij (e^β − e^{β⟨x_i, x_j⟩}) (SPEC §5), diagonal included, from the full Gram matrix."""
    G = X @ X.transpose(-1, -2)
    return 0.5 * (math.exp(beta) - torch.exp(beta * G)).mean(dim=(-1, -2))


def test_cloud_summary_is_the_energy_and_the_mean_token(tokens):
    """cloud_summary(X, β) returns exactly the three entries E_β(μ), the mean token (1/N) Σ x_i:
    (batch, d) and its norm (batch,); β = 1 by default."""
    X = tokens(3, 40, 4, seed=181)
    for kw, beta in (({"beta": 1.5}, 1.5), ({}, 1.0)):
        s = cloud_summary(X, **kw)
        assert set(s) == {"energy", "mean_token", "mean_token_norm"}
        close(s["energy"], _energy_reference(X, beta).numpy())
        m = X.numpy().mean(axis=1)
        close(s["mean_token"], m)
        close(s["mean_token_norm"], np.sqrt((m**2).sum(axis=-1)))


def test_cloud_summary_forms_no_gram_block_over_its_budget(tokens, monkeypatch):
    """The energy is summed over blocks of Gram rows with at most ``block`` entries each (no (N, N)
    matrix) and equals the whole-matrix value: batch 10, N = 50, d = 8, block = 200 (4 rows a block)."""
    X = tokens(10, 50, 8, seed=182)
    shapes: list[tuple[int, ...]] = []
    gram_rows = diagnostics._gram_rows

    def recording(X, rows):
        for s, G in gram_rows(X, rows):
            shapes.append(tuple(G.shape))
            yield s, G

    monkeypatch.setattr(diagnostics, "_gram_rows", recording)
    s = cloud_summary(X, beta=0.7, block=200)
    assert len(shapes) > 1 and all(r * n <= 200 for _, r, n in shapes)
    assert sum(r for _, r, _ in shapes) == 50
    close(s["energy"], _energy_reference(X, 0.7).numpy())


# ----------------------------------------------------------------- the statistics' defaults and shapes


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
