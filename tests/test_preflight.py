"""The pre-flight size check: the memory estimate against measured peaks, and refusals before
any allocation (one line with the estimate, the limit and the field to change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.config import build_config
from stochformer.experiments.preflight import SizeError, check_size, estimate, parse_size

ROOT = Path(__file__).resolve().parents[1]

# (overrides): every noise kind, dense and blocked attention, one kept-records case; peaks 20-400 MB
SIZES = [
    ["N=64", "batch=64", "m=512", "L=2"],
    ["N=256", "batch=64", "m=256", "L=1"],
    ["N=1024", "batch=8", "m=128", "L=1"],
    ["N=4096", "batch=1", "m=64", "L=1"],
    ["N=32", "batch=512", "m=1024", "L=1"],
    ["N=64", "batch=64", "m=1024", "L=1", "noise=mlp"],
    ["dynamics=sde", "noise=exact", "N=128", "batch=64", "L=1"],
    ["dynamics=sde", "noise=random_features", "N=256", "batch=32", "features=2048", "L=1"],
]

# what a long run keeps (the recorded statistics: many small tensors) is measured in a process of its own
RECORDS = [["N=4", "batch=64", "m=4", "L=4000", "attention=false"]]

# Peak resident memory of each run, measured in one child process per list: /proc/self/clear_refs resets the
# high-water mark (VmHWM) before each run; the peak is VmHWM minus the resident size before it.
MEASURE = r"""
import json, sys, torch
from stochformer.config import build_config
from stochformer.experiments.simulate import run_simulate
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
torch.set_num_threads(1)
run_simulate(build_config(None, ["N=4", "L=2", "batch=2", "m=8"]))  # warm up (libraries, thread pools)
for overrides in json.loads(sys.argv[1]):
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = status("VmRSS:")
    run_simulate(build_config(None, overrides))
    print(json.dumps({"overrides": overrides, "peak": status("VmHWM:") - before}), flush=True)
"""


def _can_reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _can_reset_peak(), reason="needs Linux /proc/self/clear_refs to measure each run's peak")
def test_memory_estimate_within_2x_of_measured_peak() -> None:
    """For each size: 0.5 <= estimate / measured peak RSS <= 2 (quantity: bytes above the resident
    size before the run)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", MEASURE, json.dumps(sizes)], stdout=subprocess.PIPE, text=True, env=env)
             for sizes in (SIZES, RECORDS)]
    rows = [json.loads(line) for p in procs for line in p.communicate(timeout=300)[0].splitlines()]
    assert all(p.returncode == 0 for p in procs) and len(rows) == len(SIZES) + len(RECORDS)
    report = []
    for row in rows:
        est = estimate(build_config(None, row["overrides"])).bytes
        ratio = est / row["peak"]
        report.append(f"{' '.join(row['overrides'])}: estimate {est / 2**20:.0f} MiB, measured {row['peak'] / 2**20:.0f} MiB, "
                      f"ratio {ratio:.2f}")
    print("\n".join(report))
    bad = [r for r, row in zip(report, rows, strict=True) if not 0.5 <= estimate(build_config(None, row["overrides"])).bytes / row["peak"] <= 2]
    assert not bad, "\n".join(report)


@pytest.mark.parametrize("overrides, field", [
    (["N=10000000"], "N"),
    (["L=1000000000"], "L"),
    (["batch=1000000000"], "batch"),
    (["m=1000000000"], "m"),
    (["d=100000000"], "d"),
    (["dynamics=sde", "noise=random_features", "features=1000000000"], "features"),
])
def test_refused_before_allocating(overrides, field, tmp_path) -> None:
    res = CliRunner().invoke(main, ["simulate", "--quiet", "--out", str(tmp_path / "o"), *sum((["--set", o] for o in overrides), [])])
    assert res.exit_code == 2 and "size check" in res.output and field in res.output and "--no-size-check" in res.output
    assert not (tmp_path / "o").exists()


def test_limit_option_and_opt_out(tmp_path) -> None:
    args = ["simulate", "--quiet", "--set", "N=64", "--set", "batch=16", "--set", "L=2", "--set", "m=64"]
    res = CliRunner().invoke(main, [*args, "--max-memory", "1M", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "1 MiB" not in res.output and "0.000977 GiB limit (--max-memory)" in res.output
    res = CliRunner().invoke(main, [*args, "--max-memory", "1M", "--no-size-check", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0 and (tmp_path / "b" / "summary.json").exists()
    res = CliRunner().invoke(main, [*args, "--max-memory", "lots", "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "--max-memory" in res.output


def test_time_limit_and_sizes() -> None:
    from stochformer.experiments.converge import ConvergeConfig

    cfg = build_config(None, ["depths=[1,1000000000]"], model=ConvergeConfig)
    with pytest.raises(SizeError, match="hours .*reduce depths"):
        check_size(cfg)
    assert parse_size("2.5G") == int(2.5 * 2**30) and parse_size("512MiB") == 512 * 2**20
    for bad in ("", "-1G", "nan", "1X"):
        with pytest.raises(ValueError, match="--max-memory"):
            parse_size(bad)


GRIDS = {"phase": ("x_values", "y_values", ["model.L=4", "pairs=2"]), "repulsion": ("gammas", "sigmas", [])}


def _grid_model(command: str) -> type:
    from stochformer.experiments.phase import PhaseConfig
    from stochformer.experiments.repulsion import RepulsionConfig

    return {"phase": PhaseConfig, "repulsion": RepulsionConfig}[command]


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(command=st.sampled_from(list(GRIDS)), nx=st.integers(1, 3000), data=st.data())
def test_a_grid_beyond_the_limit_is_refused_before_its_points_are_built(command: str, nx: int, data) -> None:
    """A two-axis grid (``phase``, ``repulsion``) of more than MAX_GRID_POINTS points is one error
    naming both axes, at once (its points are never built, checked or sized, which for millions of
    points would run for minutes); a grid within the limit is accepted."""
    import time

    from stochformer.config import MAX_GRID_POINTS, ConfigError

    x, y, extra = GRIDS[command]
    ny = data.draw(st.integers(1, 3 * MAX_GRID_POINTS // nx + 3))
    sets = [f"{x}={[round(0.1 + i / 4096, 6) for i in range(nx)]}", f"{y}={[round(i / 4096, 6) for i in range(ny)]}", *extra]
    started = time.perf_counter()
    if nx * ny > MAX_GRID_POINTS:
        with pytest.raises(ConfigError, match=rf"{x}, {y}: {nx * ny} grid points; a grid has at most {MAX_GRID_POINTS}"):
            build_config(None, sets, model=_grid_model(command))
        assert time.perf_counter() - started < 5.0
    else:
        cfg = build_config(None, sets, model=_grid_model(command))
        assert len(getattr(cfg, x)) * len(getattr(cfg, y)) == nx * ny


def test_every_experiment_config_estimates_itself() -> None:
    """Each experiment's config (every ``ExperimentConfig`` and config class of ``experiments/``)
    carries its own ``estimate(workers)``, positive and finite at its defaults, which the size
    check uses; doubling the workers never lowers the memory estimate."""
    import inspect
    import math
    import pkgutil

    import stochformer.experiments as experiments
    from stochformer.config import StrictConfig
    from stochformer.experiments.preflight import Estimate

    found = []
    for info in pkgutil.iter_modules(experiments.__path__):
        module = __import__(f"stochformer.experiments.{info.name}", fromlist=["_"])
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, StrictConfig) and name.endswith("Config") \
                    and "model" in cls.model_fields or name in ("SweepConfig", "BridgeConfig", "VariantsConfig"):
                found.append(cls)
    assert len(found) >= 12, [c.__name__ for c in found]
    for cls in found:
        cfg = cls()
        one, two = estimate(cfg), estimate(cfg, workers=2)
        assert isinstance(one, Estimate) and isinstance(two, Estimate), cls.__name__
        assert math.isfinite(one.bytes) and one.bytes > 0 and math.isfinite(one.seconds) and one.seconds > 0, cls.__name__
        assert two.bytes >= one.bytes, cls.__name__
