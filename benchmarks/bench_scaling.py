"""How the CPU path scales with cores: the discrete model on 1, 2, 4, … threads, and a sweep on a
local Dask cluster of many workers against one worker.

    python benchmarks/bench_scaling.py --out DIR            # DIR/bench_scaling.{md,json}
    python benchmarks/bench_scaling.py --out DIR --quick    # small sizes: a smoke test

Threads: ``run_simulate`` at the two sizes of ``bench_transformer.py`` (median of ``--repeats``
runs after a warm-up) with ``torch.set_num_threads(k)``, k = 1, 2, 4, … up to the cores present.
Sweep: 64 tasks (2 grid points × 32 tasks of 8 samples; N = 32, d = 8, L = 200), on an already
running ``LocalCluster`` of one worker and of one worker per core (one thread each); both
datasets are checked to be identical to a serial run's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transformer import QUICK_SIZES, SIZES, machine, run_config, run_ours, size_txt, timed  # noqa: E402

from stochformer.experiments.sweep import SweepConfig, run_sweep  # noqa: E402


def thread_counts() -> list[int]:
    cores = os.cpu_count() or 1
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return counts + ([cores] if counts[-1] != cores else [])


def threads_part(sizes: list[dict], repeats: int) -> list[dict]:
    rows, cpu = [], torch.device("cpu")
    for size in sizes:
        run_ours(run_config(size, "cpu", 0).with_updates(L=2))  # warm-up
        for k in thread_counts():
            torch.set_num_threads(k)
            t = statistics.median(timed(lambda: run_ours(run_config(size, "cpu", 1000 + r)), cpu)[1] for r in range(repeats))
            rows.append({"size": size, "threads": k, "median_s": t, "per_layer_ms": 1e3 * t / size["L"]})
            print(json.dumps(rows[-1]), flush=True)
    torch.set_num_threads(os.cpu_count() or 1)
    return rows


def sweep_config(L: int, tasks: int) -> SweepConfig:
    return SweepConfig.model_validate(
        {"model": {"N": 32, "d": 8, "L": L, "T": 5.0, "m": 64, "record_every": 10, "seed": 1},
         "samples": 4 * tasks, "samples_per_task": 8, "grid": {"gamma": [-1, 1]}})


def dask_part(L: int, tasks: int) -> dict:
    from distributed import Client, LocalCluster

    cfg = sweep_config(L, tasks)
    start = time.perf_counter()
    serial = run_sweep(cfg)
    out = {"tasks": tasks, "L": L, "serial_s": time.perf_counter() - start, "clusters": []}
    for workers in sorted({1, os.cpu_count() or 1}):
        start = time.perf_counter()
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            started = time.perf_counter() - start
            run_sweep(sweep_config(1, 1), scheduler=client)  # warm-up: every worker imports the package
            client.run(lambda: None)
            start = time.perf_counter()
            res = run_sweep(cfg, scheduler=client)
            wall = time.perf_counter() - start
        xr.testing.assert_identical(serial.data, res.data)
        out["clusters"].append({"workers": workers, "start_s": started, "wall_s": wall})
        print(json.dumps(out["clusters"][-1]), flush=True)
    return out


def markdown(rep: dict) -> str:
    lines = [f"`{rep['command']}` on {rep['machine']}, torch {rep['torch']}, {rep['date']}.", "",
             "Discrete model (`run_simulate`, float64, defaults of `bench_transformer.py`), median wall time per run:", "",
             "| size | threads | time (s) | per layer (ms) | speed-up over 1 thread |", "| --- | ---: | ---: | ---: | ---: |"]
    one = {size_txt(r["size"]): r["median_s"] for r in rep["threads"] if r["threads"] == 1}
    for r in rep["threads"]:
        s = size_txt(r["size"])
        lines.append(f"| {s} | {r['threads']} | {r['median_s']:.3f} | {r['per_layer_ms']:.2f} | {one[s] / r['median_s']:.2f} |")
    d = rep["dask"]
    lines += ["", f"Sweep of {d['tasks']} tasks (N = 32, d = 8, L = {d['L']}, 8 samples each) on a running `LocalCluster` "
                  f"(one thread per worker); serial in-process: {d['serial_s']:.2f} s. Datasets identical to the serial one.", "",
              "| workers | cluster start (s) | sweep wall time (s) | speed-up over one worker |", "| ---: | ---: | ---: | ---: |"]
    base = d["clusters"][0]["wall_s"]
    lines += [f"| {c['workers']} | {c['start_s']:.1f} | {c['wall_s']:.2f} | {base / c['wall_s']:.2f} |" for c in d["clusters"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="write bench_scaling.{md,json} here")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, a short sweep: a smoke test")
    args = parser.parse_args()
    started = time.time()
    rep = {"command": "python benchmarks/bench_scaling.py " + " ".join(sys.argv[1:]), "machine": machine(),
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
           "threads": threads_part(QUICK_SIZES if args.quick else SIZES, 1 if args.quick else args.repeats)}
    rep["dask"] = dask_part(L=5 if args.quick else 200, tasks=8 if args.quick else 64)
    rep["wall_s"] = time.time() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_scaling.json").write_text(json.dumps(rep, indent=1))
    text = markdown(rep)
    (args.out / "bench_scaling.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
