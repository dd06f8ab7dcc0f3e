"""The initial-token samplers of `core.sphere` against their stated contracts: the argument checks
(one ValueError naming the field and its range, before any work), the pre-flight memory bound, and
the cluster law x = LN(c + s g) for every spread s and every scale of the centre."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer.core.validation as validation
from stochformer.core import sphere

#: each sampler with its default sizes, the arguments that size it (as its refusal names them) and
#: the bytes its pre-flight check reserves in float64: 3 arrays the size of the (batch, N, d) output
#: for uniform and cluster, 4 (d, d) matrices per sample for pair and random_rotations
SAMPLERS = {
    "uniform": (lambda **kw: sphere.uniform(seed=0, **kw), {"batch": 3, "N": 5, "d": 4}, "batch, N, d",
                lambda batch, N, d: 3.0 * batch * N * d * 8),
    "cluster": (lambda **kw: sphere.cluster(seed=0, **kw), {"batch": 3, "N": 5, "d": 4}, "batch, N, d",
                lambda batch, N, d: 3.0 * batch * N * d * 8),
    "pair": (lambda **kw: sphere.pair(seed=0, **kw), {"batch": 3, "d": 4}, "batch, d",
             lambda batch, d: 4.0 * batch * d * d * 8),
    "random_rotations": (lambda **kw: sphere.random_rotations(generator=torch.Generator().manual_seed(0), **kw),
                         {"batch": 3, "d": 4}, "batch, d", lambda batch, d: 4.0 * batch * d * d * 8),
}


@pytest.mark.parametrize("name", ["uniform", "cluster", "pair"])
def test_tokens_need_two_dimensions(name: str) -> None:
    """d = 1 (S⁰ is two points: no tangent space) is refused naming d and its range."""
    fn, kw, _, _ = SAMPLERS[name]
    with pytest.raises(ValueError, match=r"^d: must be an integer >= 2 \(got 1\)$"):
        fn(**{**kw, "d": 1})


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 50), N=st.integers(1, 50), d=st.integers(2, 50))
def test_memory_is_checked_before_the_draw(name: str, batch: int, N: int, d: int) -> None:
    """With exactly the reserved bytes available the sampler runs; with one byte less it raises one
    ValueError naming the arguments that size it, and draws nothing."""
    fn, kw, fields, need = SAMPLERS[name]
    kw = {k: v for k, v in {"batch": batch, "N": N, "d": d}.items() if k in kw}
    nbytes = need(**kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "available_memory", lambda: int(nbytes))
        assert fn(**kw).shape[0] == batch
        mp.setattr(validation, "available_memory", lambda: int(nbytes) - 1)
        with pytest.raises(ValueError, match="^" + fields + r": needs about .* GiB of memory, more than the "):
            fn(**kw)


def _draws(batch: int, N: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(batch, N, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@settings(max_examples=30, deadline=None)
@given(spread=st.one_of(st.floats(0.0, 1.0), st.floats(1.0, 1e6)), seed=st.integers(0, 2**31 - 1))
def test_cluster_is_the_normalised_gaussian_around_the_centre(spread: float, seed: int) -> None:
    """x = LN(c + s g) with g the generator's standard normals and c = e₁, for small and large s."""
    X = sphere.cluster(2, 4, 3, spread=spread, seed=seed)
    c = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    want = sphere.normalize(c / max(spread, 1.0) + (spread / max(spread, 1.0)) * _draws(2, 4, 3, seed))
    torch.testing.assert_close(X, want, rtol=0.0, atol=1e-12)


def test_cluster_extremes() -> None:
    """s = 0 puts every token at the centre; s = 1e200 (|c + s g|² overflows float64) still gives
    finite unit rows; a centre's scale does not matter, even at 1e200."""
    torch.testing.assert_close(sphere.cluster(2, 3, 4, spread=0.0, seed=1),
                               torch.tensor([1.0, 0, 0, 0], dtype=torch.float64).expand(2, 3, 4), rtol=0, atol=0)
    wide = sphere.cluster(2, 3, 4, spread=1e200, seed=1)
    assert bool(torch.isfinite(wide).all()) and torch.allclose(wide.norm(dim=-1), torch.ones(2, 3, dtype=torch.float64))
    base = sphere.cluster(2, 3, 3, spread=0.3, center=[1.0, 2.0, 0.5], seed=2)
    for scale in (1e-3, 0.4, 1e200):
        torch.testing.assert_close(sphere.cluster(2, 3, 3, spread=0.3, center=[scale, 2 * scale, 0.5 * scale], seed=2),
                                   base, rtol=0.0, atol=1e-14)


@pytest.mark.parametrize("center, shape", [([0.0, 0.0, 0.0], (3,)), ([1.0, 2.0], (2,)), ([1.0, 0.0, 0.0, 0.0], (4,))])
def test_cluster_refuses_a_zero_or_misshapen_centre(center: list, shape: tuple) -> None:
    with pytest.raises(ValueError, match=r"^center: must be a non-zero vector of d = 3 finite numbers "
                                         + rf"\(got shape \({shape[0]},\)\)$"):
        sphere.cluster(2, 3, 3, center=center, seed=0)


@pytest.mark.parametrize("center, message", [
    ([[1.0, 0.0, 0.0]], r"^center: expected a tensor of shape \(d\), got \(1, 3\)$"),
    ([float("nan"), 0.0, 0.0], r"^center: must hold finite numbers"),
    ("abc", r"^center: must be a tensor, a numpy array or a nested list of numbers"),
])
def test_cluster_names_the_centre_in_every_refusal(center, message) -> None:
    with pytest.raises(ValueError, match=message):
        sphere.cluster(2, 3, 3, center=center, seed=0)
