"""Figures of the exact theory (SPEC §8) beside simulation, from
[`ExactResult`][stochformer.experiments.exact.ExactResult]'s ``to_dict()`` parts: the probability of
ending antipodal against the attention's β across β*, the energy decay (exact, measured, Theorem
1.4's bound), and the order-to-chaos phase diagram with measured λ₁ points. The spectrum's figure is
[`plot_spectrum`][stochformer.plotting.spectrum.plot_spectrum]."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import figure_axes, finish
from .phase_gain import plot_gain_phase

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_antipodal(pair: dict, ax: Optional[Any] = None) -> "Figure":
    """``pair`` (``ExactResult.pair``): the probability of ending antipodal P(z → −1 | z₀) against β
    (the scale function; solid), the exact P(Z_T < 0) at the runs' horizon T (the forward equation;
    ×), the simulated fraction of pairs with z_T < 0 with its Clopper–Pearson 95% interval, and the
    threshold β* (dotted) where the antipode starts to attract. ``ax``: one axes, or None.

    Parameters
    ----------
    pair : dict
        ``ExactResult.pair``.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (6.5, 4.2))
    a = axes[0, 0]
    line = pair["line"]
    p = np.array([np.nan if x is None else x for x in line["p_antipodal"]], float)
    a.plot(line["beta"], p, "k-", label=r"$P(z_t \to -1 \mid z_0)$ (scale function, $T = \infty$)")
    beta = np.asarray(pair["beta"], float)
    a.plot(beta, pair["p_T"], "x", color="C1", ms=8, mew=2, label=f"exact $P(Z_T < 0)$, T = {pair['T']:g}")
    ci = np.asarray(pair["ci"], float)
    hat = np.asarray(pair["p_hat"], float)
    a.errorbar(beta, hat, yerr=[hat - ci[:, 0], ci[:, 1] - hat], fmt="o", color="C0", ms=4, capsize=3,
               label=f"{pair['dynamics']}: fraction with $z_T < 0$ (95% CI, {pair['n'][0]} pairs)")
    if pair.get("beta_star") is not None:
        a.axvline(pair["beta_star"], color="k", ls=":", lw=1, label=rf"$\beta^* = {pair['beta_star']:.3g}$")
    a.set(xlabel=r"attention $\beta$ ($Q^\top K = \beta I$)", ylabel="probability",
          title=rf"two tokens from $z_0 = {pair['z0']:g}$, $V = {pair['v']:g}\,I$", ylim=(-0.02, None))
    a.legend(fontsize=8)
    return finish(fig, created)


def plot_energy(energy: dict, ax: Optional[Any] = None) -> "Figure":
    """``energy`` (``ExactResult.energy``): E[E_β(μ^N_t)] against t on a log axis: exact (backward
    equation; solid), the simulated mean ± 2 SE, and Theorem 1.4's bound E_β(μ₀)·e^{λ̄' t} (dashed),
    with the exact long-time rate in the legend. ``ax``: one axes, or None.

    Parameters
    ----------
    energy : dict
        ``ExactResult.energy``.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (6.5, 4.2))
    a = axes[0, 0]
    t = np.asarray(energy["times"], float)
    a.plot(t, energy["exact"], "k-", label=f"exact (long-time rate {energy['rate']:.3g}, {energy['rate_kind']})")
    mean, se = np.asarray(energy["mean"], float), np.asarray(energy["se"], float)
    a.errorbar(t, mean, yerr=2 * se, fmt="o", ms=4, color="C0", capsize=3,
               label=f"limit SDE, {energy['n']} runs of N = {energy['N']} (± 2 SE)")
    a.plot(t, energy["bound"], "--", color="C3", label=rf"Theorem 1.4: $E_\beta(\mu_0)\,e^{{\bar\lambda' t}}$, "
                                                        rf"$\bar\lambda' = {energy['lambda_bar_prime']:.3g}$")
    if np.all(np.asarray(energy["exact"]) > 0) and np.all(mean > 0):
        a.set_yscale("log")
    a.set(xlabel="$t$", ylabel=r"$\mathbb{E}\,E_\beta(\mu_t)$", title="energy decay without attention, uniform tokens")
    a.legend(fontsize=8)
    return finish(fig, created)


def plot_phase_measured(phase: Any, points: list[dict], ax: Optional[Any] = None) -> "Figure":
    """The phase diagram ``phase`` ([`GainPhase`][stochformer.model.kernel.GainPhase], drawn by
    [`plot_gain_phase`][stochformer.plotting.phase_gain.plot_gain_phase]) with the measured λ̂₁ at
    ``points`` (``ExactResult.points``): ▲ measured λ̂₁ > 0, ▼ < 0, each labelled λ̂₁ (predicted).

    Parameters
    ----------
    phase : GainPhase
        The phase diagram.
    points : list of dict
        ``ExactResult.points``.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    fig = plot_gain_phase(phase, ax=ax)
    a = fig.axes[0] if ax is None else ax
    for pt in points:
        up = pt["measured"] > 0
        a.plot(pt["gain"], pt["sigma_U"], "^" if up else "v", ms=9, color="C3" if up else "C0", mec="k")
        a.annotate(f"{pt['measured']:.2f} ({pt['predicted']:.2f})", (pt["gain"], pt["sigma_U"]), fontsize=7,
                   xytext=(4, 4), textcoords="offset points",  # on a white box: readable on any cell
                   bbox=dict(boxstyle="round,pad=0.6", fc="w", ec="none", alpha=0.9))
    return fig
