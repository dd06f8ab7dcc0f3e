"""The reproduction report: profiles, the section registry (one section per claim of SPEC §6),
the cached runner and the HTML page. Entry point: `reproduce`.

The names below are imported on first use, so that ``stochformer.report.profiles`` (read by the
command line's ``--help``) loads without torch; ``registered`` comes through the runner, which
imports the sections (they register themselves)."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "PROFILES": ".profiles", "plan": ".runner", "reproduce": ".runner", "Section": ".registry",
    "SectionContext": ".registry", "SectionOutput": ".registry", "SectionUnavailable": ".registry",
    "registered": ".runner", "RULES": "..verdict", "Comparison": "..verdict", "decide": "..verdict",
}

__all__ = ["PROFILES", "RULES", "Comparison", "Section", "SectionContext", "SectionOutput", "SectionUnavailable",
           "decide", "plan", "registered", "reproduce"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
