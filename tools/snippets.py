#!/usr/bin/env python3
"""The fenced code blocks of README.md and docs/*.md, and a way to run them.

Every ``bash`` or ``python`` block of a user-facing page says, on the line just above its fence,
whether it runs:

- ``<!-- runnable -->``: run as written;
- ``<!-- runnable CMD="ARGS" ... -->``: run with ``ARGS`` appended to every ``stochformer CMD`` line
  (``*`` for every command): the same commands at small sizes, e.g.
  ``<!-- runnable *="--set L=8" reproduce="--profile tiny" -->``;
- ``<!-- not runnable: REASON -->``: shown only (a signature, a cluster address, an hour-long run).

Python blocks of one page run in order in one namespace (a later block may use an earlier one's
names), in a scratch folder holding a copy of ``examples/``. ``tests/test_docs_snippets.py`` runs
them all; CI also runs one against the installed wheel:

    python tools/snippets.py docs/api.md 1     # run the page's first python block
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_LANGS = ("bash", "python")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*(runnable|not runnable)\s*(:?)\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    """One fenced block: its page, first line, language, text and run marker."""

    page: Path
    line: int
    lang: str
    code: str
    marker: str | None  # "runnable", "not runnable" or None (unmarked)
    reason: str = ""
    args: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with the marker of the line above each."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        marker = reason = None
        args: dict[str, str] = {}
        if mark:
            marker = mark.group(1)
            if marker == "not runnable":
                reason = mark.group(3)
            else:
                for item in shlex.split(mark.group(3)):
                    name, _, value = item.partition("=")
                    args[name] = value
        out.append(Block(page, text[: m.start()].count("\n") + 2, m.group(1), m.group(2), marker, reason or "", args))
    return out


def shell_lines(block: Block) -> list[str]:
    """The block's commands, continuation lines joined, with the marker's arguments appended."""
    joined = re.sub(r"[ \t]*\\\n\s*", " ", block.code)
    lines = []
    for line in joined.splitlines():
        command, hash_, comment = line.partition("  #")
        words = command.split()
        if words[:1] == ["stochformer"] and len(words) > 1:
            extra = " ".join(v for k, v in block.args.items() if k in ("*", words[1]))
            command = f"{command.rstrip()} {extra}".rstrip()
        if command.strip():
            lines.append(command.rstrip())
    return lines


def python_source(page: Path, upto: int | None = None) -> str:
    """The page's runnable python blocks (the first ``upto`` of them), in order, as one program."""
    code = [b.code for b in blocks(page) if b.lang == "python" and b.marker == "runnable"]
    return "\n".join(code[:upto] if upto else code)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    source = python_source(Path(argv[1]).resolve(), int(argv[2]) if len(argv) == 3 else None)
    if not source:
        print(f"{argv[1]}: no runnable python block", file=sys.stderr)
        return 1
    exec(compile(source, argv[1], "exec"), {"__name__": "__main__"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
