"""Sweep benchmark: speed-up of a 2-worker Dask LocalCluster (and a 2-process pool) over one
process on a 16-task sweep, and the per-task overhead of each scheduler.

    python benchmarks/bench_sweep.py            # writes the "Sweeps" section of docs/benchmarks.md
    python benchmarks/bench_sweep.py --no-write # prints only

Every parallel run's dataset is checked to be identical to the serial one.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import xarray as xr

from docsection import publish
from stochformer.experiments.sweep import SweepConfig, run_sweep
from stochformer.tasks.parallel import run_tasks_parallel
from stochformer.tasks import Task

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Sweeps"


def sweep_config(L: int) -> SweepConfig:
    """16 tasks: 2 grid points x 8 tasks of 8 samples, N = 32 tokens, d = 8, L layers."""
    return SweepConfig.model_validate(
        {"model": {"N": 32, "d": 8, "L": L, "T": 5.0, "m": 64, "record_every": 10, "seed": 1}, "samples": 64, "samples_per_task": 8,
         "grid": {"gamma": [-1, 1]}}
    )


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def trivial_tasks(n: int, tag: str) -> list[Task]:
    return [Task(f"{tag}{i}", dict, {"i": i}) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--L", type=int, default=200, help="layers per task (sets the task size)")
    parser.add_argument("--no-write", action="store_true", help="do not edit docs/benchmarks.md")
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    cfg = sweep_config(args.L)
    load_before = os.getloadavg()
    serial, t_serial = timed(run_sweep, cfg)
    cold, t_cold = timed(run_sweep, cfg, scheduler="local-cluster:2")  # starts and closes its cluster
    pool, t_pool = timed(run_sweep, cfg, scheduler="processes:2")  # spawns its 2 processes
    cluster, t_start = timed(LocalCluster, n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client:
        # warm-up: both workers import the package and run one small task
        run_sweep(sweep_config(1).model_copy(update={"samples": 8, "samples_per_task": 8}), scheduler=client)
        warm, t_warm = timed(run_sweep, cfg, scheduler=client)
        _, t_trivial = timed(run_tasks_parallel, trivial_tasks(16, "t"), scheduler=client)
    _, t_trivial_pool = timed(run_tasks_parallel, trivial_tasks(16, "p"), scheduler="processes:2")
    load_after = os.getloadavg()
    for other in (cold, pool, warm):
        xr.testing.assert_identical(serial.data, other.data)
    task_s = t_serial / 16
    # compute time measured inside each task: equal in serial and parallel runs on an idle machine
    inner = {name: r.meta["task_compute_s"] / 16 for name, r in (("serial", serial), ("warm", warm))}

    rows = [
        ("one process (serial, in-process)", t_serial, 1.0),
        ("LocalCluster, 2 workers, started for the sweep (`--local-cluster 2`)", t_cold, t_serial / t_cold),
        ("process pool, 2 processes, spawned for the sweep (`--workers 2`)", t_pool, t_serial / t_pool),
        ("LocalCluster, 2 workers, already running (`--scheduler ADDRESS`)", t_warm, t_serial / t_warm),
    ]
    lines = [
        SECTION,
        "",
        f"`python benchmarks/bench_sweep.py --L {args.L}` on {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (the machine is shared: other jobs were running).",
        "",
        f"Sweep of 16 tasks (2 grid points x 8 tasks of 8 samples; N = 32, d = 8, L = {args.L}); "
        f"one task takes {task_s:.2f} s serially. All four datasets are identical (bit for bit).",
        "",
        "| scheduler | wall time (s) | speed-up over one process |",
        "| --- | ---: | ---: |",
        *[f"| {name} | {t:.2f} | {s:.2f} |" for name, t, s in rows],
        "",
        f"LocalCluster start-up (2 workers): {t_start:.2f} s. Compute time measured inside each task: "
        f"{inner['serial']:.2f} s serially, {inner['warm']:.2f} s in the 2 concurrent workers of the running "
        "cluster (equal on an idle machine; larger means the 2 workers did not get 2 free cores).",
        "",
        "Per-task overhead (16 trivial tasks, wall time / 16): "
        f"running LocalCluster {1e3 * t_trivial / 16:.1f} ms/task; "
        f"process pool including its spawn {1e3 * t_trivial_pool / 16:.1f} ms/task.",
        "",
    ]
    text = "\n".join(lines)
    publish(DOC, SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
