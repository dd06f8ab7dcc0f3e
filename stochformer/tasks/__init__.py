"""Independent tasks with stored results: [`base`][stochformer.tasks.base] holds the [`Task`][stochformer.tasks.Task] type, the store and
the run in this process, [`parallel`][stochformer.tasks.parallel] the runs on a process pool or a Dask cluster, behind one
call, [`run_tasks`][stochformer.tasks.run_tasks]."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from .base import Task, run_in_process

__all__ = ["Task", "run_tasks"]


def run_tasks(
    tasks: Iterable[Task],
    store: Optional[Path | str] = None,
    scheduler: Optional[str] = None,
    progress: bool = False,
    desc: str = "tasks",
) -> dict[str, Any]:
    """Run ``tasks``; with ``store`` (a folder) results are saved atomically as each task finishes,
    and tasks already stored with a matching key are not run again. Returns ``{task.key: result}``.
    ``scheduler``: None or ``"serial"`` runs them in this process ([`base.run_in_process`][stochformer.tasks.base.run_in_process]); any other form
    (a process pool, a Dask cluster: [`parallel.parse_scheduler`][stochformer.tasks.parallel.parse_scheduler]) through [`parallel`][stochformer.tasks.parallel].

    Parameters
    ----------
    tasks : iterable of Task
        The tasks.
    store : str or pathlib.Path, optional
        A folder of finished tasks.
    scheduler : str, optional
        ``"serial"``, ``"processes:N"``, ``"local-cluster:N"``, a Dask address or client.
    progress : bool, optional
        Show a progress bar (on a terminal).
    desc : str, optional
        The bar's label.

    Returns
    -------
    dict
        ``{task.key: result}`` in the tasks' order.
    """
    if scheduler not in (None, "serial"):
        from .parallel import run_tasks_parallel  # process pools and Dask, same contract

        return run_tasks_parallel(list(tasks), store=store, scheduler=scheduler, progress=progress, desc=desc)
    return run_in_process(tasks, store=store, progress=progress, desc=desc)
