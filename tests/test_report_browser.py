"""The report page in headless Chromium: it loads, renders every section and logs nothing to the
console (runs only where a ``chromium`` binary is on PATH, e.g. Debian's chromium package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stochformer.report import reproduce

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-extensions", "--enable-logging=stderr", "--v=0"]


def _chromium(page: Path, *extra: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)


def test_page_renders_without_console_messages(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = reproduce(profile="tiny", out=out, only=["table", "sync"])
    page = out / "index.html"

    # the probe works: a page with a script error is reported on the console log
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('probe'); undefinedFn();</script></body></html>")
    probe = _chromium(bad, "--dump-dom", profile=tmp_path / "chromium-probe")
    assert "CONSOLE" in probe.stderr and "undefinedFn" in probe.stderr

    run = _chromium(page, "--dump-dom", profile=tmp_path / "chromium")
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    dom = run.stdout
    for rec in report["stages"]:
        assert f'id="{rec["name"]}"' in dom
    computed = [r for r in report["stages"] if r["status"] == "computed"]
    n_figures = sum(len(r["figures"]) for r in computed)
    assert n_figures > 0
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', dom)) == n_figures

    shot = tmp_path / "page.png"
    run = _chromium(page, f"--screenshot={shot}", "--window-size=1200,2000", profile=tmp_path / "chromium-shot")
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", run.stderr[-2000:]
