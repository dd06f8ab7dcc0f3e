#!/usr/bin/env python3
"""Compare two reproduction reports row by row: which rows kept their numbers bit for bit.

Usage: python tools/compare_reports.py OLD/results.json NEW/results.json [--markdown]

(a report folder may stand for its ``results.json``). A row is one comparison of a computed section
of ``stochformer reproduce``, keyed by the section's name and the row's quantity (equal quantities
within a section by their order). Each key falls in one class (`CLASSES`):

- ``identical``: every number of the row (`NUMBERS`) and its verdict are equal bit for bit;
- ``inside``: the verdict is kept, some number changed, and the new measured value lies in the old
  95% interval (a row without an interval: equals the old measured value);
- ``outside``: the verdict is kept and the new measured value lies outside the old interval (or is
  missing);
- ``verdict``: the verdict changed;
- ``removed``: only in OLD; ``added``: only in NEW.

Prints the count of each class per section, then every row that is not identical with its old
and new measured value, interval and verdict, whether the new value lies in the old interval (for
a changed verdict too) and the names of the numbers that changed.
``--markdown`` writes the same as Markdown tables (for docs/). The exit status is 0 whatever the
classes are: a changed number may be a deliberate change (a new random stream, a new estimator).
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

#: the classes of a row, in the order of the tables
CLASSES = ("identical", "inside", "outside", "verdict", "removed", "added")
#: the numbers of a row compared bit for bit (besides its verdict); ``ci`` is (lo, hi)
NUMBERS = ("predicted", "measured", "ci", "tol", "alternative", "reach", "n", "p_value", "p_adjusted", "power")

Key = tuple[str, str, int]  # (section, quantity, its order among equal quantities of the section)


@dataclass(frozen=True)
class RowDiff:
    """One row of OLD and NEW: its key, its class (`CLASSES`), the two rows (None where absent) and
    the names of the numbers of `NUMBERS` (and ``verdict``) that differ."""

    key: Key
    kind: str
    old: Optional[dict]
    new: Optional[dict]
    changed: tuple[str, ...]


def load_rows(path: Path) -> dict[Key, dict]:
    """The rows of a report's ``results.json`` (or of the report folder holding it), by key, in the
    report's order; sections that were not computed contribute none.

    Parameters
    ----------
    path : Path
        ``results.json`` or its folder.

    Returns
    -------
    dict
        ``(section, quantity, k) → row`` (the row as stored: quantity, predicted, measured, ci,
        verdict, ...); k counts the earlier rows of the section with the same quantity.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    report = json.loads(path.read_text())
    if not isinstance(report, dict) or not isinstance(report.get("sections"), list):
        raise ValueError(f"{path}: not a report's results.json (no 'sections' list)")
    rows: dict[Key, dict] = {}
    for section in report["sections"]:
        if section.get("status", "computed") != "computed":
            continue
        seen: Counter[str] = Counter()
        for row in section.get("comparisons") or []:
            q = row["quantity"]
            rows[(section["name"], q, seen[q])] = row
            seen[q] += 1
    return rows


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _same(a: Any, b: Any) -> bool:
    """Equal bit for bit: numbers by the IEEE bytes of their doubles (NaN equals the same NaN, −0.0
    differs from 0.0; JSON's 1 and 1.0 are one double), sequences element by element, anything
    else by type and ``==``."""
    if _is_number(a) and _is_number(b):
        return struct.pack("<d", float(a)) == struct.pack("<d", float(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _inside(value: Optional[float], old: dict) -> bool:
    """Whether ``value`` lies in the old row's interval (ends None: unbounded on that side); without
    an interval, whether it equals the old measured value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    ci = old.get("ci")
    if ci is None:
        return old.get("measured") is not None and value == old["measured"]
    lo, hi = ci
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def classify(old: Optional[dict], new: Optional[dict]) -> tuple[str, tuple[str, ...]]:
    """The class of a row (`CLASSES`) and the names of its fields that differ.

    Parameters
    ----------
    old, new : dict or None
        The row in OLD and in NEW (None: absent there); fields as in ``results.json``.

    Returns
    -------
    kind : str
        One of `CLASSES`.
    changed : tuple of str
        The fields of `NUMBERS` and ``verdict`` that differ (empty for ``removed`` and ``added``).
    """
    if old is None or new is None:
        if old is None and new is None:
            raise ValueError("classify: old and new cannot both be None")
        return ("added" if old is None else "removed"), ()
    changed = tuple(f for f in (*NUMBERS, "verdict") if not _same(old.get(f), new.get(f)))
    if not changed:
        return "identical", changed
    if "verdict" in changed:
        return "verdict", changed
    return ("inside" if _inside(new.get("measured"), old) else "outside"), changed


def compare(old: dict[Key, dict], new: dict[Key, dict]) -> list[RowDiff]:
    """Every key of either report with its class: NEW's order, then the keys only in OLD in theirs.

    Parameters
    ----------
    old, new : dict
        Rows by key, as `load_rows` returns them.

    Returns
    -------
    list of RowDiff
        One per key.
    """
    keys = list(new) + [k for k in old if k not in new]
    out = []
    for k in keys:
        kind, changed = classify(old.get(k), new.get(k))
        out.append(RowDiff(k, kind, old.get(k), new.get(k), changed))
    return out


def counts(diffs: list[RowDiff]) -> dict[str, Counter[str]]:
    """The number of rows of each class per section, sections in the order of ``diffs``.

    Parameters
    ----------
    diffs : list of RowDiff
        As `compare` returns them.

    Returns
    -------
    dict
        ``section → Counter(class → rows)``.
    """
    out: dict[str, Counter[str]] = {}
    for d in diffs:
        out.setdefault(d.key[0], Counter())[d.kind] += 1
    return out


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:.6g}" if isinstance(x, float) else str(x)


def _value(row: Optional[dict], other: Optional[dict]) -> str:
    """``measured [lo, hi] (verdict)``; at full precision where 6 digits would not show a change."""
    if row is None:
        return "—"
    m, ci = row.get("measured"), row.get("ci")
    text = _num(m)
    if other is not None and isinstance(m, float) and text == _num(other.get("measured")) and not _same(m, other.get("measured")):
        text = repr(m)
    if ci is not None:
        text += f" [{_num(ci[0])}, {_num(ci[1])}]"
    return f"{text} ({row.get('verdict')})"


def _in_old(d: RowDiff) -> str:
    """Whether a row in both reports has its new measured value in the old interval: yes, no or —."""
    if d.old is None or d.new is None:
        return "—"
    return "yes" if _inside(d.new.get("measured"), d.old) else "no"


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        cells = [header, ["---"] * len(header), *rows]
        return ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in cells]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in (header, *rows)]


def render(diffs: list[RowDiff], markdown: bool = False) -> str:
    """The per-section counts and the list of rows that are not identical, as text or Markdown.

    Parameters
    ----------
    diffs : list of RowDiff
        As `compare` returns them.
    markdown : bool
        Markdown tables instead of aligned columns.

    Returns
    -------
    str
        The two tables, newline-terminated.
    """
    by_section = counts(diffs)
    total: Counter[str] = sum(by_section.values(), Counter())
    summary = [[name, *(str(c[k]) for k in CLASSES), str(sum(c.values()))] for name, c in by_section.items()]
    summary.append(["all", *(str(total[k]) for k in CLASSES), str(sum(total.values()))])
    lines = _table(["section", *CLASSES, "rows"], summary, markdown)
    changed = [[d.key[0], d.key[1] + (f" #{d.key[2] + 1}" if d.key[2] else ""), d.kind, _value(d.old, d.new),
                _value(d.new, d.old), _in_old(d), ", ".join(d.changed)] for d in diffs if d.kind != "identical"]
    lines += ["", "Rows not identical:" if changed else "Every row is identical.", ""]
    if changed:
        lines += _table(["section", "row", "class", "old", "new", "in old interval", "changed"], changed, markdown)
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """Command line: ``compare_reports.py OLD NEW [--markdown]`` (see the module's docstring).

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the earlier report's results.json (or its folder)")
    parser.add_argument("new", type=Path, help="the later report's results.json (or its folder)")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables (for docs/)")
    args = parser.parse_args(argv)
    reports = []
    for name, path in (("OLD", args.old), ("NEW", args.new)):
        try:
            reports.append(load_rows(path))
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"{name}: cannot read {path} as a report's results.json ({e})")
    sys.stdout.write(render(compare(*reports), markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
