"""Independent tasks with stored results: :mod:`.serial` runs them in this process,
:mod:`.parallel` on a process pool or a Dask cluster, behind one call, :func:`run_tasks`."""

from .serial import Task, run_tasks

__all__ = ["Task", "run_tasks"]
