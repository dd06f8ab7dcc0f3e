"""The opt-in parallel sampler of the limit SDE's fields (``RandomFeatureField(rng=...)``,
``ExactField(rng=...)``, RunConfig ``rng``): the default draws exactly ``torch.randn`` on the run's
generator (every earlier run's numbers), ``parallel`` the same law from streams seeded from that
generator (same seed ⇒ same numbers whatever the thread count), and a shared Brownian path's
normals are used as they are whatever the sampler."""

from __future__ import annotations

import math
from typing import Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.config import RunConfig
from stochformer.config.build import make_field, make_noise
from stochformer.core.brownian import BrownianPath, Draws
from stochformer.core.runtime import make_generator
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import ExactField, RandomFeatureField, sqrt_psd

F64 = torch.float64


def _field(kind: str, rng: Optional[str], sigma_W: float = 0.3, M: int = 64, d: int = 4):
    """A field of either kind on tokens of dimension d (features not drawn yet); rng None: the default."""
    given = {} if rng is None else {"rng": rng}
    if kind == "features":
        return RandomFeatureField("relu", features=M, sigma_U=0.2, sigma_W=sigma_W, scale=1.3, **given)
    return ExactField(NoiseKernel("relu", d, 0.2, sigma_W, scale=1.3), **given)


def _forget(field) -> None:
    """Drop a random-feature field's features, so the next run draws them from its generator."""
    if isinstance(field, RandomFeatureField):
        field._u = field._b = None


def _increment(field, X: torch.Tensor, seed: int, dt: float = 0.1) -> torch.Tensor:
    """One increment at X from a fresh run of ``field`` seeded with ``seed`` (features drawn by
    the run's generator first, as in a run)."""
    g = make_generator(seed)
    _forget(field)
    field.reset(X.shape[0], X.shape[-1], g, X.dtype, X.device)
    return field.increment(X, dt, Draws(g))


@pytest.mark.parametrize("kind", ["features", "exact"])
def test_default_sampler_is_torch_randn_on_the_runs_generator(kind, tokens, replay):
    """rng = "torch" (the default) draws exactly ``torch.randn`` of the step's shapes on the run's
    generator, in the documented order (B^k then B⁰): the increment equals the formula computed
    here from a replayed generator, bit for bit; RunConfig's rng = auto keeps that sampler for
    both fields (and parallel for the MLP on a CPU)."""
    X = tokens(8, 5, 4, seed=1)
    field, g = _field(kind, None), make_generator(7)
    assert field.rng == "torch" and field._sampler is None
    field.reset(8, 4, g, F64, "cpu")
    ref = replay(g)
    got = field.increment(X, 0.25, Draws(g))
    if kind == "features":
        phi = torch.relu(X @ field._u / 2.0 + field._b)
        Z = torch.randn(8, 64, 4, generator=ref, dtype=F64)
        B0 = torch.randn(8, 1, 4, generator=ref, dtype=F64)
        want = 1.3 * 0.5 * (phi @ Z / 8.0 + 0.3 * B0)
    else:
        want = 0.5 * (sqrt_psd(field.covariance(X, F64)) @ torch.randn(8, 5, 4, generator=ref, dtype=F64))
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
    assert torch.equal(g.get_state(), ref.get_state())  # nothing else drawn
    for rng, field_rng, mlp_rng in (("auto", "parallel", "parallel"), ("torch", "torch", "torch"), ("parallel", "parallel", "parallel")):
        cfg = RunConfig(dynamics="sde", noise="random_features" if kind == "features" else "exact", N=5, d=4, rng=rng)
        assert make_noise(cfg).rng == field_rng and make_field(cfg, 1, make_generator(0)).rng == field_rng
        assert make_noise(RunConfig(noise="mlp_gaussian", rng=rng)).rng == mlp_rng


@pytest.mark.parametrize("kind", ["features", "exact"])
def test_parallel_sampler_same_seed_same_numbers_whatever_the_threads(kind, tokens):
    """rng = "parallel": same seed ⇒ identical increments (one step, and a run of several steps
    served from the normals drawn ahead), another seed ⇒ others, and the numbers do not depend on
    torch's thread count (sizes where the streams are filled by several threads)."""
    X = tokens(256, 8, 4, seed=2) if kind == "features" else tokens(1024, 16, 4, seed=2)  # 2^16 normals a step or more
    field = _field(kind, "parallel", M=256)
    a, b, c = (_increment(field, X, s) for s in (3, 3, 4))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert not torch.allclose(a, _increment(_field(kind, "torch", M=256), X, 3))  # another sampler, other numbers
    shape = (256, 256, 4) if kind == "features" else X.shape
    sde = sf.LimitSDE(noise=field, integrator="euler")
    normals, runs = {}, {}
    threads = torch.get_num_threads()
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            g = make_generator(3)
            _forget(field)
            field.reset(X.shape[0], 4, g, F64, "cpu")
            normals[t] = torch.stack([Draws(g).brownian(shape, F64, "cpu", field._sampler) for _ in range(3)])
            _forget(field)
            runs[t] = sf.solve(sde, X, T=0.5, steps=6, seed=5).X_final
            # the products and the root may round differently on another number of threads
            assert torch.allclose(_increment(field, X, 3), a, rtol=1e-10, atol=1e-12)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(normals[1], normals[2])
    assert torch.allclose(torch.from_numpy(runs[1].values), torch.from_numpy(runs[2].values), rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(F=st.integers(1, 3), M=st.integers(1, 9), N=st.integers(1, 4), sigma_W=st.sampled_from([0.0, 0.5]),
       steps=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**32))
def test_a_shared_path_drives_the_field_whatever_the_sampler(F, M, N, sigma_W, steps, seed):
    """With a BrownianPath (``draws.coupled``) both fields read the path's normals (B^k and B⁰)
    whatever their sampler: the increments with rng = parallel and torch agree bit for bit, and
    the run's generator is not moved by the sampler."""
    d = 3
    X = torch.nn.functional.normalize(torch.randn(F, N, d, generator=make_generator(seed), dtype=F64), dim=-1)
    for kind in ("features", "exact"):
        fields = [_field(kind, rng, sigma_W, M, d) for rng in ("torch", "parallel")]
        if kind == "features":
            for f in fields:
                f.draw(F, d, make_generator(seed + 1), F64, "cpu")
            shape = fields[0].path_shape(F, d)
        else:
            shape = [(F, N, d)]
        outs = []
        for f in fields:
            path, g = BrownianPath(shape, 4, seed=seed), make_generator(seed + 2)
            start = g.get_state()
            outs.append(torch.stack([f.increment(X, 0.1, Draws(g, path, k, steps)) for k in range(steps)]))
            assert torch.equal(g.get_state(), start)
        assert torch.equal(outs[0], outs[1])


def _whitened(kind: str, rng: str, sampler_scale: float = 1.0, B: int = 40000) -> torch.Tensor:
    """B independent increments of one field at 3 fixed tokens in d = 3 (its features fixed and
    shared by the B samples), whitened by the law's own covariance: dt s² (ΦΦᵀ/M + σ_W²) given the
    features, dt K(X) for the exact field; (B, N d), i.i.d. N(0, 1) under the right law.
    ``sampler_scale``: a fault, the sampler's normals scaled."""
    N, d, dt, s, sigma_W = 3, 3, 0.2, 1.3, 0.3
    X = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [-0.3, 0.1, 0.9]], dtype=F64), dim=-1)
    if kind == "features":
        field = RandomFeatureField("relu", features=8, sigma_U=0.2, sigma_W=sigma_W, scale=s, rng=rng)
        field.draw(1, d, make_generator(1), F64, "cpu")
        assert field._u is not None and field._b is not None
        field._u, field._b = field._u.expand(B, -1, -1).contiguous(), field._b.expand(B, -1, -1).contiguous()
        phi = field.features_at(X[None])[0]
        C = s**2 * (phi @ phi.T / 8 + sigma_W**2)
    else:
        field = ExactField(NoiseKernel("relu", d, 0.2, sigma_W, scale=s), rng=rng)
        C = field.covariance(X[None], F64)[0]
    if sampler_scale != 1.0:
        inner = field._sampler
        assert inner is not None
        field._sampler = lambda n, g, dtype, device: sampler_scale * inner(n, g, dtype, device)
    G = field.increment(X.expand(B, N, d).contiguous(), dt, make_generator(9))
    white = torch.linalg.solve(sqrt_psd(C[None])[0], G / math.sqrt(dt))  # (B, N, d)
    return white.transpose(-1, -2).reshape(B, N * d)


@pytest.mark.parametrize("kind", ["features", "exact"])
def test_parallel_sampled_increment_has_the_fields_covariance(kind):
    """rng = "parallel": the increment whitened by the field's covariance (conditional on the
    features for the random-feature field) has identity covariance: every entry of the 9 × 9
    empirical covariance within 5 SE (SE from the sample variance of the products) and the pooled
    variance of all B·9 whitened entries 1 within 5 SE, √(2/(9B)) = 0.24% at B = 40000: the test
    sees a sampler whose normals are 1% too large (4% in the variance is 8 SE)."""
    white = _whitened(kind, "parallel")
    B, n = white.shape
    prod = white[:, :, None] * white[:, None, :]
    z = (prod.mean(0) - torch.eye(n, dtype=F64)) / (prod.std(0) / math.sqrt(B))
    assert float(z.abs().max()) < 5.0
    assert abs(float(white.pow(2).mean()) - 1.0) < 5 * math.sqrt(2 / white.numel())


@pytest.mark.parametrize("kind", ["features", "exact"])
def test_the_covariance_test_sees_a_scaled_sampler(kind):
    """Fault injection for the test above: a sampler whose normals are 1.01× standard normals
    fails its pooled check (2% in the variance, more than 5 SE)."""
    white = _whitened(kind, "parallel", sampler_scale=1.01)
    assert abs(float(white.pow(2).mean()) - 1.0) > 5 * math.sqrt(2 / white.numel())


def test_the_sampler_is_checked():
    """A sampler outside {torch, parallel} is refused by name before any work."""
    with pytest.raises(ValueError, match="rng"):
        RandomFeatureField(rng="mt")
    with pytest.raises(ValueError, match="rng"):
        ExactField(NoiseKernel("relu", 3), rng="mt")


@pytest.mark.parametrize("lockstep", [True, False])
def test_one_parallel_field_drives_systems_of_any_size_alike(lockstep, tokens):
    """A random-feature field with rng = parallel is still a function of position: two systems
    (N = 3 and N = 5, the first 3 tokens shared), each with its own generator in the same state,
    receive the same increments at the shared tokens over several steps, stepped in lockstep (the
    normals drawn ahead belong to one generator at a time) or one after the other."""
    X = tokens(64, 5, 4, seed=3)
    field = _field("features", "parallel", M=256)
    field.draw(64, 4, make_generator(0), F64, "cpu")
    gens = [make_generator(5), make_generator(5)]
    systems = [X[:, :3], X]
    out: list[list[torch.Tensor]] = [[], []]
    order = [(k, s) for k in range(4) for s in (0, 1)] if lockstep else [(k, s) for s in (0, 1) for k in range(4)]
    for k, s in order:
        out[s].append(field.increment(systems[s], 0.1, Draws(gens[s], None, k, 4)))
    for a, b in zip(*out):
        assert torch.allclose(a, b[:, :3], rtol=1e-12, atol=1e-14)  # the same normals (the products may round apart)
