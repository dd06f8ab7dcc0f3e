"""The report cache is a convenience, not a source of truth: entries are signed with a key kept
outside the output folder, so a forged entry (its checksum recomputed and its new hash listed in
the folder's manifest: all that someone who can write the folder can do) is recomputed and cannot
make a failing row "hold"; markup or a non-PNG figure cannot reach the page; an entry edited
without updating the manifest makes the rerun refuse, naming it; changed source code never
reuses old entries."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.io.store import ResultStore, key_dir
from stochformer.io.outputs import Manifest, OutputError, file_digest
from stochformer.report import reproduce
from stochformer.report import registry
from stochformer.report.render import escape, maths, safe_png
from stochformer.report.registry import Section, SectionOutput, figure_png
from stochformer.measure.verdict import FAILS, HOLDS, Comparison, recompute


@pytest.fixture
def fake_section(monkeypatch):
    """One cheap section whose single row does not hold (predicted 1, measured 5 ± 0.1)."""
    import matplotlib.pyplot as plt

    from stochformer.config import RunConfig

    def run(cfg, ctx):
        return SectionOutput({"value": 5.0}, [Comparison.from_mean_se("q", 1.0, 5.0, 0.05)],
                           [figure_png(plt.figure(figsize=(1, 1)), "fig", "a caption")], {"stochformer": "x"})

    monkeypatch.setitem(registry._REGISTRY, "fake", Section("fake", "Fake", "SPEC", "A fake claim.", RunConfig, {}, run))
    return "fake"


def _forge(out: Path, name: str, change, relist: bool = True, sign: bool = False) -> Path:
    """Edit the cached entry of section ``name``: its result changed, its checksum recomputed and
    (``relist``) its new hash listed in the folder's manifest: what someone who can write the folder
    can do; ``sign``: also signed with the key (what only someone holding the key can do)."""
    (path,) = (out / "cache").glob(f"{name}-*.json")
    entry = json.loads(path.read_text())
    change(entry["result"])
    entry["checksum"] = ResultStore._checksum(entry["result"])
    if sign:
        entry["hmac"] = ResultStore.signature(entry["name"], entry["key"], entry["result"])
    path.write_text(json.dumps(entry))
    if relist:
        Manifest.read(out).record(path.relative_to(out).as_posix(), *file_digest(path))
    return path


def _record(out: Path, name: str) -> dict:
    return {r["name"]: r for r in json.loads((out / "results.json").read_text())["sections"]}[name]


def test_signed_forgery_cannot_change_verdicts_or_inject_markup(tmp_path, fake_section) -> None:
    """Even an entry signed with the key (a second line of defence) is shown only after its
    identity, types, figures and verdicts are derived again."""
    out = tmp_path / "report"
    reproduce("tiny", out, only=[fake_section])
    assert _record(out, fake_section)["comparisons"][0]["verdict"] == FAILS

    def forge(result: dict) -> None:
        result["comparisons"][0]["verdict"] = HOLDS  # the stored verdict says "holds"
        result["comparisons"][0]["note"] = "<script>alert('note')</script>"
        result["title"] = "<script>alert('title')</script>"
        result["notes"].append("<img src=x onerror=alert(1)>")
        result["figures"][0]["png"] = "x' onerror='alert(1)"
        result["figures"][0]["caption"] = "</figcaption><script>alert(2)</script>"
        result["tables"] = [{"title": "<b>t</b>", "columns": ["<i>c</i>"], "rows": [["<u>v</u>"]]}]

    _forge(out, fake_section, forge, sign=True)
    reproduce("tiny", out, only=[fake_section], resume=True)
    rec = _record(out, fake_section)
    assert rec["status"] == "cached" and rec["title"] == "Fake"  # identity from the code, not the cache
    assert rec["comparisons"][0]["verdict"] == FAILS  # derived again from the stored numbers
    page = (out / "index.html").read_text()
    assert "<script" not in page and "onerror" not in page.replace("onerror=alert(1)&gt;", "")
    assert "Figure fig left out: the stored image is not a valid PNG" in page
    assert "&lt;script&gt;alert(&#x27;note&#x27;)" in page and "&lt;u&gt;v&lt;/u&gt;" in page
    assert f"class='holds'>{HOLDS}<" not in page and FAILS in page


def test_forged_numbers_cannot_turn_a_failing_row_into_holds(tmp_path, fake_section) -> None:
    """The numbers edited to equal the prediction (and everything an outsider can recompute
    recomputed): the entry's signature fails, so --resume recomputes the section."""
    out = tmp_path / "report"
    reproduce("tiny", out, only=[fake_section])
    reproduce("tiny", out, only=[fake_section], resume=True)
    assert _record(out, fake_section)["status"] == "cached"  # a genuine entry is reused

    def agree(result: dict) -> None:
        row = result["comparisons"][0]
        row["measured"], row["ci"] = row["predicted"], [row["predicted"] - 0.01, row["predicted"] + 0.01]
        result["numbers"]["value"] = row["predicted"]

    _forge(out, fake_section, agree)
    reproduce("tiny", out, only=[fake_section], resume=True)
    rec = _record(out, fake_section)
    assert rec["status"] == "computed" and rec["comparisons"][0]["verdict"] == FAILS
    assert rec["comparisons"][0]["measured"] == 5.0


def test_entry_edited_behind_the_manifest_is_refused(tmp_path, fake_section) -> None:
    out = tmp_path / "report"
    reproduce("tiny", out, only=[fake_section])
    path = _forge(out, fake_section, lambda r: r["numbers"].update(value=1.0), relist=False)
    before = path.read_bytes()
    with pytest.raises(OutputError, match=f"{path.name} has changed since stochformer wrote it"):
        reproduce("tiny", out, only=[fake_section], resume=True)
    assert path.read_bytes() == before


def test_the_key_lives_outside_the_output_folder_and_only_its_owner_reads_it(tmp_path, fake_section) -> None:
    out = tmp_path / "report"
    reproduce("tiny", out, only=[fake_section])
    key = key_dir() / "key"
    assert key.is_file() and (key.stat().st_mode & 0o777) == 0o600
    assert tmp_path not in key.resolve().parents and not list(out.rglob("key"))


def test_forged_entry_with_wrong_types_is_recomputed(tmp_path, fake_section) -> None:
    out = tmp_path / "report"
    reproduce("tiny", out, only=[fake_section])
    _forge(out, fake_section, lambda r: r.update(elapsed_s="<1 s>", figures=[{"name": 1}]), sign=True)
    reproduce("tiny", out, only=[fake_section], resume=True)
    rec = _record(out, fake_section)
    assert rec["status"] == "computed" and "corrupt or foreign" in rec["cache_note"]


def test_png_is_decoded_checked_and_reencoded() -> None:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3, 2), (255, 0, 0)).save(buf, format="PNG", pnginfo=_text_chunk("<script>x</script>"))
    good = base64.b64encode(buf.getvalue()).decode()
    clean = safe_png(good)
    assert clean is not None and b"<script>" not in base64.b64decode(clean)
    assert Image.open(io.BytesIO(base64.b64decode(clean))).size == (3, 2)
    gif = io.BytesIO()
    Image.new("RGB", (3, 2)).save(gif, format="GIF")
    for bad in ["x' onerror='alert(1)", base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode(),
                base64.b64encode(gif.getvalue()).decode(), good[:64], None, 5]:
        assert safe_png(bad) is None


def _text_chunk(text: str):
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", text)
    return info


def test_recompute_turns_invalid_rows_into_undetermined() -> None:
    rows = recompute([{"quantity": "q", "predicted": 1.0, "measured": 5.0, "ci": [4.9, 5.1], "rule": "matches",
                       "tol": 0.0, "note": "", "verdict": HOLDS},
                      {"quantity": "bad", "predicted": "x", "verdict": HOLDS}, "not a row"])
    assert [r["verdict"] for r in rows] == [FAILS, "undetermined", "undetermined"]


def test_keys_include_the_source_hash(monkeypatch) -> None:
    """Changed code (same version) gives other cache and task keys, so old results are not reused."""
    import stochformer.report.runner as runner
    import stochformer.tasks.base as tasks
    from stochformer.report.runner import plan
    from stochformer.tasks import Task

    key = {x.section.name: x.key for x in plan("tiny")}
    task = Task("t", json.dumps, {"obj": 1}).cache_key
    monkeypatch.setattr(runner, "source_hash", lambda: "changed")
    monkeypatch.setattr(tasks, "source_hash", lambda: "changed")
    assert all(key[x.section.name] != x.key for x in plan("tiny") if x.key is not None)
    assert Task("t", json.dumps, {"obj": 1}).cache_key != task


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    """A copy of the installed package's source tree."""
    import shutil

    import stochformer

    dest = tmp_path_factory.mktemp("pkg") / "stochformer"
    shutil.copytree(Path(stochformer.__file__).resolve().parent, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_source_hash_covers_every_module_of_the_package(package_copy: Path) -> None:
    """The cache keys' source hash is the hash of the whole package, and an edit of any one of its
    modules (every module, in every subpackage) changes it: results stored by other code are never
    reused."""
    from stochformer.io.store import source_hash, tree_hash

    assert source_hash() == tree_hash(package_copy)
    modules = sorted(package_copy.rglob("*.py"))
    assert {p.parent.name for p in modules} >= {"model", "measure", "experiments", "report", "io"}
    for path in modules:
        original = path.read_bytes()
        try:
            path.write_bytes(original + b"\n# edited\n")
            assert tree_hash(package_copy) != source_hash(), path
        finally:
            path.write_bytes(original)


_TAG = re.compile(r"</?(?:sup|sub)>")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab ^_{}()<>&'\"β−2", max_size=40))
def test_report_maths_adds_only_balanced_script_tags(text: str) -> None:
    """Typesetting ``^{…}``/``_{…}`` inserts nothing but balanced <sup>/<sub> pairs: with them removed
    the page shows the escaped text less the consumed markers, and no other markup gets through."""
    out = maths(text)
    assert "<" not in _TAG.sub("", out) and ">" not in _TAG.sub("", out)
    depth = 0
    for tag in _TAG.findall(out):
        depth += -1 if tag.startswith("</") else 1
        assert depth >= 0
    assert depth == 0
    plain = html.unescape(_TAG.sub("", out))
    assert re.sub(r"[\^_{}]", "", plain) == re.sub(r"[\^_{}]", "", text)


def test_every_registered_claim_is_typeset_without_raw_exponents() -> None:
    """The claims of the report (e^{λ̄' t}, c_N e^{c_N T²}, μ^(N,L,m)) show as superscripts, not as
    pseudo-LaTeX; plain escaping (the page before) leaves them raw."""
    import stochformer.report.sections  # noqa: F401  (registers the sections)

    assert maths("e^{−κ(1)(d−1)t/2}") == "e<sup>−κ(1)(d−1)t/2</sup>"
    assert maths("c_N e^{c_N e^{−2t}} energy_beta X_{ℓ+1}^i") == "c_N e<sup>c_N e<sup>−2t</sup></sup> energy_beta X<sub>ℓ+1</sub><sup>i</sup>"
    claims = [s.claim for s in registry.registered()]
    raw = re.compile(r"\^|_\{")
    assert sum(bool(raw.search(escape(c))) for c in claims) >= 5  # the check below has something to find
    left = [c for c in claims if raw.search(maths(c))]
    assert not left, f"claims with raw exponents in the page: {left}"
