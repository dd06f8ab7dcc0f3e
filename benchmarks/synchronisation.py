"""Validation of the synchronisation rates of SPEC §5 (Theorem 1.4, Proposition 1.5) by simulation.

For every case (activation, d, σ_U = σ_W, attention γ) and both dynamics (deep transformer and limit
SDE) this measures

* λ̂₁: the pair exponent (Benettin, renormalised to 10⁻⁴) over a horizon of T_units noise times
  τ = 1/(dκ(1)), with ``pairs`` chosen so that the predicted SE is ~3% of |λ₁ − γ|;
* the first-moment rate of E_β for a near-synchronised pair (cluster spread 10⁻³) on
  t ≤ min(T, 1/(2(κ + κ'))),

beside λ₁ − γ and λ̄ − 2γ, and the repulsive-attention cases on each side of γ = λ₁. It writes
``docs/synchronisation.md`` (method text and tables) and a JSON of every number.

    python benchmarks/synchronisation.py                      # CPU, reduced sample sizes
    python benchmarks/synchronisation.py --device cuda --full # the sizes quoted in the docs
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stochformer.config import InitConfig, build_config
from stochformer.experiments.phase import phase_point
from stochformer.experiments.sync import energy_paths, measure_lyapunov, moment_rate, near_sync_horizon, predicted_rates
from stochformer.core.runtime import child_seeds, device_description
from stochformer.tasks import Task, run_tasks

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- synchronisation-benchmark:begin -->", "<!-- synchronisation-benchmark:end -->"

# (activation, d, sigma, gamma); gamma = 0 means no attention
CASES = [
    ("relu", 3, 0.0, 0.0), ("relu", 4, 0.0, 0.0), ("relu", 8, 0.0, 0.0), ("relu", 64, 0.0, 0.0),
    ("relu", 3, 0.5, 0.0), ("relu", 4, 0.5, 0.0), ("relu", 8, 0.5, 0.0), ("relu", 64, 0.1, 0.0),
    ("tanh", 8, 0.0, 0.0), ("silu", 8, 0.0, 0.0), ("sigmoid", 8, 0.0, 0.0),
    ("tanh", 64, 0.0, 0.0), ("silu", 64, 0.0, 0.0), ("sigmoid", 64, 0.0, 0.0),
    ("relu", 8, 0.5, 0.5), ("sigmoid", 4, 0.0, 1.0),
]


def case_config(act: str, d: int, sigma: float, gamma: float, dynamics: str, L: int, T_units: float, m: int, device: str):
    base = build_config({"N": 2, "d": d, "activation": act, "sigma_U": sigma, "sigma_W": sigma, "attention": gamma != 0.0,
                         "gamma": gamma, "dynamics": dynamics, "L": L, "T": 1.0, "m": m, "device": device})
    p = predicted_rates(base, with_bound=False)
    return base.with_updates(T=T_units / (d * p["kappa"])), p


def validation_point(act: str, d: int, sigma: float, gamma: float, dynamics: str, L: int, T_units: float, m: int,
                     max_pairs: int, energy_pairs: int, seed: int, device: str) -> dict:
    """One case: measured λ̂₁ and near-synchronisation energy rate with SEs, beside the predictions."""
    cfg, p = case_config(act, d, sigma, gamma, dynamics, L, T_units, m, device)
    s = child_seeds(seed, 2)
    target_se = 0.03 * abs(p["lambda_1_pred"])  # pairs for a predicted SE of 3%: var of log δ is (κ+κ')t
    pairs = int(min(max_pairs, max(256, math.ceil((p["kappa"] + p["kappa_prime"]) / (cfg.T * target_se**2)))))
    t0 = time.perf_counter()
    lyap = measure_lyapunov(cfg, pairs, 1e-4, s[0])
    T_near = min(cfg.T, near_sync_horizon(p["kappa"], p["kappa_prime"]))
    near = cfg.with_updates(T=T_near, batch=energy_pairs, seed=s[1])
    paths = energy_paths(near, InitConfig(kind="cluster", spread=1e-3), s[1])
    rate, rate_se = moment_rate(np.arange(near.L + 1) * near.dt, paths, seed=s[1])
    return {"activation": act, "d": d, "sigma": sigma, "gamma": gamma, "dynamics": dynamics, "L": L, "m": m, "T": cfg.T,
            "T_near": T_near, "pairs": pairs, "energy_pairs": energy_pairs, "kappa": p["kappa"], "kappa_prime": p["kappa_prime"],
            "lambda_1_pred": p["lambda_1_pred"], "lambda_bar_pred": p["lambda_bar_pred"],
            "lambda_1": lyap["lambda_1"], "lambda_1_se": lyap["lambda_1_se"], "energy_rate": rate, "energy_rate_se": rate_se,
            "wall_s": time.perf_counter() - t0}


def verdicts(r: dict) -> dict:
    l1, l1p, se = r["lambda_1"], r["lambda_1_pred"], r["lambda_1_se"]
    e, ep, ese = r["energy_rate"], r["lambda_bar_pred"], r["energy_rate_se"]
    return {
        "l1_rel": (l1 - l1p) / abs(l1p), "l1_z": (l1 - l1p) / se,
        "l1_ok": abs(l1 - l1p) <= max(0.05 * abs(l1p), 3 * se),
        "e_rel": (e - ep) / abs(ep), "e_z": (e - ep) / ese,
        "e_sign_ok": np.sign(e) == np.sign(ep),
        "e_10pct_ok": (abs(e - ep) <= 0.1 * abs(ep)) if ep < 0 else None,
    }


def repulsive_cases(L: int, pairs: int, batch: int, device: str, seed: int) -> list[dict]:
    """ReLU, d = 8, σ_U = σ_W = 0.5 (λ₁ = −1.375, λ̄ = −1.75): γ on each side of γ = λ₁, with and without noise."""
    rows = []
    for gamma, mlp in ((-0.7, False), (-0.7, True), (-2.0, True), (-2.0, False)):
        cfg = build_config({"N": 8, "d": 8, "activation": "relu", "sigma_U": 0.5, "sigma_W": 0.5, "gamma": gamma,
                            "mlp": mlp, "L": L, "T": 10.0, "m": 256, "batch": batch, "device": device})
        s = child_seeds(seed + int(10 * -gamma) + int(mlp), 2)
        lyap = phase_point(cfg.model_dump(mode="json"), "lyapunov", pairs, 1e-4, 1e-2, False, s[0])
        frac = phase_point(cfg.model_dump(mode="json"), "sync_fraction", pairs, 1e-4, 1e-2, False, s[1])
        rows.append({"gamma": gamma, "noise": mlp, "T": cfg.T, "L": L, "lambda_1_pred": lyap["lambda_1_pred"],
                     "lambda_1": lyap["value"], "lambda_1_se": lyap["se"], "sync_fraction": frac["value"],
                     "sync_fraction_se": frac["se"], "batch": batch})
    return rows


def fmt(x, nd=4):
    return "—" if x is None else f"{x:.{nd}g}"


def render(results: list[dict], repulsive: list[dict], meta: dict) -> str:
    lines = [
        "## Validation: measured rates against SPEC §5",
        "",
        "This section is written by `benchmarks/synchronisation.py` "
        f"(command `{meta['command']}`, {meta['device']}, {meta['wall_s']:.0f} s, stochformer {meta['version']}, "
        f"torch {meta['torch']}). Every number below is a measurement of that run.",
        "",
        "### What is measured and how",
        "",
        "Layers ℓ are times t = ℓ T/L; every rate is per unit time, so it is comparable with the closed forms of",
        "SPEC §5 (`stochformer rates`), which carry the noise scale s through κ → s²κ.",
        "",
        "* **λ₁ (pair exponent).** Two tokens at chordal distance δ₀ = 10⁻⁴; after every layer (SDE step) the",
        "  log of the distance ratio is accumulated and the second token is put back at distance 10⁻⁴ along",
        "  the current separation (Benettin), so the pair stays linear for any horizon. Per pair",
        "  `S_T = Σ log(δ_{ℓ+1}/δ_ℓ)`; `λ̂₁ = mean(S_T)/T`, SE = `std(S_T)/(T√n)`. With attention V = γI the",
        "  prediction is λ₁ − γ.",
        "* **First-moment energy rate.** A pair started at spread 10⁻³; E[E_β] ∝ e^{rate·t} is fitted as the",
        "  least-squares slope of log(sample mean of E_β) on t, SE by bootstrap over paths. Near synchronisation",
        "  1 − ⟨x,y⟩ is close to a geometric Brownian motion with log-variance 4(κ + κ')t; its mean is carried",
        "  by rare paths, so the fit window is t ≤ 1/(2(κ + κ')) (log-variance ≤ 2), where n ≥ 10³ paths",
        "  estimate the mean. The prediction is λ̄ − 2γ.",
        "* Horizons are in noise times τ = 1/(dκ(1)): T = " + f"{meta['T_units']:g}" + " τ; Δt = T/L with L = "
        + f"{meta['L']}" + " (so Δt·dκ(1) = " + f"{meta['T_units'] / meta['L']:.3g}" + "); MLP width m = " + f"{meta['m']}"
        + " (transformer, `mlp_gaussian` noise).",
        "",
        "Pass criteria: λ̂₁ within 5% or 3 SE of λ₁ − γ; the energy rate of the same sign as λ̄ − 2γ,",
        "and within 10% where λ̄ − 2γ < 0. z = (measured − predicted)/SE.",
        "",
        "### λ₁ and the near-synchronisation energy rate",
        "",
        "| φ | d | σ | γ | dynamics | λ₁ − γ | measured ± SE | rel. | z | ok | λ̄ − 2γ | measured ± SE | rel. | z | sign | 10% |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        v = verdicts(r)
        lines.append(
            f"| {r['activation']} | {r['d']} | {r['sigma']:g} | {r['gamma']:g} | {r['dynamics']} | {fmt(r['lambda_1_pred'])} | "
            f"{fmt(r['lambda_1'])} ± {fmt(r['lambda_1_se'], 2)} | {v['l1_rel']:+.1%} | {v['l1_z']:+.1f} | {'yes' if v['l1_ok'] else '**no**'} | "
            f"{fmt(r['lambda_bar_pred'])} | {fmt(r['energy_rate'])} ± {fmt(r['energy_rate_se'], 2)} | {v['e_rel']:+.1%} | "
            f"{v['e_z']:+.1f} | {'yes' if v['e_sign_ok'] else '**no**'} | "
            f"{'—' if v['e_10pct_ok'] is None else ('yes' if v['e_10pct_ok'] else '**no**')} |"
        )
    lines += ["", "Sample sizes and horizons:", "",
              "| φ | d | σ | γ | dynamics | T | pairs (λ₁) | T (energy) | paths (energy) | run | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['activation']} | {r['d']} | {r['sigma']:g} | {r['gamma']:g} | {r['dynamics']} | {r['T']:.3g} | {r['pairs']} | "
                     f"{r['T_near']:.3g} | {r['energy_pairs']} | {r.get('run', '')} | {r['wall_s']:.1f} |")
    lines += [
        "", "### Repulsive attention overcome by noise", "",
        "ReLU, d = 8, σ_U = σ_W = 0.5 (λ₁ = −1.375, λ̄ = −1.75: coercive), transformer, T = 10. The predicted",
        "boundary is γ = λ₁: for λ₁ < γ < 0 noise synchronises tokens that the repulsive attention alone keeps",
        "apart; for γ < λ₁ it does not. `sync fraction`: runs of N = 8 uniform tokens whose minimum pairwise",
        "cosine is ≥ 0.99 at T.", "",
        "| γ | noise | λ₁ − γ predicted | pair exponent measured ± SE | sync fraction at T ± SE |", "|---|---|---|---|---|",
    ]
    for r in repulsive:
        lines.append(f"| {r['gamma']:g} | {'yes' if r['noise'] else 'no'} | {fmt(r['lambda_1_pred'])} | "
                     f"{fmt(r['lambda_1'])} ± {fmt(r['lambda_1_se'], 2)} | {r['sync_fraction']:.2f} ± {r['sync_fraction_se']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--full", action="store_true", help="the sample sizes quoted in the docs (use a GPU)")
    ap.add_argument("--store", default=None, help="folder for finished cases (resume after a kill)")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "synchronisation.md"))
    ap.add_argument("--json", default=None, help="also write every number to this JSON file")
    ap.add_argument("--only", default=None, help="comma-separated dynamics to run (transformer,sde)")
    ap.add_argument("--cases", type=int, default=None, help="run only the first K cases (smoke test)")
    ap.add_argument("--select", default=None, help="comma-separated indices into CASES to run ('' for none)")
    ap.add_argument("--skip-repulsive", action="store_true", help="do not run the repulsive-attention cases")
    ap.add_argument("--merge", default=None, help="JSON written by --json of an earlier run: its cases are reused, not rerun")
    ap.add_argument("--max-pairs", type=int, default=None, help="cap on pairs for λ₁ (default 16384 with --full, else 1024)")
    ap.add_argument("--energy-pairs", type=int, default=None, help="paths for the energy rate (default 8192 with --full, else 1024)")
    ap.add_argument("--m", type=int, default=256, help="MLP width of the transformer")
    args = ap.parse_args()
    L, T_units, m = 400, 8.0, args.m
    max_pairs, energy_pairs = (16384, 8192) if args.full else (1024, 1024)
    max_pairs, energy_pairs = args.max_pairs or max_pairs, args.energy_pairs or energy_pairs
    label = f"{args.device}, m={m}"
    earlier = json.loads(Path(args.merge).read_text()) if args.merge else {"cases": []}
    done = {(r["activation"], r["d"], r["sigma"], r["gamma"], r["dynamics"]): r for r in earlier["cases"]}
    dyns = (args.only or "sde,transformer").split(",")
    start = time.perf_counter()
    tasks = []
    chosen = set(int(i) for i in args.select.split(",") if i.strip()) if args.select is not None else set(range(len(CASES)))
    for k, (act, d, sigma, gamma) in enumerate(CASES[: args.cases]):
        if k not in chosen:
            continue
        for dyn in dyns:
            if (act, d, sigma, gamma, dyn) in done:
                continue
            tasks.append(Task(f"{act}-d{d}-s{sigma:g}-g{gamma:g}-{dyn}", validation_point,
                              dict(act=act, d=d, sigma=sigma, gamma=gamma, dynamics=dyn, L=L, T_units=T_units, m=m,
                                   max_pairs=max_pairs, energy_pairs=energy_pairs, seed=1000 + k, device=args.device)))
    res = run_tasks(tasks, store=args.store, progress=True, desc="cases")
    results = [dict(r, run=r.get("run", "earlier run")) for r in done.values()] + [dict(res[t.key], run=label) for t in tasks]
    order = {c: k for k, c in enumerate(CASES)}
    results.sort(key=lambda r: (order.get((r["activation"], r["d"], r["sigma"], r["gamma"]), 99), r["dynamics"]))
    for r in results:
        v = verdicts(r)
        print(f"{r['activation']:8s} d={r['d']:3d} s={r['sigma']:.1f} g={r['gamma']:+.1f} {r['dynamics']:11s} "
              f"l1 {r['lambda_1']:+.5f}±{r['lambda_1_se']:.5f} pred {r['lambda_1_pred']:+.5f} ({v['l1_rel']:+.1%}, z {v['l1_z']:+.1f}) | "
              f"E {r['energy_rate']:+.4f}±{r['energy_rate_se']:.4f} pred {r['lambda_bar_pred']:+.4f} ({v['e_rel']:+.1%}, z {v['e_z']:+.1f}) "
              f"[{r['wall_s']:.1f}s]", flush=True)
    repulsive = [] if args.skip_repulsive else repulsive_cases(400, 2048 if args.full else 256, 256 if args.full else 32, args.device, 7)
    for r in repulsive:
        print(r, flush=True)
    meta = {"command": "python benchmarks/synchronisation.py" + (" --full" if args.full else "") + f" --device {args.device}",
            "device": device_description(args.device), "wall_s": time.perf_counter() - start, "T_units": T_units, "L": L, "m": m,
            "version": __import__("stochformer").__version__, "torch": torch.__version__, "python": sys.version.split()[0],
            "platform": platform.platform()}
    doc = Path(args.doc)
    text = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n{render(results, repulsive, meta)}{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) + 1 :]
    else:
        text = text + ("\n" if text else "") + block
    doc.write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "cases": results, "repulsive": repulsive}, indent=1, default=float))
    print(f"wrote {args.doc} in {meta['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
