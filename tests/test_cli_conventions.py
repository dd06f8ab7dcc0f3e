"""Conventions of the command line and the package: unknown fields with the closest valid names,
strict types from TOML files, ``--print-config``, full command summaries, ``--out DIR``, what
``rates`` reads and writes, ``[model]`` files for ``simulate``, the ``stochformer`` logger and
progress bars only where they can be read, and the version written in one place.

Every command runs through click (``CliRunner``) at the smallest sizes, or stops at ``--print-config``."""

from __future__ import annotations

import io
import json
import re
import string
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.cli.rates import RATES_FIELDS
from stochformer.config import ConfigError, InitConfig, RunConfig, build_config, dump_config, tomllib
from stochformer.core import progress
from stochformer.core.version import __version__
from stochformer.experiments.sync import SyncConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--set", "L=2", "--set", "N=2", "--set", "batch=1", "--set", "m=2", "--set", "d=3"]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


# --- an unknown field: one error naming it and the closest valid names --------------------------------


def _typo(draw, name: str) -> str:
    """``name`` with one letter dropped, added, changed or two neighbours swapped (not a valid name)."""
    i = draw(st.integers(0, len(name) - 1))
    letter = draw(st.sampled_from(string.ascii_lowercase))
    kind = draw(st.sampled_from(["drop", "add", "change", "swap"] if i < len(name) - 1 else ["drop", "add", "change"]))
    if kind == "drop":
        return name[:i] + name[i + 1:]
    if kind == "add":
        return name[:i] + letter + name[i:]
    if kind == "change":
        return name[:i] + letter + name[i + 1:]
    return name[:i] + name[i + 1] + name[i] + name[i + 2:]


LONG_FIELDS = sorted(n for n in RunConfig.model_fields if len(n) >= 4)
VALID = set(RunConfig.model_fields) | {n.lower() for n in RunConfig.model_fields}


@st.composite
def typos(draw, fields=LONG_FIELDS):
    name = draw(st.sampled_from(fields))
    typo = _typo(draw, name)
    if typo in VALID or typo.lower() in VALID:
        typo = name + "xx"
    return name, typo


def _suggested(msg: str, field: str) -> list[str]:
    m = re.search(rf"{re.escape(field)}: unknown field.*?; did you mean (.+)\?$", msg)
    assert m, msg
    return m.group(1).split(" or ")


@PROPERTY
@given(pair=typos())
def test_a_typo_in_set_names_the_closest_field(pair):
    """``--set TYPO=1`` (one letter off a field of 4 or more letters): exit 2, one error naming the
    typo and suggesting the field meant, never the list of all fields."""
    name, typo = pair
    res = invoke("simulate", "--print-config", "--set", f"{typo}=1")
    assert res.exit_code == 2, res.output
    msg = res.output.strip().splitlines()[-1]
    assert msg.startswith(f"Error: invalid configuration: {typo}: unknown field")
    assert name in _suggested(msg, typo) and "valid fields are" not in msg


@PROPERTY
@given(pair=typos(), value=st.sampled_from(["1", '"relu"', "true", "[1, 2]"]))
def test_a_typo_in_a_toml_file_names_the_closest_field(tmp_path, pair, value):
    """The same from a TOML file, at the top level and in ``[init]`` (suggested with its dotted path)."""
    name, typo = pair
    path = tmp_path / "run.toml"
    path.write_text(f"{typo} = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        build_config(None, None, path)
    assert name in _suggested(str(exc.value), typo)
    init_name = sorted(n for n in InitConfig.model_fields if len(n) >= 4)[0]  # "center"
    path.write_text(f"[init]\n{init_name[:-1]} = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        build_config(None, None, path)
    assert f"init.{init_name}" in _suggested(str(exc.value), f"init.{init_name[:-1]}")


def test_typo_suggestions_cover_case_and_nesting():
    """A field named in the wrong case, a model field given to an experiment at the top level, a
    model field misspelt inside ``model``; nothing close: the list of valid fields instead."""
    for overrides, model, field, meant in ((["n=4"], RunConfig, "n", "N"), (["sigma_u=0.1"], RunConfig, "sigma_u", "sigma_U"),
                                           (["N=4"], SyncConfig, "N", "model.N"),
                                           (["model.activaton=relu"], SyncConfig, "model.activaton", "model.activation")):
        with pytest.raises(ConfigError) as exc:
            build_config(None, overrides, model=model)
        assert meant in _suggested(str(exc.value), field), exc.value
    with pytest.raises(ConfigError, match=r"zzzz: unknown field \(got 1\); valid fields are N, d, L"):
        build_config(None, ["zzzz=1"])


# --- strict types for values from TOML files ---------------------------------------------------------------

INT_FIELDS = [n for n, f in RunConfig.model_fields.items() if f.annotation is int]
FLOAT_FIELDS = [n for n, f in RunConfig.model_fields.items() if f.annotation is float]
BOOL_FIELDS = [n for n, f in RunConfig.model_fields.items() if f.annotation is bool]
NUMBERS = st.one_of(st.integers(-5, 100), st.floats(-5, 100, allow_nan=False))


@st.composite
def wrong_types(draw):
    """(field, TOML text of a value of the wrong type): a number written as a string, a boolean
    for a number, a fraction for an integer, a number or a string for a boolean."""
    kind = draw(st.sampled_from(["int", "float", "bool"]))
    if kind == "int":
        field = draw(st.sampled_from(INT_FIELDS))
        value = draw(st.one_of(NUMBERS.map(lambda v: json.dumps(str(v))), st.booleans().map(lambda b: str(b).lower()),
                               st.floats(2.5, 50.5).filter(lambda v: v != int(v)).map(repr), st.just("16.0")))
    elif kind == "float":
        field = draw(st.sampled_from(FLOAT_FIELDS))
        value = draw(st.one_of(NUMBERS.map(lambda v: json.dumps(str(v))), st.booleans().map(lambda b: str(b).lower())))
    else:
        field = draw(st.sampled_from(BOOL_FIELDS))
        value = draw(st.one_of(st.integers(0, 1).map(str), st.sampled_from(['"true"', '"false"', '"yes"'])))
    return field, value


@PROPERTY
@given(case=wrong_types())
def test_a_toml_value_of_the_wrong_type_is_one_error_naming_the_field(tmp_path, case):
    """``N = "16"`` is not the integer 16: one error, naming the field and what it must be."""
    field, value = case
    path = tmp_path / "run.toml"
    path.write_text(f"{field} = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        build_config(None, None, path)
    msg = str(exc.value)
    assert msg.startswith(f"invalid configuration: {field}: must be ") and "; " not in msg, msg


@PROPERTY
@given(N=st.integers(2, 10**6), T=st.floats(1e-6, 1e6), mlp=st.booleans())
def test_set_values_parse_as_literals(N, T, mlp):
    """``--set`` values are TOML/JSON literals: ``N=16`` an integer, ``T=5`` a number, ``mlp=false``
    a boolean, a bare word a string; a quoted number is a string, refused where a number is meant."""
    cfg = build_config(None, [f"N={N}", f"T={T!r}", f"mlp={str(mlp).lower()}", "activation=tanh"])
    assert (cfg.N, cfg.T, cfg.mlp, cfg.activation) == (N, T, mlp, "tanh")
    with pytest.raises(ConfigError, match=r"^invalid configuration: N: must be an integer >= 2 \(got '\d+'\)$"):
        build_config(None, [f'N="{N}"'])


# --- --print-config ------------------------------------------------------------------------------------------


@PROPERTY
@given(N=st.integers(2, 512), T=st.floats(1e-3, 1e3), gamma=st.sampled_from(["0.5", "repulsive", "-2"]),
       activation=st.sampled_from(["relu", "tanh", "gelu"]))
def test_print_config_round_trips_and_writes_nothing(tmp_path, N, T, gamma, activation):
    """``--print-config`` prints the resolved config and exits 0 without checking or creating the
    output folder; the TOML it prints, read back with ``--config``, is the same config; the JSON is
    the config's fields."""
    out = tmp_path / "never"
    fields = [f"N={N}", f"T={T!r}", f"gamma={gamma}", f"activation={activation}"]
    args = [x for f in fields for x in ("--set", f)]
    res = invoke("simulate", *args, "--print-config", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert not out.exists()
    (tmp_path / "printed.toml").write_text(res.output, encoding="utf-8")
    cfg = build_config(None, fields)
    assert build_config(None, None, tmp_path / "printed.toml") == cfg
    again = invoke("simulate", "--config", str(tmp_path / "printed.toml"), "--print-config")
    assert again.exit_code == 0 and again.output == res.output
    as_json = invoke("simulate", *args, "--print-config", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.output) == cfg.model_dump(mode="json")


def test_print_config_of_experiments_sweep_reproduce_and_rates(tmp_path):
    """Every kind of command prints what it would run: an experiment its whole config (``[model]``
    included), the sweep its file, the report one table per section, rates only what it reads;
    an invalid config is the usual error, not a printout."""
    res = invoke("sync", "--set", "model.N=2", "--set", "pairs=8", "--print-config")
    assert res.exit_code == 0, res.output
    assert build_config(None, None, _write(tmp_path / "s.toml", res.output), model=SyncConfig) == \
        build_config(None, ["model.N=2", "pairs=8"], model=SyncConfig)
    sweep = _write(tmp_path / "sweep.toml", "samples = 2\nsamples_per_task = 1\n[model]\nL = 2\nN = 2\nm = 2\n"
                                            "[grid]\ngamma = [0.0, 1.0]\n")
    res = invoke("sweep", "--config", str(sweep), "--print-config", "json", "--out", str(tmp_path / "no"))
    assert res.exit_code == 0 and json.loads(res.output)["grid"] == {"gamma": [0.0, 1.0]} and not (tmp_path / "no").exists()
    res = invoke("reproduce", "--only", "sync", "--print-config", "--out", str(tmp_path / "report"))
    assert res.exit_code == 0 and tomllib.loads(res.output).keys() == {"sync"} and not (tmp_path / "report").exists()
    res = invoke("rates", "--set", "d=5", "--print-config", "json")
    assert res.exit_code == 0 and json.loads(res.output) == {**{f: getattr(RunConfig(), f) for f in RATES_FIELDS},
                                                             "d": 5, "gamma": 0.0}
    bad = invoke("simulate", "--set", "N=1", "--print-config")
    assert bad.exit_code == 2 and "N: must be an integer >= 2" in bad.output


def test_dump_config_writes_none_as_a_comment_and_nested_tables():
    text = dump_config(RunConfig(Q=[[1.0, 0.0], [0.0, 1.0]], d=2))
    assert "# path_stride: not set" in text and "Q = [[1.0, 0.0], [0.0, 1.0]]" in text and "\n[init]\n" in text
    with pytest.raises(ValueError, match="format: must be 'toml' or 'json'"):
        dump_config(RunConfig(), "yaml")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- help: full summaries, --out DIR ---------------------------------------------------------------------------


def test_main_help_shows_every_command_summary_in_full():
    """``stochformer --help`` lists each command with its whole one-line summary (wrapped, never cut
    with "..."), at the default width of 80 columns."""
    res = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert res.exit_code == 0
    listing = res.output.split("Commands:", 1)[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    for name, cmd in main.commands.items():
        assert cmd.short_help and len(cmd.short_help) <= 120 and "\n" not in cmd.short_help, name
        assert f"{name} {cmd.short_help}" in flat, name


def test_out_reads_dir_and_logging_options_everywhere():
    for name, cmd in main.commands.items():
        opts = {p.name: p for p in cmd.params}
        if "out" in opts:
            assert opts["out"].metavar == "DIR", name
            text = invoke(name, "--help").output
            assert "--out DIR" in text and "--out TEXT" not in text, name
            assert {"quiet", "verbose", "force_progress", "print_config"} <= set(opts), name
        assert "print_config" in opts, name


# --- rates: fields it reads, keys that say what they are ----------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(command=st.sampled_from(["rates", "pair"]), data=st.data())
def test_rates_and_pair_refuse_a_field_they_do_not_read(command, data):
    """Any field ``rates`` or ``pair`` does not read, set to its default or not, is one usage error
    naming it (never silently ignored)."""
    from stochformer.cli.pair import PAIR_FIELDS

    read = RATES_FIELDS if command == "rates" else PAIR_FIELDS
    field = data.draw(st.sampled_from(sorted(set(RunConfig.model_fields) - set(read) - {"init", "Q", "K", "V", "device",
                                                                                         "sinkhorn_tol", "path_stride"})))
    default = RunConfig.model_fields[field].get_default(call_default_factory=True)
    res = invoke(command, "--set", f"{field}={json.dumps(default)}")
    assert res.exit_code == 2, res.output
    assert f"invalid configuration: {field}: has no effect in {command}, which reads only activation, d," in res.output


def test_rates_names_its_keys_and_reads_model_files(tmp_path):
    res = invoke("rates", "--set", "energy_beta=2.5", "--set", "d=4", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["energy_beta"] == 2.5 and "beta" not in out and out["gamma"] == 0.0
    two = invoke("rates", "--set", "L=3", "--set", "beta=2", "--set", "init.kind=cluster")
    assert two.exit_code == 2 and "L, beta, init: have no effect in rates" in two.output and "energy_beta" in two.output
    model_file = _write(tmp_path / "m.toml", "[model]\nd = 4\nenergy_beta = 2.5\n")
    assert json.loads(invoke("rates", "--config", str(model_file), "--json").output) == out


# --- simulate takes an experiment's [model] file ------------------------------------------------------------


def test_simulate_accepts_a_model_table(tmp_path):
    """``simulate --config`` reads a file whose fields are in ``[model]`` (as every experiment's
    file is) like the same fields at the top level; one field in both places is an error."""
    nested = _write(tmp_path / "nested.toml", "[model]\nN = 5\nT = 2.0\n[model.init]\nkind = \"cluster\"\n")
    flat = _write(tmp_path / "flat.toml", "N = 5\nT = 2.0\n[init]\nkind = \"cluster\"\n")
    a = invoke("simulate", "--config", str(nested), "--print-config")
    b = invoke("simulate", "--config", str(flat), "--print-config")
    assert a.exit_code == 0 and a.output == b.output and "N = 5" in a.output
    dotted, plain = invoke("simulate", "--set", "model.d=4", "--print-config"), invoke("simulate", "--set", "d=4", "--print-config")
    assert dotted.exit_code == 0 and dotted.output == plain.output and "d = 4" in plain.output
    both = invoke("simulate", "--config", str(nested), "--set", "N=6", "--print-config")
    assert both.exit_code == 2 and "N: given both at the top level and in [model]" in both.output
    extra = _write(tmp_path / "sync.toml", "pairs = 8\n[model]\nN = 2\n")
    res = invoke("simulate", "--config", str(extra), "--print-config")
    assert res.exit_code == 2 and "pairs: unknown field" in res.output


# --- logging and progress bars ------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("mode,env,on_terminal,on_file", [
    (None, None, True, False), ("always", None, True, True), ("never", None, False, False),
    (None, "always", True, True), (None, "never", False, False), (None, "bogus", True, False),
])
def test_bars_are_drawn_only_where_they_can_be_read(monkeypatch, mode, env, on_terminal, on_file):
    """A bar asked for is drawn on a terminal, not into a file (its ``\\r`` frames would fill a log),
    unless forced; a bar not asked for is never drawn (outside a Jupyter kernel, which draws them)."""
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    if env is None:
        monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    else:
        monkeypatch.setenv(progress.PROGRESS_ENV, env)
    progress.set_progress(mode)
    try:
        for stream_type, expected in ((_Terminal, on_terminal), (io.StringIO, on_file)):
            stream = stream_type()
            for _ in progress.tqdm(range(3), file=stream, mininterval=0):
                pass
            assert ("\r" in stream.getvalue()) is expected, (stream_type, stream.getvalue())
            stream = stream_type()
            list(progress.tqdm(range(3), file=stream, disable=True))
            assert stream.getvalue() == ""
    finally:
        progress.set_progress(None)
    with pytest.raises(ValueError, match="progress: must be one of auto, always, never"):
        progress.set_progress("sometimes")  # type: ignore[arg-type]


def test_simulate_log_has_no_bar_frames_unless_forced(tmp_path, monkeypatch):
    """A tiny simulate with its output captured (not a terminal): no ``\\r`` frames; ``--progress``
    draws them; ``--verbose`` logs the resolved config at DEBUG through the ``stochformer`` logger;
    ``--quiet`` leaves only the results; ``--quiet --verbose`` is refused."""
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    plain = invoke("simulate", *TINY, "--out", str(tmp_path / "a"), "--no-size-check")
    assert plain.exit_code == 0, plain.output
    assert "\r" not in plain.output and "INFO: simulate: writing to" in plain.output and "DEBUG" not in plain.output
    forced = invoke("simulate", *TINY, "--out", str(tmp_path / "b"), "--no-size-check", "--progress", "--verbose")
    assert forced.exit_code == 0, forced.output
    assert "\r" in forced.output and "DEBUG: simulate: configuration {" in forced.output
    quiet = invoke("simulate", *TINY, "--out", str(tmp_path / "c"), "--no-size-check", "--quiet")
    assert quiet.exit_code == 0 and "INFO" not in quiet.output and "results in" in quiet.output
    both = invoke("simulate", *TINY, "--out", str(tmp_path / "d"), "--quiet", "--verbose")
    assert both.exit_code == 2 and "--quiet and --verbose: choose one" in both.output and not (tmp_path / "d").exists()
    assert progress.progress_mode() == "auto"  # --progress held for its command only


def test_logger_is_the_package_logger():
    assert progress.logger.name == "stochformer" and progress.get_logger("x").name == "stochformer.x"
    assert progress.get_logger("stochformer.cli").parent is progress.logger


# --- the version in one place; package metadata ----------------------------------------------------------------


def test_version_is_written_once_and_cited_honestly():
    """pyproject.toml reads the version from ``stochformer.core.version`` (no second copy);
    CITATION.cff repeats it and cites the paper without an invented DOI; the project's links exist."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = meta["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "stochformer.core.version.__version__"}
    assert {"Documentation", "Source", "Issues", "Paper"} <= set(project["urls"])
    assert project["keywords"] and project["classifiers"]
    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^version: (\S+)$", cff, re.M).group(1) == __version__
    assert "preferred-citation:" in cff and "arXiv:2604.26898" in cff and "doi" not in cff.lower()
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_rates_reads_exactly_the_kernels_fields():
    """``rates`` accepts the activation, the fields ``make_kernel`` reads, energy_beta and gamma: no more, no fewer."""
    from stochformer.config.build import KERNEL_FIELDS

    assert sorted(RATES_FIELDS) == sorted(["activation", *KERNEL_FIELDS, "energy_beta", "gamma"])
