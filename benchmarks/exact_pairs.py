"""The pair diffusion's exact laws (SPEC §8, stochformer.theory) against 10⁵ simulated pairs of the
limit SDE and of the transformer, extrapolated in Δt (Richardson over L and L/2 steps, independent
runs; SE from the sample variances with the Richardson weights). The checks, each beside a wrong
prediction that must be rejected:

* **P(z_T < 0) across β*** (erf, d = 4, no biases, γ = 1: β* = 1.066; z0 = 0, T = 2) at β = 0.5
  and 2: predicted the exact law at T ([`law`][stochformer.theory.law]); wrong: the pair without
  attention, and P(antipodal) (the T = ∞ limit).
* **The stationary law** (ReLU, d = 4, σ_U = σ_W = 0.5, β = 1, repulsive v = −2: z positive
  recurrent): E z_T and E z_T² at T = 4 from z0 = 0 against the stationary mean and second moment
  ([`PairDiffusion.stationary`][stochformer.theory.pair.PairDiffusion.stationary]; the exact law's
  mean at T = 4 is 6·10⁻⁴ from it, printed beside, a tenth of the SE at 10⁵ pairs); wrong: the
  stationary law at v = −1.
* **The chaotic side** (``--parts chaos``; erf, d = 4, no biases, gain g = 20 > g_c = 8.007, no
  attention): pairs started at z0 = 0.9 do not synchronise; E z_T² and P(|z_T| > 0.9) at T = 12
  (L = 960, 480: the ends need κ′Δt small) against the stationary law (the exact law at T = 12 is within 10⁻³ of it,
  printed beside); wrong: the synchronising pair without the gain (g = 1) at T = 12.
* **The sync time** (``--parts sync``; ReLU, d = 4, σ_U = σ_W = 0.5, β = 1, v = 1, z0 = 0): τ to
  z ≥ 0.9, its mean and sd against [`PairDiffusion.sync_time`][stochformer.theory.pair.PairDiffusion.sync_time]
  (0.974, 0.565), from L = 480 and 240 steps to the horizon T = 6 (`sync_time_runs`: the crossings
  between steps by the Brownian bridge; the pairs still below the level at T, a fraction 6·10⁻⁵,
  printed); wrong: the pair without attention (v = 0) and at d = 5.
* **The energy** (``--parts energy``; the same pair, N = 2 from uniform tokens, the energy's β = 1):
  E[E_β(μ_t)] at t = 0.5, 1, 1.5, 2 (T = 2, L = 80 and 40) against
  [`expected_energy`][stochformer.theory.expected_energy]; wrong: v = 0 and d = 5.

With ``--merge`` the rows of an existing ``--json`` file that the run does not redo are kept.

The transformer's prediction at finite m is the same exact law: each layer draws fresh weights, so
its increments have the covariance κ at any width and m enters only through the step's higher
cumulants, a bias that vanishes with Δt (extrapolated with it).

    python benchmarks/exact_pairs.py [--pairs 100000] [--m 64] [--parts pairs,chaos,sync,energy] [--json out.json [--merge]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np
from scipy.integrate import quad

from stochformer.config.build import make_kernel
from stochformer.config import RunConfig
from stochformer.experiments.exact import ExactConfig, extrapolated_energy, extrapolated_pair_means, sync_time_runs
from stochformer.model.kernel import NoiseKernel
from stochformer.theory import PairDiffusion, expectation, expected_energy, law


def check(name: str, measured: dict, predicted: float, wrong: dict[str, float]) -> dict:
    z = (measured["value"] - predicted) / measured["se"]
    zw = {k: (measured["value"] - w) / measured["se"] for k, w in wrong.items()}
    row = {"check": name, "predicted": predicted, **measured, "z": z, "wrong": wrong, "z_wrong": zw,
           "holds": abs(z) < 4.5, "wrong_rejected": all(abs(v) > 4.5 for v in zw.values())}
    print(f"{name}: measured {measured['value']:.5f} ± {measured['se']:.5f} (levels {measured['by_level']}), predicted "
          f"{predicted:.5f}, z = {z:+.2f}; wrong {', '.join(f'{k} {w:.4f} (z = {zw[k]:+.1f})' for k, w in wrong.items())}",
          flush=True)
    return row


def tails(pdf, cut: float = 0.9) -> float:
    """∫ pdf over |z| > cut."""
    return quad(pdf, cut, 1.0, limit=200)[0] + quad(pdf, -1.0, -cut, limit=200)[0]


def chaos_checks(cfg: ExactConfig, seed: int) -> list[dict]:
    """The chaotic side: E z_T² and P(|z_T| > 0.9) against the stationary law, the unscaled kernel's law at T the wrong one."""
    kern, T, z0 = make_kernel(cfg.model), cfg.model.T, cfg.z0
    st = PairDiffusion(kern, 1.0, 0.0).stationary()
    tame = PairDiffusion(NoiseKernel(cfg.model.activation, cfg.model.d), 1.0, 0.0)
    at_t, tame_t = law(PairDiffusion(kern, 1.0, 0.0), z0, T), law(tame, z0, T)
    m = extrapolated_pair_means(cfg, 1.0, {"second": lambda z: z * z, "tails": lambda z: (np.abs(z) > 0.9).astype(float)}, seed)
    second_t = float(expectation(PairDiffusion(kern, 1.0, 0.0), lambda z: z * z, [T], z0=z0)[0])
    rows = [check(f"{cfg.model.dynamics} chaos g={cfg.model.gain} E z^2", m["second"], st.sd**2 + st.mean**2,
                  {"g = 1": float(expectation(tame, lambda z: z * z, [T], z0=z0)[0])}),
            check(f"{cfg.model.dynamics} chaos g={cfg.model.gain} P(|z|>0.9)", m["tails"], tails(st.pdf),
                  {"g = 1": float(tame_t.cdf(-0.9) + 1 - tame_t.cdf(0.9))})]
    rows[0]["law_T"], rows[1]["law_T"] = second_t, float(at_t.cdf(-0.9) + 1 - at_t.cdf(0.9))
    print(f"  exact law at T = {T}: E z^2 {second_t:.4f}, P(|z|>0.9) {rows[1]['law_T']:.4f}", flush=True)
    return rows


def variance(runs: np.ndarray) -> np.ndarray:
    """Per-pair values whose mean is the sample variance of τ from its conditional moments
    (columns τ, τ²): b_i − 2ā a_i + ā², so that their SE is the delta method's."""
    a = runs[:, 0].mean()
    return runs[:, 1] - 2 * a * runs[:, 0] + a * a


def sync_checks(cfg: ExactConfig, beta: float, eps: float, seed: int) -> list[dict]:
    """The sync time from z0: E τ and sd τ against `PairDiffusion.sync_time`; wrong: the pair
    without attention (v = 0) and at d + 1."""
    kern, v = make_kernel(cfg.model), cfg.model.gamma_value
    exact = PairDiffusion(kern, beta, v).sync_time(cfg.z0, eps)
    wrong = {"v = 0": PairDiffusion(kern, beta, 0.0).sync_time(cfg.z0, eps),
             f"d = {cfg.model.d + 1}": PairDiffusion(make_kernel(cfg.model.with_updates(d=cfg.model.d + 1)), beta, v).sync_time(cfg.z0, eps)}
    m = extrapolated_pair_means(cfg, beta, {"mean": lambda r: r[:, 0], "var": variance, "alive": lambda r: r[:, 2]}, seed,
                                runs=lambda c, b, s: sync_time_runs(c, b, s, eps))
    var = m["var"]
    sd = {"value": math.sqrt(max(var["value"], 0.0)), "se": var["se"] / (2 * math.sqrt(max(var["value"], 1e-300))),
          "by_level": [(L, math.sqrt(x), e / (2 * math.sqrt(x))) for L, x, e in var["by_level"]]}
    name = f"{cfg.model.dynamics} sync time (z >= {1 - eps:g}) beta={beta} v={v:g}"
    rows = [check(f"{name} mean", m["mean"], exact.mean, {k: w.mean for k, w in wrong.items()}),
            check(f"{name} sd", sd, exact.sd, {k: w.sd for k, w in wrong.items()})]
    alive = max(level[1] for level in m["alive"]["by_level"])
    rows[0]["alive_at_horizon"] = alive
    print(f"  P(τ > T = {cfg.model.T:g}) (largest over the levels) = {alive:.2e}", flush=True)
    return rows


def energy_checks(run: RunConfig, every: int, energy_beta: float, seed: int) -> list[dict]:
    """E[E_β(μ_t)] of N = 2 tokens from uniform tokens at the kept times t > 0 against
    `expected_energy`; wrong: the pair without attention (v = 0) and at d + 1."""
    kern, v = make_kernel(run), run.gamma_value
    times, mean, se, stats, _ = extrapolated_energy(run, every, energy_beta, seed)
    exact = expected_energy(PairDiffusion(kern, run.beta, v), times, 2, energy_beta)
    wrong = {"v = 0": expected_energy(PairDiffusion(kern, run.beta, 0.0), times, 2, energy_beta),
             f"d = {run.d + 1}": expected_energy(PairDiffusion(make_kernel(run.with_updates(d=run.d + 1)), run.beta, v), times, 2,
                                                 energy_beta)}
    levels = [run.L // 2**i for i in range(len(stats))]
    return [check(f"{run.dynamics} energy N=2 beta={run.beta:g} v={v:g} t={t:g}",
                  {"value": float(mean[i]), "se": float(se[i]),
                   "by_level": [(L, float(m[i]), float(e[i])) for L, (m, e) in zip(levels, stats)]},
                  float(exact[i]), {k: float(w[i]) for k, w in wrong.items()})
            for i, t in enumerate(times) if t > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parts", default="pairs,chaos,sync,energy")
    parser.add_argument("--json", default=None)
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of an existing --json file that this run does not redo (its runs listed under 'runs')")
    args = parser.parse_args()
    rows, start = [], time.perf_counter()
    parts = args.parts.split(",")
    for dyn in ("sde", "transformer") if "pairs" in parts else ():
        extra = {"m": args.m} if dyn == "transformer" else {}
        cfg = ExactConfig.model_validate({"model": {"dynamics": dyn, "batch": args.pairs, "T": 2.0, "L": 80, **extra}, "z0": 0.0})
        kern = make_kernel(cfg.model)
        free = float(law(PairDiffusion(kern, 1.0, 0.0), 0.0, 2.0).cdf(0.0))
        for i, beta in enumerate((0.5, 2.0)):
            t = time.perf_counter()
            pair = PairDiffusion(kern, beta, 1.0)
            m = extrapolated_pair_means(cfg, beta, {"below": lambda z: (z < 0).astype(float)}, args.seed + i)["below"]
            rows.append(check(f"{dyn} P(z_T<0) beta={beta}", m, float(law(pair, 0.0, 2.0).cdf(0.0)),
                              {"no attention": free, "P(antipodal)": float(pair.p_antipodal(0.0))}))
            rows[-1]["seconds"] = time.perf_counter() - t
        cfg = ExactConfig.model_validate({"model": {"dynamics": dyn, "batch": args.pairs, "T": 4.0, "L": 160, "activation": "relu",
                                                    "sigma_U": 0.5, "sigma_W": 0.5, "gamma": -2.0, **extra}, "z0": 0.0})
        kern = make_kernel(cfg.model)
        st, st_wrong = PairDiffusion(kern, 1.0, -2.0).stationary(), PairDiffusion(kern, 1.0, -1.0).stationary()
        t = time.perf_counter()
        m = extrapolated_pair_means(cfg, 1.0, {"mean": lambda z: z, "second": lambda z: z * z}, args.seed + 10)
        drift = abs(law(PairDiffusion(kern, 1.0, -2.0), 0.0, 4.0).mean() - st.mean)
        rows.append(check(f"{dyn} stationary E z", m["mean"], st.mean, {"v = -1": st_wrong.mean}))
        rows.append(check(f"{dyn} stationary E z^2", m["second"], st.sd**2 + st.mean**2, {"v = -1": st_wrong.sd**2 + st_wrong.mean**2}))
        rows[-1]["law_T_minus_stationary"] = float(drift)
        rows[-1]["seconds"] = time.perf_counter() - t
        print(f"  |E z_T (exact law at T = 4) − stationary mean| = {drift:.2e}", flush=True)
    for dyn in ("sde", "transformer") if "chaos" in parts else ():
        extra = {"m": args.m} if dyn == "transformer" else {}
        t = time.perf_counter()
        cfg = ExactConfig.model_validate({"model": {"dynamics": dyn, "batch": args.pairs, "T": 12.0, "L": 960, "gain": 20.0,
                                                    "gamma": 0.0, **extra}, "z0": 0.9})
        rows.extend(chaos_checks(cfg, args.seed + 20))
        rows[-1]["seconds"] = time.perf_counter() - t
    sync_model = {"batch": args.pairs, "activation": "relu", "sigma_U": 0.5, "sigma_W": 0.5, "beta": 1.0, "gamma": 1.0}
    for dyn in ("sde", "transformer") if "sync" in parts else ():
        extra = {"m": args.m} if dyn == "transformer" else {}
        t = time.perf_counter()
        cfg = ExactConfig.model_validate({"model": {"dynamics": dyn, "T": 6.0, "L": 480, **sync_model, **extra}, "z0": 0.0})
        rows.extend(sync_checks(cfg, 1.0, 0.1, args.seed + 30))
        rows[-1]["seconds"] = time.perf_counter() - t
    for dyn in ("sde", "transformer") if "energy" in parts else ():
        extra = {"m": args.m} if dyn == "transformer" else {}
        t = time.perf_counter()
        cfg = ExactConfig.model_validate({"model": {"dynamics": dyn, "T": 2.0, "L": 80, **sync_model, **extra}})
        rows.extend(energy_checks(cfg.model.with_updates(N=2), 20, 1.0, args.seed + 40))
        rows[-1]["seconds"] = time.perf_counter() - t
    elapsed = time.perf_counter() - start
    print(f"{args.pairs} pairs per level, transformer m = {args.m}: {elapsed:.0f} s")
    if args.json:
        out = {"rows": rows, "elapsed_s": elapsed, "args": vars(args)}
        if args.merge and os.path.exists(args.json):
            with open(args.json) as fh:
                old = json.load(fh)
            new = {r["check"] for r in rows}
            runs = old.get("runs", [{"elapsed_s": old["elapsed_s"], "args": old["args"]}])
            out = {"rows": [r for r in old["rows"] if r["check"] not in new] + rows, "elapsed_s": old["elapsed_s"] + elapsed,
                   "args": old["args"], "runs": runs + [{"elapsed_s": elapsed, "args": vars(args)}]}
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=lambda x: np.asarray(x).tolist())


if __name__ == "__main__":
    main()
