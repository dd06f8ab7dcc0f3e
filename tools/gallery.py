#!/usr/bin/env python3
"""The gallery: one script per figure of the paper (``examples/gallery/``), one page per script
(``docs/gallery/``), and the figures the pages show, made by the scripts at their tiny size.

    python tools/gallery.py            # run every script at --size tiny into docs/gallery/
    python tools/gallery.py fig1_clusters scenarios_relu   # only these

Each page includes its script whole (``--8<--``, pymdownx.snippets) and shows ``NAME.png``, which
must stay under ``MAX_PNG_BYTES``. ``tests/test_gallery.py`` runs every script at the tiny size and
checks that scripts and pages match one to one (``mismatches``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "examples" / "gallery"
PAGES = ROOT / "docs" / "gallery"
#: a committed figure's largest size (the docs' figures are made at the tiny size, low dpi)
MAX_PNG_BYTES = 150_000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def scripts() -> list[Path]:
    """The gallery's scripts, by name."""
    return sorted(p for p in SCRIPTS.glob("*.py") if not p.name.startswith("_"))


def pages() -> list[Path]:
    """The gallery's figure pages (every page of docs/gallery but its index)."""
    return sorted(p for p in PAGES.glob("*.md") if p.name != "index.md")


def include_line(script: Path) -> str:
    """The line of a page that includes ``script`` (pymdownx.snippets, paths from the repository root)."""
    return f'--8<-- "{script.relative_to(ROOT).as_posix()}"'


def mismatches(script_names: list[str], page_names: list[str], index: str, nav: str,
               page_text: dict[str, str]) -> list[str]:
    """What breaks the one-to-one match of scripts and pages: a script without a page, a page without
    a script, a page the index or the site's nav does not list, a page that does not include its
    script or show its figure. Empty when all is well."""
    problems = [f"examples/gallery/{n}.py has no page docs/gallery/{n}.md" for n in script_names if n not in page_names]
    problems += [f"docs/gallery/{n}.md has no script examples/gallery/{n}.py" for n in page_names if n not in script_names]
    for n in sorted(set(script_names) & set(page_names)):
        text = page_text[n]
        if f"({n}.md)" not in index:
            problems.append(f"docs/gallery/index.md does not link {n}.md")
        if f"gallery/{n}.md" not in nav:
            problems.append(f"mkdocs.yml's nav does not list gallery/{n}.md")
        if f'--8<-- "examples/gallery/{n}.py"' not in text:
            problems.append(f"docs/gallery/{n}.md does not include examples/gallery/{n}.py")
        if f"]({n}.png)" not in text:
            problems.append(f"docs/gallery/{n}.md does not show {n}.png")
    return problems


def run(script: Path, out: Path, size: str = "tiny", timeout: float = 600) -> subprocess.CompletedProcess:
    """Run one script at ``size`` writing its PNG into ``out`` (matplotlib's Agg backend, this checkout's package)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(script), "--size", size, "--out", str(out)], cwd=out, env=env,
                          capture_output=True, text=True, timeout=timeout)


def main(names: list[str]) -> int:
    chosen = [s for s in scripts() if not names or s.stem in names]
    unknown = set(names) - {s.stem for s in chosen}
    if unknown:
        print(f"unknown gallery scripts: {', '.join(sorted(unknown))}; valid: {', '.join(s.stem for s in scripts())}",
              file=sys.stderr)
        return 2
    failed = 0
    for script in chosen:
        start = time.perf_counter()
        done = run(script, PAGES)
        png = PAGES / f"{script.stem}.png"
        size = png.stat().st_size if png.exists() else 0
        status = "ok" if done.returncode == 0 and 0 < size <= MAX_PNG_BYTES else "FAILED"
        failed += status != "ok"
        print(f"{script.stem:24s} {time.perf_counter() - start:6.1f} s  {size / 1000:6.1f} kB  {status}")
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
