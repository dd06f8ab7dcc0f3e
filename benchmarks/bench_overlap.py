"""Drawing while computing: ``overlap = false`` against ``overlap = true`` (the default), in alternation.

    python benchmarks/bench_overlap.py                     # both sizes of bench_transformer.py, 7 rounds
    taskset -c 0,1 python benchmarks/bench_overlap.py      # on 2 of the machine's cores
    python benchmarks/bench_overlap.py --quick             # small sizes: a smoke test

``run_simulate`` at each size, the two settings one after the other in every round (seeds 1001…,
one warm-up run first); medians of the rounds, and the final tokens of the two settings checked
to be identical bit for bit in every round (overlap changes when the normals are drawn, never
which). Prints one line per size; the numbers are quoted in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transformer import QUICK_SIZES, SIZES, machine, run_config, size_txt  # noqa: E402

from stochformer.experiments.simulate import run_simulate  # noqa: E402


def compare(size: dict, rounds: int) -> tuple[float, float]:
    """Median seconds of ``run_simulate`` with overlap off and on, in alternation, at ``size``."""
    run_simulate(run_config(size, "cpu", 1).with_updates(L=min(4, size["L"])))
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds):
        finals = {}
        for overlap in (False, True):
            start = time.perf_counter()
            res = run_simulate(run_config(size, "cpu", 1001 + r, overlap=overlap))
            times[overlap].append(time.perf_counter() - start)
            finals[overlap] = res.data["X_final"].values
            time.sleep(0.05)  # let the previous run's spinning threads go idle
        if not (finals[False] == finals[True]).all():
            raise SystemExit(f"{size_txt(size)}: overlap changed the numbers in round {r}")
    return statistics.median(times[False]), statistics.median(times[True])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    print(f"{machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}; medians of {rounds} rounds")
    for size in QUICK_SIZES if args.quick else SIZES:
        off, on = compare(size, rounds)
        print(f"{size_txt(size)}: overlap off {off:.3f} s, on {on:.3f} s ({off / on:.2f}×); the same numbers")


if __name__ == "__main__":
    main()
