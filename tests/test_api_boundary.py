"""The validation boundary of the public Python API, by property.

Every public function and constructor is called with one argument replaced by a value drawn from
hostile strategies (Python and numpy scalars of every kind, extreme and non-finite numbers,
strings, None, lists, numpy arrays and tensors of every dtype, of 0-size and mismatched shapes, on
the meta device, requiring grad). The outcome must be a clean error — a ``ValueError`` or
``TypeError`` whose message names the argument — or a correct result: finite numbers of the
right shape, unit rows where the maths needs them, and for a model part the run it drives. User
callables that return a wrong shape or NaN are refused naming them. The pre-flight refuses huge
sizes of every command's config before any allocation (the experiment function is never
entered; in a child process under a tight address-space limit nothing is allocated).

The counts (functions covered, examples run, outcomes) are printed by the last test and checked:
no traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.core import sphere
from stochformer.measure import diagnostics, stats
from stochformer.core.brownian import Draws
from stochformer.model import attention_variants as av
from stochformer.model.kernel import first_moment_rate, lambda_bar_prime, lyapunov_exponent, theorem14_F
from stochformer.core.validation import ArgumentTypeError

ROOT = Path(__file__).resolve().parents[1]
#: address space this module's process may add: a hostile size then fails to allocate (a clean
#: error) instead of bringing the machine's memory down
HEADROOM = 6 << 30
OUTCOMES: Counter = Counter()  # "clean error" | "result" | "traceback: ..." over every example of this module
COVERED: set[str] = set()
PROBLEMS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _bounded_address_space():
    """The module runs under an address-space limit of what the process maps now + HEADROOM."""
    try:
        import resource

        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (ImportError, OSError, StopIteration):
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_AS)
    limit = vm + HEADROOM if old[1] == resource.RLIM_INFINITY else min(vm + HEADROOM, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


# --------------------------------------------------------------------------- strategies

DTYPES = [torch.float64, torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64]


@st.composite
def tensors(draw: Any, shape: Any = None) -> torch.Tensor:
    """Tensors of any dtype, shape (0-size included), content (normal, unit rows, NaN, inf, huge,
    zero), on the CPU or the meta device, with or without requires_grad."""
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)) if shape is None else shape
    dtype = draw(st.sampled_from(DTYPES))
    X = torch.randn(tuple(shape), generator=torch.Generator().manual_seed(draw(st.integers(0, 9))), dtype=torch.float64)
    kind = draw(st.sampled_from(["normal", "unit", "nan", "inf", "huge", "zero"]))
    if kind == "unit" and X.dim() and X.shape[-1]:
        X = X / X.norm(dim=-1, keepdim=True)
    elif kind in ("nan", "inf") and X.numel():
        X.view(-1)[draw(st.integers(0, X.numel() - 1))] = math.nan if kind == "nan" else math.inf
    elif kind == "huge":
        X = X * 1e300
    elif kind == "zero":
        X = torch.zeros_like(X)
    X = X.to(dtype) if dtype != torch.bool else X > 0
    if draw(st.booleans()) and X.is_floating_point():
        X.requires_grad_(True)
    return X.to("meta") if draw(st.integers(0, 7)) == 0 else X


def scalars() -> st.SearchStrategy:
    return st.one_of(
        st.integers(-(2**70), 2**70), st.integers(-3, 10),
        st.floats(allow_nan=True, allow_infinity=True), st.floats(-10, 10), st.sampled_from([0.0, -0.0, 1e-300, 1e308, 0.5]),
        st.booleans(), st.none(), st.text(max_size=6), st.sampled_from(["relu", "heun", "euler", "cpu", "meta", "float32"]),
        st.integers(-(2**31), 2**31).map(np.int64), st.floats(width=64).map(np.float64), st.floats(width=32).map(np.float32),
        st.booleans().map(np.bool_), st.just(1 + 2j), st.just(torch.Generator()), st.just(object()),
    )


def hostile() -> st.SearchStrategy:
    """Any value an argument might be given."""
    return st.one_of(
        scalars(),
        tensors(),
        tensors().map(lambda t: t.detach().cpu().numpy() if t.device.type == "cpu" else t),
        tensors().map(lambda t: t.detach().cpu().tolist() if t.device.type == "cpu" else t),
        st.lists(scalars(), max_size=3),
        st.tuples(st.integers(-2, 4), st.integers(-2, 4)),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


# --------------------------------------------------------------------------- the table of public callables


def _unit(X: torch.Tensor, tol: float = 1e-5) -> bool:
    return bool(((torch.linalg.vector_norm(X.double(), dim=-1) - 1).abs() <= tol).all())


def _finite(x: Any) -> bool:
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_finite(v) for v in x)
    if torch.is_tensor(x):
        return x.device.type == "meta" or bool(torch.isfinite(x).all())
    if isinstance(x, (float, int, np.floating, np.ndarray)):
        return bool(np.all(np.isfinite(x)))
    return True


def _tokens(batch: int = 2, N: int = 3, d: int = 3, seed: int = 0) -> torch.Tensor:
    X = torch.from_numpy(np.random.default_rng(seed).standard_normal((batch, N, d)))
    return X / X.norm(dim=-1, keepdim=True)


def _run(part_model: Any, X0: Any = None, steps: int = 2) -> Any:
    """A short run of a model built from an accepted part: finite unit tokens of X0's shape."""
    X0 = _tokens() if X0 is None else X0
    ds = sf.solve(part_model, X0, 1.0, steps, seed=0)
    X = torch.from_numpy(ds["X_final"].values)
    assert X.shape == tuple(X0.shape) and _finite(X) and _unit(X), "a run of an accepted part is not finite unit tokens"
    mc = ds["mean_cosine"].values
    assert np.all(np.isfinite(mc)) and np.all(np.abs(mc) <= 1 + 1e-9), "a run's mean cosine is not a cosine"
    return ds


def _tokens_result(X: Any, shape: tuple | None = None) -> None:
    assert torch.is_tensor(X) and X.dim() == 3 and _finite(X) and (X.device.type == "meta" or _unit(X)), "not unit tokens"
    if shape is not None:
        assert tuple(X.shape) == shape


def _chunk_equals_dense(att: Any) -> None:
    """Chunked attention writes every row: the same numbers as the dense product (never
    uninitialised memory), on tokens long enough to be chunked."""
    X = _tokens(2, 9, 3, seed=4)
    if max(abs(att.beta), abs(att.gamma)) <= 1e3:  # (extreme scales: the run below stops naming them)
        dense = sf.SoftmaxAttention(att.beta, att.gamma, att.A, att.V)(X)
        assert torch.allclose(att(X), dense, atol=1e-12) and _finite(att(X))
    _run(sf.Transformer(att, None))


def _field_runs(field: Any) -> None:
    _run(sf.LimitSDE(sf.SoftmaxAttention(), field))


def _saved_dataset() -> str:
    """A small dataset file (written once per test process), for ``sf.load``."""
    import tempfile

    import xarray as xr

    path = Path(tempfile.gettempdir()) / f"sf-boundary-{os.getpid()}" / "dataset.nc"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        xr.Dataset({"statistic": ("time", np.arange(3.0))}).to_netcdf(path, engine="h5netcdf")
    return str(path)


def _raise(text: str) -> None:
    raise AssertionError(text)


@dataclass
class Spec:
    """One public callable: ``call(**kwargs)`` from valid defaults, the check of an accepted result
    (raises AssertionError if wrong), and other names an error may carry for an argument (a
    cross-check naming the part it does not fit)."""

    name: str
    call: Callable[..., Any]
    args: Callable[[], dict[str, Any]]
    check: Callable[[Any, dict], None]
    aliases: tuple[str, ...] = ()


def _solve_check(ds: Any, kw: dict) -> None:
    X = torch.from_numpy(ds["X_final"].values)
    assert X.shape == tuple(torch.as_tensor(np.asarray(kw["X0"]) if not torch.is_tensor(kw["X0"]) else kw["X0"]).shape)
    assert _finite(X) and _unit(X)
    for name in ("mean_cosine", "energy", "min_cosine"):
        if name in ds:
            assert np.all(np.isfinite(ds[name].values))


def _kernel_check(k: Any, kw: dict) -> None:
    assert _finite(k.kappa(torch.linspace(-1, 1, 5, dtype=torch.float64))) and math.isfinite(k.kappa1)


def _rates_check(r: Any, kw: dict) -> None:
    assert all(math.isfinite(v) for v in r.to_dict().values())


def _float_check(x: Any, kw: dict) -> None:
    assert isinstance(x, float) and math.isfinite(x)


def _stat_check(x: Any, kw: dict) -> None:
    assert _finite(x)


def _cloud_check(x: Any, kw: dict) -> None:
    assert _finite(x)


def _mean_check(out: Any, kw: dict) -> None:
    """Mean finite except where a NaN (a missing value) enters it, then NaN; the SE finite, >= 0."""
    values = torch.as_tensor(np.asarray(kw["values"], dtype=float) if not torch.is_tensor(kw["values"]) else kw["values"])
    missing = torch.isnan(values.double()).any(dim=kw["axis"])
    mean, se = (torch.as_tensor(part).double() for part in out)
    assert mean.shape == se.shape == missing.shape and bool(mean[missing].isnan().all())
    assert bool(torch.isfinite(mean[~missing]).all()) and bool((se[~missing] >= 0).all())


def _path_check(p: Any, kw: dict) -> None:
    z = p.increment(0, p.steps)
    assert all(_finite(t) for t in z) and [tuple(t.shape) for t in z] == [tuple(s) for s in p.parts]


def _pair_check(X: Any, kw: dict) -> None:
    _tokens_result(X)
    cos = (X[:, 0] * X[:, 1]).sum(-1)
    assert torch.allclose(cos, torch.full_like(cos, float(kw.get("cosine", 0.5))), atol=1e-9)


def _save_check(save: Any, kw: dict) -> None:
    _run_save(save)


def _run_save(save: Any) -> None:
    steps = 4
    if any(not 0 <= k <= steps for k in (*(save.at or ()), *(save.tokens_at or ()))):  # a schedule past the run: refused at solve
        with pytest.raises(ValueError, match="SaveAt: steps to save"):
            sf.solve(sf.Transformer(), _tokens(), 1.0, steps, save, seed=0)
        return
    ds = sf.solve(sf.Transformer(), _tokens(), 1.0, steps, save, seed=0)
    assert all(np.all(np.isfinite(ds[v].values)) for v in ds.data_vars)


def _mlp_check(mlp: Any, kw: dict) -> None:
    _run(sf.Transformer(sf.SoftmaxAttention(), mlp))


def _attn_check(att: Any, kw: dict) -> None:
    d = getattr(att, "d", None) or 3
    _run(sf.Transformer(att, None), _tokens(2, 3, d))


def _sde_check(sde: Any, kw: dict) -> None:
    _run(sde)


def _model_check(model: Any, kw: dict) -> None:
    _run(model)


def _exact_check(field: Any, kw: dict) -> None:
    _run(sf.LimitSDE(sf.SoftmaxAttention(), field), _tokens(2, 3, field.kernel.d))


def _nothing(x: Any, kw: dict) -> None:
    pass


SPECS = [
    Spec("solve", sf.solve, lambda: dict(model=sf.Transformer(sf.SoftmaxAttention(), sf.RandomMLP(width=8)), X0=_tokens(),
                                         T=1.0, steps=3, save=sf.SaveAt(), seed=0, generator=None, path=None, hook=None,
                                         progress=sf.ProgressMeter()), _solve_check, ("seed", "generator")),
    Spec("SaveAt", sf.SaveAt, lambda: dict(every=1, at=None, stats=("mean_cosine",), tokens_every=None, tokens_at=None,
                                           final=True, energy_beta=1.0, block=None), _save_check),
    Spec("sphere.uniform", sphere.uniform, lambda: dict(batch=2, N=3, d=3, seed=0, generator=None, dtype=torch.float64,
                                                       device="cpu"), lambda X, kw: _tokens_result(X), ("seed", "generator")),
    Spec("sphere.cluster", sphere.cluster, lambda: dict(batch=2, N=3, d=3, spread=0.1, center=None, seed=0,
                                                       dtype=torch.float64, device="cpu"), lambda X, kw: _tokens_result(X),
         ("seed", "generator")),
    Spec("sphere.pair", sphere.pair, lambda: dict(batch=2, d=3, cosine=0.5, seed=0, dtype=torch.float64, device="cpu"),
         _pair_check, ("seed", "generator")),
    Spec("sphere.random_rotations", sphere.random_rotations,
         lambda: dict(batch=2, d=3, generator=torch.Generator().manual_seed(0), dtype=torch.float64, device="cpu"),
         lambda R, kw: _stat_check(R, kw)),
    Spec("BrownianPath", sf.BrownianPath, lambda: dict(shape=(2, 3), steps=4, seed=0, dtype=torch.float64, device="cpu"),
         _path_check, ("seed", "generator", "shape")),
    Spec("Draws", Draws, lambda: dict(generator=torch.Generator(), path=None, k=0, n=1), _nothing, ("k",)),
    Spec("SoftmaxAttention", sf.SoftmaxAttention, lambda: dict(beta=1.0, gamma=1.0, A=None, V=None, chunk=2, sdpa=False),
         lambda a, kw: _chunk_equals_dense(a), ("SoftmaxAttention",)),
    Spec("SoftmaxAttention.from_matrices", sf.SoftmaxAttention.from_matrices,
         lambda: dict(d=3, beta=1.0, gamma=1.0, Q=None, K=None, V=None, dtype=torch.float64, device="cpu", chunk=None, sdpa=False),
         _attn_check),
    Spec("MultiHeadAttention.split", av.MultiHeadAttention.split,
         lambda: dict(Q=torch.eye(4, dtype=torch.float64), K=torch.eye(4, dtype=torch.float64), V=torch.eye(4, dtype=torch.float64),
                      heads=2), _attn_check, ("MultiHeadAttention",)),
    Spec("UnnormalisedAttention", av.UnnormalisedAttention, lambda: dict(A=torch.eye(3, dtype=torch.float64),
                                                                       V=torch.eye(3, dtype=torch.float64)), _attn_check,
         ("UnnormalisedAttention",)),
    Spec("L2Attention", av.L2Attention, lambda: dict(Q=torch.eye(3, dtype=torch.float64), K=torch.eye(3, dtype=torch.float64),
                                                    V=torch.eye(3, dtype=torch.float64)), _attn_check, ("L2Attention",)),
    Spec("SinkhornAttention", av.SinkhornAttention, lambda: dict(A=torch.eye(3, dtype=torch.float64),
                                                               V=torch.eye(3, dtype=torch.float64), iters=5, tol=None),
         _attn_check, ("SinkhornAttention",)),
    Spec("sinkhorn_log", av.sinkhorn_log, lambda: dict(scores=torch.zeros(2, 3, 3, dtype=torch.float64), iters=3, tol=None),
         _stat_check),
    Spec("ResampledAttention", av.ResampledAttention, lambda: dict(d=3, beta=1.0, gamma=1.0, std=1.0, seed=0), _attn_check),
    Spec("AveragedAttention.from_law", av.AveragedAttention.from_law,
         lambda: dict(d=3, beta=1.0, gamma=1.0, std=1.0, draws=4, seed=0, dtype=torch.float64, device="cpu"), _attn_check),
    Spec("RandomMLP", sf.RandomMLP, lambda: dict(width=8, activation="relu", sigma_U=0.1, sigma_W=0.1, scale=1.0,
                                                mode="gaussian", rng="torch", precision="full", law="gaussian", nu=5.0),
         _mlp_check, ("weight_law", "activation")),
    Spec("RandomFeatureField", sf.RandomFeatureField, lambda: dict(activation="relu", features=16, sigma_U=0.1, sigma_W=0.1,
                                                                  scale=1.0, token_chunk=2), lambda f, kw: _field_runs(f),
         ("activation",)),
    Spec("ExactField", sf.ExactField, lambda: dict(kernel=sf.NoiseKernel("relu", 3), sqrt_method="symmetric"), _exact_check),
    Spec("NoiseKernel", sf.NoiseKernel, lambda: dict(activation="relu", d=3, sigma_U=0.1, sigma_W=0.1, scale=1.0, quad_points=16),
         _kernel_check, ("activation", "NoiseKernel", "kappa")),
    Spec("rates", sf.rates, lambda: dict(kernel=sf.NoiseKernel("relu", 3), beta=1.0, gamma=0.0), _rates_check, ("rates",)),
    Spec("lyapunov_exponent", lyapunov_exponent, lambda: dict(kappa=0.5, kappa_prime=0.2, d=3), _float_check),
    Spec("first_moment_rate", first_moment_rate, lambda: dict(kappa=0.5, kappa_prime=0.2, d=3), _float_check),
    Spec("lambda_bar_prime", lambda_bar_prime, lambda: dict(kernel=sf.NoiseKernel("relu", 3), beta=1.0, grid=11), _float_check),
    Spec("theorem14_F", theorem14_F, lambda: dict(kernel=sf.NoiseKernel("relu", 3), u=0.5, beta=1.0), _stat_check, ("rho",)),
    Spec("LimitSDE", sf.LimitSDE, lambda: dict(attention=sf.SoftmaxAttention(), noise=sf.ExactField(sf.NoiseKernel("relu", 3)),
                                              integrator="heun", kappa1=None), _sde_check, ("ExactField",)),
    Spec("Transformer", sf.Transformer, lambda: dict(attention=sf.SoftmaxAttention(), noise=sf.RandomMLP(width=8),
                                                    order="post_ln"), _model_check),
    Spec("mean_cosine", diagnostics.mean_cosine, lambda: dict(X=_tokens()), _cloud_check, ("X",)),
    Spec("energy", diagnostics.energy, lambda: dict(X=_tokens(), beta=1.0, chunk=None), _cloud_check),
    Spec("min_cosine", diagnostics.min_cosine, lambda: dict(X=_tokens()), _cloud_check),
    Spec("mean_token", diagnostics.mean_token, lambda: dict(X=_tokens()), _cloud_check),
    Spec("pair_statistics", diagnostics.pair_statistics, lambda: dict(X=_tokens(), energy_beta=1.0, block=None), _cloud_check),
    Spec("cloud_summary", diagnostics.cloud_summary, lambda: dict(X=_tokens(), beta=1.0, block=64), _cloud_check),
    Spec("mean_and_se", stats.mean_and_se, lambda: dict(values=np.arange(6.0).reshape(3, 2), axis=0), _mean_check),
    Spec("bootstrap", stats.bootstrap, lambda: dict(statistic=lambda r: float(r.mean()), samples=np.arange(5.0), n_boot=5,
                                                    seed=0, axis=0), _stat_check),
    Spec("interval", stats.interval, lambda: dict(boots=[1.0, 2.0, 3.0]), lambda x, kw: None),
    Spec("loglog_slope", stats.loglog_slope, lambda: dict(x=[1.0, 2.0, 4.0], y=[1.0, 0.5, 0.25]), _stat_check),
    Spec("fit_power_law", stats.fit_power_law, lambda: dict(x=[1.0, 2.0, 4.0], samples=np.array([[1.0, 0.5, 0.25], [1.1, 0.6, 0.2]]),
                                                            n_boot=20, seed=0, se=None), lambda x, kw: None),
    Spec("fit_power_law_weighted", stats.fit_power_law_weighted, lambda: dict(N=[1.0, 2.0, 4.0], y=np.array([1.0, 0.5, 0.25]),
                                                                              se=np.array([0.1, 0.1, 0.1])),
         lambda x, kw: None),
    Spec("fit_power_law_offset", stats.fit_power_law_offset, lambda: dict(x=[0.1, 0.2, 0.4, 0.8], y=np.array([1.0, 1.1, 1.4, 2.6]),
                                                                          se=np.array([0.1, 0.1, 0.1, 0.1])),
         lambda x, kw: None),
    Spec("tagged_correlation", stats.tagged_correlation, lambda: dict(A=torch.randn(5, 2, dtype=torch.float64),
                                                                      B=torch.randn(5, 2, dtype=torch.float64)), _stat_check),
    Spec("load", sf.load, lambda: dict(folder=_saved_dataset()), lambda ds, kw: None if "statistic" in ds else _raise("no data")),
]
ARGS = [(spec, name) for spec in SPECS for name in spec.args()]


#: seconds one call may take: a hostile value must be refused (or computed) quickly, never run on
#: (e.g. an unbounded repetition count); beyond this the call is recorded as a hang
CALL_SECONDS = 60.0


class _Hang(BaseException):
    """Raised in the test's thread when a call runs past CALL_SECONDS (not an ``Exception``: the
    library cannot swallow it)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Interrupt the block after ``seconds`` (SIGALRM, POSIX main thread; elsewhere no limit)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum, frame):
        raise _Hang

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(spec: Spec, name: str, value: Any) -> str:
    """Call ``spec`` with ``name`` = ``value``: 'clean error', 'result', or a problem (recorded)."""
    kw = spec.args()
    kw[name] = value
    COVERED.add(spec.name)
    case = f"{spec.name}({name}={value!r:.80})"
    try:
        with _time_limit(CALL_SECONDS):
            result = spec.call(**kw)
    except _Hang:
        PROBLEMS.append(f"hang: {case} ran past {CALL_SECONDS:g} s")
        OUTCOMES["hang"] += 1
        return "hang"
    except (ValueError, TypeError) as exc:
        text = str(exc)
        names = (name, *spec.aliases)
        if not any(n in text for n in names) or len(text) > 600 or "\n" in text.strip():
            PROBLEMS.append(f"unclear: {case} -> {type(exc).__name__}: {text[:200]}")
            OUTCOMES["unclear"] += 1
            return "unclear"
        OUTCOMES["clean error"] += 1
        return "clean error"
    except Exception as exc:  # noqa: BLE001 - anything else is a traceback for a user
        PROBLEMS.append(f"traceback: {case} -> {type(exc).__name__}: {str(exc)[:200]}")
        OUTCOMES["traceback"] += 1
        return "traceback"
    try:
        spec.check(result, kw)
    except ValueError as exc:  # refused at first use (a kernel's κ beyond float64): clean if it names the argument
        if name in str(exc) and len(str(exc)) < 600:
            OUTCOMES["clean error at first use"] += 1
            return "clean error"
        PROBLEMS.append(f"wrong result: {case} -> {type(exc).__name__}: {str(exc)[:200]}")
        OUTCOMES["wrong result"] += 1
        return "wrong result"
    except (AssertionError, TypeError, RuntimeError) as exc:
        PROBLEMS.append(f"wrong result: {case} -> {type(exc).__name__}: {str(exc)[:200]}")
        OUTCOMES["wrong result"] += 1
        return "wrong result"
    OUTCOMES["result"] += 1
    return "result"


@settings(max_examples=400, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(item=st.sampled_from(ARGS), value=hostile())
def test_every_public_callable_gives_a_clean_error_or_a_correct_result(item: tuple, value: Any) -> None:
    """One argument at a time replaced by a hostile value: a ValueError/TypeError naming the
    argument, or a result that is right (finite, right shape, unit rows; a part drives a run)."""
    spec, name = item
    before = len(PROBLEMS)
    outcome(spec, name, value)
    assert PROBLEMS[before:] == []


@settings(max_examples=30, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(value=st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.binary(max_size=8),
                       st.lists(st.text(max_size=4), max_size=2), st.just(np.float64(1.0))))
def test_load_names_its_argument_for_anything_but_a_path(value: Any) -> None:
    """``sf.load`` of anything but a path or a string is one ``ArgumentTypeError`` naming ``folder``
    (never ``os.fspath``'s message), and a path still loads."""
    with pytest.raises(ArgumentTypeError, match=r"^folder: must be a pathlib.Path or a str"):
        sf.load(value)
    assert "statistic" in sf.load(Path(_saved_dataset()))
    OUTCOMES["clean error"] += 1


def test_a_call_that_runs_on_is_recorded_as_a_hang(monkeypatch) -> None:
    """Fault injection: a callable that never returns (a loop bounded only by its argument) is
    stopped after CALL_SECONDS and recorded as a hang, so the property fails instead of hanging."""
    problems: list[str] = []
    monkeypatch.setattr(sys.modules[__name__], "PROBLEMS", problems)
    monkeypatch.setattr(sys.modules[__name__], "OUTCOMES", Counter())
    monkeypatch.setattr(sys.modules[__name__], "COVERED", set())
    monkeypatch.setattr(sys.modules[__name__], "CALL_SECONDS", 0.2)

    def spin(rounds: int) -> int:
        k = 0
        while k < rounds:
            k += 1
        return k

    spec = Spec("spin", spin, lambda: dict(rounds=10), lambda x, kw: None)
    assert outcome(spec, "rounds", 10) == "result"
    assert outcome(spec, "rounds", 10**15) == "hang" and problems == ["hang: spin(rounds=1000000000000000) ran past 0.2 s"]


def test_every_argument_accepts_its_valid_value_and_numpy_scalars() -> None:
    """Each callable works with its valid arguments, and with every int or float argument given as
    the numpy scalar of the same value (np.int64, np.float64) or as a 0-d torch tensor of it:
    converted, not refused."""
    for spec in SPECS:
        kw = spec.args()
        assert outcome(spec, next(iter(kw)), kw[next(iter(kw))]) == "result", spec.name
        for name, value in kw.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            as_numpy = np.int64(value) if isinstance(value, int) else np.float64(value)
            assert outcome(spec, name, as_numpy) == "result", (spec.name, name)
            if isinstance(value, int) and value > 2**63 - 1:
                continue  # beyond a torch integer
            assert outcome(spec, name, torch.tensor(value)) == "result", (spec.name, name, "0-d tensor")


@settings(max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["bool", "fraction", "huge", "negative", "bool tensor", "fraction tensor", "vector tensor"]),
       name=st.sampled_from(["steps", "seed"]))
def test_integer_arguments_refuse_bools_fractions_and_out_of_range(kind: str, name: str) -> None:
    """True for an int and 1.5 for an int are refused (a TypeError that is also a ValueError), also
    as 0-d tensors, and a tensor of one entry that is not 0-d; seeds beyond [0, 2**64 - 1] and
    negative steps are refused naming the range."""
    value = {"bool": True, "fraction": 1.5, "huge": 2**70, "negative": -1, "bool tensor": torch.tensor(True),
             "fraction tensor": torch.tensor(1.5), "vector tensor": torch.tensor([2])}[kind]
    with pytest.raises(ValueError, match=rf"^{name}: must be an integer") as exc:
        sf.solve(sf.Transformer(), _tokens(), 1.0, **{"steps": 2, "seed": 0, name: value})
    assert isinstance(exc.value, TypeError) == (kind not in ("huge", "negative"))
    assert isinstance(exc.value, ArgumentTypeError) or "<=" in str(exc.value) or ">=" in str(exc.value)
    OUTCOMES["clean error"] += 1


@settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(norm=st.one_of(st.floats(0.0, 0.9), st.floats(1.1, 1e6)), d=st.integers(2, 5))
def test_tokens_off_the_sphere_are_refused_and_cosines_outside_pm1(norm: float, d: int) -> None:
    """solve refuses initial rows of norm != 1 (0 included); sphere.pair refuses a cosine outside
    [−1, 1], and returns unit tokens at exactly the cosine inside it."""
    with pytest.raises(ValueError, match="^X0: rows must have unit norm"):
        sf.solve(sf.Transformer(), norm * _tokens(2, 3, d), 1.0, 2, seed=0)
    for outside in (1.01 + norm, -1.01 - norm):
        with pytest.raises(ValueError, match=r"^cosine: must be a finite number and >= -1 and <= 1"):
            sphere.pair(2, d, outside, seed=0)
    c = max(-1.0, min(1.0, 1 - norm))
    _pair_check(sphere.pair(2, d, c, seed=0), {"cosine": c})
    OUTCOMES["clean error"] += 2
    OUTCOMES["result"] += 1


@settings(max_examples=30, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(d_kernel=st.integers(2, 6), d_tokens=st.integers(2, 6), integrator=st.sampled_from(["heun", "euler"]))
def test_a_kernel_for_another_d_is_refused_with_both_integrators(d_kernel: int, d_tokens: int, integrator: str) -> None:
    """An exact field whose kernel has another d than the tokens is refused (naming both d) with
    either integrator; with the same d the run is finite and on the sphere."""
    sde = sf.LimitSDE(sf.SoftmaxAttention(), sf.ExactField(sf.NoiseKernel("relu", d_kernel)), integrator)
    if d_kernel == d_tokens:
        _run(sde, _tokens(2, 3, d_tokens))
        OUTCOMES["result"] += 1
        return
    with pytest.raises(ValueError, match=rf"d = {d_kernel}.*d = {d_tokens}"):
        sf.solve(sde, _tokens(2, 3, d_tokens), 1.0, 2, seed=0)
    OUTCOMES["clean error"] += 1


@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(chunk=st.integers(-5, 12), N=st.integers(2, 20), seed=st.integers(0, 5))
def test_chunked_computations_write_every_entry(chunk: int, N: int, seed: int) -> None:
    """Query chunks of the attention and token chunks of a random-feature field: chunk < 1 is
    refused at construction; otherwise the result equals the unchunked one and repeats exactly
    (no uninitialised memory can reach it)."""
    X = _tokens(2, N, 3, seed)
    if chunk < 1:
        for make, name in ((lambda: sf.SoftmaxAttention(chunk=chunk), "chunk"),
                           (lambda: sf.RandomFeatureField(token_chunk=chunk), "token_chunk")):
            with pytest.raises(ValueError, match=rf"^{name}: must be an integer >= 1"):
                make()
        OUTCOMES["clean error"] += 2
        return
    att = sf.SoftmaxAttention(beta=2.0, chunk=chunk)
    assert torch.allclose(att(X), sf.SoftmaxAttention(beta=2.0)(X), atol=1e-12) and torch.equal(att(X), att(X))
    fields = [sf.RandomFeatureField(features=8, token_chunk=c) for c in (chunk, None)]
    outs = []
    for f in fields:
        f.reset(2, 3, torch.Generator().manual_seed(seed), torch.float64, "cpu")
        outs.append(f.increment(X, 0.1, torch.Generator().manual_seed(1)))
    assert torch.allclose(outs[0], outs[1], atol=1e-12)
    OUTCOMES["result"] += 2


# --------------------------------------------------------------------------- user callables


BAD_OUTPUTS = {
    "drops a token": lambda Y: Y[..., :-1, :],
    "drops a coordinate": lambda Y: Y[..., :-1],
    "adds an axis": lambda Y: Y.unsqueeze(0),
    "is a scalar": lambda Y: Y.sum(),
    "keeps one row": lambda Y: Y[..., :1, :],
    "is NaN": lambda Y: Y * math.nan,
    "is infinite": lambda Y: Y / 0.0,
    "is a numpy array": lambda Y: Y.detach().numpy(),
    "is a list": lambda Y: Y.tolist(),
    # the right shape, but not the dtype or device of the input (float64 tokens on the CPU)
    "is float32": lambda Y: Y.float(),
    "is float16": lambda Y: Y.half(),
    "is bfloat16": lambda Y: Y.bfloat16(),
    "is integer": lambda Y: Y.round().long(),
    "is bool": lambda Y: Y > 0,
    "is complex": lambda Y: Y.to(torch.complex128),
    "is on the meta device": lambda Y: Y.to("meta"),
}


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _model_with(kind: str, bad: Callable) -> tuple[Any, dict]:
    """A run whose user callable of ``kind`` returns ``bad(what it should return)``."""
    fn_name = f"user_{kind}"
    if kind == "activation":
        return sf.Transformer(None, sf.RandomMLP(width=8, activation=_named(lambda x: bad(torch.tanh(x)), fn_name))), {}
    if kind == "feature activation":
        return sf.LimitSDE(None, sf.RandomFeatureField(activation=_named(lambda x: bad(torch.tanh(x)), fn_name), features=8)), {}
    if kind == "attention":
        return sf.Transformer(_named(lambda X, keys=None: bad(X.flip(-2)), fn_name), None), {}
    if kind == "sde attention":
        return sf.LimitSDE(_named(lambda X, keys=None: bad(X.flip(-2)), fn_name), None), {}
    if kind == "hook":
        return sf.Transformer(), {"hook": _named(lambda k, X: bad(X), fn_name)}

    class UserNoise:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def increment(self, X, dt, draws):
            return bad(math.sqrt(dt) * torch.ones_like(X))

        def noise_kernel(self, d):
            return sf.NoiseKernel("linear", d)

    class UserStep:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def step(self, X, dt, draws):
            return bad(X.flip(-2))

    UserNoise.__qualname__, UserStep.__qualname__ = f"user_{kind}", f"user_{kind}"
    if kind == "noise":
        return sf.LimitSDE(None, UserNoise()), {}
    if kind == "mlp":
        return sf.Transformer(None, UserNoise()), {}
    return UserStep(), {}


KINDS = {"activation": "activation", "feature activation": "activation", "attention": "attention", "sde attention": "attention",
         "hook": "hook", "noise": "noise", "mlp": "noise", "step": "model.step"}


@settings(max_examples=130, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(list(KINDS)), bad=st.sampled_from(list(BAD_OUTPUTS)), N=st.integers(2, 4), d=st.integers(2, 4))
def test_a_user_callable_of_wrong_shape_or_nan_is_refused_naming_it(kind: str, bad: str, N: int, d: int) -> None:
    """An activation, attention, hook, noise source or step function whose output has the wrong
    shape (or type), another dtype or device than its input (integer, bool, complex, half or
    float32 numbers for float64 tokens, the meta device) or is not finite is refused on its first
    call, naming what it is and the callable (never broadcast, never a NaN run, never torch's error)."""
    model, extra = _model_with(kind, BAD_OUTPUTS[bad])
    with pytest.raises(ValueError) as exc:
        sf.solve(model, _tokens(2, N, d), 1.0, 3, seed=0, **extra)
    text = str(exc.value)
    assert KINDS[kind] in text and f"user_{kind}" in text, text
    OUTCOMES["clean error"] += 1


def test_a_user_callable_of_the_right_shape_runs() -> None:
    """The same callables returning the right shape and finite numbers run (the check costs
    nothing later: one first call)."""
    for kind in KINDS:
        model, extra = _model_with(kind, lambda Y: Y)
        ds = sf.solve(model, _tokens(2, 3, 3), 1.0, 3, seed=0, **extra)
        assert np.all(np.isfinite(ds["mean_cosine"].values)), kind
        OUTCOMES["result"] += 1


# --------------------------------------------------------------------------- pre-flight sizes


def _cfg(command: str, overrides: list[str]) -> Any:
    from stochformer.config import build_config
    from stochformer.experiments.bridge import BridgeConfig
    from stochformer.experiments.chaos import ChaosConfig
    from stochformer.experiments.converge import ConvergeConfig
    from stochformer.experiments.joint import JointConfig
    from stochformer.experiments.motions import MotionsConfig
    from stochformer.experiments.phase import PhaseConfig
    from stochformer.experiments.repulsion import RepulsionConfig
    from stochformer.experiments.sweep import SweepConfig
    from stochformer.experiments.sync import SyncConfig
    from stochformer.experiments.variants import ResampledConfig, VariantsConfig

    models = {"simulate": None, "sync": SyncConfig, "phase": PhaseConfig, "sweep": SweepConfig, "converge": ConvergeConfig,
              "chaos": ChaosConfig, "motions": MotionsConfig, "joint": JointConfig, "repulsion": RepulsionConfig,
              "bridge": BridgeConfig, "resampled": ResampledConfig, "variants": VariantsConfig}
    model = models[command]
    return build_config(None, overrides, model=model) if model else build_config(None, overrides)


#: for every command, the fields a huge value is drawn for (a size, or a grid that contains one)
HUGE = {
    "simulate": ["d={}", "N={}", "batch={}", "m={}", "L={}", "dynamics=sde noise=random_features features={}",
                 "attention_kind=averaged d={s}", "attention_kind=resampled d={s}", "attention_kind=multihead d={e}"],
    "sync": ["model.d={}", "model.N={}", "pairs={}", "model.L={}"],
    "phase": ["x_field=d x_values=[3,{}]", "x_field=L x_values=[4,{L}]", "x_field=N x_values=[2,{}]", "x_field=m x_values=[{}]"],
    "sweep": ['grid={{"d"=[3,{}]}}', 'grid={{"N"=[4,{}]}}', 'grid={{"L"=[2,{}]}}', "samples={} samples_per_task={}"],
    "converge": ["widths=[2,{}]", "depths=[1,{}]", "model.N={}", "model.batch={}"],
    "chaos": ["model.N={}", "model.features={}", "dims=[3,{}]", "decor_repeats={}"],
    "motions": ["reference_paths={}", "model.batch={}", "model.m={}", "model.L={}"],
    "joint": ["model.d={}", "N_ref={}", "path_N=[16,32,{}]", "model.batch={}", "iterated_N={}"],
    "repulsion": ["model.N={}", "model.batch={}", "pairs={}"],
    "bridge": ["d={e}", "m={}", "depths=[1,{}]", "samples={}"],
    "resampled": ["model.d={s}", "model.batch={}", "depths=[2,{}]"],
    "variants": ["law_d={}", "law_m={}", "attention_draws={}", "samples={}"],
}


def _huge(pattern: str, big: int, side: int) -> list[str]:
    """The overrides of ``pattern`` with a huge size ``big`` (``side``: a matrix side, d)."""
    return pattern.format(big, big, s=side, e=4 * side, L=4 * big).split(" ")


@st.composite
def huge_overrides(draw: Any, commands: Any = None) -> tuple[str, list[str]]:
    command = draw(st.sampled_from(sorted(commands or HUGE)))
    pattern = draw(st.sampled_from(HUGE[command]))
    return command, _huge(pattern, draw(st.integers(10**9, 10**12)), draw(st.integers(10**5, 10**7)))


@settings(max_examples=70, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(item=huge_overrides())
def test_the_preflight_refuses_huge_sizes_of_every_command(item: tuple) -> None:
    """A huge size (or a grid holding one) in any command's config is refused with one SizeError
    naming what to reduce (or a ConfigError for a value outside its range), by the estimate alone."""
    from stochformer.config import ConfigError
    from stochformer.experiments.preflight import SizeError, check_size

    command, overrides = item
    try:
        cfg = _cfg(command, overrides)
    except ConfigError as exc:
        assert str(exc) and len(str(exc)) < 1000
        OUTCOMES["clean error"] += 1
        return
    with pytest.raises(SizeError, match=r"^size check: this run (needs|would take) about .* reduce "):
        check_size(cfg, max_memory=8 << 30, max_hours=12.0)
    OUTCOMES["clean error"] += 1


CLI_RUNS = {"simulate": "stochformer.experiments.simulate.run_simulate", "sync": "stochformer.experiments.sync.run_sync",
            "phase": "stochformer.experiments.phase.run_phase", "converge": "stochformer.experiments.converge.run_converge",
            "chaos": "stochformer.experiments.chaos.run_chaos", "sweep": "stochformer.experiments.sweep.run_sweep",
            "bridge": "stochformer.experiments.bridge.run_bridge"}


@settings(max_examples=25, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(item=huge_overrides(commands=[c for c in CLI_RUNS if c != "sweep"]))
def test_the_command_line_refuses_before_the_experiment_starts(item: tuple, tmp_path_factory: Any) -> None:
    """Through the command line the same sizes end in one 'size check' line (exit 2) and the
    experiment function is never entered; no output folder is made."""
    command, overrides = item
    entered = []
    with pytest.MonkeyPatch.context() as mp:
        module, name = CLI_RUNS[command].rsplit(".", 1)
        mp.setattr(f"{module}.{name}", lambda *a, **k: entered.append(1))
        out = tmp_path_factory.mktemp("o") / "out"
        res = CliRunner().invoke(sf_cli(), [command, "--quiet", *sum((["--set", o] for o in overrides), []), "--out", str(out)])
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 2 and len(errors) == 1 and not entered and not out.exists(), res.output
    assert "size check" in errors[0] or "invalid configuration" in errors[0], errors[0]
    OUTCOMES["clean error"] += 1


def sf_cli() -> Any:
    from stochformer.cli import main

    return main


CHILD = r"""
import json, resource, sys
from click.testing import CliRunner
from stochformer.cli import main
import stochformer.experiments.simulate, stochformer.experiments.sync, stochformer.experiments.phase  # noqa: F401
import stochformer.experiments.sweep, stochformer.experiments.converge, stochformer.experiments.chaos  # noqa: F401
def vm():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
limit = vm() + (768 << 20)  # what the process maps now and 768 MiB: far below any refused run
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
for args in json.loads(sys.argv[1]):
    res = CliRunner().invoke(main, args)
    print(json.dumps({"args": args, "code": res.exit_code, "out": res.output[-400:],
                      "exc": type(res.exception).__name__ if res.exception and not isinstance(res.exception, SystemExit) else None}),
          flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc to size the address-space limit")
def test_refused_runs_allocate_nothing_under_a_tight_address_space_limit(tmp_path: Path) -> None:
    """In a child process whose address space is limited to what it maps plus 768 MiB, huge runs
    drawn from the strategy (grids over d and L, d × d matrices, sweeps) end in the size check's
    line: an allocation of the sizes refused would fail with a MemoryError instead."""
    rng = np.random.default_rng(0)  # one drawn size for every pattern of every command with a command line
    cases = [(c, _huge(p, int(rng.integers(10**9, 10**12)), int(rng.integers(10**5, 10**7))))
             for c in CLI_RUNS if c != "sweep" for p in HUGE[c]]
    cases += [("simulate", ["d=1000000000"]), ("phase", ["x_field=d", "x_values=[3,100000000]"]),
              ("phase", ["x_field=L", "x_values=[4,4000000000]"])]
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('samples = 2\nsamples_per_task = 2\n[grid]\nd = [3, 100000000]\n')
    args = [[c, "--quiet", *sum((["--set", o] for o in ov), []), "--out", str(tmp_path / f"o{i}")] for i, (c, ov) in enumerate(cases)]
    args.append(["sweep", "--config", str(sweep), "--quiet", "--scheduler", "serial", "--out", str(tmp_path / "os")])
    # the control: past the size check the same kind of run does hit the limit (the test can fail)
    control = ["simulate", "--quiet", "--set", "d=100000000", "--no-size-check", "--out", str(tmp_path / "oc")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([*args, control])], capture_output=True, text=True, env=env,
                          timeout=300)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and len(rows) == len(args) + 1, proc.stderr[-2000:]
    *rows, last = rows
    assert last["code"] != 0 and "size check" not in last["out"], last
    for row in rows:
        assert row["code"] == 2 and row["exc"] is None, row
        assert "size check" in row["out"] or "invalid configuration" in row["out"], row
    OUTCOMES["clean error"] += len(rows)


# --------------------------------------------------------------------------- --set parsing


@settings(max_examples=30, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(depth=st.integers(33, 60000), field=st.sampled_from(["N", "Q", "init.center", "model.d"]),
       open_=st.sampled_from(["[", "{a="]))
def test_deeply_nested_values_are_one_short_error(depth: int, field: str, open_: str) -> None:
    """A --set value nested deeper than the limit (up to 60 000 levels) is one clean line naming
    the field (no RecursionError), and a long value is never echoed in full."""
    from stochformer.config import ConfigError, apply_overrides

    close = "]" if open_ == "[" else "}"
    with pytest.raises(ConfigError, match=rf"^--set {field}: the value nests lists or tables more than 32 levels deep$"):
        apply_overrides({}, [f"{field}={open_ * depth}1{close * depth}"])
    OUTCOMES["clean error"] += 1


@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(length=st.integers(1000, 200_000), where=st.sampled_from(["value", "key"]),
       command=st.sampled_from(["simulate", "sync"]))
def test_long_values_and_keys_are_not_echoed(length: int, where: str, command: str) -> None:
    """A 100 k-character value or field name gives one error line of bounded length."""
    text = "x" * length
    item = f"activation={text}" if where == "value" else f"{text}=3"
    item = item if command == "simulate" or where == "key" else f"model.{item}"
    res = CliRunner().invoke(sf_cli(), [command, "--quiet", "--set", item, "--out", "unused-out"])
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 2 and len(errors) == 1 and len(res.output) < 3000, res.output[:500]
    OUTCOMES["clean error"] += 1


# --------------------------------------------------------------------------- summary (last)


def test_zz_counts() -> None:
    """The counts of this module: printed and checked (every function covered, no traceback)."""
    summary = {"functions": len(COVERED), "arguments": len(ARGS), **dict(OUTCOMES), "problems": len(PROBLEMS)}
    print(f"\napi-boundary summary: {json.dumps(summary)}")
    assert len(COVERED) == len(SPECS) and OUTCOMES["traceback"] == 0 and not PROBLEMS, PROBLEMS[:20]
