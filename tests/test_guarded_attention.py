"""Low-precision attention with a float64 guard (``model.attention.GuardedAttention``, SPEC §4):
the float32 output against the softmax written out in float64, within the rounding bound below;
the guard's reported error against its recomputation on the same rows; the guard tripping on a
corrupted kernel; the rows drawn from the run's attention stream (same seed, same rows and numbers);
the precisions refused; a run of the limit SDE at N = 2000 against the float64 run.

Rounding bound of the float32 path (unit tokens, u = 2⁻²⁴ the float32 unit roundoff): each score
β⟨x̃_i, x̃_j⟩ of the rounded inputs is off by at most |β|(d + 2)u (to first order), the softmax's
normalisation at most doubles the weights' relative error, and the output moves by at most that
times 2 max|v| (the spread of the values), plus the float32 accumulation, about u per value in the
fused kernel's blocked sums: per row, e_i ≤ 4 (1 + |β|)(d + 2) u √d max|v| ≈ 2.4·10⁻⁷ (1 + |β|)(d + 2)
for |v| ≤ 1. Measured (N ≤ 2000, d ≤ 16, |β| ≤ 20): e_i ≤ 1.3 (1 + |β|) u on uniform tokens, up to
5 (1 + |β|) u along a run (clustered tokens, larger outputs): 10⁻⁷–10⁻⁶."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.runtime import make_generator, stream
from stochformer.model.attention import GuardedAttention, PrecisionError, SoftmaxAttention

U32 = 2.0**-24


def bound32(beta: float, d: int, vmax: float = 1.0) -> float:
    """The float32 path's per-row error bound of the module docstring."""
    return 4 * (1 + abs(beta)) * (d + 2) * U32 * math.sqrt(d) * vmax


def softmax64(Xq: np.ndarray, Xk: np.ndarray, A: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Σ_j softmax_j(⟨x_i, A x_j⟩) V x_j, written out in float64: Xq (B, n, d), Xk (B, N, d)."""
    s = np.einsum("bid,de,bje->bij", Xq, A, Xk)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ Xk @ V.T


def _row_errors(got: torch.Tensor, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(got.double().numpy() - ref, axis=-1)


@pytest.mark.parametrize("sdpa", [True, False])
@pytest.mark.parametrize("explicit", [False, True])
def test_float32_output_equals_float64_within_the_rounding_bound(sdpa, explicit, tokens):
    """Every row (not only the guard's) of the float32 output is the float64 softmax to within
    the bound; the output is in the tokens' dtype; with A, V given (dense and chunked paths)."""
    B, N, d, beta = 2, 700, 6, 3.0
    X = tokens(B, N, d, seed=3)
    if explicit:
        r = np.random.default_rng(5)
        Q, K, V = (np.eye(d) + 0.3 * r.standard_normal((d, d)) for _ in range(3))
        inner = SoftmaxAttention.from_matrices(d, Q=Q, K=K, V=V, chunk=None if sdpa else 100, sdpa=sdpa)
        A, Vm = inner.A.numpy(), inner.V.numpy()
        beta, vmax = float(np.linalg.norm(A, 2)), float(np.linalg.norm(Vm, 2))
    else:
        inner = SoftmaxAttention(beta=beta, chunk=None if sdpa else 100, sdpa=sdpa)
        A, Vm, vmax = beta * np.eye(d), np.eye(d), 1.0
    attn = GuardedAttention(inner, "float32", guard_queries=64, seed=0)
    out = attn(X)
    assert out.dtype == torch.float64 and out.shape == X.shape
    err = _row_errors(out, softmax64(X.numpy(), X.numpy(), A, Vm))
    assert err.max() <= bound32(beta, d, vmax), (err.max(), bound32(beta, d, vmax))
    assert err.max() > 0  # computed in float32 indeed, not float64


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 300), d=st.integers(2, 8), beta=st.floats(-4.0, 4.0), batch=st.integers(1, 3),
       m=st.integers(1, 64), seed=st.integers(0, 2**20), keys=st.booleans())
def test_property_float32_within_bound_and_guard_reports_its_rows(N, d, beta, batch, m, seed, keys):
    """Over small (N, d, β, batch), self- and cross-attention: the float32 output is within the
    rounding bound at every row, and the guard's record is the error recomputed on its rows."""
    X = sf.sphere.uniform(batch=batch, N=N, d=d, seed=seed)
    Y = sf.sphere.uniform(batch=batch, N=N + 3, d=d, seed=seed + 1) if keys else None
    attn = GuardedAttention(SoftmaxAttention(beta=beta, sdpa=True), "float32", guard_queries=m, seed=seed)
    out = attn(X, Y)
    K = X if Y is None else Y
    err = _row_errors(out, softmax64(X.numpy(), K.numpy(), beta * np.eye(d), np.eye(d)))
    assert err.max() <= bound32(beta, d)
    rows = attn.rows
    assert rows.shape == (min(m, N),) and len(set(rows.tolist())) == len(rows) and int(rows.max()) < N
    rec = attn.record
    # the guard's float64 reference (torch) and this one (NumPy) differ by a few ulps of the O(1) outputs
    assert rec["last_max_error"] == pytest.approx(err[:, rows.numpy()].max(), rel=1e-9, abs=1e-14)
    assert rec["last_rms_error"] == pytest.approx(np.sqrt((err[:, rows.numpy()] ** 2).mean()), rel=1e-9, abs=1e-14)
    assert rec["tolerance"] == pytest.approx(0.1 / math.sqrt(K.shape[1]))


def test_guard_error_is_the_error_recomputed_on_the_same_rows():
    """The record (last and largest error, over several calls) is the float64 error at the
    returned rows, recomputed with the float64 attention itself; rows beyond the guard are not
    looked at."""
    inner = SoftmaxAttention(beta=2.0, sdpa=True)
    attn = GuardedAttention(inner, "float32", guard_queries=1024, seed=7)
    worst = 0.0
    for k in range(3):
        Xk = sf.sphere.uniform(batch=2, N=3000, d=16, seed=10 + k)
        out = attn(Xk)
        rows = attn.rows
        e = torch.linalg.vector_norm(out[:, rows] - inner(Xk[:, rows], Xk), dim=-1)
        assert attn.record["last_max_error"] == float(e.max())
        assert attn.record["last_rms_error"] == pytest.approx(float(e.square().mean().sqrt()), rel=1e-12)
        worst = max(worst, float(e.max()))
    assert attn.record["max_error"] == worst and attn.record["calls"] == 3
    assert rows.shape == (1024,) and 0 < worst < 1e-6


@pytest.mark.parametrize("offset", [1e-2, float("nan")])
def test_guard_trips_on_a_corrupted_kernel(monkeypatch, offset):
    """Fault injection: the low-precision path off by 1e-2 in one component (or NaN) at every row
    raises a PrecisionError naming ``precision`` and the measured error; below the tolerance the
    same corruption passes and is reported as it is."""
    fast = GuardedAttention._fast

    def corrupted(self, low, X, keys):
        out = fast(self, low, X, keys).clone()
        out[..., 0] += offset
        return out

    monkeypatch.setattr(GuardedAttention, "_fast", corrupted)
    X = sf.sphere.uniform(batch=1, N=2000, d=8, seed=2)
    attn = GuardedAttention(SoftmaxAttention(beta=1.0, sdpa=True), "float32", guard_queries=256, seed=0)
    with pytest.raises(PrecisionError, match=r"precision: the float32 attention is off the float64 one by (0\.01 |nan )"):
        attn(X)
    if offset == offset:  # a tolerance above the corruption: passes, and the record says 1e-2
        loose = GuardedAttention(attn.inner, "float32", guard_queries=256, seed=0, tol=0.5)
        loose(X)
        assert loose.record["last_max_error"] == pytest.approx(1e-2, abs=1e-6)


def test_same_seed_same_rows_and_numbers():
    """In ``solve`` the rows come from the run's attention stream: the first call's rows are
    ``randperm`` of stream(seed, "attention"), the same seed gives the same rows, record and path,
    another seed other rows; the guard's draws do not move the run's noise (the path equals that of
    a guard checking every row, which draws nothing)."""
    X0 = sf.sphere.uniform(batch=1, N=400, d=4, seed=0)

    def run(seed, attention):
        seen = []

        class Spy(GuardedAttention):
            def __call__(self, X, keys=None):
                out = super().__call__(X, keys)
                seen.append(self.rows.clone())
                return out

        attn = Spy(attention, "float32", guard_queries=50) if attention.__class__ is SoftmaxAttention else attention
        # a fresh field: its features are drawn from the run's generator at its first run
        sde = sf.LimitSDE(attention=attn, noise=sf.RandomFeatureField("relu", features=64), integrator="euler")
        X = sf.solve(sde, X0, T=0.5, steps=4, seed=seed, output="torch")["X_final"]
        return X, seen, getattr(attn, "record", None)

    inner = SoftmaxAttention(beta=1.0, sdpa=True)
    Xa, rows_a, rec_a = run(3, inner)
    Xb, rows_b, rec_b = run(3, inner)
    Xc, rows_c, _ = run(4, inner)
    X64, _, _ = run(3, GuardedAttention(inner, "float32", guard_queries=400))  # all rows: no draws
    assert len(rows_a) == 4 and all(torch.equal(a, b) for a, b in zip(rows_a, rows_b))
    assert torch.equal(Xa, Xb) and rec_a == rec_b
    assert not torch.equal(rows_a[0], rows_c[0])
    expected = torch.randperm(400, generator=stream(make_generator(3), "attention"))[:50]
    assert torch.equal(rows_a[0], expected)
    assert torch.equal(Xa, X64)  # the guard's draws do not move the run's noise


def test_precisions_refused():
    """bfloat16 is refused with its reason, an unknown name with the valid ones, tf32 on a CPU at
    the start of a run (before any step), a non-softmax inner attention by type."""
    inner = SoftmaxAttention()
    with pytest.raises(ValueError, match="precision: bfloat16 is not offered: its 8-bit significand"):
        GuardedAttention(inner, "bfloat16")
    with pytest.raises(ValueError, match="precision: must be one of 'float32', 'tf32', 'float16'"):
        GuardedAttention(inner, "float8")
    with pytest.raises(ValueError, match="guard_queries"):
        GuardedAttention(inner, "float32", guard_queries=0)
    with pytest.raises(ValueError, match="tol"):
        GuardedAttention(inner, "float32", tol=0.0)
    with pytest.raises(TypeError, match="inner: must be a stochformer.SoftmaxAttention"):
        GuardedAttention(lambda X, keys=None: X, "float32")
    sde = sf.LimitSDE(attention=GuardedAttention(inner, "tf32"), integrator="euler")
    with pytest.raises(ValueError, match="precision: 'tf32' .* CUDA only, the tokens are on cpu"):
        sf.solve(sde, sf.sphere.uniform(batch=1, N=8, d=3, seed=0), T=1.0, steps=1, seed=0)


def test_float16_on_cpu_is_coarser_than_float32_and_guarded():
    """float16 inputs through the CPU's fused kernel: in float64 out, its error above float32's
    and below the tolerance at N = 2000 (with the tolerance at 10⁻⁴ of the noise it trips)."""
    X = sf.sphere.uniform(batch=1, N=2000, d=8, seed=4)
    inner = SoftmaxAttention(beta=2.0, sdpa=False)  # float16 is always fused
    errs = {}
    for p in ("float32", "float16"):
        attn = GuardedAttention(inner, p, guard_queries=512, seed=0)
        assert attn(X).dtype == torch.float64
        errs[p] = attn.record["max_error"]
    assert 10 * errs["float32"] < errs["float16"] < 0.1 / math.sqrt(2000)
    with pytest.raises(PrecisionError, match="float16"):
        GuardedAttention(inner, "float16", guard_queries=512, seed=0, tol=1e-4)(X)


@pytest.mark.slow
def test_limit_sde_at_2000_tokens_agrees_with_float64():
    """A run of the limit SDE (Heun, random-feature field, β = 2, d = 8, N = 2000, 10 steps) with
    float32 attention guarded at 1024 rows: its final mean cosine equals the float64 run's well
    within the particle noise N^{-1/2} (the same noise: the guard draws from its own stream), the
    guard's largest error over its 20 calls within the rounding bound (measured: 9.1·10⁻⁷, and
    the mean cosines 0.16772 differ by 1.0·10⁻⁹)."""
    N = 2000
    X0 = sf.sphere.uniform(batch=1, N=N, d=8, seed=0)
    inner = SoftmaxAttention(beta=2.0, sdpa=True)
    guarded = GuardedAttention(inner, "float32")
    final = {}
    for name, attn in (("float64", inner), ("float32", guarded)):
        res = sf.solve(sf.LimitSDE(attention=attn, noise=sf.RandomFeatureField("relu", features=128)), X0, T=1.0, steps=10, seed=5,
                       save=sf.SaveAt(stats=("mean_cosine",)))
        final[name] = float(res["mean_cosine"].isel(time=-1, sample=0))
    assert guarded.record["calls"] == 20 and guarded.record["max_error"] <= bound32(2.0, 8)
    assert abs(final["float32"] - final["float64"]) < 0.1 / math.sqrt(N)
    assert abs(final["float32"] - final["float64"]) < 1e-5  # in fact: float32 rounding carried along the path


def test_a_guard_of_every_row_draws_nothing_and_otherwise_needs_a_run_or_a_seed():
    """With guard_queries >= n every row is checked, in order, and nothing is drawn (so a call
    outside a run needs no seed); with fewer, the rows are drawn: outside a run without a seed,
    one error naming GuardedAttention."""
    X = sf.sphere.uniform(batch=1, N=40, d=3, seed=1)
    for m in (40, 100):
        attn = GuardedAttention(SoftmaxAttention(), "float32", guard_queries=m)
        attn(X)
        assert torch.equal(attn.rows, torch.arange(40))
    with pytest.raises(RuntimeError, match=r"^GuardedAttention: no draws on cpu: a run starts them"):
        GuardedAttention(SoftmaxAttention(), "float32", guard_queries=39)(X)
