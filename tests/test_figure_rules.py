"""The report's figure rules (`figure_audit`) and the plotting helpers that keep them: each rule
flags the defect it names, and the helpers' output passes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from figure_audit import audit, contrast, raw_tex  # noqa: E402
from stochformer.plotting.core import (LUMINANCE_SPLIT, MIN_FONT_PT, annotate_cells, legend_below,  # noqa: E402
                                       relative_luminance, text_colour)
from stochformer.plotting.sync import diagonal_limits  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_relative_luminance_and_text_colour() -> None:
    """WCAG luminance: white 1, black 0, sRGB mid grey ((0.555/1.055)^2.4 = 0.2140); black text on light cells, white on dark,
    and the split is where both have the same contrast."""
    assert relative_luminance((1, 1, 1)) == pytest.approx(1.0)
    assert relative_luminance((0, 0, 0)) == 0.0
    assert relative_luminance((0.5, 0.5, 0.5)) == pytest.approx(0.2140411, abs=1e-6)
    assert contrast(LUMINANCE_SPLIT, 0.0) == pytest.approx(contrast(LUMINANCE_SPLIT, 1.0))
    cmap = matplotlib.colormaps["viridis"]
    assert text_colour(cmap(0.0)) == "w" and text_colour(cmap(1.0)) == "k"


def _heat(labels_colour=None):
    fig, ax = plt.subplots(figsize=(4, 3))
    v = np.linspace(0, 1, 12).reshape(3, 4)
    mesh = ax.pcolormesh(np.arange(5) - 0.5, np.arange(4) - 0.5, v, cmap="viridis", shading="flat")
    if labels_colour is None:
        annotate_cells(ax, mesh, range(4), range(3), v)
    else:
        for i in range(3):
            for j in range(4):
                ax.text(j, i, f"{v[i, j]:.2f}", ha="center", va="center", fontsize=8, color=labels_colour)
    return fig


def test_cell_labels_readable_on_every_cell() -> None:
    """annotate_cells passes the contrast rule on a full viridis range; black labels on every cell
    (the old phase diagrams) fail it on the dark cells."""
    assert audit(_heat()) == []
    bad = audit(_heat("k"))
    assert bad and all("contrast" in p for p in bad)


def test_small_annotations_are_refused_and_raised_by_annotate_cells() -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.text(0.9, 0.1, "4 pt", fontsize=4)
    assert any("under" in p for p in audit(fig))
    fig, ax = plt.subplots()
    mesh = ax.imshow(np.ones((1, 1)))
    (t,) = annotate_cells(ax, mesh, [0], [0], np.ones((1, 1)), fontsize=4)
    assert t.get_fontsize() == MIN_FONT_PT


@pytest.mark.parametrize("text, raw", [("post-LN e^{−2t}", True), (r"post-LN $e^{-2t}$", False),
                                        (r"$N^{-1}$ and m_{1}", True), (r"\lambda_1", True), ("$a$ = 1, $b_{2}$", False)])
def test_raw_tex_outside_mathtext(text: str, raw: bool) -> None:
    assert raw_tex(text) is raw


def test_a_raw_title_is_flagged() -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    ax.set_title("post-LN e^{−2t}")
    assert any("raw TeX" in p for p in audit(fig))


def test_legend_covering_data_is_flagged_and_legend_below_is_not() -> None:
    """18 curves with their legend inside the axes cover data; legend_below puts it under the axes."""
    x = np.linspace(0, 1, 21)
    for below in (False, True):
        fig, ax = plt.subplots(figsize=(4, 3))
        for k in range(18):
            ax.plot(x, x * (k + 1) / 18 + 0.01 * k, label=f"curve {k}")
        if below:
            fig.tight_layout()
            legend_below(fig, [ax], ncol=3)
        else:
            ax.legend(fontsize=7, ncol=2, loc="upper left")
        problems = audit(fig)
        assert (not problems) if below else any("covers" in p for p in problems)


def test_diverging_red_blue_map_is_flagged() -> None:
    fig, ax = plt.subplots()
    ax.pcolormesh(np.eye(3), cmap="RdBu_r")
    assert any("colour map" in p for p in audit(fig))


def test_diagonal_limits_hold_every_point_and_are_never_empty() -> None:
    """One point with its error bar: a non-empty range holding x and y ± err, so y = x is the diagonal
    of square axes (the old symmetric-log axes drew a bent line on one point)."""
    lo, hi = diagonal_limits([0.2], [0.74], [1.2])
    assert lo < -0.46 and hi > 1.94 and lo < 0.2 < hi
    lo, hi = diagonal_limits([1.0], [1.0], [0.0])
    assert lo < 1.0 < hi
    assert diagonal_limits([np.nan], [np.nan], [np.nan]) == (-1.0, 1.0)
