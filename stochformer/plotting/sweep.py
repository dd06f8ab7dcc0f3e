"""Summary figure of a sweep: the statistics at the last time (mean ± 2 SE over samples) across its points."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import assign, figure_axes, finish, plot_summary, symbol

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def _point_label(ds: Any, dim: str, i: int) -> str:
    """The legend entry of index ``i`` along ``dim``; a ``point`` is named by the fields it sets."""
    if dim != "point":
        return assign(dim, ds[dim].values[i])
    fields = [k for k in ds.coords if k != "point" and ds[k].dims == ("point",)]
    return ", ".join(assign(k, ds[k].values[i]) for k in fields) or f"point {i}"


def plot_sweep(result: Any, max_lines: int = 12, axes: Optional[Any] = None) -> "Figure":
    """Mean cosine and E_β at the last recorded time against the first sweep axis, one line per
    value of the other axes (at most ``max_lines``). A sweep without axes shows the curves in t.

    Parameters
    ----------
    result : SweepResult
        What [`run_sweep`][stochformer.experiments.sweep.run_sweep] returns.
    max_lines : int, optional
        The most lines drawn per panel.
    axes : sequence of matplotlib Axes, optional
        Two axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    ds = result.data
    dims = [d for d in ds["mean_cosine_mean"].dims if d != "time"]
    if len(dims) > 1 and dims[0] == "point":  # a grid axis on the x axis, the points as lines
        dims = dims[1:] + ["point"]
    last = ds.isel(time=-1)
    if not dims:
        summary = {"times": ds["time"].values}
        for name in ("mean_cosine", "energy", "min_cosine"):
            summary[name], summary[f"{name}_se"] = ds[f"{name}_mean"].values, ds[f"{name}_se"].values
        return plot_summary(summary, f"{result.config.samples} samples", axes=axes)
    x_dim, others = dims[0], dims[1:]
    x = ds[x_dim].values
    numeric = x.dtype.kind in "biuf"
    xpos = x if numeric else np.arange(len(x))
    created = axes is None
    fig, ax2 = figure_axes(axes, (1, 2), (10, 3.8))
    axes = ax2[0]
    combos = list(itertools.product(*(range(ds.sizes[d]) for d in others)))[:max_lines]
    for k, combo in enumerate(combos):
        sel = last.isel(dict(zip(others, combo)))
        label = ", ".join(_point_label(ds, d, i) for d, i in zip(others, combo)) or None
        for ax, name in zip(axes, ("mean_cosine", "energy")):
            y, se = sel[f"{name}_mean"].values, sel[f"{name}_se"].values
            ax.errorbar(xpos, y, yerr=2 * se, marker="o", capsize=3, color=f"C{k % 10}", label=label)
    at = f"$t = {ds['time'].values[-1]:g}$"
    axes[0].set(xlabel=symbol(x_dim), ylabel="mean cosine", title=f"mean pairwise cosine at {at} (± 2 SE)")
    axes[1].set(xlabel=symbol(x_dim), ylabel=r"$E_\beta$", title=f"interaction energy at {at} (± 2 SE)")
    for ax in axes:
        if not numeric:
            ax.set_xticks(xpos, [_point_label(ds, x_dim, i) if x_dim == "point" else str(v) for i, v in enumerate(x)])
    if others:
        axes[0].legend(fontsize=8)
    return finish(fig, created, f"sweep: {result.config.samples} samples per point")
