"""Figures of the claims beyond the paper's own figures: the joint limit of Corollary 1.3 along a
diagonal path (`JointResult`) and Theorem 1.4 with attention
from uniform tokens, the outcome map beside the linearised criterion
(`RepulsionResult`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import MIN_FONT_PT, SEQUENTIAL_CMAP, annotate_cells, exponent_label, figure_axes, finish, integer_ticks, linear_band, log_band
from .sync import edges

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_joint(result: Any, ax: Optional[Any] = None) -> "Figure":
    """JointResult: E sup W₂² to μ_t of each measured family against the path's scale s (log–log,
    ± 2 SE) with its fitted exponent, and each predicted slope through the family's first point
    (form (ii) for the diagonal, ½ for the inner limits, r_d(N) for the SDE)."""
    c = result.config
    created = ax is None
    fig, axs = figure_axes(ax, (1, 1), (6.5, 4.5))
    ax = axs[0, 0]
    s = c.scale
    p = result.predicted
    names = {"diagonal": ("transformer (N, L, m) ∝ s", p["commuting"], "Corollary 1.3 (ii), C∞ φ"),
             "inner": (f"|transformer − N-particle SDE| at N = {c.inner_N}", p["inner"], "(i), inner limits"),
             "sde": ("N-particle SDE", p["r_d"], "(i), outer limit r_d(N)")}
    for k, (name, (m, se)) in enumerate(result.means().items()):
        label, slope, claim = names[name]
        fit = result.fits[name]
        log_band(ax, s, m, se, f"C{k}", f"{label}: {exponent_label(fit['exponent'], fit['ci'])}")
        ax.plot(s, m[0] * s ** -slope, ":", color=f"C{k}", label=f"{claim}: slope −{slope:.2f} at most")
    ax.set(xscale="log", yscale="log", xlabel="path scale s",
           ylabel=r"$E\,\sup_t W_2^2(\cdot, \mu_t)$ (mean ± 2 SE)",
           title=f"d = {c.model.d}, T = {c.model.T:g}: N = {c.path_N[0]}s, L = {c.path_L[0]}s, m = {c.path_m[0]}s")
    integer_ticks(ax, s)
    ax.legend(fontsize=7)
    return finish(fig, created)


def plot_repulsion(result: Any, axes: Optional[Any] = None) -> "Figure":
    """RepulsionResult: the final mean cosine over (γ, σ) with the criterion's boundary γ = λ₁(σ),
    each cell marked ✓ (criterion agrees), ✗ (disagrees) or ? (no clear prediction); the mean cosine
    against t at the probe σ for every γ (right)."""
    from matplotlib.patheffects import Normal, Stroke

    c = result.config
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (12.5, 4.8))
    g, s = np.asarray(c.gammas, float), np.asarray(c.sigmas, float)
    cos = result.grid("final_cosine")
    mesh = ax[0, 0].pcolormesh(edges(g), edges(s), cos, shading="flat", cmap=SEQUENTIAL_CMAP, vmin=-0.1, vmax=1.0)
    fig.colorbar(mesh, ax=ax[0, 0], label="final mean pairwise cosine (from uniform tokens)")
    b = result.boundary
    ax[0, 0].plot(b["gamma"], b["sigma"], "w-", lw=2, path_effects=[Stroke(linewidth=3.5, foreground="k"), Normal()],
                 label=r"criterion boundary $\lambda_1 - \gamma = 0$ (sync to its right)")
    agree = result.agreement()
    marks = {1: "✓", 0: "✗", -1: "?"}
    labels = [[f"{cos[i, j]:.2f} {marks[int(agree[i, j])]}".replace("-", "−") for j in range(len(g))] for i in range(len(s))]
    annotate_cells(ax[0, 0], mesh, g, s, cos, labels=labels)
    ax[0, 0].set(xlim=(edges(g)[0], edges(g)[-1]), xlabel=r"$\gamma$ (V = $\gamma$I)", ylabel=r"$\sigma$",
                 title=f"{c.model.dynamics}, {c.model.activation}, d = {c.model.d}, N = {c.model.N}, T = {c.model.T:g}")
    ax[0, 0].legend(fontsize=MIN_FONT_PT, loc="lower left", bbox_to_anchor=(0.0, 1.08), borderaxespad=0.0, frameon=False)
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
