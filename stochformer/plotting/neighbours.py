"""Figures of the neighbouring models (docs/neighbours.md) beside their published predictions, from
[`NeighboursResult`][stochformer.experiments.neighbours.NeighboursResult]'s ``to_dict()`` parts: the
mean overlap of homogenized attention at β = 0 against the logistic law, a pair at large β against
the linear kernel (and P(aligned) by the scale function against arcsin), the distance to the random
attractor of random quadratic forms against the exact law and the published bounds, P(antipodal)
of value-matrix noise over (β, d) with its threshold, and common against independent noise."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from .core import MIN_FONT_PT, SEQUENTIAL_CMAP, figure_axes, finish, legend_below

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_logistic(overlap: dict, logistic: dict, ax: Optional["Axes"] = None) -> "Figure":
    """``overlap`` (an [`OverlapCheck`][stochformer.experiments.neighbours.OverlapCheck] as a dict):
    the mean overlap m(t) = |x̄|² at β = 0, mean ± 2 SE over the samples, against the logistic
    u′ = u(1 − u) on τ = σ_V²(d − 1)t from each sample's m(0) (``logistic``: ``t``, ``m``) with the
    O(1/d) band of the rows' tolerance. ``ax``: one axes, or None.

    Parameters
    ----------
    overlap : dict
        ``NeighboursResult.overlap`` as a dict: ``times``, ``mean``, ``se``, ``predicted``, ``band``
        (each of length t), ``batch``, ``d`` and ``N``.
    logistic : dict
        The logistic curve (``curves["logistic"]``): ``t`` and ``m``, of one length.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (5.5, 3.8))
    a = axes[0, 0]
    a.plot(logistic["t"], logistic["m"], "k-", label=r"logistic $\dot u = u(1-u)$, $\tau = \sigma_V^2(d-1)\,t$")
    t = np.asarray(overlap["times"], float)
    pred, band = np.asarray(overlap["predicted"], float), np.asarray(overlap["band"], float)
    a.fill_between(t, pred - band, pred + band, color="0.6", alpha=0.4, lw=0, label="O(1/d) band (tolerance)")
    mean, se = np.asarray(overlap["mean"], float), np.asarray(overlap["se"], float)
    a.errorbar(t, mean, yerr=2 * se, fmt="o", color="C0", ms=4, capsize=3,
               label=f"homogenized attention, {overlap['batch']} samples (± 2 SE)")
    a.set(xlabel="$t$ (layers × $\\eta$)", ylabel=r"$m(t) = |\bar x|^2$",
          title=rf"$\beta = 0$: $d = {overlap['d']}$, $N = {overlap['N']}$, $\sigma_V^2 = 1/d$")
    if created:
        legend_below(fig, axes, ncol=1)
    return finish(fig, created)


def plot_large_beta(large: dict, linear: dict, aligned: dict, axes: Optional[Sequence["Axes"]] = None,
                    run: Optional[dict] = None) -> "Figure":
    """Left: a pair under homogenized attention at large β, E z − z₀ and E z² − z₀² (± 2 SE) at the
    slow time s = σ_V² t, against the exact law of du = −u(1−u²)ds + √2(1−u²)dB (``linear``: ``s``,
    ``z``, ``z2``) and the frozen pair (0). Right: P(the pair ends aligned | u₀) by the scale function of the
    linear kernel (quadrature) against arcsin(u₀)/π + ½ (``aligned``), with the long run of the layers
    at large d (``run``, if given): its P(z_s > 0) (± 2 SE) beside the linear kernel's at the same s.
    ``axes``: two axes, or None.

    Parameters
    ----------
    large : dict
        ``NeighboursResult.large_beta`` as a dict: ``z0``, ``s``, ``beta``, ``d``, ``pairs`` and
        ``moments`` (``z`` and ``z2`` → (mean, SE)).
    linear : dict
        The linear kernel's exact moments (``curves["linear"]``): ``s``, ``z`` and ``z2``, of one length.
    aligned : dict
        P(aligned | u₀) (``curves["aligned"]``): ``u0``, ``scale_function`` and ``arcsin``, of one length.
    axes : sequence of matplotlib.axes.Axes, optional
        Two axes.
    run : dict, optional
        ``NeighboursResult.aligned`` as a dict: ``z0``, ``s``, ``d``, ``eta``, ``above``, ``pairs`` and
        ``exact``.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (10, 3.8))
    a, b = ax[0]
    s = np.asarray(linear["s"], float)
    z0 = large["z0"]
    a.axhline(0.0, color="k", ls=":", lw=1, label="frozen pair")
    for key, colour, label in (("z", "C0", r"$\mathbb{E}\,z - z_0$"), ("z2", "C1", r"$\mathbb{E}\,z^2 - z_0^2$")):
        start = z0 if key == "z" else z0 * z0
        a.plot(np.concatenate([[0.0], s]), np.concatenate([[0.0], np.asarray(linear[key], float) - start]), "-",
               color=colour, label=f"{label}: linear kernel, exact")
        m, se = large["moments"][key]
        a.errorbar([large["s"]], [m - start], yerr=[2 * se], fmt="o", color=colour, ms=5, capsize=3,
                   label=f"{label}: simulated, {large['pairs']} pairs (± 2 SE)")
    a.set(xlabel=r"$s = \sigma_V^2\,t = t/d$", ylabel="change of the moment since $s = 0$",
          title=rf"$\beta_{{\rm eff}} = {large['beta']:g}$, $d = {large['d']}$, $z_0 = {z0:g}$")
    u0 = np.asarray(aligned["u0"], float)
    b.plot(u0, aligned["arcsin"], "k-", label=r"$\arcsin(u_0)/\pi + 1/2$ (published)")
    b.plot(u0[::3], np.asarray(aligned["scale_function"], float)[::3], "o", color="C2", ms=5,
           label=r"scale function of $\kappa(u) = u/d$ (quadrature)")
    if run is not None:
        p = run["above"] / run["pairs"]
        b.plot([run["z0"]], [run["exact"]], "s", color="C3", mfc="none", ms=7,
               label=rf"linear kernel's $P(z_s > 0)$ at $s = {run['s']:g}$")
        b.errorbar([run["z0"]], [p], yerr=[2 * np.sqrt(p * (1 - p) / run["pairs"])], fmt="o", color="C3", ms=5,
                   capsize=3, label=rf"layers, $d = {run['d']}$, $\eta = {run['eta']:g}$: $P(z_s > 0)$ (± 2 SE)")
    b.set(xlabel=r"$u_0$", ylabel="P(the pair ends aligned)", title="large β: the linear kernel's scale function")
    if created:
        legend_below(fig, ax, ncol=2)
    return finish(fig, created)


def plot_attractor(unforced: dict, forced: dict, curves: dict, axes: Optional[Sequence["Axes"]] = None) -> "Figure":
    """E dist(X_t, A) for random quadratic forms (log y), unforced (left, from z₀ = 0) and forced
    (right, from z₀ = −0.99): simulated (± 2 SE), the exact law (Kolmogorov equation of the pair
    kernel; ``curves[...]["exact"]``) and the published bound (dashed). ``unforced``, ``forced``:
    [`AttractorCheck`][stochformer.experiments.neighbours.AttractorCheck] as dicts. ``axes``: two axes, or None.

    Parameters
    ----------
    unforced : dict
        ``NeighboursResult.unforced`` as a dict: ``times``, ``mean``, ``se`` (each of length t),
        ``pairs``, ``gamma`` and ``d``.
    forced : dict
        ``NeighboursResult.forced`` as a dict, the same keys.
    curves : dict
        ``NeighboursResult.curves``: its ``unforced`` and ``forced`` entries, each ``t``, ``exact`` and
        ``bound`` of one length.
    axes : sequence of matplotlib.axes.Axes, optional
        Two axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (10, 3.8))
    for a, check, curve, law in ((ax[0, 0], unforced, curves["unforced"], r"$(\pi/\sqrt{2})\,e^{-t/2}$"),
                                 (ax[0, 1], forced, curves["forced"], r"$\pi\,e^{-\lambda_\gamma t}$, $n = d$")):
        a.plot(curve["t"], curve["exact"], "k-", label="exact (pair diffusion)")
        a.plot(curve["t"], curve["bound"], "--", color="C3", label=f"published bound {law}")
        t = np.asarray(check["times"], float)
        mean, se = np.asarray(check["mean"], float), np.asarray(check["se"], float)
        lo = np.maximum(mean - 2 * se, mean * 0.05)
        a.errorbar(t, mean, yerr=[mean - lo, 2 * se], fmt="o", color="C0", ms=4, capsize=3,
                   label=f"simulated, {check['pairs']} pairs (± 2 SE)")
        a.set_yscale("log")
        _decade_ticks(a, np.concatenate([curve["exact"], curve["bound"], lo]))
        gamma = check["gamma"]
        a.set(xlabel="$t$", ylabel=r"$\mathbb{E}\,\mathrm{dist}(X_t, \mathcal{A})$",
              title=(rf"forced, $\gamma = {gamma:g}$: one attracting point" if gamma > 0
                     else "unforced: the antipodal attractor") + rf", $d = {check['d']}$")
    if created:
        legend_below(fig, ax, ncol=3)
    return finish(fig, created)


def _decade_ticks(ax: "Axes", values: np.ndarray) -> None:
    """Ticks of a log y axis at 1, 2, 5 × 10^k within the range of ``values``, labelled plainly."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = np.floor(np.log10(v.min())), np.ceil(np.log10(v.max()))
    ticks = [m * 10.0**k for k in np.arange(lo, hi + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if v.min() / 1.5 <= t <= v.max() * 1.5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_yticks([], minor=True)


def plot_value_transition(value: dict, checks: Sequence[dict], ax: Optional["Axes"] = None) -> "Figure":
    """P(antipodal | z₀ = 0) of value-matrix noise over (β, d) (``value``: ``beta``, ``d``, ``p``
    (len(d), len(β)), ``beta_c``), its zero set (grey) bounded by the threshold (d − 2) sech 2β = 1
    (β_c(d), dashed), and the simulated fraction at each run of ``checks``
    ([`AntipodalCheck`][stochformer.experiments.neighbours.AntipodalCheck] as dicts), labelled
    measured (the exact law at its horizon). ``ax``: one axes, or None.

    Parameters
    ----------
    value : dict
        The grid (``curves["value"]``): ``beta`` (len(β), sorted), ``d`` (len(d), sorted), ``p``
        (len(d), len(β)) and ``beta_c`` (len(d)).
    checks : sequence of dict
        ``NeighboursResult.value`` as dicts: ``beta``, ``d``, ``antipodal``, ``pairs`` and ``exact``.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    import matplotlib as mpl
    from matplotlib.patches import Rectangle

    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (6.5, 4.4))
    a = axes[0, 0]
    beta, dims = np.asarray(value["beta"], float), np.asarray(value["d"], float)
    P = np.asarray(value["p"], float)
    cmap = mpl.colormaps[SEQUENTIAL_CMAP].with_extremes(bad="0.85")
    mesh = a.pcolormesh(_edges(beta), _edges(dims), np.ma.masked_equal(P, 0.0), cmap=cmap, vmin=0.0, vmax=0.5,
                        shading="flat")
    fig.colorbar(mesh, ax=a, label=r"$P(z_t \to -1 \mid z_0 = 0)$")
    a.add_patch(Rectangle((0, 0), 0, 0, color="0.85", label="P = 0: the antipode is not reached"))
    dd = np.linspace(max(3.0, dims.min() - 0.5), dims.max() + 0.5, 200)
    a.plot(0.5 * np.arccosh(dd - 2), dd, "k--", lw=1.5, label=r"threshold $(d-2)\,\mathrm{sech}\,2\beta = 1$")
    for c in checks:
        a.plot(c["beta"], c["d"], "D", ms=8, color="C3", mec="w")
        a.annotate(f"{c['antipodal'] / c['pairs']:.3f} ({c['exact']:.3f})", (c["beta"], c["d"]), fontsize=MIN_FONT_PT,
                   xytext=(5, 5), textcoords="offset points", bbox=dict(boxstyle="round,pad=0.4", fc="w", ec="none", alpha=0.9))
    a.set(xlim=(_edges(beta)[0], _edges(beta)[-1]), ylim=(_edges(dims)[0], _edges(dims)[-1]),
          xlabel=r"attention $\beta$", ylabel="$d$",
          title="value-matrix noise: P(antipodal); ◆ simulated P(z_T < 0) (exact at T)")
    if created:
        legend_below(fig, axes, ncol=1)
    return finish(fig, created)


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centres (half-way between neighbours, mirrored at the ends)."""
    c = np.asarray(centres, float)
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])


def plot_contrast(contrast: Sequence[dict], ax: Optional["Axes"] = None) -> "Figure":
    """E z_T of a pair from z₀ under one common field and under independent fields of the same κ
    (``contrast``: [`ContrastCheck`][stochformer.experiments.neighbours.ContrastCheck] as dicts, one
    per d): simulated (± 2 SE) beside the exact values (×): synchronisation only under the common
    field. ``ax``: one axes, or None.

    Parameters
    ----------
    contrast : sequence of dict
        ``NeighboursResult.contrast`` as dicts, at least one: ``common`` and ``independent`` ((E z_T,
        SE) each), ``common_exact``, ``independent_exact``, ``d`` and ``T``.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (6.0, 3.8))
    a = axes[0, 0]
    labels = []
    for i, c in enumerate(contrast):
        for j, (key, colour, name) in enumerate((("common", "C0", "common field"), ("independent", "C1", "independent fields"))):
            x = 2 * i + j
            m, se = c[key]
            a.errorbar([x], [m], yerr=[2 * se], fmt="o", color=colour, ms=6, capsize=4,
                       label=f"{name}: simulated (± 2 SE)")
            a.plot([x], [c[f"{key}_exact"]], "x", color="k", ms=9, mew=2, label="exact")
            labels.append(f"$d = {c['d']}$\n{name.split()[0]}")
    a.axhline(0.0, color="0.7", lw=0.8)
    a.set_xticks(range(len(labels)), labels)
    a.set(xlim=(-0.6, len(labels) - 0.4), ylabel=r"$\mathbb{E}\,z_T$",
          title=rf"ReLU $\kappa$, $z_0 = 0.5$, $T = {contrast[0]['T']:g}$: common vs independent noise")
    if created:
        legend_below(fig, axes, ncol=3)
    return finish(fig, created)
