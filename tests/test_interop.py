"""The limit SDE in torchsde (``stochformer.interop``) and ``solve(..., output="torch")``.

Pathwise: given the same Brownian increments, ``solve`` with projected Euler and torchsde's Euler
with the projection after each step take the same float64 operations up to their order
(``K^{1/2}(√Δt Ξ)`` against ``√Δt (K^{1/2} Ξ)``, ``ΔB/√Δt·√Δt``), so they agree to rounding: each
step adds ~1e-16 relative error and 10–20 steps of a Lipschitz map at Δt ≤ 0.1 do not amplify it
past 1e-13 (measured: 2.6e-15 for the exact field, 8e-16 for random features); the tolerance is
1e-12. In law: both are the same projected Euler scheme, so E⟨x_1, x_2⟩ at T agrees within 4.5
standard errors (2000 samples each, fixed seeds); a model with the attention's sign flipped or the
kernel scaled is rejected by the same check.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import example, given, settings, strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath
from stochformer.core.extras import MissingExtraError
from stochformer.core.sphere import uniform
from stochformer.interop import from_torchsde_brownian, sdeint_projected, to_torchsde
from stochformer.model import ExactField, LimitSDE, NoiseKernel, RandomFeatureField, RandomMLP, SoftmaxAttention

torchsde = pytest.importorskip("torchsde")

F64 = torch.float64
PATH_TOL = 1e-12  # rounding only (module docstring)
SIGMAS = 4.5


def _sde(noise, gamma: float = 1.0) -> LimitSDE:
    return LimitSDE(attention=SoftmaxAttention(beta=1.0, gamma=gamma), noise=noise, integrator="euler")


def _noise(kind: str, d: int):
    if kind == "exact":
        return ExactField(NoiseKernel("relu", d, scale=0.7))
    return RandomFeatureField("relu", 16, sigma_U=0.5, sigma_W=0.4 if kind == "features+bias" else 0.0, scale=0.7)


def _bm(tsde, T: float, entropy: int):
    return torchsde.BrownianInterval(0.0, T, size=(tsde.shape[0], tsde.brownian_size), dtype=F64, entropy=entropy)


@settings(max_examples=10, deadline=None)
@example(kind="exact", N=4, d=3, steps=10, seed=1)
@example(kind="features", N=3, d=2, steps=5, seed=2)
@example(kind="features+bias", N=5, d=4, steps=10, seed=3)
@given(kind=st.sampled_from(["exact", "features", "features+bias"]), N=st.integers(2, 5), d=st.integers(2, 4),
       steps=st.sampled_from([5, 10]), seed=st.integers(0, 2**16))
def test_solve_and_torchsde_euler_take_the_same_path(kind, N, d, steps, seed):
    """The same increments: solve's projected Euler = torchsde's Euler projected after each step."""
    B, T = 3, 1.0
    sde = _sde(_noise(kind, d))
    tsde = to_torchsde(sde, (B, N, d), seed=seed)
    X0 = uniform(B, N, d, seed=seed)
    bm = _bm(tsde, T, seed)
    ys = sdeint_projected(tsde, tsde.flatten(X0), torch.linspace(0, T, steps + 1, dtype=F64), bm)
    path = from_torchsde_brownian(bm, tsde.path_shape, steps, 0.0, T)
    ds = sf.solve(sde, X0, T, steps, seed=seed + 1, path=path, save=sf.SaveAt(stats=(), tokens_every=1))
    ours = torch.as_tensor(ds.X.values).transpose(0, 1)  # (snapshot, batch, N, d)
    theirs = tsde.unflatten(ys)
    assert theirs.shape == ours.shape == (steps + 1, B, N, d)
    assert float((ours - theirs).abs().max()) < PATH_TOL
    assert float((theirs.norm(dim=-1) - 1).abs().max()) < 1e-14


def test_plain_torchsde_euler_leaves_the_sphere_and_the_projection_keeps_it():
    """Without the projection torchsde's Euler drifts off the sphere by far more than rounding
    (the diffusion is tangent, so each step adds ~|ΔW|² to |x|²): the projection matters."""
    B, N, d, T, steps = 8, 4, 3, 1.0, 20
    sde = _sde(_noise("exact", d))
    tsde = to_torchsde(sde, (B, N, d))
    X0 = uniform(B, N, d, seed=2)
    ts = torch.linspace(0, T, steps + 1, dtype=F64)
    bm = _bm(tsde, T, 3)
    plain = tsde.unflatten(torchsde.sdeint(tsde, tsde.flatten(X0), ts, bm=bm, method="euler", dt=T / steps))
    projected = tsde.unflatten(sdeint_projected(tsde, tsde.flatten(X0), ts, bm))
    assert float((plain.norm(dim=-1) - 1).abs().max()) > 1e-3
    assert float((projected.norm(dim=-1) - 1).abs().max()) < 1e-14


class _Increments:
    """A diffrax-style path: ``evaluate(t0, t1)`` is W(t1) − W(t0), from fixed normals on a grid."""

    def __init__(self, normals: np.ndarray, T: float):
        self.W = np.concatenate([np.zeros((1, *normals.shape[1:])), np.cumsum(normals, 0)]) * math.sqrt(T / len(normals))
        self.dt = T / len(normals)

    def evaluate(self, t0: float, t1: float) -> np.ndarray:
        return self.W[round(t1 / self.dt)] - self.W[round(t0 / self.dt)]


def test_a_diffrax_style_path_drives_solve_as_its_normals_do():
    B, N, d, T, steps = 2, 3, 3, 0.5, 8
    normals = torch.randn(steps, B, N, d, generator=torch.Generator().manual_seed(4), dtype=F64)
    path = from_torchsde_brownian(_Increments(normals.numpy(), T), (B, N, d), steps, 0.0, T)
    sde, X0 = _sde(_noise("exact", d)), uniform(B, N, d, seed=5)
    a = sf.solve(sde, X0, T, steps, seed=0, path=path).X_final.values
    b = sf.solve(sde, X0, T, steps, seed=1, path=BrownianPath.from_normals(normals)).X_final.values
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
    c = sf.solve(sde, X0, T, steps, seed=0).X_final.values  # normals from the generator: another path
    assert np.abs(a - c).max() > 1e-3


def test_a_path_of_parts_is_read_on_a_coarser_grid():
    """GivenPath step k of n: q^{−1/2} Σ of its q fine normals per part, as BrownianPath's."""
    from stochformer.interop import GivenPath
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 2, 5, 3, generator=g, dtype=F64), torch.randn(8, 2, 1, 3, generator=g, dtype=F64)
    path = GivenPath([a, b])
    assert path.parts == [(2, 5, 3), (2, 1, 3)]
    za, zb = path.increment(1, 4)
    torch.testing.assert_close(za, (a[2] + a[3]) / math.sqrt(2), rtol=0, atol=1e-15)
    torch.testing.assert_close(zb, (b[2] + b[3]) / math.sqrt(2), rtol=0, atol=1e-15)
    torch.testing.assert_close(path.increment(5, 8)[0], a[5], rtol=0, atol=0)
    with pytest.raises(ValueError, match="3 steps do not divide"):
        path.increment(0, 3)


@pytest.mark.slow  # importing JAX and tracing the tree: about 35 s on 2 shared cores
def test_a_real_diffrax_path_is_read():
    """diffrax's VirtualBrownianTree (float32, JAX's default) read through ``evaluate``."""
    diffrax = pytest.importorskip("diffrax")
    jax = pytest.importorskip("jax")
    bm = diffrax.VirtualBrownianTree(0.0, 1.0, tol=1e-3, shape=(2, 6), key=jax.random.PRNGKey(0))
    path = from_torchsde_brownian(bm, (2, 2, 3), 4)
    inc = np.asarray(bm.evaluate(0.25, 0.5), dtype=np.float64).reshape(2, 2, 3)
    np.testing.assert_allclose(path.increment(1, 4)[0].numpy(), inc / math.sqrt(0.25), rtol=1e-12)
    assert path.dtype == torch.float64 and float(path.increment(1, 4)[0].abs().max()) > 0


# --------------------------------------------------------------------------- the law

B_LAW, T_LAW, STEPS_LAW = 2000, 1.0, 10
X0_LAW = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], dtype=F64).expand(B_LAW, 2, 3).contiguous()


def _statistics(X: torch.Tensor) -> list[tuple[float, float]]:
    """E⟨x_1, x_2⟩ (the pair's overlap) and E⟨x_1, x_1(0)⟩ (the one-point motion, e^{−κ(1)(d−1)t/2}
    without attention) over the samples, each with its standard error."""
    out = []
    for c in ((X[:, 0] * X[:, 1]).sum(-1), (X[:, 0] * X0_LAW[:, 0]).sum(-1)):
        out.append((float(c.mean()), float(c.std() / math.sqrt(len(c)))))
    return out


@pytest.fixture(scope="module")
def ours() -> list[tuple[float, float]]:
    sde = _sde(ExactField(NoiseKernel("relu", 3, scale=0.5)))
    ds = sf.solve(sde, X0_LAW, T_LAW, STEPS_LAW, seed=11, save=sf.SaveAt(stats=()))
    return _statistics(torch.as_tensor(ds.X_final.values))


def _z(ours: list[tuple[float, float]], sde: LimitSDE) -> list[float]:
    """(torchsde's − solve's statistic at T) / the SE of the difference, for both statistics;
    torchsde on its own Brownian motion (independent of solve's normals)."""
    tsde = to_torchsde(sde, tuple(X0_LAW.shape))
    ys = sdeint_projected(tsde, tsde.flatten(X0_LAW), torch.linspace(0, T_LAW, STEPS_LAW + 1, dtype=F64),
                          _bm(tsde, T_LAW, 7))
    theirs = _statistics(tsde.unflatten(ys[-1]))
    return [(a[0] - b[0]) / math.hypot(a[1], b[1]) for a, b in zip(theirs, ours)]


def test_torchsde_has_the_law_of_solve(ours):
    """From orthogonal tokens, at T = 1: E⟨x_1, x_2⟩ ≈ 0.545 ± 0.005 and E⟨x_1, x_1(0)⟩ ≈
    0.915 ± 0.002 by solve; torchsde's within 4.5 SE of each (measured z = −0.10, 0.15)."""
    z = _z(ours, _sde(ExactField(NoiseKernel("relu", 3, scale=0.5))))
    assert max(map(abs, z)) < SIGMAS, z


@pytest.mark.parametrize("wrong", [
    pytest.param(dict(gamma=-1.0, scale=0.5), id="attention-sign-flipped"),  # measured z = −136, 12
    pytest.param(dict(gamma=1.0, scale=1.0), id="kernel-scaled-4x"),  # κ ∝ scale²; measured z = −4.5, −26
])
def test_a_wrong_model_is_rejected_by_the_same_check(ours, wrong):
    z = _z(ours, _sde(ExactField(NoiseKernel("relu", 3, scale=wrong["scale"])), gamma=wrong["gamma"]))
    assert max(map(abs, z)) > SIGMAS, z


# --------------------------------------------------------------------------- the adapter's contract

def test_the_dense_diffusion_is_the_product():
    B, N, d = 2, 3, 3
    for noise in (_noise("exact", d), RandomFeatureField("relu", 8, sigma_W=0.3)):
        tsde = to_torchsde(_sde(noise), (B, N, d), dense=True)
        y = tsde.flatten(uniform(B, N, d, seed=1))
        v = torch.randn(B, tsde.brownian_size, generator=torch.Generator().manual_seed(2), dtype=F64)
        G = tsde.g(0.0, y)
        assert G.shape == (B, N * d, tsde.brownian_size)
        torch.testing.assert_close(torch.einsum("bij,bj->bi", G, v), tsde.g_prod(0.0, y, v), rtol=0, atol=1e-14)
    assert tsde.brownian_size == (8 + 1) * d  # B^k and B^0


def test_to_torchsde_refuses_what_it_cannot_write():
    with pytest.raises(ValueError, match="sde.noise: to_torchsde takes an ExactField, a RandomFeatureField or None"):
        to_torchsde(LimitSDE(noise=RandomMLP(8)), (2, 3, 3))
    with pytest.raises(ValueError, match=r"shape: must be \(batch, N, d\)"):
        to_torchsde(_sde(_noise("exact", 3)), (2, 3))
    with pytest.raises(TypeError, match="sde: must be a LimitSDE"):
        to_torchsde(object(), (2, 3, 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape: the parts"):
        from_torchsde_brownian(_Increments(np.zeros((4, 2, 3)), 1.0), [(2, 1, 3), (1, 1, 3)], 4)
    with pytest.raises(ValueError, match="bm: an increment has 6 entries"):
        from_torchsde_brownian(_Increments(np.zeros((4, 2, 3)), 1.0), (2, 2, 3), 4)


def test_a_missing_torchsde_names_the_extra(monkeypatch):
    tsde = to_torchsde(_sde(_noise("exact", 3)), (1, 2, 3))
    monkeypatch.setitem(sys.modules, "torchsde", None)
    with pytest.raises(MissingExtraError, match=r"torchsde.*stochformer\[interop\]"):
        sdeint_projected(tsde, tsde.flatten(uniform(1, 2, 3, seed=0)), torch.linspace(0, 1, 3), None)


# --------------------------------------------------------------------------- output="torch"

def test_torch_output_is_the_dataset_as_tensors():
    sde, X0 = _sde(_noise("exact", 3)), uniform(2, 4, 3, seed=0)
    save = sf.SaveAt(every=2, tokens_every=5, fn=lambda X: {"first": X[:, 0]})
    ds = sf.solve(sde, X0, 1.0, 10, seed=3, save=save)
    out = sf.solve(sde, X0, 1.0, 10, seed=3, save=save, output="torch")
    assert isinstance(ds, xr.Dataset) and isinstance(out, dict)
    assert set(out) == set(ds.variables)
    for name, value in out.items():
        assert torch.is_tensor(value) and tuple(value.shape) == ds[name].shape, name
        np.testing.assert_allclose(value.detach().numpy(), ds[name].values, rtol=0, atol=1e-15)
    # the default is the dataset, X0 detached, whether or not it requires grad
    again = sf.solve(sde, X0.clone().requires_grad_(True), 1.0, 10, seed=3, save=save)
    assert isinstance(again, xr.Dataset)
    np.testing.assert_array_equal(again.X_final.values, ds.X_final.values)


def test_a_bad_output_is_one_error_naming_the_choices():
    with pytest.raises(ValueError, match=r"output: .*'xarray'.*'torch'"):
        sf.solve(_sde(None), uniform(1, 2, 3, seed=0), 1.0, 2, seed=0, output="numpy")  # type: ignore[call-overload]


@pytest.mark.parametrize("noise", [ExactField(NoiseKernel("erf", 3, scale=0.7)), RandomFeatureField("tanh", 32, scale=0.7),
                                   ExactField(NoiseKernel("relu", 3, scale=0.7)), ExactField(NoiseKernel("tanh", 3, scale=0.7))],
                         ids=["exact-erf", "features-tanh", "exact-relu", "exact-tanh-chebyshev"])
def test_gradients_flow_with_torch_output(noise):
    """d/dε E⟨x_1, x_2⟩_T along X0(ε) = LN(X0 + ε V), V tangent: autograd against a central
    difference (ε = 1e-5: truncation ~ε² · 1e-1, rounding ~1e-16/ε; measured 1.8e-10 and
    1.3e-10, 8.0e-11 for the exact ReLU kernel, 1.7e-10 for tanh's Chebyshev kernel), the same
    seed (same normals). Smooth parts: a ReLU's kink crossed within ±ε
    breaks the difference quotient, not autograd."""
    sde = _sde(noise)
    X0 = uniform(4, 3, 3, seed=1)
    if isinstance(noise, RandomFeatureField):  # drawn once before the runs: each run then reads the same normals
        noise.draw(4, 3, torch.Generator().manual_seed(0), F64, "cpu")
    V = torch.randn(X0.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
    V = V - (V * X0).sum(-1, keepdim=True) * X0

    def statistic(X):
        out = sf.solve(sde, X, 1.0, 8, seed=5, save=sf.SaveAt(stats=()), output="torch")
        XT = out["X_final"]
        return (XT[:, 0] * XT[:, 1]).sum(-1).mean()

    X = X0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(statistic(X), X)
    assert bool(torch.isfinite(grad).all())
    eps = 1e-5
    with torch.no_grad():
        fd = (statistic(sf.sphere.normalize(X0 + eps * V)) - statistic(sf.sphere.normalize(X0 - eps * V))) / (2 * eps)
    assert abs(float((grad * V).sum()) - float(fd)) < 1e-6 * max(1.0, abs(float(fd)))
    assert abs(float(fd)) > 1e-4  # the statistic does depend on X0


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["relu", "tanh", "gelu"]), st.integers(2, 6), st.integers(2, 5), st.integers(0, 10**6))
def test_the_differentiable_kernel_has_the_same_values(activation, N, d, seed):
    """K(X) computed for autograd (the diagonal cut from the graph, Clenshaw out of place) equals
    the buffered evaluation bit for bit, and its gradient is finite (ReLU: arccos has slope ∞ at 1)."""
    field = ExactField(NoiseKernel(activation, d, scale=0.7))
    X = uniform(2, N, d, seed=seed)
    plain = field.covariance(X)
    Xg = X.clone().requires_grad_(True)
    K = field.covariance(Xg)
    assert torch.equal(K.detach(), plain)
    (grad,) = torch.autograd.grad(K.sum(), Xg)
    assert bool(torch.isfinite(grad).all())
