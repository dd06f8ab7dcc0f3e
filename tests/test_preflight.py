"""The pre-flight size check: the memory estimate against measured peaks, and refusals before
any allocation (one line with the estimate, the limit and the field to change): huge sizes of
every command's config drawn by Hypothesis are refused before the experiment function is
entered, and in a child process under a tight address-space limit nothing is allocated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.config import build_config
from stochformer.experiments.preflight import SizeError, check_size, estimate, parse_size

ROOT = Path(__file__).resolve().parents[1]

# (overrides): every noise kind, dense and blocked attention, and what a long run keeps (the recorded
# statistics: many small tensors); peaks 20-400 MB
SIZES = [
    ["N=64", "batch=64", "m=512", "L=2"],
    ["N=256", "batch=64", "m=256", "L=1"],
    ["N=1024", "batch=8", "m=128", "L=1"],
    ["N=4096", "batch=1", "m=64", "L=1"],
    ["N=32", "batch=512", "m=1024", "L=1"],
    ["N=64", "batch=64", "m=1024", "L=1", "noise=mlp"],
    ["dynamics=sde", "noise=exact", "N=128", "batch=64", "L=1"],
    ["dynamics=sde", "noise=random_features", "N=256", "batch=32", "features=2048", "L=1"],
    ["N=4", "batch=64", "m=4", "L=4000", "attention=false"],
]

# Peak resident memory of one run, measured in a child process of its own (a run after another one reuses the
# memory the allocator kept from it, and would look smaller): /proc/self/clear_refs resets the high-water
# mark (VmHWM) after a warm-up run; the peak is VmHWM minus the resident size before the run.
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
overrides = json.loads(sys.argv[1])
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
    rows = []
    for pair in (SIZES[i : i + 2] for i in range(0, len(SIZES), 2)):  # two children at a time
        procs = [subprocess.Popen([sys.executable, "-c", MEASURE, json.dumps(o)], stdout=subprocess.PIPE, text=True, env=env)
                 for o in pair]
        rows += [json.loads(p.communicate(timeout=300)[0]) for p in procs]
        assert all(p.returncode == 0 for p in procs)
    ests = [estimate(build_config(None, row["overrides"])).bytes for row in rows]
    ratios = [est / row["peak"] for est, row in zip(ests, rows, strict=True)]
    report = [f"{' '.join(row['overrides'])}: estimate {est / 2**20:.0f} MiB, measured {row['peak'] / 2**20:.0f} MiB, "
              f"ratio {r:.2f}" for row, est, r in zip(rows, ests, ratios, strict=True)]
    print("\n".join(report))
    bad = [line for line, r in zip(report, ratios, strict=True) if not 0.5 <= r <= 2]
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


GRIDS = {"phase": ("x_values", "y_values", ["model.L=4", "model.T=0.5", "pairs=2"]), "repulsion": ("gammas", "sigmas", ["model.L=400"])}


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
    # values in [0.1, 0.84) and [0, 1): every point of a grid within the limit is a valid config
    sets = [f"{x}={[round(0.1 + i / 4096, 6) for i in range(nx)]}", f"{y}={[round(i % 4096 / 4096, 6) for i in range(ny)]}",
            *extra]
    started = time.perf_counter()
    if nx * ny > MAX_GRID_POINTS:
        with pytest.raises(ConfigError, match=rf"{x}, {y}: {nx * ny} grid points; a grid has at most {MAX_GRID_POINTS}"):
            build_config(None, sets, model=_grid_model(command))
        assert time.perf_counter() - started < 5.0
    else:
        cfg = build_config(None, sets, model=_grid_model(command))
        assert len(getattr(cfg, x)) * len(getattr(cfg, y)) == nx * ny


#: the experiments' configs that have no ``model`` (their sizes are their own fields)
WITHOUT_MODEL = ("SweepConfig", "BridgeConfig", "VariantsConfig", "ClustersConfig", "ScenariosConfig", "TableConfig")


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
            own = cls.__module__ == module.__name__ and issubclass(cls, StrictConfig) and name.endswith("Config")
            if own and ("model" in cls.model_fields or name in WITHOUT_MODEL):
                found.append(cls)
    assert len(found) >= 15 and set(WITHOUT_MODEL) <= {c.__name__ for c in found}, [c.__name__ for c in found]
    for cls in found:
        cfg = cls()
        one, two = estimate(cfg), estimate(cfg, workers=2)
        assert isinstance(one, Estimate) and isinstance(two, Estimate), cls.__name__
        assert math.isfinite(one.bytes) and one.bytes > 0 and math.isfinite(one.seconds) and one.seconds > 0, cls.__name__
        assert two.bytes >= one.bytes, cls.__name__


# --------------------------------------------------------------------------- pre-flight sizes


def _cfg(command: str, overrides: list[str]) -> Any:
    from stochformer.config import build_config
    from stochformer.experiments.bridge import BridgeConfig
    from stochformer.experiments.chaos import ChaosConfig
    from stochformer.experiments.converge import ConvergeConfig
    from stochformer.experiments.joint import JointConfig
    from stochformer.experiments.motions import MotionsConfig
    from stochformer.experiments.paper import ClustersConfig, ScenariosConfig, TableConfig
    from stochformer.experiments.phase import PhaseConfig
    from stochformer.experiments.repulsion import RepulsionConfig
    from stochformer.experiments.sweep import SweepConfig
    from stochformer.experiments.sync import SyncConfig
    from stochformer.experiments.variants import ResampledConfig, VariantsConfig

    models = {"simulate": None, "sync": SyncConfig, "phase": PhaseConfig, "sweep": SweepConfig, "converge": ConvergeConfig,
              "chaos": ChaosConfig, "motions": MotionsConfig, "joint": JointConfig, "repulsion": RepulsionConfig,
              "bridge": BridgeConfig, "resampled": ResampledConfig, "variants": VariantsConfig, "clusters": ClustersConfig,
              "scenarios": ScenariosConfig, "table": TableConfig}
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
    "clusters": ["sizes.N={}", "sizes.batch={}", "sizes.m={}", "sizes.L={L}"],
    "scenarios": ["sizes.N={}", "sizes.batch={}", "sizes.ds=[5,{}]", "sizes.L={L}"],
    "table": ["sizes.draws={}", "sizes.pairs={}", "sizes.energy_pairs={}", "sizes.ds=[5,{}]", "sizes.L={L}"],
}


def _huge(pattern: str, big: int, side: int) -> list[str]:
    """The overrides of ``pattern`` with a huge size ``big`` (``side``: a matrix side, d)."""
    return pattern.format(big, big, s=side, e=4 * side, L=4 * big).split(" ")


@st.composite
def huge_overrides(draw: Any, commands: Any = None) -> tuple[str, list[str]]:
    command = draw(st.sampled_from(sorted(commands or HUGE)))
    pattern = draw(st.sampled_from(HUGE[command]))
    return command, _huge(pattern, draw(st.integers(10**9, 10**12)), draw(st.integers(10**5, 10**7)))


@pytest.mark.usefixtures("bounded_address_space")
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
        return
    with pytest.raises(SizeError, match=r"^size check: this run (needs|would take) about .* reduce "):
        check_size(cfg, max_memory=8 << 30, max_hours=12.0)


CLI_RUNS = {"simulate": "stochformer.experiments.simulate.run_simulate", "sync": "stochformer.experiments.sync.run_sync",
            "phase": "stochformer.experiments.phase.run_phase", "converge": "stochformer.experiments.converge.run_converge",
            "chaos": "stochformer.experiments.chaos.run_chaos", "sweep": "stochformer.experiments.sweep.run_sweep",
            "bridge": "stochformer.experiments.bridge.run_bridge"}


@pytest.mark.usefixtures("bounded_address_space")
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
        res = CliRunner().invoke(main, [command, "--quiet", *sum((["--set", o] for o in overrides), []), "--out", str(out)])
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 2 and len(errors) == 1 and not entered and not out.exists(), res.output
    assert "size check" in errors[0] or "invalid configuration" in errors[0], errors[0]


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
