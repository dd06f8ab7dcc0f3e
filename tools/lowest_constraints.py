#!/usr/bin/env python3
"""Print a pip constraints file pinning every direct dependency to the lowest version its range allows.

Usage: python tools/lowest_constraints.py [pyproject.toml] [EXTRA ...] > lowest.txt

Reads ``[project] dependencies`` and the named optional-dependency groups (default: every group that
``all`` and ``test`` bring, expanded through self-references such as ``stochformer[ot,cluster]``) and,
for each requirement with a lower bound (``>=X`` or ``==X``, markers honoured for the running
interpreter), writes ``name==X``. CI installs the package with ``-c`` this file in a fresh environment
and runs the fast part of the suite there, so a declared lower bound is one that was tested.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

from packaging.markers import Marker
from packaging.requirements import Requirement


def requirements(pyproject: Path, extras: list[str]) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = project.get("optional-dependencies", {})
    name = project["name"]
    seen: set[str] = set()
    out = [Requirement(r) for r in project.get("dependencies", [])]
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for spec in groups[extra]:
            req = Requirement(spec)
            if req.name == name:
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


def lowest(req: Requirement) -> str | None:
    if req.marker is not None and not Marker(str(req.marker)).evaluate():
        return None
    for spec in req.specifier:
        if spec.operator in (">=", "==", "~="):
            return f"{req.name}=={spec.version}"
    return None


def main(argv: list[str]) -> int:
    pyproject = Path(argv[1]) if len(argv) > 1 else Path("pyproject.toml")
    extras = argv[2:] or ["all", "test"]
    pins = {}
    for req in requirements(pyproject, extras):
        pin = lowest(req)
        if pin is None:
            continue
        # the first bound of a name wins; a second requirement of the same name must agree
        pins.setdefault(re.sub(r"[-_.]+", "-", req.name).lower(), pin)
    print("\n".join(sorted(pins.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
