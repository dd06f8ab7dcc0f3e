"""The user docs run: every command and Python snippet of README.md and docs/*.md, at small sizes.

Each ``bash``/``python`` block carries a marker (``tools/snippets.py``): run as written, run with
small-size arguments appended to its ``stochformer`` commands, or "not runnable" with a reason. A
renamed module, option or field then breaks this file instead of the reader. The documentation
site's strict build is checked to fail on a broken link (so the CI step that builds it can fail).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import snippets  # noqa: E402

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ALL = [b for page in snippets.pages() for b in snippets.blocks(page)]
SHELL = [b for b in ALL if b.lang == "bash" and b.marker == "runnable"]
PY_PAGES = sorted({b.page for b in ALL if b.lang == "python" and b.marker == "runnable"})
ENV = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}


def _scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def test_every_code_block_says_whether_it_runs():
    unmarked = [b.where for b in ALL if b.lang in snippets.RUN_LANGS and b.marker is None]
    assert not unmarked, f"code blocks without a <!-- runnable --> / <!-- not runnable: why --> marker: {unmarked}"
    no_reason = [b.where for b in ALL if b.marker == "not runnable" and not b.reason]
    assert not no_reason, f"'not runnable' blocks must say why: {no_reason}"
    assert len(SHELL) >= 3 and len(PY_PAGES) >= 3  # the collection itself works


def test_marker_arguments_reach_every_stochformer_command():
    block = snippets.Block(ROOT / "README.md", 1, "bash", "stochformer simulate --set d=3  # a comment\n"
                           "stochformer sync \\\n   --set model.d=8\nls runs\n", "runnable",
                           args={"*": "--set seed=1", "sync": "--set pairs=8"})
    assert snippets.shell_lines(block) == ["stochformer simulate --set d=3 --set seed=1",
                                           "stochformer sync --set model.d=8 --set seed=1 --set pairs=8", "ls runs"]


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "toml"], ids=lambda b: b.where)
def test_toml_blocks_parse(block):
    tomllib.loads(block.code)


@pytest.mark.slow
@pytest.mark.parametrize("page", PY_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_snippets_run(page, tmp_path):
    source = snippets.python_source(page)
    proc = subprocess.run([sys.executable, "-c", source], cwd=_scratch(tmp_path), env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{page.name}: the page's python blocks fail:\n{proc.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.where)
def test_shell_snippets_run(block, tmp_path):
    cwd = _scratch(tmp_path)
    for line in snippets.shell_lines(block):
        command = line
        if line.startswith("stochformer "):
            command = f"{sys.executable} -m stochformer {line[len('stochformer '):]}"
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{block.where}: `{line}` fails ({proc.returncode}):\n{proc.stderr[-3000:]}"


def _mkdocs_or_skip():
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        if os.environ.get("STOCHFORMER_REQUIRE_DOCS"):
            raise
        pytest.skip("mkdocs is not installed (the docs extra)")


def _build(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site / "out")],
                          cwd=site, env={**ENV, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=600)


def _check_rendered(out: Path) -> None:
    """What the reader sees: maths typeset by MathJax, numpydoc sections as tables, the pydantic fields
    of the configs listed with their descriptions, no Sphinx role left as text, the executed notebook."""
    config, model = (out / "api" / page / "index.html" for page in ("config", "model"))
    config_html, model_html = config.read_text(encoding="utf-8"), model.read_text(encoding="utf-8")
    assert "pydantic-field" in config_html and "number of tokens" in config_html  # RunConfig.N and its description
    assert 'class="arithmatex"' in model_html and 'doc-section-title">Parameters' in model_html
    assert 'class="arithmatex"' in (out / "theory" / "index.html").read_text(encoding="utf-8")
    raw = [p.relative_to(out) for p in (out / "api").rglob("index.html")
           if re.search(r":(func|class|meth|mod|attr|data):`", p.read_text(encoding="utf-8"))]
    assert not raw, f"Sphinx roles shown as text in {raw}"
    # a cross-reference to an object the site does not render stays as text (mkdocs-autorefs does not always warn)
    dangling = sorted({ref for p in out.rglob("index.html")
                       for ref in re.findall(r"\]\[(stochformer\.[\w.]+)\]", p.read_text(encoding="utf-8"))})
    assert not dangling, f"cross-references to objects the API reference does not render: {dangling}"
    notebook = (out / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert notebook.count("<img") >= 3  # the stored figures of the tutorial


@pytest.mark.slow
def test_strict_docs_build_fails_on_a_broken_link(tmp_path):
    """The CI command (``mkdocs build --strict``, the project's mkdocs.yml) passes on the docs as they
    are, renders them as `_check_rendered` says, and fails, naming the target, once one page links
    to a page that does not exist."""
    _mkdocs_or_skip()
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", site)
    shutil.copytree(ROOT / "docs", site / "docs")
    (site / "stochformer").symlink_to(ROOT / "stochformer")
    (site / "examples").symlink_to(ROOT / "examples")  # the gallery's pages include its scripts (pymdownx.snippets)
    clean = _build(site)
    assert clean.returncode == 0, clean.stderr[-3000:]
    _check_rendered(site / "out")
    with open(site / "docs" / "index.md", "a", encoding="utf-8") as f:
        f.write("\nSee [the missing page](no-such-page.md).\n")
    broken = _build(site)
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr, broken.stderr[-3000:]
