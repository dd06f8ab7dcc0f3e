"""Mean-field particle solver on a CUDA GPU: time per step and peak memory at N = 10⁵ and 10⁶
tokens (d = 16), driven by one random-feature field; and the low-precision attention with its
float64 guard (``GuardedAttention``) beside the particle noise N^{-1/2}.

    python benchmarks/bench_meanfield_gpu.py OUT_DIR            # writes OUT_DIR/bench_meanfield_gpu.{json,md}
    python benchmarks/bench_meanfield_gpu.py OUT_DIR --quick    # N = 10⁴ and 10⁵ only
    python benchmarks/bench_meanfield_gpu.py OUT_DIR --device cpu --quick   # the same rows on a CPU, N = 2000

Configurations: float32 with ``scaled_dot_product_attention`` restricted to the fused
memory-efficient / flash / cuDNN kernels (never the (N, N) math fallback), at every N; float64 with
query-chunked attention (score block 2²⁶ entries; on a CPU its fused kernel) at N ≤ 10⁵; and a float64 state whose attention
is ``GuardedAttention`` in float32 (fused), TF32 (query-chunked, cuBLAS products on TensorFloat-32
tensor cores; and fused) and float16 (fused), at every N, with 1024 guard rows checked in float64
at every step. The guard's tolerance is lifted here (a measurement, not a run to stop): each row
reports the largest guard error of its steps, that of one call on a clustered cloud (tokens
e₁ + 0.1 g normalised, g standard normal: attention outputs of norm near 1, where float16's output
rounding shows), the time of one guard evaluation, and whether both errors are within the default
tolerance 0.1 N^{-1/2}. Peak memory is ``torch.cuda.max_memory_allocated`` during the steps (state
included); time per step is the median of ``--steps`` Euler steps after one warm-up step, with
``torch.cuda.synchronize``. Without CUDA, ``--device cuda`` (the default) exits with status 0 and a
note; ``--device cpu`` runs the rows a CPU has (no TF32, no peak memory). Takes about two minutes
on an H100/H200-class GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

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


#: guard rows checked in float64 at every attention call
GUARD_QUERIES = 1024
#: spread of the clustered cloud e₁ + CLUSTER·g (g standard normal), normalised: |mean token| ≈ 0.9 at d = 16
CLUSTER = 0.1


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_one(N: int, d: int, dtype: torch.dtype, sdpa: bool, steps: int, dev: torch.device,
            precision: Optional[str] = None) -> dict:
    """One configuration: ``precision`` None is the plain attention in ``dtype``; a precision
    wraps it in ``GuardedAttention`` (the state in ``dtype``, float64)."""
    from stochformer.config import RunConfig
    from stochformer.config.build import make_field, make_particles
    from stochformer.core.sphere import normalize, uniform
    from stochformer.model.attention import GuardedAttention

    cuda = dev.type == "cuda"
    cfg = RunConfig(N=N, d=d, dynamics="sde", noise="random_features", features=FEATURES, integrator="euler",
                    T=1.0, L=10, dtype="float32" if dtype == torch.float32 else "float64", device=dev.type)
    g = torch.Generator(device=dev).manual_seed(0)
    X = uniform(1, N, d, generator=g, dtype=dtype, device=dev)
    field = make_field(cfg, 1, g, dtype, dev, token_chunk=1 << 16)
    stepper = make_particles(cfg, field, N, dtype, dev, block=1 << 26, sdpa=sdpa)
    guard = None
    if precision is not None:  # the tolerance lifted: measured, not enforced (the verdict is a column)
        guard = stepper.attention = GuardedAttention(stepper.attention, precision, GUARD_QUERIES, tol=1e30, seed=0)
        guard.reset(1, d, g, dtype, dev)
    _sync(dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    state_mb = torch.cuda.memory_allocated() / 2**20 if cuda else None
    times = []
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    with sdpa_kernel(fused):  # no (N, N) math fallback: fail instead of allocating N² entries
        for _ in range(steps + 1):
            _sync(dev)
            t = time.perf_counter()
            X = stepper.step(X, cfg.dt, g)
            _sync(dev)
            times.append(time.perf_counter() - t)
        extra = {}
        if guard is not None:
            extra = {"precision": precision, "guard_queries": GUARD_QUERIES, "guard_max_error": guard.record["max_error"],
                     "guard_last_rms_error": guard.record["last_rms_error"]}
            X64 = X.to(torch.float64)
            rows = torch.arange(min(GUARD_QUERIES, N), device=dev)
            _sync(dev)
            t = time.perf_counter()
            guard.inner(X64[:, rows], X64)  # the guard's reference: the float64 attention at its rows
            _sync(dev)
            extra["guard_s"] = time.perf_counter() - t
            clustered = normalize(torch.eye(d, dtype=dtype, device=dev)[0]
                                  + CLUSTER * torch.randn(1, N, d, generator=g, dtype=dtype, device=dev))
            guard(clustered)
            extra["clustered_max_error"] = guard.record["last_max_error"]
            extra["clustered_mean_norm"] = float(torch.linalg.vector_norm(clustered.mean(-2), dim=-1).max())
            noise = N ** -0.5
            extra |= {"noise": noise, "tolerance": 0.1 * noise,
                      "within_tolerance": max(extra["guard_max_error"], extra["clustered_max_error"]) <= 0.1 * noise}
    timed = sorted(times[1:])
    norm_err = float((torch.linalg.vector_norm(X, dim=-1) - 1).abs().max())
    step_s = timed[len(timed) // 2]
    item = torch.finfo(dtype).bits // 8
    # the least memory traffic of a step: the (N, M) feature matrix written and read once, the state a few times
    min_bytes = (2 * N * FEATURES + 6 * N * d) * item
    kind = "sdpa" if (sdpa or precision == "float16") else "chunked"
    return {
        "N": N, "d": d, "dtype": str(dtype).removeprefix("torch."), "attention": kind if precision is None else f"{precision} {kind}",
        "step_s": step_s, "step_s_all": times, "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "state_mb": state_mb, "attention_tflops": 4.0 * N * N * d / step_s / 1e12,
        "min_bytes": min_bytes, "max_norm_error": norm_err,
        "finite": bool(torch.isfinite(X).all()), **extra,
    }


def _e(x: float) -> str:
    return f"{x:.2e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N = 10⁴ and 10⁵ only (on a CPU: N = 2000, one step)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--sizes", type=int, nargs="+", help="token counts (default: 10⁵, 10⁶; --quick: see there)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        note = "CUDA is not available: nothing measured."
        (args.out / "bench_meanfield_gpu.json").write_text(json.dumps({"cuda": False, "note": note}) + "\n")
        print(note)
        return 0
    dev = torch.device(args.device)
    if args.quick and not cuda:
        args.steps = 1
    sizes = args.sizes or ([10_000, 100_000] if cuda else [2000]) if args.quick else args.sizes or [100_000, 1_000_000]
    guarded = [("float32", True), ("tf32", False), ("tf32", True), ("float16", True)] if cuda else [("float32", True), ("float16", True)]
    plan = [(N, torch.float32, True, None) for N in sizes] + [(N, torch.float64, not cuda, None) for N in sizes if N <= 100_000] \
        + [(N, torch.float64, sdpa, p) for N in sizes for p, sdpa in guarded]
    ceil = ceilings(dev) if cuda else None
    print(json.dumps({"ceilings": ceil}), flush=True)
    rows = []
    for N, dtype, sdpa, precision in plan:
        try:
            rows.append(run_one(N, args.d, dtype, sdpa, args.steps, dev, precision))
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # report, keep going
            rows.append({"N": N, "dtype": str(dtype), "attention": (precision + " " if precision else "") + ("sdpa" if sdpa else "chunked"),
                         "precision": precision, "error": str(exc)[:300]})
            if sdpa and precision is None:  # no fused kernel: the query-chunked path instead
                print(json.dumps(rows[-1]), flush=True)
                if cuda:
                    torch.cuda.empty_cache()
                rows.append(run_one(N, args.d, dtype, False, args.steps, dev))
        if cuda:
            torch.cuda.empty_cache()
        print(json.dumps(rows[-1]), flush=True)
    name = torch.cuda.get_device_name(0) if cuda else f"cpu ({torch.get_num_threads()} threads)"
    info = {"cuda": cuda, "device": name, "torch": torch.__version__, "rows": rows,
            "ceilings": ceil, "datasheet": DATASHEET,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (args.out / "bench_meanfield_gpu.json").write_text(json.dumps(info, indent=2) + "\n")
    cmd = " ".join(["python benchmarks/bench_meanfield_gpu.py OUT", *sys.argv[2:]])
    lines = [f"`{cmd}` on {info['device']}, torch {info['torch']}, {info['date']}.", ""]
    plain = [r for r in rows if r.get("precision") is None]
    if cuda:
        lines += [f"Measured ceilings: float64 GEMM {ceil['float64_tflops']:.1f} TFLOP/s, float32 GEMM (no TF32) "
                  f"{ceil['float32_tflops']:.1f} TFLOP/s, copy bandwidth {ceil['bandwidth_tbs']:.2f} TB/s (datasheet: "
                  f"{DATASHEET['float64_tflops']:g}, {DATASHEET['float32_tflops']:g} TFLOP/s, {DATASHEET['bandwidth_tbs']:g} TB/s). "
                  "Attention's share: its 4N²d flops per step over the step time, against the GEMM ceiling of the dtype; "
                  "bandwidth's share: the least traffic of a step (the (N, M) feature matrix written and read once, the "
                  "state six times) at the measured bandwidth, over the step time.", "",
                  "| N | dtype | attention | time/step (s) | peak memory (MiB) | state (MiB) | attention TFLOP/s (4N²d/step) "
                  "| of the GEMM ceiling | of the datasheet peak | least traffic at the bandwidth / step |",
                  "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in plain:
            if "error" in r:
                lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | failed: {r['error'][:80]} | | | | | | |")
            else:
                gemm, sheet = ceil[f"{r['dtype']}_tflops"], DATASHEET[f"{r['dtype']}_tflops"]
                traffic = r["min_bytes"] / (ceil["bandwidth_tbs"] * 1e12) / r["step_s"]
                lines.append(f"| {r['N']} | {r['dtype']} | {r['attention']} | {r['step_s']:.4f} | {r['peak_mb']:.0f} | "
                             f"{r['state_mb']:.0f} | {r['attention_tflops']:.1f} | {r['attention_tflops'] / gemm:.0%} | "
                             f"{r['attention_tflops'] / sheet:.0%} | {traffic:.1%} |")
    else:
        lines += ["| N | dtype | attention | time/step (s) | attention TFLOP/s (4N²d/step) |", "| ---: | --- | --- | ---: | ---: |"]
        lines += [f"| {r['N']} | {r['dtype']} | {r['attention']} | " + (f"failed: {r['error'][:80]} | |" if "error" in r else
                  f"{r['step_s']:.4f} | {r['attention_tflops']:.3f} |") for r in plain]
    ok = [r for r in plain if "error" not in r and r["dtype"] == "float32"]
    if len(ok) == 2 and cuda:
        lines += ["", f"float32, N × {ok[1]['N'] // ok[0]['N']}: time × {ok[1]['step_s'] / ok[0]['step_s']:.1f}, "
                      f"peak memory × {ok[1]['peak_mb'] / ok[0]['peak_mb']:.1f}."]
    lines += ["", f"Guarded attention (float64 state; {GUARD_QUERIES} rows checked in float64 at every step; the default "
              "tolerance 0.1 N^-1/2, lifted here): the largest guard error over the steps (from uniform tokens) and on "
              "one clustered cloud, beside the particle noise N^-1/2; the time of one guard evaluation.", "",
              "| N | attention | time/step (s) | guard max error (steps) | clustered | N^-1/2 | within 0.1 N^-1/2 | guard (s) | peak memory (MiB) |",
              "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        if r not in plain:
            if "error" in r:
                lines.append(f"| {r['N']} | {r['attention']} | failed: {r['error'][:80]} | | | | | | |")
                continue
            mem = "—" if r["peak_mb"] is None else f"{r['peak_mb']:.0f}"
            lines.append(f"| {r['N']} | {r['attention']} | {r['step_s']:.4f} | {_e(r['guard_max_error'])} | "
                         f"{_e(r['clustered_max_error'])} | {_e(r['noise'])} | {'yes' if r['within_tolerance'] else 'no'} | "
                         f"{r['guard_s']:.4f} | {mem} |")
    if not cuda:
        lines += ["", "TF32 is a CUDA mode: no such row on a CPU."]
    text = "\n".join(lines) + "\n"
    (args.out / "bench_meanfield_gpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
