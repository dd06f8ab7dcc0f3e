"""Figures of the claims beyond the paper's own figures: the joint limit of Corollary 1.3 along a
diagonal path (:class:`~stochformer.experiments.joint.JointResult`) and Theorem 1.4 with attention
from uniform tokens, the outcome map beside the linearised criterion
(:class:`~stochformer.experiments.repulsion.RepulsionResult`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import exponent_label, figure_axes, finish, integer_ticks, linear_band, log_band
from .sync import _edges

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_joint(result: Any, ax: Optional[Any] = None) -> "Figure":
    """JointResult: the two terms of the bound and their sum against the path's scale s (log–log,
    ± 2 SE), the fitted line of the sum and the predicted slope through its first point."""
    c = result.config
    created = ax is None
    fig, axs = figure_axes(ax, (1, 1), (6.5, 4.5))
    ax = axs[0, 0]
    s = c.scale
    names = {"coupled": "transformer − SDE (sup over layers)", "w2": r"$W_2^2(\mu^N, \mu^{N_{ref}})$", "combined": "sum"}
    for k, (name, (m, se)) in enumerate(result.means().items()):
        log_band(ax, s, m, se, f"C{k}", f"{names[name]}: {exponent_label(result.fits[name]['exponent'], result.fits[name]['ci'])}")
    m0 = result.means()["combined"][0][0]
    p = result.predicted["commuting"]
    ax.plot(s, m0 * s ** -p, "k:", label=f"Corollary 1.3 (C^∞ φ): slope at most −{p:.2f} (the slowest rate)")
    ax.set(xscale="log", yscale="log", xlabel="path scale s", ylabel="sup-in-time error (mean ± 2 SE)",
           title=f"d = {c.model.d}, T = {c.model.T:g}: N = {c.path_N[0]}s, L = {c.path_L[0]}s, m = {c.path_m[0]}s")
    integer_ticks(ax, s)
    ax.legend(fontsize=7)
    return finish(fig, created)


def plot_repulsion(result: Any, axes: Optional[Any] = None) -> "Figure":
    """RepulsionResult: the final mean cosine over (γ, σ) with the criterion's boundary γ = λ₁(σ),
    each cell marked ✓ (criterion agrees), ✗ (disagrees) or ? (no clear prediction); the mean cosine
    against t at the probe σ for every γ (right)."""
    c = result.config
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (12.5, 4.8))
    g, s = np.asarray(c.gammas, float), np.asarray(c.sigmas, float)
    cos = result.grid("final_cosine")
    mesh = ax[0, 0].pcolormesh(_edges(g), _edges(s), cos, shading="flat", cmap="viridis", vmin=-0.1, vmax=1.0)
    fig.colorbar(mesh, ax=ax[0, 0], label="final mean pairwise cosine (from uniform tokens)")
    b = result.boundary
    ax[0, 0].plot(b["gamma"], b["sigma"], "w-", lw=2, label=r"criterion boundary $\lambda_1 - \gamma = 0$ (sync to its right)")
    agree = result.agreement()
    marks = {1: "✓", 0: "✗", -1: "?"}
    for i, yy in enumerate(s):
        for j, xx in enumerate(g):
            ax[0, 0].text(xx, yy, f"{cos[i, j]:.2f} {marks[int(agree[i, j])]}", ha="center", va="center", fontsize=8,
                          color="w" if cos[i, j] < 0.6 else "k")
    ax[0, 0].set(xlim=(_edges(g)[0], _edges(g)[-1]), xlabel=r"$\gamma$ (V = $\gamma$I)", ylabel=r"$\sigma$",
                 title=f"{c.model.dynamics}, {c.model.activation}, d = {c.model.d}, N = {c.model.N}, T = {c.model.T:g}")
    ax[0, 0].legend(fontsize=7, loc="upper left")
    sig = c.probe[1]
    t = np.asarray(result.times)
    for k, gam in enumerate(c.gammas):
        key = f"gamma{gam:g}/sigma{sig:g}"
        if key in result.points:
            p = result.points[key]
            linear_band(ax[0, 1], t, np.asarray(p["cosine_mean"]), np.asarray(p["cosine_se"]), f"C{k}",
                        rf"$\gamma$ = {gam:g} ($\lambda_1-\gamma$ = {p['lambda_1_pred']:.2f})")
    ax[0, 1].set(xlabel="t", ylabel="mean pairwise cosine", title=rf"$\sigma$ = {sig:g}: from uniform tokens")
    ax[0, 1].legend(fontsize=7)
    return finish(fig, created)
