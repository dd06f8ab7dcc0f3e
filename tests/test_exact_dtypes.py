"""Exact checks of scalings, precisions and scratch memory: the attention's β and γ at every value,
the MLP noise's kernel and root in float64 whatever the tokens' dtype, the reused pre-activation
buffer across dtypes and shapes, and the statistics computed in float64 whatever their input's
dtype (tests/test_reference.py pins the formulas themselves)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.noise import WEIGHT_LAWS, RandomFeatureField, RandomMLP, draw_weights, sqrt_psd
from stochformer.measure.stats import bootstrap, fit_power_law, fit_power_law_weighted, interval, loglog_slope


def _attention(X: np.ndarray, beta: float, gamma: float) -> np.ndarray:
    """Σ_j softmax_j(β⟨x_i, x_j⟩) γ x_j for each token of X (N, d), written out."""
    s = beta * X @ X.T
    w = np.exp(s - s.max(1, keepdims=True))
    return gamma * (w / w.sum(1, keepdims=True)) @ X


@pytest.mark.parametrize("beta, gamma", [(1.0, 1.0), (2.0, 2.0), (2.0, 1.0), (1.0, 2.0)])
def test_attention_scales_queries_by_beta_and_values_by_gamma(beta, gamma, tokens):
    """β = 1 and γ = 1 skip a product (1·x = x exactly); every other value multiplies, 2 included."""
    X = tokens(2, 5, 3, seed=7)
    got = SoftmaxAttention(beta=beta, gamma=gamma)(X).numpy()
    ref = np.stack([_attention(x, beta, gamma) for x in X.numpy()])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


# --------------------------------------------------------------------------- the MLP noise's precision


def test_coupled_mlp_increment_takes_kernel_and_root_in_float64_for_float32_tokens(tokens):
    """Driven by a float64 Brownian path, a float32 step is √dt·s·(K_m^{1/2} in float64, cast) @ Ξ
    with K_m from the same inner weights in float64 and Ξ the path's normals cast to float32."""
    X = tokens(3, 4, 5, seed=2).float()
    mlp = RandomMLP(width=16, activation="tanh", sigma_U=0.3, sigma_W=0.2, scale=0.7)
    path = BrownianPath((3, 4, 5), 1, seed=11)
    got = mlp.increment(X, 0.25, Draws(torch.Generator().manual_seed(5), path))
    assert got.dtype == torch.float32
    K = mlp.empirical_kernel(X, torch.Generator().manual_seed(5), torch.float64)
    xi = path.increment(0, 1)[0].float()
    ref = 0.7 * 0.5 * (sqrt_psd(K).float() @ xi)
    assert torch.equal(got, ref)
    # the float32 kernel is not the same matrix (so the float64 one is what the step used)
    K32 = mlp.empirical_kernel(X, torch.Generator().manual_seed(5), torch.float32)
    assert not torch.equal(0.7 * 0.5 * (sqrt_psd(K32) @ xi), ref)


@pytest.mark.parametrize("N, d, m", [(6, 3, 8), (3, 6, 40)])  # U drawn (d ≤ N) and the Cholesky path (d > N)
def test_reused_preactivation_buffer_never_changes_a_step(N, d, m, tokens):
    """One RandomMLP called with float64, then float32, then another batch size, then float64 again
    gives exactly what a fresh one gives with the same generator state, without warnings (a buffer
    of the wrong shape would be resized by torch with a warning, one of the wrong dtype refused)."""
    shared = RandomMLP(width=m, activation="relu", sigma_U=0.5, sigma_W=0.1)
    calls = [(2, torch.float64), (2, torch.float32), (3, torch.float32), (3, torch.float64), (2, torch.float64)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed, (B, dtype) in enumerate(calls):
            X = tokens(B, N, d, seed=seed).to(dtype)
            got = shared.increment(X, 0.1, torch.Generator().manual_seed(seed))
            fresh = RandomMLP(width=m, activation="relu", sigma_U=0.5, sigma_W=0.1)
            assert got.dtype == dtype
            assert torch.equal(got, fresh.increment(X, 0.1, torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("mode", ["gaussian", "weights"])
@pytest.mark.parametrize("N, d, m", [(6, 3, 8), (3, 6, 40)])
@pytest.mark.parametrize("synchronised", [False, True])  # singular Gram matrices: the fallback draws
def test_mlp_noise_lives_on_the_tokens_device_whatever_the_default_device(mode, N, d, m, synchronised, tokens):
    """Every tensor of a step is made on the tokens' device, not torch's default device: under
    ``torch.device("meta")`` a step of CPU tokens gives exactly the step made without it."""
    X = tokens(2, N, d, seed=3)
    if synchronised:
        X = X[:, :1].expand(-1, N, -1).clone()

    def step() -> torch.Tensor:
        return RandomMLP(width=m, sigma_U=0.4, sigma_W=0.3, mode=mode).increment(X, 0.1, torch.Generator().manual_seed(4))

    ref = step()
    with torch.device("meta"):
        got = step()
    assert got.device == X.device and torch.equal(got, ref)


# --------------------------------------------------------------------------- tensors on the device passed
# The meta device stands for an accelerator: its tensors have shapes, dtypes and a device but no
# values, so a tensor made on torch's default device (the CPU) instead of the one passed shows.


@pytest.mark.parametrize("law", [law for law in WEIGHT_LAWS if law != "student_t"])
def test_weights_are_drawn_on_the_device_of_like(law):
    """draw_weights makes the weights on ``like``'s device, in its dtype (Student-t's Gamma step
    keeps a data-dependent number of draws, which a meta tensor cannot: see the next test)."""
    like = torch.empty(0, dtype=torch.float32, device="meta")
    w = draw_weights((2, 3), torch.Generator().manual_seed(0), like, law)
    assert w.device.type == "meta" and w.shape == (2, 3) and w.dtype == torch.float32


@pytest.mark.parametrize("law", WEIGHT_LAWS)
def test_weights_of_cpu_tokens_whatever_the_default_device(law):
    """Under ``torch.device("meta")`` the weights of CPU tokens are the ones drawn without it, on
    the CPU: every draw of every law, Student-t's Gamma variates and their buffer included, is made
    on ``like``'s device, not on the default one."""
    like = torch.empty(0, dtype=torch.float64)
    ref = draw_weights((4, 5), torch.Generator().manual_seed(2), like, law)
    with torch.device("meta"):
        got = draw_weights((4, 5), torch.Generator().manual_seed(2), like, law)
    assert got.device.type == "cpu" and torch.equal(got, ref)


def test_seeded_brownian_path_draws_on_its_device_whatever_the_default_device():
    """A seeded path draws its normals on its own device (the CPU), not on torch's default device:
    under ``torch.device("meta")`` it gives the normals drawn without it (BrownianPath itself
    refuses device="meta": a path of meta normals would hold no numbers)."""
    ref = BrownianPath([(2, 3), (1, 3)], 4, seed=5)
    with torch.device("meta"):
        path = BrownianPath([(2, 3), (1, 3)], 4, seed=5)
        got = [path.increment(k, 2) for k in (1, 0)]  # step 0 after step 1: the stream replayed
    want = [ref.increment(k, 2) for k in (1, 0)]
    for a, b in zip(sum(got, []), sum(want, [])):
        assert a.device.type == "cpu" and torch.equal(a, b)


@pytest.mark.parametrize("sigma_W", [0.0, 0.3])
def test_random_feature_field_lives_on_the_device_passed(sigma_W, tokens):
    """A random-feature field drawn (by reset or draw) for device="meta" has its features u and b
    on it, and a step of meta tokens is a meta tensor of their shape and dtype. A step of CPU
    tokens under ``torch.device("meta")`` is the step made without it: the Brownian normals, B^0's
    too, are drawn on the tokens' device (a meta tensor times a CPU one would still be meta)."""
    for start in ("reset", "draw"):
        field = RandomFeatureField(features=8, sigma_U=0.5, sigma_W=sigma_W, token_chunk=2)
        getattr(field, start)(2, 3, torch.Generator().manual_seed(0), torch.float32, "meta")
        assert field._u.device.type == field._b.device.type == "meta", start
        assert field._u.shape == (2, 3, 8) and field._b.shape == (2, 1, 8) and field._u.dtype == torch.float32
        X = torch.empty(2, 5, 3, dtype=torch.float32, device="meta")
        out = field.increment(X, 0.1, torch.Generator().manual_seed(1))
        assert out.device.type == "meta" and out.shape == X.shape and out.dtype == torch.float32
    field = RandomFeatureField(features=8, sigma_U=0.5, sigma_W=sigma_W)
    field.reset(2, 3, torch.Generator().manual_seed(0), torch.float64, "cpu")
    X = tokens(2, 5, 3, seed=1)
    ref = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    with torch.device("meta"):
        got = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    assert got.device.type == "cpu" and torch.equal(got, ref)


@pytest.mark.parametrize("mode", ["gaussian", "weights"])
def test_mlp_features_live_on_the_tokens_device(mode):
    """RandomMLP.hidden draws its normals on the tokens' device: meta tokens (N ≥ d, so U is drawn
    and no Cholesky factor is needed) give meta features (batch, N, m) in their dtype."""
    X = torch.empty(2, 5, 3, dtype=torch.float32, device="meta")
    phi = RandomMLP(width=8, sigma_U=0.5, sigma_W=0.3, mode=mode).hidden(X, torch.Generator().manual_seed(0))
    assert phi.device.type == "meta" and phi.shape == (2, 5, 8) and phi.dtype == torch.float32


# --------------------------------------------------------------------------- statistics in float64


def _pair(rng: np.random.Generator, *shape: int) -> tuple[np.ndarray, np.ndarray]:
    """Positive float32 values and the same values in float64 (exactly)."""
    x32 = rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
    return x32, x32.astype(np.float64)


def test_statistics_are_computed_in_float64_whatever_the_input_dtype():
    """float32 inputs give exactly the results of the same values in float64: the statistics cast
    first (a float32 log, mean or quantile would differ in the eighth digit)."""
    rng = np.random.default_rng(0)
    x32, x64 = _pair(rng, 6)
    y32, y64 = _pair(rng, 6)
    assert loglog_slope(x32, y64) == loglog_slope(x64, y64)
    assert loglog_slope(x64, y32) == loglog_slope(x64, y64)
    b32, b64 = _pair(rng, 50)
    assert interval(b32) == interval(b64)
    s32, s64 = _pair(rng, 40, 3)
    for u, v in zip(bootstrap(lambda r: r.mean(0), s32, 5, 1), bootstrap(lambda r: r.mean(0), s64, 5, 1)):
        assert np.array_equal(u, v)
    N = [4, 8, 16, 32, 64]
    S32, S64 = _pair(rng, 30, 5)
    a, b = fit_power_law(N, S32, 200, 3), fit_power_law(N, S64, 200, 3)
    assert (a.exponent, a.ci, a.prefactor, a.se) == (b.exponent, b.ci, b.prefactor, b.se)
    N32 = np.asarray([3, 7, 11, 19, 37], np.float32)
    y = 2.0 * (N32.astype(float) / 3) ** -0.8
    a = fit_power_law_weighted(N32, y, 0.05 * y)
    b = fit_power_law_weighted(N32.astype(float), y, 0.05 * y)
    assert (a.exponent, a.ci, a.prefactor, a.se) == (b.exponent, b.ci, b.prefactor, b.se)


def test_power_law_fit_defaults_to_2000_resamples_and_reports_their_se():
    """The default bootstrap has 2000 resamples, and ``se`` is the std (ddof 1) of the resampled
    exponents times √(S/(S − 1)) for S samples, finite."""
    N = np.array([4.0, 8, 16, 32])
    samples = np.random.default_rng(1).uniform(0.5, 1.5, size=(25, 4)) / N
    default, explicit = fit_power_law(N, samples, seed=2), fit_power_law(N, samples, 2000, 2)
    assert default == explicit and np.isfinite(default.se)
    boots = [-loglog_slope(N, r)[0] for r in bootstrap(lambda r: r.mean(0), samples, 2000, 2)]
    assert default.se == pytest.approx(float(np.std(boots, ddof=1)) * (25 / 24) ** 0.5, rel=1e-14)
    assert fit_power_law(N, samples, 1999, 2) != default
