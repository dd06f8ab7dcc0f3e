"""``reproduce``: run the sections of the report for a profile, cache each finished section, and write
``index.html`` and ``results.json``.

The output folder (default ``report/``) holds the page, the JSON and ``cache/``: one entry per
finished section, ``<section>-<key>.json``, written atomically, where the key hashes the section name,
its resolved config and the package version (`io.ResultStore`). ``resume=True`` reuses the
entries whose key matches and whose signature verifies (an HMAC under a key kept outside the
folder) and recomputes the rest; a corrupt, truncated, edited or foreign
entry never matches and is recomputed. Sections made of many independent runs also store each run
under ``cache/<section>-<key>/`` (``tasks.run_tasks``), so a section killed half-way resumes half-way.
The page and the JSON are rewritten after every section, so a long run can be watched.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import numpy as np
import torch
import xarray as xr
from ..core.progress import tqdm

from ..core.version import __version__
from ..config import ConfigError, ExperimentConfig, RunConfig, build_config, load_toml
from ..core.extras import MissingExtraError
from ..io.store import ResultStore, atomic_write_bytes, config_key, source_hash, to_jsonable, write_json
from ..io.outputs import (Manifest, WriteError, check_output_folder, file_digest, own_folder, remove_own, remove_own_files,
                          tracking)
from ..io.names import describe
from ..io.results import DATASET, write_dataset
from ..core.runtime import provenance
from . import sections  # noqa: F401  (registers the sections)
from .profiles import DERIVED, PROFILES
from .registry import FIGURE_FORMATS, Section, SectionContext, SectionUnavailable, registered, rendering_formats
from ..measure.verdict import STORED_NUMBERS, recompute

CACHE_DIR = "cache"
#: the folder of the report's figure files (``reproduce --format``): ``figures/<section>-<figure>.<format>``
FIGURES_DIR = "figures"


@dataclass
class Planned:
    """A section with its resolved config and cache key, or the reason it cannot run.

    Attributes
    ----------
    section : Section
        The section.
    config : Any
        Its resolved config (None where it cannot run).
    key : str or None
        Its cache key.
    error : str or None
        Why it cannot run.
    selected : bool
        Whether ``--only`` selects it.
    """

    section: Section
    config: Any = None
    key: Optional[str] = None
    error: Optional[str] = None
    selected: bool = True


def _split_overrides(overrides: Iterable[str], names: set[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``SECTION.FIELD=VALUE`` → per-section lists; ``FIELD=VALUE`` → the list for every section."""
    per_section: dict[str, list[str]] = {n: [] for n in names}
    common: list[str] = []
    for item in overrides:
        head = item.split("=", 1)[0].strip().split(".", 1)
        if len(head) == 2 and head[0] in names:
            per_section[head[0]].append(item.strip().split(".", 1)[1])
        else:
            common.append(item)
    return per_section, common


def _field(item: str) -> str:
    return item.split("=", 1)[0].strip().split(".")[0]


def _fields(model: type) -> set[str]:
    """The fields a section's config takes by name: its own and, for an experiment's config, those
    of its ``model`` (sizes and ``FIELD=VALUE`` name them without the ``model.`` prefix)."""
    own = set(getattr(model, "model_fields", {}))
    return own | set(RunConfig.model_fields) if issubclass(model, ExperimentConfig) else own


def _path(model: type, name: str) -> str:
    """``name`` (or ``name=VALUE``) as a dotted path of ``model``: a model field of an experiment's
    config goes under ``model.``."""
    top = _field(name)
    if issubclass(model, ExperimentConfig) and top not in model.model_fields and top in RunConfig.model_fields:
        return f"model.{name}"
    return name


def _nested(model: type, data: dict) -> dict:
    """``data`` (field → value, model fields flat) with each field at its path in ``model``."""
    out: dict = {}
    for name, value in data.items():
        *parents, last = _path(model, name).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = {**node[last], **value} if isinstance(value, dict) and isinstance(node.get(last), dict) else value
    return out


def plan(
    profile: str = "quick",
    only: Iterable[str] = (),
    overrides: Iterable[str] = (),
    config_file: Optional[Path | str] = None,
) -> list[Planned]:
    """Resolve and validate every section's config for ``profile`` before any work.

    ``overrides``: ``SECTION.FIELD=VALUE`` for one section, ``FIELD=VALUE`` for every section that has the
    field (e.g. ``seed=1``, ``device=cuda``). ``config_file``: TOML whose ``[SECTION]`` tables apply to
    one section and whose top-level keys apply like ``FIELD=VALUE``. Raises [`ConfigError`][stochformer.config.ConfigError].

    Parameters
    ----------
    profile : str, optional
        ``tiny``, ``quick``, ``full`` or ``gpu``.
    only : iterable of str, optional
        Sections to run (default: all).
    overrides : iterable of str, optional
        ``SECTION.FIELD=VALUE`` or ``FIELD=VALUE``.
    config_file : str or pathlib.Path, optional
        A TOML file.

    Returns
    -------
    list of Planned
        Every section, in the report's order.
    """
    if profile not in PROFILES:
        raise ConfigError(f"--profile: unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    all_sections = registered()
    names = {s.name for s in all_sections}
    only = list(only)
    bad = [n for n in only if n not in names]
    if bad:
        raise ConfigError(f"--only: unknown section(s) {', '.join(bad)}; valid: {', '.join(s.name for s in all_sections)}")
    file_data = load_toml(config_file) if config_file is not None else {}
    per_section, common = _split_overrides(overrides, names)
    planned: list[Planned] = []
    used: set[str] = set()
    for section in all_sections:
        item = Planned(section, selected=not only or section.name in only)
        model = section.model
        fields = _fields(model)
        sized, extra = DERIVED.get(profile, (profile, {}))
        base = dict(section.sizes.get(sized, {}))
        base.update({k: v for k, v in extra.items() if k in fields})
        base.update({k: v for k, v in file_data.items() if k in fields and k not in names})
        used.update(k for k in file_data if k in fields)
        base.update(file_data.get(section.name, {}))
        mine = [_path(model, o.strip()) for o in [o for o in common if _field(o) in fields] + per_section[section.name]]
        used.update(_field(o) for o in common if _field(o) in fields)
        try:
            item.config = build_config(_nested(model, base), mine, model=model)
        except ConfigError as exc:
            raise ConfigError(f"section {section.name}: {exc}") from None
        item.key = config_key({"section": section.name, "config": item.config.model_dump(mode="json"), "version": __version__,
                               "source": source_hash()})
        planned.append(item)
    unused = sorted({_field(o) for o in common} - used) + sorted(k for k in file_data if k not in names and k not in used)
    if unused:
        raise ConfigError(f"--set/--config: no section has a field named {', '.join(unused)}")
    for item in planned:
        device = getattr(getattr(item.config, "model", item.config), "device", "cpu") if item.config is not None else "cpu"
        if item.selected and str(device).startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"section {item.section.name}: device {device!r} requested but no CUDA device is available "
                              "(use --profile quick/full, or --set device=cpu)")
    return planned


def check_report_folder(out: Path | str, force: bool = False) -> Path:
    """``out`` as a Path, checked before any work (`check_output_folder`):
    a new or empty folder, or (with or without ``force``) a report folder that is wholly
    ``reproduce``'s own unchanged output; anything else (a file stochformer did not write, a file
    changed since, another command's folder) is refused, naming it.

    Parameters
    ----------
    out : str or pathlib.Path
        The report folder.
    force : bool, optional
        Replace the report's own output.

    Returns
    -------
    pathlib.Path
        ``out``.
    """
    return check_output_folder(out, force, command="reproduce", replace=True)


def nonfinite_paths(obj: Any, path: str = "") -> list[str]:
    """Where ``obj`` holds a NaN or an infinity (JSON paths), e.g. ``numbers.slope``.

    Parameters
    ----------
    obj : Any
        Nested dicts, lists and numbers.
    path : str, optional
        The prefix of the paths.

    Returns
    -------
    list of str
        The paths.
    """
    if isinstance(obj, float) or hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0:
        try:
            return [] if math.isfinite(float(obj)) else [path or "."]
        except (TypeError, ValueError):
            return []
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in nonfinite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in nonfinite_paths(v, f"{path}[{i}]")]
    if hasattr(obj, "tolist"):
        return nonfinite_paths(obj.tolist(), path)
    return []


def _record(item: Planned, profile: str) -> dict:
    s = item.section
    return {"name": s.name, "title": s.title, "spec": s.spec, "claim": s.claim, "profile": profile,
            "key": item.key, "config": item.config.model_dump(mode="json") if item.config is not None else None}


#: what a cached section record must hold, by type (anything else makes the entry count as corrupt)
_CACHED_TYPES: dict[str, Union[type, tuple[type, ...]]] = {"numbers": dict, "comparisons": list, "figures": list, "tables": list, "notes": list,
                 "seeds": dict, "provenance": dict, "elapsed_s": (int, float), "started_at": str}


def _from_cache(hit: Any, record: dict) -> Optional[dict]:
    """A cached section record made safe to show, or None if it is not one: the section's identity
    (name, title, claim, config, key) comes from the plan, not the cache; each field must have
    its type; verdicts are derived again from the stored numbers (never read from the cache)."""
    if not isinstance(hit, dict) or any(not isinstance(hit.get(k), t) for k, t in _CACHED_TYPES.items()):
        return None
    figures_ok = all(isinstance(f, dict) and all(isinstance(f.get(k), str) for k in ("name", "caption", "png"))
                     and isinstance(f.get("files", {}), dict)
                     and all(isinstance(k, str) and isinstance(v, str) for k, v in f.get("files", {}).items())
                     for f in hit["figures"])
    tables_ok = all(isinstance(t, dict) and isinstance(t.get("columns"), list) and isinstance(t.get("rows"), list)
                    and all(isinstance(r, list) for r in t["rows"]) for t in hit["tables"])
    if not (figures_ok and tables_ok):
        return None
    return {**hit, **record, "comparisons": recompute(hit["comparisons"]), "notes": [str(n) for n in hit["notes"]]}


def run_section(item: Planned, profile: str, cache: ResultStore, ctx: SectionContext) -> dict:
    """Run one section, store it in the cache and return its record (status ``computed``).

    Parameters
    ----------
    item : Planned
        The section and its config.
    profile : str
        The profile.
    cache : ResultStore
        The report's cache.
    ctx : SectionContext
        How it runs.

    Returns
    -------
    dict
        The section record.
    """
    started = time.time()
    t0 = time.perf_counter()
    output = item.section.run(item.config, ctx)
    elapsed = time.perf_counter() - t0
    data = output.to_dict()
    bad = nonfinite_paths(data["numbers"])
    if bad:
        data["notes"].append(f"{len(bad)} non-finite value(s) written as null: {', '.join(bad[:8])}"
                             + (" …" if len(bad) > 8 else ""))
    record = {**_record(item, profile), **to_jsonable(data), "elapsed_s": elapsed,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}
    assert item.key is not None, "plan: every section without an error has its cache key"
    cache.store(item.section.name, item.key, record)
    return record


def _strip_figures(record: dict) -> dict:
    """The JSON copy of a record: figures by name and caption (the PNGs live in the page)."""
    out = dict(record)
    if "figures" in out:
        out["figures"] = [{"name": f["name"], "caption": f["caption"], **({"file": f["file"]} if "file" in f else {})}
                          for f in out["figures"]]
    return out


def figure_file_name(section: str, figure: str, fmt: str) -> str:
    """``<section>-<figure>.<fmt>``, every character but letters, digits, ``-`` and ``_`` written ``_``.

    Parameters
    ----------
    section : str
        The section's name.
    figure : str
        The figure's name.
    fmt : str
        The format.

    Returns
    -------
    str
        The file name.
    """
    def clean(text: str) -> str:
        return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in text) or "_"
    return f"{clean(section)}-{clean(figure)}.{fmt}"


def _figure_bytes(fig: dict, fmt: str) -> Optional[bytes]:
    """The bytes of ``fig`` in ``fmt``: the checked, re-encoded PNG for png, the stored file otherwise."""
    from .render import safe_png

    data = safe_png(fig.get("png")) if fmt == "png" else fig.get("files", {}).get(fmt)
    if data is None:
        return None
    import base64
    import binascii

    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def write_figure_files(out: Path, records: list[dict], fmt: str, manifest: Manifest) -> None:
    """Write every figure of the finished sections to ``out/figures/<section>-<figure>.<fmt>``
    ([`figure_file_name`][stochformer.report.runner.figure_file_name]; a repeated name gets ``-2``, ...)
    and note its path in the figure's record (``file``); a figure missing in ``fmt`` (a section
    cached before without it) gets a note instead. A file already there is replaced only if this
    report wrote it and it is unchanged since (listed in ``manifest`` with its size and hash);
    anything else raises `stochformer.io.outputs.WriteError` naming it and is left alone.

    Parameters
    ----------
    out : pathlib.Path
        The report folder.
    records : list of dict
        The section records (``file`` is set on each figure written).
    fmt : str
        ``png``, ``pdf`` or ``svg``.
    manifest : Manifest
        The folder's manifest (each file written is listed).
    """
    used: set[str] = set()
    for rec in records:
        if rec.get("status") not in ("computed", "cached"):
            continue
        for fig in rec.get("figures", []):
            name = figure_file_name(rec["name"], str(fig.get("name")), fmt)
            stem, k = name[: -len(fmt) - 1], 2
            while name in used:
                name, k = f"{stem}-{k}.{fmt}", k + 1
            used.add(name)
            data = _figure_bytes(fig, fmt)
            if data is None:
                note = (f"figure {fig.get('name')} has no {fmt} file (cached without it: rerun the section "
                        f"without --resume to write it)")
                if note not in rec.setdefault("notes", []):
                    rec["notes"].append(note)
                continue
            rel = f"{FIGURES_DIR}/{name}"
            path = out / rel
            if path.is_symlink() or (path.exists() and (not path.is_file() or file_digest(path) not in manifest.files.get(rel, set()))):
                raise WriteError(f"--format: {path} exists and was not written by this report (or changed since); "
                                 "it is left alone")
            if not (path.is_file() and file_digest(path) == (len(data), hashlib.sha256(data).hexdigest())):
                atomic_write_bytes(path, data)
            fig["file"] = rel


#: the numeric columns of a comparison row in the report's dataset (None is NaN there)
_ROW_NUMBERS = STORED_NUMBERS


def report_dataset(report: dict) -> xr.Dataset:
    """The report as a labelled dataset (``dataset.nc``; ``stochformer.load(out)`` reads it): one
    entry per comparison row (dim ``row``: its ``row_section``, ``quantity``, ``predicted``,
    ``measured``, 95% interval ``ci_low``/``ci_high`` (``has_ci``), ``rule``, ``tol``, ``note`` and
    ``verdict``), the ``status`` of every section (dim ``section``); the rest of every section's
    record (numbers, tables, notes, seeds, provenance; figures by name) and the report's header as
    JSON attributes. ``results.json`` is derived from it ([`report_json`][stochformer.report.runner.report_json]).

    Parameters
    ----------
    report : dict
        The report.

    Returns
    -------
    xarray.Dataset
        The labelled report.
    """
    records = [_strip_figures(r) for r in report["sections"]]
    rows = [(r["name"], c) for r in records for c in r.get("comparisons", [])]
    cis = [c.get("ci") for _, c in rows]
    data: dict[str, Any] = {
        "status": ("section", np.array([str(r.get("status", "")) for r in records], dtype=str)),
        "row_section": ("row", np.array([name for name, _ in rows], dtype=str)),
        "ci_low": ("row", np.array([math.nan if ci is None or ci[0] is None else ci[0] for ci in cis], dtype=float)),
        "ci_high": ("row", np.array([math.nan if ci is None or ci[1] is None else ci[1] for ci in cis], dtype=float)),
        "has_ci": ("row", np.array([ci is not None for ci in cis], dtype=bool)),
    }
    for key in _ROW_NUMBERS:
        data[key] = ("row", np.array([math.nan if c.get(key) is None else c[key] for _, c in rows], dtype=float))
    for key in ("quantity", "rule", "note", "verdict"):
        data[key] = ("row", np.array([str(c[key]) for _, c in rows], dtype=str))
    header = {k: ([] if k == "sections" else v) for k, v in report.items()}
    ds = xr.Dataset(data, coords={"section": np.array([r["name"] for r in records], dtype=str)})
    ds.attrs.update(command="reproduce", report=json.dumps(to_jsonable(header)),
                    records=json.dumps(to_jsonable([{**r, "comparisons": []} if "comparisons" in r else r for r in records])))
    return describe(ds, REPORT_NAMES)


#: the report dataset's own names ([`describe`][stochformer.io.names.describe]; labels carry units "1" too)
REPORT_NAMES: dict[str, dict[str, str]] = {
    "section": {"long_name": "section of the report", "units": "1"},
    "row": {"long_name": "comparison row", "units": "1"},
    "status": {"long_name": "status of the section", "units": "1"},
    "row_section": {"long_name": "section of the comparison row", "units": "1"},
    "ci_low": {"long_name": "lower end of the measured value's 95% interval", "units": "those of the row's quantity"},
    "ci_high": {"long_name": "upper end of the measured value's 95% interval", "units": "those of the row's quantity"},
    "has_ci": {"long_name": "whether the row has a 95% interval", "units": "1"},
    "predicted": {"long_name": "predicted value", "units": "those of the row's quantity"},
    "measured": {"long_name": "measured value", "units": "those of the row's quantity"},
    "tol": {"long_name": "tolerance of the verdict rule", "units": "those of the row's quantity"},
    "alternative": {"long_name": "the alternative the rule tells apart from the prediction", "units": "those of the row's quantity"},
    "reach": {"long_name": "the largest value the observable can show (bound rows)", "units": "those of the row's quantity"},
    "n": {"long_name": "samples behind the standard error (Student's t)", "units": "1"},
    "quantity": {"long_name": "quantity compared", "units": "1"},
    "rule": {"long_name": "verdict rule", "units": "1"},
    "note": {"long_name": "note", "units": "1"},
    "verdict": {"long_name": "verdict", "units": "1"},
}


def report_json(ds: xr.Dataset) -> dict:
    """``results.json`` from the report's dataset: the header and the section records of its
    attributes, each section's comparison rows from the labelled table (verdicts derived again
    from the rows' numbers).

    Parameters
    ----------
    ds : xarray.Dataset
        The report's dataset.

    Returns
    -------
    dict
        The report.
    """
    def number(x: float) -> Optional[float]:
        return None if math.isnan(x) else float(x)

    by_section: dict[str, list] = {}
    for k in range(ds.sizes["row"]):
        row = {key: ds[key].values[k] for key in ds.data_vars if "row" in ds[key].dims}
        ci = (number(row["ci_low"]), number(row["ci_high"])) if row["has_ci"] else None
        stored = {key: number(row[key]) for key in _ROW_NUMBERS if key in row}
        n = stored.get("n")
        if n is not None:
            stored["n"] = int(n)
        by_section.setdefault(str(row["row_section"]), []).append(
            {**stored, "quantity": str(row["quantity"]), "ci": ci, "rule": str(row["rule"]), "tol": stored.get("tol") or 0.0,
             "note": str(row["note"])})
    records = json.loads(ds.attrs["records"])
    for rec in records:
        if "comparisons" in rec:
            rec["comparisons"] = recompute(by_section.get(rec["name"], []))  # one family per section
    return {**json.loads(ds.attrs["report"]), "sections": records}


def _write_outputs(out: Path, report: dict, fmt: Optional[str] = None, manifest: Optional[Manifest] = None) -> None:
    from .render import render_html

    if fmt is not None and manifest is not None:
        write_figure_files(out, report["sections"], fmt, manifest)
    ds = report_dataset(report)
    write_dataset(ds, out / DATASET)
    write_json(out / "results.json", report_json(ds))
    atomic_write_bytes(out / "index.html", render_html(report).encode("utf-8"))


def reproduce(
    profile: str = "quick",
    out: Path | str = "report",
    only: Iterable[str] = (),
    resume: bool = False,
    overrides: Iterable[str] = (),
    config_file: Optional[Path | str] = None,
    scheduler: Optional[str] = None,
    force: bool = False,
    progress: bool = False,
    command: str = "",
    fmt: Optional[str] = None,
) -> dict:
    """Run the report's sections for ``profile`` into ``out`` and return the report (also written
    as ``out/results.json`` and ``out/index.html``).

    Sections not selected by ``only`` are shown from the cache when they were computed before with
    the same config, version and source. ``force`` replaces an existing report folder. ``fmt``
    (``png``, ``pdf`` or ``svg``; None: none) also writes every figure as a file,
    ``out/figures/<section>-<figure>.<fmt>`` ([`write_figure_files`][stochformer.report.runner.write_figure_files]);
    the page embeds the PNG either way; a section cached without a figure in ``fmt`` is recomputed. Raises
    [`ConfigError`][stochformer.config.ConfigError] / [`OutputError`][stochformer.io.outputs.OutputError] before any work.

    Parameters
    ----------
    profile : str, optional
        ``tiny``, ``quick``, ``full`` or ``gpu``.
    out : str or pathlib.Path, optional
        The report folder.
    only : iterable of str, optional
        Sections to run (the others come from the cache where they can).
    resume : bool, optional
        Reuse finished sub-tasks of an interrupted run.
    overrides : iterable of str, optional
        ``SECTION.FIELD=VALUE`` or ``FIELD=VALUE``.
    config_file : str or pathlib.Path, optional
        A TOML file of overrides.
    scheduler : str, optional
        Where the sections' tasks run.
    force : bool, optional
        Replace an existing report folder of ``reproduce``'s own.
    progress : bool, optional
        Show progress bars.
    command : str, optional
        The command line, recorded in the page.
    fmt : {"png", "pdf", "svg"}, optional
        Also write every figure as a file.

    Returns
    -------
    dict
        The report (header and section records).
    """
    if fmt is not None and fmt not in FIGURE_FORMATS:
        raise ConfigError(f"--format: unknown figure format {fmt!r}; valid: {', '.join(FIGURE_FORMATS)}")
    planned = plan(profile, only, overrides, config_file)
    out = check_report_folder(out, force)
    if force:
        remove_own(out, "reproduce")
    manifest = own_folder(out, "reproduce")
    with tracking(manifest), rendering_formats(() if fmt is None else (fmt,)):
        return _reproduce(planned, profile, out, manifest, resume, scheduler, progress, command, fmt)


def _has_format(hit: dict, fmt: Optional[str]) -> bool:
    """Whether every figure of a cached record can be written in ``fmt`` (png always can)."""
    return fmt in (None, "png") or all(fmt in f.get("files", {}) for f in hit["figures"])


def _reproduce(planned: list[Planned], profile: str, out: Path, manifest: Any, resume: bool, scheduler: Optional[str],
               progress: bool, command: str, fmt: Optional[str] = None) -> dict:
    cache = ResultStore(out / CACHE_DIR)
    t0 = time.perf_counter()
    records: list[dict] = []
    for item in planned:
        rec = _record(item, profile)
        if item.error is not None:
            rec.update(status="unavailable", error=item.error)
        else:
            assert item.key is not None, "plan: every section without an error has its cache key"
            hit = _from_cache(cache.load(item.section.name, item.key), rec)
            if hit is not None and item.selected and not _has_format(hit, fmt):
                hit = None  # cached without this figure format: recomputed, not a corrupt entry
                rec["cache_note"] = f"the cached section had no {fmt} figures and is recomputed"
            if hit is not None and (resume or not item.selected):
                rec = {**hit, "status": "cached"}
            elif item.selected:
                rec["status"] = "pending"
                if hit is None and "cache_note" not in rec and cache.entry_path(item.section.name, item.key).exists():
                    rec["cache_note"] = "a cache entry for this section was corrupt or foreign and is recomputed"
            else:
                rec["status"] = "not_run"
        records.append(rec)

    report = {
        "title": "stochformer: reproduction report",
        "profile": profile,
        "profile_description": PROFILES[profile],
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "version": __version__,
        "provenance": provenance("cpu"),
        "sections": records,
        "elapsed_s": 0.0,
        "complete": False,
    }
    todo = [i for i, r in enumerate(records) if r["status"] == "pending"]
    bar = tqdm(total=len(todo), desc=f"reproduce ({profile})", unit="section", disable=not progress, position=0)
    try:
        for n, i in enumerate(todo, 1):
            item = planned[i]
            bar.set_postfix_str(item.section.name)
            workdir = out / CACHE_DIR / f"{item.section.name}-{item.key}"
            if not resume:
                remove_own_files(manifest, workdir.relative_to(out).as_posix())
            ctx = SectionContext(progress=progress, workdir=workdir, scheduler=scheduler)
            note = records[i].get("cache_note")
            try:
                rec = run_section(item, profile, cache, ctx)
                rec["status"] = "computed"
            except (SectionUnavailable, MissingExtraError) as exc:
                rec = {**records[i], "status": "unavailable", "error": str(exc)}
            except (KeyboardInterrupt, SystemExit, WriteError):
                raise
            except Exception as exc:  # a broken experiment fails its own section, not the report
                rec = {**records[i], "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=-12)}
            if note:
                rec["cache_note"] = note
            records[i] = rec
            if progress:
                took = f"{rec['elapsed_s']:.1f} s" if "elapsed_s" in rec else rec.get("error", "")
                tqdm.write(f"[{n}/{len(todo)}] {item.section.name}: {rec['status']} ({took})", file=sys.stderr)
            bar.update(1)
            report["elapsed_s"] = time.perf_counter() - t0
            _write_outputs(out, report, fmt, manifest)
    finally:
        bar.close()
    report["elapsed_s"] = time.perf_counter() - t0
    report["complete"] = all(r["status"] in ("computed", "cached") for r in records)
    _write_outputs(out, report, fmt, manifest)
    return report
