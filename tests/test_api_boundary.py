"""The validation boundary of the public Python API, by property.

Every public function and constructor is called with one argument replaced by a value drawn from
hostile strategies (Python and numpy scalars of every kind, extreme and non-finite numbers,
strings, None, lists, numpy arrays and tensors of every dtype, of 0-size and mismatched shapes, on
the meta device, requiring grad). The outcome must be a clean error — a ``ValueError`` or
``TypeError`` whose message names the argument — or a correct result: finite numbers of the
right shape, unit rows where the maths needs them, and for a model part the run it drives. The
module runs under an address-space limit (``bounded_address_space``, tests/conftest.py).
(User callables of a wrong shape: test_custom_parts.py; huge sizes refused before any
allocation: test_preflight.py; ``--set`` values nested too deep or too long: test_config_cli.py.)

The counts (functions covered, examples run, outcomes) are printed by the last test and checked:
no traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
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
OUTCOMES: Counter = Counter()  # "clean error" | "result" | "traceback: ..." over every example of this module
COVERED: set[str] = set()
PROBLEMS: list[str] = []


pytestmark = pytest.mark.usefixtures("bounded_address_space")


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


# --------------------------------------------------------------------------- summary (last)


def test_zz_counts() -> None:
    """The counts of this module: printed and checked (every function covered, no traceback)."""
    summary = {"functions": len(COVERED), "arguments": len(ARGS), **dict(OUTCOMES), "problems": len(PROBLEMS)}
    print(f"\napi-boundary summary: {json.dumps(summary)}")
    assert len(COVERED) == len(SPECS) and OUTCOMES["traceback"] == 0 and not PROBLEMS, PROBLEMS[:20]
