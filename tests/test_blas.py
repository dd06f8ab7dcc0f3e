"""The CPU's small products and Cholesky factorisations through numpy within ``per_matrix``
(stochformer.model.blas): torch's results to rounding, one BLAS call per matrix (a sample's
numbers never depend on its batch or on the thread count), numpy's BLAS held to one thread,
torch's route outside and where numpy's does not apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from stochformer.model import blas

F64 = torch.float64


@pytest.fixture
def per_matrix():
    with blas.per_matrix():
        yield


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize(
    "a_shape,b_shape,transpose_b",
    [((4, 5, 7), (4, 7, 3), False), ((4, 5, 7), (4, 3, 7), True), ((5, 7), (4, 7, 3), False), ((2, 1, 5, 7), (3, 7, 2), False)],
)
@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_matmul_is_torchs_product(a_shape, b_shape, transpose_b, dtype, rtol, per_matrix):
    """Batched, transposed views and broadcast batch dims: torch.matmul's values, shape and dtype."""
    a, b = _randn(*a_shape, seed=1, dtype=dtype), _randn(*b_shape, seed=2, dtype=dtype)
    if transpose_b:
        b = b.transpose(-1, -2)
    got, want = blas.matmul(a, b), torch.matmul(a, b)
    assert got.shape == want.shape and got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol)


def test_matmul_out_is_written_and_returned(per_matrix):
    a, b = _randn(3, 4, 6, seed=3), _randn(3, 6, 5, seed=4)
    out = torch.full((3, 4, 5), float("nan"), dtype=F64)
    assert blas.matmul(a, b, out=out) is out
    torch.testing.assert_close(out, a @ b, rtol=1e-13, atol=1e-13)


def test_a_samples_product_does_not_depend_on_its_batch_or_the_threads(per_matrix):
    """Sample 2 alone, in the whole batch, in a permuted batch, and with 1 or 2 torch threads:
    the same bits (what keeps a run's numbers independent of how its samples are split)."""
    a, b = _randn(6, 32, 256, seed=5), _randn(6, 256, 32, seed=6)
    alone = blas.matmul(a[2:3], b[2:3])[0]
    perm = torch.tensor([4, 2, 0, 5, 1, 3])
    old = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs += [blas.matmul(a, b)[2], blas.matmul(a[perm], b[perm])[1]]
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(o, alone) for o in outs)


def test_numpys_blas_runs_on_one_thread_and_is_restored(monkeypatch):
    """Within ``per_matrix`` numpy's BLAS has one thread (its own threads would compete with the
    lanes' and the sampler's), also in the lanes, which enter and leave it at once inside the
    calling thread's entry; afterwards its setting is what it was."""
    def blas_threads():  # numpy's own BLAS (scipy may bring another, which numpy does not call)
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]

    from stochformer.model.lanes import Lanes

    before = blas_threads()
    seen = []
    real = np.matmul

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(blas.np, "matmul", spy)

    def part(a, b):
        with blas.per_matrix():
            blas.matmul(_randn(b - a, 30, 40), _randn(b - a, 40, 30))

    with blas.per_matrix():
        blas.matmul(_randn(2, 3, 4), _randn(2, 4, 5))
        Lanes(4).run(part, 64)
    assert len(seen) == 5 and all(n and all(t == 1 for t in n) for n in seen)
    assert blas_threads() == before


def test_outside_per_matrix_it_is_torch(monkeypatch):
    monkeypatch.setattr(blas.np, "matmul", lambda *args, **kwargs: pytest.fail("numpy called"))
    a, b = _randn(3, 5, 7), _randn(3, 7, 4)
    assert torch.equal(blas.matmul(a, b), torch.matmul(a, b))
    K = torch.stack([_gram(5, s) for s in range(3)])
    assert torch.equal(blas.cholesky(K)[0], torch.linalg.cholesky(K))


def test_torchs_route_where_numpy_does_not_apply(per_matrix):
    """Tensors that require grad keep autograd; mixed dtypes raise as torch does (no silent cast)."""
    a = _randn(2, 3, 4).requires_grad_()
    b = _randn(2, 4, 5)
    blas.matmul(a, b).sum().backward()
    torch.testing.assert_close(a.grad, b.sum(-1).unsqueeze(-2).expand(2, 3, 4))
    with pytest.raises(RuntimeError):
        blas.matmul(_randn(2, 3, 4), _randn(2, 4, 5, dtype=torch.float32))


def _gram(n: int, seed: int) -> torch.Tensor:
    A = _randn(n + 3, n, seed=seed)
    return A.T @ A


def test_cholesky_is_torchs_factor(per_matrix):
    K = torch.stack([_gram(5, s) for s in range(4)])
    C, bad = blas.cholesky(K)
    assert bad is None
    torch.testing.assert_close(C, torch.linalg.cholesky(K), rtol=1e-12, atol=1e-12)
    assert torch.equal(C, C.tril())


def test_cholesky_reports_the_failures_and_factors_the_rest_alone(per_matrix):
    """An indefinite and a zero matrix in a batch: reported (torch's ``info > 0``), the others
    factorised with the bits they have without those companions; all failing: all reported."""
    K = torch.stack([_gram(4, 10), -torch.eye(4, dtype=F64), _gram(4, 11), torch.zeros(4, 4, dtype=F64)])
    C, bad = blas.cholesky(K)
    assert bad.tolist() == [True if i in (1, 3) else False for i in range(4)]
    assert bad.tolist() == (torch.linalg.cholesky_ex(K).info > 0).tolist()
    good, _ = blas.cholesky(K[[0, 2]])
    assert torch.equal(C[[0, 2]], good)
    _, bad = blas.cholesky(K[[1, 3]])
    assert bad.tolist() == [True, True]
