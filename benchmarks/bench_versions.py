"""Two checkouts of stochformer at the sizes of ``bench_transformer.py``, in alternation.

    python benchmarks/bench_versions.py OLD_TREE NEW_TREE            # 7 rounds, both CPU sizes
    python benchmarks/bench_versions.py OLD NEW --rounds 3 --threads 2

Each round runs ``run_simulate`` once per tree and size in a fresh ``python`` (``PYTHONPATH`` the
tree, so each imports its own sources; import time excluded: the run is timed inside the process;
``checkouts.alternate``), the trees' order alternating from round to round. It prints the median seconds of each tree, the
ratio old/new with the range of the per-round ratios, and whether the final tokens agree (to
1e-12, relative: a change of where the products are computed moves the last bits only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkouts import alternate, ratio_summary  # noqa: E402

SIZES = [dict(batch=64, N=32, d=16, m=256, L=128), dict(batch=16, N=64, d=64, m=1024, L=64)]
MODEL = dict(T=5.0, beta=1.0, gamma=1.0, activation="relu", sigma_U=0.1, sigma_W=0.1)


def main() -> None:
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
    env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else None
    for size in sizes:
        res = alternate({"old": args.old, "new": args.new}, {**size, **MODEL, "record_every": size["L"]},
                        [1000 + r for r in range(args.rounds)], args.work, env)
        times = res["seconds"]
        ratio = ratio_summary(times["old"], times["new"])
        print(f"{size}: old {statistics.median(times['old']):.3f} s, new {statistics.median(times['new']):.3f} s, "
              f"old/new median {ratio['median']:.2f} (rounds {ratio['range'][0]:.2f}–{ratio['range'][1]:.2f}); "
              f"final tokens {'agree to 1e-12' if res['tokens_equal'] else 'DIFFER'}; {args.rounds} rounds, load "
              f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
