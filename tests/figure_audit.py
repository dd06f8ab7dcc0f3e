"""Checks of a drawn matplotlib figure against the report's figure rules (used by the tests of the
report's figures): mathtext only inside ``$...$``, no text under `MIN_FONT_PT`, readable text on
heat-map cells (WCAG contrast), legends inside the axes covering no data, colour maps readable in
greyscale and for colour-blind readers, no ``2×10⁰`` tick labels."""

from __future__ import annotations

import re

import numpy as np

from stochformer.plotting.core import MIN_FONT_PT, relative_luminance

#: colour maps of monotone lightness that read for every colour-vision deficiency
READABLE_CMAPS = {"viridis", "cividis", "magma", "inferno", "plasma", "Greys", "gray", "binary"}
#: the least WCAG contrast ratio of a cell label on its cell (AA for normal text)
MIN_CONTRAST = 4.5

_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")


def raw_tex(text: str) -> bool:
    """Whether ``text`` holds TeX markup (``^{``, ``_{``, ``\\frac`` ...) outside ``$...$``."""
    plain = _MATH.sub("", text)
    return "^{" in plain or "_{" in plain or re.search(r"\\[a-zA-Z]+", plain) is not None


def contrast(l1: float, l2: float) -> float:
    """WCAG contrast ratio of two relative luminances."""
    hi, lo = max(l1, l2), min(l1, l2)
    return (hi + 0.05) / (lo + 0.05)


def _texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _cell_texts(fig):
    """(axes, text) for the texts written on a heat map (axes holding a QuadMesh or an image)."""
    from matplotlib.collections import QuadMesh

    out = []
    for ax in fig.axes:
        if ax.images or any(isinstance(c, QuadMesh) for c in ax.collections):
            out += [(ax, t) for t in ax.texts if t.get_visible() and t.get_text().strip()]
    return out


def _background(buf: np.ndarray, bbox, pad: int = 3) -> np.ndarray:
    """The median colour (RGB in [0, 1]) of the ring of pixels just outside ``bbox`` (display coords)."""
    h = buf.shape[0]
    x0, x1 = int(bbox.x0) - pad, int(bbox.x1) + pad
    y0, y1 = h - int(bbox.y1) - pad, h - int(bbox.y0) + pad  # image rows run downwards
    x0, y0 = max(x0, 0), max(y0, 0)
    x1, y1 = min(x1, buf.shape[1] - 1), min(y1, h - 1)
    ring = np.concatenate([buf[y0, x0:x1], buf[y1, x0:x1], buf[y0:y1, x0], buf[y0:y1, x1]])
    return np.median(ring[:, :3], axis=0) / 255.0


def _data_points(ax, renderer) -> np.ndarray:
    """Display coordinates of the data drawn in ``ax``: line vertices (segments sampled 8 times),
    markers, scatter offsets; lines spanning the axes (axhline) excluded."""
    from matplotlib.collections import PathCollection, PolyCollection

    pts = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if len(xy) == 0:
            continue
        if line.get_linestyle() not in ("None", "none", "", " ") and len(xy) > 1:
            s = np.linspace(0, 1, 9)[:-1, None]
            xy = np.concatenate([(xy[:-1, None] * (1 - s) + xy[1:, None] * s).reshape(-1, 2), xy[-1:]])
        pts.append(ax.transData.transform(xy))
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            off = coll.get_offsets()
            if len(off):
                pts.append(coll.get_offset_transform().transform(np.asarray(off, float)))
        if isinstance(coll, PolyCollection) and coll.get_visible() and coll.get_transform() == ax.transData:
            pass  # confidence bands: a legend over a band's edge is tolerated
    return np.concatenate(pts) if pts else np.zeros((0, 2))


def audit(fig) -> list[str]:
    """Every breach of the figure rules in ``fig`` (empty: none). Draws the figure once."""
    from matplotlib.collections import QuadMesh
    from matplotlib.image import AxesImage

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    buf = np.asarray(fig.canvas.buffer_rgba())
    problems = []
    for t in _texts(fig):
        text = t.get_text()
        if raw_tex(text):
            problems.append(f"raw TeX outside $...$: {text!r}")
        if t.get_fontsize() < MIN_FONT_PT - 1e-9:
            problems.append(f"text under {MIN_FONT_PT:g} pt ({t.get_fontsize():g} pt): {text!r}")
        if "\\times10^{0}" in text.replace(" ", ""):
            problems.append(f"tick label with a ×10⁰ factor: {text!r}")
    for _ax, t in _cell_texts(fig):
        bg = _background(buf, t.get_window_extent(renderer))
        from matplotlib.colors import to_rgba

        ratio = contrast(relative_luminance(to_rgba(t.get_color())), relative_luminance(bg))
        if ratio < MIN_CONTRAST:
            problems.append(f"cell label {t.get_text()!r} has contrast {ratio:.2f} < {MIN_CONTRAST:g} on its cell")
    for ax in fig.axes:
        for m in [c for c in ax.collections if isinstance(c, QuadMesh)] + [i for i in ax.images if isinstance(i, AxesImage)]:
            name = m.get_cmap().name.removesuffix("_r")
            if name not in READABLE_CMAPS:
                problems.append(f"colour map {m.get_cmap().name!r} is not of monotone lightness / colour-blind safe")
        leg = ax.get_legend()
        if leg is None or not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer)
        frame = ax.get_window_extent(renderer)
        if box.x1 <= frame.x0 or box.x0 >= frame.x1 or box.y1 <= frame.y0 or box.y0 >= frame.y1:
            continue  # outside the axes
        if ax.images or any(isinstance(c, QuadMesh) for c in ax.collections):
            problems.append(f"legend inside a heat map ({ax.get_title()!r})")
            continue
        pts = _data_points(ax, renderer)
        inside = ((pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)).sum()
        if inside:
            problems.append(f"legend of {ax.get_title()!r} covers {inside} data point(s)")
    return problems
