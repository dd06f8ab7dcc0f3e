"""One step of the exact-field coupling of ``chaos`` (``model.noise = "exact"``): the reference and
the N-systems concatenated into one cloud, the exact field drawn jointly at every point (κ on the
n × n matrix, its Cholesky factor), attention within each system (Euler, d = 3, ReLU, float64).

    python benchmarks/bench_joint_field.py                 # the quick and full sizes of the chaos-exact section
    python benchmarks/bench_joint_field.py --sizes 4096,32,64,128,256 --reps 3

Prints, per cloud, the median over ``reps`` of: κ on the matrix, the Cholesky factor, and the whole
step (:func:`stochformer.config.build.make_grouped_particles`; wall and CPU time, all threads), timed in
alternation in one process, and the extrapolated time of the section (samples × steps × step).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stochformer.core.brownian import Draws
from stochformer.config.build import make_grouped_particles
from stochformer.config import RunConfig
from stochformer.core.sphere import uniform

#: (N_ref and sizes, samples, steps) of the chaos-exact section's quick and full profiles
CASES = {"quick": ([512, 16, 32, 64, 128], 16, 10), "full": ([4096, 32, 64, 128, 256], 8, 16)}


def bench(sizes: list[int], reps: int, d: int = 3) -> dict[str, float]:
    cfg = RunConfig(dynamics="sde", noise="exact", integrator="euler", N=sizes[0], d=d)
    model = make_grouped_particles(cfg, sizes)
    g = torch.Generator().manual_seed(0)
    X = uniform(1, sum(sizes), d, generator=g)
    field = model.noise
    times: dict[str, list[float]] = {"kernel": [], "cholesky": [], "step": [], "step_cpu": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        K = field.field.covariance(X, torch.float64)
        t1 = time.perf_counter()
        torch.linalg.cholesky_ex(K)
        t2, c2 = time.perf_counter(), time.process_time()
        model.step(X, 0.05, Draws(g))
        t3, c3 = time.perf_counter(), time.process_time()
        times["step_cpu"].append(c3 - c2)
        times["kernel"].append(t1 - t0)
        times["cholesky"].append(t2 - t1)
        times["step"].append(t3 - t2)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", help="N_ref and the sizes, comma-separated (default: the section's quick and full)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cases = {"given": ([int(s) for s in args.sizes.split(",")], 1, 1)} if args.sizes else CASES
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, (sizes, samples, steps) in cases.items():
        t = bench(sizes, args.reps)
        print(f"{name}: n = {sum(sizes)} points; kernel {t['kernel']:.3f} s, Cholesky {t['cholesky']:.3f} s, "
              f"step {t['step']:.3f} s (CPU {t['step_cpu']:.3f} s); {samples} samples × {steps} steps ≈ {samples * steps * t['step']:.0f} s")


if __name__ == "__main__":
    main()
