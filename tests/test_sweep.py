"""Sweeps: parallel task runner (process pool, Dask), Monte Carlo split into tasks with deterministic seeds,
resume after a lost worker or a killed client, and sweep-file validation.

The Dask tests use one real LocalCluster (2 worker processes, 1 thread each) for the module."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.config import ConfigError, RunConfig
from stochformer.experiments.simulate import run_simulate
from stochformer.experiments.sweep import SweepConfig, load_sweep, plan_sweep, run_sweep
from stochformer.io.store import ResultStore
from stochformer.core.runtime import child_seeds
from stochformer.tasks.parallel import parse_scheduler, run_tasks_parallel
from stochformer.tasks import Task, run_tasks

from _sweep_tasks import counted_square, fails_for_five  # light module: imported by the workers

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as c:
        yield c


def small_sweep(model=None, **extra) -> SweepConfig:
    data = {"model": {"N": 6, "d": 3, "L": 8, "T": 2.0, "m": 32, "seed": 7, **(model or {})}, "samples": 5, "samples_per_task": 2,
            "grid": {"gamma": [-1, 1]}, **extra}
    return SweepConfig.model_validate(data)


# ---- results do not depend on the scheduler ---------------------------------------------------


def test_cluster_equals_serial_bit_for_bit(client, tmp_path):
    cfg = small_sweep({"sigma_U": 0.2}, grid={"gamma": [-1, 1], "beta": [0.5, 2.0]})
    serial = run_sweep(cfg)
    on_cluster = run_sweep(cfg, store=tmp_path / "tasks", scheduler=client)
    ds = serial.data
    assert dict(ds["mean_cosine"].sizes) == {"gamma": 2, "beta": 2, "sample": 5, "time": 9}
    assert np.isfinite(ds["energy"].values).all()
    xr.testing.assert_identical(ds, on_cluster.data)  # exact equality of every value
    # every (point, sample) is its own draw: no two samples share their final statistics
    np.testing.assert_array_equal(ds["time"].values, np.arange(9) * 2.0 / 8)  # t = ℓ T/L, T = 2, L = 8
    final = ds["mean_cosine"].isel(time=-1).values.ravel()
    assert len(np.unique(final)) == final.size
    # the NetCDF written by save() reads back identical, with the run record in its attributes
    serial.save(tmp_path / "out")
    with xr.open_dataset(tmp_path / "out" / "dataset.nc") as back:
        xr.testing.assert_identical(serial.to_dataset(), back.load())
        assert json.loads(back.attrs["config"])["samples"] == 5 and back.attrs["command"] == "sweep"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["command"] == "sweep"


def test_a_factory_given_as_model_runs_on_the_cluster_with_the_serial_numbers(client):
    # model=: a module-level factory pickles to the workers (each task keyed by its pickle's hash)
    from stochformer.config.build import make_model

    cfg = small_sweep(grid={"gamma": [-1, 1]})
    on_cluster = run_sweep(cfg, scheduler=client, model=make_model)
    xr.testing.assert_identical(run_sweep(cfg).data, on_cluster.data)
    assert sorted(on_cluster.meta["model"]["runs"]) == ["point00000", "point00001"]


def test_task_seeds_and_points_with_different_depths():
    """Task j of point i is run_simulate() with seed child_seeds(child_seeds(seed, P)[i], C)[j]; the
    time axis (t = ℓ T/L, T = 2) is the union of the points' times, NaN at those a point does not have."""
    cfg = small_sweep(grid={}, samples=3, samples_per_task=2, points=[{"L": 4}, {"L": 6, "record_every": 3}])
    res = run_sweep(cfg)
    ds = res.data
    assert list(ds["time"].values) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert list(ds["L"].values) == [4, 6]
    p_seeds = child_seeds(cfg.model.seed, 2)
    for i, L, rec in ((0, 4, 1), (1, 6, 3)):
        c_seeds = child_seeds(p_seeds[i], 2)
        for j, rows in ((0, slice(0, 2)), (1, slice(2, 3))):
            base = cfg.model.with_updates(L=L, record_every=rec, batch=rows.stop - rows.start, seed=c_seeds[j])
            t = run_simulate(base).data
            got = ds["energy"].isel(point=i, sample=rows).sel(time=t["time"].values).values
            np.testing.assert_array_equal(got, t["energy"].values)
    missing = ds["energy"].isel(point=1).sel(time=[0.5, 1.5]).values
    assert np.isnan(missing).all()
    assert not np.isnan(ds["energy"].isel(point=0).values).any()


# ---- lost worker, killed client ---------------------------------------------------------------


def test_worker_killed_mid_sweep_completes_without_loss_or_duplicates(client, tmp_path):
    log, marker, store = tmp_path / "runs.log", tmp_path / "killed", tmp_path / "tasks"
    tasks = [Task(f"t{x}", counted_square, {"x": x, "log": str(log), "marker": str(marker) if x == 3 else None})
             for x in range(8)]
    results = run_tasks(tasks, store=store, scheduler=client)
    assert marker.exists()  # the worker running task 3 really was killed
    assert results == {f"t{x}": {"x": x, "square": x * x} for x in range(8)}
    runs = [int(s) for s in log.read_text().split()]
    assert set(runs) == set(range(8)) and runs.count(3) >= 2  # task 3 ran again after the kill
    stored = sorted(p.name.split("-")[0] for p in store.glob("t*.json"))
    assert stored == sorted(f"t{x}" for x in range(8))  # each task stored exactly once
    cache = ResultStore(store)
    assert all(cache.load(t.key, t.cache_key) == results[t.key] for t in tasks)


def test_failing_task_raises_with_its_key_and_keeps_finished_results(client, tmp_path):
    tasks = [Task(f"f{x}", fails_for_five, {"x": x, "store": str(tmp_path)}) for x in (5, 1, 2)]
    with pytest.raises(ArithmeticError, match="five") as info:
        run_tasks(tasks, store=tmp_path, scheduler=client)
    assert any("f5" in note for note in getattr(info.value, "__notes__", ["f5"]))
    cache = ResultStore(tmp_path)
    assert [cache.load(t.key, t.cache_key) for t in tasks] == [None, 1, 2]  # finished ones stay stored
    with pytest.raises(ValueError, match="duplicate keys"):
        run_tasks([tasks[1], tasks[1]], scheduler=client)


SWEEP_TOML = """
samples = 12
samples_per_task = 2
[model]
N = 8
L = 200
T = 3.0
m = 32
record_every = 100
seed = 3
[grid]
gamma = [-1, 1]
"""


def test_resume_after_client_killed(client, tmp_path):
    sweep_file, out = tmp_path / "sweep.toml", tmp_path / "out"
    sweep_file.write_text(SWEEP_TOML)
    n_tasks = 2 * 6
    # the client runs in its own process (and session) and is killed mid-sweep; the cluster survives
    cmd = [sys.executable, "-c", "from stochformer.cli import main; main()", "sweep", "--config", str(sweep_file),
           "--out", str(out), "--scheduler", client.scheduler.address, "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(list((out / "tasks").glob("point*.json"))) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no task stored within 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("point*.json")}
    assert 2 <= len(before) < n_tasks, "the client was not killed mid-sweep"
    assert not (out / "dataset.nc").exists()
    assert CliRunner().invoke(main, ["sweep", "--config", str(sweep_file), "--out", str(out)]).exit_code == 2  # needs --resume

    # resumed on the default scheduler (a local process pool): the store does not depend on it
    res = CliRunner().invoke(main, ["sweep", "--config", str(sweep_file), "--out", str(out), "--resume", "--quiet", "--workers", "2"])
    assert res.exit_code == 0, res.output
    after = {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("point*.json")}
    assert len(after) == n_tasks
    assert all(after[name] == t for name, t in before.items())  # no stored task was run again
    assert f"({len(before)} already stored)" in res.output
    reference = run_sweep(load_sweep(sweep_file)).data
    with xr.open_dataset(out / "dataset.nc") as ds:
        xr.testing.assert_equal(reference, ds.load())  # every value and coordinate, exactly
    assert (out / "summary.png").exists()


# ---- GPU resources ----------------------------------------------------------------------------


def test_resource_tasks_run_only_on_workers_that_have_them(client):
    """The documented way to add a GPU worker: ``dask worker ADDRESS --resources GPU=1`` (here
    without a nanny, so that the worker is the process we start and ``os.getpid`` identifies it)."""
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", client.scheduler.address, "--resources", "GPU=1",
           "--nthreads", "1", "--no-nanny", "--no-dashboard"]
    worker = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client.wait_for_workers(3, timeout=60)
        tasks = [Task(f"gpu{k}", os.getpid, {}, {"GPU": 1}) for k in range(4)] + [Task("cpu", os.getpid, {})]
        pids = run_tasks_parallel(tasks, scheduler=client)
        assert {pids[f"gpu{k}"] for k in range(4)} == {worker.pid}
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:  # an older dask worker may linger while closing
            worker.kill()
            worker.wait()
    # a sweep on a CUDA device asks for a GPU; a CPU sweep does not
    assert all(t.resources == {"GPU": 1} for t in plan_sweep(small_sweep({"device": "cuda"})).tasks())
    assert all(t.resources is None for t in plan_sweep(small_sweep()).tasks())


# ---- input validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("Nn = 4\n[grid]\ngamma = [0, 1]", "Nn"),
        ("[grid]\ngama = [0, 1]", "unknown field 'gama'"),
        ("[grid]\ngamma = []", "grid.gamma: empty axis"),
        ("[grid]\ngamma = 1", "grid.gamma"),
        ("[grid]\nN = [4, 'many']", "grid.N[1] = 'many'"),
        ("[grid]\nN = [4, 1]", "grid.N[1] = 1"),
        ("[model]\nbatch = 4\n[grid]\ngamma = [0]", "model.batch: has no effect in sweep"),
        ("[model]\nN = 1", "model.N: must be an integer >= 2"),
        ("[grid]\nbatch = [4]", "'batch' cannot be swept"),
        ("samples = 0", "samples"),
        ("samples_per_task = 'big'", "samples_per_task"),
        ("[grid]\ngamma = [0]\n[[points]]\ngamma = 1", "grid and points both set ['gamma']"),
        ("[[points]]\nN = 2\ninit.kind = 'pair'\n[[points]]\nN = 3\ninit.kind = 'pair'", "init.kind = 'pair' needs N = 2"),
    ],
)
def test_bad_sweep_file_fails_before_any_work(tmp_path, text, message):
    sweep_file, out = tmp_path / "bad.toml", tmp_path / "out"
    sweep_file.write_text(text)
    res = CliRunner().invoke(main, ["sweep", "--config", str(sweep_file), "--out", str(out), "--scheduler", "serial"])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not out.exists()
    with pytest.raises(ConfigError):
        plan_sweep(load_sweep(sweep_file))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grid=st.lists(st.integers(2, 6), min_size=1, max_size=3, unique=True), base_N=st.integers(2, 20), data=st.data())
def test_a_token_file_is_checked_against_every_points_N(tmp_path_factory, grid, base_N, data):
    """``init.path`` of shape (rows, d) in a sweep over N is checked at every point, not against
    the base model's N (which the grid replaces): the sweep plans exactly when every point's N is
    rows, and a refusal names the first grid value that does not fit, before any work."""
    rows = data.draw(st.sampled_from([*grid, 7]))
    folder = tmp_path_factory.mktemp("tokens")
    np.save(folder / "t.npy", np.random.default_rng(0).standard_normal((rows, 3)))
    (folder / "s.toml").write_text(f"samples = 2\nsamples_per_task = 2\n[model]\nN = {base_N}\nL = 2\nm = 4\n[model.init]\n"
                                   f"kind = \"npy\"\npath = \"{folder / 't.npy'}\"\n[grid]\nN = {grid}\n")
    if all(n == rows for n in grid):
        assert [c.N for c in plan_sweep(load_sweep(folder / "s.toml")).configs] == grid
        return
    with pytest.raises(ConfigError) as err:
        plan_sweep(load_sweep(folder / "s.toml"))
    bad = next(k for k, n in enumerate(grid) if n != rows)
    assert f"grid.N[{bad}] = {grid[bad]}: init.path: array has shape ({rows}, 3)" in str(err.value), str(err.value)


@settings(max_examples=30, deadline=None)
@given(workers=st.integers(1, 10**6), samples=st.integers(1, 6), points=st.integers(1, 3))
def test_the_size_check_holds_no_more_tasks_at_once_than_there_are(workers, samples, points):
    """``--workers W`` holds at most min(W, tasks) tasks at once: the estimate for W workers is
    that for min(W, tasks); where the tasks held at once drive the memory, it names --workers."""
    cfg = SweepConfig(samples=samples, samples_per_task=1, model={"L": 2, "N": 3, "m": 4},
                      grid={"beta": [1.0 + k for k in range(points)]})
    held = min(workers, samples * points)
    e, e_held = cfg.estimate(workers), cfg.estimate(held)
    assert (e.bytes, e.memory_fields) == (e_held.bytes, e_held.memory_fields)
    assert e.memory_fields.startswith("--workers") == (held > 1 and not e.memory_fields.startswith("samples")), e.memory_fields


def test_scheduler_strings():
    assert parse_scheduler(None) == ("serial", None)
    assert parse_scheduler("processes:3") == ("processes", 3)
    assert parse_scheduler("local-cluster:2") == ("local-cluster", 2)
    assert parse_scheduler("tcp://10.0.0.1:8786") == ("address", "tcp://10.0.0.1:8786")
    assert parse_scheduler("node7:8786") == ("address", "node7:8786")
    for bad in ("processes:0", "local-cluster:x", "threads", 3):
        with pytest.raises(ValueError, match="scheduler"):
            parse_scheduler(bad)
    res = CliRunner().invoke(main, ["sweep", "--config", str(ROOT / "examples" / "sweep.toml"), "--workers", "2", "--local-cluster", "2"])
    assert res.exit_code == 2 and "give only one way" in res.output


def test_example_sweep_file_loads():
    cfg = load_sweep(ROOT / "examples" / "sweep.toml")
    plan = plan_sweep(cfg)
    n_points = max(len(cfg.points), 1) * math.prod(len(v) for v in cfg.grid.values())
    assert len(plan.configs) == n_points > 1
    assert len(plan.tasks()) == n_points * math.ceil(cfg.samples / cfg.samples_per_task)
    assert isinstance(plan.configs[0], RunConfig)
