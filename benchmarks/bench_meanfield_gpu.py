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
#: the H200 SXM datasheet's dense peaks (float64 and float32 without tensor cores, TFLOP/s) and HBM bandwidth (TB/s)
DATASHEET = {"float64_tflops": 67.0, "float32_tflops": 67.0, "bandwidth_tbs": 4.8}


def ceilings(dev: torch.device, n: int = 8192) -> dict:
    """Measured here: float64 and float32 (no TF32) TFLOP/s of one n³ product, and the bandwidth
    of a 2 GiB device-to-device copy (bytes read + written), medians of 5 after a warm-up."""
    def best(fn) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return sorted(times)[2]

    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    for dtype in (torch.float64, torch.float32):
        A = torch.randn(n, n, dtype=dtype, device=dev)
        out[f"{str(dtype).removeprefix('torch.')}_tflops"] = 2 * n**3 / best(lambda: A @ A) / 1e12
    x = torch.empty(1 << 28, dtype=torch.float64, device=dev)
    out["bandwidth_tbs"] = 2 * x.numel() * 8 / best(lambda: x.clone()) / 1e12
    torch.cuda.empty_cache()
    return out


def run_one(N: int, d: int, dtype: torch.dtype, sdpa: bool, steps: int) -> dict:
    from stochformer.config import RunConfig
    from stochformer.config.build import make_field, make_particles
    from stochformer.core.sphere import uniform

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
    item = torch.finfo(dtype).bits // 8
    # the least memory traffic of a step: the (N, M) feature matrix written and read once, the state a few times
    min_bytes = (2 * N * FEATURES + 6 * N * d) * item
    return {
        "N": N, "d": d, "dtype": str(dtype).removeprefix("torch."), "attention": "sdpa" if sdpa else "chunked",
        "step_s": step_s, "step_s_all": times, "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
        "state_mb": state_mb, "attention_tflops": 4.0 * N * N * d / step_s / 1e12,
        "min_bytes": min_bytes, "max_norm_error": norm_err,
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
    ceil = ceilings(torch.device("cuda"))
    print(json.dumps({"ceilings": ceil}), flush=True)
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
            "ceilings": ceil, "datasheet": DATASHEET,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (args.out / "bench_meanfield_gpu.json").write_text(json.dumps(info, indent=2) + "\n")
    lines = [f"`python benchmarks/bench_meanfield_gpu.py OUT` on {info['device']}, torch {info['torch']}, {info['date']}.", "",
             f"Measured ceilings: float64 GEMM {ceil['float64_tflops']:.1f} TFLOP/s, float32 GEMM (no TF32) "
             f"{ceil['float32_tflops']:.1f} TFLOP/s, copy bandwidth {ceil['bandwidth_tbs']:.2f} TB/s (datasheet: "
             f"{DATASHEET['float64_tflops']:g}, {DATASHEET['float32_tflops']:g} TFLOP/s, {DATASHEET['bandwidth_tbs']:g} TB/s). "
             "Attention's share: its 4N²d flops per step over the step time, against the GEMM ceiling of the dtype; "
             "bandwidth's share: the least traffic of a step (the (N, M) feature matrix written and read once, the "
             "state six times) at the measured bandwidth, over the step time.", "",
             "| N | dtype | attention | time/step (s) | peak memory (MiB) | state (MiB) | attention TFLOP/s (4N²d/step) "
             "| of the GEMM ceiling | of the datasheet peak | least traffic at the bandwidth / step |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | failed: {r['error'][:80]} | | | | | | |")
        else:
            gemm, sheet = ceil[f"{r['dtype']}_tflops"], DATASHEET[f"{r['dtype']}_tflops"]
            traffic = r["min_bytes"] / (ceil["bandwidth_tbs"] * 1e12) / r["step_s"]
            lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | {r['step_s']:.4f} | {r['peak_mb']:.0f} | "
                         f"{r['state_mb']:.0f} | {r['attention_tflops']:.1f} | {r['attention_tflops'] / gemm:.0%} | "
                         f"{r['attention_tflops'] / sheet:.0%} | {traffic:.1%} |")
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
