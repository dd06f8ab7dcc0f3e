"""The report page in headless Chromium: it loads, renders every section, every image decodes, and
it logs nothing to the console. Runs where a ``chromium`` binary is on PATH (Debian's chromium
package; ``.ci/run`` installs it); with STOCHFORMER_REQUIRE_BROWSER=1 (set by ``.ci/run``) a
missing browser fails the test instead of skipping it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stochformer.report import reproduce

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("STOCHFORMER_REQUIRE_BROWSER") == "1":
    raise RuntimeError("STOCHFORMER_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install -y chromium)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-extensions", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"]

# Appended to a copy of the page: once everything has loaded, each image that did not decode is
# reported on the console, and the counts are written into the DOM for the test to read.
IMAGE_PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const failed = imgs.filter(img => !(img.complete && img.naturalWidth > 0));
  failed.forEach(img => console.error("image failed to load: " + (img.alt || img.src.slice(0, 40))));
  const out = document.createElement("div");
  out.id = "image-probe";
  out.setAttribute("data-images", imgs.length);
  out.setAttribute("data-failed", failed.length);
  document.body.appendChild(out);
});
</script>"""


def _chromium(page: Path, *extra: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)


def _probed(page: Path, copy: Path) -> Path:
    html = page.read_text()
    copy.write_text(html.replace("</body>", IMAGE_PROBE + "</body>") if "</body>" in html else html + IMAGE_PROBE)
    return copy


def _console(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stderr.splitlines() if "CONSOLE" in line]


def _probe_counts(dom: str) -> tuple[int, int]:
    m = re.search(r'id="image-probe" data-images="(\d+)" data-failed="(\d+)"', dom)
    assert m, "the image probe did not run"
    return int(m.group(1)), int(m.group(2))


def test_probes_catch_script_errors_and_broken_images(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><img alt='broken' src='data:image/png;base64,AAAA'>"
                   "<script>console.error('probe'); undefinedFn();</script></body></html>")
    run = _chromium(_probed(bad, tmp_path / "bad-probed.html"), "--dump-dom", profile=tmp_path / "chromium-probe")
    console = "\n".join(_console(run))
    assert "undefinedFn" in console and "image failed to load: broken" in console, run.stderr[-2000:]
    assert _probe_counts(run.stdout) == (1, 1)


def test_page_renders_without_console_messages(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = reproduce(profile="tiny", out=out, only=["table", "sync"])
    page = out / "index.html"

    run = _chromium(_probed(page, out / "probed.html"), "--dump-dom", profile=tmp_path / "chromium")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _console(run) == [], _console(run)
    dom = run.stdout
    for rec in report["sections"]:
        assert f'id="{rec["name"]}"' in dom
    computed = [r for r in report["sections"] if r["status"] == "computed"]
    n_figures = sum(len(r["figures"]) for r in computed)
    assert n_figures > 0
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', dom)) == n_figures
    assert _probe_counts(dom) == (n_figures, 0)  # every figure decoded

    shot = tmp_path / "page.png"
    run = _chromium(page, f"--screenshot={shot}", "--window-size=1200,2000", profile=tmp_path / "chromium-shot")
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", run.stderr[-2000:]
