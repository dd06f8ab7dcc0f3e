"""Configuration, validation and the ``simulate`` command's outputs.

Every invalid input must give ONE clear error naming the field and its valid range, before any
work, and leave no output folder behind. A FIFO, a device, a folder or an oversized file as
``--config``, ``init.path`` or to ``stochformer.load`` is refused at once (a regression fails by
timeout instead of hanging)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stochformer.experiments.simulate as experiments_simulate
from stochformer.cli import main
from stochformer.config import ConfigError, RunConfig, build_config, tomllib
from stochformer.io.results import load

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "simulate.toml"
FAST = ["--quiet", "--set", "L=4", "--set", "N=4", "--set", "batch=3", "--set", "m=8"]


# --- invalid input: one error naming field and range ---------------------------------------------------

# (overrides, field named, text of the valid range that must appear)
INVALID = [
    (["N=1"], "N", ">= 2"),
    (["d=1"], "d", ">= 2"),
    (["m=0"], "m", ">= 1"),
    (["L=0"], "L", ">= 1"),
    (["batch=0"], "batch", ">= 1"),
    (["T=0"], "T", "> 0"),
    (["T=-2.5"], "T", "> 0"),
    (["T=nan"], "T", "> 0"),
    (["T=inf"], "T", "finite"),
    (["sigma_U=-0.1"], "sigma_U", ">= 0"),
    (["sigma_W=-1"], "sigma_W", ">= 0"),
    (["noise_scale=-2"], "noise_scale", ">= 0"),
    (["sigma_U=nan"], "sigma_U", ">= 0"),
    (["beta=inf"], "beta", "finite"),
    (["energy_beta=0"], "energy_beta", "> 0"),
    (["energy_beta=800"], "energy_beta", "<= 700"),
    (["seed=-1"], "seed", ">= 0"),
    (["seed=18446744073709551616"], "seed", "<= 18446744073709551615"),
    (["record_every=0"], "record_every", ">= 1"),
    (["path_stride=0"], "path_stride", ">= 1"),
    (["mlp=maybe"], "mlp", "true or false"),
    (["N=abc"], "N", ">= 2"),
    (["N=2.5"], "N", "integer"),
    (["activation=swish"], "activation", "relu"),
    (["order=pre_ln"], "order", "'post_ln'"),
    (["dynamics=ode"], "dynamics", "'sde'"),
    (["dtype=float16"], "dtype", "'float32'"),
    (["gamma=sideways"], "gamma", "'repulsive'"),
    (["gamma=nan"], "gamma", "finite"),
    (["Q=[[1,0],[0,1]]"], "Q", "d x d"),
    (["d=2", "V=[[1,0],[0,1],[0,0]]"], "V", "d x d"),
    (["d=2", "K=[[1,0],[0,nan]]"], "K", "finite"),
    (["init.kind=pair"], "N = 2", "init.kind"),
    (["init.kind=cone"], "init.kind", "'cluster'"),
    (["init.cosine=1.5"], "init.cosine", "<= 1"),
    (["init.spread=-1"], "init.spread", ">= 0"),
    (["init.kind=cluster", "init.center=[1,0]"], "init.center", "d = 3"),
    (["init.center=[1,0,0]"], "init.center", "init.kind = 'cluster'"),
    (["init.cosine=0.2"], "init.cosine", "no effect"),
    (["N=9223372036854775808"], "N", "2**63"),
    (["init.kind=npy"], "init.path", ".npy"),
    (["colour=blue"], "colour", "valid fields are N, d"),
    (["init.size=3"], "init.size", "valid fields are kind"),
    (["device=tpu"], "device", "'cuda'"),
]


@pytest.mark.parametrize("overrides,field,valid", INVALID)
def test_build_config_rejects(overrides, field, valid):
    with pytest.raises(ConfigError) as exc:
        build_config(None, overrides)
    msg = str(exc.value)
    assert field in msg and valid in msg, msg
    # one line about the one bad field, not pydantic's multi-line dump
    assert "\n" not in msg and "validation error" not in msg and "pydantic" not in msg


@pytest.mark.parametrize("overrides,field,valid", INVALID[::3])
def test_cli_rejects_before_any_work(overrides, field, valid, tmp_path, monkeypatch):
    """The CLI turns the error into one usage message; nothing is simulated and no folder written."""
    calls = []
    monkeypatch.setattr(experiments_simulate, "run_simulate", lambda *a, **k: calls.append(1))
    out = tmp_path / "run"
    args = ["simulate", "--quiet", "--out", str(out)]
    for o in overrides:
        args += ["--set", o]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert field in res.output and valid in res.output and "Traceback" not in res.output
    assert not calls and not out.exists() and list(tmp_path.iterdir()) == []


_negative = st.floats(max_value=-1e-300, allow_nan=False) | st.sampled_from([-math.inf])
_nonfinite = st.sampled_from([math.nan, math.inf, -math.inf])
_INT_FIELDS = {"N": 2, "d": 2, "m": 1, "L": 1, "batch": 1, "record_every": 1}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_hypothesis_invalid_numbers(data):
    """Random out-of-range or non-finite values of the numeric fields always raise ConfigError
    naming the field (and never anything else)."""
    kind = data.draw(st.sampled_from(["int", "nonneg", "positive", "nonfinite"]))
    if kind == "int":
        field = data.draw(st.sampled_from(sorted(_INT_FIELDS)))
        value = data.draw(st.integers(max_value=_INT_FIELDS[field] - 1))
        valid = f">= {_INT_FIELDS[field]}"
    elif kind == "nonneg":
        field = data.draw(st.sampled_from(["sigma_U", "sigma_W", "noise_scale"]))
        value, valid = data.draw(_negative), ">= 0"
    elif kind == "positive":
        field = data.draw(st.sampled_from(["T", "energy_beta"]))
        value, valid = data.draw(st.floats(max_value=0.0, allow_nan=False)), "> 0"
    else:
        field = data.draw(st.sampled_from(["T", "sigma_U", "sigma_W", "noise_scale", "beta", "gamma", "energy_beta"]))
        value, valid = data.draw(_nonfinite), "finite"
    with pytest.raises(ConfigError) as exc:
        build_config({field: value})
    msg = str(exc.value)
    assert msg.startswith(f"invalid configuration: {field}:") and (valid in msg or "finite" in msg), msg


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["N", "d", "m", "L", "batch"]), value=st.integers(-10**6, 0))
def test_hypothesis_invalid_numbers_cli(field, value, tmp_path):
    out = tmp_path / f"run-{field}{value}"
    res = CliRunner().invoke(main, ["simulate", "--quiet", "--out", str(out), "--set", f"{field}={value}"])
    assert res.exit_code == 2 and f"{field}:" in res.output and ">=" in res.output
    assert not out.exists()


def test_npy_init_errors(tmp_path):
    """Wrong shape, non-finite entries, zero rows and missing or unreadable files of init.path."""
    np.save(tmp_path / "shape.npy", np.ones((3, 4)))
    np.save(tmp_path / "nan.npy", np.full((4, 3), np.nan))
    zero = np.ones((4, 3))
    zero[2] = 0
    np.save(tmp_path / "zero.npy", zero)
    (tmp_path / "junk.npy").write_text("not an array")
    cases = {"shape.npy": "expected (4, 3)", "nan.npy": "non-finite", "zero.npy": "zero row",
             "junk.npy": "cannot read", "missing.npy": "cannot read"}
    for name, text in cases.items():
        over = ["N=4", "init.kind=npy", f"init.path={tmp_path / name}"]
        with pytest.raises(ConfigError, match="init.path") as exc:
            build_config(None, over)
        assert text in str(exc.value)
        out = tmp_path / f"out-{name}"
        res = CliRunner().invoke(main, ["simulate", "--quiet", "--out", str(out), *sum((["--set", o] for o in over), [])])
        assert res.exit_code != 0 and "init.path" in res.output and text in res.output
        assert not out.exists()


def test_npy_reader_reads_up_to_its_size_limit_and_says_why_it_refuses(tmp_path, monkeypatch):
    """load_token_array: a file may be as large as the header (64 KiB) and 16 bytes an entry (the
    largest real dtype) allow, and no larger; a missing file and an I/O error are one message each,
    "init.path: cannot read PATH as a .npy array: WHY", with WHY not repeating the field."""
    from stochformer.io.tokens import load_token_array

    B, N, d = 2, 64, 64
    limit = (1 << 16) + 16 * B * N * d
    path = tmp_path / "tokens.npy"
    np.save(path, np.ones((B, N, d)))  # 64 KiB of data: within the limit, read
    assert load_token_array(path, B, N, d).shape == (B, N, d)
    with open(path, "ab") as fh:  # trailing bytes up to the limit: still read (NumPy reads the array's bytes)
        fh.write(b"\0" * (limit - path.stat().st_size))
    assert load_token_array(path, B, N, d).shape == (B, N, d)
    with open(path, "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ValueError, match=rf"^init\.path: cannot read {re.escape(str(path))} as a \.npy array: "
                                         rf"{re.escape(str(path))} is .*; check the file$"):
        load_token_array(path, B, N, d)
    missing = tmp_path / "missing.npy"
    with pytest.raises(ValueError, match=rf"^init\.path: cannot read {re.escape(str(missing))} as a \.npy array: "
                                         rf"cannot read {re.escape(str(missing))}: file not found$"):
        load_token_array(missing, B, N, d)

    def failing_disk(fh):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(np.lib.format, "read_magic", failing_disk)
    np.save(path, np.ones((N, d)))
    with pytest.raises(ValueError, match=rf"^init\.path: cannot read {re.escape(str(path))} as a \.npy array: "
                                         r"\[Errno 5\] Input/output error$"):
        load_token_array(path, B, N, d)


def test_npy_of_large_entries_normalises(tmp_path, monkeypatch) -> None:
    """Entries near 1e308 are scaled before normalising (no overflow, a finite run)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "large.npy"
    np.save(path, np.full((4, 3), 1e308) * (np.arange(1, 5)[:, None] / 4))
    res = CliRunner().invoke(main, ["simulate", "--quiet", "--set", "N=4", "--set", "L=3", "--set", "batch=2",
                                    "--set", "init.kind=npy", "--set", f"init.path={path}", "--out", "o-large"])
    assert res.exit_code == 0 and not re.search(r"\b(nan|inf|infinity)\b", res.output, re.I), res.output


def test_config_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("N = = 3\n")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00N = 1")
    for path, text in ((tmp_path / "missing.toml", "not found"), (bad, "cannot read"), (binary, "cannot read")):
        with pytest.raises(ConfigError, match="config"):
            build_config(config_file=path)
        out = tmp_path / "out"
        res = CliRunner().invoke(main, ["simulate", "--config", str(path), "--out", str(out)])
        assert res.exit_code == 2 and text in res.output and not out.exists()
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("N = 1\n")
    res = CliRunner().invoke(main, ["simulate", "--config", str(wrong), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "N:" in res.output and ">= 2" in res.output


@pytest.mark.parametrize("item", ["N5", "=3", "init..kind=pair", ".N=3"])
def test_bad_set_syntax(item, tmp_path):
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        build_config(None, [item])
    res = CliRunner().invoke(main, ["simulate", "--set", item, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "FIELD=VALUE" in res.output and not (tmp_path / "o").exists()


def test_existing_output_folder_is_not_overwritten(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    res = CliRunner().invoke(main, ["simulate", *FAST, "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# --- config: precedence, nested fields, example file -------------------------------------------------


def test_toml_then_set_precedence(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('N = 5\nd = 4\nactivation = "tanh"\n[init]\nkind = "cluster"\nspread = 0.2\n')
    cfg = build_config({"N": 9, "m": 7}, ["d=6", "init.spread=0.05"], f)
    assert (cfg.N, cfg.d, cfg.m, cfg.activation) == (5, 6, 7, "tanh")  # defaults ← base ← file ← --set
    assert cfg.init.kind == "cluster" and cfg.init.spread == 0.05
    assert cfg.L == RunConfig().L  # untouched fields keep their defaults


def test_dotted_nested_fields_and_values():
    cfg = build_config(None, ["init.kind=pair", "init.cosine=0.5", "N=2", "gamma=repulsive", "mlp=false",
                              "Q=[[1,0,0],[0,2,0],[0,0,1]]", "path_stride=3"])
    assert cfg.init.kind == "pair" and cfg.init.cosine == 0.5 and cfg.N == 2
    assert cfg.gamma_value == -1.0 and cfg.mlp is False and cfg.Q[1][1] == 2.0 and cfg.path_stride == 3
    # with_updates re-validates
    with pytest.raises(ConfigError, match="N"):
        cfg.with_updates(N=3)


def test_example_file_loads_and_matches_the_docs():
    cfg = build_config(config_file=EXAMPLE)
    assert isinstance(cfg, RunConfig) and cfg.gamma_value == 1.0
    # the TOML shown in docs/usage.md is the same configuration
    doc = (EXAMPLE.parents[1] / "docs" / "usage.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    assert RunConfig.model_validate(tomllib.loads(block)) == cfg


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_is_one_clean_error(tmp_path):
    res = CliRunner().invoke(main, ["simulate", *FAST, "--set", "device=cuda", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "device" in res.output and "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == []


# --- simulate outputs ------------------------------------------------------------------------------------


def _pairwise(final: np.ndarray, energy_beta: float) -> dict[str, np.ndarray]:
    """Per-sample statistics of final tokens (batch, N, d), computed directly."""
    G = np.einsum("bid,bjd->bij", final, final)
    iu = np.triu_indices(final.shape[1], 1)
    pairs = G[:, iu[0], iu[1]]
    return {
        "mean_cosine": pairs.mean(1),
        "min_cosine": pairs.min(1),
        "energy": 0.5 * (np.exp(energy_beta) - np.exp(energy_beta * G)).mean(axis=(1, 2)),
    }


@pytest.mark.parametrize("dynamics", ["transformer", "sde"])
def test_simulate_output_folder(dynamics, tmp_path):
    out = tmp_path / "run"
    args = ["simulate", *FAST, "--set", "d=3", "--set", "path_stride=2", "--set", "energy_beta=2",
            "--set", "seed=5", "--set", f"dynamics={dynamics}", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} >= {"config.json", "summary.json", "dataset.nc", "summary.png", "paths.png"}
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
    rec = json.loads((out / "config.json").read_text())
    assert rec["seed"] == 5 and rec["config"]["dynamics"] == dynamics and rec["config"]["N"] == 4
    assert rec["device"].startswith("cpu") and rec["versions"]["torch"] and rec["version"]
    assert RunConfig.model_validate(rec["config"]).L == 4  # the resolved config round-trips
    summary = json.loads((out / "summary.json").read_text())
    for key in ("layers", "mean_cosine", "mean_cosine_se", "energy", "energy_se", "min_cosine"):
        assert len(summary[key]) == 5, key
    assert summary["layers"] == [0, 1, 2, 3, 4]
    with xr.open_dataset(out / "dataset.nc") as opened:  # the default engine reads it
        arr = opened.load()
    assert arr["X"].shape == (3, 3, 4, 3) and list(arr["snapshot_step"].values) == [0, 2, 4]
    assert list(arr["time"].values) == [0.0, 1.25, 2.5, 3.75, 5.0]  # t = k T/L with T = 5, L = 4
    assert json.loads(arr.attrs["config"])["seed"] == 5 and arr.attrs["command"] == "simulate"
    np.testing.assert_array_equal(arr["X"].values[:, -1], arr["X_final"].values)
    direct = _pairwise(arr["X_final"].values, 2.0)
    for key in ("mean_cosine", "energy", "min_cosine"):
        per_sample = arr[key].values  # (batch, time)
        assert per_sample.shape == (3, 5)
        np.testing.assert_allclose(per_sample[:, -1], direct[key], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(summary[key], per_sample.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(summary["mean_cosine_se"], arr["mean_cosine"].values.std(0, ddof=1) / np.sqrt(3), rtol=1e-10)
    np.testing.assert_allclose(summary["energy_se"], arr["energy"].values.std(0, ddof=1) / np.sqrt(3), rtol=1e-10)
    # the same seed gives the same numbers through the CLI; sf.load reads the folder back
    res2 = CliRunner().invoke(main, [*args[:-1], str(tmp_path / "again")])
    assert res2.exit_code == 0
    np.testing.assert_array_equal(load(tmp_path / "again")["X_final"].values, arr["X_final"].values)


def test_no_paths_png_without_stride_or_for_d_not_3(tmp_path):
    for extra, name in ((["--set", "d=3"], "a"), (["--set", "d=4", "--set", "path_stride=1"], "b")):
        res = CliRunner().invoke(main, ["simulate", *FAST, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        files = {p.name for p in (tmp_path / name).iterdir()}
        assert "summary.png" in files and "paths.png" not in files
    assert "X" not in load(tmp_path / "a")


# --- no lax conversion: a boolean is never a number, a number or a string never a boolean ----------------


def _config_models() -> dict[str, type]:
    from stochformer.experiments.bridge import BridgeConfig
    from stochformer.experiments.chaos import ChaosConfig
    from stochformer.experiments.converge import ConvergeConfig
    from stochformer.experiments.phase import PhaseConfig
    from stochformer.experiments.sweep import SweepConfig
    from stochformer.experiments.sync import SyncConfig

    return {"simulate": RunConfig, "sync": SyncConfig, "converge": ConvergeConfig, "chaos": ChaosConfig, "phase": PhaseConfig,
            "sweep": SweepConfig, "bridge": BridgeConfig}


def _scalar_kinds(ann) -> set:
    """The scalar types (bool, int, float) an annotation holds, at its top or as list entries."""
    from typing import get_args, get_origin

    if ann in (bool, int, float):
        return {ann}
    return set().union(*(_scalar_kinds(a) for a in get_args(ann))) if get_origin(ann) is not None else set()


def _typed_fields(model: type, prefix: str = "") -> list[tuple[str, set]]:
    """Every field of ``model`` (and of its nested configs, by dotted path) holding numbers or booleans."""
    from pydantic import BaseModel

    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _typed_fields(ann, f"{prefix}{name}.")
        elif kinds := _scalar_kinds(ann):
            out.append((prefix + name, kinds))
    return out


@st.composite
def wrong_kind(draw) -> tuple[type, str, str]:
    """A config, one of its fields and a value of a kind the field never holds, as ``--set`` text:
    a boolean (also as a list entry) for a number, a number or a quoted word for a boolean, a
    quoted number for a number."""
    model = draw(st.sampled_from(list(_config_models().values())))
    name, kinds = draw(st.sampled_from(_typed_fields(model)))
    if kinds == {bool}:
        value = draw(st.sampled_from(["0", "1", "2", "0.0", '"true"', '"false"', '"yes"']))
    else:
        number = draw(st.sampled_from(["1", "2", "0.5", "3.0"]))
        flag = draw(st.sampled_from(["true", "false"]))
        value = draw(st.sampled_from([flag, f'"{number}"', f"[{number}, {flag}]", f"[{flag}]"]))
    return model, name, value


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(case=wrong_kind())
def test_no_field_converts_booleans_numbers_and_strings_into_one_another(case) -> None:
    """``seed = true`` is not seed 1, ``mlp = 1`` not true, ``T = "2"`` not 2, ``depths = [2, true]``
    not [2, 1]: for every number or boolean field of every command's config (nested ones by their
    dotted path), a value of another kind is one error naming the field (pydantic's lax mode would
    convert it silently)."""
    model, name, value = case
    with pytest.raises(ConfigError) as exc:
        build_config(None, [f"{name}={value}"], model=model)
    text = str(exc.value)
    assert len(text.splitlines()) == 1 and text.startswith("invalid configuration: ")
    head = text.removeprefix("invalid configuration: ").split(":", 1)[0]
    assert head == name or head.startswith(name + ".") or name.startswith(head + "."), (name, value, text)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(field=st.sampled_from(["beta", "T", "N", "L", "sigma_U"]), base=st.integers(2, 40),
       spelling=st.sampled_from(["int and float", "negative zero"]), others=st.lists(st.integers(41, 60), max_size=3, unique=True))
def test_a_sweep_axis_repeating_a_value_written_differently_is_refused(field: str, base: int, spelling: str,
                                                                        others: list[int]) -> None:
    """An axis listing one value twice is refused naming the axis, however it is written: 4 and
    4.0, 0.0 and -0.0 are one value (two grid points would run the same config twice)."""
    from stochformer.experiments.sweep import SweepConfig

    a, b = (base, float(base)) if spelling == "int and float" else (0.0, -0.0)
    values = [a, *others, b]
    with pytest.raises(ValueError, match=rf"grid\.{field}: repeated values"):
        SweepConfig(grid={field: values})


# --- inputs that are not regular files, or too big --------------------------------------------


def _special_inputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "folder").mkdir()
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(5 << 20)  # sparse: 5 MiB, more than a config may be
    return {"FIFO": fifo, "character device": Path("/dev/zero"), "folder": tmp_path / "folder", "more than": big}


@pytest.mark.parametrize("how", ["config", "sweep-config", "init.path", "load"])
def test_special_or_huge_input_files_are_refused_at_once(tmp_path: Path, monkeypatch, how: str) -> None:
    """In process with a watchdog: each must be refused within seconds (SIGALRM fails a hang)."""
    import stochformer

    monkeypatch.chdir(tmp_path)
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("blocked on an input file")))
    try:
        for kind, path in _special_inputs(tmp_path).items():
            signal.alarm(20)
            if how == "load":
                with pytest.raises((ValueError, FileNotFoundError)) as exc:
                    stochformer.load(path)
                text = str(exc.value)
            else:
                args = {"config": ["simulate", *FAST, "--config", str(path), "--out", "o"],
                        "sweep-config": ["sweep", "--config", str(path), "--out", "o"],
                        "init.path": ["simulate", *FAST, "--set", "init.kind=npy", "--set", f"init.path={path}", "--out", "o"]}[how]
                res = CliRunner().invoke(main, args)
                text = res.output
                assert res.exit_code == 2 and "Traceback" not in text, text
            signal.alarm(0)
            if kind == "more than" and how in ("init.path", "load"):
                assert "cannot read" in text or "more than" in text or "not a" in text, text
            else:
                assert kind in text, (kind, text)
            assert not (tmp_path / "o").exists()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_token_file_larger_than_the_config_implies_is_refused(tmp_path: Path) -> None:
    from stochformer.io.tokens import load_token_array

    path = tmp_path / "x.npy"
    np.save(path, np.ones((4, 3)))
    with open(path, "ab") as fh:
        fh.truncate(path.stat().st_size + (1 << 20))  # 1 MiB of padding after a (4, 3) array
    with pytest.raises(ValueError, match="init.path: .* more than"):
        load_token_array(path, 2, 4, 3)
    np.save(path, np.ones((4, 3)))
    assert load_token_array(path, 2, 4, 3).shape == (4, 3)


# --------------------------------------------------------------------------- --set parsing


@pytest.mark.usefixtures("bounded_address_space")
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


@pytest.mark.usefixtures("bounded_address_space")
@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(length=st.integers(1000, 200_000), where=st.sampled_from(["value", "key"]),
       command=st.sampled_from(["simulate", "sync"]))
def test_long_values_and_keys_are_not_echoed(length: int, where: str, command: str) -> None:
    """A 100 k-character value or field name gives one error line of bounded length."""
    text = "x" * length
    item = f"activation={text}" if where == "value" else f"{text}=3"
    item = item if command == "simulate" or where == "key" else f"model.{item}"
    res = CliRunner().invoke(main, [command, "--quiet", "--set", item, "--out", "unused-out"])
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 2 and len(errors) == 1 and len(res.output) < 3000, res.output[:500]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(N=st.integers(2, 64), beta=st.floats(0.0, 10.0), bom=st.booleans())
def test_a_config_file_with_a_byte_order_mark_reads_as_without(tmp_path_factory, N, beta, bom):
    """A UTF-8 byte-order mark (which some editors write) before a config file is not part of its
    TOML: the file reads as the same config without it."""
    path = tmp_path_factory.mktemp("bom") / "c.toml"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + f"N = {N}\nbeta = {beta!r}\n".encode())
    cfg = build_config(None, [], path)
    assert (cfg.N, cfg.beta) == (N, beta)
