"""``stochformer reproduce``: the tiny profile end to end, resuming a killed run, rejecting corrupt
or foreign cache entries, the verdict rules and the validation of the command's input."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.config import ConfigError, ExperimentConfig, RunConfig
from stochformer.io.store import ResultStore
from stochformer.report import plan, registered, reproduce
from stochformer.report.profiles import PROFILES
from stochformer.io.results import seed_of
from stochformer.measure.verdict import (FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, UNDETERMINED, VERDICTS, Comparison, decide,
                                       recompute)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"



def _interruptible() -> None:
    """In the child: SIGINT back to its default, so that Python turns it into KeyboardInterrupt even
    when the suite itself runs with SIGINT ignored (a background job of a non-interactive shell)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def _strict_json(path: Path):
    """Parse JSON, failing on NaN / Infinity (which Python's json would otherwise accept)."""

    def reject(token: str):
        raise AssertionError(f"{path.name} contains {token}")

    return json.loads(path.read_text(), parse_constant=reject)


def _numbers(obj):
    if isinstance(obj, float):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)


# --------------------------------------------------------------------------- the tiny profile, end to end


#: the breaches of the figure rules found in the tiny report's figures (`figure_audit.audit`), per figure
_AUDITS: list[tuple[str, list[str]]] = []


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory) -> Path:
    """The tiny report, with ``--format svg``; every figure is audited as it is saved as the page's PNG."""
    from matplotlib.figure import Figure

    from figure_audit import audit

    save = Figure.savefig

    def audited(fig, fname, *args, **kw):
        if kw.get("format") == "png":
            names = [ax.get_title() for ax in fig.axes if ax.get_title()] or [fig.get_suptitle()]
            _AUDITS.append((" / ".join(names), audit(fig)))
        return save(fig, fname, *args, **kw)

    out = tmp_path_factory.mktemp("tiny") / "report"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", audited)
        result = CliRunner().invoke(main, ["reproduce", "--profile", "tiny", "--out", str(out), "--quiet", "--format", "svg"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_tiny_report_dataset_names_every_variable(tiny_report: Path) -> None:
    """The tiny report's dataset.nc, read back with xarray: every variable and coordinate named and
    in its units (`test_datasets.check_dataset`), with at least one row."""
    import xarray as xr

    from stochformer.io.results import DATASET
    from test_datasets import OLD_NAMES, check_dataset

    with xr.open_dataset(tiny_report / DATASET, engine="h5netcdf") as ds:
        ds = ds.load()
    check_dataset(ds, OLD_NAMES - {"measured", "predicted"})
    assert len(ds["row"]) > 0


@pytest.mark.slow
def test_tiny_report_figures_keep_the_figure_rules(tiny_report: Path) -> None:
    """Every figure of the tiny report: mathtext only inside $...$, no text under 7 pt, cell labels at
    WCAG contrast >= 4.5 on their cells, legends covering no data, colour maps of monotone lightness."""
    assert len(_AUDITS) >= len(registered())
    bad = [f"{name}: {p}" for name, problems in _AUDITS for p in problems]
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_tiny_report_writes_every_figure_in_the_asked_format(tiny_report: Path) -> None:
    """``--format svg``: one SVG file per figure of the page, ``figures/<section>-<figure>.svg``, listed in
    results.json and in the folder's manifest; the page still embeds the PNG."""
    from stochformer.io.outputs import verify

    results = _strict_json(tiny_report / "results.json")
    files = sorted(p.name for p in (tiny_report / "figures").iterdir())
    expected = []
    for rec in results["sections"]:
        for fig in rec["figures"]:
            assert fig["file"] == f"figures/{rec['name']}-{fig['name']}.svg"
            head = (tiny_report / fig["file"]).read_bytes()[:400]
            assert b"<svg" in head, fig["file"]
            expected.append(Path(fig["file"]).name)
    assert files == sorted(expected) and len(files) == sum(len(r["figures"]) for r in results["sections"])
    page = (tiny_report / "index.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(files)
    verify(tiny_report, "reproduce")  # every figure file is the report's own


@pytest.mark.slow
def test_tiny_report_is_complete(tiny_report: Path) -> None:
    """Every section present and computed, every figure embedded as a valid PNG, every verdict
    re-derivable from its row by the stated rule, no NaN anywhere in results.json."""
    page = (tiny_report / "index.html").read_text()
    results = _strict_json(tiny_report / "results.json")
    names = [s.name for s in registered()]
    assert [r["name"] for r in results["sections"]] == names
    assert results["complete"] is True
    assert all(math.isfinite(x) for x in _numbers(results))
    # no external resource: every src/href is embedded data or an in-page anchor
    for ref in re.findall(r"(?:src|href)='([^']*)'", page):
        assert ref.startswith(("data:", "#")), ref
    sections = dict(re.findall(r"<section id='([^']+)'>(.*?)</section>", page, flags=re.S))
    assert list(sections) == names
    for rec in results["sections"]:
        assert rec["status"] == "computed", (rec["name"], rec.get("error"))
        body = sections[rec["name"]]
        assert rec["claim"].split()[0] in body
        assert rec["figures"], f"section {rec['name']} has no figure"
        imgs = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", body)
        assert [a for a, _ in imgs] == [f["name"] for f in rec["figures"]]
        for _, data in imgs:
            assert base64.b64decode(data)[:8] == PNG_MAGIC
        assert rec["config"] and rec["provenance"]["stochformer"] and rec["elapsed_s"] > 0
        assert "seed" in json.dumps(rec["seeds"])
        # every verdict is the one the section's rows give as one family, and is on the page
        assert [r["verdict"] for r in recompute(rec["comparisons"])] == [r["verdict"] for r in rec["comparisons"]]
        for row in rec["comparisons"]:
            assert row["verdict"] in VERDICTS and row["verdict"] in body
        if any(r.get("p_adjusted") is not None for r in rec["comparisons"]):
            assert "Holm" in body
    assert sum(len(r["comparisons"]) for r in results["sections"]) > 0


@pytest.mark.slow
def test_tiny_report_dataset_is_the_source_of_results_json(tiny_report: Path) -> None:
    """dataset.nc (xarray's default engine; stochformer.load) labels every comparison row with its
    section and every section with its status; results.json is what report_json derives from it."""
    import stochformer as sf
    from stochformer.report.runner import report_json

    ds = sf.load(tiny_report)
    results = _strict_json(tiny_report / "results.json")
    assert list(ds["section"].values) == [r["name"] for r in results["sections"]]
    assert list(ds["status"].values) == ["computed"] * ds.sizes["section"]
    rows = [(r["name"], c) for r in results["sections"] for c in r["comparisons"]]
    assert ds.sizes["row"] == len(rows) > 0
    assert [str(x) for x in ds["row_section"].values] == [name for name, _ in rows]
    assert [str(x) for x in ds["verdict"].values] == [c["verdict"] for _, c in rows]
    assert json.loads(json.dumps(report_json(ds), default=float)) == results
    with xr.open_dataset(tiny_report / "dataset.nc") as raw:
        assert raw.attrs["command"] == "reproduce"


# --------------------------------------------------------------------------- resuming


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from stochformer.cli import main; main()", "reproduce", *args]


#: A cheap section, and a later one whose length is set by its depth L.
CHEAP, LONG = "table", "sync"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["killed", "ctrl-c"])
def test_killed_run_resumes_without_recomputing(tmp_path: Path, sig: int) -> None:
    """Kill (SIGKILL) or interrupt (SIGINT, as Ctrl-C) a run while its second section runs; --resume
    reuses the first section's stored entry (same file, same mtime, status 'cached', original start
    time) and computes the second."""
    out = tmp_path / "report"
    first, second = CHEAP, LONG
    # the second section is made long (many layers) so that it is surely running when killed; the
    # resumed run computes it at its tiny size (a different key), the first section's key is unchanged
    args = ["--profile", "tiny", "--out", str(out), "--quiet", "--only", first, "--only", second]
    proc = subprocess.Popen(_cli(*args, "--set", f"{second}.L=100000"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_interruptible)
    cache = out / "cache"
    deadline = time.time() + 60
    try:
        while not list(cache.glob(f"{first}-*.json")):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "first section was not stored within 60 s"
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, sig)
    finally:
        # the interpreter's own exit after Ctrl-C takes 1–4 s here (a loaded machine)
        proc.wait(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "--resume" in proc.stderr.read().decode()
    else:
        assert proc.returncode == -signal.SIGKILL
    (entry,) = cache.glob(f"{first}-*.json")
    before = (entry.stat().st_mtime_ns, entry.read_bytes())
    stored = json.loads(before[1])["result"]
    assert not list(cache.glob(f"{second}-*.json"))

    done = subprocess.run(_cli(*args, "--resume"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (entry.stat().st_mtime_ns, entry.read_bytes()) == before
    results = _strict_json(out / "results.json")
    status = {r["name"]: r for r in results["sections"]}
    assert status[first]["status"] == "cached"
    assert status[first]["started_at"] == stored["started_at"]
    assert status[second]["status"] == "computed"


@pytest.fixture(scope="module")
def cheap_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cheap") / "report"
    reproduce(profile="tiny", out=out, only=[CHEAP])
    return out


@pytest.fixture
def table_run(cheap_report: Path, tmp_path: Path):
    """A copy of a report of the cheap section only: (out, section name, its cache entry, arguments)."""
    out = tmp_path / "report"
    shutil.copytree(cheap_report, out)
    _adopt(out)
    (entry,) = (out / "cache").glob(f"{CHEAP}-*.json")
    return out, CHEAP, entry, dict(profile="tiny", out=out, only=[CHEAP])


def _adopt(copy: Path) -> None:
    """Bind the manifest of a copied report folder to the copy and sign it again, as stochformer
    signs its own (a copy's manifest grants nothing: this makes the test's copy stand for the
    folder stochformer wrote)."""
    from stochformer.io.outputs import MARKER, _mac

    header, *rest = (json.loads(line) for line in (copy / MARKER).read_text().splitlines())
    st = copy.stat()
    header = {**header, "dev": st.st_dev, "ino": st.st_ino}
    header["mac"] = _mac("", header)
    entries = [{**entry, "mac": _mac(header["mac"], entry)} for entry in rest]
    (copy / MARKER).write_text("".join(json.dumps(line) + "\n" for line in [header, *entries]))


def _relist(out: Path, path: Path) -> None:
    """List the damaged ``path`` in the folder's manifest, so that the cache's own check is what is tested."""
    from stochformer.io.outputs import Manifest, file_digest

    Manifest.read(out).record(path.relative_to(out).as_posix(), *file_digest(path))


def _status(out: Path, name: str) -> dict:
    return {r["name"]: r for r in _strict_json(out / "results.json")["sections"]}[name]


def test_resume_reuses_and_plain_rerun_recomputes(table_run) -> None:
    out, name, entry, args = table_run
    started = json.loads(entry.read_text())["result"]["started_at"]
    reproduce(**args, resume=True)
    assert _status(out, name)["status"] == "cached"
    assert _status(out, name)["started_at"] == started
    reproduce(**args)  # without --resume every selected section is computed again
    assert _status(out, name)["status"] == "computed"


@pytest.mark.parametrize("damage", ["truncate", "edit_number", "foreign"])
def test_corrupt_or_foreign_cache_entry_is_recomputed(table_run, damage: str) -> None:
    out, name, entry, args = table_run
    data = json.loads(entry.read_text())
    if damage == "truncate":
        entry.write_text(entry.read_text()[: len(entry.read_text()) // 2])
    elif damage == "edit_number":  # valid JSON, but the signature no longer matches
        data["result"]["elapsed_s"] = data["result"]["elapsed_s"] + 1.0
        entry.write_text(json.dumps(data))
    else:  # an entry of another section/key copied under this name
        data["name"], data["key"] = "other", "0" * 20
        entry.write_text(json.dumps(data))
    _relist(out, entry)
    assert ResultStore(out / "cache").load(name, entry.stem.rsplit("-", 1)[1]) is None
    reproduce(**args, resume=True)
    rec = _status(out, name)
    assert rec["status"] == "computed"
    assert "corrupt or foreign" in rec["cache_note"]
    assert ResultStore(out / "cache").load(name, entry.stem.rsplit("-", 1)[1]) is not None


def test_format_writes_files_and_never_overwrites_a_users_file(table_run) -> None:
    """``fmt``: a section cached without that format is recomputed and its figures written as
    ``figures/*.pdf``; png is always available (resume reuses); a file the report did not write
    (a new one, or a figure file edited since) makes the rerun refuse before any work, and stays."""
    from stochformer.io.outputs import OutputError

    out, name, _, args = table_run
    reproduce(**args, fmt="pdf")
    assert _status(out, name)["status"] == "computed"
    pdfs = sorted((out / "figures").glob("*.pdf"))
    assert pdfs and all(p.read_bytes()[:5] == b"%PDF-" for p in pdfs)
    reproduce(**args, resume=True, fmt="png")
    assert _status(out, name)["status"] == "cached"
    pngs = sorted((out / "figures").glob("*.png"))
    assert [p.stem for p in pngs] == [p.stem for p in pdfs] and all(p.read_bytes()[:8] == PNG_MAGIC for p in pngs)
    user = out / "figures" / "notes.txt"
    user.write_text("mine")
    with pytest.raises(OutputError, match="notes.txt"):
        reproduce(**args, resume=True, fmt="png")
    assert user.read_text() == "mine"
    user.unlink()
    pngs[0].write_bytes(b"edited")
    with pytest.raises(OutputError, match=pngs[0].name):
        reproduce(**args, resume=True, fmt="png", force=True)
    assert pngs[0].read_bytes() == b"edited"


def test_figure_files_refuse_a_file_that_appeared_during_the_run(table_run) -> None:
    """The writer itself replaces only the report's own unchanged files: a file put at a figure's
    path after the folder was checked raises WriteError naming it and is left alone."""
    from stochformer.io.outputs import Manifest, WriteError
    from stochformer.report.runner import write_figure_files

    out, *_ = table_run
    (png,) = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", (out / "index.html").read_text())[:1]
    records = [{"name": "table", "status": "computed", "figures": [{"name": "late", "caption": "", "png": png}]}]
    foreign = out / "figures" / "table-late.png"
    foreign.parent.mkdir(exist_ok=True)
    foreign.write_bytes(b"not ours")
    manifest = Manifest.read(out)
    assert manifest is not None
    with pytest.raises(WriteError, match="table-late.png"):
        write_figure_files(out, records, "png", manifest)
    assert foreign.read_bytes() == b"not ours"
    foreign.unlink()
    write_figure_files(out, records, "png", manifest)
    assert foreign.read_bytes()[:8] == PNG_MAGIC and records[0]["figures"][0]["file"] == "figures/table-late.png"


def test_only_keeps_other_sections_from_the_cache(table_run) -> None:
    out, name, entry, args = table_run
    other = LONG
    statuses = {r["name"]: r["status"] for r in _strict_json(out / "results.json")["sections"]}
    assert statuses[name] == "computed" and statuses[other] == "not_run"
    page = (out / "index.html").read_text()
    assert f"stochformer reproduce --only {other}" in page


# --------------------------------------------------------------------------- verdict rules


@pytest.mark.parametrize(
    "rule, p, lo, hi, tol, expected",
    [
        ("matches", 1.0, 0.9, 1.1, 0.0, HOLDS),
        ("matches", 1.0, 1.2, 1.4, 0.0, FAILS),
        ("matches", 1.0, 1.2, 1.4, 0.25, HOLDS),  # widened by tol
        ("at_most", -0.3, -0.9, -0.5, 0.0, INCONCLUSIVE),  # below the bound, but as wide as the gap to −0.15
        ("at_most", -0.3, -0.9, -0.7, 0.0, HOLDS),  # a measured rate below the bound
        ("at_most", -0.3, -0.2, -0.1, 0.05, FAILS),
        ("at_least", 1.0, 0.5, 0.96, 0.05, FAILS),  # one-sided at 5%: m + 1.645 SE = 0.92 < p − tol
        ("at_least", 1.0, 0.8, 1.2, 0.05, HOLDS),
        ("below", 0.0, -0.5, -0.1, 0.0, HOLDS),
        ("below", 0.0, -0.5, 0.1, 0.0, INCONCLUSIVE),  # the interval contains p
        ("below", 0.0, 0.1, 0.5, 0.0, FAILS),
        ("above", 0.25, 0.3, 0.9, 0.0, HOLDS),
        ("above", 0.25, 0.2, 0.9, 0.0, INCONCLUSIVE),
        ("above", 0.25, 0.0, 0.2, 0.0, FAILS),
    ],
)
def test_decide(rule, p, lo, hi, tol, expected) -> None:
    assert decide(rule, p, lo, hi, tol) == expected


def test_comparison_missing_and_nonfinite() -> None:
    assert Comparison("κ", 0.5).verdict == NOT_MEASURED
    row = Comparison("λ", -1.0, float("nan"), (float("nan"), 0.0))
    assert row.verdict == UNDETERMINED and row.measured is None and row.ci == (None, 0.0)
    row = Comparison.from_mean_se("x", 0.0, 1.0, 0.1, rule="above")
    assert row.verdict == HOLDS and row.ci[0] == pytest.approx(1 - 1.959963984540054 * 0.1)
    with pytest.raises(ValueError, match="rule"):
        decide("roughly", 1.0, 0.0, 2.0)


# --------------------------------------------------------------------------- input validation


def test_plan_validates_before_any_work(tmp_path: Path) -> None:
    first, second = CHEAP, LONG
    with pytest.raises(ConfigError, match="--profile"):
        plan("huge")
    with pytest.raises(ConfigError, match="--only"):
        plan("tiny", only=["nope"])
    with pytest.raises(ConfigError, match="no section has a field named bogus"):
        plan("tiny", overrides=["bogus=1"])
    with pytest.raises(ConfigError, match=f"section {first}"):
        plan("tiny", overrides=[f"{first}.seed=-1"])
    # SECTION.FIELD applies to one section, FIELD to every section that has it
    p = {x.section.name: x for x in plan("tiny", overrides=[f"{first}.seed=7", "batch=5"])}
    assert seed_of(p[first].config) == 7 and seed_of(p[second].config) != 7
    assert p[second].config.model.batch == 5 and p["convergence"].config.model.batch == 5  # model fields by name
    assert p[first].key != {x.section.name: x for x in plan("tiny")}[first].key


def test_plan_reads_a_config_file(tmp_path: Path) -> None:
    """Top-level keys of the TOML apply to every section that has the field, [SECTION] tables to one."""
    cfg = tmp_path / "report.toml"
    cfg.write_text(f"seed = 11\n\n[{LONG}]\nL = 36\n")
    p = {x.section.name: x for x in plan("tiny", config_file=cfg)}
    assert all(seed_of(x.config) == 11 for x in p.values())
    assert p[LONG].config.model.L == 36 and p["convergence"].config.model.L != 36
    p = {x.section.name: x for x in plan("tiny", overrides=[f"{LONG}.model.L=40"])}  # or by their path
    assert p[LONG].config.model.L == 40
    cfg.write_text(f"[{LONG}]\nL = 0\n")
    with pytest.raises(ConfigError, match=f"section {LONG}: .*model.L"):
        plan("tiny", config_file=cfg)


def test_cli_refuses_a_foreign_folder_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    r = runner.invoke(main, ["reproduce", "--profile", "tiny", "--out", str(foreign)])
    assert r.exit_code == 2 and "not created by stochformer" in r.output and "keep.txt" in r.output
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]
    r = runner.invoke(main, ["reproduce", "--profile", "tiny", "--out", str(tmp_path / "r"), "--set", "N=1"])
    assert r.exit_code == 2 and "N" in r.output and not (tmp_path / "r").exists()
    r = runner.invoke(main, ["reproduce", "--list"])
    assert r.exit_code == 0 and all(s.name in r.output for s in registered())


# --------------------------------------------------------------------------- sections that fail


def _fake_sections(monkeypatch) -> None:
    """Three extra sections: one returning a NaN, one raising, one that cannot run here."""
    import matplotlib.pyplot as plt

    from stochformer.config import RunConfig
    from stochformer.report import registry
    from stochformer.report.registry import Section, SectionOutput, SectionUnavailable, figure_png

    def nan_run(cfg, ctx):
        fig = plt.figure()
        return SectionOutput({"value": float("nan"), "ok": [1.0, float("inf")]},
                           [Comparison("q", 1.0, float("nan"), (float("nan"), 2.0))], [figure_png(fig, "f", "c")], {})

    def broken_run(cfg, ctx):
        raise RuntimeError("boom")

    def missing_run(cfg, ctx):
        raise SectionUnavailable("fake is not available")

    for name, run, model in (("fake-nan", nan_run, RunConfig), ("fake-broken", broken_run, RunConfig),
                             ("fake-missing", missing_run, RunConfig)):
        monkeypatch.setitem(registry._REGISTRY, name, Section(name, name, "SPEC", "A fake claim.", model, {}, run))


def test_failing_sections_are_reported_and_nan_never_written(tmp_path: Path, monkeypatch) -> None:
    _fake_sections(monkeypatch)
    out = tmp_path / "report"
    r = CliRunner().invoke(main, ["reproduce", "--profile", "tiny", "--out", str(out), "--quiet",
                                  "--only", "fake-nan", "--only", "fake-broken", "--only", "fake-missing"])
    assert r.exit_code == 1 and "2 section(s) did not run: fake-broken, fake-missing" in r.output
    results = _strict_json(out / "results.json")
    rec = {x["name"]: x for x in results["sections"]}
    assert rec["fake-nan"]["status"] == "computed" and results["complete"] is False
    assert rec["fake-nan"]["numbers"] == {"value": None, "ok": [1.0, None]}
    assert "2 non-finite value(s) written as null: value, ok[1]" in rec["fake-nan"]["notes"]
    assert rec["fake-nan"]["comparisons"][0]["verdict"] == UNDETERMINED
    assert rec["fake-broken"]["status"] == "failed" and "RuntimeError: boom" in rec["fake-broken"]["error"]
    assert "broken_run" in rec["fake-broken"]["traceback"]
    assert rec["fake-missing"]["status"] == "unavailable" and "not available" in rec["fake-missing"]["error"]
    page = (out / "index.html").read_text()
    assert "This section failed to run: RuntimeError: boom" in page and "fake is not available" in page


def test_quick32_is_the_quick_sizes_in_float32() -> None:
    """``--profile quick32``: every section that has a dtype runs the quick config in float32; the
    others (the paper's experiments) run the quick config unchanged."""
    quick = {p.section.name: p.config for p in plan("quick")}
    fast = {p.section.name: p.config for p in plan("quick32")}
    def run_of(c):  # the model config that carries the dtype, if the section has one
        return c.model if isinstance(c, ExperimentConfig) else c if isinstance(c, RunConfig) else None

    with_dtype = [n for n, c in quick.items() if run_of(c) is not None]
    assert with_dtype and len(with_dtype) < len(quick)
    for name, cfg in quick.items():
        if name in with_dtype:
            run, run32 = run_of(cfg), run_of(fast[name])
            assert run.dtype == "float64" and run32.dtype == "float32"
            back = run32.model_copy(update={"dtype": "float64"})
            assert (fast[name].model_copy(update={"model": back}) if run32 is not fast[name] else back) == cfg
        else:
            assert fast[name] == cfg


@pytest.mark.parametrize("profile", sorted(set(PROFILES) - {"gpu"}))  # gpu: below, with a device
def test_every_profile_plans_every_section(profile: str) -> None:
    """Every section's config is valid at every built-in size (a rule added to a config, such as a
    small step, must not leave a profile that only fails when someone runs it)."""
    assert {p.section.name for p in plan(profile)} == {s.name for s in registered()}


def test_gpu_profile_plans_every_section_on_cuda_where_it_has_a_device(monkeypatch) -> None:
    """``--profile gpu``: every section plans (a section without a ``device`` field, such as the
    variants, runs on the CPU instead of failing the whole plan), the others with device = cuda."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    planned = {p.section.name: p.config for p in plan("gpu")}
    devices = {n: getattr(getattr(c, "model", c), "device", None) for n, c in planned.items()}
    assert set(planned) == {s.name for s in registered()}
    assert {d for d in devices.values() if d is not None} == {"cuda"}
    assert [n for n, d in devices.items() if d is None] == ["variants", "bridge", "neighbours"]
