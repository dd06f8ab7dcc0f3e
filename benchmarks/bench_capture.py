"""A captured run (``capture = true``, ``solve(capture=True)``) against the same run uncaptured.

    python benchmarks/bench_capture.py                         # CPU: the traced capture (a check, slower)
    python benchmarks/bench_capture.py --device cuda           # GPU: CUDA graphs
    python benchmarks/bench_capture.py --quick --no-write      # smallest sizes (a smoke test)

At the sizes and with the model of ``bench_transformer.py`` (``SIZES``, ``MODEL``: post-LN,
β = γ = 1, ReLU MLP with σ_U = σ_W = 0.1, T = 5; one record at the end), ``run_simulate`` with ``rng = torch`` and with
``capture = true`` run in alternation, ``--rounds`` times each (seeds 1000…, after a two-layer
warm-up of both); whole runs, a graph's capture included. The captured run's final tokens must be
identical to the uncaptured run's at every round (printed, recorded). Medians, the ratio
uncaptured / captured with its range over the rounds, and the machine go to
``benchmarks/results/bench_capture_<device>.json`` (``--out``); docs/performance.md ("Captured
runs") quotes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transformer import MODEL, QUICK_SIZES, SIZES  # noqa: E402
from checkouts import recorded_command  # noqa: E402
from stochformer.config import RunConfig  # noqa: E402
from stochformer.experiments.simulate import run_simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {"uncaptured (rng torch)": dict(rng="torch"), "captured": dict(capture=True)}


def run(size: dict, device: str, seed: int, extra: dict) -> tuple[float, torch.Tensor]:
    """Wall time of one ``run_simulate`` and its final tokens."""
    cfg = RunConfig(**size, **MODEL, device=device, record_every=size["L"], seed=seed, **extra)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    X = torch.as_tensor(run_simulate(cfg).data["X_final"].values)
    return time.perf_counter() - start, X


def measure(size: dict, device: str, rounds: int) -> dict:
    """Both contenders at one size, in alternation: times, medians, ratio, identical tokens."""
    for extra in CONTENDERS.values():  # warm-up: imports, allocator, the thread pools
        run({**size, "L": 2}, device, 0, extra)
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    identical = []
    for r in range(rounds):
        finals = []
        for name, extra in CONTENDERS.items():
            seconds, X = run(size, device, 1000 + r, extra)
            times[name].append(seconds)
            finals.append(X)
        identical.append(bool(torch.equal(*finals)))
    a, b = CONTENDERS
    ratios = [x / y for x, y in zip(times[a], times[b])]
    return {"size": size, "times_s": times, "median_s": {n: statistics.median(v) for n, v in times.items()},
            "uncaptured_over_captured": {"median": statistics.median(ratios), "range": [min(ratios), max(ratios)]},
            "identical": identical}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smallest size, one round (a smoke test)")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file (default benchmarks/results/bench_capture_<device>.json)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_capture: no CUDA device here; nothing measured")
        return
    load = os.getloadavg()[0]
    results = [measure(size, args.device, 1 if args.quick else args.rounds) for size in (QUICK_SIZES[:1] if args.quick else SIZES)]
    for res in results:
        print(json.dumps({k: res[k] for k in ("size", "median_s", "uncaptured_over_captured", "identical")}))
        if not all(res["identical"]):
            raise SystemExit("bench_capture: the captured run's tokens DIFFER from the uncaptured run's")
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else f"cpu: {platform.machine()}, {os.cpu_count()} cores"
    report = {"benchmark": "bench_capture", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": device, "platform": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "command": recorded_command("benchmarks/bench_capture.py", sys.argv[1:]), "model": MODEL, "load_before": load, "load_after": os.getloadavg()[0],
              "results": results}
    if not args.no_write:
        out = args.out or ROOT / "benchmarks" / "results" / f"bench_capture_{args.device.split(':')[0]}.json"
        out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
