"""Running independent tasks in parallel: a local process pool or a Dask cluster, behind the same
contract as [`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks] (results by key, each stored atomically as it
finishes, stored tasks skipped on a rerun).

Results are stored by the *client* as futures complete, never by the workers, so the store only
ever holds finished results: a killed sweep loses at most the tasks that were running; a lost Dask
worker's tasks are rescheduled by the scheduler (up to ``distributed.scheduler.allowed-failures``
times); a killed client is resumed by running the same tasks against the same store.

Schedulers (the ``scheduler`` argument):

- ``"serial"``: this process, one task after another (same as ``scheduler=None``);
- ``"processes"`` or ``"processes:N"``: a local pool of N worker processes (default: CPU count);
- ``"local-cluster:N"``: a ``dask.distributed.LocalCluster`` of N single-threaded worker processes,
  started for this call and closed after it;
- a Dask scheduler address (``tcp://host:8786``, ``tls://...``, ``host:port``), or an existing
  ``distributed.Client``. Tasks with ``resources`` (e.g. ``{"GPU": 1}``) run only on workers
  started with them (``dask worker ADDRESS --resources GPU=1``); a local process pool ignores
  ``resources`` (its processes share this machine's devices).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import gc
import multiprocessing
import os
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Optional

from ..core.progress import tqdm

from ..core.extras import require
from .base import Task, open_store, run_in_process

SCHEDULER_FORMS = "'serial', 'processes', 'processes:N', 'local-cluster:N' or a Dask scheduler address (tcp://HOST:PORT)"


def _call(fn: Callable[..., Any], kwargs: dict) -> Any:
    """Run one task on a worker (a wrapper, so task kwargs never clash with ``submit``'s own)."""
    return fn(**kwargs)


def _count(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"scheduler: {what} needs a worker count >= 1 (got {text!r}); valid forms are {SCHEDULER_FORMS}")
    return n


def parse_scheduler(scheduler: Any) -> tuple[str, Any]:
    """``(kind, argument)``: ``("serial", None)``, ``("processes", N)``, ``("local-cluster", N)``,
    ``("address", ADDRESS)`` or ``("client", CLIENT)``; ``ValueError`` naming the valid forms, and
    [`MissingExtraError`][stochformer.core.extras.MissingExtraError] for a Dask form without Dask installed.

    Parameters
    ----------
    scheduler : str, int or dask.distributed.Client
        The scheduler's form.

    Returns
    -------
    tuple
        (kind, argument).
    """
    if scheduler is None or scheduler == "serial":
        return "serial", None
    if not isinstance(scheduler, str):
        from distributed import Client

        if isinstance(scheduler, Client):
            return "client", scheduler
        raise ValueError(f"scheduler: expected {SCHEDULER_FORMS} or a distributed.Client, got {scheduler!r}")
    name, _, arg = scheduler.partition(":")
    if name == "processes":
        return "processes", _count(arg, "processes") if arg else (os.cpu_count() or 1)
    if name == "local-cluster":
        n = _count(arg, "local-cluster") if arg else (os.cpu_count() or 1)
        require("distributed", f"scheduler {scheduler!r} (a local Dask cluster)")
        return "local-cluster", n
    if "://" in scheduler or (arg and arg.isdigit()):
        require("distributed", f"scheduler {scheduler!r} (a Dask scheduler address)")
        return "address", scheduler
    raise ValueError(f"scheduler: unknown scheduler {scheduler!r}; valid forms are {SCHEDULER_FORMS}")


def _with_key(exc: BaseException, key: str) -> BaseException:
    if hasattr(exc, "add_note"):
        exc.add_note(f"(in task {key!r})")
    return exc


class _Runner:
    """What a scheduler must offer: ``submit(task) -> future``, ``as_completed(futures)``,
    ``result(future)`` and ``cancel(futures)``."""

    def submit(self, task: Task) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def as_completed(self, futures: list) -> Iterator[Any]:  # pragma: no cover - interface
        raise NotImplementedError

    def result(self, future: Any) -> Any:
        return future.result()

    def cancel(self, futures: list) -> None:
        for f in futures:
            f.cancel()


class _PoolRunner(_Runner):
    def __init__(self, pool: cf.ProcessPoolExecutor):
        self.pool = pool

    def submit(self, task: Task) -> cf.Future:
        # ``resources`` are ignored: every process of a local pool shares this machine's devices
        return self.pool.submit(_call, task.fn, task.kwargs)

    def as_completed(self, futures: list) -> Iterator[cf.Future]:
        return cf.as_completed(futures)


class _DaskRunner(_Runner):
    def __init__(self, client: Any):
        self.client = client

    def submit(self, task: Task) -> Any:
        # A deterministic Dask key (name + hash of function and arguments): a task resubmitted
        # after a lost worker or by a resumed client is the same task to the scheduler.
        return self.client.submit(
            _call, task.fn, task.kwargs, key=f"{task.key}-{task.cache_key}", resources=task.resources
        )

    def as_completed(self, futures: list) -> Iterator[Any]:
        from distributed import as_completed

        return iter(as_completed(futures))


_TRACKER_QUIET = "ignore:resource_tracker:UserWarning"
#: seconds between a pool worker's checks that the process that started it is alive
PARENT_POLL_S = 0.25


def _exit_with_parent(parent: int) -> None:
    """In a pool worker: end this process as soon as ``parent`` (the process that started the
    pool) is gone, whether it exited, crashed or was killed with SIGKILL: on Linux the kernel sends
    SIGKILL (``PR_SET_PDEATHSIG``), and everywhere a thread polls the parent's pid."""
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes
            import signal

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="stochformer-parent-watch", daemon=True).start()


def _stop_workers(pool: cf.ProcessPoolExecutor) -> None:
    """End the pool at once: running tasks are killed (an interrupted or failed run does not wait
    for them; their results were never stored), queued ones cancelled."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
    gc.collect()


@contextlib.contextmanager
def _runner(kind: str, arg: Any) -> Iterator[_Runner]:
    if kind == "processes":
        # The semaphores of a pool whose workers were killed are reclaimed by multiprocessing's
        # resource tracker at exit, which says so in a warning: noise after a clean one-line stop.
        # (The tracker takes its -W options from this process when it starts.)
        if _TRACKER_QUIET not in sys.warnoptions:
            sys.warnoptions.append(_TRACKER_QUIET)
        # spawn, not fork: forking a process that has started torch's thread pools is unsafe.
        pool = cf.ProcessPoolExecutor(max_workers=arg, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_exit_with_parent, initargs=(os.getpid(),))
        try:
            yield _PoolRunner(pool)
        except BaseException:
            _stop_workers(pool)
            raise
        pool.shutdown(wait=True)
        return
    from distributed import Client, LocalCluster

    if kind == "client":
        yield _DaskRunner(arg)
    elif kind == "local-cluster":
        with LocalCluster(n_workers=arg, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                yield _DaskRunner(client)
    else:
        with _connect(arg) as client:
            yield _DaskRunner(client)


#: environment variable: seconds to wait for a Dask scheduler (default `CONNECT_TIMEOUT_S`)
TIMEOUT_ENV = "STOCHFORMER_DASK_TIMEOUT"
CONNECT_TIMEOUT_S = 5.0


def connect_timeout() -> float:
    """Seconds to wait for a Dask scheduler: ``$STOCHFORMER_DASK_TIMEOUT`` or 5.

    Returns
    -------
    float
        Seconds.
    """
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else CONNECT_TIMEOUT_S
    except ValueError:
        value = float("nan")
    if not (0 < value <= 3600):
        raise ValueError(f"{TIMEOUT_ENV}: must be a number of seconds in (0, 3600] (got {text!r})")
    return value


def _connect(address: str) -> Any:
    """A ``distributed.Client`` for ``address``: the port is tried first with a plain socket and
    the connect timeout, so an unreachable scheduler fails within seconds with a message naming
    it; ``tls://`` uses Dask's own security settings (``distributed.comm.tls.*``)."""
    from urllib.parse import urlsplit

    from distributed import Client
    from distributed.security import Security

    timeout = connect_timeout()
    url = urlsplit(address if "://" in address else f"tcp://{address}")
    security = None
    if url.scheme == "tls":
        security = Security()
        # Security sets its tls_* attributes from Dask's config at run time (no static declaration)
        if not (getattr(security, "tls_ca_file", None) and getattr(security, "tls_client_cert", None)):
            raise ValueError(f"scheduler: {address!r} is a tls:// address but Dask's TLS settings are missing: set "
                             "distributed.comm.tls.ca-file, .client.cert and .client.key (e.g. DASK_DISTRIBUTED__COMM__TLS__"
                             "CA_FILE=...; see docs/sweeps.md)")
    hint = f"check the address and that the scheduler runs (wait longer with {TIMEOUT_ENV}=SECONDS)"
    try:
        # a missing port (None) raises TypeError here, reported below with the address
        socket.create_connection((url.hostname, url.port), timeout=timeout).close()  # type: ignore[arg-type]
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"scheduler: cannot reach the Dask scheduler at {address!r} within {timeout:g} s "
                         f"({exc}); {hint}") from None
    try:
        return Client(address, timeout=timeout, security=security)
    except Exception as exc:  # a port that answers but is not a Dask scheduler, a TLS mismatch, ...
        raise ValueError(f"scheduler: cannot connect to the Dask scheduler at {address!r} within {timeout:g} s "
                         f"({type(exc).__name__}: {exc}); {hint}") from None


def run_tasks_parallel(
    tasks: list[Task],
    store: Optional[Path | str] = None,
    scheduler: Any = "processes",
    progress: bool = False,
    desc: str = "tasks",
) -> dict[str, Any]:
    """Run ``tasks`` on ``scheduler`` (see the module docstring); same contract as
    [`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks]: returns ``{task.key: result}`` in the tasks' order; with
    ``store``, tasks already stored are not run and every other result is stored atomically as
    soon as it arrives. The first task that fails cancels the rest and its error is raised (the
    results that arrived before it stay stored).

    Parameters
    ----------
    tasks : list of Task
        The tasks.
    store : str or pathlib.Path, optional
        A folder of finished tasks.
    scheduler : Any, optional
        As for `parse_scheduler`.
    progress : bool, optional
        Show a progress bar (on a terminal).
    desc : str, optional
        The bar's label.

    Returns
    -------
    dict
        ``{task.key: result}`` in the tasks' order.
    """
    kind, arg = parse_scheduler(scheduler)
    tasks = list(tasks)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        dup = sorted(k for k, n in Counter(keys).items() if n > 1)
        raise ValueError(f"tasks: duplicate keys {dup[:5]} (each task needs its own key)")
    if kind == "serial":
        return run_in_process(tasks, store=store, progress=progress, desc=desc)

    cache = open_store(store)
    results: dict[str, Any] = {}
    todo: list[Task] = []
    for task in tasks:
        hit = cache.load(task.key, task.cache_key) if cache else None
        if hit is None:
            todo.append(task)
        else:
            results[task.key] = hit
    if todo:
        bar = tqdm(total=len(tasks), initial=len(results), desc=desc, disable=not progress, leave=False)
        with bar, _runner(kind, arg) as runner:
            pending, by_future = {}, {}
            for t in todo:
                f = runner.submit(t)
                pending[id(f)], by_future[id(f)] = f, t
            # each result is released as soon as it is stored (only ``pending`` holds futures)
            for future in runner.as_completed(list(pending.values())):
                task = by_future[id(future)]
                pending.pop(id(future))
                try:
                    value = runner.result(future)
                except BaseException as exc:
                    runner.cancel(list(pending.values()))
                    _with_key(exc, task.key)
                    raise
                if cache:
                    cache.store(task.key, task.cache_key, value)
                results[task.key] = value
                bar.update(1)
    return {k: results[k] for k in keys}
