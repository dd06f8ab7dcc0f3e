"""Figures: shared helpers, the run summary and token paths on S².

Plotting reads result objects; it never computes them. Nothing here touches the matplotlib backend:
a notebook keeps its inline figures, and the command line chooses Agg for itself. Every function
draws into the axes it is given (``ax=`` for one panel, ``axes=`` for several) or, without them,
into a new figure; it returns the figure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: formats a figure can be saved in (``--format`` on the command line)
FORMATS = ("png", "pdf", "svg")

#: mathtext symbols of configuration fields, for axis labels and legends
SYMBOLS = {
    "beta": r"\beta", "energy_beta": r"\beta_E", "gamma": r"\gamma", "sigma": r"\sigma", "sigma_U": r"\sigma_U",
    "sigma_W": r"\sigma_W", "noise_scale": "s", "gain": "g", "N": "N", "d": "d", "L": "L", "T": "T", "m": "m",
}


#: the smallest font size of any text on a figure of the report (cell annotations, legends), in points
MIN_FONT_PT = 7.0
#: the colour map of a magnitude: perceptually uniform, lightness increasing (readable in greyscale),
#: colour-blind safe
SEQUENTIAL_CMAP = "viridis"
#: the colour map of a signed quantity (centred on 0 by a ``TwoSlopeNorm``): cividis, whose lightness
#: increases monotonically, so the sign reads in greyscale and for every colour-vision deficiency
SIGNED_CMAP = "cividis"
#: relative luminance at which black and white text have the same contrast on a background
#: (WCAG 2: (L + 0.05)/0.05 = 1.05/(L + 0.05), i.e. L = √(1.05·0.05) − 0.05 ≈ 0.179)
LUMINANCE_SPLIT = (1.05 * 0.05) ** 0.5 - 0.05


def relative_luminance(rgba: Sequence[float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour (components in [0, 1]):
    L = 0.2126 R + 0.7152 G + 0.0722 B of the linearised channels c ↦ c/12.92 (c ≤ 0.04045) or
    ((c + 0.055)/1.055)^2.4.

    Parameters
    ----------
    rgba : sequence of float
        An RGB(A) colour, components in [0, 1].

    Returns
    -------
    float
        L, in [0, 1].
    """
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (float(v) for v in rgba[:3])]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_colour(rgba: Sequence[float]) -> str:
    """The text colour readable on a background ``rgba``: black above `LUMINANCE_SPLIT`, else white
    (whichever has the larger WCAG contrast ratio).

    Parameters
    ----------
    rgba : sequence of float
        The background colour.

    Returns
    -------
    str
        ``"k"`` (black) or ``"w"`` (white), matplotlib colours.
    """
    return "k" if relative_luminance(rgba) > LUMINANCE_SPLIT else "w"


def annotate_cells(ax: "Axes", mappable: Any, x: Any, y: Any, values: Any, fmt: str = "{:.2g}",
                   fontsize: float = MIN_FONT_PT + 1, labels: Optional[Any] = None) -> list:
    """Write ``values[i, j]`` (shape (len(y), len(x))) at ``(x[j], y[i])`` on a heat map drawn by
    ``mappable`` (its colour map and norm give the cell's colour), each in the colour readable on
    its cell ([`text_colour`][stochformer.plotting.core.text_colour]), at least `MIN_FONT_PT` points;
    NaN cells are left blank. ``labels``: the text of each cell (same shape) instead of ``fmt``
    applied to the value. Returns the text artists.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The heat map's axes.
    mappable : matplotlib.cm.ScalarMappable
        The heat map.
    x, y : array_like
        The cells' centres.
    values : array_like, shape (len(y), len(x))
        The values.
    fmt : str, optional
        The format of a value.
    fontsize : float, optional
        Points (at least `MIN_FONT_PT`).
    labels : array_like, optional
        The texts, instead of ``fmt``.

    Returns
    -------
    list of matplotlib.text.Text
        The labels written.
    """
    values = np.asarray(values, float)
    size = max(float(fontsize), MIN_FONT_PT)
    texts = []
    for i, yy in enumerate(np.asarray(y)):
        for j, xx in enumerate(np.asarray(x)):
            v = values[i, j]
            if not np.isfinite(v):
                continue
            text = fmt.format(v).replace("-", "−") if labels is None else str(labels[i][j])
            texts.append(ax.text(xx, yy, text, ha="center", va="center", fontsize=size,
                                 color=text_colour(mappable.to_rgba(v))))
    return texts


def legend_below(fig: "Figure", axes: Any, ncol: int = 3, fontsize: float = MIN_FONT_PT + 1) -> Any:
    """One legend for the whole figure, below its axes (so it covers no curve), with the entries
    of every axes in ``axes`` once each (by label). Returns the legend, or None without entries.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    axes : sequence of matplotlib.axes.Axes
        The axes whose entries are gathered.
    ncol : int, optional
        Columns.
    fontsize : float, optional
        Points.

    Returns
    -------
    matplotlib.legend.Legend or None
        The legend.
    """
    seen: dict[str, Any] = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if not seen:
        return None
    return fig.legend(list(seen.values()), list(seen), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol,
                      fontsize=fontsize, frameon=False)


def symbol(field: str) -> str:
    """The mathtext symbol of a config field (``"sigma_W"`` → ``$\\sigma_W$``), else the name.

    Parameters
    ----------
    field : str
        A config field.

    Returns
    -------
    str
        Its mathtext symbol, or the name.
    """
    return f"${SYMBOLS[field]}$" if field in SYMBOLS else field


def _value(value: Any) -> str:
    return f"{float(value):g}" if isinstance(value, (float, np.floating)) else str(value)


def exponent_label(value: float, ci: Sequence[float], digits: int = 2) -> str:
    """``exponent 1.04 [0.45, 1.61]`` (fitted y ∝ x^(−exponent), 95% interval), with true minus signs.

    Parameters
    ----------
    value : float
        The exponent.
    ci : sequence of float
        Its 95% interval.
    digits : int, optional
        Significant digits.

    Returns
    -------
    str
        The label.
    """
    lo, hi = ci
    return "exponent " + _value_fixed(value, digits) + f" [{_value_fixed(lo, digits)}, {_value_fixed(hi, digits)}]"


def _value_fixed(x: float, digits: int) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def integer_ticks(ax: "Axes", values: Any, axis: str = "x") -> None:
    """Tick a log axis at the measured sizes, labelled as plain integers (no 4×10⁰).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    values : array_like
        The sizes.
    axis : {"x", "y"}, optional
        Which axis.
    """
    values = np.asarray(values, float)
    getattr(ax, f"set_{axis}ticks")(values, [f"{int(v)}" for v in values])
    getattr(ax, f"set_{axis}ticks")([], minor=True)


def assign(field: str, value: Any) -> str:
    """``field = value`` for a legend, in mathtext when the field has a symbol (``$\\beta = 4$``).

    Parameters
    ----------
    field : str
        A config field.
    value : Any
        Its value.

    Returns
    -------
    str
        The label.
    """
    if field in SYMBOLS:
        return f"${SYMBOLS[field]} = {_value(value)}$"
    return f"{field} = {_value(value)}"


def rate_law(text: str) -> str:
    """A rate law written in plain text (``"N^-1/2 log(1+N)"``) as mathtext (``$N^{-1/2}\\log(1+N)$``).

    Parameters
    ----------
    text : str
        The law in plain text.

    Returns
    -------
    str
        The law in mathtext.
    """
    tex = re.sub(r"\^(-?[0-9/]+)", r"^{\1}", text).replace("log", r"\log").replace(" ", r"\,")
    return f"${tex}$"


def figure_axes(axes: Any, shape: tuple[int, int], figsize: tuple[float, float], **kw: Any) -> tuple["Figure", np.ndarray]:
    """``(figure, axes as an array of ``shape``)``: the given axes (their number must match), or a
    new pyplot figure of ``figsize``. pyplot is imported here, never at module level.

    Parameters
    ----------
    axes : matplotlib.axes.Axes, sequence of them, or None
        Axes to draw into.
    shape : tuple of int
        (rows, columns).
    figsize : tuple of float
        The new figure's size in inches.
    **kw : Any
        Passed to ``pyplot.subplots``.

    Returns
    -------
    tuple
        (figure, axes array of ``shape``).
    """
    if axes is None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(*shape, figsize=figsize, squeeze=False, **kw)
        return fig, ax
    arr = np.asarray(axes, dtype=object).reshape(-1)
    if arr.size != shape[0] * shape[1]:
        raise ValueError(f"axes: expected {shape[0] * shape[1]} matplotlib axes, got {arr.size}")
    return arr[0].get_figure(), arr.reshape(shape)


def finish(fig: "Figure", created: bool, title: str = "") -> "Figure":
    """Title and tight layout, only on a figure this package created (given axes are left alone).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    created : bool
        Whether this package created it.
    title : str, optional
        Its title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    if created:
        if title:
            fig.suptitle(title)
        fig.tight_layout()
    return fig


def save_figure(fig: "Figure", path: Path | str, dpi: int = 200) -> None:
    """Save to ``path`` (format from its suffix: png, pdf or svg; ``dpi`` applies to PNG) under a
    temporary name, rename it into place (`stochformer.io.outputs.writing`), and close the figure.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (closed afterwards).
    path : str or pathlib.Path
        The file (.png, .pdf or .svg).
    dpi : int, optional
        Dots per inch of a PNG.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"figure format: expected one of {', '.join(FORMATS)} (got {path.name!r})")
    from ..io.outputs import writing

    try:
        with writing(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)


def log_band(ax: "Axes", x: Any, mean: Any, se: Any, color: str, label: Optional[str] = None) -> None:
    """Mean ± 2 SE on a log axis, as the delta-method band ``mean · exp(±2 SE/mean)`` of log(mean):
    positive and smooth where the linear band would cross zero (no clamp).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    x : array_like
        Abscissae.
    mean : array_like
        The means.
    se : array_like
        Their standard errors.
    color : str
        The colour.
    label : str, optional
        The legend entry.
    """
    mean, se = np.asarray(mean, float), np.asarray(se, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mean > 0, se / mean, np.nan)
    ax.plot(x, mean, color=color, label=label)
    ax.fill_between(x, mean * np.exp(-2 * rel), mean * np.exp(2 * rel), color=color, alpha=0.25, lw=0)


def linear_band(ax: "Axes", x: Any, mean: Any, se: Any, color: str, label: Optional[str] = None) -> None:
    """Mean ± 2 SE on a linear axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    x : array_like
        Abscissae.
    mean : array_like
        The means.
    se : array_like
        Their standard errors.
    color : str
        The colour.
    label : str, optional
        The legend entry.
    """
    mean, se = np.asarray(mean, float), np.asarray(se, float)
    ax.plot(x, mean, color=color, label=label)
    ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=color, alpha=0.25, lw=0)


def plot_summary(summary: dict, title: str = "", axes: Optional[Sequence["Axes"]] = None) -> "Figure":
    """E_β (log scale when positive) and mean/min pairwise cosine against layer (or time t, when
    ``summary`` has ``times`` instead of ``layers``), ± 2 SE bands. ``summary``: the dict of
    `SimulationResult.summary`; ``axes``: two axes, or None.

    Parameters
    ----------
    summary : dict
        The dict of ``SimulationResult.summary``.
    title : str, optional
        The figure's title.
    axes : sequence of matplotlib.axes.Axes, optional
        Two axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (10, 3.8))
    ax1, ax2 = ax[0]
    xlabel = "$t$" if "times" in summary else "layer"
    layers = np.asarray(summary["times"] if "times" in summary else summary["layers"])
    e, ese = np.asarray(summary["energy"]), np.asarray(summary["energy_se"])
    if np.all(e > 0):
        log_band(ax1, layers, e, ese, "C0")
        ax1.set_yscale("log")
    else:
        linear_band(ax1, layers, e, ese, "C0")
    ax1.set(xlabel=xlabel, ylabel=r"$E_\beta(\mu)$", title="interaction energy (mean ± 2 SE)")
    for key, color, label in (("mean_cosine", "C1", "mean cosine"), ("min_cosine", "C2", "min cosine")):
        linear_band(ax2, layers, summary[key], summary[f"{key}_se"], color, label)
    ax2.set(xlabel=xlabel, ylabel=r"$\langle x_i, x_j\rangle$", ylim=(-1.05, 1.05), title="pairwise cosines")
    ax2.legend(loc="lower right")
    return finish(fig, created, title)


def _view_direction(elev: float, azim: float) -> np.ndarray:
    """Unit vector from the origin towards the viewer of a 3-D axes with this elevation/azimuth."""
    e, a = np.radians(elev), np.radians(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def _split_visible(P: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the polyline P (n, 3) with NaN where it is hidden (front) or visible (back); the
    point on either side of each crossing is kept in both, so the two parts join."""
    vis = P @ v >= 0
    near_vis = vis.copy()
    near_vis[1:] |= vis[:-1]
    near_vis[:-1] |= vis[1:]
    near_hid = ~vis
    near_hid[1:] |= ~vis[:-1]
    near_hid[:-1] |= ~vis[1:]
    return np.where(near_vis[:, None], P, np.nan), np.where(near_hid[:, None], P, np.nan)


def plot_sphere_paths(
    paths: np.ndarray, sample: int = 0, title: str = "", ax: Optional["Axes"] = None, elev: float = 20.0,
    azim: float = -60.0, hidden_alpha: float = 0.2,
) -> "Figure":
    """Token paths on S² for one sample: ``paths`` (batch, n_paths, N, 3), unit rows. The near
    hemisphere is drawn solid, the hidden one faded (``hidden_alpha``), seen from (``elev``, ``azim``);
    dots mark the final layer. ``ax``: a 3-D axes (``projection="3d"``), or None for a new figure.

    Parameters
    ----------
    paths : numpy.ndarray, shape (batch, n_paths, N, 3)
        Token paths, unit rows.
    sample : int, optional
        The sample drawn.
    title : str, optional
        The title.
    ax : matplotlib.axes.Axes, optional
        A 3-D axes.
    elev, azim : float, optional
        The view.
    hidden_alpha : float, optional
        Opacity of the far hemisphere.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    import matplotlib as mpl

    fig: Any
    ax3: Any
    if ax is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(5.5, 5.5))
        ax3 = fig.add_subplot(projection="3d")
    else:
        ax3, fig = ax, ax.get_figure()

    P = np.asarray(paths[sample], float)
    v = _view_direction(elev, azim)
    ax3.view_init(elev=elev, azim=azim)
    t = np.linspace(0, 2 * np.pi, 121)
    for lat in np.radians(np.arange(-60, 61, 30)):  # parallels and meridians, split like the paths
        ring = np.stack([np.cos(lat) * np.cos(t), np.cos(lat) * np.sin(t), np.full_like(t, np.sin(lat))], 1)
        front, back = _split_visible(ring, v)
        ax3.plot(*front.T, color="0.8", lw=0.5)
        ax3.plot(*back.T, color="0.8", lw=0.5, alpha=hidden_alpha)
    for lon in np.radians(np.arange(0, 180, 30)):
        ring = np.stack([np.cos(lon) * np.cos(t), np.sin(lon) * np.cos(t), np.sin(t)], 1)
        front, back = _split_visible(ring, v)
        ax3.plot(*front.T, color="0.8", lw=0.5)
        ax3.plot(*back.T, color="0.8", lw=0.5, alpha=hidden_alpha)
    # the silhouette: the great circle orthogonal to the viewing direction
    u1 = np.cross(v, [0.0, 0.0, 1.0]) if abs(v[2]) < 0.999 else np.array([1.0, 0.0, 0.0])
    u1 /= np.linalg.norm(u1)
    u2 = np.cross(v, u1)
    rim = np.outer(np.cos(t), u1) + np.outer(np.sin(t), u2)
    ax3.plot(*rim.T, color="0.55", lw=0.8)
    colors = mpl.colormaps["viridis"](np.linspace(0, 1, P.shape[1]))
    for i in range(P.shape[1]):
        front, back = _split_visible(P[:, i], v)
        ax3.plot(*front.T, color=colors[i], lw=0.9)
        ax3.plot(*back.T, color=colors[i], lw=0.9, alpha=hidden_alpha)
        end = P[-1, i]
        ax3.scatter(end[0], end[1], end[2], color=colors[i], s=14, alpha=1.0 if end @ v >= 0 else hidden_alpha, depthshade=False)
    ax3.set(xlim=(-1, 1), ylim=(-1, 1), zlim=(-1, 1))
    ax3.set_box_aspect((1, 1, 1), zoom=1.3)
    ax3.set_axis_off()
    ax3.set_title(title or "token paths (dots: final layer; far side faded)")
    return fig
