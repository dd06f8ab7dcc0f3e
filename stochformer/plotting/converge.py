"""The figure of Theorem 1.1 (SPEC §6 item 4), from a [`ConvergeResult`][stochformer.experiments.converge.ConvergeResult]."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import SEQUENTIAL_CMAP, annotate_cells, exponent_label, figure_axes, finish, integer_ticks

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def _errorbars(ax, x, mean, se, **kw):
    ax.errorbar(x, mean, yerr=2 * np.asarray(se), marker="o", ms=4, capsize=2, **kw)


def _guide(ax, x, y_anchor, fn, label, style):
    """A reference curve c·fn(x) through the last point."""
    x = np.asarray(x, dtype=float)
    ax.plot(x, y_anchor * fn(x) / fn(x[-1]), style, color="0.4", label=label)


def plot_convergence(result: Any, axes: Optional[Any] = None) -> "Figure":
    """Three panels: error against L (log–log; m = ∞ at layer times and over continuous time, and the
    largest finite m), error against m at the largest L, and the (L, m) heat map of the layer-time
    error whose decrease along both edges shows that the two iterated limits agree.

    Parameters
    ----------
    result : ConvergeResult
        What [`run_converge`][stochformer.experiments.converge.run_converge] returns.
    axes : sequence of matplotlib Axes, optional
        Three axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    from matplotlib.colors import LogNorm

    L = np.asarray(result.depths, dtype=float)
    widths = result.widths
    fin = [j for j, m in enumerate(widths) if math.isfinite(m)]
    m_fin = np.asarray([widths[j] for j in fin])
    lay, lay_se = result.mean_se("layer")
    con, con_se = result.mean_se("continuous")
    f = result.fits
    big = fin[int(np.argmax(m_fin))]

    created = axes is None
    fig, ax = figure_axes(axes, (1, 3), (16, 4.6))
    a1, a2, a3 = ax[0]
    e = f["exponent_L"]
    _errorbars(a1, L, lay[:, -1], lay_se[:, -1], color="C0",
               label=rf"$m = \infty$, layer times: {exponent_label(e['value'], e['ci'], 3)}")
    e = f["exponent_L_continuous"]
    _errorbars(a1, L, con[:, -1], con_se[:, -1], color="C1",
               label=rf"$m = \infty$, continuous $t$: {exponent_label(e['value'], e['ci'], 3)}")
    e = f["exponent_L_large_m"]
    _errorbars(a1, L, lay[:, big], lay_se[:, big], color="C2",
               label=f"$m = {e['m']}$, layer times: {exponent_label(e['value'], e['ci'], 3)}")
    _guide(a1, L, lay[-1, -1], lambda x: 1 / x, "$L^{-1}$", "--")
    _guide(a1, L, con[-1, -1], lambda x: np.log(x) / x, r"$\log L / L$", ":")
    a1.set(xscale="log", yscale="log", xlabel="depth $L$",
           ylabel=r"$\mathbb{E}\,\mathrm{sup}\,\frac{1}{N}\sum_i |X^i - \bar X^i|^2$",
           title="error against depth (± 2 SE)")
    integer_ticks(a1, L)
    a1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False)

    top = int(np.argmax(L))
    e = f["exponent_m"]
    _errorbars(a2, m_fin, lay[top, fin], lay_se[top, fin], color="C0",
               label=f"$L = {e['L']}$, layer times: {exponent_label(e['value'], e['ci'], 3)}")
    _errorbars(a2, m_fin, con[top, fin], con_se[top, fin], color="C1", label=f"$L = {e['L']}$, continuous $t$")
    a2.axhline(lay[top, -1], color="C0", lw=0.8, ls="-.", label=r"$m = \infty$ (layer times)")
    _guide(a2, m_fin, lay[top, fin][-1], lambda x: 1 / x, "$m^{-1}$", "--")
    add = f["additive_layer"]
    a2.set_xscale("log")
    a2.set_xticks(m_fin, [str(int(m)) for m in m_fin])
    a2.minorticks_off()
    a2.set(yscale="log", xlabel="width $m$", ylabel="error",
           title=f"error against width; fit $a/L + b/m$: a = {add['a']['value']:.3g}, b = {add['b']['value']:.3g}")
    a2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False)

    labels = [str(int(m)) if math.isfinite(m) else r"$\infty$" for m in widths]
    im = a3.imshow(lay, origin="lower", aspect="auto", cmap=SEQUENTIAL_CMAP, norm=LogNorm(vmin=lay.min(), vmax=lay.max()))
    a3.set_xticks(range(len(widths)), labels)
    a3.set_yticks(range(len(L)), [str(int(x)) for x in L])
    annotate_cells(a3, im, range(len(widths)), range(len(L)), lay, "{:.2g}", fontsize=9)
    a3.set(xlabel="width $m$", ylabel="depth $L$", title="layer-time error over $(L, m)$: → 0 along both edges")
    fig.colorbar(im, ax=a3, fraction=0.046)
    return finish(fig, created)
