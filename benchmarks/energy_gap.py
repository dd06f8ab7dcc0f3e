"""Where the gap between the measured and the exact expected energy comes from (SPEC §8; the
"exact theory" section's energy rows): the section's energy runs (erf, d = 4, N = 8 uniform tokens,
σ_U = σ_W = 1, β = 1, the limit SDE with Heun steps, T = 2) at Δt = 0.02, 0.01, 0.005 with
``--runs`` independent runs each, the relative gap mean/exact − 1 at t = 0.5, 1, 1.5, 2 with its SE,
and the gap extrapolated to Δt → 0 (Richardson over the two finest steps, first order). A step bias
shows as a gap that halves with Δt and extrapolates to 0; too few runs as a gap within its SE.

    python benchmarks/energy_gap.py [--runs 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stochformer.core.runtime import child_seeds
from stochformer.experiments.exact import ExactConfig, energy_part
from stochformer.measure.stats import richardson_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    start, levels = time.perf_counter(), {}
    for L, seed in zip((100, 200, 400), child_seeds(args.seed, 3)):
        cfg = ExactConfig.model_validate({"energy_batch": args.runs, "energy_L": L, "energy_every": L // 4, "energy_levels": 1})
        e = energy_part(cfg, seed)
        gap, se = e["mean"][1:] / e["exact"][1:] - 1, e["se"][1:] / e["exact"][1:]
        levels[L] = {"dt": 2.0 / L, "times": e["times"][1:].tolist(), "exact": e["exact"][1:].tolist(), "gap": gap.tolist(),
                     "se": se.tolist()}
        print(f"Δt = {2.0 / L:.4f}: " + ", ".join(f"t = {t:g}: {g:+.4f} ± {s:.4f}" for t, g, s in zip(e["times"][1:], gap, se)),
              flush=True)
    value, sd = richardson_steps([np.asarray(levels[L]["gap"]) for L in (400, 200)],
                                 [np.asarray(levels[L]["se"]) for L in (400, 200)])
    extrap, extrap_se = value.tolist(), sd.tolist()
    print("Δt → 0 (from 0.01, 0.005): " + ", ".join(f"{g:+.4f} ± {s:.4f}" for g, s in zip(extrap, extrap_se)))
    elapsed = time.perf_counter() - start
    print(f"{args.runs} runs per step size: {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"levels": levels, "extrapolated": extrap, "extrapolated_se": extrap_se, "elapsed_s": elapsed,
                       "args": vars(args)}, fh, indent=1, default=lambda x: np.asarray(x).tolist())


if __name__ == "__main__":
    main()
