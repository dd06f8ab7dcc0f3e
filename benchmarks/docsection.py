"""Replace (or append) one ``## Section`` of a markdown file atomically."""

from __future__ import annotations

import re
from pathlib import Path

from stochformer.io.store import atomic_write_bytes


def write_section(doc: Path, section: str, text: str, title: str = "# Benchmarks") -> None:
    """Put ``text`` (which starts with the ``section`` heading) in place of that section of ``doc``."""
    old = doc.read_text() if doc.exists() else title + "\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(lambda _: text.rstrip("\n") + "\n\n", old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    atomic_write_bytes(doc, new.rstrip("\n").encode() + b"\n")


def publish(doc: Path, section: str, text: str, write: bool = True) -> None:
    """Print ``text`` and, if ``write``, put it in place of ``section`` of ``doc``."""
    print(text)
    if write:
        write_section(doc, section, text)
