"""The random-feature field's two products with the tokens last (the library's layout) against the
same products with the tokens first (the obvious batched code), on the CPU, one and two threads.

    python benchmarks/bench_field_layout.py                     # B = 128, N = 64, d = 8, M = 1024
    python benchmarks/bench_field_layout.py --quick --no-write  # smallest sizes (a smoke test)

Per block of samples (``noise.FEATURE_BLOCK`` entries of features, as ``RandomFeatureField.increment``
takes them), with the weights W = [u/√d; b] (F, d + 1, M), the normals Z (F, M, d) and the tokens
with a column of ones A = [x, 1] (F, n, d + 1), both layouts compute ΔW = relu(A W) Z, into buffers
kept across calls:

- tokens last (``RandomFeatureField._features_t``): Φᵀ = relu(Wᵀ Aᵀ) (F, M, n), then ΔWᵀ = Zᵀ Φᵀ;
- tokens first: Φ = relu(A W) (F, n, M), then ΔW = Φ Z.

Rounds alternate the two (the order flips every round); a round times ``--calls`` calls of each.
The two results must agree to rounding (checked, recorded). Minima and medians of the per-call
times, and the ratio tokens-first / tokens-last per round with its range, go to
``benchmarks/results/bench_field_layout.json`` (``--out``); docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkouts import recorded_command  # noqa: E402
from stochformer.model.noise import FEATURE_BLOCK  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE = {"B": 128, "N": 64, "d": 8, "M": 1024}
QUICK_SIZE = {"B": 4, "N": 8, "d": 3, "M": 16}


def contenders(size: dict, seed: int = 0) -> dict[str, Callable[[], torch.Tensor]]:
    """The two layouts on one problem (float64), each a function of no argument returning ΔW (B, N, d)."""
    B, N, d, M = size["B"], size["N"], size["d"], size["M"]
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, N, d, generator=g, dtype=torch.float64)
    X /= X.norm(dim=-1, keepdim=True)
    W = torch.cat([torch.randn(B, d, M, generator=g, dtype=torch.float64) / math.sqrt(d),
                   torch.randn(B, 1, M, generator=g, dtype=torch.float64)], dim=1)  # (B, d + 1, M)
    Z = torch.randn(B, M, d, generator=g, dtype=torch.float64)
    A = torch.cat([X, X.new_ones(B, N, 1)], dim=-1)  # (B, N, d + 1)
    per = max(1, FEATURE_BLOCK // (N * M))
    Wt, At, Zt = W.transpose(1, 2).contiguous(), A.transpose(1, 2), Z.transpose(1, 2)  # as the field keeps them
    work_last, work_first = torch.empty(per, M, N, dtype=torch.float64), torch.empty(per, N, M, dtype=torch.float64)
    out_last, out_first = torch.empty(B, d, N, dtype=torch.float64), torch.empty(B, N, d, dtype=torch.float64)

    def tokens_last() -> torch.Tensor:
        for a in range(0, B, per):
            phi = torch.matmul(Wt[a : a + per], At[a : a + per], out=work_last[: min(per, B - a)])
            torch.matmul(Zt[a : a + per], torch.relu_(phi), out=out_last[a : a + per])
        return out_last.transpose(1, 2)

    def tokens_first() -> torch.Tensor:
        for a in range(0, B, per):
            phi = torch.matmul(A[a : a + per], W[a : a + per], out=work_first[: min(per, B - a)])
            torch.matmul(torch.relu_(phi), Z[a : a + per], out=out_first[a : a + per])
        return out_first

    return {"tokens last": tokens_last, "tokens first": tokens_first}


def measure(size: dict, threads: int, rounds: int, calls: int) -> dict:
    """Both layouts at ``threads`` threads, in alternation: per-call times (ms), minima, medians,
    ratio first / last per round, and their largest relative difference."""
    torch.set_num_threads(threads)
    fns = contenders(size)
    last, first = (fn().clone() for fn in fns.values())  # warm-up, and the two results
    difference = float((last - first).abs().max() / first.abs().max())
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            start = time.perf_counter()
            for _ in range(calls):
                fns[name]()
            times[name].append(1e3 * (time.perf_counter() - start) / calls)
    ratios = [f / s for s, f in zip(times["tokens last"], times["tokens first"])]
    return {"threads": threads, "ms_per_call": times, "min_ms": {n: min(v) for n, v in times.items()},
            "median_ms": {n: statistics.median(v) for n, v in times.items()},
            "first_over_last": {"median": statistics.median(ratios), "range": [min(ratios), max(ratios)]},
            "max_relative_difference": difference}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="smallest sizes, two rounds of two calls (a smoke test)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_field_layout.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    size, rounds, calls = (QUICK_SIZE, 2, 2) if args.quick else (SIZE, args.rounds, args.calls)
    results = [measure(size, t, rounds, calls) for t in args.threads]
    for res in results:
        if res["max_relative_difference"] > 1e-12:
            raise SystemExit(f"bench_field_layout: the layouts differ by {res['max_relative_difference']:.3g} (relative)")
        print(f"{res['threads']} thread(s): tokens last {res['min_ms']['tokens last']:.2f} ms, tokens first "
              f"{res['min_ms']['tokens first']:.2f} ms (minima); first/last {res['first_over_last']['median']:.2f} "
              f"({res['first_over_last']['range'][0]:.2f}–{res['first_over_last']['range'][1]:.2f})")
    record = {"benchmark": "bench_field_layout", "command": recorded_command("benchmarks/bench_field_layout.py",
                                                                            sys.argv[1:] if argv is None else argv),
              "date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "torch": torch.__version__, "size": size, "rounds": rounds, "calls": calls,
              "results": results}
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
