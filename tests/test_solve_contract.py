"""`solve`'s contract, tested from its definitions: the records are the same whatever the objects'
addresses, the torch output is the dataset as tensors, the hook and the path as documented, and
every refusal names its argument."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Optional

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core.brownian import BrownianPath
from stochformer.core.runtime import make_generator
from stochformer.core.validation import NonFiniteError
from stochformer.integrate import SaveAt, describe, solve
from stochformer.measure.diagnostics import STATISTICS, pair_statistics

ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


class Plain:
    """A user part with the default repr (an address) and public and private attributes."""

    def __init__(self, scale: float, tag: str, table: torch.Tensor) -> None:
        self.scale, self.tag, self.table, self._cache = scale, tag, table, object()


class Named(Plain):
    def __repr__(self) -> str:
        return f"Named(scale={self.scale})" + "x" * 300


class Slotted:
    __slots__ = ("scale",)

    def __init__(self, scale: float) -> None:
        self.scale = scale


class Rotate:
    """A user model on the sphere: each token moves towards its neighbour (deterministic, cheap)."""

    def __init__(self, rate: float = 1.0) -> None:
        self.rate = rate

    def reset(self, batch, d, generator, dtype, device) -> None:
        self.kick = torch.randn(d, generator=generator, dtype=dtype, device=device)

    def step(self, X, dt, draws):
        return torch.nn.functional.normalize(X + dt * self.rate * X.roll(1, dims=1) + 0.01 * self.kick, dim=-1)


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(-1e6, 1e6, allow_nan=False), tag=st.text(max_size=8), n=st.integers(0, 4))
def test_describe_never_records_an_address(scale, tag, n):
    """Two equal user objects at different addresses are described alike, and no description holds
    an address: an object with the default repr by its type and public attributes (private ones
    left out, a tensor by shape and dtype), one with its own repr by that repr cut to 200
    characters, one without attributes by its type alone."""
    a, b = Plain(scale, tag, torch.zeros(n, 2)), Plain(scale, tag, torch.zeros(n, 2))
    assert id(a) != id(b) and describe(a) == describe(b)
    assert describe(a) == {"type": f"{__name__}.Plain",
                           "attributes": {"scale": scale, "tag": tag, "table": {"tensor": [n, 2], "dtype": "float32"}}}
    assert describe(Named(scale, tag, torch.zeros(1))) == {"type": f"{__name__}.Named",
                                                            "repr": repr(Named(scale, tag, torch.zeros(1)))[:200]}
    assert describe(Slotted(scale)) == {"type": f"{__name__}.Slotted"}
    for obj in (a, Slotted(scale), [a, (b,)], {"k": a}):
        assert not ADDRESS.search(json.dumps(describe(obj))), describe(obj)


def test_a_user_model_is_recorded_alike_by_two_runs_of_one_seed():
    """The dataset's attributes of two runs of one seed with two instances of a user model are equal
    (besides the elapsed nothing differs: the model's record holds no address)."""
    X0 = sf.sphere.uniform(batch=2, N=3, d=3, seed=0)
    one, two = (solve(Rotate(0.5), X0, T=1.0, steps=3, seed=4) for _ in range(2))
    assert one.attrs == two.attrs and one.identical(two)
    assert json.loads(one.attrs["model"]) == {"type": f"{__name__}.Rotate",
                                              "attributes": {"rate": 0.5, "kick": {"tensor": [3], "dtype": "float64"}}}


TOKENS = sf.sphere.uniform(batch=2, N=3, d=3, seed=0)


@st.composite
def saves(draw):
    """Any SaveAt over a run of ``steps`` steps, with the run's steps."""
    steps = draw(st.integers(1, 6))
    steps_list = st.lists(st.integers(0, steps), max_size=4)
    kw: dict = {"stats": draw(st.lists(st.sampled_from(STATISTICS), unique=True)), "final": draw(st.booleans()),
                "energy_beta": draw(st.sampled_from([0.5, 1.0, 2.5]))}
    kw.update(draw(st.sampled_from([{}, {"every": 1}, {"every": 2}, {"every": 5}])))
    if draw(st.booleans()):
        kw["at"] = draw(steps_list)
    kw.update(draw(st.sampled_from([{}, {"tokens_every": 1}, {"tokens_every": 4}])))
    if draw(st.booleans()):
        kw["tokens_at"] = draw(steps_list)
    if draw(st.booleans()):
        kw["fn"] = lambda X: {"centre": X.mean(1), "first": X[:, 0, 0]}
    return SaveAt(**kw), steps


@settings(max_examples=60, deadline=None)
@given(case=saves(), B=st.integers(1, 3), N=st.integers(2, 4), d=st.integers(2, 4), T=st.sampled_from([0.3, 2.0]))
def test_the_torch_output_is_the_dataset_as_tensors(case, B, N, d, T):
    """For any SaveAt: the dataset keeps the statistics and observables at `stat_steps` (times
    k T/steps, in float64), the tokens at `token_steps`, X_final only with ``final``, index
    coordinates 0 … n−1 on every other dim; ``output="torch"`` gives exactly the same variables and
    coordinates with the same values; `keeps` says the same as the two lists."""
    save, steps = case
    X0 = sf.sphere.uniform(batch=B, N=N, d=d, seed=1)
    ds = solve(Rotate(), X0, T=T, steps=steps, save=save, seed=3)
    out = solve(Rotate(), X0, T=T, steps=steps, save=save, seed=3, output="torch")
    assert set(out) == set(ds.variables)
    for name, value in out.items():
        np.testing.assert_array_equal(value.detach().numpy(), ds[name].values, err_msg=name)
    kept, tokens = save.stat_steps(steps), save.token_steps(steps)
    if kept:
        np.testing.assert_array_equal(ds.step.values, kept)
        np.testing.assert_allclose(ds.time.values, np.asarray(kept) * (T / steps), rtol=0, atol=0)
        assert out["time"].dtype == torch.float64
        assert set(ds.data_vars) - {"X", "X_final"} == set(save.stats) | ({"centre", "first"} if save.fn else set())
        for name in save.stats:
            assert ds[name].dims == ("sample", "time")
        if save.fn:
            assert ds.centre.dims == ("sample", "time", "centre_0") and ds.first.dims == ("sample", "time")
            np.testing.assert_array_equal(ds.centre_0.values, np.arange(d))
    else:
        assert "time" not in ds.variables and not (set(ds.data_vars) - {"X", "X_final"})
    if "energy" in save.stats and kept:
        assert ds.energy.attrs["long_name"] == f"interaction energy E_β (β = {save.energy_beta:g})"
    if tokens:
        np.testing.assert_array_equal(ds.snapshot_step.values, tokens)
        np.testing.assert_array_equal(ds.snapshot_time.values, np.asarray(tokens) * (T / steps))
        np.testing.assert_array_equal(ds.snapshot.values, np.arange(len(tokens)))
        assert ds.X.dims == ("sample", "snapshot", "token", "dim")
    else:
        assert "X" not in ds and "snapshot" not in ds.variables
    assert ("X_final" in ds) == save.final
    if tokens or save.final:
        np.testing.assert_array_equal(ds.token.values, np.arange(N))
        np.testing.assert_array_equal(ds.dim.values, np.arange(d))
    else:
        assert "token" not in ds.variables and "dim" not in ds.variables
    np.testing.assert_array_equal(ds.sample.values, np.arange(B))
    stats, toks = save.keeps(steps)
    assert [k for k in range(steps + 1) if stats(k)] == kept and [k for k in range(steps + 1) if toks(k)] == tokens


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(1, 50), every=st.integers(1, 60), at=st.none() | st.lists(st.integers(0, 50), max_size=6))
def test_save_schedules_from_their_definition(steps, every, at):
    """``every``: 0, every, 2·every, … and the last step; ``at``: those steps, sorted, each once (all
    in 0..steps, else one error naming the range); nothing recorded without statistics or fn."""
    save = SaveAt(every=every, at=at, tokens_every=every, tokens_at=at)
    if at is not None and at and max(at) > steps:
        with pytest.raises(ValueError, match=rf"^SaveAt: steps to save must lie in 0\.\.{steps} \(got "):
            save.stat_steps(steps)
        return
    want = sorted(set(at)) if at is not None else sorted(set(range(0, steps + 1, every)) | {steps})
    assert save.stat_steps(steps) == want and save.token_steps(steps) == want and save.records()
    quiet = SaveAt(stats=(), every=every, at=at)
    assert not quiet.records() and quiet.stat_steps(steps) == [] and quiet.token_steps(steps) == []
    stats, tokens = quiet.keeps(steps)
    assert not any(stats(k) or tokens(k) for k in range(steps + 1))


def test_float32_tokens_have_their_statistics_in_float64():
    """A float32 run's statistics are those of its tokens normalised in float64 (not float32's
    rounding of 1 − cosine), in float64."""
    X0 = TOKENS.to(torch.float32)
    out = solve(Rotate(), X0, T=1.0, steps=3, save=SaveAt(tokens_every=1), seed=0, output="torch")
    assert out["X"].dtype == torch.float32 and out["mean_cosine"].dtype == torch.float64
    for k in range(4):
        want = pair_statistics(torch.nn.functional.normalize(out["X"][:, k].double(), dim=-1))
        for name in STATISTICS:
            torch.testing.assert_close(out[name][:, k], want[name], rtol=0, atol=1e-15)


def test_the_hook_sees_every_step_and_its_output_continues_the_run():
    """hook(k, X) runs after each step k = 1..steps on the model's output; None continues from X,
    a tensor from that tensor; a first output that is not a state of X0's shape and unit rows is one
    error naming the hook."""
    seen = []

    def flip(k, X):
        seen.append((k, X.clone()))
        return -X if k % 2 else None

    out = solve(Rotate(), TOKENS, T=1.0, steps=4, save=SaveAt(tokens_every=1), seed=0, hook=flip, output="torch")
    assert [k for k, _ in seen] == [1, 2, 3, 4]
    model = Rotate()
    model.reset(2, 3, make_generator(0, "cpu"), torch.float64, "cpu")
    X = TOKENS
    for k in range(1, 5):
        X = model.step(X, 0.25, None)
        torch.testing.assert_close(seen[k - 1][1], X, rtol=0, atol=0)
        X = -X if k % 2 else X
        torch.testing.assert_close(out["X"][:, k], X, rtol=0, atol=0)
    torch.testing.assert_close(out["X_final"], X, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^hook \(.*\): returned shape \(2, 2, 3\), expected \(2, 3, 3\)"):
        solve(Rotate(), TOKENS, T=1.0, steps=3, seed=0, hook=lambda k, X: X[:, :2] if k == 2 else None)
    with pytest.raises(ValueError, match=r"^hook \(.*\): returned rows of norm 2 to 2; a model on the sphere"):
        solve(Rotate(), TOKENS, T=1.0, steps=3, seed=0, hook=lambda k, X: 2 * X)


class Shrinks(Rotate):
    """A user model whose third step returns fewer tokens."""

    def reset(self, *args) -> None:
        self.n = 0

    def step(self, X, dt, draws):
        self.n += 1
        return X if self.n < 3 else X[:, :2]


def test_refusals_name_the_argument():
    """Before any work: the meta device, too many steps, a path whose fine steps ``steps`` does not
    divide or whose parts do not lead with a divisor of the batch, one token with pair statistics
    asked for; after: a later step that changes the state's shape names model.step."""
    cases = [
        (dict(X0=TOKENS.to("meta")), r"^X0: is on the meta device \(shapes only, no numbers\)"),
        (dict(steps=2**63), r"^steps: must be an integer >= 1 and <= 2\*\*63 - 1 \(got 9223372036854775808\)$"),
        (dict(steps=3, path=BrownianPath((2, 3, 3), 4, seed=0)), r"^path: steps = 3 must divide its 4 fine steps$"),
        (dict(path=BrownianPath((3, 3, 3), 4, seed=0)),
         r"^path: BrownianPath parts \[\(3, 3, 3\)\] must lead with a divisor of the batch 2 of X0$"),
        (dict(X0=TOKENS[:, :1]), r"^X0: the pair statistics mean_cosine, energy, min_cosine need N >= 2 tokens "
                                 r"\(got N = 1\); pass save=SaveAt\(stats=\(\)\) to run a single token$"),
        (dict(X0=TOKENS[:, :1], save=SaveAt(stats=("energy",), at=[1])), r"statistics energy need N >= 2"),
    ]
    for kw, message in cases:
        args = {"X0": TOKENS, "T": 1.0, "steps": 2, "seed": 0} | kw
        with pytest.raises(ValueError, match=message):
            solve(Rotate(), **args)
    for save in (SaveAt(stats=()), SaveAt(at=[])):  # one token: allowed where no pair statistic is kept
        assert solve(Rotate(), TOKENS[:, :1], T=1.0, steps=2, seed=0, save=save).X_final.shape == (2, 1, 3)
    with pytest.raises(ValueError, match=r"^model\.step \(.*Shrinks\): returned shape \(2, 2, 3\), expected \(2, 3, 3\)"):
        solve(Shrinks(), TOKENS, T=1.0, steps=4, seed=0)
    for path in (BrownianPath((1, 3, 3), 4, seed=0), BrownianPath((2, 3, 3), 2, seed=0)):
        assert solve(Rotate(), TOKENS, T=1.0, steps=2, seed=0, path=path).attrs["path"] == repr(path)


MODELS = {
    "tanh, N = d": (lambda: sf.Transformer(sf.SoftmaxAttention(beta=1.0, gamma=1.0), sf.RandomMLP(8, torch.tanh)), 3, 3),
    "relu, biases, N < d": (lambda: sf.Transformer(sf.SoftmaxAttention(beta=2.0, gamma=0.5),
                                                   sf.RandomMLP(6, "relu", sigma_U=0.5, sigma_W=0.3)), 2, 5),
    "gelu, width < N": (lambda: sf.Transformer(sf.SoftmaxAttention(), sf.RandomMLP(3, "gelu")), 5, 2),
    "weights": (lambda: sf.Transformer(sf.SoftmaxAttention(), sf.RandomMLP(4, "tanh", sigma_W=0.2, mode="weights")), 3, 3),
    "parallel": (lambda: sf.Transformer(sf.SoftmaxAttention(), sf.RandomMLP(5, "tanh"), order="parallel"), 3, 4),
    "chunked attention": (lambda: sf.Transformer(sf.SoftmaxAttention(chunk=2), sf.RandomMLP(4, "tanh")), 5, 3),
    "A and V": (lambda: sf.Transformer(sf.SoftmaxAttention(A=0.5 * torch.eye(3, dtype=torch.float64),
                                                           V=torch.eye(3, dtype=torch.float64), chunk=2)), 5, 3),
    "user model": (lambda: Rotate(0.7), 3, 3),
}


@pytest.mark.parametrize("name", MODELS)
def test_gradients_of_a_run_are_those_of_its_numbers(name):
    """With ``output="torch"`` the run is differentiable in X0 and its gradient is the derivative of
    the numbers the run computes (torch.autograd.gradcheck: central differences at 1e-6 in float64,
    tokens Y/|Y| of free Y, the seed fixed), for X_final and every statistic; the dataset of the same
    run holds the same numbers (to rounding: a chunked attention is dense under autograd)."""
    make, N, d = MODELS[name]
    model = make()
    Y = sf.sphere.uniform(batch=2, N=N, d=d, seed=2).clone().requires_grad_(True)

    def run(Y):
        out = solve(model, torch.nn.functional.normalize(Y, dim=-1), T=1.0, steps=3, seed=0, output="torch")
        return (out["X_final"], *(out[k] for k in STATISTICS))

    assert torch.autograd.gradcheck(run, (Y,))
    ds = solve(model, torch.nn.functional.normalize(Y.detach(), dim=-1), T=1.0, steps=3, seed=0)
    np.testing.assert_allclose(ds.X_final.values, run(Y)[0].detach().numpy(), rtol=0, atol=1e-14)


def test_a_models_weights_are_constants_of_the_run():
    """As the docstring says: weights given with requires_grad are validated into detached
    constants: the run's graph reaches X0, never A or V, and the caller's tensors are untouched."""
    A = (0.5 * torch.eye(3, dtype=torch.float64)).requires_grad_(True)
    V = torch.eye(3, dtype=torch.float64).requires_grad_(True)
    X = sf.sphere.uniform(batch=2, N=4, d=3, seed=1).clone().requires_grad_(True)
    out = solve(sf.Transformer(sf.SoftmaxAttention(A=A, V=V)), X, T=1.0, steps=2, seed=0, output="torch")
    gX, gA, gV = torch.autograd.grad(out["X_final"].sum(), (X, A, V), allow_unused=True)
    assert gX is not None and gX.abs().sum() > 0
    assert gA is None and gV is None and A.requires_grad and V.requires_grad


@pytest.mark.parametrize("name", ["tanh, N = d", "relu, biases, N < d", "chunked attention", "user model"])
def test_a_run_stays_on_the_device_of_its_tokens_whatever_the_default_device(name):
    """With torch's default device set elsewhere (``meta``: shapes only) a run of CPU tokens makes
    every tensor of its output on the CPU (X0's device), with the numbers of a run under the CPU
    default; so does the dataset."""
    make, N, d = MODELS[name]
    X0 = sf.sphere.uniform(batch=2, N=N, d=d, seed=1)
    save = SaveAt(tokens_every=2, fn=lambda X: {"centre": X.mean(1)})
    want = solve(make(), X0, T=1.0, steps=3, save=save, seed=0, output="torch")
    with torch.device("meta"):
        got = solve(make(), X0, T=1.0, steps=3, save=save, seed=0, output="torch")
        ds = solve(make(), X0, T=1.0, steps=3, save=save, seed=0)
    assert set(got) == set(want)
    for key, value in got.items():
        assert value.device == X0.device and torch.equal(value, want[key]), key
    np.testing.assert_array_equal(ds.X_final.values, want["X_final"].numpy())


def observe(out):
    """A SaveAt.fn returning ``out(X)``."""
    def fn(X):
        return out(X)
    return fn


def test_observables_are_refused_by_one_message_naming_fn_and_what_is_wrong():
    """Each malformed output of SaveAt.fn is one ValueError, word for word: the callable's name, the
    value or name at fault, the names a variable may not take (the dataset's own and the
    statistics kept), the batch size (2 samples of 3 tokens here), the clashing names."""
    from stochformer.core.validation import callable_name, short
    from stochformer.integrate import RESERVED
    X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    taken = ", ".join(sorted(RESERVED | {"energy"}))
    cases = [
        (lambda X: [], "must return a non-empty mapping of names to tensors (got [])"),
        (lambda X: {}, "must return a non-empty mapping of names to tensors (got {})"),
        (lambda X: {"X": X[:, 0]}, f"'X' is not a free variable name (an identifier other than {taken})"),
        (lambda X: {"energy": X[:, 0]}, f"'energy' is not a free variable name (an identifier other than {taken})"),
        (lambda X: {"a b": X[:, 0]}, f"'a b' is not a free variable name (an identifier other than {taken})"),
        (lambda X: {"c": 3.0}, f"'c' must be a tensor with the batch 2 as its leading dim (got {short(3.0)})"),
        (lambda X: {"c": X[0]}, f"'c' must be a tensor with the batch 2 as its leading dim (got {short(X0[0])})"),
        (lambda X: {"a": X.mean(1), "a_0": X[:, 0, 0]}, "['a_0'] name both a variable and a dim of another (NAME_i)"),
    ]
    for out, message in cases:
        fn = observe(out)
        with pytest.raises(ValueError) as err:
            solve(Rotate(), X0, T=1.0, steps=2, seed=0, save=SaveAt(stats=("energy",), fn=fn))
        assert str(err.value) == f"SaveAt.fn ({callable_name(fn)}): {message}"


def test_observables_of_their_own_dims_and_graphs():
    """A variable may take the name NAME_i of a dim only where NAME has no such dim (a (batch,)
    observable has none); ``output="torch"`` keeps an observable's graph to X0, the dataset detaches
    an observable that requires grad (here through a weight of fn's own)."""
    X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    ds = solve(Rotate(), X0, T=1.0, steps=2, seed=0, save=SaveAt(fn=lambda X: {"a": X[:, 0, 0], "a_0": X[:, 0, 1]}))
    assert ds.a.dims == ("sample", "time") and ds.a_0.dims == ("sample", "time")
    X = X0.clone().requires_grad_(True)
    out = solve(Rotate(), X, T=1.0, steps=2, seed=0, save=SaveAt(fn=lambda X: {"c": X.mean(1)}), output="torch")
    (g,) = torch.autograd.grad(out["c"][:, -1].sum(), X)
    assert g.abs().sum() > 0
    w = torch.ones(1, dtype=torch.float64, requires_grad=True)
    ds = solve(Rotate(), X0, T=1.0, steps=2, seed=0, save=SaveAt(fn=lambda X: {"c": X.mean(1) * w}))
    np.testing.assert_array_equal(ds.c.values[:, -1], out["c"][:, -1].detach().numpy())


@dataclasses.dataclass
class Blows:
    """A user model (a dataclass, so its large parameters can be named) whose step ``at`` returns
    NaN tokens, or raises ``error``."""

    scale: float = 1e4
    at: int = 2
    error: Optional[BaseException] = None

    def reset(self, batch, d, generator, dtype, device) -> None:
        self.k = 0

    def step(self, X, dt, draws):
        self.k += 1
        if self.error is not None:
            raise self.error
        return X * math.nan if self.k == self.at else X


def test_failures_during_a_run_name_the_model_and_what_to_change():
    """Tokens off the sphere or not finite at the start, a non-finite state at a later step (naming
    the model's large parameters), an allocator's failure in a step (naming the run's shape and
    what to reduce), a hook that returns something other than a tensor after its first step: one
    ValueError each (NonFiniteError, a ValueError, for the non-finite states); any other error a
    user's step raises on its first call is one ValueError naming it, with that error as its cause."""
    with pytest.raises(ValueError, match=r"^X0: rows must have unit norm \(tokens on the sphere; got norms from 2 to 2\)"):
        solve(Rotate(), 2 * TOKENS, T=1.0, steps=2, seed=0)
    for X0, layer in ((TOKENS * math.nan, 0), (TOKENS, 2)):
        with pytest.raises(NonFiniteError, match=rf"^non-finite tokens at layer {layer}\b.*scale = 1e\+04"):
            solve(Blows(), X0, T=1.0, steps=3, seed=0)
    reduce = r"; reduce batch, N or d, or the model's sizes \(width, features, attention draws\)$"
    for error in (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), MemoryError()):
        with pytest.raises(ValueError, match=r"^model: a run of tokens of shape \(2, 3, 3\): needs more memory than is "
                                             r"available \((CUDA out of memory\. Tried to allocate 2\.00 GiB|MemoryError)\)"
                                             + reduce):
            solve(Blows(error=error), TOKENS, T=1.0, steps=3, seed=0)
    with pytest.raises(ValueError, match=r"^model\.step \(test_solve_contract\.Blows\): raised RuntimeError on its first call "
                                         r"\(a failure that is not about memory\), given a float64 tensor of shape \(2, 3, 3\)") as err:
        solve(Blows(error=RuntimeError("a failure that is not about memory")), TOKENS, T=1.0, steps=3, seed=0)
    assert isinstance(err.value.__cause__, RuntimeError)  # the user's own error, kept as the cause
    with pytest.raises(ValueError, match=r"^hook \(.*\): "):
        solve(Rotate(), TOKENS, T=1.0, steps=3, seed=0, hook=lambda k, X: X.tolist() if k == 2 else None)


class Counting(sf.ProgressMeter):
    """A progress meter that records what it is given to count."""

    def track(self, steps):
        self.seen = list(steps)
        return iter(self.seen)


@settings(max_examples=10, deadline=None)
@given(steps=st.integers(1, 7))
def test_a_progress_meter_counts_the_steps_and_changes_no_number(steps):
    """With a progress meter the run takes the same steps 1..steps and gives the same numbers."""
    meter = Counting()
    shown = solve(Rotate(), TOKENS, T=1.0, steps=steps, seed=3, progress=meter, save=SaveAt(every=1))
    plain = solve(Rotate(), TOKENS, T=1.0, steps=steps, seed=3, save=SaveAt(every=1))
    assert meter.seen == list(range(1, steps + 1))
    assert shown.identical(plain)  # values, coordinates and attributes


def test_the_torch_output_keeps_the_graph_of_every_record():
    """output="torch": the kept statistics and token snapshots are functions of X0 (a gradient
    reaches X0 through each), not detached copies."""
    X0 = TOKENS.clone().requires_grad_(True)
    out = solve(Rotate(), X0, T=1.0, steps=2, seed=0, save=SaveAt(every=1, tokens_every=1), output="torch")
    for name in ("mean_cosine", "energy", "X"):
        assert out[name].requires_grad, name
        (grad,) = torch.autograd.grad(out[name][:, -1].sum(), X0, retain_graph=True)
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0, name


@settings(max_examples=12, deadline=None, derandomize=True)
@given(bad=st.sampled_from([math.nan, math.inf, -math.inf]), own=st.booleans(), step=st.integers(0, 5))
def test_a_hook_returning_non_finite_numbers_is_a_breakdown_if_ours_and_the_users_error_if_theirs(bad, own, step):
    """One of stochformer's hooks (an experiment's renormalisation) that returns non-finite numbers
    on its first call reports a numerical breakdown (`NonFiniteError`, which an experiment blames on
    its config's fields); a user's hook doing the same is a ``ValueError`` naming the hook. Before:
    both named the hook, so ``sync --set model.sigma_U=1e150`` blamed the experiment's own
    ``renormalise`` instead of sigma_U."""
    def hook(k: int, X: torch.Tensor) -> torch.Tensor:
        out = X.clone()
        out.view(-1)[step] = bad
        return out

    hook.__module__ = "stochformer.experiments.sync" if own else "my_project.hooks"
    X0 = sf.sphere.uniform(batch=2, N=3, d=3, seed=0)
    with pytest.raises(ValueError) as err:
        solve(sf.Transformer(), X0, T=1.0, steps=2, seed=0, hook=hook)
    assert isinstance(err.value, NonFiniteError) == own
    if not own:
        assert "hook (" in str(err.value) and "non-finite" in str(err.value)
