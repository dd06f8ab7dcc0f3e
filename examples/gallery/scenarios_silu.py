"""Figs. 2–6 of the paper, the SiLU scenarios: synchronisation where λ₁ − γ < 0 (SPEC §6 item 2).

N = 64 tokens start uniform on S^{d−1} and pass through L = 150 layers (T = 5) of a transformer
with softmax attention Qᵀ K = βI, V = γI (β = 1; γ = 0: no attention) and a random SiLU MLP of
width m with biases σ_U = σ_W = σ. The claim (SPEC §5): the tokens synchronise (mean cosine → 1,
E_β → 0) where the linearised criterion λ₁ − γ is negative, λ₁ the Lyapunov exponent of the noise
(λ₁ = ((d − 3)/2) κ'(1) − ((d − 1)/2) κ(1), κ by quadrature); the legend gives λ₁ − γ.

    python examples/gallery/scenarios_silu.py --size paper --out figures/
"""

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

import stochformer as sf
from stochformer.plotting import save_figure

ACTIVATION = "silu"
#: "paper": the paper's N = 64, L = 150 (T = 5); "tiny": seconds, for the docs and CI
SIZES = {"tiny": dict(N=8, L=20, m=32, batch=2), "paper": dict(N=64, L=150, m=512, batch=4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=f"Figs. 2–6: the {ACTIVATION} scenarios")
    parser.add_argument("--size", choices=SIZES, default="paper")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder of the PNG")
    args = parser.parse_args()
    s = SIZES[args.size]

    fig, axes = plt.subplots(3, 2, figsize=(11, 9), sharex=True, layout="constrained")
    for row, d in enumerate((5, 64, 128)):
        X0 = sf.sphere.uniform(batch=s["batch"], N=s["N"], d=d, seed=d)
        for sigma, style in ((0.0, "-"), (0.1, "--")):
            lambda_1 = sf.rates(sf.NoiseKernel(ACTIVATION, d=d, sigma_U=sigma, sigma_W=sigma)).lambda_1
            mlp = sf.RandomMLP(width=s["m"], activation=ACTIVATION, sigma_U=sigma, sigma_W=sigma)
            for gamma, colour in ((1.0, "C0"), (0.0, "C1"), (-1.0, "C2")):
                attention = sf.SoftmaxAttention(beta=1.0, gamma=gamma) if gamma else None
                out = sf.solve(sf.Transformer(attention, mlp), X0, T=5.0, steps=s["L"], seed=row)
                label = rf"$\gamma$ = {gamma:+g}, $\sigma$ = {sigma:g}: {lambda_1 - gamma:+.3g}"
                axes[row, 0].plot(out.step, out.mean_cosine.mean("sample"), color=colour, ls=style)
                axes[row, 1].semilogy(out.step, out.energy.mean("sample"), color=colour, ls=style, label=label)
        axes[row, 0].set(ylabel="mean pairwise cosine", ylim=(-1 / (s["N"] - 1) - 0.05, 1.05), title=f"d = {d}")
        axes[row, 1].set(ylabel=r"$E_\beta$ (sample mean)", title=f"d = {d}")
        axes[row, 1].set_ylim(min(axes[row, 1].get_ylim()[0], 0.05), 1.5)  # at least one whole decade
        axes[row, 1].yaxis.set_minor_formatter(NullFormatter())  # label whole decades only
        axes[row, 1].legend(title=r"$\lambda_1 - \gamma$", fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    for ax in axes[-1]:
        ax.set_xlabel("layer")
    fig.suptitle(f"{ACTIVATION}: N = {s['N']}, L = {s['L']}, m = {s['m']}, T = 5, β = 1")
    args.out.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out / f"scenarios_{ACTIVATION}.png", dpi=200 if args.size == "paper" else 64)


if __name__ == "__main__":
    main()
