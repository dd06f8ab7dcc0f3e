"""A Brownian path given to ``solve`` must fit the noise it drives: its part shape equals the
requested normals' shape but for a leading axis of 1 (broadcast over samples); anything else is a
``ValueError`` naming the path, never a broadcasting error from deep inside a step. (A leading axis
that divides the batch is left to the model: a stack of k parts reads it k times.)"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath, Draws

from conftest import TOL


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 3), lead=st.integers(1, 4), n_off=st.integers(-1, 1), d_off=st.integers(-1, 1))
def test_path_shape_is_checked_before_it_is_used(batch, lead, n_off, d_off):
    N, d = 4, 3
    X0 = sf.sphere.uniform(batch=batch, N=N, d=d, seed=0)
    model = sf.Transformer(sf.SoftmaxAttention(beta=1.0, gamma=1.0), sf.RandomMLP(width=8))
    path = sf.BrownianPath((lead, N + n_off, d + d_off), 4, seed=1)
    fits = lead in (1, batch) and n_off == 0 and d_off == 0
    if fits:
        out = sf.solve(model, X0, 1.0, 4, seed=0, path=path)
        assert torch.isfinite(torch.as_tensor(out.X_final.values)).all()
    else:
        with pytest.raises(ValueError, match="BrownianPath"):
            sf.solve(model, X0, 1.0, 4, seed=0, path=path)


# ----------------------------------------------------------------- the path's device


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


# ----------------------------------------------------------------- the in-memory grid and the normals' device


def test_increment_keeps_the_last_grid_read_and_only_that_grid():
    """Reading grids in turn (n = 2, then 4, then 4 again from its start): each step is q^{−½} Σ of
    its fine normals whichever grid was read before, including a step read again from memory."""
    fine = torch.from_numpy(np.random.default_rng(7).standard_normal((4, 3)))
    path = BrownianPath.from_normals(fine)
    coarse = {n: [fine[k * (4 // n):(k + 1) * (4 // n)].sum(0) / math.sqrt(4 // n) for k in range(n)] for n in (1, 2, 4)}
    for k, n in ((0, 2), (0, 4), (1, 4), (0, 4), (1, 4), (2, 4), (0, 2), (1, 2), (0, 1), (1, 2), (3, 4)):
        got = path.increment(k, n)[0]
        assert float((got - coarse[n][k]).abs().max()) < TOL, (k, n)


def test_increment_memory_bound():
    """The last coarse grid read in order is kept (a later read of an earlier step returns the kept
    tensors) when it has at most 2²² entries in all, and not kept when it has more (memory bound)."""
    for per_step, kept in ((1 << 21, True), ((1 << 21) + 1, False)):
        path = BrownianPath.from_normals(torch.zeros(()).expand(2, per_step))  # no memory: a broadcast zero
        first = path.increment(0, 2)
        path.increment(1, 2)
        assert (path.increment(0, 2) is first) == kept, per_step


def test_normals_on_the_device_asked_for(replay):
    """A path from given normals lives on their device; Draws.brownian returns the normals on the
    device asked for, from the generator whatever torch's default device, and from the path on
    another device than the path's (the meta device stands for an accelerator here)."""
    meta = BrownianPath.from_normals(torch.zeros(2, 3, device="meta"))
    assert meta.device.type == "meta" and meta.increment(1, 2)[0].device.type == "meta"
    gen = torch.Generator().manual_seed(3)
    ref = replay(gen)
    with torch.device("meta"):
        z = Draws(gen).brownian((2, 3), torch.float64, "cpu")
    assert z.device.type == "cpu" and torch.equal(z, torch.randn(2, 3, generator=ref, dtype=torch.float64))
    path = BrownianPath((1, 3), 2, seed=4)
    z = Draws(gen, path, 1, 2).brownian((5, 3), torch.float32, "meta")
    assert z.device.type == "meta" and z.shape == (1, 3) and z.dtype == torch.float32
