"""Float32 against float64: do the paper's statistics survive, and what does each precision save?

    python benchmarks/precision.py               # writes the "Precision" section of docs/benchmarks.md
    python benchmarks/precision.py --quick --no-write   # small sizes, a smoke test
    python benchmarks/precision.py --reports QUICK_DIR QUICK32_DIR   # the report's verdicts, quick against quick32

Three precisions of the discrete transformer (SPEC §1), at small sizes where each statistic is
measurable with a clear standard error:

- ``float64``: the default;
- ``float32 draws``: ``draw_precision = "float32"`` (the MLP's normals drawn in float32, the state
  in float64);
- ``float32``: ``dtype = "float32"`` end to end (state, draws, products and statistics).

Statistics (each with its SE, beside the closed form where there is one):

- λ₁ (Benettin pairs, ``sync.measure_lyapunov``) at pair separations eps = 1e-4 (the default) and
  1e-6 (a few float32 ulps of a unit token: where float32 must fail);
- the energy rate near synchronisation (``sync``'s cluster run) at spreads 1e-3 (the default,
  1 − cosine ≈ 1e-6) and 1e-5 (1 − cosine ≈ 1e-10, below float32's resolution 6e-8);
- the energy rate from uniform tokens (no closed form; Theorem 1.4 bounds it by λ̄');
- the one-point motion E⟨x₀, x_t⟩ = e^{−κ(1)(d−1)t/2} (SPEC §3, the Itô drift of one token);
- the convergence exponents in L and in m of Theorem 1.1 (``converge``, a small grid).

Each float32 value is compared with the float64 value (z of the difference, runs with different
seeds) and with the prediction. Times are wall times of each measurement in this process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

from stochformer.config.build import make_model  # noqa: E402
from stochformer.config import InitConfig, RunConfig  # noqa: E402
from stochformer.experiments.converge import ConvergeConfig, run_converge  # noqa: E402
from stochformer.experiments.sync import energy_paths, measure_lyapunov, moment_rate, near_sync_horizon, predicted_rates  # noqa: E402
from stochformer.model.kernel import NoiseKernel  # noqa: E402
from stochformer.core.runtime import DTYPES, make_generator  # noqa: E402
from stochformer.integrate import SaveAt, solve  # noqa: E402
from stochformer.core.sphere import uniform  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Precision: float32 against float64"
REPORT_SECTION = "## Precision: the report in float32 (quick32 against quick)"
PRECISIONS = {"float64": {}, "float32 draws": {"draw_precision": "float32"}, "float32": {"dtype": "float32"}}
#: the model: the paper's scenario grid at d = 5, σ_U = σ_W = 0.1, ReLU, no attention
BASE = dict(d=5, sigma_U=0.1, sigma_W=0.1, activation="relu", attention=False, m=256, T=5.0, L=100)


def one_point(cfg: RunConfig, seed: int) -> tuple[float, float]:
    """E⟨x₀, x_T⟩ over samples (tokens averaged within a sample): mean and SE."""
    device, dtype = torch.device(cfg.device), DTYPES[cfg.dtype]
    gen = make_generator(seed, device)
    X0 = uniform(cfg.batch, cfg.N, cfg.d, generator=gen, dtype=dtype, device=device)
    XT = torch.from_numpy(solve(make_model(cfg, dtype, device), X0, cfg.T, cfg.L, SaveAt(stats=()), generator=gen)["X_final"].values)
    c = (X0.double() * XT).sum(-1).mean(-1)
    return float(c.mean()), float(c.std() / math.sqrt(len(c)))


def measurements(quick: bool) -> dict[str, dict]:
    """name → {run(cfg, seed) → (value, se), cfg, prediction}."""
    pairs, batch, conv_batch = (64, 32, 16) if quick else (1024, 256, 128)
    base = RunConfig(**BASE, N=16, batch=batch)
    pred = predicted_rates(base)
    kappa = NoiseKernel("relu", base.d, base.sigma_U, base.sigma_W).kappa1
    T_near = near_sync_horizon(pred["kappa"], pred["kappa_prime"])
    near = base.with_updates(T=T_near, L=max(2, math.ceil(base.L * T_near / base.T)))
    times = lambda c: np.arange(c.L + 1) * c.dt  # noqa: E731

    def lyapunov(eps: float):
        def run(cfg: RunConfig, seed: int):
            r = measure_lyapunov(cfg, pairs, eps, seed)
            return r["lambda_1"], r["lambda_1_se"]
        return run

    def energy_near(spread: float):
        def run(cfg: RunConfig, seed: int):
            return moment_rate(times(cfg), energy_paths(cfg, InitConfig(kind="cluster", spread=spread), seed), n_boot=200, seed=seed)
        return run

    def energy_uniform(cfg: RunConfig, seed: int):
        t = times(cfg)
        return moment_rate(t, energy_paths(cfg, InitConfig(kind="uniform"), seed), t >= 0.5 * cfg.T, n_boot=200, seed=seed)

    one = base.with_updates(N=8, batch=4 * batch, T=1.0, L=200)
    conv = RunConfig(**{k: v for k, v in BASE.items() if k not in ("m", "L", "T")}, N=8, T=1.0, batch=conv_batch)

    def converge(key: str):
        def run(cfg: RunConfig, seed: int):
            grid = ConvergeConfig(model=cfg.model_copy(update={"seed": seed}), samples_per_task=conv_batch,
                                  depths=[4, 8, 16, 32] if quick else [8, 16, 32, 64], widths=[16, 64, 256],
                                  refine=2 if quick else 4, bootstrap=200)
            f = run_converge(grid).fits[key]
            return f["value"], f["se"]
        return run

    return {
        "λ₁, eps = 1e-4": dict(run=lyapunov(1e-4), cfg=base, predicted=pred["lambda_1_pred"]),
        "λ₁, eps = 1e-6": dict(run=lyapunov(1e-6), cfg=base, predicted=pred["lambda_1_pred"]),
        "energy rate near sync, spread 1e-3": dict(run=energy_near(1e-3), cfg=near, predicted=pred["lambda_bar_pred"]),
        "energy rate near sync, spread 1e-5": dict(run=energy_near(1e-5), cfg=near, predicted=pred["lambda_bar_pred"]),
        "energy rate from uniform": dict(run=energy_uniform, cfg=base, predicted=None),
        "one-point motion E⟨x₀, x_1⟩": dict(run=one_point, cfg=one, predicted=math.exp(-kappa * (one.d - 1) * one.T / 2)),
        "convergence exponent in L": dict(run=converge("exponent_L"), cfg=conv, predicted=1.0),
        "convergence exponent in m": dict(run=converge("exponent_m"), cfg=conv, predicted=1.0),
        "energy rate near sync, spread 1e-7": dict(run=energy_near(1e-7), cfg=near, predicted=pred["lambda_bar_pred"]),
    }


def z(a: float, sa: float, b: float, sb: float = 0.0) -> float:
    s = math.hypot(sa, sb)
    return (a - b) / s if s > 0 else (0.0 if a == b else math.inf)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the script")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--only", default=None, help="run only the statistics whose name contains this text")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="replace a config field of every run (e.g. noise=mlp: explicit weights)")
    parser.add_argument("--reports", nargs=2, type=Path, metavar=("QUICK", "QUICK32"),
                        help="compare two report folders (stochformer reproduce --profile quick / quick32) instead")
    args = parser.parse_args(argv)
    if args.reports:
        publish(DOC, REPORT_SECTION, compare_reports(*args.reports), write=not args.no_write)
        return
    started, load_before = time.time(), os.getloadavg()[0]
    rows = []
    for i, (name, m) in enumerate(measurements(args.quick).items()):
        if args.only and args.only not in name:
            continue
        row = {"name": name, "predicted": m["predicted"], "values": {}}
        for j, (prec, upd) in enumerate(PRECISIONS.items()):
            cfg = m["cfg"].model_copy(update={**upd, **dict(o.split("=", 1) for o in args.overrides)})
            start = time.perf_counter()
            value, se = m["run"](cfg, args.seed + 1000 * i + j)
            row["values"][prec] = {"value": value, "se": se, "time_s": time.perf_counter() - start}
        print(json.dumps(row))
        rows.append(row)
    rep = {"rows": rows, "load": [load_before, os.getloadavg()[0]], "wall_s": time.time() - started,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
           "command": "python benchmarks/precision.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    publish(DOC, SECTION, markdown(rep), write=not (args.no_write or args.quick))


def compare_reports(quick: Path, quick32: Path) -> str:
    """Section by section: rows that hold and wall time in each report; every row whose verdict differs."""
    reports = [json.loads((d / "results.json").read_text()) for d in (quick, quick32)]
    sections = [{s["name"]: s for s in r["sections"] if s.get("status") == "computed"} for r in reports]
    lines = [
        REPORT_SECTION, "",
        f"`stochformer reproduce --profile quick` and `--profile quick32` (the same sizes, dtype = float32), "
        f"{reports[1]['created']}, the sections that have a dtype; the machine was shared (load average 15–23), so the "
        "wall times are inflated and only roughly comparable. Rows that hold (of all rows):", "",
        "| section | quick (float64) | quick32 (float32) | wall time (s): quick, quick32 |", "| --- | ---: | ---: | --- |",
    ]
    differ = []
    for name in [n for n in sections[0] if n in sections[1]]:
        a, b = sections[0][name], sections[1][name]
        held = [sum(c["verdict"] == "holds" for c in x["comparisons"]) for x in (a, b)]
        lines.append(f"| {name} | {held[0]} of {len(a['comparisons'])} | {held[1]} of {len(b['comparisons'])} | "
                     f"{a['elapsed_s']:.0f}, {b['elapsed_s']:.0f} |")
        for ca, cb in zip(a["comparisons"], b["comparisons"]):
            if ca["verdict"] != cb["verdict"]:
                differ.append(f"- {name}, {ca['quantity']} (predicted {ca['predicted']:.4g}): quick {ca['measured']:.4g} "
                              f"({ca['verdict']}), quick32 {cb['measured']:.4g} ({cb['verdict']})")
    lines += ["", "Rows whose verdict differs:" if differ else "No row's verdict differs.", "", *differ, ""]
    return "\n".join(lines)


def markdown(rep: dict) -> str:
    lines = [
        SECTION,
        "",
        f"`{rep['command']}` on {os.cpu_count()} cores, {rep['date']}, {rep['wall_s']:.0f} s in all; load average "
        f"{rep['load'][0]:.1f} before, {rep['load'][1]:.1f} after (times below are for orientation only; the speed-ups "
        "of each precision are those of the \"Transformer simulator\" section).",
        "",
        "The discrete transformer at d = 5, σ_U = σ_W = 0.1, ReLU, m = 256, no attention (λ₁, energy rates: N = 16, "
        "T = 5, L = 100; one-point motion: N = 8, T = 1, L = 200; convergence: N = 8, T = 1, a small grid of L and m "
        "= 16, 64, 256, ∞). Value ± SE per precision; z₆₄ = (value − float64 value)/SE of the difference (independent "
        "seeds); z_pred = (value − prediction)/SE. |z| < 4 agrees.",
        "",
        "| statistic | prediction | float64 | float32 draws | z₆₄ | float32 | z₆₄ | z_pred (float64, draws, float32) | time (s): float64, draws, float32 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rep["rows"]:
        v, p = r["values"], r["predicted"]
        f = lambda k: f"{v[k]['value']:.4g} ± {v[k]['se']:.2g}"  # noqa: E731
        z64 = lambda k: z(v[k]["value"], v[k]["se"], v["float64"]["value"], v["float64"]["se"])  # noqa: E731
        zp = "—" if p is None else ", ".join(f"{z(v[k]['value'], v[k]['se'], p):+.1f}" for k in PRECISIONS)
        lines.append(
            f"| {r['name']} | {'—' if p is None else f'{p:.4g}'} | {f('float64')} | {f('float32 draws')} | {z64('float32 draws'):+.1f} | "
            f"{f('float32')} | {z64('float32'):+.1f} | {zp} | " + ", ".join(f"{v[k]['time_s']:.1f}" for k in PRECISIONS) + " |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
