"""Systems of different sizes coupled through the exact field (``model.grouped``; ``chaos`` with
``model.noise = "exact"``): pathwise identities against a direct implementation, the 1/N decay of
the coupled error, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from stochformer.core.brownian import Draws
from stochformer.config.build import make_grouped_particles
from stochformer.cli import main
from stochformer.config import ConfigError, RunConfig, build_config
from stochformer.experiments.chaos import ChaosConfig, run_chaos
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.grouped import GroupedAttention, JointField
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import ExactField
from stochformer.model.sde import INTEGRATORS, LimitSDE
from stochformer.integrate import SaveAt, solve
from stochformer.core.sphere import uniform

D = 3
KERNEL = NoiseKernel("relu", D, 0.0, 0.0, 1.0)
ATTENTION = SoftmaxAttention(beta=1.0, gamma=1.0)


def _grouped(sizes, integrator="euler") -> LimitSDE:
    return LimitSDE(GroupedAttention(ATTENTION, tuple(sizes)), JointField(ExactField(KERNEL)), INTEGRATORS[integrator],
                    KERNEL.kappa1)


def _cloud(batch, n, seed=0) -> torch.Tensor:
    return uniform(batch, n, D, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("integrator", ["euler", "heun"])
def test_a_system_coupled_with_an_identical_copy_evolves_identically(integrator):
    X = _cloud(2, 12)
    ds = solve(_grouped([12, 12], integrator), torch.cat([X, X], dim=1), 1.0, 20, SaveAt(stats=(), tokens_every=1), seed=3)
    path = ds["X"].values  # (sample, step, token, dim)
    assert np.abs(path[:, :, :12] - path[:, :, 12:]).max() <= 1e-12
    assert np.abs(path[:, -1] - path[:, 0]).max() > 0.1  # the tokens moved


def _slow_joint_increment(X: torch.Tensor, xi: torch.Tensor, dt: float) -> np.ndarray:
    """√dt S Ξ for one cloud X (n, d), entry by entry: S the lower Cholesky factor of
    K + n_u ε max K_ii I over the distinct points (in order of first occurrence), each point given
    the value of its distinct point, driven by the normals of the first occurrences."""
    first: list[int] = []
    where = []
    for i in range(X.shape[0]):
        match = [j for j, k in enumerate(first) if torch.equal(X[i], X[k])]
        where.append(match[0] if match else len(first))
        if not match:
            first.append(i)
    n = len(first)
    K = np.array([[float(KERNEL.kappa(min(1.0, max(-1.0, float(X[a] @ X[b]))))) for b in first] for a in first])
    K += np.eye(n) * n * np.finfo(float).eps * K.diagonal().max()
    return math.sqrt(dt) * (np.linalg.cholesky(K) @ xi[first].numpy())[where]


@pytest.mark.parametrize("integrator", ["euler", "heun"])
@pytest.mark.parametrize("subset", [False, True])
def test_the_grouped_step_equals_per_system_steps_with_the_joint_normals(integrator, subset):
    """One step of the concatenated cloud against each system stepped alone with its rows of the
    joint increment (slow implementation above); ``subset``: the second system is the first tokens
    of the first (coincident points, as when chaos starts an N-system)."""
    big = _cloud(2, 7, seed=1)
    systems = [big, big[:, :3].clone(), _cloud(2, 4, seed=2)] if subset else [big, _cloud(2, 3, seed=2), _cloud(2, 4, seed=4)]
    sizes = [s.shape[1] for s in systems]
    cloud, dt = torch.cat(systems, dim=1), 0.05
    grouped = _grouped(sizes, integrator).step(cloud, dt, Draws(torch.Generator().manual_seed(5)))
    xi = torch.randn(cloud.shape, generator=torch.Generator().manual_seed(5), dtype=cloud.dtype)
    alone = LimitSDE(ATTENTION, ExactField(KERNEL), INTEGRATORS[integrator], KERNEL.kappa1)
    for b in range(cloud.shape[0]):
        dW = torch.from_numpy(_slow_joint_increment(cloud[b], xi[b], dt))
        start = 0
        for X, n in zip(systems, sizes):
            expected = alone.integrator.step(alone, X[b : b + 1], dt, dW[None, start : start + n])
            assert torch.allclose(grouped[b : b + 1, start : start + n], expected, rtol=0, atol=1e-12)
            start += n
    if subset:  # coincident points receive one value of the field
        dW = _grouped(sizes).noise.increment(cloud, dt, Draws(torch.Generator().manual_seed(5)))
        assert torch.equal(dW[:, :3], dW[:, 7:10])


def test_exact_field_coupled_error_decays_like_one_over_n():
    """Quantity: the exponent p of E sup_t err2/(1 − N/N_ref) ∝ N^{−p}, chaos with the exact field,
    N_ref = 128, N = 8, 16, 32, 48 samples, seed 0; p = 1 within 4 standard errors of the fit (SE from
    its 95% bootstrap interval, half-width / 1.96)."""
    cfg = build_config(None, ["model.noise=exact", "decorrelation=false", "model.N=128", "sizes=[8,16,32]", "dims=[3]",
                              "model.batch=48", "w2_batch=2", "model.L=8", "records=2", "bootstrap=400"], model=ChaosConfig)
    fit = run_chaos(cfg).fits["coupling_corrected"]["3"]
    lo, hi = fit["ci"]
    se = (hi - lo) / (2 * 1.96)
    assert se < 0.25  # resolved well enough to tell 1/N from 1/√N
    assert abs(fit["exponent"] - 1.0) <= 4 * se, fit


def test_cli_runs_the_exact_coupling(tmp_path):
    out = tmp_path / "run"
    sets = ["model.noise=exact", "decorrelation=false", "model.N=32", "sizes=[4,8,16]", "dims=[3]", "model.batch=3",
            "w2_batch=2", "model.L=3", "records=1", "bootstrap=100"]
    res = CliRunner().invoke(main, ["chaos", "--quiet", "--out", str(out), *sum((["--set", s] for s in sets), [])])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "chaos.json").read_text())
    assert data["decorrelation"] is None and "decorrelation" not in data["fits"]
    assert np.all(np.asarray(data["coupling"]["3"]["err2_mean"])[0] == 0)  # shared initial points
    assert np.all(np.asarray(data["coupling"]["3"]["err2_mean"])[1] > 0)  # different attention
    assert (out / "chaos.png").is_file() and (out / "dataset.nc").is_file()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="sizes: every group"):
        GroupedAttention(ATTENTION, (4, 0))
    attention = GroupedAttention(ATTENTION, (4, 3))
    with pytest.raises(ValueError, match="sizes: the groups have 7 tokens in all, the cloud has 8"):
        attention(_cloud(1, 8))
    with pytest.raises(ValueError, match="keys must be None"):
        attention(_cloud(1, 7), _cloud(1, 7))
    with pytest.raises(ValueError, match="dynamics"):
        make_grouped_particles(RunConfig(dynamics="transformer", noise="exact"), [4, 3])
    with pytest.raises(ConfigError, match="model.noise: chaos needs one of 'random_features', 'exact'"):
        build_config(None, ["model.noise=mlp"], model=ChaosConfig)
