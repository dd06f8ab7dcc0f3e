"""Fig. 1 of the paper: without attention, the MLP noise alone clusters the tokens (SPEC §6 item 1).

N tokens start uniform on S³ (d = 4) and pass through a transformer with no attention and an MLP
without biases, ReLU and tanh. The claim: the common noise synchronises them, since λ₁ < 0 for
both activations; ReLU ends in one cluster, tanh (an odd field) in two antipodal clusters. The
figure shows the number of clusters against t up to the horizon predicted from e^{λ₁t}, the
paper's picture of the final tokens, the pairwise cosines against layer and their final histogram.

    python examples/gallery/fig1_clusters.py --size paper --out figures/
"""

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from stochformer.experiments.paper import ClustersConfig, run_clusters
from stochformer.plotting import save_figure
from stochformer.plotting.sync import plot_cluster_course, plot_clusters

#: "paper": the paper's N = 64, L = 2000, T = 20, m = 2048; "tiny": seconds, for the docs and CI
#: (snapshots: token states kept for the cluster count against t)
SIZES = {"tiny": dict(N=16, L=100, T=20.0, m=64, batch=2, snapshots=10),
         "paper": dict(N=64, L=2000, T=20.0, m=2048, batch=8, snapshots=40)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Fig. 1: clusters of tokens on S³ without attention")
    parser.add_argument("--size", choices=SIZES, default="paper")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder of the PNG")
    args = parser.parse_args()

    # ReLU and tanh, one run each to T, and one each to the horizon predicted from e^{λ₁t}
    result = run_clusters(ClustersConfig(size="paper", seed=0, sizes=SIZES[args.size]))

    fig = plt.figure(figsize=(11, 11), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[2, 1], squeeze=False)[:, 0]
    plot_cluster_course(result, sample=0, axes=top.subplots(2, 2))
    plot_clusters(result, axes=bottom.subplots(1, 3))
    fig.suptitle(f"Fig. 1: tokens on $S^3$, no attention (N = {result.sizes['N']}, L = {result.sizes['L']}, "
                 f"m = {result.sizes['m']})")
    args.out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out / "fig1_clusters.png", dpi=200 if args.size == "paper" else 60)


if __name__ == "__main__":
    main()
