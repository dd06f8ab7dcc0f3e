"""The bridge to standard blocks (SPEC §7): the blocks, the matched kernel, the verdict rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from stochformer.experiments.bridge import run_network
from stochformer.model.blocks import MatchedKernel, MLPLaw, block_law, encoder_block, make_block
from stochformer.config import build_config
from stochformer.experiments.bridge import BridgeConfig, compare, run_bridge
from stochformer.experiments.simulate import run_simulate
from stochformer.model.kernel import NoiseKernel
from stochformer.measure.verdict import FAILS, HOLDS, INCONCLUSIVE
from stochformer.core.runtime import cpu_threads_for, make_generator
from stochformer.core.sphere import normalize

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """Every tensor here is tiny: one CPU thread (parallel regions cost more than the work)."""
    with cpu_threads_for(0):
        yield


def test_encoder_branch_scaling_equals_scaled_branches():
    """Scaling out_proj and linear2 by α₁, α₂ is the post-LN layer with its branches scaled."""
    torch.manual_seed(0)
    a1, a2 = 0.3, 0.7
    layer = encoder_block(8, 2, 16, a1, a2, pre=False)
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True, dtype=F64).eval()
    x = torch.randn(1, 5, 8, dtype=F64)
    with torch.no_grad():
        y = ref.norm1(x + a1 * ref.self_attn(x, x, x, need_weights=False)[0])
        want = ref.norm2(y + a2 * ref.linear2(torch.nn.functional.gelu(ref.linear1(y))))
        torch.testing.assert_close(layer(x), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["encoder_post", "gpt2", "llama"])
def test_block_law_variances_match_the_modules(kind):
    """The matched law's weight variances against the empirical variance of a wide block's MLP weights."""
    torch.manual_seed(1)
    d, m = 64, 256
    block = make_block(kind, d, 4, m, 1.0, 1.0, std=0.02)
    law = block_law(kind, d, m, std=0.02)
    names = {"encoder_post": ("linear1", "linear2"), "gpt2": ("c_fc", "mlp_proj"), "llama": ("gate", "down")}[kind]
    first, second = (getattr(block, n) for n in names)
    for lin, var in ((first, law.w1), (second, law.w2)):
        w = lin.weight.detach().reshape(-1)
        se = float(w.pow(2).std()) / math.sqrt(w.numel())
        assert abs(float(w.pow(2).mean()) - var) < 5 * se


@pytest.mark.parametrize("activation", ["tanh", "swiglu", "gelu"])
def test_matched_kernel_against_sampled_mlp(activation):
    """κ of the matched law against the empirical E⟨G(x), G(y)⟩/k of the law's own sampler (inputs
    of norm √r2 at cosine 0.3), within 4.5 SE; for the paper's scaling also against NoiseKernel."""
    k, m = 16, 512
    law = MLPLaw(activation, m, 1.0 / k, 0.09, 1.0 / m, 0.04, w3=1.0 / k)
    g = make_generator(0)
    x = normalize(torch.randn(k, generator=g, dtype=F64))
    z = normalize(torch.randn(k, generator=g, dtype=F64))
    y = 0.3 * x + math.sqrt(1 - 0.09) * normalize(z - (z @ x) * x)
    r = math.sqrt(2.0)
    H = (r * torch.stack([x, y])).expand(400, 2, k).contiguous()
    G = law.sample(H, g)
    v = (G[:, 0] * G[:, 1]).sum(-1) / k
    kern = MatchedKernel(law, r * r)
    assert abs(float(v.mean()) - float(kern.kappa(0.3))) < 4.5 * float(v.std()) / math.sqrt(400)
    if activation == "tanh":
        ref = NoiseKernel("tanh", k, 0.3, 0.2)
        rho = torch.linspace(-1, 1, 101, dtype=F64)
        torch.testing.assert_close(MatchedKernel(law, 1.0).kappa(rho), ref.kappa(rho), rtol=0, atol=1e-7)


def test_paper_block_gives_the_paper_models_law():
    """Networks of PaperBlocks (d = 6, N = 5, L = 8, T = 1, ReLU, σ_U = σ_W = 0.3, β = 1, γ = 0.5,
    m = 32) against stochformer's own transformer with explicit weights (same sizes): the final
    mean cosine agrees within 4.5 SE of the difference; a prediction moved by 0.2 fails the rule."""
    d, N, L, T, m = 6, 5, 8, 1.0, 32
    paper = dict(activation="relu", sigma_U=0.3, sigma_W=0.3, beta=1.0, gamma=0.5)
    g = make_generator(3)
    X0 = normalize(torch.randn(128, N, d, generator=g, dtype=F64))
    nets = torch.stack([run_network("paper", X0[b : b + 1], L, 100 + b, d=d, heads=1, m=m, a1=T / L,
                                    a2=math.sqrt(T / L), **paper)[-1] for b in range(128)]).numpy()
    ref = run_simulate(build_config({"N": N, "d": d, "L": L, "T": T, "m": m, "batch": 256, "noise": "mlp", "seed": 9,
                                 **paper})).data["mean_cosine"].values[:, -1]
    meas = (float(nets.mean()), float(nets.std(ddof=1) / math.sqrt(len(nets))))
    pred = (float(ref.mean()), float(ref.std(ddof=1) / math.sqrt(len(ref))))
    assert abs(meas[0] - pred[0]) < 4.5 * math.hypot(meas[1], pred[1])
    assert 0.1 < pred[0] < 0.9  # not a saturated statistic
    assert compare("final mean cosine", meas, pred, tol=0.0).verdict == HOLDS
    assert compare("final mean cosine", meas, (pred[0] + 0.2, pred[1]), tol=0.0).verdict == FAILS


def test_bridge_runs_every_block_and_validates():
    for block in ("paper", "encoder_pre", "gpt2", "llama"):
        cfg = BridgeConfig(block=block, d=8, heads=2, m=16, N=4, depths=[3], samples=4, pred_samples=8,
                           gpt2_init=block == "gpt2")
        res = run_bridge(cfg)
        rows = res.comparisons()
        assert len(rows) == 2 and all(np.isfinite(r.measured) for r in rows)
        assert res.curves["measured"][3].shape == (4, 4)
    with pytest.raises(ValueError, match="heads"):
        BridgeConfig(block="llama", d=12, heads=4)
    with pytest.raises(ValueError, match="gpt2_init"):
        BridgeConfig(block="llama", gpt2_init=True)


def test_a_non_finite_curve_stops_the_bridge_naming_its_layer():
    from stochformer.experiments.bridge import BridgeConfig, _checked
    from stochformer.core.validation import NonFiniteError

    curve = torch.zeros(3, 6, dtype=torch.float64)
    assert _checked(curve, BridgeConfig(), "x").shape == (3, 6)
    curve[1, 4] = float("nan")
    curve[2, 5] = float("inf")
    with pytest.raises(NonFiniteError, match="at layer 4"):
        _checked(curve, BridgeConfig(), "x")


def test_bridge_result_is_a_result_that_load_reads_back(tmp_path):
    """The per-sample curves are written as dataset.nc (one variable per curve and depth) beside
    config.json and bridge.json, and stochformer.load returns them unchanged."""
    import stochformer as sf
    from stochformer.experiments.bridge import CURVES, BridgeResult

    curves = {name: {3: np.arange(8.0).reshape(2, 4) + k, 5: np.ones((2, 6)) * k} for k, name in enumerate(CURVES)}
    res = BridgeResult(BridgeConfig(), curves, 0.5, {"device": "cpu", "stochformer": "test"}, 0.1)
    res.save(tmp_path)
    ds = sf.load(tmp_path)
    assert ds.attrs["command"] == "bridge" and ds.attrs["kappa1_unit_sphere"] == 0.5
    for name in CURVES:
        for L, c in curves[name].items():
            np.testing.assert_array_equal(ds[f"{name}_L{L}"].values, c)
    assert json.loads((tmp_path / "bridge.json").read_text())["block"] == BridgeConfig().block
    assert json.loads((tmp_path / "config.json").read_text())["command"] == "bridge"


def test_compare_takes_welch_degrees_of_freedom_from_small_samples():
    """With sample counts, the interval's quantile is Student's t with ⌊ν⌋ degrees of freedom, ν
    Welch–Satterthwaite's (here 4 block networks against 8 predicted samples): wider than 1.96 SE;
    a prediction 12 SE away still fails; one 1 SE away is inconclusive (4 networks cannot tell it
    from the alternative)."""
    from scipy.stats import t

    from stochformer.experiments.bridge import welch_samples

    a, b = 0.1**2, 0.05**2
    nu = (a + b) ** 2 / (a**2 / 3 + b**2 / 7)
    assert welch_samples(0.1, 4, 0.05, 8) == int(nu) + 1
    row = compare("q", (0.3, 0.1, 4), (0.3, 0.05, 8), tol=0.0)
    half = (row.ci[1] - row.ci[0]) / 2
    assert half == pytest.approx(t.ppf(0.975, int(nu)) * math.hypot(0.1, 0.05), rel=1e-12) and row.n == int(nu) + 1
    assert compare("q", (0.3, 0.1, 4), (0.3 + 12 * 0.112, 0.05, 8), tol=0.0).verdict == FAILS
    assert compare("q", (0.3, 0.1, 4), (0.3 + 0.112, 0.05, 8), tol=0.0).verdict == INCONCLUSIVE  # too wide to tell
