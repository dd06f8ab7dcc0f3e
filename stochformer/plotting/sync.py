"""Figures of the synchronisation experiments (``sync``, ``phase``, SPEC §6 items 1–3 and 6).
Each function reads a result object, draws into the given ``ax``/``axes`` (or a new figure) and
returns the figure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import (MIN_FONT_PT, SEQUENTIAL_CMAP, SIGNED_CMAP, annotate_cells, assign, figure_axes, finish, legend_below,
                   linear_band, log_band, symbol)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_sync(result: Any, axes: Optional[Any] = None) -> "Figure":
    """SyncResult: cumulative log-separation with slope λ₁ − γ (left); E[E_β] near synchronisation and
    from uniform tokens, semi-log, with the predicted slopes λ̄ − 2γ and the bound ε + λ̄' (right).

    Parameters
    ----------
    result : SyncResult
        What [`run_sync`][stochformer.experiments.sync.run_sync] returns.
    axes : sequence of matplotlib Axes, optional
        Two axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    t = result.times
    m, p = result.measured, result.predicted
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (11, 4))
    a1, a2 = ax[0]
    growth, growth_se = result.log_growth
    L = result.config.model.L
    at_L = m.get(f"lambda_1_at_{L}_steps")
    if at_L is None:  # not extrapolated: the value is the one of the curve
        linear_band(a1, t, growth, growth_se, "C0", f"measured ($L = {L}$): {m['lambda_1']:.4g} ± {m['lambda_1_se']:.2g} per unit $t$")
    else:  # the curve is at L steps; its Δt → 0 value has no curve of its own
        linear_band(a1, t, growth, growth_se, "C0", f"measured ($L = {L}$): slope {at_L:.4g}")
        a1.plot([], [], " ", label=rf"$\Delta t \to 0$: {m['lambda_1']:.4g} ± {m['lambda_1_se']:.2g} per unit $t$")
    if p["lambda_1_pred"] is not None:
        a1.plot(t, p["lambda_1_pred"] * t, "k--", label=rf"predicted $\lambda_1-\gamma$ = {p['lambda_1_pred']:.4g}")
    a1.set(xlabel="$t$ = layer · $T/L$", ylabel=r"mean of $\log(\delta_t/\delta_0)$", title="pair separation (renormalised)")
    a1.legend(fontsize=8)
    e0 = result.energy_near[0][0]
    tn = result.near_times
    near, near_se = result.energy_near
    L_near = len(tn) - 1
    near_at = m.get(f"energy_rate_at_{L_near}_steps")
    if near_at is None:
        log_band(a2, tn, near, near_se, "C1", f"near sync: rate {m['energy_rate']:.4g} ± {m['energy_rate_se']:.2g}")
    else:
        log_band(a2, tn, near, near_se, "C1", f"near sync ($L = {L_near}$): rate {near_at:.4g}; "
                 rf"$\Delta t \to 0$: {m['energy_rate']:.4g} ± {m['energy_rate_se']:.2g}")
    if p["lambda_bar_pred"] is not None:
        with np.errstate(over="ignore"):  # a prediction past float64 is inf, which matplotlib leaves out
            predicted = e0 * np.exp(p["lambda_bar_pred"] * tn)
        a2.plot(tn, predicted, "C1--", label=rf"$\bar\lambda-2\gamma$ = {p['lambda_bar_pred']:.4g}")
    if result.energy_uniform is not None:
        mu = result.energy_uniform[0]
        uni, uni_se = result.energy_uniform
        uni_at = m.get(f"energy_rate_uniform_at_{L}_steps")
        tail = f"{m['energy_rate_uniform']:.4g} ± {m['energy_rate_uniform_se']:.2g}"
        log_band(a2, t, uni, uni_se, "C2", f"uniform start: rate {tail}" if uni_at is None else
                 f"uniform start ($L = {L}$): rate {uni_at:.4g}; " + rf"$\Delta t \to 0$: {tail}")
        bound = p.get("bound_pred")
        if bound is not None:
            with np.errstate(over="ignore"):
                bounded = mu[0] * np.exp(bound * t)
            a2.plot(t, bounded, "C2:", label=rf"bound $\varepsilon+\bar\lambda'$ = {bound:.4g}")
    a2.set_yscale("log")
    a2.set(xlabel="$t$", ylabel=r"$E[E_\beta(\mu_t)]$", title="energy (mean ± 2 SE)")
    a2.legend(fontsize=8)
    c = result.config.model
    title = ", ".join([f"{c.dynamics}: {c.activation}"] + [assign(k, v) for k, v in (
        ("d", c.d), ("sigma_U", c.sigma_U), ("sigma_W", c.sigma_W), ("noise_scale", c.noise_scale),
        ("gamma", c.gamma_value if c.attention else 0), ("T", c.T), ("L", c.L))])
    return finish(fig, created, title)


def edges(c: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centres c (one cell of width 1 around a single centre).

    Parameters
    ----------
    c : numpy.ndarray
        Sorted centres.

    Returns
    -------
    numpy.ndarray
        len(c) + 1 edges.
    """
    c = np.asarray(c, float)
    if len(c) == 1:
        return np.asarray([c[0] - 0.5, c[0] + 0.5])
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])


def phase_title(c: Any) -> str:
    """The fixed parameters of a phase diagram (PhaseConfig ``c``), those on its axes left out.

    Parameters
    ----------
    c : PhaseConfig
        The phase diagram's configuration.

    Returns
    -------
    str
        The title.
    """
    m = c.model
    fixed = {"d": m.d, "gamma": m.gamma_value, "L": m.L, "T": m.T, **({"m": m.m} if m.dynamics == "transformer" else {})}
    shown = ", ".join(assign(k, v) for k, v in fixed.items() if k not in (c.x_field, c.y_field))
    return f"{m.dynamics}, {m.activation}, {shown}: predicted boundary in black"


def plot_phase(result: Any, ax: Optional["Axes"] = None) -> "Figure":
    """PhaseResult: the measured value over the grid (λ̂₁ or the synchronised fraction) with the
    predicted boundaries λ₁ − γ = 0 (solid) and λ̄ − 2γ = 0 (dashed).

    Parameters
    ----------
    result : PhaseResult
        What [`run_phase`][stochformer.experiments.phase.run_phase] returns.
    ax : matplotlib Axes, optional
        One axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    c = result.config
    created = ax is None
    fig, axs = figure_axes(ax, (1, 1), (6.5, 5))
    ax = axs[0, 0]
    x, y, v = result.x, result.y, result.value
    kw: dict[str, Any]
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patheffects import Normal, Stroke

    if c.measure == "lyapunov":
        lim = np.nanmax(np.abs(v)) or 1.0
        kw = dict(cmap=SIGNED_CMAP, norm=TwoSlopeNorm(0.0, -lim, lim))
        label = r"measured $\hat\lambda_1$ (pair exponent, incl. attention)"
    else:
        kw = dict(cmap=SEQUENTIAL_CMAP, vmin=0.0, vmax=1.0)
        label = f"fraction synchronised at T (min cos ≥ 1 − {c.sync_tol:g})"
    mesh = ax.pcolormesh(edges(x), edges(y), v, shading="flat", **kw)
    fig.colorbar(mesh, ax=ax, label=label)
    if len(result.fine_x) > 1 and len(result.fine_y) > 1:
        for field, style, name in ((result.fine_lambda_1, "-", r"$\lambda_1-\gamma=0$"), (result.fine_lambda_bar, "--", r"$\bar\lambda-2\gamma=0$")):
            if np.nanmin(field) < 0 < np.nanmax(field):
                halo = [Stroke(linewidth=3.0, foreground="w"), Normal()]  # readable on dark cells too
                cs = ax.contour(result.fine_x, result.fine_y, field, levels=[0.0], colors="k", linestyles=style)
                # a ContourSet is one artist from matplotlib 3.8 on; before, its lines are its collections
                for artist in ([cs] if hasattr(cs, "set_path_effects") else cs.collections):  # type: ignore[union-attr]
                    artist.set_path_effects(halo)
                ax.plot([], [], "k" + style, label=name, path_effects=halo)
    annotate_cells(ax, mesh, x, y, v)
    ax.set(xlabel=symbol(c.x_field), ylabel=symbol(c.y_field), title=phase_title(c))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=2, borderaxespad=0.0, frameon=False)
    return finish(fig, created)


def plot_cluster_picture(result: Any, sample: int = 0, axes: Optional[Any] = None) -> "Figure":
    """ClustersResult: the paper's picture, the first two coordinates of the final tokens of one
    sample, one panel per activation.

    Parameters
    ----------
    result : ClustersResult
        What [`run_clusters`][stochformer.experiments.paper.run_clusters] returns.
    sample : int, optional
        The sample shown.
    axes : sequence of matplotlib Axes, optional
        One axes per activation to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    acts = list(result.final)
    created = axes is None
    fig, ax = figure_axes(axes, (1, len(acts)), (4.0 * len(acts), 4.0))
    theta = np.linspace(0, 2 * np.pi, 200)
    for a, act in zip(ax[0], acts):
        X = np.asarray(result.final[act])[sample]
        a.plot(np.cos(theta), np.sin(theta), color="0.8", lw=1)
        a.scatter(X[:, 0], X[:, 1], s=12)
        a.set(xlim=(-1.1, 1.1), ylim=(-1.1, 1.1), aspect="equal", xlabel="$x_1$", ylabel="$x_2$",
              title=f"{act}: final tokens (sample {sample})")
    return finish(fig, created)


def plot_clusters(result: Any, axes: Optional[Any] = None) -> "Figure":
    """ClustersResult (SPEC §6 item 1): cosines against layer and the final pair-cosine histograms.

    Parameters
    ----------
    result : ClustersResult
        What [`run_clusters`][stochformer.experiments.paper.run_clusters] returns.
    axes : sequence of matplotlib Axes, optional
        1 + (number of activations) axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    acts = list(result.curves)
    created = axes is None
    fig, ax = figure_axes(axes, (1, 1 + len(acts)), (4.2 * (1 + len(acts)), 3.8))
    axes = ax[0]
    for k, act in enumerate(acts):
        c = result.curves[act]
        axes[0].plot(c["layers"], c["mean_cosine"], color=f"C{k}", label=f"{act}: mean cos")
        axes[0].plot(c["layers"], c["min_cosine"], color=f"C{k}", ls=":", label=f"{act}: min cos")
        cl = result.clusters[act]
        centres = 0.5 * (cl.bins[1:] + cl.bins[:-1])
        axes[1 + k].bar(centres, cl.histogram, width=np.diff(cl.bins), color=f"C{k}")
        axes[1 + k].set_yscale("log")
        axes[1 + k].set_ylim(bottom=0.8)  # whole decades from one pair up, whatever the counts
        axes[1 + k].set(xlabel=r"$\langle x_i, x_j\rangle$ at the last layer", ylabel="pairs",
                        title=f"{act}: clusters {np.mean(cl.n_clusters):.2g}, antipodal pairs {np.mean(cl.n_antipodal):.2g}")
    axes[0].set(xlabel="layer", ylabel="cosine", ylim=(-1.05, 1.05), title=f"{assign('d', 4)}, no attention")
    axes[0].legend(fontsize=7)
    return finish(fig, created)


def plot_scenarios(result: Any, quantity: str = "mean_cosine", axes: Optional[Any] = None) -> "Figure":
    """ScenariosResult (SPEC §6 item 2): ``quantity`` against layer; one panel per (d, σ), one colour
    per activation, line style per γ.

    Parameters
    ----------
    result : ScenariosResult
        What [`run_scenarios`][stochformer.experiments.paper.run_scenarios] returns.
    quantity : str, optional
        The statistic drawn: ``mean_cosine``, ``min_cosine`` or ``energy``.
    axes : sequence of matplotlib Axes, optional
        (number of σ) × (number of d) axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    keys = result.keys
    ds = sorted({k["d"] for k in keys.values()})
    sigmas = sorted({k["sigma"] for k in keys.values()})
    acts = list(dict.fromkeys(k["activation"] for k in keys.values()))
    styles = {1.0: "-", 0.0: "--", -1.0: ":"}
    created = axes is None
    fig, axes = figure_axes(axes, (len(sigmas), len(ds)), (4.2 * len(ds), 3.3 * len(sigmas)))
    for key, c in keys.items():
        run = result.runs[key]
        sig_rows = [sigmas.index(c["sigma"])] if c["activation"] != "none" else range(len(sigmas))
        for r in sig_rows:
            ax = axes[r, ds.index(c["d"])]
            ax.plot(run["layers"], run[quantity], color=f"C{acts.index(c['activation'])}", ls=styles.get(c["gamma"], "-."),
                    label=f"{c['activation']}, {assign('gamma', float(c['gamma']))}")
            ax.set(title=f"{assign('d', c['d'])}, {assign('sigma', float(sigmas[r]))}", xlabel="layer",
                   ylabel=_QUANTITIES.get(quantity, quantity))
            if quantity == "energy":
                ax.set_yscale("log")
    fig = finish(fig, created)
    if created:
        legend_below(fig, axes, ncol=len(styles))
    else:
        axes[0, -1].legend(fontsize=MIN_FONT_PT, ncol=2, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig


_QUANTITIES = {"mean_cosine": "mean cosine", "min_cosine": "min cosine", "energy": r"$E_\beta$"}


def plot_table(result: Any, axes: Optional[Any] = None) -> "Figure":
    """TableResult (SPEC §6 item 3): measured against computed λ₁ and λ̄ (±2 SE), with y = x.

    Parameters
    ----------
    result : TableResult
        What [`run_table`][stochformer.experiments.paper.run_table] returns.
    axes : sequence of matplotlib Axes, optional
        Two axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    created = axes is None
    fig, ax2 = figure_axes(axes, (1, 2), (10, 4.3))
    axes = ax2[0]
    for ax, q, name in ((axes[0], "lambda_1", r"$\lambda_1$"), (axes[1], "lambda_bar", r"$\bar\lambda$")):
        pred = np.array([r[f"{q}_pred"] for r in result.rows])
        meas = np.array([r[q] for r in result.rows])
        se = np.array([r[f"{q}_se"] for r in result.rows])
        acts = [r["activation"] for r in result.rows]
        for k, act in enumerate(dict.fromkeys(acts)):
            sel = np.array([a == act for a in acts])
            ax.errorbar(pred[sel], meas[sel], yerr=2 * se[sel], fmt="o", color=f"C{k}", label=act, ms=4)
        lo, hi = diagonal_limits(pred, meas, 2 * se)
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="$y = x$")
        ax.set(xlim=(lo, hi), ylim=(lo, hi), aspect="equal", xlabel=f"computed {name}",
               ylabel=f"measured {name} (transformer)")
        ax.legend(fontsize=8, loc="upper left")
    return finish(fig, created)


def diagonal_limits(x: Any, y: Any, yerr: Any, margin: float = 0.08) -> tuple[float, float]:
    """One range ``(lo, hi)`` for both axes of a measured-against-predicted plot: it holds every
    ``x`` and every ``y ± yerr`` (finite ones) with ``margin`` of its width on each side, and is
    never empty (a single point gets a width of 10% of its size, or 1), so ``y = x`` is the
    diagonal of square axes.

    Parameters
    ----------
    x : array_like
        Predicted values.
    y : array_like
        Measured values.
    yerr : array_like
        Their error bars.
    margin : float, optional
        The fraction of the width added on each side.

    Returns
    -------
    tuple of float
        (lo, hi).
    """
    x, y, e = (np.asarray(a, float).ravel() for a in (x, y, yerr))
    vals = np.concatenate([x, y - np.nan_to_num(e), y + np.nan_to_num(e)])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return -1.0, 1.0
    lo, hi = float(vals.min()), float(vals.max())
    width = hi - lo
    if width <= 0:
        width = 0.1 * abs(hi) or 1.0
    return lo - margin * width, hi + margin * width


def plot_cluster_course(result: Any, sample: int = 0, axes: Optional[Any] = None) -> "Figure":
    """ClustersResult (SPEC §6 item 1): the number of clusters (of projective space for an odd field)
    against t, per sample and mean, over the paper's run and the run to the predicted attractor
    horizon (marked), above the paper's picture ([`plot_cluster_picture`][stochformer.plotting.sync.plot_cluster_picture]).

    Parameters
    ----------
    result : ClustersResult
        What [`run_clusters`][stochformer.experiments.paper.run_clusters] returns.
    sample : int, optional
        The sample of the picture.
    axes : sequence of matplotlib Axes, optional
        2 × (number of activations) axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    acts = list(result.courses)
    created = axes is None
    fig, ax = figure_axes(axes, (2, len(acts)), (4.4 * len(acts), 8.2))
    for k, act in enumerate(acts):
        c, a = result.courses[act], ax[0, k]
        for times, counts, style in ((c["times"], c["counts"], "-"), (c["long_times"], c["long_counts"], "--")):
            counts = np.asarray(counts, float)
            if counts.size == 0:
                continue
            a.plot(times, counts.T, color=f"C{k}", lw=0.6, alpha=0.4, ls=style)
            a.plot(times, counts.mean(axis=0), color=f"C{k}", lw=2, ls=style)
        if np.isfinite(c["horizon"]):
            a.axvline(c["horizon"], color="k", ls="--", lw=1, label=f"predicted horizon {c['horizon']:.3g}")
        a.axvline(c["T"], color="0.5", ls=":", lw=1, label=f"$T$ = {c['T']:g}")
        a.set_yscale("log")
        a.set(xlabel="$t$", ylabel="projective clusters" if c["up_to_sign"] else "clusters",
              title=rf"{act}: $\lambda_1$ = {c['lambda_1']:.3g}")
        a.legend(fontsize=7)
    plot_cluster_picture(result, sample, axes=ax[1])
    return finish(fig, created)


def plot_motions(result: Any, axes: Optional[Any] = None) -> "Figure":
    r"""MotionsResult: $\mathbb E\langle x_0, X_t\rangle$ against t per dynamics with $e^{-\kappa(1)(d-1)t/2}$ (left) and histograms
    of u_T per dynamics beside the scalar two-point diffusion's (right).

    Parameters
    ----------
    result : MotionsResult
        What [`run_motions`][stochformer.experiments.motions.run_motions] returns.
    axes : sequence of matplotlib Axes, optional
        Two axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (10, 4))
    a1, a2 = ax[0]
    t, p = result.times, result.predicted
    for k, (dyn, (mean, se)) in enumerate(result.one_point.items()):
        m = result.measured[dyn]
        linear_band(a1, t, mean, se, f"C{k}", f"{dyn}: rate {m['one_point_rate']:.4g} ± {m['one_point_rate_se']:.2g}")
    fine = np.linspace(0, p["T"], 200)
    a1.plot(fine, np.exp(p["one_point_rate"] * fine), "k--", label=f"predicted rate {p['one_point_rate']:.4g}")
    a1.set(xlabel="$t$", ylabel=r"$E\langle x_0, X_t\rangle$", title="one point")
    a1.legend(fontsize=8)
    bins = np.linspace(-1, 1, 61)
    a2.hist(result.u_reference, bins=bins, density=True, histtype="stepfilled", color="0.85", label="scalar diffusion")
    for k, (dyn, u) in enumerate(result.u_final.items()):
        a2.hist(u, bins=bins, density=True, histtype="step", color=f"C{k}", lw=1.5, label=dyn)
    a2.axvline(p["threshold"], color="k", ls=":", lw=1, label=f"tail threshold {p['threshold']:g}")
    a2.set(xlabel=r"$u_T = \langle X^1_T, X^2_T\rangle$", ylabel="density",
           title=f"two points from $u_0$ = {p['u0']:g} at $T$ = {p['T']:g}")
    a2.legend(fontsize=8)
    return finish(fig, created, rf"$d$ = {p['d']}, $\kappa(1)$ = {p['kappa']:.3g}")
