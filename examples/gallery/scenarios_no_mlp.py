"""Figs. 2–6 of the paper, the scenarios without MLP: attention alone (SPEC §6 item 2).

N = 64 tokens start uniform on S^{d−1} and pass through L = 150 layers (T = 5) of a transformer
with softmax attention Qᵀ K = βI, V = γI (β = 1) and no MLP, hence no noise: λ₁ = 0 and the
criterion λ₁ − γ is −γ. The claim: attractive attention (γ = +1) synchronises the tokens (mean
cosine → 1, E_β → 0), repulsive attention (γ = −1) keeps them apart, and γ = 0 (nothing at all)
leaves them where they are; beside the other scenario figures, the MLP noise is what
synchronises tokens that attention alone does not.

    python examples/gallery/scenarios_no_mlp.py --size paper --out figures/
"""

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

import stochformer as sf
from stochformer.plotting import save_figure

#: "paper": the paper's N = 64, L = 150 (T = 5); "tiny": seconds, for the docs and CI
SIZES = {"tiny": dict(N=8, L=20, batch=2), "paper": dict(N=64, L=150, batch=4)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Figs. 2–6: the scenarios without MLP")
    parser.add_argument("--size", choices=SIZES, default="paper")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder of the PNG")
    args = parser.parse_args()
    s = SIZES[args.size]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for d, style in ((5, "-"), (64, "--"), (128, ":")):
        X0 = sf.sphere.uniform(batch=s["batch"], N=s["N"], d=d, seed=d)
        for gamma, colour in ((1.0, "C0"), (0.0, "C1"), (-1.0, "C2")):
            attention = sf.SoftmaxAttention(beta=1.0, gamma=gamma) if gamma else None
            out = sf.solve(sf.Transformer(attention, noise=None), X0, T=5.0, steps=s["L"], seed=0)
            label = rf"$\gamma$ = {gamma:+g}, d = {d}: {0.0 - gamma:+g}"
            axes[0].plot(out.step, out.mean_cosine.mean("sample"), color=colour, ls=style)
            axes[1].semilogy(out.step, out.energy.mean("sample"), color=colour, ls=style, label=label)
    axes[0].set(xlabel="layer", ylabel="mean pairwise cosine", ylim=(-1 / (s["N"] - 1) - 0.05, 1.05))
    axes[1].set(xlabel="layer", ylabel=r"$E_\beta$ (sample mean)")
    axes[1].set_ylim(min(axes[1].get_ylim()[0], 0.05), 1.5)  # at least one whole decade
    axes[1].yaxis.set_minor_formatter(NullFormatter())  # label whole decades only
    axes[1].legend(title=r"$\lambda_1 - \gamma$", fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"no MLP: N = {s['N']}, L = {s['L']}, T = 5, β = 1")
    args.out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out / "scenarios_no_mlp.png", dpi=200 if args.size == "paper" else 64)


if __name__ == "__main__":
    main()
