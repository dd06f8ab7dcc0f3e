"""Mean-field particle solver on a CUDA GPU: time per step and peak memory at N = 10⁵ and 10⁶
tokens (d = 16), driven by one random-feature field.

    python benchmarks/bench_meanfield_gpu.py OUT_DIR            # writes OUT_DIR/bench_meanfield_gpu.{json,md}
    python benchmarks/bench_meanfield_gpu.py OUT_DIR --quick    # N = 10⁴ and 10⁵ only

Configurations: float32 with ``scaled_dot_product_attention`` restricted to the fused
memory-efficient / flash / cuDNN kernels (never the (N, N) math fallback), at every N; float64 with
query-chunked attention (score block 2²⁶ entries) at N ≤ 10⁵. Peak memory is
``torch.cuda.max_memory_allocated`` during the steps (state included); time per step is the median
of ``--steps`` Euler steps after one warm-up step, with ``torch.cuda.synchronize``. Exits with
status 0 and a note when CUDA is not available. Takes about a minute on an H100/H200-class GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package, installed or not
FEATURES = 256


def run_one(N: int, d: int, dtype: torch.dtype, sdpa: bool, steps: int) -> dict:
    from stochformer.config import RunConfig
    from stochformer.build import make_field, make_particles
    from stochformer.sphere import uniform

    dev = torch.device("cuda")
    cfg = RunConfig(N=N, d=d, dynamics="sde", noise="random_features", features=FEATURES, integrator="euler",
                    T=1.0, L=10, dtype="float32" if dtype == torch.float32 else "float64", device="cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    X = uniform(1, N, d, generator=g, dtype=dtype, device=dev)
    field = make_field(cfg, 1, g, dtype, dev, token_chunk=1 << 16)
    stepper = make_particles(cfg, field, N, dtype, dev, block=1 << 26, sdpa=sdpa)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    state_mb = torch.cuda.memory_allocated() / 2**20
    times = []
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    with sdpa_kernel(fused):  # no (N, N) math fallback: fail instead of allocating N² entries
        for _ in range(steps + 1):
            torch.cuda.synchronize()
            t = time.perf_counter()
            X = stepper.step(X, cfg.dt, g)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    timed = sorted(times[1:])
    norm_err = float((torch.linalg.vector_norm(X, dim=-1) - 1).abs().max())
    step_s = timed[len(timed) // 2]
    return {
        "N": N, "d": d, "dtype": str(dtype).removeprefix("torch."), "attention": "sdpa" if sdpa else "chunked",
        "step_s": step_s, "step_s_all": times, "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
        "state_mb": state_mb, "attention_tflops": 4.0 * N * N * d / step_s / 1e12, "max_norm_error": norm_err,
        "finite": bool(torch.isfinite(X).all()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N = 10⁴ and 10⁵ only")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        note = "CUDA is not available: nothing measured."
        (args.out / "bench_meanfield_gpu.json").write_text(json.dumps({"cuda": False, "note": note}) + "\n")
        print(note)
        return 0
    sizes = [10_000, 100_000] if args.quick else [100_000, 1_000_000]
    plan = [(N, torch.float32, True) for N in sizes] + [(N, torch.float64, False) for N in sizes if N <= 100_000]
    rows = []
    for N, dtype, sdpa in plan:
        try:
            rows.append(run_one(N, args.d, dtype, sdpa, args.steps))
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # report, keep going
            rows.append({"N": N, "dtype": str(dtype), "attention": "sdpa" if sdpa else "chunked", "error": str(exc)[:300]})
            if sdpa:  # no fused kernel: the query-chunked path instead
                print(json.dumps(rows[-1]), flush=True)
                torch.cuda.empty_cache()
                rows.append(run_one(N, args.d, dtype, False, args.steps))
        torch.cuda.empty_cache()
        print(json.dumps(rows[-1]), flush=True)
    info = {"cuda": True, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (args.out / "bench_meanfield_gpu.json").write_text(json.dumps(info, indent=2) + "\n")
    lines = [f"`python benchmarks/bench_meanfield_gpu.py OUT` on {info['device']}, torch {info['torch']}, {info['date']}.", "",
             "| N | dtype | attention | time/step (s) | peak memory (MiB) | state (MiB) | attention TFLOP/s (4N²d/step) |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | failed: {r['error'][:80]} | | | |")
        else:
            lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | {r['step_s']:.4f} | {r['peak_mb']:.0f} | "
                         f"{r['state_mb']:.0f} | {r['attention_tflops']:.1f} |")
    ok = [r for r in rows if "error" not in r and r["dtype"] == "float32" and r["N"] in sizes]
    if len(ok) == 2:
        lines += ["", f"float32, N × 10: time × {ok[1]['step_s'] / ok[0]['step_s']:.1f} (N² would be × 100), "
                      f"peak memory × {ok[1]['peak_mb'] / ok[0]['peak_mb']:.1f} (linear would be × 10)."]
    text = "\n".join(lines) + "\n"
    (args.out / "bench_meanfield_gpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
