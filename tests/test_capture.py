"""``solve(capture=True)``: the steps replayed as one captured graph (stochformer.core.capture).

On a CPU the capture is traced by ``make_fx``, with the semantics of a CUDA graph (Python runs once,
no host synchronisation, the generator's draws run again at every replay), so these tests are the
GPU path's tests too: a replay gives exactly the numbers of the uncaptured run, whatever the model,
the sizes and the records; a rare data-dependent branch or a non-finite state reruns the steps
uncaptured (fault injection); a part that holds Python state gives other numbers once captured
(which is what the equality checks would catch); what cannot be captured is refused before any work.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.config import NOISE_KINDS, ConfigError, RunConfig, as_config
from stochformer.config.build import make_model
from stochformer import integrate
from stochformer.core import capture as capture_module
from stochformer.core.brownian import BrownianPath
from stochformer.core.capture import CaptureError, Captured, deferred, deferring, unsafe_parts
from stochformer.core.validation import NonFiniteError
from stochformer.experiments.simulate import run_simulate
from stochformer.experiments.sync import SyncConfig
from stochformer.integrate import CAPTURE_STEPS
from stochformer.model.attention import GuardedAttention, RandomBatchAttention
from stochformer.model.attention_variants import ATTENTION_KINDS


def same_runs(a, b) -> None:
    """Two datasets with the same variables, equal to the last bit."""
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        assert torch.equal(torch.as_tensor(a[name].values), torch.as_tensor(b[name].values)), name


def mlp_model(width: int = 16, **mlp) -> sf.Transformer:
    return sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0), noise=sf.RandomMLP(width=width, rng="torch", **mlp))


@settings(max_examples=12, deadline=None, database=None, derandomize=True)
@given(
    N=st.integers(2, 9), d=st.integers(2, 7), width=st.integers(1, 24), batch=st.integers(1, 3),
    steps=st.integers(1, 12), every=st.integers(1, 13), mode=st.sampled_from(["gaussian", "weights"]),
    sigma=st.sampled_from([0.0, 0.3]), order=st.sampled_from(["post_ln", "parallel"]),
    dtype=st.sampled_from([torch.float64, torch.float32]), sdpa=st.booleans(), tokens=st.booleans(),
)
def test_capture_gives_the_numbers_of_the_uncaptured_run(N, d, width, batch, steps, every, mode, sigma, order, dtype,
                                                          sdpa, tokens) -> None:
    # both output routes of the Gaussian MLP (ΦZ' and the Cholesky S Z''), both hidden routes
    # (U, and C Z for N < d), biases, both orders, both dtypes, records at any steps
    model = sf.Transformer(attention=sf.SoftmaxAttention(beta=2.0, gamma=1.0, sdpa=sdpa),
                           noise=sf.RandomMLP(width=width, rng="torch", mode=mode, sigma_U=sigma, sigma_W=sigma), order=order)
    X0 = sf.sphere.uniform(batch=batch, N=N, d=d, seed=3, dtype=dtype)
    save = sf.SaveAt(every=every, tokens_every=every if tokens else None)
    plain = sf.solve(model, X0, T=1.0, steps=steps, save=save, seed=5)
    captured = sf.solve(model, X0, T=1.0, steps=steps, save=save, seed=5, capture=True)
    same_runs(plain, captured)
    assert captured.attrs["capture"] == "traced" and "capture" not in plain.attrs
    tensors = [sf.solve(model, X0, T=1.0, steps=steps, save=save, seed=5, output="torch", capture=c) for c in (False, True)]
    assert sorted(tensors[0]) == sorted(tensors[1]) and all(torch.equal(tensors[0][k], tensors[1][k]) for k in tensors[0])


def test_graphs_of_capture_steps_are_captured_once_and_replayed(monkeypatch) -> None:
    captures, replays = [], []
    real_init, real_replay = Captured.__init__, Captured.replay
    monkeypatch.setattr(Captured, "__init__", lambda self, *a: captures.append(1) or real_init(self, *a))
    monkeypatch.setattr(Captured, "replay", lambda self: replays.append(1) or real_replay(self))
    monkeypatch.setattr("stochformer.integrate.CAPTURE_STEPS", 3)
    model = mlp_model()
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    for save, check, graphs, replayed in [
        (sf.SaveAt(stats=(), final=True), 256, 2, 5),  # 14 steps after the first: 3+3+3+3+2
        (sf.SaveAt(every=5), 256, 3, 6),  # steps 2-5 (3+1), 6-10 (3+2), 11-15 (3+2)
        (sf.SaveAt(stats=(), final=True), 5, 3, 6),  # the flag read every 5 steps: 2-6 (3+2), 7-11 (3+2), 12-15 (3+1)
    ]:
        monkeypatch.setattr("stochformer.integrate.CAPTURE_CHECK", check)
        captures.clear(), replays.clear()
        captured = sf.solve(model, X0, T=1.0, steps=15, save=save, seed=1, capture=True)
        same_runs(sf.solve(model, X0, T=1.0, steps=15, save=save, seed=1), captured)
        assert (len(captures), len(replays)) == (graphs, replayed)
    assert CAPTURE_STEPS >= 1


def flaky_cholesky(real):
    """torch.linalg.cholesky_ex that reports a failure wherever a data-dependent hash of K says so
    (about one matrix in three): the rare branch of `_cholesky`, as a tensor operation that a
    capture records."""
    def fn(K, *args, **kwargs):
        C, info = real(K, *args, **kwargs)
        fail = (K.sum((-1, -2)) * 1e3).frac().abs() < 0.33
        return C, torch.where(fail, torch.ones_like(info), info)
    return fn


@pytest.mark.parametrize("N, d", [(3, 6), (8, 3)])  # the hidden route C Z (N < d), the output route S Z''
def test_a_deferred_branch_reruns_the_steps_uncaptured(monkeypatch, N, d) -> None:
    monkeypatch.setattr(torch.linalg, "cholesky_ex", flaky_cholesky(torch.linalg.cholesky_ex))
    model = mlp_model(width=32)
    X0 = sf.sphere.uniform(batch=3, N=N, d=d, seed=2)
    plain = sf.solve(model, X0, T=1.0, steps=20, seed=4, save=sf.SaveAt(every=3))
    checked = []
    real_check = integrate.check_finite
    monkeypatch.setattr(integrate, "check_finite", lambda X, k, m: checked.append(k) or real_check(X, k, m))
    captured = sf.solve(model, X0, T=1.0, steps=20, seed=4, save=sf.SaveAt(every=3), capture=True)
    same_runs(plain, captured)
    assert max(checked) > 1  # the branch was met inside captured steps, which ran again uncaptured (checked)


class NaNAfter:
    """Softmax attention whose output turns non-finite once ``sign`` times the mean first coordinate
    of its input passes ``level``: a data-dependent failure, in tensor operations (capturable)."""

    capture_safe = True

    def __init__(self, level: float, sign: float = 1.0) -> None:
        self.inner, self.level, self.sign = sf.SoftmaxAttention(beta=1.0, gamma=1.0), level, sign

    def __call__(self, X):
        out = self.inner(X)
        return torch.where(self.sign * X[..., :1].mean() > self.level, out * float("nan"), out)


def test_a_non_finite_state_in_a_captured_graph_names_the_step_of_the_uncaptured_run(monkeypatch) -> None:
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    kept = sf.solve(sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0)), X0, T=4.0, steps=12, seed=0,
                    save=sf.SaveAt(stats=(), tokens_every=1))
    means = kept.X.values[..., 0].mean(axis=(0, 2))  # the mean first coordinate at steps 0 … 12
    # a level first passed at a step k >= 3 (a new record of ±means): the attention of step k + 1 fails
    sign, k = next((s, k) for s in (1.0, -1.0) for k in range(3, 12) if s * means[k] > max(s * means[:k]))
    level = (max(sign * means[:k]) + sign * means[k]) / 2
    errors = []
    for capture in (False, True):
        with pytest.raises(NonFiniteError) as err:
            sf.solve(sf.Transformer(attention=NaNAfter(level, sign)), X0, T=4.0, steps=12, seed=0, capture=capture)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and f"layer {k + 1}" in errors[0]
    # one record at the end: the flag is still read every CAPTURE_CHECK steps, and only the steps
    # since the last read run again (checked one by one up to the failing one)
    monkeypatch.setattr("stochformer.integrate.CAPTURE_CHECK", 3)
    checked = []
    real_check = integrate.check_finite
    monkeypatch.setattr(integrate, "check_finite", lambda X, j, m: checked.append(j) or real_check(X, j, m))
    with pytest.raises(NonFiniteError) as err:
        sf.solve(sf.Transformer(attention=NaNAfter(level, sign)), X0, T=4.0, steps=12, seed=0, capture=True,
                 save=sf.SaveAt(stats=(), final=True))
    assert str(err.value) == errors[0]
    rerun = checked[2:]  # after X0 and step 1
    start = 2 + 3 * ((k + 1 - 2) // 3)  # the flag is read after steps 4, 7, 10 and 12: segments 2-4, 5-7, 8-10, 11-12
    assert rerun == list(range(start, k + 2))


def test_a_part_with_python_state_gives_other_numbers_once_captured(monkeypatch) -> None:
    # the parallel sampler draws ahead into a buffer served in Python: frozen into the graph, every
    # replay would reuse the same normals. It is refused; forced, the equality above fails.
    mlp = sf.RandomMLP(width=16, rng="parallel")
    model = sf.Transformer(attention=sf.SoftmaxAttention(), noise=mlp)
    X0 = sf.sphere.uniform(batch=2, N=5, d=3, seed=0)
    with pytest.raises(ValueError, match=r"capture: model\.noise \(RandomMLP\) cannot be captured"):
        sf.solve(model, X0, T=1.0, steps=8, seed=0, capture=True)
    monkeypatch.setattr(sf.RandomMLP, "capture_safe", property(lambda self: True))
    plain = sf.solve(model, X0, T=1.0, steps=8, seed=0, save=sf.SaveAt(stats=(), final=True))
    forced = sf.solve(model, X0, T=1.0, steps=8, seed=0, save=sf.SaveAt(stats=(), final=True), capture=True)
    assert not torch.equal(torch.as_tensor(plain.X_final.values), torch.as_tensor(forced.X_final.values))


def test_a_host_synchronisation_in_a_part_is_one_clear_error(monkeypatch) -> None:
    class Syncing(NaNAfter):
        def __call__(self, X):
            out = self.inner(X)
            return out * 0 if bool(X.isnan().any()) else out  # asks the device for a value

    model = sf.Transformer(attention=Syncing(0.0), noise=None)
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    with pytest.raises(CaptureError) as err:
        sf.solve(model, X0, T=1.0, steps=5, seed=0, capture=True)
    # one line: what failed (the tracer's own first line, whole), what it means, and what to do
    cause = str(err.value.__cause__).splitlines()[0]
    assert str(err.value) == (f"capture: the steps could not be captured ({cause[:200]}); a part that states capture_safe "
                              "asks the device for a value or leaves torch; give capture=False")
    assert "value out of a tracing tensor" in cause and len(cause) > 200


@pytest.mark.parametrize("part, name", [
    (RandomBatchAttention(sf.SoftmaxAttention(), 2), "model.attention (RandomBatchAttention)"),
    (GuardedAttention(sf.SoftmaxAttention(), "float32"), "model.attention (GuardedAttention)"),
])
def test_parts_that_do_not_state_capture_safe_are_refused_by_name(part, name) -> None:
    model = sf.Transformer(attention=part, noise=sf.RandomMLP(width=8, rng="torch"))
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    with pytest.raises(ValueError) as err:
        sf.solve(model, X0, T=1.0, steps=3, seed=0, capture=True)
    assert name in str(err.value)
    assert unsafe_parts(model) == [name]
    assert unsafe_parts(sf.LimitSDE()) == ["model (LimitSDE)"]
    assert unsafe_parts(mlp_model()) == []


def test_capture_refuses_a_path_a_hook_and_autograd_before_any_work(monkeypatch) -> None:
    model = mlp_model()
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    path = BrownianPath.from_normals(torch.randn(4, 2, 4, 3, dtype=torch.float64))
    monkeypatch.setattr(sf.RandomMLP, "reset", lambda *a: pytest.fail("work started"))
    cases = [
        ({"hook": lambda k, X: None}, "capture: a hook runs Python after every step; give hook=None or capture=False"),
        ({"output": "torch", "X0": X0.clone().requires_grad_()},
         "capture: a captured run keeps no autograd graph; give X0 without requires_grad or capture=False"),
        ({"path": path}, "capture: a BrownianPath is read step by step in Python; give path=None or capture=False"),
        ({"model": sf.Transformer(attention=sf.SoftmaxAttention(), noise=sf.RandomMLP(width=8, rng="parallel"))},
         "capture: model.noise (RandomMLP) cannot be captured (not capture_safe: Python state that changes from step "
         "to step, or a host synchronisation); a Transformer of SoftmaxAttention and RandomMLP(rng='torch') can, or "
         "give capture=False"),
    ]
    for extra, message in cases:
        kwargs = {"model": model, "X0": X0, **extra}
        with pytest.raises(ValueError) as err:
            sf.solve(T=1.0, steps=4, seed=0, capture=True, **kwargs)
        assert str(err.value) == message


def test_deferred_records_only_inside_a_capture() -> None:
    cond = torch.tensor([False, True])
    assert deferred(cond) is False
    with deferring() as flags:
        assert deferred(cond) is True and deferred(~cond) is True
    assert [bool(f) for f in flags] == [True, True]
    assert capture_module._FLAGS.get() is None


#: parts of one's own for the config's capture check: an attention that does not state
#: capture_safe, the same one stating it, a noise that states it (torch's draws) and one that does not
OWN_PARTS = textwrap.dedent('''
    import torch
    from stochformer.model.kernel import NoiseKernel
    from stochformer.model.noise import ExactField, RandomMLP

    class Cosine:
        def __init__(self, beta=1.0):
            self.beta = beta
        def __call__(self, X, keys=None):
            keys = X if keys is None else keys
            return torch.softmax(self.beta * X @ keys.mT, dim=-1) @ keys

    class SafeCosine(Cosine):
        capture_safe = True

    def safe_mlp(width=8):
        return RandomMLP(width=width, rng="torch")

    def tanh_field(d=4):
        return ExactField(NoiseKernel("tanh", d, 0.2, 0.1, 1.0))
''')
OWN_ATTENTIONS = ["own_parts:Cosine", "own_parts:SafeCosine"]
OWN_NOISES = ["own_parts:safe_mlp", "own_parts:tanh_field"]


@pytest.fixture
def own_parts(tmp_path, monkeypatch):
    (tmp_path / "own_parts.py").write_text(OWN_PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("own_parts", None)
    yield
    sys.modules.pop("own_parts", None)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dynamics=st.sampled_from(["transformer"] * 4 + ["sde"]), attention=st.sampled_from([True] * 4 + [False]),
       mlp=st.sampled_from([True] * 4 + [False]), kind=st.sampled_from(["softmax"] * 4 + [*ATTENTION_KINDS, *OWN_ATTENTIONS]),
       p=st.sampled_from([None, None, 2]), noise=st.sampled_from(["auto"] * 3 + [*NOISE_KINDS, *OWN_NOISES]),
       rng=st.sampled_from(["auto", "torch"] * 3 + ["parallel"]))
def test_a_config_captures_exactly_what_solve_captures(own_parts, dynamics, attention, mlp, kind, p, noise, rng) -> None:
    """The config's capture check is solve's rule (the built parts state ``capture_safe``), not a list
    of its own: a config it accepts runs captured with the numbers of the uncaptured run with rng
    torch; one it refuses names the field whose part solve refuses, and every value it names as
    capturable is accepted for that field."""
    fields = dict(N=4, d=4, L=6, batch=2, m=8, seed=3, record_every=3, heads=2, dynamics=dynamics, attention=attention,
                  mlp=mlp, attention_kind=kind, attention_batch=p, noise=noise, rng=rng)
    try:
        plain = as_config(fields)
    except ConfigError:  # not a valid run whatever capture is
        assume(False)
    try:
        cfg = as_config({**fields, "capture": True})
    except ConfigError as err:
        message = str(err).removeprefix("invalid configuration: ")
        field = message.split(":")[0]
        event(f"refused: {field}")
        assert field in ("dynamics", "attention_kind", "attention_batch", "noise", "rng") and \
            message.startswith(f"{field}: capture = true ")
        if field == "rng":
            assert rng == "parallel"
            return
        model = make_model(plain.with_updates(rng="torch"))
        assert unsafe_parts(model)
        with pytest.raises(ValueError, match="capture: model"):
            sf.solve(model, sf.sphere.uniform(batch=2, N=4, d=4, seed=0), T=1.0, steps=2, seed=0, capture=True)
        named = message.split("needs ")[1].split(" (got")[0]
        for value in re.findall(r"'[^']*'|None", named):
            again = {**fields, "capture": True, field: ast.literal_eval(value)}
            try:
                as_config(again)
            except ConfigError as other:
                assert not str(other).removeprefix("invalid configuration: ").startswith(f"{field}:"), (value, str(other))
        return
    event("accepted")
    assert rng != "parallel" and not unsafe_parts(make_model(cfg))
    captured = run_simulate(cfg)
    assert captured.data.attrs["capture"] == "traced"
    same_runs(run_simulate(plain.with_updates(rng="torch")).data, captured.data)


def test_simulate_captures_from_the_config_with_the_numbers_of_rng_torch() -> None:
    base = dict(N=5, d=3, L=12, m=16, batch=2, seed=7, record_every=4)
    plain = run_simulate(RunConfig(**base, rng="torch"))
    captured = run_simulate(RunConfig(**base, capture=True))
    same_runs(plain.data, captured.data)
    assert captured.config.capture is True
    with pytest.raises(ConfigError, match="model.capture: sync does not capture"):
        as_config({"model": {"capture": True}}, SyncConfig)
