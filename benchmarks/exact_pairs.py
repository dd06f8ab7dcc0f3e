"""The pair diffusion's exact laws (SPEC §8, stochformer.theory) against 10⁵ simulated pairs of the
limit SDE and of the transformer, extrapolated in Δt (Richardson over L and L/2 steps, independent
runs; SE from the sample variances with the Richardson weights). Two checks, each beside a wrong
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

The transformer's prediction at finite m is the same exact law: each layer draws fresh weights, so
its increments have the covariance κ at any width and m enters only through the step's higher
cumulants, a bias that vanishes with Δt (extrapolated with it).

    python benchmarks/exact_pairs.py [--pairs 100000] [--m 64] [--parts pairs,chaos] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.integrate import quad

from stochformer.config.build import make_kernel
from stochformer.experiments.exact import ExactConfig, extrapolated_pair_means
from stochformer.model.kernel import NoiseKernel
from stochformer.theory import PairDiffusion, expectation, law


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parts", default="pairs,chaos")
    parser.add_argument("--json", default=None)
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
    elapsed = time.perf_counter() - start
    print(f"{args.pairs} pairs per level, transformer m = {args.m}: {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "elapsed_s": elapsed, "args": vars(args)}, fh, indent=1, default=lambda x: np.asarray(x).tolist())


if __name__ == "__main__":
    main()
