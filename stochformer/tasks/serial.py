"""Running many independent tasks (grid points, parts of Monte Carlo samples, report sections) with results
stored as they complete, so an interrupted run resumes without redoing finished tasks.

A :class:`Task` is a picklable call ``fn(**kwargs)`` with a stable ``key``; its result must be
JSON-able. :func:`run_tasks` runs the tasks not already in the store and returns every result by key.
This module runs them serially; the sweep module adds process pools and Dask clusters behind the
same call (``scheduler=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from tqdm.auto import tqdm

from ..io import ResultStore, config_key, source_hash


@dataclass(frozen=True)
class Task:
    """``fn(**kwargs)``; ``key`` names it in the store; ``resources`` e.g. ``{"GPU": 1}`` for Dask."""

    key: str
    fn: Callable[..., Any]
    kwargs: dict = field(default_factory=dict)
    resources: Optional[dict] = None

    @property
    def cache_key(self) -> str:
        """Hash of the function's qualified name and its arguments (plus the package version and
        a hash of its source, so changed code never reuses stored results)."""
        from .. import __version__

        name = f"{self.fn.__module__}.{self.fn.__qualname__}"
        return config_key({"fn": name, "kwargs": self.kwargs, "version": __version__, "source": source_hash()})


def run_tasks(
    tasks: Iterable[Task],
    store: Optional[Path | str] = None,
    scheduler: Optional[str] = None,
    progress: bool = False,
    desc: str = "tasks",
) -> dict[str, Any]:
    """Run ``tasks``; with ``store`` (a folder) results are saved atomically as each task finishes,
    and tasks already stored with a matching key are not run again. Returns ``{task.key: result}``."""
    if scheduler not in (None, "serial"):
        from .parallel import run_tasks_parallel  # process pools and Dask, same contract

        return run_tasks_parallel(list(tasks), store=store, scheduler=scheduler, progress=progress, desc=desc)
    cache = ResultStore(store) if store is not None else None
    results: dict[str, Any] = {}
    for task in tqdm(list(tasks), desc=desc, disable=not progress, leave=False):
        hit = cache.load(task.key, task.cache_key) if cache else None
        if hit is None:
            hit = task.fn(**task.kwargs)
            if cache:
                cache.store(task.key, task.cache_key, hit)
        results[task.key] = hit
    return results
