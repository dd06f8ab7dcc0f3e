"""What the serial and the parallel runner share: the [`Task`][stochformer.tasks.base.Task] type, the store of finished
results it is keyed in, and running tasks one after another in this process against that store.

A [`Task`][stochformer.tasks.base.Task] is a picklable call ``fn(**kwargs)`` with a stable ``key``; its result must be
JSON-able. A store (a folder, a [`ResultStore`][stochformer.io.store.ResultStore]) holds each finished result
under its ``key`` and [`Task.cache_key`][stochformer.tasks.base.Task.cache_key], so an interrupted run resumes without redoing
finished tasks.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ..core.progress import tqdm

from ..io.store import ResultStore, config_key, source_hash, to_jsonable


@dataclass(frozen=True)
class Task:
    """``fn(**kwargs)``; ``key`` names it in the store; ``resources`` e.g. ``{"GPU": 1}`` for Dask.

    Attributes
    ----------
    key : str
        The task's name in the store.
    fn : callable
        A module-level function.
    kwargs : dict
        Its JSON-able keyword arguments.
    resources : dict or None
        Dask resources.
    """

    key: str
    fn: Callable[..., Any]
    kwargs: dict = field(default_factory=dict)
    resources: Optional[dict] = None

    @property
    def cache_key(self) -> str:
        """Hash of the function's qualified name and its arguments (plus the package version and
        a hash of its source, so changed code never reuses stored results). An argument that is not
        JSON-able (a model given by hand) counts by the hash of its pickle: a Dask key, never a
        stored result's (a run with such an argument takes no store)."""
        from ..core.version import __version__

        name = f"{self.fn.__module__}.{self.fn.__qualname__}"
        kwargs = {k: _keyed(v) for k, v in self.kwargs.items()}
        return config_key({"fn": name, "kwargs": kwargs, "version": __version__, "source": source_hash()})


def _keyed(value: Any) -> Any:
    """``value`` if it is JSON-able, else the hash of its pickle."""
    try:
        json.dumps(to_jsonable(value))
    except (TypeError, ValueError):
        return {"pickle_sha256": hashlib.sha256(pickle.dumps(value)).hexdigest()}
    return value


def open_store(store: Optional[Path | str]) -> Optional[ResultStore]:
    """The [`ResultStore`][stochformer.io.store.ResultStore] in the folder ``store``, or None without one.

    Parameters
    ----------
    store : str or pathlib.Path or None
        A folder.

    Returns
    -------
    ResultStore or None
        The store.
    """
    return ResultStore(store) if store is not None else None


def run_in_process(
    tasks: Iterable[Task],
    store: Optional[Path | str] = None,
    progress: bool = False,
    desc: str = "tasks",
) -> dict[str, Any]:
    """Run ``tasks`` one after another in this process; with ``store`` (a folder) each result is
    saved atomically as its task finishes, and a task already stored with a matching key is not run
    again. Returns ``{task.key: result}``.

    Parameters
    ----------
    tasks : iterable of Task
        The tasks.
    store : str or pathlib.Path, optional
        A folder of finished tasks.
    progress : bool, optional
        Show a progress bar (on a terminal).
    desc : str, optional
        The bar's label.

    Returns
    -------
    dict
        ``{task.key: result}`` in the tasks' order.
    """
    cache = open_store(store)
    results: dict[str, Any] = {}
    for task in tqdm(list(tasks), desc=desc, disable=not progress, leave=False):
        hit = cache.load(task.key, task.cache_key) if cache else None
        if hit is None:
            hit = task.fn(**task.kwargs)
            if cache:
                cache.store(task.key, task.cache_key, hit)
        results[task.key] = hit
    return results
