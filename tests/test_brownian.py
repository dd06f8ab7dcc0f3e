"""The Brownian path and the step's draws (``core.brownian``): a path given to ``solve`` must fit
the noise it drives: its part shape equals the requested normals' shape but for a leading axis of
1 (broadcast over samples); anything else is a ``ValueError`` naming the path, never a
broadcasting error from deep inside a step. (A leading axis that divides the batch is left to the
model: a stack of k parts reads it k times.) Exactly: a seeded path replayed and its refusals,
the parts served in order by ``Draws``, the in-memory grid and its memory bound, and normals made
on the device asked for whatever torch's default device."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath, Draws
from stochformer.core.brownian import as_draws

from conftest import TOL, close


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


# ----------------------------------------------------------------- a seeded path replayed, draws serving the path's parts


def test_brownian_path_from_a_seed_replays_and_refuses():
    """A path of fine normals from a seeded CPU generator (parts drawn in order at every fine
    step); coarse increments q^{−½} Σ of their q fine normals, read in any order (an earlier step
    replays the stream from its start); bad arguments refused with one message each."""
    g = torch.Generator().manual_seed(11)
    fine = [[torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(1, 3, generator=g, dtype=torch.float64)]
            for _ in range(4)]
    path = BrownianPath([(2, 3), (1, 3)], 4, seed=11)
    assert path.shape == [(2, 3), (1, 3)] and path.steps == 4 and path.dtype == torch.float64 and path.device.type == "cpu"
    assert BrownianPath((2, 3), 4, seed=11).shape == (2, 3)
    for k in (3, 1):
        close(path.increment(k, 4)[1], fine[k][1].numpy())
    for k in (1, 0):
        for part in (0, 1):
            close(path.increment(k, 2)[part], ((fine[2 * k][part] + fine[2 * k + 1][part]) / math.sqrt(2)).numpy())
    close(path.increment(0, 1)[0], (sum(f[0] for f in fine) / 2).numpy())
    p32 = BrownianPath((2,), 2, generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    assert p32.increment(1, 2)[0].dtype == torch.float32
    with pytest.raises(ValueError, match=r"^steps: must be an integer >= 1 \(got 0\)$"):
        BrownianPath((2,), 0, seed=1)
    with pytest.raises(ValueError, match="^BrownianPath: give a seed or a generator$"):
        BrownianPath((2,), 3)
    with pytest.raises(ValueError, match=r"^normals: expected shape \(3, 2\), got \(3, 1\)$"):
        BrownianPath((2,), 3, normals=torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"^BrownianPath: step 4 outside 0\.\.3$"):
        path.increment(4, 4)
    with pytest.raises(ValueError, match=r"^BrownianPath: step -1 outside 0\.\.1$"):
        path.increment(-1, 2)
    with pytest.raises(ValueError, match=r"^BrownianPath: 0 steps do not divide the path's 4 fine steps$"):
        path.increment(0, 0)
    given = BrownianPath.from_normals(torch.arange(6.0).view(3, 2))
    assert given.shape == (2,) and given.steps == 3 and given.dtype == torch.float32
    close(given.increment(2, 3)[0], np.array([4.0, 5.0]))


def test_draws_serve_the_path_parts_in_order(replay):
    """Draws.brownian: fresh normals from the generator without a path (shape, dtype); with one,
    the step's parts in order, converted to the dtype asked for, refusing a part of another shape
    (but for leading axes that broadcast: equal, or one of them 1) or one more part than the path has."""
    g = torch.Generator().manual_seed(12)
    ref = replay(g)
    z = Draws(g).brownian((2, 3), torch.float32, "cpu")
    assert z.dtype == torch.float32 and torch.equal(z, torch.randn(2, 3, generator=ref, dtype=torch.float32))
    path = BrownianPath([(2, 4, 3), (2, 1, 3)], 2, generator=torch.Generator().manual_seed(0))
    draws = Draws(g, path, 1, 2)
    assert draws.coupled and not Draws(g).coupled
    a, b = path.increment(1, 2)
    assert torch.equal(draws.brownian((1, 4, 3), torch.float64, "cpu"), a)
    assert torch.equal(draws.brownian((2, 1, 3), torch.float32, "cpu"), b.float())
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(7, 1, 3\) \(part 0\); "):
        Draws(g, path, 0, 2).brownian((7, 1, 3), torch.float64, "cpu")  # leading axes 7 and 2 do not broadcast
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(1, 1, 3\) \(part 2\); "
                       r"the path has parts \[\(2, 4, 3\), \(2, 1, 3\)\]$"):
        draws.brownian((1, 1, 3), torch.float64, "cpu")
    with pytest.raises(ValueError, match=r"^BrownianPath: the noise source needs normals of shape \(1, 5, 3\) \(part 0\); "):
        Draws(g, path, 0, 2).brownian((1, 5, 3), torch.float64, "cpu")
    assert as_draws(g).generator is g and as_draws(g).path is None and as_draws(draws) is draws


# ----------------------------------------------------------------- a run's named streams


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), other=st.integers(0, 2**63 - 1), ahead=st.integers(0, 5),
       name=st.sampled_from(["attention", "features", "a"]))
def test_a_runs_stream_depends_on_its_seed_and_name_only(seed, other, ahead, name):
    """``stream(generator, name)``: the same for the same start seed and name however far the run's
    generator has drawn (it is not drawn from), different for another seed or name; ``Draws.stream``
    is that stream."""
    from stochformer.core.runtime import make_generator, stream

    def first(g: torch.Generator) -> torch.Tensor:
        return torch.randn(4, generator=g, dtype=torch.float64)

    g = make_generator(seed)
    state = g.get_state()
    want = first(stream(g, name))
    assert torch.equal(g.get_state(), state)  # the run's generator is not moved
    torch.randn(ahead, generator=g)
    assert torch.equal(first(stream(g, name)), want)
    assert torch.equal(first(Draws(g).stream(name)), want)
    assert not torch.equal(first(stream(g, name + "'")), want)
    if other != seed:
        assert not torch.equal(first(stream(make_generator(other), name)), want)


def test_a_path_is_sized_before_it_is_drawn_and_several_parts_take_no_single_tensor(monkeypatch):
    """Before anything is allocated the path's working memory, 4 × (entries of one fine step, all
    parts) × bytes per entry, is checked against the memory available: at that many bytes a float64
    path is built, one byte fewer refuses it naming ``shape``, and a float32 path (half the bytes)
    fits. Explicit normals for a path of several parts are refused naming ``normals``."""
    import stochformer.core.validation as validation

    parts = [(2, 5, 3), (7,)]
    need = 4 * (2 * 5 * 3 + 7) * 8
    monkeypatch.setattr(validation, "available_memory", lambda: need)
    assert BrownianPath(parts, 4, seed=0).parts == parts
    monkeypatch.setattr(validation, "available_memory", lambda: need - 1)
    with pytest.raises(ValueError, match=r"^shape: needs about .* GiB of memory, more than the .* GiB available now$"):
        BrownianPath(parts, 4, seed=0)
    assert BrownianPath(parts, 4, seed=0, dtype=torch.float32).dtype == torch.float32
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"^normals: a path of several parts \(\[\(2, 3\), \(4,\)\]\) cannot be given "
                                         r"as one tensor$"):
        BrownianPath([(2, 3), (4,)], 2, normals=torch.zeros(2, 2, 3, dtype=torch.float64))
