"""The limit SDE (SPEC §3): noise sources, integrators, unit norm, strong order, its reset and Itô
correction, and the law of the deep wide transformer against the SDE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.config.build import make_model
from stochformer.model.attention import SoftmaxAttention
from stochformer.config import RunConfig, build_config
from stochformer.experiments.simulate import run_simulate
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import ExactField, RandomFeatureField, RandomMLP, sqrt_psd
from stochformer.model.sde import INTEGRATORS, LimitSDE, StratonovichHeun
from stochformer.integrate import SaveAt, solve
from stochformer.core.sphere import normalize, uniform
from stochformer.model.transformer import Transformer

from conftest import close

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one torch thread is faster and steadier than two on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _two_points(d: int, cosine: float, n: int) -> torch.Tensor:
    x = torch.zeros(2, d, dtype=F64)
    x[0, 0], x[1, 0], x[1, 1] = 1.0, cosine, math.sqrt(1 - cosine**2)
    return x.expand(n, 2, d).clone()


SOURCES = {
    "exact": lambda k: ExactField(k),
    "mlp_gaussian": lambda k: RandomMLP(8, k.activation, sigma_U=k.sigma_U, sigma_W=k.sigma_W, mode="gaussian"),
    "mlp_weights": lambda k: RandomMLP(8, k.activation, sigma_U=k.sigma_U, sigma_W=k.sigma_W, mode="weights"),
    "random_features": lambda k: RandomFeatureField(k.activation, features=8, sigma_U=k.sigma_U, sigma_W=k.sigma_W),
}


@pytest.mark.parametrize("source", [*SOURCES, "mlp_coupled"])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_field_covariance_at_two_points_is_kappa(source, activation):
    """E[ΔW^a(x) ΔW^b(y)] = dt κ(⟨x,y⟩) δ_ab for every source (exact for any width: the MLP and the
    random features average over their weights/features, one draw per sample). Tolerance: 5 SE of
    the sample mean of the per-sample products."""
    d, n, dt, cos = 3, 40000, 0.25, 0.3
    kernel = NoiseKernel(activation, d, sigma_U=0.3, sigma_W=0.2)
    X = _two_points(d, cos, n)
    g = _gen(1)
    if source == "mlp_coupled":  # K_m^{1/2} Ξ with the symmetric root, driven by given normals
        noise = SOURCES["mlp_gaussian"](kernel)
        path = BrownianPath.from_normals(torch.randn(1, n, 2, d, generator=g, dtype=F64))
        dW = noise.increment(X, dt, Draws(g, path))
    elif source == "exact":  # one K for the two points, broadcast over n draws of Ξ
        path = BrownianPath.from_normals(torch.randn(1, n, 2, d, generator=g, dtype=F64))
        dW = ExactField(kernel).increment(X[:1], dt, Draws(g, path))
    else:
        noise = SOURCES[source](kernel)
        noise.reset(n, d, g, F64, "cpu")
        dW = noise.increment(X, dt, g)
    products = {  # per-sample estimators, each averaged over the d (or d−1) component pairs
        "xy": (dW[:, 0] * dW[:, 1]).mean(-1) / dt,
        "xx": (dW[:, 0] ** 2).mean(-1) / dt,
        "x1y2": (dW[:, 0, 0] * dW[:, 1, 1]) / dt,
    }
    expected = {"xy": float(kernel.kappa(cos)), "xx": kernel.kappa1, "x1y2": 0.0}
    for name, p in products.items():
        se = float(p.std() / math.sqrt(n))
        assert abs(float(p.mean()) - expected[name]) < 5 * se, (name, float(p.mean()), expected[name], se)


def test_sqrt_psd_robust_when_tokens_synchronise():
    """Synchronised tokens: K(X) is (numerically) rank one; the symmetric root has no NaN, is
    symmetric, reproduces K to rounding, and the field increments of coinciding tokens coincide."""
    d, N = 4, 6
    g = _gen(2)
    center = normalize(torch.randn(1, 1, d, generator=g, dtype=F64))
    X = normalize(center + 1e-9 * torch.randn(3, N, d, generator=g, dtype=F64))
    field = ExactField(NoiseKernel("relu", d))
    K = field.covariance(X)
    for method in ("symmetric", "cholesky"):
        S = sqrt_psd(K, method)
        assert torch.isfinite(S).all()
        assert torch.allclose(S @ S.transpose(-1, -2), K, atol=1e-12)
    S = sqrt_psd(K)
    assert torch.allclose(S, S.transpose(-1, -2), atol=1e-14)
    dW = field.increment(X, 0.1, g)
    assert torch.isfinite(dW).all()
    assert float((dW - dW[:, :1]).abs().max()) < 1e-6 * float(dW.abs().max())


@pytest.mark.parametrize("activation, sigma_U", [("tanh", 0.0), ("silu", 0.3), ("gelu", 0.1), ("relu", 0.2)])
def test_exact_field_covariance_equals_kappa(activation, sigma_U):
    """ExactField's K (Chebyshev interpolant of κ for activations without a closed form) equals
    NoiseKernel.kappa on the Gram matrix to 1e-12, including cosines ±1."""
    kernel = NoiseKernel(activation, 5, sigma_U, 0.1)
    X = uniform(3, 9, 5, generator=_gen(8))
    X[:, 1], X[:, 2] = X[:, 0], -X[:, 0]
    G = (X @ X.transpose(-1, -2)).clamp(-1, 1)
    assert torch.allclose(ExactField(kernel).covariance(X), kernel.kappa(G), rtol=0, atol=1e-12 * kernel.kappa1)


@pytest.mark.parametrize("integrator", sorted(INTEGRATORS))
def test_sde_keeps_unit_norm(integrator):
    """Every SDE step (built from a RunConfig, attention on, biases on) returns unit rows."""
    cfg = build_config({}, ["dynamics=sde", f"integrator={integrator}", "N=6", "d=4", "L=50", "T=5",
                            "sigma_U=0.5", "sigma_W=0.5", "batch=4"])
    model = make_model(cfg)
    g = _gen(3)
    X = uniform(4, 6, 4, generator=g)
    for _ in range(cfg.L):
        X = model.step(X, cfg.dt, g)
        assert float((torch.linalg.vector_norm(X, dim=-1) - 1).abs().max()) < 1e-12


def _strong_errors(name: str, X0: torch.Tensor, xi: torch.Tensor, levels: list[int], T: float) -> np.ndarray:
    """Per-sample squared errors (levels, batch) at time T against the finest level, one Brownian
    path (normals ``xi`` at the finest level, aggregated for coarser steps)."""
    d = X0.shape[-1]
    kernel = NoiseKernel("relu", d)
    sde = LimitSDE(SoftmaxAttention(1.0, 1.0), ExactField(kernel), INTEGRATORS[name], kernel.kappa1)
    path = BrownianPath.from_normals(xi)
    end = lambda n: torch.from_numpy(solve(sde, X0, T, n, SaveAt(stats=()), seed=0, path=path)["X_final"].values)  # noqa: E731
    ref = end(xi.shape[0])
    out = []
    for n in levels:
        out.append(((end(n) - ref) ** 2).sum(-1).mean(-1).numpy())
    return np.asarray(out), ref


def test_strong_order_of_each_integrator():
    """Strong order, diffrax-style: RMS error at T against a 2048-step reference on the same path,
    for 8..64 steps; the fitted log–log slope (bootstrap SE over samples) is the order. Theory: ½
    for both (non-commutative noise); we allow 0.1 for pre-asymptotic curvature plus 4 SE. Heun's
    advantage: its mean squared error is below Euler's, by more than 4 SE of the paired ratio."""
    B, N, d, T = 48, 3, 3, 0.5
    g = _gen(4)
    X0 = uniform(B, N, d, generator=g)
    xi = torch.randn(2048, B, N, d, generator=g, dtype=F64)
    levels = [8, 16, 32, 64]
    rng = np.random.default_rng(0)
    idx = rng.integers(0, B, size=(300, B))
    mse, refs = {}, {}
    for name in ("euler", "heun"):
        mse[name], refs[name] = _strong_errors(name, X0, xi, levels, T)
        h = np.log(T / np.asarray(levels))
        slope = lambda e: np.polyfit(h, 0.5 * np.log(e), 1)[0]  # noqa: E731  (RMS error against h)
        order = slope(mse[name].mean(-1))
        se = np.std([slope(mse[name][:, i].mean(-1)) for i in idx], ddof=1)
        assert abs(order - INTEGRATORS[name].strong_order) < 0.1 + 4 * se, (name, order, se)  # the stated order
        assert se < 0.1, (name, se)
    ratio = lambda i: mse["heun"][:, i].mean() / mse["euler"][:, i].mean()  # noqa: E731
    r, r_se = ratio(slice(None)), np.std([ratio(i) for i in idx], ddof=1)
    assert r + 4 * r_se < 1.0, (r, r_se)
    # both converge to the same SDE: the references differ by less than the coarse errors
    gap = float(((refs["heun"] - refs["euler"]) ** 2).sum(-1).mean())
    assert gap < 0.1 * mse["euler"][-1].mean(), (gap, mse["euler"][-1].mean())


@pytest.mark.parametrize("given", [True, False])
def test_brownian_path_coarse_steps_keep_unit_variance_and_the_path(given):
    """A path seen on a coarser grid: unit-variance normals (5 SE of the sample variance), the
    same endpoint Σ√h ξ at every level, and the same normals when read again (replayed)."""
    g = _gen(5)
    if given:
        xi = torch.randn(64, 1000, generator=g, dtype=F64)
        path = BrownianPath.from_normals(xi)
    else:
        path = BrownianPath((1000,), 64, seed=5)
        xi = torch.stack([path.increment(k, 64)[0] for k in range(64)])
    agg = torch.stack([path.increment(k, 8)[0] for k in range(8)])
    assert agg.shape == (8, 1000)
    assert abs(float(agg.var()) - 1.0) < 5 * math.sqrt(2 / agg.numel())
    assert torch.allclose(agg.sum(0) * math.sqrt(8), xi.sum(0))
    assert torch.equal(path.increment(3, 64)[0], xi[3])
    with pytest.raises(ValueError, match="divide"):
        path.increment(0, 7)


def test_brownian_path_read_in_lockstep_draws_each_fine_step_once(monkeypatch):
    """Several models stepped together read each step in turn; past the in-memory cache (forced here)
    every fine normal is still drawn once, not replayed from the start for every second reader
    (which made the convergence experiment quadratic in L), and every reader gets the same normals."""
    from stochformer.core import brownian

    monkeypatch.setattr(brownian, "_CACHE_ENTRIES", 0)
    path = BrownianPath((3, 2), 64, seed=1)
    fine = []
    draw = path._fine
    monkeypatch.setattr(path, "_fine", lambda s: fine.append(s) or draw(s))
    reads = [[path.increment(k, 32)[0] for _ in range(3)] for k in range(32)]
    assert fine == list(range(64))
    assert all(torch.equal(r[0], r[1]) and torch.equal(r[0], r[2]) for r in reads)
    again = BrownianPath((3, 2), 64, seed=1)
    assert all(torch.equal(again.increment(k, 32)[0], reads[k][0]) for k in range(32))


def test_heun_does_not_reroot_the_field():
    """The Heun step evaluates the noise once (one square root per step)."""
    calls = []

    class Counting(ExactField):
        def increment(self, X, dt, draws):
            calls.append(1)
            return super().increment(X, dt, draws)

    k = NoiseKernel("relu", 3)
    sde = LimitSDE(SoftmaxAttention(), Counting(k), StratonovichHeun())
    sde.step(uniform(2, 4, 3, generator=_gen(6)), 0.1, _gen(7))
    assert len(calls) == 1


def test_law_of_deep_wide_transformer_matches_sde():
    """E⟨x₁, x₂⟩ at T for a pair started at cosine 0.5 (attention on): the transformer (L = 100,
    m = 256) and the limit SDE (Heun, 100 steps), independent runs of 3000 samples each, agree
    within 4 SE of the difference (their biases O(1/L + 1/m) are below 0.005 here, SE ≈ 0.01)."""
    base = ["N=2", "d=3", "T=1", "L=100", "m=256", "batch=3000", "init.kind=pair", "init.cosine=0.5",
            "sigma_U=0.5", "record_every=100"]
    stats = {}
    for dyn, seed in (("transformer", 11), ("sde", 12)):
        res = run_simulate(build_config({}, base + [f"dynamics={dyn}", f"seed={seed}"]))
        c = res.data["mean_cosine"].values[:, -1]
        stats[dyn] = (c.mean(), c.std(ddof=1) / math.sqrt(len(c)))
    # the statistic moved: the test can tell the dynamics from no dynamics
    assert abs(stats["sde"][0] - 0.5) > 10 * stats["sde"][1]
    diff = stats["transformer"][0] - stats["sde"][0]
    se = math.hypot(stats["transformer"][1], stats["sde"][1])
    assert abs(diff) < 4 * se, (stats, diff, se)


def test_unknown_integrator_is_a_config_error():
    from stochformer.config import ConfigError

    with pytest.raises(ConfigError, match="integrator"):
        build_config({}, ["integrator=geodesic"])
    assert RunConfig().integrator == "heun"


# ----------------------------------------------------------------- reset and the Ito correction


def test_limit_sde_reset_and_ito_correction(replay):
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


@pytest.mark.parametrize("kind", ["LimitSDE", "Transformer"])
def test_a_run_refuses_parts_built_for_other_tokens_naming_the_part(kind):
    """The models' reset checks each part against the run's tokens before any draw: an attention
    or a noise built for another d, or an attention matrix of another dtype, is one error naming
    ``attention`` or ``noise``."""
    from stochformer.model.kernel import NoiseKernel
    from stochformer.model.noise import ExactField
    from stochformer.model.sde import LimitSDE
    from stochformer.model.transformer import Transformer

    model = {"LimitSDE": LimitSDE, "Transformer": Transformer}[kind]
    g = torch.Generator().manual_seed(0)
    cases = [
        (model(SoftmaxAttention(A=torch.eye(3, dtype=torch.float64)), ExactField(NoiseKernel("relu", 4))),
         r"^attention: SoftmaxAttention is built for d = 3, the tokens have d = 4$"),
        (model(SoftmaxAttention(), ExactField(NoiseKernel("relu", 3))),
         r"^noise: ExactField is built for d = 3, the tokens have d = 4$"),
        (model(SoftmaxAttention(A=torch.eye(4, dtype=torch.float32)), None),
         r"^attention: SoftmaxAttention\.A is float32 on cpu, the tokens float64 on cpu; give them the same dtype"),
    ]
    for m, message in cases:
        with pytest.raises(ValueError, match=message):
            m.reset(2, 4, g, torch.float64, "cpu")
    model(SoftmaxAttention(A=torch.eye(4, dtype=torch.float64)), ExactField(NoiseKernel("relu", 4))).reset(
        2, 4, g, torch.float64, "cpu")
