"""Two checkouts of stochformer at the sizes of ``bench_transformer.py``, in alternation.

    python benchmarks/bench_versions.py OLD_TREE NEW_TREE            # 7 rounds, both CPU sizes
    python benchmarks/bench_versions.py OLD NEW --rounds 3 --threads 2

Each round runs ``run_simulate`` once per tree and size in a fresh ``python`` (``PYTHONPATH`` the
tree, so each imports its own sources; import time excluded: the run is timed inside the process),
the trees' order alternating from round to round. It prints the median seconds of each tree, the
ratio old/new with the range of the per-round ratios, and whether the final tokens agree (to
1e-12, relative: a change of where the products are computed moves the last bits only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SIZES = [dict(batch=64, N=32, d=16, m=256, L=128), dict(batch=16, N=64, d=64, m=1024, L=64)]
MODEL = dict(T=5.0, beta=1.0, gamma=1.0, activation="relu", sigma_U=0.1, sigma_W=0.1)

CHILD = r"""
import json, sys, time
import numpy as np
from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
size, model, seed, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = RunConfig(**size, **model, seed=seed, record_every=size["L"])
run_simulate(cfg.with_updates(L=2))  # warm-up: thread pools, first allocations
start = time.perf_counter()
res = run_simulate(cfg)
elapsed = time.perf_counter() - start
np.save(out, res.data["X_final"].values)
print(json.dumps({"seconds": elapsed}))
"""


def run(tree: Path, size: dict, seed: int, out: Path, threads: int | None) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(size), json.dumps(MODEL), str(seed), str(out)],
                          env=env, capture_output=True, text=True, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the runs (default: unset)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_versions"))
    parser.add_argument("--quick", action="store_true", help="one tiny size, one round: a smoke test")
    args = parser.parse_args()
    sizes = SIZES
    if args.quick:
        sizes, args.rounds = [dict(batch=2, N=4, d=4, m=16, L=3)], 1
    args.work.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        times: dict[str, list[float]] = {"old": [], "new": []}
        agree = True
        for r in range(args.rounds):
            order = [("old", args.old), ("new", args.new)][:: 1 if r % 2 == 0 else -1]
            for name, tree in order:
                times[name].append(run(tree, size, 1000 + r, args.work / f"{name}.npy", args.threads))
            a, b = np.load(args.work / "old.npy"), np.load(args.work / "new.npy")
            agree &= bool(np.allclose(a, b, rtol=1e-12, atol=1e-12))
        ratios = [o / n for o, n in zip(times["old"], times["new"])]
        print(f"{size}: old {statistics.median(times['old']):.3f} s, new {statistics.median(times['new']):.3f} s, "
              f"old/new median {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}–{max(ratios):.2f}); "
              f"final tokens {'agree to 1e-12' if agree else 'DIFFER'}; {args.rounds} rounds, load "
              f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
