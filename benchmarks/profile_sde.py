"""Where one step of the limit SDE spends its time, for the two problems of
``benchmarks/bench_field.py`` (random-feature field, exact field; projected Euler, ReLU, float64)
and each sampler of the field's normals (``rng = torch``, ``parallel``).

    python benchmarks/profile_sde.py                       # the benchmark's sizes, 20 profiled steps
    python benchmarks/profile_sde.py --problem exact --rng parallel --steps 50
    python benchmarks/profile_sde.py --quick --out /tmp/p.json   # smallest sizes (a smoke test)

The model is the one ``run_simulate`` builds (``make_model``). After a warm-up, the wall time of
one step (``LimitSDE.step`` and its ``Draws``; no profiler) is the median over the timed steps of
their mean in 5 groups; the per-step cost of ``solve`` itself (its checks and records on top) is
timed apart. Then the same steps run under ``torch.profiler``, with the library's pieces labelled
(``record_function`` around them, put there by this script only) and every torch operation charged
to the innermost labelled piece it runs in:

- features product: ``[u/√d; b]ᵀ [x, 1]ᵀ`` (``RandomFeatureField._features_t``, less φ);
- φ: the activation applied to it;
- product with the normals: Zᵀ Φᵀ (``torch.matmul``), and root × normals: K^{1/2} Ξ (exact field);
- field scales: the rest of the field's increment (the scales, B⁰, buffers);
- normals: ``Draws.brownian``, as a whole (wall time: the parallel sampler fills its streams on
  threads outside torch's operations);
- attention: the attention's call (softmax attention, its products);
- Gram/κ: ``ExactField.covariance``; root: ``noise._eigh`` (the symmetric root's ``eigh``), as a
  whole (wall time: small problems are factorised on the worker threads);
- projection and update: everything else in the step (the tangent projections, the Itô
  correction, the Euler update, the normalisation, the finiteness checks of the parts' outputs).

``solve, per step`` is a run of ``solve`` of as many steps, divided by them (its start included;
after a first call of one step).

Python overhead = the step's wall time (without the profiler) − the sum of the parts. Times in
milliseconds per step; the table is printed and the JSON written to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import stochformer  # noqa: E402, F401  (before torch: its OpenMP settings apply, as in a run from the CLI)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402
from checkouts import recorded_command  # noqa: E402
from stochformer.config import RunConfig  # noqa: E402
from stochformer.config.build import make_model  # noqa: E402
from stochformer.core.brownian import Draws, step_draws  # noqa: E402
from stochformer.core.runtime import make_generator  # noqa: E402
from stochformer.core.sphere import uniform  # noqa: E402
from stochformer.integrate import SaveAt, solve  # noqa: E402
from stochformer.model import noise as noise_module  # noqa: E402
from stochformer.model.noise import ExactField, RandomFeatureField  # noqa: E402
from stochformer.model.sde import LimitSDE  # noqa: E402

T = 5.0
#: the problems of bench_field.py: full and smoke-test sizes
SIZES = {
    "features": (dict(features=1024, batch=128, N=64, d=8, L=250), dict(features=32, batch=4, N=8, d=4, L=5)),
    "exact": (dict(batch=128, N=32, d=8, L=250), dict(batch=4, N=8, d=4, L=5)),
}
PARTS = ["features product", "φ", "product with the normals", "root × normals", "field scales", "normals", "attention",
         "Gram/κ", "root", "projection and update"]


def config(problem: str, size: dict, rng: str) -> RunConfig:
    """The run of bench_field.py's ``problem`` at ``size`` with the field's sampler ``rng``."""
    noise: dict[str, Any] = {"noise": "random_features", "features": size["features"]} if problem == "features" else {"noise": "exact"}
    return RunConfig(dynamics="sde", integrator="euler", batch=size["batch"], N=size["N"], d=size["d"], L=size["L"], T=T,
                     activation="relu", rng=rng, seed=1, **noise)


@contextlib.contextmanager
def labelled(model: LimitSDE) -> Iterator[None]:
    """Each piece of the step runs inside ``record_function(label)`` (patched in, restored after)."""
    targets = [(Draws, "brownian", "normals"), (RandomFeatureField, "_features_t", "features"),
               (RandomFeatureField, "increment", "field"), (ExactField, "covariance", "gram"), (noise_module, "_eigh", "root"),
               (ExactField, "increment", "exact"), (LimitSDE, "step", "step")]
    if model.attention is not None:
        targets.append((type(model.attention), "__call__", "attention"))
    # what each owner held itself (None: a class inheriting it), put back after
    saved = [(owner, name, vars(owner).get(name)) for owner, name, _ in targets]

    def wrap(fn: Any, label: str) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with record_function(label):
                return fn(*args, **kwargs)
        return inner

    try:
        for owner, name, label in targets:
            setattr(owner, name, wrap(getattr(owner, name), label))
        yield
    finally:
        for owner, name, fn in saved:
            if fn is None:
                delattr(owner, name)
            else:
                setattr(owner, name, fn)


LABELS = {"normals", "features", "field", "gram", "root", "exact", "step", "attention"}
#: the pieces charged their whole (wall) time: their work runs partly on worker threads
WHOLE = ("normals", "root")


def part_of(label: str, op: str) -> str:
    """The part an operation ``op`` run directly inside the piece ``label`` is charged to."""
    products = ("aten::bmm", "aten::matmul", "aten::mm")
    return {
        "features": "φ" if "relu" in op else "features product",
        "field": "product with the normals" if op in products else "field scales",
        "exact": "root × normals" if op in products else "field scales",
        "gram": "Gram/κ", "root": "root", "attention": "attention",
    }.get(label, "projection and update")


def charge(events: Any) -> dict[str, float]:
    """Microseconds per part from the profiler's events: the labelled pieces' outermost operations
    by `part_of`; ``normals`` and ``root`` as their wall time."""
    parts = dict.fromkeys(PARTS, 0.0)
    for e in events:
        if e.name in WHOLE:
            parts[e.name] += e.cpu_time_total
            continue
        if e.name in LABELS or e.cpu_parent is None or e.cpu_parent.name not in LABELS:
            continue  # a label, an operation outside the step, or one inside another operation
        label = e.cpu_parent.name
        if label in WHOLE:
            continue
        parts[part_of(label, e.name)] += e.cpu_time_total
    return parts


def time_steps(model: LimitSDE, X: torch.Tensor, g: torch.Generator, dt: float, steps: int) -> tuple[float, torch.Tensor]:
    """Seconds per step: the median over 5 groups of the mean step of each; the last state."""
    groups = min(5, steps)
    per = []
    for j in range(groups):
        n = steps // groups + (j < steps % groups)
        start = time.perf_counter()
        for k in range(n):
            X = model.step(X, dt, step_draws(g, None, k, n))
        per.append((time.perf_counter() - start) / n)
    return statistics.median(per), X


def profile_one(problem: str, size: dict, rng: str, steps: int, warmup: int) -> dict:
    """One problem and sampler: wall time per step, per part, the Python overhead (ms), and solve's
    time per step."""
    cfg = config(problem, size, rng)
    model = make_model(cfg)
    assert isinstance(model, LimitSDE)
    B, N, d = size["batch"], size["N"], size["d"]
    dt = T / size["L"]
    X = uniform(B, N, d, generator=make_generator(0), dtype=torch.float64)
    g = make_generator(1)
    model.reset(B, d, g, torch.float64, "cpu")
    for k in range(warmup):
        X = model.step(X, dt, step_draws(g, None, k, warmup))

    def run_solve(n: int) -> float:
        start = time.perf_counter()
        solve(model, uniform(B, N, d, generator=make_generator(0), dtype=torch.float64), dt * n, n, SaveAt(stats=()), seed=1)
        return (time.perf_counter() - start) / n

    run_solve(1)  # its first call imports and builds what later calls reuse
    model.reset(B, d, g, torch.float64, "cpu")
    wall, X = time_steps(model, X, g, dt, steps)
    # the profiler's first step (its own start) is left out: one warm-up step, then the steps
    charged: list[dict[str, float]] = []
    with labelled(model), profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                                  on_trace_ready=lambda p: charged.append(charge(p.events()))) as prof:
        for k in range(steps + 1):
            if k == 1:
                start = time.perf_counter()
            X = model.step(X, dt, step_draws(g, None, k, steps + 1))
            prof.step()
        profiled = (time.perf_counter() - start) / steps
    parts = {k: v / steps / 1e3 for k, v in charged[0].items()}
    per_solve = run_solve(steps)
    used = {k: v for k, v in parts.items() if v > 0}
    return {"size": size, "rng": rng, "steps": steps, "threads": torch.get_num_threads(), "step_ms": 1e3 * wall,
            "step_under_profiler_ms": 1e3 * profiled, "solve_step_ms": 1e3 * per_solve, "parts_ms": used,
            "python_overhead_ms": 1e3 * wall - sum(used.values())}


def table(problem: str, runs: dict[str, dict]) -> str:
    """The parts of each sampler's step side by side (ms per step, % of the step)."""
    rngs = list(runs)
    head = f"{problem}: " + ", ".join(f"{k} = {v}" for k, v in next(iter(runs.values()))["size"].items() if k != "L")
    lines = [head, "| part | " + " | ".join(f"rng = {r}" for r in rngs) + " |", "|---|" + "---|" * len(rngs)]
    names = [p for p in PARTS if any(p in runs[r]["parts_ms"] for r in rngs)]

    def cell(r: str, ms: float) -> str:
        return f"{ms:.2f} ms ({100 * ms / runs[r]['step_ms']:.0f}%)"

    for p in names:
        lines.append(f"| {p} | " + " | ".join(cell(r, runs[r]["parts_ms"].get(p, 0.0)) for r in rngs) + " |")
    lines.append("| Python overhead | " + " | ".join(cell(r, runs[r]["python_overhead_ms"]) for r in rngs) + " |")
    lines.append("| step (wall, no profiler) | " + " | ".join(f"{runs[r]['step_ms']:.2f} ms" for r in rngs) + " |")
    lines.append("| step under the profiler | " + " | ".join(f"{runs[r]['step_under_profiler_ms']:.2f} ms" for r in rngs) + " |")
    lines.append("| solve, per step | " + " | ".join(f"{runs[r]['solve_step_ms']:.2f} ms" for r in rngs) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=["features", "exact", "both"], default="both")
    parser.add_argument("--rng", choices=["torch", "parallel", "both"], default="both", help="the field's sampler")
    parser.add_argument("--steps", type=int, default=20, help="steps timed, and steps profiled (>= 1)")
    parser.add_argument("--warmup", type=int, default=3, help="steps before timing (>= 0)")
    parser.add_argument("--quick", action="store_true", help="the smallest sizes, 3 steps (a smoke test)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "profile_sde.json")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: must be an integer >= 1 (got {args.steps})")
    if args.warmup < 0:
        parser.error(f"--warmup: must be an integer >= 0 (got {args.warmup})")
    steps = 3 if args.quick else args.steps
    problems = ["features", "exact"] if args.problem == "both" else [args.problem]
    rngs = ["torch", "parallel"] if args.rng == "both" else [args.rng]
    result: dict[str, Any] = {
        "benchmark": "profile_sde", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores", "platform": platform.platform(),
        "torch": torch.__version__, "load_before": os.getloadavg()[0],
        "command": recorded_command("benchmarks/profile_sde.py", argv if argv is not None else sys.argv[1:]), "problems": {}}
    for problem in problems:
        size = SIZES[problem][1 if args.quick else 0]
        runs = {rng: profile_one(problem, size, rng, steps, args.warmup) for rng in rngs}
        result["problems"][problem] = runs
        print(table(problem, runs) + "\n")
    result["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
