"""Figures of the ``chaos`` experiment (SPEC §6 item 5): the coupled error and W₂² against N with
fitted slopes beside r_d(N), the conditional decorrelation, and the reference measure (E_β, mean
token, density on S² for d = 3). Reads [`ChaosResult`][stochformer.experiments.chaos.ChaosResult] only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import assign, exponent_label, figure_axes, finish, integer_ticks, rate_law

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from ..experiments.chaos import ChaosResult


def _fit_line(ax, N, fit: dict, color, label: str) -> None:
    if fit.get("exponent") is None:
        return
    N = np.asarray(N, float)
    ax.plot(N, fit["prefactor"] * N ** -fit["exponent"], "--", color=color,
            label=f"{label}: {exponent_label(fit['exponent'], fit['ci'])}")


def _guide(ax, N, y0: float, law: np.ndarray, label: str, color="0.4") -> None:
    """A rate law through the first measured point."""
    law = np.asarray(law, float)
    ax.plot(N, y0 * law / law[0], ":", color=color, label=label)


def plot_chaos(result: "ChaosResult", axes: Optional[Any] = None) -> "Figure":
    """2×2 panels: coupling, W₂² per d, decorrelation, reference summaries.

    Parameters
    ----------
    result : ChaosResult
        What [`run_chaos`][stochformer.experiments.chaos.run_chaos] returns.
    axes : sequence of matplotlib Axes, optional
        Four axes (2×2) to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    cfg, tab = result.config, result.to_dict()
    sizes = np.asarray(cfg.sizes, float)
    created = axes is None
    fig, axes = figure_axes(axes, (2, 2), (12, 9))
    n_ref = rf"$N_{{\mathrm{{ref}}}} = {cfg.model.N}$"

    ax = axes[0, 0]
    for i, d in enumerate(cfg.dims):
        row = tab["coupling"][str(d)]
        y, se = np.asarray(row["err2_sup_mean"]), np.asarray(row["err2_sup_se"])
        ax.errorbar(sizes, y, yerr=2 * se, fmt="o", color=f"C{i}", capsize=3, label=assign("d", d))
        _fit_line(ax, sizes, result.fits["coupling"][str(d)], f"C{i}", f"fit {assign('d', d)}")
        if d == cfg.model.d:
            _guide(ax, sizes, y[0], 1 / sizes, r"$N^{-1}$")
    ax.set(xscale="log", yscale="log", xlabel="$N$",
           ylabel=r"$\mathbb{E}\,\mathrm{sup}_t\,\frac{1}{N}\sum_i |X^{i,N}_t - X^{i,N_\mathrm{ref}}_t|^2$",
           title=f"synchronous coupling ({n_ref}, ± 2 SE)")
    integer_ticks(ax, sizes)
    ax.legend(fontsize=7)

    ax = axes[0, 1]
    for i, d in enumerate(cfg.dims):
        row = tab["coupling"][str(d)]
        if "w2_mean" not in row:
            continue
        y = np.asarray(row["w2_sup_mean"])
        ax.errorbar(sizes, y, yerr=2 * np.asarray(row["w2_sup_se"]), fmt="o", color=f"C{i}", capsize=3,
                    label=rf"{assign('d', d)} ({row['w2_method']} $W_2^2$)")
        _fit_line(ax, sizes, result.fits["w2"].get(str(d), {}), f"C{i}", f"fit {assign('d', d)}")
        _guide(ax, sizes, y[0], row["r_d"], f"$r_{d}(N)$ = {rate_law(result.fits['r_d'][str(d)]['law'])}", color=f"C{i}")
        ax.plot(sizes, y[0] * np.asarray(row["sphere_rate"]) / row["sphere_rate"][0], "-.", color=f"C{i}", lw=0.8,
                label=f"$S^{{{d - 1}}}$ rate {rate_law(result.fits['sphere_rate'][str(d)]['law'])}")
        ax.plot(sizes, row["sliced_w2_mean"][-1], "x", color=f"C{i}", alpha=0.6)
    ax.set(xscale="log", yscale="log", xlabel="$N$", ylabel=r"$\mathrm{sup}_t\,W_2^2(\mu^N_t, \mu^{N_\mathrm{ref}}_t)$",
           title=r"$W_2^2$ against $N$ (×: sliced $W_2^2$ at $T$)")
    integer_ticks(ax, sizes)
    ax.legend(fontsize=7)

    dec = tab["decorrelation"]
    if dec is None:  # no empty panel: the reference measure moves left, the spare axes go
        ax = axes[1, 0]
        if created:
            fig.delaxes(axes[1, 1])
        else:
            axes[1, 1].set_axis_off()
    else:
        _plot_decorrelation(axes[1, 0], dec, result.fits["decorrelation"])
        ax = axes[1, 1]
    t = np.asarray(tab["record_times"])
    for i, d in enumerate(cfg.dims):
        row = tab["coupling"][str(d)]
        ax.plot(t, row["energy_mean"], "-", color=f"C{i}", label=rf"$E_\beta$, {assign('d', d)}")
        ax.plot(t, row["mean_token_norm_mean"], "--", color=f"C{i}", label=f"|mean token|, {assign('d', d)}")
    ax.set(xlabel="$t$", title=rf"reference measure ({n_ref}): $E_\beta$ and $|\int x\,d\mu|$")
    ax.legend(fontsize=7)
    m = cfg.model
    title = ", ".join([f"propagation of chaos (Prop. 1.2): {m.activation}"] + [assign(k, v) for k, v in (
        ("beta", m.beta), ("gamma", m.gamma_value), ("T", m.T), ("L", m.L))]) + (
        ", exact field" if m.noise == "exact" else f", field width {m.features}")
    return finish(fig, created, title)


def _plot_decorrelation(ax, dec: dict, fit: dict) -> None:
    """The conditional correlation of tokens 1 and 2 against N, with its fit."""
    n, rho, se = np.asarray(dec["sizes"], float), np.asarray(dec["rho"]), np.asarray(dec["se"])
    ax.errorbar(n, rho, yerr=2 * se, fmt="o", color="C3", capsize=3, label="corr(token 1, token 2 | field)")
    _fit_line(ax, n, fit, "C3", "fit")
    if rho[0] > 0:
        _guide(ax, n, rho[0], 1 / n, r"$N^{-1}$")
    if np.all(rho - 2 * se > 0):
        ax.set_yscale("log")
    else:
        ax.axhline(0, color="0.6", lw=0.8)
    ax.set(xscale="log", xlabel="$N$", ylabel="conditional correlation at $T$",
           title=f"conditional decorrelation ({dec['fields']} fields × {dec['repeats']} draws, ± 2 SE)")
    integer_ticks(ax, n)
    ax.legend(fontsize=7)


def plot_density_s2(X0: np.ndarray, XT: np.ndarray, title: str = "", axes: Optional[Any] = None) -> "Figure":
    """Density of tokens on S² (d = 3) at t = 0 and t = T: 2-D histograms in the equal-area
    coordinates (longitude, sin latitude), so a uniform measure is flat. ``X0``, ``XT``: (n, 3),
    unit rows; ``axes``: two axes, or None.

    Parameters
    ----------
    X0 : numpy.ndarray, shape (n, 3)
        Tokens at t = 0.
    XT : numpy.ndarray, shape (n, 3)
        Tokens at t = T.
    title : str, optional
        The title.
    axes : sequence of matplotlib.axes.Axes, optional
        Two axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = axes is None
    fig, ax2 = figure_axes(axes, (1, 2), (11, 4), sharey=True)
    axes = ax2[0]
    for ax, X, name in ((axes[0], X0, "$t = 0$"), (axes[1], XT, "$t = T$")):
        lon, z = np.arctan2(X[:, 1], X[:, 0]), np.clip(X[:, 2], -1, 1)
        h = ax.hist2d(lon, z, bins=(48, 24), range=((-np.pi, np.pi), (-1, 1)), density=True, cmap="magma")
        fig.colorbar(h[3], ax=ax, label="density")
        ax.set(xlabel="longitude", title=name)
    axes[0].set_ylabel("sin(latitude) = $x_3$")
    return finish(fig, created, title or "reference tokens on $S^2$ (equal-area histogram)")
