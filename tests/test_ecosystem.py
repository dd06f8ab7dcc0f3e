"""How the package sits next to other tools: a light start-up, optional extras with one message
naming them, figures that draw into a caller's axes in any format without switching the backend,
and provenance that records every scientific dependency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.cli.common import FIGURE_FORMATS
from stochformer.core.extras import MissingExtraError, require

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, *, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that imports this checkout of the package."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=300, cwd=ROOT)


def _loaded_after(args: list[str]) -> set[str]:
    """The modules loaded by the CLI with ``args`` in a fresh process (and its exit status 0)."""
    run = _python(f"""
        import sys
        from stochformer.cli import main
        try:
            main({args!r}, standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("MODULES", " ".join(sorted(sys.modules)))
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    line = [x for x in run.stdout.splitlines() if x.startswith("MODULES ")][-1]
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_neither_torch_nor_matplotlib(args):
    loaded = _loaded_after(args)
    assert "click" in loaded  # the probe sees imports
    heavy = {"torch", "matplotlib", "matplotlib.pyplot", "numpy", "pydantic", "xarray", "scipy", "ot", "distributed"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_rates_imports_what_it_uses_only():
    # rates takes its fields like every command (--set, validated by the config), so it loads the config
    loaded = _loaded_after(["rates", "--set", "activation=tanh", "--set", "d=4", "--json"])
    assert "torch" in loaded and "stochformer.model.kernel" in loaded
    unused = {"matplotlib", "matplotlib.pyplot", "xarray", "ot", "distributed"}
    assert not unused & loaded, sorted(unused & loaded)


def test_plotting_import_keeps_the_backend_and_pyplot_unloaded():
    run = _python("""
        import sys, matplotlib
        matplotlib.use("svg")
        import stochformer.plotting, stochformer.plotting.chaos, stochformer.plotting.converge
        import stochformer.plotting.sweep, stochformer.plotting.sync, stochformer.report.registry
        import stochformer.cli
        assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
        assert "matplotlib.pyplot" not in sys.modules
        print("ok")
    """)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]


def test_core_runs_without_the_extras():
    """POT and Dask blocked: the package imports, simulates and computes rates; W₂ says which extra."""
    run = _python("""
        import sys
        sys.modules["ot"] = None; sys.modules["distributed"] = None; sys.modules["dask"] = None
        import pkgutil, importlib, stochformer
        for m in pkgutil.walk_packages(stochformer.__path__, "stochformer."):
            importlib.import_module(m.name)
        from stochformer.config import RunConfig
        from stochformer.experiments.simulate import run_simulate
        from stochformer.model.kernel import NoiseKernel, rates
        run_simulate(RunConfig(N=4, d=3, L=3, batch=2, m=8))
        rates(NoiseKernel("tanh", 4, 0.1, 0.1))
        import numpy as np
        from stochformer.measure.distances import w2_exact
        try:
            w2_exact(np.zeros((2, 3)), np.ones((2, 3)))
        except ImportError as exc:
            print("MESSAGE", exc)
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "stochformer[ot]" in run.stdout and "POT" in run.stdout


def _core_install_check():
    """``tools/check_core_install.py``, the core-install part of CI, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_core_install", ROOT / "tools" / "check_core_install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORE_CHECK = _core_install_check()


@pytest.mark.parametrize("name", [*CORE_CHECK.WORKS, *CORE_CHECK.NEEDS_EXTRA])
def test_the_core_install_checks_invocations_are_valid_configs(tmp_path, monkeypatch, name):
    """Each command the core-install check runs is a valid config (an experiment that refuses its
    config there fails CI after the whole suite has passed, as a new config rule once did)."""
    args = CORE_CHECK.WORKS.get(name) or CORE_CHECK.NEEDS_EXTRA[name][0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep.toml").write_text(CORE_CHECK.SWEEP_TOML)
    res = CliRunner().invoke(main, [*args, "--print-config"] if name != "rates" else args, catch_exceptions=False)
    assert res.exit_code == 0, res.output[-1000:]


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ot", None)  # simulates an environment without POT
    with pytest.raises(MissingExtraError, match=r"extra stochformer\[ot\].*pip install '\.\[ot\]'"):
        require("ot", "exact W₂")
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"stochformer\[cluster\]"):
        require("distributed", "a Dask cluster")


def test_chaos_cli_without_pot_names_the_extra_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ot", None)
    out = tmp_path / "chaos"
    res = CliRunner().invoke(main, ["chaos", "--out", str(out), "--set", "model.N=64", "--set", "sizes=[8,16,32]"])
    assert res.exit_code != 0
    assert "stochformer[ot]" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output  # one line, nothing announced before it
    assert not out.exists() and not (tmp_path / "chaos.tasks").exists()


@pytest.mark.parametrize("args", [["--local-cluster", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_sweep_cli_without_dask_names_the_extra(tmp_path, monkeypatch, args):
    monkeypatch.setitem(sys.modules, "distributed", None)
    out = tmp_path / "sweep"
    res = CliRunner().invoke(main, ["sweep", "--config", str(ROOT / "examples" / "sweep.toml"), "--out", str(out), *args])
    assert res.exit_code == 1, res.output
    assert "stochformer[cluster]" in res.output and not out.exists()
    assert len(res.output.strip().splitlines()) == 1, res.output  # one line, no usage text


def test_figure_formats_match_the_plotting_module():
    from stochformer.plotting import FORMATS

    assert FIGURE_FORMATS == FORMATS


@pytest.mark.parametrize("fmt, magic", [("pdf", b"%PDF"), ("svg", b"<?xml")])
def test_simulate_saves_figures_in_the_chosen_format(tmp_path, fmt, magic):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["simulate", "--quiet", "--out", str(out), "--format", fmt, "--set", "d=3",
                                    "--set", "N=4", "--set", "L=6", "--set", "batch=2", "--set", "m=8",
                                    "--set", "path_stride=2"])
    assert res.exit_code == 0, res.output
    for name in ("summary", "paths"):
        assert (out / f"{name}.{fmt}").read_bytes().startswith(magic)
        assert not (out / f"{name}.png").exists()


def test_format_option_rejects_other_formats(tmp_path):
    res = CliRunner().invoke(main, ["simulate", "--out", str(tmp_path / "x"), "--format", "jpg"])
    assert res.exit_code == 2 and "--format" in res.output and not (tmp_path / "x").exists()


def _summary(L: int = 20) -> dict:
    rng = np.random.default_rng(0)
    layers = np.arange(L + 1)
    energy = np.exp(-0.2 * layers)
    cos = np.tanh(0.1 * layers)
    return {"layers": layers, "energy": energy, "energy_se": energy * rng.uniform(0.2, 0.9, L + 1),
            "mean_cosine": cos, "mean_cosine_se": 0.01 + 0 * cos, "min_cosine": cos - 0.5, "min_cosine_se": 0.02 + 0 * cos}


def test_plot_summary_draws_into_given_axes_with_a_smooth_log_band():
    import matplotlib
    from matplotlib.figure import Figure

    from stochformer.plotting import plot_summary

    fig = Figure()
    axes = fig.subplots(1, 2)
    s = _summary()
    assert plot_summary(s, axes=axes) is fig
    ax = axes[0]
    assert ax.get_yscale() == "log" and len(fig.axes) == 2
    (band,) = ax.collections
    verts = band.get_paths()[0].vertices
    e, se = s["energy"], s["energy_se"]
    lower = np.array([verts[verts[:, 0] == x, 1].min() for x in s["layers"]])
    # the lower edge is the delta-method bound e·exp(−2 SE/e): positive, no floor at e/1000
    assert np.allclose(lower, e * np.exp(-2 * se / e))
    assert np.all(lower > 0)
    assert matplotlib.get_backend()  # unchanged by drawing
    with pytest.raises(ValueError, match="expected 2 matplotlib axes"):
        plot_summary(s, axes=axes[:1])


def test_sphere_paths_fade_the_hidden_hemisphere():
    from matplotlib.figure import Figure

    from stochformer.plotting import plot_sphere_paths
    from stochformer.plotting.core import _view_direction

    v = _view_direction(20.0, -60.0)
    u = np.cross(v, [0.0, 0.0, 1.0])
    u /= np.linalg.norm(u)
    t = np.linspace(0.1, np.pi - 0.1, 50)[:, None]
    near = np.cos(t) * u + np.sin(t) * v  # a half great circle on the near side, unit rows
    paths = np.stack([near, -near], axis=1)[None]  # (batch, n_paths, N = 2, 3): token 1 on the far side
    fig = Figure()
    ax = fig.add_subplot(projection="3d")
    assert plot_sphere_paths(paths, ax=ax, hidden_alpha=0.2) is fig
    lines = ax.get_lines()[-4:]  # (front, back) of token 0, then of token 1: drawn last
    finite = [int(np.isfinite(np.asarray(ln.get_data_3d()[0], float)).sum()) for ln in lines]
    assert finite == [50, 0, 0, 50]
    assert lines[0].get_alpha() is None and lines[3].get_alpha() == 0.2


def test_labels_are_mathtext():
    from stochformer.plotting.core import assign, rate_law, symbol

    assert assign("beta", 4.0) == r"$\beta = 4$"
    assert assign("sigma_W", 0.5) == r"$\sigma_W = 0.5$"
    assert assign("gamma", -1.0) == r"$\gamma = -1$"
    assert assign("activation", "tanh") == "activation = tanh"
    assert symbol("sigma_U") == r"$\sigma_U$"
    assert rate_law("N^-1/2") == "$N^{-1/2}$"
    assert rate_law("N^-1/2 log(1+N)") == r"$N^{-1/2}\,\log(1+N)$"


def test_provenance_records_every_scientific_dependency():
    from stochformer.core.runtime import provenance

    prov = provenance("cpu")
    for name in ("torch", "numpy", "scipy", "xarray", "pydantic", "matplotlib", "h5netcdf", "dask", "pot"):
        assert name in prov
    for name in ("scipy", "xarray", "pydantic", "matplotlib"):
        assert isinstance(prov[name], str) and prov[name][0].isdigit()
    json.dumps(prov)


def test_netcdf_opens_with_the_default_engine(tmp_path):
    import xarray as xr

    from stochformer.io.results import write_dataset as write_netcdf

    ds = xr.Dataset({"x": (("a", "layer"), np.arange(6.0).reshape(2, 3))}, coords={"a": [0.5, 1.0]},
                    attrs={"seed": 3, "sweep_config": json.dumps({"N": 4})})
    write_netcdf(ds, tmp_path / "d.nc")
    with xr.open_dataset(tmp_path / "d.nc") as back:  # no engine= given
        xr.testing.assert_identical(ds, back.load())
