"""The section registry: one section per claim of SPEC §6, each a section of the report.

A [`Section`][stochformer.report.registry.Section] couples the claim (one sentence) with the experiment that tests it: a config
model (a pydantic class), the sizes of each profile, and a ``run`` function from the resolved config to a
[`SectionOutput`][stochformer.report.registry.SectionOutput] (every number, the predicted-vs-measured rows, the figures as PNG). Sections
never compute science themselves: they call the experiment modules' ``run_xxx`` and plotting
functions.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..measure.verdict import Comparison, recompute


class SectionUnavailable(RuntimeError):
    """The experiment behind a section cannot be run here (raised by its ``run``)."""


#: the formats a report figure can also be written in as a file (``reproduce --format``)
FIGURE_FORMATS = ("png", "pdf", "svg")
#: the resolution of the PNG embedded in the page (and of a ``--format png`` file), dots per inch
PNG_DPI = 100
#: the vector formats `figure_png` renders besides the PNG while a report asks for them
_VECTOR_FORMATS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("vector_formats", default=())


@contextlib.contextmanager
def rendering_formats(formats: tuple[str, ...]) -> Iterator[None]:
    """While the block runs, [`figure_png`][stochformer.report.registry.figure_png] also renders each
    figure in ``formats`` (``"pdf"``, ``"svg"``; ``"png"`` is always rendered).

    Parameters
    ----------
    formats : tuple of str
        Formats among `FIGURE_FORMATS`.

    Yields
    ------
    None
        The block runs with the formats set.
    """
    bad = [f for f in formats if f not in FIGURE_FORMATS]
    if bad:
        raise ValueError(f"format: unknown figure format(s) {', '.join(bad)}; valid: {', '.join(FIGURE_FORMATS)}")
    token = _VECTOR_FORMATS.set(tuple(f for f in formats if f != "png"))
    try:
        yield
    finally:
        _VECTOR_FORMATS.reset(token)


@dataclass
class Figure:
    """A figure of a section: ``png`` is the base64-encoded PNG embedded in the page; ``files``
    the same figure in further formats (format → base64 bytes), written beside the report by
    ``reproduce --format``.

    Attributes
    ----------
    name : str
        The figure's name (its file's stem).
    caption : str
        The caption.
    png : str
        The base64 PNG.
    files : dict
        Format → base64 bytes.
    """

    name: str
    caption: str
    png: str
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The figure as stored in the report's cache.

        Returns
        -------
        dict
            ``name``, ``caption``, ``png`` and ``files``.
        """
        return {"name": self.name, "caption": self.caption, "png": self.png, "files": dict(self.files)}


def figure_png(fig, name: str, caption: str, dpi: int = PNG_DPI) -> Figure:
    """Render a matplotlib figure to an embedded PNG (and to the vector formats asked for by
    [`rendering_formats`][stochformer.report.registry.rendering_formats]) and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (closed afterwards).
    name : str
        Its name.
    caption : str
        Its caption.
    dpi : int, optional
        Dots per inch of the PNG.

    Returns
    -------
    Figure
        The rendered figure.
    """
    import matplotlib.pyplot as plt

    def render(fmt: str) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")

    try:
        png = render("png")
        files = {fmt: render(fmt) for fmt in _VECTOR_FORMATS.get()}
    finally:
        plt.close(fig)
    return Figure(name, caption, png, files)


@dataclass
class SectionOutput:
    """What a section returns: ``numbers`` (the experiment's ``to_dict()``: every number it shows),
    ``comparisons`` (the predicted-vs-measured rows), ``figures``, further ``tables`` (each
    ``{"title", "columns", "rows"}``, rows as lists of cells), free-text ``notes``, the ``seeds``
    used and the run's ``provenance`` (versions, device).

    Attributes
    ----------
    numbers : dict
        Every number the section shows.
    comparisons : list of Comparison
        The predicted-vs-measured rows.
    figures : list of Figure
        The figures.
    provenance : dict
        Versions and device.
    seeds : dict
        The seeds used.
    notes : list of str
        Free-text notes.
    tables : list of dict
        Further tables.
    """

    numbers: dict
    comparisons: list[Comparison]
    figures: list[Figure]
    provenance: dict
    seeds: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The output as stored: the rows judged as one family, figures as dicts.

        Returns
        -------
        dict
            JSON-able.
        """
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
    sub-tasks, ``tasks.run_tasks(..., store=workdir)``) and the task ``scheduler`` (None: serial).

    Attributes
    ----------
    progress : bool
        Show progress bars.
    workdir : pathlib.Path or None
        The section's own folder for resumable sub-tasks.
    scheduler : str or None
        The task scheduler.
    """

    progress: bool = False
    workdir: Optional[Path] = None
    scheduler: Optional[str] = None


#: ``run(cfg, ctx) -> SectionOutput``.
RunFn = Callable[[Any, SectionContext], SectionOutput]


@dataclass(frozen=True)
class Section:
    """One section of the report.

    ``name``: the ``--only`` name; ``claim``: the claim in one sentence; ``spec``: where SPEC states
    it; ``model``: the experiment's config class; ``sizes``: profile name → config fields; ``run``: the experiment.

    Attributes
    ----------
    name : str
        The ``--only`` name.
    title : str
        The heading.
    spec : str
        Where SPEC states the claim.
    claim : str
        The claim in one sentence.
    model : type
        The experiment's config class.
    sizes : dict
        Profile name → config fields.
    run : callable
        (config, SectionContext) → SectionOutput.
    """

    name: str
    title: str
    spec: str
    claim: str
    model: type
    sizes: dict[str, dict]
    run: RunFn


_REGISTRY: dict[str, Section] = {}


def register(section: Section) -> Section:
    """Add ``section`` to the report (its name must be new).

    Parameters
    ----------
    section : Section
        The section.

    Returns
    -------
    Section
        ``section``.
    """
    if section.name in _REGISTRY:
        raise ValueError(f"section {section.name!r} registered twice")
    _REGISTRY[section.name] = section
    return section


def registered() -> list[Section]:
    """Every registered section, in the order of the report (SPEC §6; ``report.sections`` registers
    them when the package is imported, its modules in the order of the page).

    Returns
    -------
    list of Section
        The sections.
    """
    return list(_REGISTRY.values())


def get_section(name: str) -> Section:
    """The registered section named ``name`` (``KeyError`` otherwise).

    Parameters
    ----------
    name : str
        The ``--only`` name.

    Returns
    -------
    Section
        The section.
    """
    by_name = {s.name: s for s in registered()}
    if name not in by_name:
        raise KeyError(name)
    return by_name[name]
