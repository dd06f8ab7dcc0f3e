"""Running many independent tasks (grid points, parts of Monte Carlo samples, report sections) with results
stored as they complete, so an interrupted run resumes without redoing finished tasks: the serial
scheduler, every task in this process, one after another.

A :class:`~stochformer.tasks.base.Task` is a picklable call ``fn(**kwargs)`` with a stable ``key``;
its result must be JSON-able. :func:`run_tasks_serial` runs the tasks not already in the store and
returns every result by key. :mod:`.parallel` runs them on process pools and Dask clusters under the
same contract; :func:`stochformer.tasks.run_tasks` chooses between the two (``scheduler=``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from .base import Task, run_in_process


def run_tasks_serial(
    tasks: Iterable[Task],
    store: Optional[Path | str] = None,
    progress: bool = False,
    desc: str = "tasks",
) -> dict[str, Any]:
    """Run ``tasks`` in this process, one after another; with ``store`` (a folder) results are saved
    atomically as each task finishes, and tasks already stored with a matching key are not run
    again. Returns ``{task.key: result}``."""
    return run_in_process(tasks, store=store, progress=progress, desc=desc)
