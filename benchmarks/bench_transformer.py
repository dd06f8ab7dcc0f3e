"""Transformer simulator benchmark: ``stochformer`` against the loop a user would write.

    python benchmarks/bench_transformer.py                      # CPU; writes the "Transformer simulator" section of docs/benchmarks.md
    python benchmarks/bench_transformer.py --device cuda --out DIR   # GPU; writes DIR/bench_transformer_cuda.{md,json}
    python benchmarks/bench_transformer.py --device cpu --quick --out DIR   # small sizes, a smoke test

Both implementations simulate the discrete model of SPEC §1 (post-LN, attention then a random
ReLU MLP with fresh U, W, b_U, b_W per layer and per sample) at the same sizes, interleaved in the
same run; their laws are compared on the final mean pairwise cosine (pooled over the repeats,
which use different seeds). A roofline for the second size divides the normals and the
matrix-product flops one run must produce by the rates measured on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import write_section  # noqa: E402

from stochformer.build import make_noise  # noqa: E402
from stochformer.config import RunConfig  # noqa: E402
from stochformer.diagnostics import mean_cosine  # noqa: E402
from stochformer.experiments.simulate import run_simulate  # noqa: E402
from stochformer.model.rng import NormalDraws  # noqa: E402
from stochformer.runtime import make_generator  # noqa: E402
from stochformer.sphere import uniform  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Transformer simulator"  # the CPU numbers; a GPU run writes its own files
SIZES = [dict(batch=64, N=32, d=16, m=256, L=128), dict(batch=16, N=64, d=64, m=1024, L=64)]
QUICK_SIZES = [dict(batch=8, N=8, d=4, m=32, L=8), dict(batch=4, N=16, d=16, m=64, L=8)]
TARGETS = [10.0, 2.0]
MODEL = dict(T=5.0, beta=1.0, gamma=1.0, activation="relu", sigma_U=0.1, sigma_W=0.1)


# --------------------------------------------------------------------------------------------
# the baseline: what a user would write (a loop over samples, fresh weights per layer)
# --------------------------------------------------------------------------------------------
def baseline(X0: torch.Tensor, L: int, T: float, m: int, beta: float, gamma: float, sigma_U: float, sigma_W: float, gen: torch.Generator) -> torch.Tensor:
    """Post-LN transformer with a random ReLU MLP, one sample at a time: X0 (batch, N, d)."""
    dt = T / L
    B, N, d = X0.shape
    kw = dict(generator=gen, dtype=X0.dtype, device=X0.device)
    finals = []
    for b in range(B):
        x = X0[b]
        for _ in range(L):
            attn = torch.softmax(beta * (x @ x.T), dim=-1) @ (gamma * x)
            y = x + dt * attn
            y = y / y.norm(dim=-1, keepdim=True)
            U = torch.randn(m, d, **kw)
            W = torch.randn(d, m, **kw)
            b_U = sigma_U * torch.randn(m, **kw)
            b_W = sigma_W * torch.randn(d, **kw)
            h = torch.relu(y @ U.T / math.sqrt(d) + b_U)
            x = y + math.sqrt(dt) * (h @ W.T / math.sqrt(m) + b_W)
            x = x / x.norm(dim=-1, keepdim=True)
        finals.append(x)
    return torch.stack(finals)


# --------------------------------------------------------------------------------------------
# timing helpers
# --------------------------------------------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def median_time(fn, device: torch.device, repeats: int) -> float:
    return statistics.median(timed(fn, device)[1] for _ in range(repeats))


def run_config(size: dict, device: str, seed: int, **extra) -> RunConfig:
    return RunConfig(**size, **MODEL, device=device, seed=seed, record_every=size["L"], **extra)


def run_baseline(cfg: RunConfig, device: torch.device) -> torch.Tensor:
    gen = make_generator(cfg.seed, device)
    X0 = uniform(cfg.batch, cfg.N, cfg.d, generator=gen, dtype=torch.float64, device=device)
    return baseline(X0, cfg.L, cfg.T, cfg.m, cfg.beta, cfg.gamma_value, cfg.sigma_U, cfg.sigma_W, gen)


def run_ours(cfg: RunConfig) -> torch.Tensor:
    return torch.from_numpy(run_simulate(cfg).data["X_final"].values)


def law_statistic(X: torch.Tensor) -> list[float]:
    """log(1 − mean pairwise cosine) of the final tokens, per sample: the log-distance to
    synchronisation (its drift is the rate of SPEC §5), sensitive even when cosines are near 1."""
    c = mean_cosine(X.to(torch.float64)).cpu()
    return torch.log((1.0 - c).clamp_min(1e-300)).tolist()


def law_check(a: list[float], b: list[float]) -> dict:
    """Mean ± SE of a statistic for two samples and the z-score of their difference."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    sa, sb = float(np.std(a, ddof=1) / math.sqrt(len(a))), float(np.std(b, ddof=1) / math.sqrt(len(b)))
    z = (ma - mb) / math.sqrt(sa**2 + sb**2) if sa + sb > 0 else 0.0
    return {"baseline": [ma, sa], "ours": [mb, sb], "z": z, "agree": abs(z) < 4.0}


# --------------------------------------------------------------------------------------------
# machine rates for the roofline
# --------------------------------------------------------------------------------------------
def matmul_rate(device: torch.device, quick: bool) -> float:
    """float64 GFLOP/s of one n × n product (n = 2048 on a CPU, 8192 on a GPU)."""
    n = 512 if quick else (8192 if device.type == "cuda" else 2048)
    A = torch.randn(n, n, dtype=torch.float64, device=device)
    Bm = torch.randn(n, n, dtype=torch.float64, device=device)
    A @ Bm
    t = median_time(lambda: A @ Bm, device, 3 if quick else 5)
    return 2 * n**3 / t / 1e9


def sampler_rates(device: torch.device, quick: bool) -> dict[str, float]:
    """float64 standard normals per second (millions) for each candidate sampler on ``device``."""
    n = 1 << (18 if quick else (26 if device.type == "cuda" else 22))
    reps = 3 if quick else 5
    gen = make_generator(0, device)
    buf = torch.empty(n, dtype=torch.float64, device=device)
    rates = {"torch normal_ (one generator)": n / median_time(lambda: buf.normal_(generator=gen), device, reps) / 1e6}
    if device.type != "cpu":
        return rates
    out = np.empty(n)
    for name in ("PCG64", "Philox", "PCG64DXSM", "SFC64"):
        rg = np.random.Generator(getattr(np.random, name)(0))
        rates[f"numpy {name} ziggurat (one thread)"] = n / median_time(lambda: rg.standard_normal(out=out), device, reps) / 1e6
    draws = NormalDraws("parallel")
    label = f"stochformer `rng = parallel` (SFC64 ziggurat, {draws.streams} streams on {min(draws.streams, torch.get_num_threads())} thread(s))"
    rates[label] = n / median_time(lambda: draws(n, gen, torch.float64, device), device, reps) / 1e6
    return rates


def bmm_rate(cfg: RunConfig, device: torch.device) -> float:
    """float64 GFLOP/s of the run's largest batched product, Φ Φᵀ: (batch, N, m) @ (batch, m, N)."""
    Phi = torch.randn(cfg.batch, cfg.N, cfg.m, dtype=torch.float64, device=device)
    PhiT = Phi.transpose(-1, -2)
    Phi @ PhiT
    return 2 * cfg.batch * cfg.m * cfg.N**2 / median_time(lambda: Phi @ PhiT, device, 5) / 1e9


def layer_work(cfg: RunConfig, device: torch.device) -> dict[str, float]:
    """Normals and matrix-product flops of one run of ``cfg`` with stochformer's exact sampler.

    Per layer and sample: the MLP (``RandomMLP.cost``) plus attention (2 products of 2N²d flops)."""
    per = make_noise(cfg).cost(cfg.N, cfg.d, device)
    n_layers = cfg.batch * cfg.L
    normals = per["normals"] * n_layers + cfg.batch * cfg.N * cfg.d  # + the initial tokens
    flops = (per["flops"] + 4.0 * cfg.N**2 * cfg.d) * n_layers
    return {"normals": normals, "flops": flops}


def machine() -> str:
    try:
        model = next(
            (line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")),
            "",
        )
    except OSError:
        model = ""
    return f"{platform.machine()} {model or platform.processor()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None, default_device: str = "cpu") -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=default_device, help="cpu, cuda or cuda:i")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per implementation and size (median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes and one repeat: a smoke test of the script")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=None, help="write bench_transformer_<device>.{md,json} here instead of docs/benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: no CUDA device is available here; nothing to benchmark.")
        return
    device = torch.device(args.device)
    if device.type != "cpu" and args.out is None and not args.no_write:
        parser.error("on a GPU give --out DIR (docs/benchmarks.md holds the CPU numbers)")
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes, repeats = (QUICK_SIZES, 1) if args.quick else (SIZES, args.repeats)
    load_before = os.getloadavg()
    started = time.time()

    results = []
    for size, target in zip(sizes, TARGETS):
        rows = {"baseline": [], "stochformer": [], "stochformer, float32 draws (opt-in)": []}
        finals = {k: [] for k in rows}
        warm = run_config(size, args.device, 0).with_updates(L=2)
        run_baseline(warm, device), run_ours(warm)  # warm-up (allocator, lazy imports)
        for r in range(repeats + 1 if not args.quick else 1):  # seed 1000+r; the first extra repeat is for the law check only
            cfg = run_config(size, args.device, 1000 + r)
            for name, fn in (
                ("baseline", lambda: run_baseline(cfg, device)),
                ("stochformer", lambda: run_ours(cfg)),
                ("stochformer, float32 draws (opt-in)", lambda: run_ours(cfg.with_updates(draw_precision="float32"))),
            ):
                X, t = timed(fn, device)
                if r > 0 or args.quick:
                    rows[name].append(t)
                finals[name] += law_statistic(X)
        med = {k: statistics.median(v) for k, v in rows.items()}
        res = {
            "size": size,
            "times_s": rows,
            "median_s": med,
            "speedup": med["baseline"] / med["stochformer"],
            "speedup_float32_draws": med["baseline"] / med["stochformer, float32 draws (opt-in)"],
            "target": target,
            "law_check": law_check(finals["baseline"], finals["stochformer"]),
            "law_check_float32_draws": law_check(finals["baseline"], finals["stochformer, float32 draws (opt-in)"]),
            "work": layer_work(run_config(size, args.device, 0), device),
        }
        results.append(res)
        print(json.dumps(res, indent=1))

    mm = matmul_rate(device, args.quick)
    samplers = sampler_rates(device, args.quick)
    best = max(samplers, key=samplers.get)
    for res in results:  # the exact-draw bound at every size: no run can beat it at these rates
        w = res["work"]
        res["bound_s"] = w["normals"] / (samplers[best] * 1e6) + w["flops"] / (mm * 1e9)
        res["max_speedup"] = res["median_s"]["baseline"] / res["bound_s"]
        res["bmm_gflops"] = bmm_rate(run_config(res["size"], args.device, 0), device)
    roof = results[-1]
    bound = {
        "normals": roof["work"]["normals"],
        "flops": roof["work"]["flops"],
        "normals_s": roof["work"]["normals"] / (samplers[best] * 1e6),
        "flops_s": roof["work"]["flops"] / (mm * 1e9),
    }
    bound["bound_s"] = bound["normals_s"] + bound["flops_s"]
    bound["achieved_s"] = roof["median_s"]["stochformer"]
    bound["fraction"] = bound["bound_s"] / bound["achieved_s"]
    bound["flops_s_at_bmm_rate"] = roof["work"]["flops"] / (roof["bmm_gflops"] * 1e9)
    load_after = os.getloadavg()
    report = {
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "machine": machine(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset (OpenMP's default)"),
        "command": "python benchmarks/bench_transformer.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "wall_s": time.time() - started,
        "load_average": [load_before[0], load_after[0]],
        "model": MODEL,
        "repeats": repeats,
        "results": results,
        "matmul_gflops": mm,
        "samplers_M_per_s": samplers,
        "fastest_sampler": best,
        "roofline": bound,
    }
    text = markdown(report)
    print(text)
    if args.no_write:
        return
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"bench_transformer_{device.type}"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
        stem.with_suffix(".md").write_text(text)
        print(f"written to {stem}.md and {stem}.json")
    elif not args.quick:
        write_section(DOC, SECTION, text)
        print(f"written to {DOC}")


def markdown(rep: dict) -> str:
    def size_txt(s: dict) -> str:
        return f"batch {s['batch']}, N {s['N']}, d {s['d']}, m {s['m']}, L {s['L']}"

    lines = [
        SECTION,
        "",
        f"`{rep['command']}` on {rep['device']} — {rep['machine']}; torch {rep['torch']} "
        f"({rep['torch_threads']} intra-op thread(s), OMP_WAIT_POLICY={rep['omp_wait_policy']}), numpy {rep['numpy']}; {rep['date']}, {rep['wall_s']:.0f} s in all. "
        f"Load average {rep['load_average'][0]:.1f} before and {rep['load_average'][1]:.1f} after: "
        + ("the machine was shared with other jobs, so absolute times are inflated and noisy; both "
           "implementations ran interleaved in the same process, so the ratios are the meaningful numbers."
           if max(rep["load_average"]) > 0.5 * (os.cpu_count() or 1) else "the machine was quiet.")
        + " Both ran under the same, unchanged OpenMP settings; `OMP_WAIT_POLICY=PASSIVE` makes the "
        "baseline's many small products about 3× slower and would inflate the ratios (measured: docs/performance.md).",
        "",
        f"Model: post-LN, attention (β = {MODEL['beta']}, γ = {MODEL['gamma']}) then a random ReLU MLP with "
        f"σ_U = σ_W = {MODEL['sigma_U']}, T = {MODEL['T']}, float64, fresh U, W, b_U, b_W per layer and sample. "
        "Baseline: the Python loop over samples in this script (torch.randn weights, explicit softmax). "
        "stochformer: `run_simulate(cfg)` (tokens drawn, statistics recorded, defaults: exact draws, "
        f"`rng = auto`). Times are medians of {rep['repeats']} runs (different seeds).",
        "",
        "| size | baseline (s) | stochformer (s) | speed-up | target | float32 draws, opt-in (s) | speed-up |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rep["results"]:
        med = r["median_s"]
        lines.append(
            f"| {size_txt(r['size'])} | {med['baseline']:.3f} | {med['stochformer']:.3f} | **{r['speedup']:.1f}×** | "
            f"{r['target']:.0f}× | {med['stochformer, float32 draws (opt-in)']:.3f} | {r['speedup_float32_draws']:.1f}× |"
        )
    lines += [
        "",
        "Same law: log(1 − mean pairwise cosine) of the final tokens (the log-distance to synchronisation), "
        "mean ± SE over all samples of all repeats and one extra untimed repeat; |z| < 4 to agree:",
        "",
    ]
    for r in rep["results"]:
        for key, name in (("law_check", "stochformer"), ("law_check_float32_draws", "float32 draws")):
            c = r[key]
            lines.append(
                f"- {size_txt(r['size'])}, {name}: baseline {c['baseline'][0]:.3f} ± {c['baseline'][1]:.3f}, "
                f"{name} {c['ours'][0]:.3f} ± {c['ours'][1]:.3f}, z = {c['z']:+.2f} ({'agree' if c['agree'] else 'DISAGREE'})"
            )
    roof, last = rep["roofline"], rep["results"][-1]
    lines += [
        "",
        f"Roofline at {size_txt(last['size'])}: one run must draw {roof['normals'] / 1e6:.1f} M float64 normals and "
        f"do {roof['flops'] / 1e9:.2f} GFLOP of matrix products (stochformer's exact sampler: "
        "`RandomMLP.cost` per layer and sample, plus attention). Measured here:",
        "",
        f"- float64 matmul: {rep['matmul_gflops']:.1f} GFLOP/s",
        *[f"- {k}: {v:.0f} M normals/s" + (" (fastest)" if k == rep["fastest_sampler"] else "") for k, v in rep["samplers_M_per_s"].items()],
        "",
        f"Bound = {roof['normals_s']:.3f} s (normals at the fastest sampler) + {roof['flops_s']:.3f} s (flops at the "
        f"matmul rate) = **{roof['bound_s']:.3f} s**; achieved {roof['achieved_s']:.3f} s, i.e. "
        f"**{100 * roof['fraction']:.0f}% of the bound** (target 40%). The run's batched products are "
        f"smaller than the 2048² product that sets the rate: its largest, ΦΦᵀ, runs at {last['bmm_gflops']:.1f} "
        f"GFLOP/s here, which alone makes the products take {roof['flops_s_at_bmm_rate']:.3f} s.",
        "",
        "Targets:",
        "",
    ]
    for r in rep["results"]:
        met = r["speedup"] >= r["target"]
        lines.append(
            f"- {size_txt(r['size'])}: {r['speedup']:.1f}× against the target {r['target']:.0f}× "
            f"({'met' if met else 'NOT met'}). Exact-draw bound at this size: {r['work']['normals'] / 1e6:.1f} M "
            f"normals and {r['work']['flops'] / 1e9:.2f} GFLOP take at least {r['bound_s']:.3f} s at the rates above, "
            f"so no exact float64 implementation can be more than {r['max_speedup']:.1f}× faster than this baseline "
            f"here; the float32-draw opt-in reaches {r['speedup_float32_draws']:.1f}×."
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
