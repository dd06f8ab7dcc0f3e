"""Tensors on the device passed, whatever torch's default device: each function below makes its
result (and every tensor it builds on the way) on the device it is given, or on its input's device,
never on torch's default device. On a machine without an accelerator the meta device stands in for
one: its tensors have shapes, dtypes and a device but no values. Two checks, by what a function can
run on: where it can run on meta tensors, ``device="meta"`` passed explicitly gives meta results;
where it cannot (data-dependent steps, a generator, which the meta device has not), the call is made
under ``torch.device("meta")`` as torch's default device with the CPU passed explicitly (or CPU
inputs), and must give exactly the CPU result made without it (a tensor made on the default device
instead would be meta, and a meta tensor times a CPU one is meta)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.core.sphere import cluster, pair, random_rotations, uniform
from stochformer.integrate import SaveAt, run_attrs, solve
from stochformer.io.tokens import load_tokens
from stochformer.measure.diagnostics import pair_statistics, unchecked_pair_statistics
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import ExactField, RandomFeatureField, RandomMLP
from stochformer.model.sde import LimitSDE


def same_on_cpu(got, ref) -> None:
    """``got`` is ``ref``: the same CPU tensors (a dict of them, or one), bit for bit."""
    if isinstance(ref, dict):
        assert got.keys() == ref.keys()
        for k in ref:
            same_on_cpu(got[k], ref[k])
        return
    assert got.device.type == "cpu", got.device
    assert got.dtype == ref.dtype and torch.equal(got, ref)


# ----------------------------------------------------------------- initial tokens: the sphere's samplers, a .npy file


@pytest.mark.parametrize("how", ["seed", "generator"])
@pytest.mark.parametrize("sampler", ["uniform", "cluster", "pair"])
def test_initial_tokens_on_the_device_passed_whatever_the_default_device(sampler, how):
    """uniform, cluster and pair draw on the device passed (here the CPU, from a seed or a CPU
    generator): under ``torch.device("meta")`` they give exactly the tokens drawn without it."""
    def draw() -> torch.Tensor:
        rng = dict(seed=3) if how == "seed" else dict(generator=torch.Generator().manual_seed(3))
        if sampler == "uniform":
            return uniform(2, 4, 3, dtype=torch.float64, device="cpu", **rng)
        if sampler == "cluster":
            return cluster(2, 4, 3, 0.3, dtype=torch.float64, device="cpu", **rng)
        return pair(2, 3, 0.25, dtype=torch.float64, device="cpu", **rng)

    ref = draw()
    with torch.device("meta"):
        got = draw()
    same_on_cpu(got, ref)


def test_random_rotations_on_the_device_passed_whatever_the_default_device():
    """random_rotations draws its Gaussian matrices on the device passed (that of the generator):
    under ``torch.device("meta")`` the rotations for device="cpu" are those drawn without it."""
    ref = random_rotations(2, 3, torch.Generator().manual_seed(4), dtype=torch.float64, device="cpu")
    with torch.device("meta"):
        got = random_rotations(2, 3, torch.Generator().manual_seed(4), dtype=torch.float64, device="cpu")
    same_on_cpu(got, ref)


@pytest.mark.parametrize("shape", [(4, 3), (2, 4, 3)])
def test_loaded_tokens_on_the_device_passed_whatever_the_default_device(tmp_path, shape):
    """load_tokens puts the file's tokens on the device passed: under ``torch.device("meta")`` the
    tokens loaded for device="cpu" are those loaded without it."""
    path = tmp_path / "X.npy"
    np.save(path, np.random.default_rng(5).standard_normal(shape))
    ref = load_tokens(path, 2, 4, 3, dtype=torch.float64, device="cpu")
    with torch.device("meta"):
        got = load_tokens(path, 2, 4, 3, dtype=torch.float64, device="cpu")
    same_on_cpu(got, ref)


# ----------------------------------------------------------------- statistics, attention


@pytest.mark.parametrize("block", [None, 8])
def test_pair_statistics_on_the_tokens_device_whatever_the_default_device(tokens, block):
    """The statistics of CPU tokens are CPU tensors, the same under ``torch.device("meta")``, and
    those of meta tokens are meta tensors of shape (batch,)."""
    X = tokens(2, 5, 3, seed=6)
    ref = pair_statistics(X, 1.5, block)
    with torch.device("meta"):
        got = pair_statistics(X, 1.5, block)
    same_on_cpu(got, ref)
    Xm = torch.empty(2, 5, 3, dtype=torch.float32, device="meta")
    for name, value in unchecked_pair_statistics(Xm, 1.5, block).items():
        assert value.device.type == "meta" and value.shape == (2,) and value.dtype == torch.float32, name


@pytest.mark.parametrize("beta", [1.0, 400.0])  # the shifted exponentials; the row maxima (2 c beyond exp's range)
def test_chunked_attention_on_the_tokens_device_whatever_the_default_device(tokens, beta):
    """Attention in query chunks (full chunks and a last short one) of CPU tokens is made on the
    CPU, its output and score buffers included: under ``torch.device("meta")`` it is exactly the
    attention computed without it."""
    X = tokens(2, 7, 3, seed=8)
    att = SoftmaxAttention(beta=beta, chunk=2)
    ref = att(X)
    with torch.device("meta"):
        got = att(X)
    same_on_cpu(got, ref)


@pytest.mark.parametrize("kind", ["numpy", "list", "tensor"])
def test_attention_from_matrices_on_the_device_passed_whatever_the_default_device(kind):
    """Q, K, V given as numpy arrays, nested lists or CPU tensors become the attention's A and V on
    the device passed (the CPU): under ``torch.device("meta")`` they are exactly the matrices made
    without it (host data are never put on the default device first)."""
    rng = np.random.default_rng(0)
    mats = {name: rng.normal(size=(3, 3)) for name in "QKV"}
    conv = {"numpy": lambda a: a, "list": lambda a: a.tolist(), "tensor": torch.from_numpy}[kind]

    def make() -> SoftmaxAttention:
        return SoftmaxAttention.from_matrices(3, **{k: conv(v) for k, v in mats.items()}, device="cpu")

    ref = make()
    with torch.device("meta"):
        got = make()
    same_on_cpu({"A": got.A, "V": got.V}, {"A": ref.A, "V": ref.V})


# ----------------------------------------------------------------- noise sources, the solver


def test_exact_field_step_on_the_tokens_device_whatever_the_default_device(tokens):
    """ExactField draws the step's normals on the tokens' device: under ``torch.device("meta")``
    a step of CPU tokens is exactly the step made without it."""
    X = tokens(2, 4, 3, seed=9)
    field = ExactField(NoiseKernel("relu", 3))
    ref = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    with torch.device("meta"):
        got = field.increment(X, 0.1, torch.Generator().manual_seed(1))
    same_on_cpu(got, ref)


def test_mlp_step_driven_by_a_path_on_the_tokens_device_whatever_the_default_device(tokens):
    """With a Brownian path the MLP's step takes the path's normals onto the tokens' device: under
    ``torch.device("meta")`` a step of CPU tokens is exactly the step made without it."""
    X = tokens(2, 4, 3, seed=10)
    xi = torch.randn(1, 2, 4, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    mlp = RandomMLP(width=6, sigma_U=0.4, sigma_W=0.3)

    def step() -> torch.Tensor:
        return mlp.increment(X, 0.1, Draws(torch.Generator().manual_seed(5), BrownianPath.from_normals(xi)))

    ref = step()
    with torch.device("meta"):
        got = step()
    same_on_cpu(got, ref)


def test_solve_on_the_tokens_device_whatever_the_default_device(tokens):
    """A run of CPU tokens under ``torch.device("meta")`` is the run made without it: the same
    final tokens and statistics (the noise's features drawn at the run's reset on the tokens'
    device), and the CPU recorded as its device."""
    X0 = tokens(2, 4, 3, seed=11)

    ref_sde, sde = (LimitSDE(SoftmaxAttention(), RandomFeatureField("relu", features=5, sigma_U=0.4)) for _ in range(2))
    ref = solve(ref_sde, X0, 0.2, 2, SaveAt(), seed=12)
    with torch.device("meta"):
        got = solve(sde, X0, 0.2, 2, SaveAt(), seed=12)
    assert got.attrs["device"] == ref.attrs["device"] and got.attrs["device"].startswith("cpu")
    for name in ref.data_vars:
        np.testing.assert_array_equal(got[name].values, ref[name].values, err_msg=name)


def test_run_attrs_default_device_is_the_cpu():
    """run_attrs records the device passed, and the CPU where none is."""
    assert run_attrs(None)["device"].startswith("cpu (")
    assert run_attrs(None, device="cpu")["device"] == run_attrs(None)["device"]
