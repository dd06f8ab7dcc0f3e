"""Random-batch attention in the mean-field particle solver (SPEC §4): time per step up to 10⁶
tokens, and its error against the exact attention, beside the particle spread.

    python benchmarks/bench_random_batch.py            # writes "## Random-batch attention" of docs/benchmarks.md
    python benchmarks/bench_random_batch.py --quick --no-write --out /tmp/rb.json
    python benchmarks/bench_random_batch.py --device cuda --sizes 1000000 10000000 --error-N 100000 \
        --out DIR/bench_random_batch_cuda.json --no-doc   # a GPU: the issue's 10⁷ tokens per second

Time: one particle step (Euler, the random-feature field of 256 features, d = 16, float64, β = 1)
at each N, with random batches of p tokens and, up to ``--exact-up-to`` tokens, with the exact
chunked attention; the median of ``--steps`` steps after one warm-up step, in this process
(``--device cuda``: on the GPU, synchronised around each timed call; without one, exit 0 and a note).

Error: from one uniform cloud of N tokens, ``--error-steps`` steps to T = 1 driven by the same field
and the same noise draws (the batches come from the attention's own generator), the exact run and
one run per p. The quantity is the final mean cosine m = |N⁻¹ Σ x_i|² = N⁻² Σ_ij ⟨x_i, x_j⟩; the
error is |m_p − m_exact|. The particle spread is the standard deviation of m over ``--clouds``
independent initial clouds with the exact attention and the same field: the O(N^{-1/2}) noise that
any N-particle estimate of the mean-field m carries. The random-batch error is useful where it is
well below that spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

from stochformer.config import RunConfig  # noqa: E402
from stochformer.config.build import make_field, make_particles  # noqa: E402
from stochformer.core.sphere import uniform  # noqa: E402
from stochformer.model.attention import start_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Random-batch attention"
D, FEATURES = 16, 256


#: where the runs go (``--device``)
DEVICE = torch.device("cpu")


def _config(N: int, p: int | None, steps: int) -> RunConfig:
    return RunConfig(N=N, d=D, dynamics="sde", noise="random_features", features=FEATURES, integrator="euler",
                     T=1.0, L=steps, beta=1.0, attention_batch=p, device=str(DEVICE))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _timed(fn) -> float:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def time_step(N: int, p: int | None, steps: int) -> tuple[float, float]:
    """Median seconds of one particle step and of its attention alone at N tokens (p = None: exact)."""
    cfg = _config(N, p, 10)
    g = _generator(0)
    X = uniform(1, N, D, generator=g, device=DEVICE)
    field = make_field(cfg, 1, g, token_chunk=4096, device=DEVICE)
    stepper = make_particles(cfg, field, N, device=DEVICE)
    start_run(stepper.attention, 1, D, g, X.dtype, X.device)  # the batches' stream of the run of seed 0
    step, attention = [], []
    for _ in range(steps + 1):
        step.append(_timed(lambda: stepper.step(X, cfg.dt, g)))
        attention.append(_timed(lambda: stepper.attention(X)))
    return statistics.median(step[1:]), statistics.median(attention[1:])


def final_cosine(N: int, p: int | None, steps: int, cloud_seed: int) -> float:
    """m at T = 1 from the cloud of ``cloud_seed``, the field and the noise of seed 0."""
    cfg = _config(N, p, steps)
    field = make_field(cfg, 1, _generator(0), token_chunk=4096, device=DEVICE)
    stepper = make_particles(cfg, field, N, device=DEVICE)
    X = uniform(1, N, D, generator=_generator(1000 + cloud_seed), device=DEVICE)
    g = _generator(0)
    start_run(stepper.attention, 1, D, g, X.dtype, X.device)  # the batches' stream of the run of seed 0
    for _ in range(steps):
        X = stepper.step(X, cfg.dt, g)
    return float((X.mean(-2) ** 2).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--ps", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per size (after one warm-up step)")
    ap.add_argument("--exact-up-to", type=int, default=100_000, help="largest N timed with the exact attention")
    ap.add_argument("--error-N", type=int, default=10_000)
    ap.add_argument("--error-steps", type=int, default=20)
    ap.add_argument("--clouds", type=int, default=4, help="independent clouds for the particle spread")
    ap.add_argument("--quick", action="store_true", help="smallest sizes (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_random_batch.json")
    ap.add_argument("--no-write", action="store_true", help="print only: no docs section, no JSON file")
    ap.add_argument("--no-doc", action="store_true", help="the JSON file only, no docs section (e.g. a GPU run)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        print("bench_random_batch: no CUDA device here; nothing measured")
        return
    if args.quick:
        args.sizes, args.ps, args.steps, args.exact_up_to = [2000], [16, 32], 1, 2000
        args.error_N, args.error_steps, args.clouds = 500, 4, 2

    load_before = os.getloadavg()[0]
    timing = []
    for N in args.sizes:
        row = {"N": N, "p": {str(p): dict(zip(("step_s", "attention_s"), time_step(N, p, args.steps))) for p in args.ps}}
        exact = time_step(N, None, args.steps) if N <= args.exact_up_to else None
        row["exact"] = None if exact is None else dict(zip(("step_s", "attention_s"), exact))
        timing.append(row)
        print(json.dumps(row), flush=True)

    clouds = [final_cosine(args.error_N, None, args.error_steps, c) for c in range(args.clouds)]
    spread = statistics.stdev(clouds)
    errors = {str(p): abs(final_cosine(args.error_N, p, args.error_steps, 0) - clouds[0]) for p in args.ps}
    result = {
        "benchmark": "bench_random_batch", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu", "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(), "command": " ".join(["python", "benchmarks/bench_random_batch.py", *sys.argv[1:]]),
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "d": D, "features": FEATURES, "beta": 1.0, "timing": timing,
        "error": {"N": args.error_N, "steps": args.error_steps, "m_exact": clouds[0], "spread": spread,
                  "clouds": args.clouds, "abs_error": errors},
    }

    lines = [SECTION, "",
             f"`{result['command']}` on {result['processor']}, {result['threads']} threads, {result['date']}, "
             f"load average {result['load_before']:.1f} before and {result['load_after']:.1f} after. "
             f"One mean-field particle step (Euler, random-feature field of {FEATURES} features, d = {D}, float64, β = 1); "
             "each token attends to its p − 1 batch-mates of a random partition redrawn every step "
             "(`attention_batch = p`, Jin–Li–Liu; SPEC §4).", "",
             "Each cell: the whole step / its attention alone (median of the timed steps).", "",
             "| N | " + " | ".join(f"p = {p}" for p in args.ps) + " | exact |",
             "|---|" + "---|" * (len(args.ps) + 1)]

    def cell(t: dict | None) -> str:
        return "—" if t is None else f"{t['step_s']:.3g} s / {t['attention_s']:.3g} s"

    for row in timing:
        lines.append(f"| {row['N']:,} | " + " | ".join(cell(row["p"][str(p)]) for p in args.ps) + f" | {cell(row['exact'])} |")
    err = result["error"]
    lines += ["", f"Error at N = {err['N']:,} after {err['steps']} steps to T = 1, same field and noise: the final "
              f"mean cosine m = |N⁻¹ Σ x_i|² is {err['m_exact']:.5f} with exact attention; the particle spread "
              f"(sd of m over {err['clouds']} independent clouds) is {spread:.2e}.", "",
              "| p | error of m | error / spread |", "|---|---|---|"]
    lines += [f"| {p} | {errors[str(p)]:.2e} | {errors[str(p)] / spread:.2f} |" for p in args.ps]
    lines += ["", "Random batches leave out each token's own term, which the exact attention weighs by about "
              f"e^β/N ({math.e / args.error_N:.0e} here): a floor of that order under the batch error, not separated "
              "from it in this run."]
    publish(DOC, SECTION, "\n".join(lines) + "\n", write=not (args.no_write or args.no_doc))
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
