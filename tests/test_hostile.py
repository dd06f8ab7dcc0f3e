"""Hostile input: hundreds of bad inputs across every command, config file, sweep file, .npy
initial state and the public Python API (a table of named cases plus Hypothesis).

Each input runs in-process under a time limit, with a scratch folder as working directory. It must
end in ONE clear line and a non-zero exit (or a ``ValueError`` from Python): no traceback, no
hang, no non-finite success, and nothing changed outside the scratch folder (nor the files placed
in it). The counts are printed and written to ``hostile-summary.json`` in pytest's temporary
folder by the last test of this module, which also checks them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import math
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Literal, get_args, get_origin

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.config import RunConfig, build_config
from stochformer.experiments.chaos import ChaosConfig
from stochformer.experiments.converge import ConvergeConfig
from stochformer.experiments.phase import PhaseConfig
from stochformer.experiments.spectrum import SpectrumConfig
from stochformer.experiments.sync import SyncConfig
from stochformer.model.kernel import NoiseKernel, first_moment_rate, lambda_bar_prime, lyapunov_exponent, rates

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 20.0  # per input
OUTCOMES = Counter()  # outcome -> count, over every input of this module
PROBLEMS: list[str] = []  # "<outcome>: <case>" for anything but a clear error


class Hang(BaseException):
    """Raised by the alarm when an input runs past LIMIT_S."""


@contextlib.contextmanager
def time_limit(seconds: float = LIMIT_S):
    def alarm(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    # a single native call that outlasts the alarm cannot be interrupted: then dump every stack and
    # end the test process, so a hang can never pass unnoticed
    faulthandler.dump_traceback_later(seconds + 60, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


NONFINITE = re.compile(r"\b(nan|inf|infinity)\b", re.I)


LOG: list[Path] = []  # where each case is logged as it ends (set by the ``world`` fixture)


def _record(case: str, outcome: str, started: float) -> str:
    if LOG:
        with LOG[0].open("a") as fh:
            fh.write(json.dumps({"case": case, "outcome": outcome, "s": round(time.perf_counter() - started, 3)}) + "\n")
    OUTCOMES[outcome] += 1
    if outcome != "clear":
        PROBLEMS.append(f"{outcome}: {case}")
    return outcome


def cli_outcome(args: list[str]) -> str:
    """clear | unclear | accepted | nonfinite_success | traceback | hang for one command line."""
    case = " ".join(repr(a) if not a or " " in a else a for a in args)
    started = time.perf_counter()
    try:
        with time_limit():
            res = CliRunner().invoke(main, args)
    except Hang:
        return _record(case, "hang", started)
    if (res.exception is not None and not isinstance(res.exception, SystemExit)) or "Traceback" in res.output:
        return _record(case, "traceback", started)
    if res.exit_code == 0:
        return _record(case, "nonfinite_success" if NONFINITE.search(res.output) else "accepted", started)
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    return _record(case, "clear" if len(errors) == 1 and len(errors[0]) > 12 else "unclear", started)


def api_outcome(case: str, call: Callable[[], Any]) -> str:
    """The same for a Python call: a one-line ``ValueError`` is the clear outcome."""
    started = time.perf_counter()
    try:
        with time_limit():
            value = call()
    except Hang:
        return _record(case, "hang", started)
    except ValueError as exc:
        text = str(exc).strip()
        return _record(case, "clear" if text and len(text.splitlines()) <= 4 else "unclear", started)
    except Exception as exc:  # noqa: BLE001 - anything else is a traceback for a user
        return _record(f"{case} -> {type(exc).__name__}: {exc}", "traceback", started)
    text = json.dumps(value, default=str) if not hasattr(value, "to_dict") else json.dumps(value.to_dict())
    return _record(case, "nonfinite_success" if NONFINITE.search(text) else "accepted", started)


# --------------------------------------------------------------------------- the scratch world


def _snapshot(folder: Path, skip: Path | None = None) -> dict[str, tuple[int, int]]:
    out = {}
    for p in folder.rglob("*"):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        if any(part in (".git", "__pycache__", ".pytest_cache", ".hypothesis") for part in p.parts):
            continue
        if p.is_file():
            st_ = p.stat()
            out[str(p)] = (st_.st_size, st_.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The scratch folder (working directory of every input) with files that must survive, and
    snapshots of the repository and of the scratch's parent to compare at the end."""
    base = tmp_path_factory.mktemp("hostile")
    scratch = base / "scratch"
    (scratch / "precious").mkdir(parents=True)
    (scratch / "precious" / "keep.txt").write_text("do not delete")
    (scratch / "notes.txt").write_text("mine")
    files = _make_files(scratch)
    before = {"repo": _snapshot(ROOT), "parent": _snapshot(base, skip=scratch)}
    precious = {p: p.read_bytes() for p in (scratch / "precious" / "keep.txt", scratch / "notes.txt")}
    LOG[:] = [base.parent / "hostile-cases.jsonl"]
    LOG[0].write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(scratch)
        mp.setenv("STOCHFORMER_DASK_TIMEOUT", "2")
        yield {"scratch": scratch, "files": files, "base": base, "before": before, "precious": precious}


def _npy(folder: Path, name: str, array: Any) -> str:
    path = folder / f"{name}.npy"
    np.save(path, array, allow_pickle=True)
    return str(path)


def _make_files(d: Path) -> dict[str, str]:
    """Bad config files, sweep files and .npy initial states, by name."""
    f: dict[str, str] = {}

    def text(name: str, body: str | bytes) -> None:
        path = d / name
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        f[name] = str(path)

    text("binary.toml", bytes(range(256)) * 4)
    text("invalid.toml", "N = = 3\n")
    text("unknown.toml", "flux = 3\n")
    text("wrongtype.toml", 'N = "many"\n')
    text("bigint.toml", "N = 99999999999999999999\n")
    text("int64.toml", "L = 9223372036854775808\n")
    text("negative.toml", "m = -4\n")
    text("initnum.toml", "init = 5\n")
    text("npynopath.toml", '[init]\nkind = "npy"\n')
    text("deep.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n")
    text("utf16.toml", "N = 3\n".encode("utf-16"))
    text("nan.toml", "T = nan\n")
    text("inf.toml", "beta = inf\n")
    text("matrix.toml", "V = [[1, 2], [3, 4]]\n")
    text("cosine.toml", "[init]\nkind = \"uniform\"\ncosine = 0.2\n")
    (d / "adir.toml").mkdir()
    f["adir.toml"] = str(d / "adir.toml")
    f["missing.toml"] = str(d / "missing.toml")
    sweeps = {
        "s_unknown": "[grid]\nflux = [1, 2]\n",
        "s_batch": "[grid]\nbatch = [1, 2]\n",
        "s_seed": "[grid]\nseed = [1, 2]\n",
        "s_empty_axis": "[grid]\nN = []\n",
        "s_repeat": "[grid]\nN = [4, 4]\n",
        "s_not_list": "[grid]\nN = 4\n",
        "s_grid_scalar": "grid = 3\n",
        "s_points_table": "[points]\nN = 4\n",
        "s_point_empty": "[[points]]\n",
        "s_overlap": "[grid]\nN = [4, 8]\n[[points]]\nN = 6\n",
        "s_bad_value": "[grid]\nN = [1, 4]\n",
        "s_bad_point": "[[points]]\nd = 1\n",
        "s_irrelevant_axis": "[grid]\n\"init.cosine\" = [0.0, 0.5]\n",
        "s_samples0": "samples = 0\n",
        "s_tasks0": "samples_per_task = 0\n",
        "s_many_points": f"[grid]\nL = {list(range(1, 401))}\nN = {list(range(2, 402))}\n",
        "s_many_tasks": "samples = 1000000000\nsamples_per_task = 1\n",
        "s_huge_N": "samples = 16\nsamples_per_task = 16\n[model]\nN = 10000000\n",
        "s_batch_top": "[model]\nbatch = 4\n",
        "s_int64": "[grid]\nL = [9223372036854775808]\n",
        "s_nan_axis": "[grid]\nT = [nan]\n",
    }
    for name, body in sweeps.items():
        text(f"{name}.toml", body)
    good = np.ones((16, 3))
    f["npy_shape"] = _npy(d, "shape", np.ones((5, 3)))
    f["npy_nan"] = _npy(d, "nan", np.where(np.eye(16, 3) > 0, np.nan, 1.0))
    f["npy_inf"] = _npy(d, "inf", np.where(np.eye(16, 3) > 0, np.inf, 1.0))
    zero = good.copy()
    zero[3] = 0
    f["npy_zero_row"] = _npy(d, "zero_row", zero)
    f["npy_object"] = _npy(d, "object", np.array([{"a": 1}] * 48, dtype=object).reshape(16, 3))
    f["npy_complex"] = _npy(d, "complex", good.astype(complex))
    f["npy_bool"] = _npy(d, "bool", good.astype(bool))
    f["npy_str"] = _npy(d, "str", good.astype(str))
    f["npy_1d"] = _npy(d, "oned", np.ones(48))
    f["npy_empty"] = _npy(d, "empty", np.ones((0, 3)))
    f["npy_4d"] = _npy(d, "fourd", np.ones((1, 8, 16, 3)))
    full = (d / "shape.npy").read_bytes()
    text("npy_truncated.npy", full[: len(full) // 2])
    f["npy_truncated"] = f.pop("npy_truncated.npy")
    text("npy_text.npy", "not an array\n")
    f["npy_text"] = f.pop("npy_text.npy")
    header = b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000, 3), }"
    text("npy_liar.npy", header.ljust(127, b" ") + b"\n" + b"\x00" * 64)
    f["npy_liar"] = f.pop("npy_liar.npy")
    f["npy_missing"] = str(d / "nope.npy")
    f["npy_dir"] = str(d / "precious")
    return f


# --------------------------------------------------------------------------- named cases

FAST = ["--quiet", "--set", "L=3", "--set", "N=4", "--set", "batch=2", "--set", "m=8"]
SWEEP_OK = "sweep_ok.toml"
COMMANDS = {  # a cheap valid invocation of every experiment command, before --out
    "simulate": ["simulate", *FAST],
    "sync": ["sync", "--quiet", "--set", "model.L=8", "--set", "model.T=1", "--set", "model.batch=2", "--set", "pairs=2",
             "--set", "bootstrap=10"],
    "phase": ["phase", "--quiet", "--set", "model.L=4", "--set", "model.T=0.4", "--set", "x_values=[0]", "--set",
              "y_values=[0,0.5]", "--set", "pairs=2"],
    "converge": ["converge", "--quiet"],
    "chaos": ["chaos", "--quiet"],
    "spectrum": ["spectrum", "--quiet", "--set", "model.L=8", "--set", "model.batch=4", "--set", "bootstrap=10"],
    "sweep": ["sweep", "--config", SWEEP_OK, "--quiet", "--scheduler", "serial"],
    "reproduce": ["reproduce", "--quiet", "--profile", "tiny"],
}
#: the extreme-values cases' cheaper invocations (else COMMANDS'), checked valid below
EXTREME_BASES = {
    "pair": ["pair", "--json"],
    "rates": ["rates", "--json"],
    "sync": ["sync", "--quiet", "--set", "model.L=8", "--set", "model.T=1", "--set", "model.batch=2", "--set", "pairs=2", "--set",
             "bootstrap=10"],
    "converge": ["converge", "--quiet", "--set", "model.batch=8", "--set", "samples_per_task=4", "--set",
                 "depths=[2,4]", "--set", "widths=[2,4]", "--set", "bootstrap=100"],
    "phase": ["phase", "--quiet", "--set", "model.L=4", "--set", "model.T=0.4", "--set", "pairs=2", "--set",
              "boundary_points=5", "--set", "x_values=[0.0, 0.5]", "--set", "y_values=[0.5, 1.0]"],
    "chaos": ["chaos", "--quiet", "--set", "sizes=[4,8,16]", "--set", "decor_sizes=[4,8]", "--set", "decor_repeats=16",
              "--set", "dims=[3]", "--set", "dims_batch=2", "--set", "model.L=4", "--set", "model.N=32", "--set",
              "model.batch=4", "--set", "w2_batch=2"],
}
OUT_HAZARDS = ["", ".", "..", "/", "~", "/dev/null", "notes.txt", "notes.txt/sub", "/proc/stochformer-out", "precious"]


@pytest.mark.parametrize("base", [*COMMANDS.values(), *(b for b in EXTREME_BASES.values() if b[0] not in ("pair", "rates"))],
                         ids=lambda b: b[0])
def test_every_base_invocation_is_valid(world, sweep_ok, base: list[str]) -> None:
    """Each command's cheap invocation, which the hazards and extreme values below alter one thing
    of, is itself a valid config: otherwise every case built on it would stop at the config and test
    nothing else."""
    res = CliRunner().invoke(main, [*base, "--print-config"], catch_exceptions=False)
    assert res.exit_code == 0, res.output[-500:]


def named_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for cmd, base in COMMANDS.items():
        for out in OUT_HAZARDS:
            cases.append((f"{cmd} --out {out!r} --force", [*base, "--out", out, "--force"]))
    sizes = {
        "simulate": ["N=10000000", "L=1000000000", "batch=1000000000", "m=1000000000", "d=100000000",
                     "path_stride=1 L=100000000", "dynamics=sde noise=random_features features=1000000000",
                     "dynamics=sde noise=exact N=1000000", "N=9223372036854775807", "L=99999999999999999999"],
        "sync": ["pairs=1000000000", "model.batch=1000000000", "model.L=1000000000", "model.N=10000000"],
        "phase": ["pairs=1000000000", "model.L=1000000000"],
        "converge": ["depths=[1,1000000000]", "widths=[1,1000000000]", "model.N=10000000", "model.batch=1000000000"],
        "chaos": ["model.N=10000000", "model.features=1000000000", "model.L=1000000000", "decor_repeats=1000000000"],
    }
    for cmd, items in sizes.items():
        for item in items:
            sets = sum((["--set", x] for x in item.split()), [])
            cases.append((f"{cmd} size {item}", [*COMMANDS[cmd], *sets, "--out", f"o-{cmd}"]))
    nonfinite = ["V=[[1e308,0,0],[0,1e308,0],[0,0,1e308]]", "Q=[[1e200,0,0],[0,1e200,0],[0,0,1e200]] "
                 "K=[[1e200,0,0],[0,1e200,0],[0,0,1e200]]", "dynamics=sde sigma_U=1e155", "dynamics=sde sigma_W=1e200",
                 "dynamics=sde noise_scale=1e200", "dynamics=sde activation=gelu sigma_U=1e200",
                 "gamma=1e308"]
    for cmd in ("simulate", "sync"):
        for item in nonfinite:
            sets = sum((["--set", x if cmd == "simulate" else f"model.{x}"] for x in item.split()), [])
            cases.append((f"{cmd} non-finite {item}", [*COMMANDS[cmd], *sets, "--out", f"o-{cmd}"]))
    for item in ["N5", "=3", ".N=3", "init..kind=pair", "N.x=3", "init=5", "flux=1", "init.flux=1", "N=", "N=[", "T=1e400",
                 "init.cosine=0.3", "init.spread=0.3", "init.center=[1,0,0]", "init.path=x.npy", "seed=-1",
                 "seed=18446744073709551616", "device=tpu", "device=cuda:x", "activation=swish", "dtype=float16"]:
        cases.append((f"simulate --set {item}", ["simulate", *FAST, "--set", item, "--out", "o"]))
    for name in ["binary.toml", "invalid.toml", "unknown.toml", "wrongtype.toml", "bigint.toml", "int64.toml",
                 "negative.toml", "initnum.toml", "npynopath.toml", "deep.toml", "utf16.toml", "nan.toml", "inf.toml",
                 "matrix.toml", "cosine.toml", "adir.toml", "missing.toml"]:
        for cmd in ("simulate", "sync", "converge", "reproduce"):  # nothing else set: the file alone is bad
            cases.append((f"{cmd} --config {name}", [cmd, "--quiet", "--config", name, "--out", f"o-{cmd}"]))
    for name in ["s_unknown", "s_batch", "s_seed", "s_empty_axis", "s_repeat", "s_not_list", "s_grid_scalar",
                 "s_points_table", "s_point_empty", "s_overlap", "s_bad_value", "s_bad_point", "s_irrelevant_axis",
                 "s_samples0", "s_tasks0", "s_many_points", "s_many_tasks", "s_huge_N", "s_batch_top", "s_int64",
                 "s_nan_axis", "binary", "invalid", "missing"]:
        cases.append((f"sweep {name}", ["sweep", "--config", f"{name}.toml", "--quiet", "--scheduler", "serial", "--out", "o-sweep"]))
    for sched in ["processes:0", "processes:abc", "local-cluster:-1", "bogus", "tcp://127.0.0.1:1", "tls://127.0.0.1:1",
                  "127.0.0.1:notaport", "tcp://[::1", "tcp://nonexistent.invalid:8786"]:
        cases.append((f"sweep --scheduler {sched}", ["sweep", "--config", SWEEP_OK, "--quiet", "--scheduler", sched, "--out", "o-sched"]))
        cases.append((f"converge --scheduler {sched}", ["converge", "--quiet", "--set", "model.batch=8", "--set", "samples_per_task=4",
                                                        "--set", "depths=[2,4]", "--set", "widths=[2,4]", "--set",
                                                        "bootstrap=100", "--scheduler", sched, "--out", "o-sched2"]))
    cases += [
        ("sweep --resume without --out", ["sweep", "--config", SWEEP_OK, "--resume"]),
        ("sweep --resume --force", ["sweep", "--config", SWEEP_OK, "--resume", "--force", "--out", "x"]),
        ("sweep --resume on a foreign folder", ["sweep", "--config", SWEEP_OK, "--resume", "--out", "precious"]),
        ("sweep --workers 0", ["sweep", "--config", SWEEP_OK, "--workers", "0"]),
        ("sweep --workers and --local-cluster", ["sweep", "--config", SWEEP_OK, "--workers", "2", "--local-cluster", "2"]),
        ("reproduce --profile bogus", ["reproduce", "--profile", "bogus"]),
        ("reproduce --only bogus", ["reproduce", "--profile", "tiny", "--only", "bogus", "--out", "r"]),
        ("reproduce --set bogus=1", ["reproduce", "--profile", "tiny", "--set", "bogus=1", "--out", "r"]),
        ("reproduce --set sync.N=1", ["reproduce", "--profile", "tiny", "--set", "sync.N=1", "--out", "r"]),
        ("reproduce --set sync.pairs=1e9", ["reproduce", "--profile", "tiny", "--set", "sync.pairs=1000000000", "--out", "r"]),
        ("reproduce --scheduler bogus", ["reproduce", "--profile", "tiny", "--scheduler", "bogus", "--out", "r"]),
        ("reproduce --max-memory x", ["reproduce", "--profile", "tiny", "--max-memory", "x", "--out", "r"]),
        ("simulate --max-memory -1G", ["simulate", *FAST, "--max-memory", "-1G", "--out", "o"]),
        ("simulate --max-memory 1K", ["simulate", *FAST, "--max-memory", "1K", "--out", "o"]),
        ("simulate unknown option", ["simulate", "--bogus"]),
        ("unknown command", ["bogus"]),
    ]
    for key in NPY_KEYS:
        cases.append((f"simulate init.path={key}", ["simulate", *FAST[:-6], "--set", "N=16", "--set", "init.kind=npy",
                                                   "--set", f"init.path={{{key}}}", "--out", "o-npy"]))
    rates_bad = [["--sigma-U", "1e155"], ["--activation", "gelu", "--sigma-W", "1e200"], ["--activation", "linear",
                 "--sigma-U", "1e200"], ["--d", "1"], ["--d", "abc"], ["--d", "99999999999999999999999"], ["--beta", "0"],
                 ["--beta", "1e300"], ["--gamma", "nan"], ["--gamma", "1e308", "--sigma-U", "1e100"],
                 ["--activation", "foo"], ["--noise-scale", "-1"], ["--noise-scale", "1e200"], ["--sigma-U", "inf"],
                 ["--sigma-U", "nan"], ["--sigma-W", "-0.5"]]
    for extra in rates_bad:  # the same inputs through the fields every command takes
        as_set = [x for flag, v in zip(extra[::2], extra[1::2]) for x in ("--set", f"{RATES_FIELDS[flag]}={v}")]
        cases.append((f"rates {' '.join(extra)}", ["rates", *as_set]))
    return cases


RATES_FIELDS = {"--sigma-U": "sigma_U", "--sigma-W": "sigma_W", "--d": "d", "--beta": "energy_beta", "--gamma": "gamma",
                "--activation": "activation", "--noise-scale": "noise_scale"}
NPY_KEYS = ["npy_shape", "npy_nan", "npy_inf", "npy_zero_row", "npy_object", "npy_complex", "npy_bool",
                              "npy_str", "npy_1d", "npy_empty", "npy_4d", "npy_truncated", "npy_text", "npy_liar",
            "npy_missing", "npy_dir"]
NAMED = named_cases()


@pytest.fixture(scope="module")
def sweep_ok(world) -> None:
    (world["scratch"] / SWEEP_OK).write_text("samples = 2\nsamples_per_task = 2\n[model]\nL = 2\nN = 4\nm = 8\n")


def test_named_cases(world, sweep_ok) -> None:
    """Every named case ends in one clear error (run all, then report every problem at once)."""
    files = world["files"]
    start = len(PROBLEMS)
    for _, args in NAMED:
        cli_outcome([a.format(**files) if "{" in a and "}" in a and "[" not in a else a for a in args])
    assert PROBLEMS[start:] == []


# --------------------------------------------------------------------------- the Python API

def _kernel(**kw: Any) -> Callable[[], Any]:
    return lambda: NoiseKernel(**kw)


API = [
    *[(f"NoiseKernel(d={d!r})", _kernel(d=d)) for d in (-3, 0, 1, 2.5, "3", None, True, math.nan)],
    *[(f"NoiseKernel(sigma_U={v!r})", _kernel(sigma_U=v)) for v in (-1, math.nan, math.inf, "x", None, -1e-300)],
    *[(f"NoiseKernel(sigma_W={v!r})", _kernel(sigma_W=v)) for v in (-1, math.nan, -math.inf)],
    *[(f"NoiseKernel(scale={v!r})", _kernel(scale=v)) for v in (-2, math.inf, [1])],
    *[(f"NoiseKernel(activation={v!r})", _kernel(activation=v)) for v in ("foo", 5, None, "")],
    *[(f"NoiseKernel(quad_points={v!r})", _kernel(quad_points=v)) for v in (0, 1, 10**9, 3.5)],
    ("NoiseKernel('foo')", lambda: NoiseKernel("foo")),
    *[(f"kappa({r!r})", (lambda r=r: NoiseKernel().kappa(r))) for r in (2.0, -1.5, math.nan, "x", [0.1, 3.0])],
    *[(f"kappa_prime({r!r})", (lambda r=r: NoiseKernel("tanh").kappa_prime(r))) for r in (1.01, math.inf)],
    *[(f"rates(beta={b!r})", (lambda b=b: rates(NoiseKernel(), beta=b))) for b in (0, -1, math.nan, 1e300, "x")],
    *[(f"rates(gamma={g!r})", (lambda g=g: rates(NoiseKernel(), gamma=g))) for g in (math.nan, math.inf, None)],
    ("rates('relu')", lambda: rates("relu")),
    ("rates(sigma_U=1e155)", lambda: rates(NoiseKernel("relu", 3, 1e155))),
    ("rates(gelu, sigma_W=1e200)", lambda: rates(NoiseKernel("gelu", 3, 0.0, 1e200))),
    ("rates(linear, scale=1e200)", lambda: rates(NoiseKernel("linear", scale=1e200))),
    ("NoiseKernel(sigma_U=1e155).kappa1", lambda: NoiseKernel("relu", 3, 1e155).kappa1),
    ("lyapunov_exponent(d=1)", lambda: lyapunov_exponent(0.1, 0.1, 1)),
    ("first_moment_rate(d=0.5)", lambda: first_moment_rate(0.1, 0.1, 0.5)),
    ("lambda_bar_prime(grid=1)", lambda: lambda_bar_prime(NoiseKernel(), 1.0, grid=1)),
    ("lambda_bar_prime(beta=0)", lambda: lambda_bar_prime(NoiseKernel(), 0.0)),
    ("build_config(N=1)", lambda: build_config(None, ["N=1"])),
    ("RunConfig(N=-1)", lambda: RunConfig(N=-1)),
    ("RunConfig(L=2**63)", lambda: RunConfig(L=2**63)),
    ("RunConfig(init={'kind': 'uniform', 'cosine': 0.1})", lambda: RunConfig(init={"kind": "uniform", "cosine": 0.1})),
]


def _api_runs() -> list[tuple[str, Callable[[], Any]]]:
    from stochformer.experiments.chaos import run_chaos
    from stochformer.experiments.converge import run_converge
    from stochformer.experiments.phase import run_phase
    from stochformer.experiments.simulate import run_simulate
    from stochformer.experiments.sweep import run_sweep
    from stochformer.experiments.sync import run_sync

    out = []
    for name, fn in [("run_simulate", run_simulate), ("run_sync", run_sync), ("run_converge", run_converge), ("run_chaos", run_chaos),
                     ("run_phase", run_phase), ("run_sweep", run_sweep)]:
        for bad in (None, "config.toml", 5, {"N": 1}, {"flux": 2}):
            out.append((f"{name}({bad!r})", lambda fn=fn, bad=bad: fn(bad)))
    return out


def test_python_api(world) -> None:
    start = len(PROBLEMS)
    for case, call in API + _api_runs():
        api_outcome(case, call)
    assert PROBLEMS[start:] == []


# --------------------------------------------------------------------------- Hypothesis

def _range(info: Any) -> tuple[list[Any], Any, bool, Any, bool]:
    """A field's types (without None) and its declared range: low, low open, high, high open."""
    ann = info.annotation
    args = [a for a in (get_args(ann) or (ann,)) if a is not type(None)]
    lo = hi = None
    lo_open = hi_open = False
    for meta in info.metadata:
        if getattr(meta, "ge", None) is not None:
            lo = meta.ge
        if getattr(meta, "gt", None) is not None:
            lo, lo_open = meta.gt, True
        if getattr(meta, "le", None) is not None:
            hi = meta.le
        if getattr(meta, "lt", None) is not None:
            hi, hi_open = meta.lt, True
    return args, lo, lo_open, hi, hi_open


def _invalid_strategy(info: Any) -> st.SearchStrategy | None:
    """Values outside the field's declared range, as --set text (None: no numeric/literal range)."""
    ann = info.annotation
    args, lo, lo_open, hi, hi_open = _range(info)
    if args == [bool]:
        return st.sampled_from(['"maybe"', "2", "[true]", '"yes please"'])
    if get_origin(ann) is Literal:
        return st.text(alphabet="abcxyz_", min_size=1, max_size=8).filter(lambda t: t not in get_args(ann)).map(json.dumps)
    if args == [int]:
        parts = [st.sampled_from(["2.5", '"abc"', "nan", "[1]"])]
        if hi is None or hi < 2**63:  # past int64 (a seed's range is 0..2**64 - 1: 2**63 is valid there)
            parts.append(st.integers(min_value=2**63, max_value=2**80).map(str))
        if lo is not None:
            parts.append(st.integers(min_value=-(2**62), max_value=int(lo) - (0 if lo_open else 1)).map(str))
        if hi is not None:
            parts.append(st.integers(min_value=int(hi) + (0 if hi_open else 1), max_value=int(hi) + 2**62).map(str))
        return st.one_of(parts)
    if float in args:
        parts = [st.sampled_from(["nan", "inf", "-inf", "1e400", '"abc"', "[1.0]"])]
        if lo is not None:
            parts.append(st.floats(max_value=lo, exclude_max=not lo_open, allow_nan=False, allow_infinity=False,
                                   min_value=-1e300).map(repr))
        if hi is not None:
            parts.append(st.floats(min_value=hi, exclude_min=not hi_open, allow_nan=False, allow_infinity=False,
                                   max_value=1e300).map(repr))
        return st.one_of(parts)
    return None


def _field_cases(model: type, prefix: str = "") -> list[tuple[str, st.SearchStrategy]]:
    out = []
    for name, info in model.model_fields.items():
        if name == "model":  # an experiment's model config: its fields by their dotted path
            out += _field_cases(info.annotation, "model.")
            continue
        strat = _invalid_strategy(info)
        if strat is not None:
            out.append((prefix + name, strat))
    return out


HYPO_COMMANDS = {"simulate": RunConfig, "sync": SyncConfig, "converge": ConvergeConfig, "chaos": ChaosConfig,
                 "phase": PhaseConfig, "spectrum": SpectrumConfig}


@st.composite
def bad_override(draw, model: type) -> str:
    name, strat = draw(st.sampled_from(_field_cases(model)))
    return f"{name}={draw(strat)}"


@pytest.mark.parametrize("command", list(HYPO_COMMANDS))
def test_hypothesis_out_of_range_fields(world, command: str) -> None:
    """One field at a time set outside its declared range (drawn from the field's own bounds)."""
    start = len(PROBLEMS)

    @settings(max_examples=45, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(item=bad_override(HYPO_COMMANDS[command]))
    def run(item: str) -> None:
        cli_outcome([*COMMANDS[command], "--set", item, "--out", f"o-h-{command}"])

    run()
    assert PROBLEMS[start:] == []


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=st.one_of(
    st.fixed_dictionaries({"d": st.one_of(st.integers(max_value=1), st.floats(allow_nan=True).filter(lambda x: x != int(x) if math.isfinite(x) else True))}),
    st.fixed_dictionaries({"sigma_U": st.one_of(st.floats(max_value=-1e-300), st.just(math.nan), st.just(math.inf))}),
    st.fixed_dictionaries({"scale": st.one_of(st.floats(max_value=-1e-300), st.just(math.inf))}),
    st.fixed_dictionaries({"activation": st.text(max_size=6).filter(lambda t: t not in ("relu", "tanh", "gelu", "erf", "sin",
                                                                                         "linear", "silu", "sigmoid",
                                                                                         "leaky_relu"))}),
))
def test_hypothesis_kernel_arguments(world, kw: dict) -> None:
    api_outcome(f"NoiseKernel(**{kw!r})", lambda: rates(NoiseKernel(**kw)))


#: the decades of `_extreme_values`: every one near 1, sparser towards float64's ends
DECADES = (-300, -200, -150, -100, -50, -20, -10, -5, -3, -2, -1, 0, 1, 2, 3, 5, 10, 20, 50, 100, 150, 200, 300)


def _extreme_values(info: Any) -> list[str]:
    """Values inside a numeric field's declared range, as --set text: its closed bounds, the numbers
    next to its open ones, ±1e308 (floats) or ±2**62 (integers) where it has none, and for floats
    ±10^k inside the range for k in `DECADES` (every scale at which a square, an exponential or a
    ratio of two fields may leave the floating range or the solver's limits first). A float that may
    also be a word counts as a float."""
    args, lo, lo_open, hi, hi_open = _range(info)
    if float in args and all(a is float or get_origin(a) is Literal for a in args):
        low = (np.nextafter(float(lo), np.inf) if lo_open else float(lo)) if lo is not None else -1e308
        high = (np.nextafter(float(hi), -np.inf) if hi_open else float(hi)) if hi is not None else 1e308
        decades = [s * 10.0**k for k in DECADES for s in (1, -1)]
        return [repr(float(v)) for v in dict.fromkeys([low, high, *(v for v in decades if low < v < high)])]
    if args == [int]:
        return [str(v) for v in (
            (int(lo) + lo_open) if lo is not None else -(2**62), (int(hi) - hi_open) if hi is not None else 2**62)]
    return []


def _named(message: str, field: str) -> bool:
    """Whether an error names the field (its last dotted part, as a word: ``T`` in "the step T/L")."""
    return re.search(rf"(?<!\w){re.escape(field.rsplit('.', 1)[-1])}(?!\w)", message) is not None


def _extreme_cases(model: type, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for name, info in model.model_fields.items():
        if name == "model":
            out += _extreme_cases(info.annotation, "model.")
        elif name == "init":
            out += _extreme_cases(info.annotation, prefix + "init.")
        else:
            out += [(prefix + name, v) for v in _extreme_values(info)]
    return out



@pytest.mark.parametrize("command", ["simulate", "sync", "converge", "chaos", "phase", "spectrum", "pair", "rates"])
def test_hypothesis_extreme_valid_values(world, command: str) -> None:
    """One numeric field at a time set to an extreme value its declared range admits (a bound,
    the number next to an open bound, ±1e308 or ±2**62 where there is none): the command runs to a
    finite result, or stops with one clear line that names that field (a breakdown blames it, a
    size check asks to reduce it, a range that a command narrows states it) — never a traceback,
    a hang, or an error about something else."""
    from stochformer.cli.rates import RATES_FIELDS as READ_BY_RATES
    from stochformer.cli.pair import PAIR_FIELDS
    from stochformer.experiments.pair import PairConfig

    model = {"pair": PairConfig, "rates": RunConfig, **HYPO_COMMANDS}[command]
    cases = [(f, v) for f, v in _extreme_cases(model)
             if command not in ("pair", "rates") or f in (PAIR_FIELDS if command == "pair" else READ_BY_RATES)]
    base = EXTREME_BASES.get(command) or COMMANDS[command]
    problems: list[str] = []

    def check(case: tuple[str, str]) -> None:
        field, value = case
        if command not in ("pair", "rates"):  # a valid run that may take long (its rough estimate says so) is no hang
            from stochformer.experiments.preflight import estimate

            try:
                cfg = build_config(None, [*(a for a in base[1:] if a not in ("--set", "--quiet")), f"{field}={value}"], model=model)
            except ValueError:
                cfg = None
            e = estimate(cfg) if cfg is not None else None
            if e is not None and LIMIT_S / 100 < e.seconds < 12 * 3600 and e.bytes < 2**31:  # the size check lets it run
                return
        out = ["--out", f"o-x-{command}-{sum(OUTCOMES.values())}"] if command not in ("pair", "rates") else []
        args = [*base, "--set", f"{field}={value}", *out]
        started = time.perf_counter()
        try:
            with time_limit():
                res = CliRunner().invoke(main, args, catch_exceptions=True)
        except Hang:
            outcome = "hang"
        else:
            errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
            if (res.exception is not None and not isinstance(res.exception, SystemExit)) or "Traceback" in res.output:
                outcome = "traceback"
            elif res.exit_code == 0:
                finite = command not in ("pair", "rates") or json.loads(res.output, parse_constant=lambda c: 1 / 0) is not None
                outcome = "accepted" if finite and not NONFINITE.search(res.output) else "nonfinite_success"
            elif len(errors) == 1 and _named(errors[0], field):
                outcome = "clear"
            else:
                outcome = "unnamed" if len(errors) == 1 else "unclear"
        _record(" ".join(args), "clear" if outcome == "accepted" else outcome, started)
        if outcome not in ("accepted", "clear"):
            problems.append(f"{outcome}: {' '.join(args)} -> {(errors or [res.output[-300:]])[-1] if outcome != 'hang' else ''}")

    if command in ("pair", "rates"):  # no simulation: every case (a few seconds)
        for case in cases:
            check(case)
    else:  # examples per command, kept to ~40 s in all (seconds per run: converge 2–3, chaos 7); SF_EXTREME_EXAMPLES=200 for more
        examples = {"simulate": 15, "sync": 12, "converge": 6, "spectrum": 10, "phase": 6, "chaos": 2}[command]
        settings(max_examples=int(os.environ.get("SF_EXTREME_EXAMPLES", examples)), deadline=None, database=None,
                 derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])(
            given(case=st.sampled_from(cases))(check))()
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- summary (last)

def test_zz_summary(world) -> None:
    """The counts of this module: printed, written to hostile-summary.json, and checked (including
    that nothing changed outside the scratch folder and the files placed in it survived)."""
    base, scratch, before = world["base"], world["scratch"], world["before"]
    after = {"repo": _snapshot(ROOT), "parent": _snapshot(base, skip=scratch)}
    lost = [k for where in before for k, v in before[where].items() if after[where].get(k) != v]
    lost += [str(p) for p, data in world["precious"].items() if not p.exists() or p.read_bytes() != data]
    added = [k for where in after for k in after[where] if k not in before[where]]
    inputs = sum(OUTCOMES.values())
    summary = {"inputs": inputs, **{k: OUTCOMES.get(k, 0) for k in
               ("clear", "unclear", "accepted", "nonfinite_success", "traceback", "hang")},
               "files_lost_or_changed": len(lost), "files_created_outside_scratch": len(added)}
    (base.parent / "hostile-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nhostile-input summary: {json.dumps(summary)}")
    assert inputs >= 300 and OUTCOMES["clear"] == inputs, PROBLEMS[:30]
    assert lost == [] and added == []
