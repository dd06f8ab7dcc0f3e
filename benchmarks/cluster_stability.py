"""The stability criterion of a cluster under repulsive attention (SPEC §8): N tokens near consensus
with QᵀK = βI, V = −δI stay together iff λ₁ < −δ. At every noise setting of the paper's Figures
2–6 (SPEC §6: ReLU, SiLU, sigmoid, tanh; d ∈ {5, 64, 128}; σ_U = σ_W ∈ {0, 0.1}; γ = −1, so δ = 1;
T = 5 on 150 steps, β = 1) the limit SDE's relative modes are measured by Benettin's method
([`cluster_stability`][stochformer.experiments.cluster_spectrum.cluster_stability], N = 4 tokens,
``batch`` samples) and judged as one family ([`stability_rows`][stochformer.experiments.cluster_spectrum.stability_rows]):
the top relative exponent must lie below 0 where the criterion predicts a stable cluster and above
0 where it predicts one that spreads. Prints a Markdown table (docs/spectrum.md) and, with
``--json PATH``, every number.

    python benchmarks/cluster_stability.py [--batch 16] [--steps 150] [--limit K] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

from stochformer.experiments.cluster_spectrum import PAPER_SETTINGS, cluster_stability, stability_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--N", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="only the first LIMIT settings")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    results = [cluster_stability(a, d, s, N=args.N, steps=args.steps, batch=args.batch, seed=args.seed + i)
               for i, (a, d, s) in enumerate(PAPER_SETTINGS[:args.limit])]
    rows = stability_rows(results)
    print("| activation | d | σ | λ₁ | −δ | predicted | λ₁ + δ | measured (± SE) | contracted | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r, row in zip(results, rows):
        print(f"| {r.activation} | {r.d} | {r.sigma:g} | {r.lambda_1:.4f} | {-r.delta:g} | "
              f"{'stable' if r.predicted_stable else 'spreads'} | {r.lambda_1 + r.delta:.4f} | "
              f"{r.measured:.4f} ± {r.se:.4f} | {r.contracted:.2f} | {row.verdict} |")
    elapsed = time.perf_counter() - start
    print(f"\n{len(results)} settings, N = {args.N}, batch {args.batch}, {args.steps} steps, seeds {args.seed}..: {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": [r._asdict() for r in results], "verdicts": [row.verdict for row in rows],
                       "elapsed_s": elapsed, "args": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
