"""The model on a CUDA device, where one is present (skipped otherwise): reproducible, on the
sphere, the same law as on the CPU, and the command line's results recording the device."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

import stochformer as sf
from stochformer.cli import main
from stochformer.io.results import load

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = "cuda"


def _net(m: int = 64) -> sf.Transformer:
    return sf.Transformer(sf.SoftmaxAttention(beta=1.0, gamma=1.0), sf.RandomMLP(width=m, sigma_U=0.1, sigma_W=0.1))


def test_transformer_on_cuda_is_reproducible_and_stays_on_the_sphere():
    X0 = sf.sphere.uniform(8, 16, 8, seed=0, device=CUDA)
    a = sf.solve(_net(), X0, T=2.0, steps=20, seed=1)
    b = sf.solve(_net(), X0, T=2.0, steps=20, seed=1)
    assert (a.X_final.values == b.X_final.values).all()
    norms = (a.X_final ** 2).sum("dim") ** 0.5
    assert float(abs(norms - 1).max()) < 1e-12
    assert "cuda" in a.attrs["device"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_transformer_law_on_cuda_matches_the_cpu(dtype):
    """Final mean cosine of N = 8 tokens (d = 4, L = 20, T = 2), 512 samples per device: the two
    sample means agree within 5 standard errors of their difference (different draws, one law)."""
    means = []
    for device in ("cpu", CUDA):
        X0 = sf.sphere.uniform(512, 8, 4, seed=3, device=device, dtype=dtype)
        out = sf.solve(_net(), X0, T=2.0, steps=20, seed=4)
        c = torch.as_tensor(out.mean_cosine.isel(time=-1).values, dtype=torch.float64)
        means.append((float(c.mean()), float(c.std()) / math.sqrt(len(c))))
    (m0, s0), (m1, s1) = means
    assert abs(m0 - m1) < 5 * math.hypot(s0, s1), means


@pytest.mark.parametrize("field", ["exact", "random_features"])
def test_limit_sde_steps_on_cuda(field):
    kernel = sf.NoiseKernel("relu", d=4)
    noise = sf.ExactField(kernel) if field == "exact" else sf.RandomFeatureField("relu", features=256)
    sde = sf.LimitSDE(sf.SoftmaxAttention(), noise)
    X0 = sf.sphere.uniform(4, 32, 4, seed=0, device=CUDA)
    X = torch.as_tensor(sf.solve(sde, X0, T=1.0, steps=10, seed=2).X_final.values)
    assert torch.isfinite(X).all() and float((X.norm(dim=-1) - 1).abs().max()) < 1e-12
    assert not torch.allclose(X, X0.cpu())


def test_fused_attention_on_cuda_matches_the_reference():
    X = sf.sphere.uniform(2, 300, 16, seed=5, device=CUDA)
    ref = sf.SoftmaxAttention(beta=1.0, gamma=1.0)(X)
    for other in (sf.SoftmaxAttention(beta=1.0, gamma=1.0, sdpa=True), sf.SoftmaxAttention(beta=1.0, gamma=1.0, chunk=64)):
        assert float((other(X) - ref).abs().max()) < 1e-12


def test_cli_simulate_on_cuda_records_the_device(tmp_path):
    out = tmp_path / "o"
    args = ["simulate", "--quiet", "--set", "L=4", "--set", "N=4", "--set", "batch=3", "--set", "m=8", "--set", "device=cuda"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    first = load(out)
    again = tmp_path / "p"
    assert CliRunner().invoke(main, [*args, "--out", str(again)]).exit_code == 0
    second = load(again)
    assert "cuda" in first.attrs["device"]
    assert (first.X_final.values == second.X_final.values).all()


def test_a_non_finite_state_on_cuda_is_named_as_on_the_cpu():
    """The device's finiteness check is read only every 64 steps, yet names the same first bad layer."""
    from stochformer.core.validation import NonFiniteError

    poison = lambda k, X: X * math.nan if k == 3 else None  # noqa: E731
    messages = []
    for device in ("cpu", CUDA):
        X0 = sf.sphere.uniform(2, 4, 3, seed=0, device=device)
        with pytest.raises(NonFiniteError) as err:
            sf.solve(_net(8), X0, T=1.0, steps=10, seed=1, hook=poison)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "at layer 4" in messages[0]


@pytest.mark.slow
def test_every_report_section_runs_on_cuda(tmp_path):
    """The tiny report with device = cuda: every section computes (those without a device on the CPU)."""
    out = tmp_path / "r"
    res = CliRunner().invoke(main, ["reproduce", "--profile", "tiny", "--set", "device=cuda", "--out", str(out), "--quiet"])
    results = json.loads((out / "results.json").read_text())
    failed = {s["name"]: s.get("error") for s in results["sections"] if s["status"] != "computed"}
    assert res.exit_code == 0 and not failed, (res.output, failed)


def test_sqrt_psd_falls_back_to_the_cpu_where_the_cuda_eigh_fails(monkeypatch):
    """cuSOLVER's batched eigh raised an internal error on 65536 2 × 2 matrices (torch 2.11, CUDA 13):
    the symmetric root is then computed on the CPU and returned on the device."""
    from stochformer.model.noise import sqrt_psd

    X = sf.sphere.uniform(64, 2, 3, seed=0, device=CUDA)
    K = X @ X.transpose(-1, -2) + 0.1 * torch.eye(2, dtype=X.dtype, device=CUDA)
    eigh = torch.linalg.eigh

    def broken(A, *args, **kwargs):
        if A.is_cuda:
            raise RuntimeError("cusolver error: CUSOLVER_STATUS_INTERNAL_ERROR")
        return eigh(A, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "eigh", broken)
    S = sqrt_psd(K)
    assert S.is_cuda and float((S @ S.transpose(-1, -2) - K).abs().max()) < 1e-12


@pytest.mark.parametrize("save", [sf.SaveAt(every=3), sf.SaveAt(stats=(), final=True)])
def test_captured_run_on_cuda_gives_the_numbers_of_the_uncaptured_run(save):
    """``solve(capture=True)`` as CUDA graphs (the run's generator registered with each graph): the
    final tokens and every record equal to the last bit to the uncaptured run's (``rng`` is
    ``torch`` on CUDA), and the graphs' draws fresh at every replay (the tokens move on)."""
    X0 = sf.sphere.uniform(4, 16, 8, seed=0, device=CUDA)
    plain = sf.solve(_net(), X0, T=2.0, steps=21, seed=1, save=save)
    captured = sf.solve(_net(), X0, T=2.0, steps=21, seed=1, save=save, capture=True)
    assert captured.attrs["capture"] == "cuda_graph"
    for name in plain.data_vars:
        assert (plain[name].values == captured[name].values).all(), name
    again = sf.solve(_net(), X0, T=2.0, steps=22, seed=1, save=save, capture=True)
    assert not (again.X_final.values == captured.X_final.values).all()
