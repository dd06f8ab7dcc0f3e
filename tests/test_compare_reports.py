"""``tools/compare_reports.py``: two reports' rows matched by section and quantity and classed as
identical, inside or outside the old interval, verdict changed, removed or added (on synthetic
``results.json`` files)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import compare_reports as cr  # noqa: E402


def row(quantity: str, measured: float | None = 1.0, ci: list | None = (0.5, 1.5), verdict: str = "holds", **kw) -> dict:
    return {"quantity": quantity, "predicted": 1.0, "measured": measured, "ci": None if ci is None else list(ci),
            "rule": "matches", "tol": 0.0, "note": "", "n": 10, "p_value": 0.5, "p_adjusted": 0.5, "power": None,
            "verdict": verdict, **kw}


def write(path: Path, sections: dict[str, list[dict]], status: dict[str, str] | None = None) -> Path:
    status = status or {}
    doc = {"profile": "tiny", "sections": [{"name": n, "status": status.get(n, "computed"), "comparisons": rows}
                                           for n, rows in sections.items()]}
    path.write_text(json.dumps(doc))
    return path


def kinds(old: dict[str, list[dict]], new: dict[str, list[dict]], tmp_path: Path) -> dict[tuple, str]:
    diffs = cr.compare(cr.load_rows(write(tmp_path / "old.json", old)), cr.load_rows(write(tmp_path / "new.json", new)))
    return {d.key: d.kind for d in diffs}


def test_each_class(tmp_path: Path) -> None:
    old = {"a": [row("same"), row("moved in", 1.0), row("moved out", 1.0), row("moved below", 1.0), row("flipped"),
                 row("gone"), row("count", 2.0, None), row("count moved", 2.0, None), row("one-sided", -1.0, (None, 0.0))],
           "b": [row("x")]}
    new = {"a": [row("same"), row("moved in", 1.4), row("moved out", 1.6), row("moved below", 0.4),
                 row("flipped", verdict="inconclusive"), row("count", 2.0, None, p_adjusted=0.9), row("count moved", 3.0, None),
                 row("one-sided", -9.0, (None, -8.0)), row("new")],
           "c": [row("y")]}
    assert kinds(old, new, tmp_path) == {
        ("a", "same", 0): "identical", ("a", "moved in", 0): "inside", ("a", "moved out", 0): "outside",
        ("a", "moved below", 0): "outside", ("a", "flipped", 0): "verdict", ("a", "gone", 0): "removed", ("a", "count", 0): "inside",
        ("a", "count moved", 0): "outside", ("a", "one-sided", 0): "inside", ("a", "new", 0): "added",
        ("b", "x", 0): "removed", ("c", "y", 0): "added",
    }


def test_bit_for_bit() -> None:
    """Numbers compare by the bytes of their doubles: NaN is itself, −0.0 is not 0.0, 1 is 1.0;
    the last bit of a measured value, an interval end or a p-value is a change."""
    assert cr.classify(row("q", math.nan), row("q", math.nan)) == ("identical", ())
    assert cr.classify(row("q", 0.0, (-1, 1)), row("q", -0.0, (-1, 1))) == ("inside", ("measured",))
    assert cr.classify(row("q", 1), row("q", 1.0))[0] == "identical"
    assert cr.classify(row("q", 1.0), row("q", math.nextafter(1.0, 2.0))) == ("inside", ("measured",))
    assert cr.classify(row("q"), row("q", ci=(0.5, math.nextafter(1.5, 2.0)))) == ("inside", ("ci",))
    assert cr.classify(row("q"), row("q", p_value=0.25)) == ("inside", ("p_value",))
    assert cr.classify(row("q"), row("q", note="reworded"))[0] == "identical"  # text is not a number
    assert cr.classify(row("q"), row("q", measured=None)) == ("outside", ("measured",))
    assert cr.classify(row("q", verdict="holds"), row("q", 9.0, verdict="inconclusive")) == ("verdict", ("measured", "verdict"))
    with pytest.raises(ValueError, match="both"):
        cr.classify(None, None)


def test_keys(tmp_path: Path) -> None:
    """Equal quantities of a section are told apart by their order; a section that was not computed
    has no rows."""
    path = write(tmp_path / "r.json", {"a": [row("q", 1.0), row("q", 2.0), row("r")], "b": [row("q")]}, {"b": "failed"})
    rows = cr.load_rows(path)
    assert list(rows) == [("a", "q", 0), ("a", "q", 1), ("a", "r", 0)]
    assert rows[("a", "q", 1)]["measured"] == 2.0
    (tmp_path / "results.json").write_text(path.read_text())
    assert cr.load_rows(tmp_path) == rows  # a report folder stands for its results.json
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="sections"):
        cr.load_rows(tmp_path / "bad.json")


finite = st.floats(-1e6, 1e6, allow_nan=False)


@st.composite
def reports(draw: st.DrawFn) -> dict[str, list[dict]]:
    """Up to three sections of up to five rows; quantities from a small set, so that some repeat."""
    out = {}
    for name in draw(st.lists(st.sampled_from("abc"), unique=True, max_size=3)):
        rows = []
        for q in draw(st.lists(st.sampled_from(["p", "q", "r"]), max_size=5)):
            m, h = draw(finite), draw(st.floats(0, 10))
            rows.append(row(q, m, (m - h, m + h), draw(st.sampled_from(["holds", "inconclusive"]))))
        out[name] = rows
    return out


@settings(max_examples=60, deadline=None)
@given(reports(), st.data())
def test_classes_property(tmp_path_factory: pytest.TempPathFactory, old: dict, data: st.DataObject) -> None:
    """A report against itself is identical row for row; one row's measured value moved is inside
    exactly when it stays in the old interval; a row dropped is removed, a row appended is added;
    the classes count every key of either report once."""
    tmp = tmp_path_factory.mktemp("cmp")
    assert set(kinds(old, old, tmp).values()) <= {"identical"}
    new = json.loads(json.dumps(old))
    keys = [(s, i) for s in new for i in range(len(new[s]))]
    expected: dict[tuple, str] = {}
    if keys:
        s, i = data.draw(st.sampled_from(keys))
        r, v = new[s][i], data.draw(finite)
        lo, hi = r["ci"]
        n = sum(x["quantity"] == r["quantity"] for x in new[s][:i])
        same = v == r["measured"] and math.copysign(1, v) == math.copysign(1, r["measured"])  # bit for bit
        expected[(s, r["quantity"], n)] = "identical" if same else "inside" if lo <= v <= hi else "outside"
        r["measured"] = v
        if data.draw(st.booleans()):
            gone = new[s].pop()
            expected[(s, gone["quantity"], sum(x["quantity"] == gone["quantity"] for x in new[s]))] = "removed"
    new.setdefault("z", []).append(row("fresh"))
    expected[("z", "fresh", len(new["z"]) - 1)] = "added"
    got = kinds(old, new, tmp)
    for k, kind in expected.items():
        assert got[k] == kind, k
    diffs = cr.compare(cr.load_rows(write(tmp / "o.json", old)), cr.load_rows(write(tmp / "n.json", new)))
    assert sum(sum(c.values()) for c in cr.counts(diffs).values()) == len(got) == len(diffs)


def test_render_text_and_markdown(tmp_path: Path) -> None:
    old = {"a": [row("kept"), row("moved", 1.0), row("tiny step", 1.0)], "b": [row("gone")]}
    new = {"a": [row("kept"), row("moved", 2.0), row("tiny step", math.nextafter(1.0, 2.0))], "b": []}
    diffs = cr.compare(cr.load_rows(write(tmp_path / "o.json", old)), cr.load_rows(write(tmp_path / "n.json", new)))
    text = cr.render(diffs)
    lines = text.splitlines()
    assert lines[0].split() == ["section", *cr.CLASSES, "rows"]
    assert lines[1].split() == ["a", "1", "1", "1", "0", "0", "0", "3"]
    assert lines[2].split() == ["b", "0", "0", "0", "0", "1", "0", "1"]
    assert lines[3].split() == ["all", "1", "1", "1", "0", "1", "0", "4"]
    assert "kept" not in text  # identical rows are counted, not listed
    assert "1 [0.5, 1.5] (holds)" in text and "2 [0.5, 1.5] (holds)" in text
    assert "1.0000000000000002 [0.5, 1.5]" in text  # 6 digits would hide the change
    md = cr.render(diffs, markdown=True)
    assert "| section | identical | inside | outside | verdict | removed | added | rows |" in md
    assert "| a | 1 | 1 | 1 | 0 | 0 | 0 | 3 |" in md and "| b | gone | removed | 1 [0.5, 1.5] (holds) | — | — |  |" in md
    same = cr.compare(cr.load_rows(tmp_path / "o.json"), cr.load_rows(tmp_path / "o.json"))
    assert "Every row is identical." in cr.render(same)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = write(tmp_path / "o.json", {"a": [row("q", 1.0), row("r", 1.0)]})
    new = write(tmp_path / "n.json", {"a": [row("q", 3.0), row("r", 1.2, verdict="inconclusive")]})
    assert cr.main([str(old), str(new), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| a | q | outside | 1 [0.5, 1.5] (holds) | 3 [0.5, 1.5] (holds) | no | measured |" in out
    assert "| a | r | verdict | 1 [0.5, 1.5] (holds) | 1.2 [0.5, 1.5] (inconclusive) | yes | measured, verdict |" in out
    with pytest.raises(SystemExit):
        cr.main([str(tmp_path / "missing.json"), str(new)])
    assert "OLD: cannot read" in capsys.readouterr().err
