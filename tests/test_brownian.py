"""A Brownian path given to ``solve`` must fit the noise it drives: its part shape equals the
requested normals' shape but for a leading axis of 1 (broadcast over samples); anything else is a
``ValueError`` naming the path, never a broadcasting error from deep inside a step. (A leading axis
that divides the batch is left to the model: a stack of k parts reads it k times.)"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath


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
