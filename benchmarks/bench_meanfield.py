"""Mean-field particle solver on the CPU: peak memory and time per step at N = 10⁴, 2·10⁴, 4·10⁴
tokens (d = 16, float64), with the attention in query chunks and with PyTorch's fused
``scaled_dot_product_attention`` (scale 1).

    python benchmarks/bench_meanfield.py             # writes the "Mean-field particle solver" section of docs/benchmarks.md
    python benchmarks/bench_meanfield.py --no-write  # prints only

Each (N, attention path) runs in two fresh processes. The first times the steps. The second
measures peak memory: the largest rise of the process's resident set (sampled every millisecond)
during the steps, over the resident set just before the first step (tokens and field allocated,
libraries warmed up by one step at N = 1000), with glibc's mmap threshold fixed at 64 KiB
(``MALLOC_MMAP_THRESHOLD_``) so that every freed block leaves the resident set at once instead of
being kept by the allocator; that makes the resident set follow the live memory (and the steps
slower, which is why they are timed in the other process). Memory linear in N shows as a ratio
≈ 2 when N doubles. Time per step is compared with the attention FLOP count 4 N² d (scores Q Kᵀ
and the weighted sum of values) divided by the matmul rate measured in the same process on the
attention's own shape ((chunk, d) × (d, N)) and on a square 2048 × 2048 GEMM, and with a floor
that no exact implementation can beat: that model time plus the N² exponentials of the softmax,
timed in the same process.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

from stochformer.model.attention import CPU_ROWS  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Mean-field particle solver"
CHUNK = 256  # query rows per attention chunk (memory CHUNK × N; a CPU forms CPU_ROWS of them at a time)
FEATURES = 256


def _rss_mb() -> float:
    """Current resident set size (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRSS:
    """Samples the current RSS every millisecond in a thread (torch releases the GIL in its
    kernels); ``peak`` is the largest sample."""

    def __enter__(self) -> "PeakRSS":
        self.peak, self._stop = _rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


def _rate(m: int, k: int, n: int, reps: int = 3) -> float:
    """GFLOP/s of an (m, k) × (k, n) float64 matmul (best of ``reps``)."""
    A, B = torch.randn(m, k, dtype=torch.float64), torch.randn(k, n, dtype=torch.float64)
    A @ B
    best = min(_timed(lambda: A @ B) for _ in range(reps))
    return 2 * m * k * n / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def single(N: int, d: int, path: str, steps: int, gemm: int = 2048) -> dict:
    """One (N, path) measurement in this process."""
    from stochformer.config import RunConfig
    from stochformer.config.build import make_field, make_particles
    from stochformer.core.sphere import uniform

    cfg = RunConfig(N=N, d=d, dynamics="sde", noise="random_features", features=FEATURES, integrator="euler", T=1.0, L=10)
    g = torch.Generator().manual_seed(0)
    X = uniform(1, N, d, generator=g)
    field = make_field(cfg, 1, g, token_chunk=4096)
    stepper = make_particles(cfg, field, N, block=CHUNK * N, sdpa=(path == "sdpa"))
    # warm the libraries up (thread pools, kernel workspaces) on a small cloud: their one-off
    # memory is not the solver's working memory
    small = uniform(1, 1000, d, generator=g)
    make_particles(cfg, field, 1000, block=CHUNK * 1000, sdpa=(path == "sdpa")).step(small, cfg.dt, g)
    base = _rss_mb()
    times = []
    with PeakRSS() as rss:  # from the first step: later steps reuse memory the allocator keeps
        for _ in range(steps + 1):  # the first step warms up and is not timed
            t = time.perf_counter()
            Y = stepper.step(X, cfg.dt, g)
            times.append(time.perf_counter() - t)
            del Y
    times = times[1:]
    peak = rss.peak - base
    step_s = sorted(times)[len(times) // 2]
    attn_s = _timed(lambda: stepper.attention(X))
    rate_shape = _rate(CHUNK, d, N)
    rate_square = _rate(gemm, gemm, gemm)
    flops = 4.0 * N * N * d
    model = flops / (rate_square * 1e9)
    # N² exponentials at the best rate measured: a cache-sized block of cosines (exp's arguments
    # in [-β, β]), best of 20, scaled to N² — a floor, so the most favourable measurement
    scores = torch.rand(1 << 18, dtype=torch.float64) * 2 - 1
    out = torch.empty_like(scores)
    exp_s = min(_timed(lambda: torch.exp(scores, out=out)) for _ in range(20)) * N * N / scores.numel()
    return {
        "N": N, "d": d, "path": path, "step_s": step_s, "attention_s": attn_s, "peak_mb": peak,
        "flops": flops, "rate_attn_shape_gflops": rate_shape, "rate_gemm_gflops": rate_square,
        "ratio_shape": step_s / (flops / (rate_shape * 1e9)), "ratio_gemm": step_s / model,
        "exp_s": exp_s, "floor_s": model + exp_s, "ratio_floor": step_s / (model + exp_s),
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 20_000, 40_000])
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--paths", nargs="+", default=["chunked", "sdpa"], choices=["chunked", "sdpa"])
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--quick", action="store_true", help="N = 1000, one step, the chunked path, a 256³ GEMM rate, print only: a smoke test")
    ap.add_argument("--gemm", type=int, default=2048, help="side of the square GEMM whose rate is the model's (default 2048)")
    ap.add_argument("--single", nargs=2, metavar=("N", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=Path, help="re-tabulate rows printed by an earlier run (one dict per line)")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.steps, args.paths, args.no_write, args.gemm = [1000], 1, ["chunked"], True, 256
    if args.single:
        print(json.dumps(single(int(args.single[0]), args.d, args.single[1], args.steps, args.gemm)))
        return

    load0 = os.getloadavg()[0]
    rows = []
    if args.rows:
        rows = [ast.literal_eval(line) for line in args.rows.read_text().splitlines() if line.startswith("{")]
    for path in [] if args.rows else args.paths:
        for N in args.sizes:
            cmd = [sys.executable, __file__, "--single", str(N), path, "--d", str(args.d), "--steps", str(args.steps), "--gemm", str(args.gemm)]
            timing, memory = (
                json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1])
                for env in (dict(os.environ), {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
            )
            rows.append({**timing, "peak_mb": memory["peak_mb"]})
            print(rows[-1], flush=True)
    load1 = os.getloadavg()[0]

    cmdline = " ".join(["python benchmarks/bench_meanfield.py", *sys.argv[1:]])
    lines = [
        SECTION, "",
        f"`{cmdline}` on {platform.machine()}, {os.cpu_count()} cores, {rows[0]['threads']} torch threads, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load0:.1f} before, {load1:.1f} after.", "",
        f"Limit SDE (Euler step: attention + random-feature field of width {FEATURES}), d = {args.d}, float64, one "
        f"sample. Attention `chunked`: query chunks of {CHUNK} rows, formed {CPU_ROWS} rows at a time on a CPU (score block "
        f"{CPU_ROWS} × N, shifted by the Cauchy–Schwarz bound of the scores instead of the row maximum); `sdpa`: "
        "`torch.nn.functional.scaled_dot_product_attention(scale=1)` (CPU flash kernel). Peak memory: the "
        "largest rise of the process's RSS (sampled every ms) from before the first step, in a second process "
        "whose allocator returns freed blocks at once (see the script's docstring). Model time: 4 N² d FLOPs divided by the float64 matmul rate measured "
        f"in the same process on the attention's shape ({CHUNK} × {args.d}) · ({args.d} × N), and on a square {args.gemm}³ GEMM. "
        "Floor: the GEMM model time plus the N² float64 exponentials of the softmax (`torch.exp` at its best rate, on a cache-sized block, timed in the same process).", "",
        "| path | N | time/step (s) | attention (s) | peak memory (MB) | peak ratio vs N/2 | "
        "rate, attention shape (GFLOP/s) | time / model (attention shape) | rate, GEMM (GFLOP/s) | time / model (GEMM) | "
        "N² exp (s) | time / floor |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        prev = next((p for p in rows if p["path"] == r["path"] and p["N"] * 2 == r["N"]), None)
        ratio = f"{r['peak_mb'] / prev['peak_mb']:.2f}" if prev and prev["peak_mb"] > 0 else "—"
        lines.append(
            f"| {r['path']} | {r['N']} | {r['step_s']:.3f} | {r['attention_s']:.3f} | {r['peak_mb']:.0f} | {ratio} | "
            f"{r['rate_attn_shape_gflops']:.1f} | {r['ratio_shape']:.2f} | {r['rate_gemm_gflops']:.1f} | {r['ratio_gemm']:.2f} | "
            f"{r['exp_s']:.3f} | {r['ratio_floor']:.2f} |"
        )
    for path in dict.fromkeys(r["path"] for r in rows):
        pts = sorted((r["N"], r["peak_mb"]) for r in rows if r["path"] == path)
        if len(pts) >= 2:
            b, a = np.polyfit([n for n, _ in pts], [m for _, m in pts], 1)
            lines += ["", f"`{path}`: least squares peak ≈ {a:.0f} MB + {b * 1e3:.2f} MB per 1000 tokens; the peak grows "
                      f"{pts[-1][1] / pts[0][1]:.2f}× from N = {pts[0][0]} to {pts[-1][0]} ({pts[-1][0] / pts[0][0]:.0f}× the "
                      f"tokens; {(pts[-1][0] / pts[0][0]) ** 2:.0f}× for quadratic memory)."]
    dense = ", ".join(f"{8 * N * N / 2**30:.1f}" for N in sorted({r["N"] for r in rows}))
    lines += ["", f"For comparison, one dense float64 (N, N) score matrix alone would take {dense} GiB."]

    def span(values: list[float]) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"

    model = [r["flops"] / (r["rate_gemm_gflops"] * 1e9) for r in rows]
    lines += ["", "Time per step against the GEMM model: the softmax's N² exponentials alone take "
              f"{span([r['exp_s'] / t for r, t in zip(rows, model)])}× the model time here (d = {args.d}: each score "
              f"costs 4d = {4 * args.d} flops of products and one exponential), so no exact float64 attention can run "
              f"faster than {span([r['floor_s'] / t for r, t in zip(rows, model)])}× the model on this machine; the "
              f"measured steps run at {span([r['ratio_gemm'] for r in rows])}× the model, "
              f"{span([r['ratio_floor'] for r in rows])}× that floor."]
    text = "\n".join(lines) + "\n"
    publish(DOC, SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
