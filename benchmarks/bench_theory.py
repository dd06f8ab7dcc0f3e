"""The exact two-token theory (stochformer.theory, SPEC §8): time per query and accuracy.

    python benchmarks/bench_theory.py             # writes the "Pair theory" section of docs/benchmarks.md
    python benchmarks/bench_theory.py --no-write  # prints only

For each case (activation, d, σ_U = σ_W = σ, attention β and v): the time to build the
:class:`~stochformer.theory.PairDiffusion` (kernel evaluations and panels) and the time of one
query (p_antipodal, the sync-time moments, the stationary law), minima over repeats on one core;
the largest relative difference of every query from a refined grid (twice the panels, 24 nodes
instead of 16, span 30 instead of 25); the error of p_antipodal and of S against the closed form
arccos(z)/π, arcsin z of the linear kernel; and for the law of z_t the time of E[z_t] and E[E_β]
(Richardson over two chains) and their difference from three chains (h, h/2, h/4).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stochformer.model.kernel import NoiseKernel
from stochformer.theory import PairDiffusion, energy_decay_rate, expectation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Pair theory (SPEC §8)"

CASES = [
    ("linear", 4, 0.0, 1.0, 0.0), ("relu", 3, 0.0, 1.0, 0.0), ("relu", 2, 0.0, 1.0, 0.0), ("relu", 64, 0.1, 1.0, 0.0),
    ("tanh", 8, 0.0, 3.0, 1.0), ("erf", 6, 0.0, 2.0, 0.5), ("silu", 5, 0.1, 1.0, -1.0), ("relu", 4, 0.5, 1.0, -2.0),
    ("tanh", 128, 0.1, 1.0, -1.0),
]
Z = np.array([-0.999, -0.5, 0.0, 0.3, 0.9, 0.999999])


def best(fn, repeats: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def rel(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300))) if ok.any() else 0.0


def case_row(act: str, d: int, sigma: float, beta: float, v: float, repeats: int) -> dict:
    k = NoiseKernel(act, d, sigma, sigma)
    t_build, pair = best(lambda: PairDiffusion(k, beta, v), repeats)
    fine = PairDiffusion(k, beta, v, span=30.0, resolution=4.0, nodes=24)
    both = pair.diagonal.attracting and pair.antipode.attracting
    t_p, p = best(lambda: pair.p_antipodal(0.3), repeats)
    t_s, s = best(lambda: pair.sync_time(0.3, 1e-3), repeats)
    t_st, st = best(lambda: pair.stationary(), repeats)
    errs = {"p": rel(pair.p_antipodal(Z), fine.p_antipodal(Z)) if both else math.nan,
            "scale": rel(pair.scale(Z), fine.scale(Z))}
    e_s = []
    for z0, eps in ((0.3, 1e-3), (-0.99, 1e-6)):
        a, b = pair.sync_time(z0, eps), fine.sync_time(z0, eps)
        e_s.append(rel([a.mean_given, a.sd_given, a.p_reach], [b.mean_given, b.sd_given, b.p_reach]))
    errs["sync"] = max(e_s)
    fst = fine.stationary()
    errs["stat"] = rel([st.mean, st.sd, *st.pdf(Z)], [fst.mean, fst.sd, *fst.pdf(Z)]) if st.exists else math.nan
    closed = math.nan
    if act == "linear" and sigma == 0 and v == 0:
        closed = max(rel(pair.p_antipodal(Z), np.arccos(Z) / np.pi), rel(pair.scale(Z[Z != 0]), np.arcsin(Z[Z != 0])))
    return {"case": f"{act}, d={d}, σ={sigma:g}, β={beta:g}, v={v:g}", "panels": pair.panels.panels, "build": t_build,
            "t_p": t_p, "t_sync": t_s, "t_stat": t_st, "closed": closed, **errs,
            "ends": f"{pair.diagonal.kind} / {pair.antipode.kind}", "p_value": p, "sync_value": s.mean_given}


def law_row(act: str, d: int, sigma: float, beta: float, v: float) -> dict:
    pair = PairDiffusion(NoiseKernel(act, d, sigma, sigma), beta, v)
    t = time.perf_counter()
    m2 = expectation(pair, lambda z: z, [1.0, 5.0], z0=0.3, levels=2)
    t_mean = time.perf_counter() - t
    m3 = expectation(pair, lambda z: z, [1.0, 5.0], z0=0.3, levels=3)
    t = time.perf_counter()
    r = energy_decay_rate(pair, 1.0)
    t_rate = time.perf_counter() - t
    return {"case": f"{act}, d={d}, σ={sigma:g}, β={beta:g}, v={v:g}", "t_mean": t_mean, "err_mean": rel(m2, m3),
            "t_rate": t_rate, "rate": r.rate, "kind": r.kind, "bound": r.lambda_bar_prime}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    rows = [case_row(*c, repeats=args.repeats) for c in CASES]
    laws = [law_row(*c) for c in CASES[1:5]]
    load1 = os.getloadavg()[0]
    lines = [SECTION, "",
             f"`python benchmarks/bench_theory.py` on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
             f"(1 thread), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load0:.1f} before, {load1:.1f} "
             f"after (times are minima over {args.repeats} repeats). Queries of "
             "`PairDiffusion` (docs/theory.md): build = kernel evaluations and panels; p = `p_antipodal(0.3)`, "
             "sync = `sync_time(0.3, 1e-3)`, stationary = `stationary()`. Errors: largest relative difference from a "
             "refined grid (twice the panels, 24 nodes, span 30) over z ∈ {−0.999, −0.5, 0, 0.3, 0.9, 1 − 1e-6} "
             "(p_antipodal, S), the sync-time moments from (0.3, ε = 1e-3) and (−0.99, 1e-6), and the stationary "
             "mean, sd and density; closed = against arccos(z)/π and arcsin z (linear kernel). The stated "
             "tolerance is 1e-8 (`stochformer.theory.TOLERANCE`, checked by tests/test_theory.py).", "",
             "| case | ends (z = 1 / z = −1) | panels | build (ms) | p (ms) | sync (ms) | stationary (ms) "
             "| err p | err S | err sync | err stationary | err closed form |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def e(x: float) -> str:
        return "—" if not math.isfinite(x) else f"{x:.1e}"

    for r in rows:
        lines.append(f"| {r['case']} | {r['ends']} | {r['panels']} | {1e3 * r['build']:.1f} | {1e3 * r['t_p']:.2f} | "
                     f"{1e3 * r['t_sync']:.2f} | {1e3 * r['t_stat']:.2f} | {e(r['p'])} | {e(r['scale'])} | {e(r['sync'])} | "
                     f"{e(r['stat'])} | {e(r['closed'])} |")
    lines += ["", "The law of z_t (backward equation on the birth–death chain, Richardson over the chains of "
              "width h and h/2): time of E[z_t] at t ∈ {1, 5} from z0 = 0.3, its difference from three chains "
              "(h, h/2, h/4), and the time of the long-time energy rate (top eigenvalue of two chains).", "",
              "| case | E z_t (s) | difference from 3 chains | rate (s) | rate | set by | ε + λ̄' |",
              "|---|---:|---:|---:|---:|---|---:|"]
    for r in laws:
        lines.append(f"| {r['case']} | {r['t_mean']:.2f} | {e(r['err_mean'])} | {r['t_rate']:.2f} | {r['rate']:.5g} | "
                     f"{r['kind']} | {r['bound']:.5g} |")
    publish(DOC, SECTION, "\n".join(lines) + "\n", write=not args.no_write)


if __name__ == "__main__":
    main()
