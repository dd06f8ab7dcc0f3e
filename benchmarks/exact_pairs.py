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

The transformer's prediction at finite m is the same exact law: each layer draws fresh weights, so
its increments have the covariance κ at any width and m enters only through the step's higher
cumulants, a bias that vanishes with Δt (extrapolated with it).

    python benchmarks/exact_pairs.py [--pairs 100000] [--m 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stochformer.config.build import make_kernel
from stochformer.experiments.exact import ExactConfig, extrapolated_pair_means
from stochformer.theory import PairDiffusion, law


def check(name: str, measured: dict, predicted: float, wrong: dict[str, float]) -> dict:
    z = (measured["value"] - predicted) / measured["se"]
    zw = {k: (measured["value"] - w) / measured["se"] for k, w in wrong.items()}
    row = {"check": name, "predicted": predicted, **measured, "z": z, "wrong": wrong, "z_wrong": zw,
           "holds": abs(z) < 4.5, "wrong_rejected": all(abs(v) > 4.5 for v in zw.values())}
    print(f"{name}: measured {measured['value']:.5f} ± {measured['se']:.5f} (levels {measured['by_level']}), predicted "
          f"{predicted:.5f}, z = {z:+.2f}; wrong {', '.join(f'{k} {w:.4f} (z = {zw[k]:+.1f})' for k, w in wrong.items())}",
          flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows, start = [], time.perf_counter()
    for dyn in ("sde", "transformer"):
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
    elapsed = time.perf_counter() - start
    print(f"{args.pairs} pairs per level, transformer m = {args.m}: {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "elapsed_s": elapsed, "args": vars(args)}, fh, indent=1, default=lambda x: np.asarray(x).tolist())


if __name__ == "__main__":
    main()
