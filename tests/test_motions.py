"""The one- and two-point motions of the noise alone (stochformer.model.two_point) against the transformer
and the limit SDE: ReLU, d = 4, σ_U = σ_W = 0.5 (κ(1) = 0.5), no attention, T = 1, L = 100."""

import math

import pytest
import torch

from stochformer.config.build import initial_tokens, make_kernel, make_model
from stochformer.config import InitConfig, build_config
from stochformer.model.two_point import one_point_mean, simulate_two_point, two_point_coefficients
from stochformer.core.runtime import make_generator
from stochformer.integrate import SaveAt, solve

BASE = {"d": 4, "activation": "relu", "sigma_U": 0.5, "sigma_W": 0.5, "attention": False, "T": 1.0, "L": 100, "m": 64}


def test_two_point_coefficients_near_synchronisation_give_lambda_bar_and_the_log_variance():
    k = make_kernel(build_config(BASE))
    h = 1e-8  # the kinked ReLU kernel's (1 − u)^{3/2} term shifts the rate by O(√h)
    b, a = two_point_coefficients(k, torch.tensor([1 - h], dtype=torch.float64))
    lam_bar = (k.d - 1) * k.kappa1_prime - (k.d - 3) * k.kappa1
    assert float(-b[0] / h) == pytest.approx(lam_bar, rel=1e-4)  # d(1 − u) = λ̄ (1 − u) dt
    assert float(a[0] / h**2) == pytest.approx(4 * (k.kappa1 + k.kappa1_prime), rel=1e-4)


@pytest.fixture(scope="module")
def reference():
    """The scalar diffusion from u0 = 0.5, 400 steps, 20000 paths: u_T."""
    return simulate_two_point(make_kernel(build_config(BASE)), 0.5, 1.0, 400, 20000, seed=0)


@pytest.mark.parametrize("dynamics", ["sde", "transformer"])
def test_one_and_two_point_laws_match_the_motions(dynamics, reference):
    # 2000 pairs at cosine 0.5. One point: E⟨x₀, X_T⟩ = e^{−κ(1)(d−1)T/2} = 0.4724. Two points: mean of
    # u_T and P(u_T > 0.9) against the scalar reference; all within 4 combined SE.
    cfg = build_config({**BASE, "dynamics": dynamics, "N": 2, "batch": 2000})
    g = make_generator(1)
    X0 = initial_tokens(InitConfig(kind="pair", cosine=0.5), cfg.batch, 2, cfg.d, g)
    X = torch.from_numpy(solve(make_model(cfg), X0, cfg.T, cfg.L, SaveAt(stats=()), generator=g)["X_final"].values)
    one = (X0[:, 0] * X[:, 0]).sum(-1).numpy()
    assert abs(one.mean() - one_point_mean(0.5, 4, 1.0)) < 4 * one.std(ddof=1) / math.sqrt(len(one))
    u = (X[:, 0] * X[:, 1]).sum(-1).numpy()

    def se(x):
        return x.std(ddof=1) / math.sqrt(len(x))

    assert abs(u.mean() - reference.mean()) < 4 * math.hypot(se(u), se(reference))
    p, q = (u > 0.9).astype(float), (reference > 0.9).astype(float)
    assert 0.2 < q.mean() < 0.6 and abs(p.mean() - q.mean()) < 4 * math.hypot(se(p), se(q))
    # a wrong model fails the same check: the diffusion without its drift's κ(u) term
    assert abs(0.5 * math.exp(-0.5 * 3) - u.mean()) > 4 * math.hypot(se(u), se(reference))


def test_run_motions_measures_both_dynamics_and_its_rows_hold():
    # The experiment behind the report section, at reduced sizes: 1000 pairs, 50 steps; every row
    # holds (the same law as above), and the configuration refuses attention.
    from stochformer.config import ConfigError, validate
    from stochformer.experiments.motions import MotionsConfig, run_motions
    from stochformer.report.sections.paper import motion_rows

    cfg = validate(MotionsConfig, {"model": {"batch": 1000, "L": 50, "seed": 3}, "reference_steps": 200,
                                   "reference_paths": 10000, "bootstrap": 100})
    assert (cfg.model.d, cfg.model.N, cfg.model.attention, cfg.model.sigma_U) == (4, 2, False, 0.5)
    res = run_motions(cfg)
    assert set(res.measured) == {"sde", "transformer"} and res.times[-1] == pytest.approx(1.0)
    assert res.predicted["one_point_rate"] == pytest.approx(-0.75)
    rows = motion_rows(res.measured, res.reference, res.predicted)
    assert len(rows) == 8 and all(r.verdict == "holds" for r in rows), [(r.quantity, r.measured, r.ci) for r in rows]
    for model, message in (({"attention": True}, "model.attention: motions needs False"),
                           ({"N": 3}, "model.N: motions needs 2"), ({"dynamics": "sde"}, "model.dynamics: has no effect"),
                           ({"noise_scale": 0.0}, "model.mlp: motions needs the MLP noise")):
        with pytest.raises(ConfigError, match=message):
            validate(MotionsConfig, {"model": model})


@pytest.mark.parametrize("precision", [{"dtype": "float32"}, {"draw_precision": "float32"}])
def test_one_point_motion_in_float32(precision, float32_reference):
    """One token's drift: E⟨x₀, x_T⟩ = e^{−κ(1)(d−1)T/2} (the Itô term of SPEC §3), over 256 samples
    of 8 tokens (averaged within a sample), T = 1, L = 100: within 5 SE (the O(Δt) bias is ~1e-3),
    with float32 tokens or float32 draws."""
    from stochformer.core.sphere import uniform
    from stochformer.model.kernel import NoiseKernel

    cfg = float32_reference.with_updates(N=8, batch=256, T=1.0, L=100, **precision)
    dtype = torch.float32 if cfg.dtype == "float32" else torch.float64
    gen = make_generator(7)
    X0 = uniform(cfg.batch, cfg.N, cfg.d, generator=gen, dtype=dtype)
    ds = solve(make_model(cfg, dtype), X0, cfg.T, cfg.L, SaveAt(stats=()), generator=gen)
    c = (X0.double() * torch.from_numpy(ds["X_final"].values)).sum(-1).mean(-1)
    kappa = NoiseKernel("relu", cfg.d, cfg.sigma_U, cfg.sigma_W).kappa1
    se = float(c.std()) / math.sqrt(cfg.batch)
    assert abs(float(c.mean()) - math.exp(-kappa * (cfg.d - 1) * cfg.T / 2)) < 5 * se
    assert abs(float(c.mean()) - math.exp(-kappa * cfg.d * cfg.T / 2)) > 5 * se  # d instead of d − 1: seen
