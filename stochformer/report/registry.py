"""The section registry: one section per claim of SPEC §6, each a section of the report.

A [`Section`][stochformer.report.registry.Section] couples the claim (one sentence) with the experiment that tests it: a config
model (a pydantic class), the sizes of each profile, and a ``run`` function from the resolved config to a
[`SectionOutput`][stochformer.report.registry.SectionOutput] (every number, the predicted-vs-measured rows, the figures as PNG). Sections
never compute science themselves: they call the experiment modules' ``run_xxx`` and plotting
functions.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..measure.verdict import Comparison, recompute


class SectionUnavailable(RuntimeError):
    """The experiment behind a section cannot be run here (raised by its ``run``)."""


@dataclass
class Figure:
    """A figure of a section: ``png`` is the base64-encoded PNG embedded in the page."""

    name: str
    caption: str
    png: str

    def to_dict(self) -> dict:
        return {"name": self.name, "caption": self.caption, "png": self.png}


def figure_png(fig, name: str, caption: str, dpi: int = 100) -> Figure:
    """Render a matplotlib figure to an embedded PNG and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Figure(name, caption, base64.b64encode(buf.getvalue()).decode("ascii"))


@dataclass
class SectionOutput:
    """What a section returns: ``numbers`` (the experiment's ``to_dict()``: every number it shows),
    ``comparisons`` (the predicted-vs-measured rows), ``figures``, further ``tables`` (each
    ``{"title", "columns", "rows"}``, rows as lists of cells), free-text ``notes``, the ``seeds``
    used and the run's ``provenance`` (versions, device)."""

    numbers: dict
    comparisons: list[Comparison]
    figures: list[Figure]
    provenance: dict
    seeds: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "numbers": self.numbers,
            "comparisons": recompute([c.to_dict() for c in self.comparisons]),  # judged as one family
            "figures": [f.to_dict() for f in self.figures],
            "tables": list(self.tables),
            "provenance": self.provenance,
            "seeds": self.seeds,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class SectionContext:
    """How a section runs: ``progress`` bars, ``workdir`` (the section's own folder for resumable
    sub-tasks, ``tasks.run_tasks(..., store=workdir)``) and the task ``scheduler`` (None: serial)."""

    progress: bool = False
    workdir: Optional[Path] = None
    scheduler: Optional[str] = None


#: ``run(cfg, ctx) -> SectionOutput``.
RunFn = Callable[[Any, SectionContext], SectionOutput]


@dataclass(frozen=True)
class Section:
    """One section of the report.

    ``name``: the ``--only`` name; ``claim``: the claim in one sentence; ``spec``: where SPEC states
    it; ``model``: the experiment's config class; ``sizes``: profile name → config fields; ``run``: the experiment."""

    name: str
    title: str
    spec: str
    claim: str
    model: type
    sizes: dict[str, dict]
    run: RunFn


_REGISTRY: dict[str, Section] = {}


def register(section: Section) -> Section:
    if section.name in _REGISTRY:
        raise ValueError(f"section {section.name!r} registered twice")
    _REGISTRY[section.name] = section
    return section


def registered() -> list[Section]:
    """Every registered section, in the order of the report (SPEC §6; ``report.sections`` registers
    them when the package is imported, its modules in the order of the page)."""
    return list(_REGISTRY.values())


def get_section(name: str) -> Section:
    by_name = {s.name: s for s in registered()}
    if name not in by_name:
        raise KeyError(name)
    return by_name[name]
