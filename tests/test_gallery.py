"""The gallery (``examples/gallery/``, ``docs/gallery/``): every script reproduces its figure of the
paper at the tiny size, and scripts and pages match one to one (a new script without a page, or a
page without a script, fails here). ``tools/gallery.py`` makes the pages' figures."""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gallery  # noqa: E402

SCRIPTS = gallery.scripts()
NAMES = [s.stem for s in SCRIPTS]


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header; AssertionError if it is not a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == gallery.PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _inked(path: Path) -> float:
    """The fraction of pixels that are not background white (a blank or near-blank figure is ~0)."""
    import matplotlib.image as mpimg

    rgb = np.asarray(mpimg.imread(path))[..., :3]
    return float((rgb.min(axis=-1) < 0.9).mean())


def _problems() -> list[str]:
    pages = [p.stem for p in gallery.pages()]
    texts = {p.stem: p.read_text(encoding="utf-8") for p in gallery.pages()}
    index = (gallery.PAGES / "index.md").read_text(encoding="utf-8")
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return gallery.mismatches(NAMES, pages, index, nav, texts)


def test_the_gallery_has_a_script_for_each_figure_of_the_paper():
    # Fig. 1 and the five activations of the grid of Figs. 2–6 (SPEC §6 items 1 and 2)
    assert "fig1_clusters" in NAMES
    assert {f"scenarios_{a}" for a in ("relu", "silu", "sigmoid", "tanh", "no_mlp")} <= set(NAMES)


@pytest.mark.parametrize("script", SCRIPTS, ids=NAMES)
def test_each_script_says_its_figure_and_claim_and_takes_both_sizes(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    assert doc.startswith("Fig"), f"{script.name}: the docstring's first words name the paper's figure"
    assert "SPEC §6" in doc and "claim" in doc.lower(), f"{script.name}: the docstring names the claim (SPEC §6)"
    sizes = [n for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "SIZES" for t in n.targets)]
    assert sizes and isinstance(sizes[0].value, ast.Dict), f"{script.name}: no SIZES dict"
    assert {k.value for k in sizes[0].value.keys if isinstance(k, ast.Constant)} == {"tiny", "paper"}
    source = script.read_text(encoding="utf-8")
    assert 'default="paper"' in source, f"{script.name}: the default size is the paper's"
    assert "stochformer." not in source.replace("stochformer.plotting", "").replace("stochformer.experiments", ""), \
        f"{script.name}: uses only the public API (stochformer as sf, its experiments and plotting)"


@pytest.mark.parametrize("script", SCRIPTS, ids=NAMES)
def test_each_script_draws_its_figure_at_the_tiny_size(script, tmp_path):
    done = gallery.run(script, tmp_path, "tiny", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [f"{script.stem}.png"], f"{script.name} wrote {pngs}"
    png = tmp_path / f"{script.stem}.png"
    width, height = _png_size(png)
    assert width >= 400 and height >= 200, (width, height)
    assert 10_000 < png.stat().st_size <= gallery.MAX_PNG_BYTES, png.stat().st_size
    assert _inked(png) > 0.02, "the figure is (nearly) blank"


def test_every_script_has_its_page_and_every_page_its_script():
    assert not _problems(), "\n".join(_problems())


def test_a_script_without_a_page_or_a_page_without_a_script_is_found():
    pages = {n: f'![f]({n}.png)\n--8<-- "examples/gallery/{n}.py"\n' for n in ("a", "b")}
    index, nav = "(a.md) (b.md)", "gallery/a.md gallery/b.md"
    assert gallery.mismatches(["a", "b"], ["a", "b"], index, nav, pages) == []
    assert gallery.mismatches(["a", "b", "c"], ["a", "b"], index, nav, pages) == [
        "examples/gallery/c.py has no page docs/gallery/c.md"]
    assert gallery.mismatches(["a"], ["a", "b"], index, nav, pages) == ["docs/gallery/b.md has no script examples/gallery/b.py"]
    unlisted = gallery.mismatches(["a", "b"], ["a", "b"], "(a.md)", "gallery/a.md", pages)
    assert unlisted == ["docs/gallery/index.md does not link b.md", "mkdocs.yml's nav does not list gallery/b.md"]
    bare = gallery.mismatches(["a"], ["a"], index, nav, {"a": "no script, no figure"})
    assert bare == ["docs/gallery/a.md does not include examples/gallery/a.py", "docs/gallery/a.md does not show a.png"]


@pytest.mark.parametrize("name", NAMES)
def test_each_page_shows_a_committed_figure_under_the_size_limit(name):
    png = gallery.PAGES / f"{name}.png"
    assert png.is_file(), f"docs/gallery/{name}.png is missing: run python tools/gallery.py {name}"
    _png_size(png)
    assert png.stat().st_size <= gallery.MAX_PNG_BYTES, f"{png.name}: {png.stat().st_size} bytes"
    assert _inked(png) > 0.02


def test_the_site_includes_the_scripts():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "pymdownx.snippets" in config and "check_paths: true" in config
