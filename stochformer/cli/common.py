"""Options and plumbing shared by every experiment command: ``--config``, ``--set``, ``--out``,
``--format``, the size check, the output-folder lock, and Ctrl-C, SIGTERM and SIGHUP (each ends the
run like Ctrl-C: exit status 128 + the signal's number, one line saying what was kept).

This module and every command module import only click and the standard library at module level:
``stochformer --help`` and ``--version`` load neither torch nor matplotlib. Each command imports
what it runs when it runs."""

from __future__ import annotations

import contextlib
import functools
import logging
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional

import click

#: the command line's logger (a child of ``stochformer``; its stderr handler is attached by ``--quiet``/``--verbose``)
log = logging.getLogger("stochformer.cli")

#: the formats of saved figures (``--format``; the same as ``stochformer.plotting.FORMATS``)
FIGURE_FORMATS = ("png", "pdf", "svg")
#: exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it; SIGTERM gives 143
#: and SIGHUP 129 (128 + the signal's number)
EXIT_INTERRUPTED = 130
#: the signals that stop a run like Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C's ``KeyboardInterrupt``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    for sig in STOP_SIGNALS:  # a second signal must not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def stop_on_signals() -> None:
    """Until the current command ends, SIGTERM and SIGHUP stop it like Ctrl-C (see `fail_cleanly`)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    before = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    click.get_current_context().call_on_close(lambda: [signal.signal(sig, h) for sig, h in before.items()])


def _deliver_again(unraisable: Any, previous: Callable[[Any], None], pending: list) -> None:
    """``sys.unraisablehook``: a Ctrl-C (or a `Stopped`) that Python had to drop, because it
    arrived while a finaliser or a weakref callback ran, is delivered again as the same signal.

    The signal is raised from another thread a moment after this hook returns: raised here, its
    handler would run inside the hook, where Python drops an exception for good. Landing in another
    finaliser, it comes back here and is delivered again."""
    import _thread
    import threading

    exc = unraisable.exc_value
    if not isinstance(exc, KeyboardInterrupt):
        previous(unraisable)
        return
    signum = getattr(exc, "signum", signal.SIGINT)
    if signum != signal.SIGINT:
        signal.signal(signum, _stop)  # _stop ignored further stop signals
    again = threading.Timer(0.05, _thread.interrupt_main, args=(signum,))
    again.daemon = True  # an interrupt dropped while the interpreter exits stays dropped: the command has ended
    pending.append(again)
    again.start()


@contextlib.contextmanager
def interrupts_never_lost() -> Iterator[None]:
    """While the block runs, a Ctrl-C, SIGTERM or SIGHUP that lands in a finaliser is not lost (Python
    would print "Exception ignored" and run on): it is raised again in the main thread."""
    previous = sys.unraisablehook
    pending: list = []  # redeliveries not yet made
    sys.unraisablehook = functools.partial(_deliver_again, previous=previous, pending=pending)
    try:
        yield
    finally:
        sys.unraisablehook = previous
        for timer in pending:  # the command has ended: no redelivery may land while the interpreter exits
            timer.cancel()


def interrupted_exit(exc: KeyboardInterrupt, what: str) -> NoReturn:
    """One line, ``interrupted[ by SIGNAL]: WHAT``, on stderr, and exit with 128 + the signal's number."""
    signum = getattr(exc, "signum", signal.SIGINT)
    by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
    click.echo(f"\ninterrupted{by}: {what}", err=True)
    sys.exit(128 + signum)


#: the formats ``--print-config`` writes (TOML, the default, reads back with ``--config``)
PRINT_FORMATS = ("toml", "json")


def print_config_option(func: Callable) -> Callable:
    """``--print-config [toml|json]``: print the resolved, validated config and exit before any work
    (no folder is checked or written); kept in the click context for `print_config_and_exit`."""

    @click.option("--print-config", "print_config", type=click.Choice(PRINT_FORMATS), is_flag=False, flag_value="toml",
                  default=None,
                  help="Print the resolved, validated configuration (TOML by default, or json) and exit without running.")
    @functools.wraps(func)
    def wrapper(*args: Any, print_config: Optional[str] = None, **kwargs: Any) -> Any:
        click.get_current_context().meta["stochformer.print_config"] = print_config
        return func(*args, **kwargs)

    return wrapper


def print_config_and_exit(cfg: Any) -> None:
    """With ``--print-config``: write ``cfg`` (a config, or a dict of them: one table each) on stdout
    and end the command with status 0; otherwise nothing. A config printed as TOML reads back with
    ``--config`` to the same config."""
    ctx = click.get_current_context()
    fmt = ctx.meta.get("stochformer.print_config")
    if fmt is None:
        return
    from ..config import dump_config

    click.echo(dump_config(cfg, fmt), nl=False)
    ctx.exit(0)


def config_options(func: Callable) -> Callable:
    """Add ``--config FILE``, ``--set FIELD=VALUE`` (repeatable) and ``--print-config``: how every
    command takes its fields."""

    @click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="TOML file with configuration fields.")
    @click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                  help="Override a field (nested fields dotted, e.g. init.kind=pair); repeatable.")
    @print_config_option
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def resolve_config(config_file: Optional[Path], overrides: tuple[str, ...], model: Optional[type] = None,
                   base: Optional[dict] = None, print_it: bool = True) -> Any:
    """The validated config (``model``, default [`RunConfig`][stochformer.config.RunConfig]; defaults ←
    ``base`` ← file ← overrides); errors become one usage message. With ``--print-config`` (and
    ``print_it``) it is printed and the command ends here."""
    from ..config import ConfigError, RunConfig, build_config

    try:
        cfg = build_config(base, list(overrides), config_file, model=RunConfig if model is None else model)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if print_it:
        print_config_and_exit(cfg)
    return cfg


def log_options(func: Callable) -> Callable:
    """``--quiet`` (warnings only, no progress bars), ``--verbose`` (debug messages) and
    ``--progress`` (draw progress bars even when stderr is not a terminal): the ``stochformer``
    logger on stderr (`stochformer.core.progress.configure_logging`) for this command. The
    command still takes ``quiet``; ``verbose`` and ``progress`` are used here."""

    @click.option("--quiet", "-q", is_flag=True, help="Warnings and errors only; no progress bars.")
    @click.option("--verbose", "-v", is_flag=True, help="Debug messages on stderr (the resolved config, the size estimate).")
    @click.option("--progress", "force_progress", is_flag=True,
                  help="Draw progress bars even when stderr is not a terminal (by default they are drawn only on one).")
    @functools.wraps(func)
    def wrapper(*args: Any, verbose: bool = False, force_progress: bool = False, **kwargs: Any) -> Any:
        from ..core.progress import configure_logging, set_progress

        quiet = kwargs.get("quiet", False)
        if quiet and (verbose or force_progress):
            raise click.UsageError(f"--quiet and {'--verbose' if verbose else '--progress'}: choose one")
        configure_logging(-1 if quiet else 1 if verbose else 0)
        if force_progress:
            set_progress("always")
            click.get_current_context().call_on_close(lambda: set_progress(None))
        return func(*args, **kwargs)

    return wrapper


def experiment_options(func: Callable) -> Callable:
    """Add ``--config FILE``, ``--set FIELD=VALUE`` (repeatable), ``--print-config``, ``--out DIR``,
    ``--force``, ``--quiet``, ``--verbose``, ``--progress``, ``--max-memory SIZE`` and ``--no-size-check``."""

    @config_options
    @out_option("Output folder (default runs/<command>-<timestamp>).")
    @click.option("--force", is_flag=True, help="Replace a non-empty output folder (only one stochformer created).")
    @log_options
    @size_options
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def out_option(help: str) -> Callable[[Callable], Callable]:
    """``--out DIR``: the output folder, taken as a string ("" must reach the folder check, not become ".")."""
    return click.option("--out", type=str, default=None, metavar="DIR", help=help)


def size_options(func: Callable) -> Callable:
    """``--max-memory SIZE`` and ``--no-size-check``: kept in the click context for `size_check`,
    so commands do not take them as arguments."""

    @click.option("--max-memory", default=None, metavar="SIZE",
                  help="Refuse runs whose estimated peak memory exceeds SIZE (e.g. 8G; default: the memory available now).")
    @click.option("--no-size-check", is_flag=True, help="Skip the pre-flight memory and time estimate.")
    @functools.wraps(func)
    def wrapper(*args: Any, max_memory: Optional[str] = None, no_size_check: bool = False, **kwargs: Any) -> Any:
        click.get_current_context().meta["stochformer.size"] = (max_memory, no_size_check)
        return func(*args, **kwargs)

    return wrapper


def workers_of(scheduler: Optional[str]) -> int:
    """How many tasks of ``scheduler`` run at once on this machine (for the size check)."""
    from ..core.extras import MissingExtraError
    from ..tasks.parallel import parse_scheduler

    try:
        kind, arg = parse_scheduler(scheduler)
    except (ValueError, MissingExtraError):
        return 1
    return arg if kind in ("processes", "local-cluster") else 1


def size_check(cfg: Any, scheduler: Optional[str] = None) -> Any:
    """The pre-flight estimate of `stochformer.experiments.preflight` with this command's options (returned;
    None when skipped or not estimated)."""
    from ..experiments.preflight import check_size, parse_size

    max_memory, skip = click.get_current_context().meta.get("stochformer.size", (None, False))
    if skip:
        return None
    try:
        return check_size(cfg, parse_size(max_memory) if max_memory is not None else None, workers=workers_of(scheduler))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def check_scheduler(scheduler: Optional[str]) -> None:
    """A usage error naming ``--scheduler`` unless it is one of the valid forms (and its extra is installed)."""
    if scheduler is not None:
        from ..core.extras import MissingExtraError
        from ..tasks.parallel import parse_scheduler

        try:
            parse_scheduler(scheduler)
        except MissingExtraError as exc:  # a valid option whose extra is missing: one line, no usage
            raise click.ClickException(str(exc)) from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--scheduler") from None


#: the key of ``click.Context.meta`` that holds the command line's arguments as given
GIVEN_ARGS = "stochformer.args"


def given_args() -> list[str]:
    """The arguments the command line was given: ``main(args)``'s from Python or a notebook (kept by
    the group in the context), else the process's own."""
    ctx = click.get_current_context(silent=True)
    args = ctx.meta.get(GIVEN_ARGS) if ctx is not None else None
    return list(args) if args is not None else sys.argv[1:]


def command_line() -> str:
    """The command as typed (for messages that say how to resume, and the record of a run)."""
    return shlex.join(["stochformer", *given_args()])


def resume_command(resumed: bool) -> str:
    """The command that continues this one: as typed, without ``--force``, with ``--resume``."""
    args = [a for a in given_args() if a != "--force"]
    return shlex.join(["stochformer", *args, *([] if resumed else ["--resume"])])


def hold_output(folder: Path, command: str) -> None:
    """Lock ``folder`` (its resolved path) until the command ends (a second run on it fails at
    once) and remove the temporary folders of interrupted runs (only stochformer's own, unchanged)."""
    from ..io.outputs import OutputError, hold, remove_stale_partials

    ctx = click.get_current_context()
    try:
        ctx.with_resource(hold(folder, command))
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    remove_stale_partials(folder)


def check_output(folder: Any, command: str, force: bool = False, replace: bool = False, option: str = "--out") -> Path:
    """`stochformer.io.outputs.check_output_folder` for ``command``, its error as a usage message."""
    from ..io.outputs import OutputError, check_output_folder

    try:
        return check_output_folder(folder, force, option=option, command=command, replace=replace)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None


def disk_check(folder: Path, estimate: Any) -> None:
    """Refuse, before any work, a location with less free space than the run may write: the
    pre-flight estimate of its peak memory (everything a run writes is in memory first), at least
    `MIN_FREE_BYTES`."""
    from ..io.outputs import MIN_FREE_BYTES, OutputError, check_free_space

    try:
        check_free_space(folder, max(MIN_FREE_BYTES, getattr(estimate, "bytes", 0.0) or 0.0))
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None


def default_out(command: str, out: Optional[Path | str]) -> Path | str:
    """``out`` as given (checked later by `check_output_folder`), or
    ``runs/<command>-<timestamp>``."""
    return out if out is not None else Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"


def resolve(
    command: str,
    config_file: Optional[Path],
    overrides: tuple[str, ...],
    out: Optional[Path | str],
    force: bool,
    model: Optional[type] = None,
    base: Optional[dict] = None,
    needs: tuple[str, str] | None = None,
) -> tuple[Any, Path]:
    """Validate the config (``model``, default [`RunConfig`][stochformer.config.RunConfig]), the
    optional dependency the command ``needs`` (``(module, feature)`` as in
    [`require`][stochformer.core.extras.require]), the output folder (`check_output`), the scheduler,
    the size and the free disk space before any work (errors become one clean message), then hold
    the output folder for the rest of the command."""
    from ..config import ConfigError, RunConfig, build_config
    from ..core.extras import require

    model = RunConfig if model is None else model
    try:
        cfg = build_config(base, list(overrides), config_file, model=model)
    except (ConfigError, FileExistsError) as exc:
        raise click.UsageError(str(exc)) from None
    print_config_and_exit(cfg)
    if needs is not None:
        require(*needs)
    log.debug("%s: configuration %s", command, cfg.model_dump_json())
    folder = check_output(default_out(command, out), command, force)
    click.get_current_context().meta["stochformer.command"] = command
    scheduler = click.get_current_context().params.get("scheduler")
    check_scheduler(scheduler)
    estimate = size_check(cfg, scheduler)
    if estimate is not None:
        log.debug("%s: estimated peak memory %.3g GB (driven by %s), time %.3g s (driven by %s)", command,
                  estimate.bytes / 1e9, estimate.memory_fields, estimate.seconds, estimate.time_fields)
    disk_check(folder, estimate)
    hold_output(folder, command)
    log.info("%s: writing to %s", command, folder)
    return cfg, folder


def fail_cleanly(func: Callable) -> Callable:
    """Turn input errors raised during a run (bad .npy file, missing CUDA, a missing optional
    dependency, a non-finite state, ...) and failed writes (a full disk, a read-only folder) into
    one message, and Ctrl-C, SIGTERM and SIGHUP into exit status 128 + the signal's number (130,
    143, 129) with one line saying what was kept and how to resume. (``ConfigError`` is a
    ``ValueError``; ``MissingExtraError`` an ``ImportError``.)"""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..core.extras import MissingExtraError
        from ..io.outputs import WRITE_ERRNOS, WriteError, write_error

        stop_on_signals()
        meta = click.get_current_context().meta
        try:
            return func(*args, **kwargs)
        except (ValueError, FileExistsError, MissingExtraError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, FileExistsError):
                exc = write_error(exc.filename or "a file", exc) if exc.errno in WRITE_ERRNOS else \
                    ValueError(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
            _drop_empty_store(meta)
            kept = meta.get("stochformer.kept") if isinstance(exc, WriteError) else None
            raise click.ClickException(f"{exc}" + (f"; {kept}" if kept else "")) from None
        except KeyboardInterrupt as exc:
            _drop_empty_store(meta)
            kept = meta.get("stochformer.kept")
            interrupted_exit(exc, kept or f"nothing was written; run the same command again to start afresh: {command_line()}")

    return wrapper


def _drop_empty_store(meta: dict) -> None:
    """Remove the task store of this run if nothing finished (it holds only its manifest)."""
    from ..io.outputs import MARKER, OutputError, remove_own

    store = meta.get("stochformer.store")
    try:
        if store is not None and store.is_dir() and [p.name for p in store.iterdir()] == [MARKER]:
            remove_own(store)
            meta.pop("stochformer.kept", None)
    except (OSError, OutputError):
        pass


def scheduler_option(func: Callable) -> Callable:
    """``--scheduler NAME``: how independent tasks run (see [`stochformer.tasks.run_tasks`][stochformer.tasks.run_tasks])."""
    return click.option(
        "--scheduler", default=None, metavar="NAME",
        help="How tasks run: 'serial' (default), 'processes[:N]', 'local-cluster:N' or a Dask address.",
    )(func)


def format_option(func: Callable) -> Callable:
    """``--format png|pdf|svg``: the file format of the saved figures."""
    return click.option(
        "--format", "fmt", type=click.Choice(FIGURE_FORMATS), default="png", show_default=True,
        help="File format of the saved figures (pdf and svg are vector graphics).",
    )(func)


def use_agg() -> None:
    """The command line draws off-screen: choose matplotlib's Agg backend (the library never does)."""
    import matplotlib

    matplotlib.use("Agg")


def save_figures(folder: Path, figures: dict[str, Callable[[], Any]], fmt: str = "png") -> None:
    """Save each figure (name without suffix → function returning a matplotlib figure) as
    ``folder/NAME.FMT``."""
    if not figures:
        return
    use_agg()
    from ..plotting import save_figure

    for name, make in figures.items():
        save_figure(make(), folder / f"{name}.{fmt}")


def task_store(folder: Path) -> Path:
    """Where finished tasks wait (``OUT.tasks`` beside the output folder) until the run completes,
    so that the same command run again after an interruption continues instead of starting afresh.
    Checked before any work: a store of this command's own unchanged output is continued, anything
    else of that name is refused; every task written there is listed in its manifest."""
    from ..io.outputs import OutputError, check_names, own_folder, tracking

    ctx = click.get_current_context()
    command = ctx.meta.get("stochformer.command", ctx.info_name or "")
    store = folder.with_name(folder.name + ".tasks")
    try:
        check_names(store, "--out")
        if store.is_symlink() or (store.exists() and not store.is_dir()):
            raise OutputError(f"--out: {store} (where finished tasks are kept) exists and is not a folder stochformer "
                              "created; move it away or choose another folder")
        manifest = own_folder(store, command, derived=True)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    ctx.with_resource(tracking(manifest))
    ctx.meta["stochformer.store"] = store
    ctx.meta["stochformer.kept"] = (
        f"finished tasks are kept in {store}; run the same command again to continue: {command_line()}")
    return store


def write_results(
    folder: Path, force: bool, result: Any, figures: dict[str, Callable[[], Any]], store: Optional[Path] = None,
    fmt: str = "png",
) -> None:
    """Save ``result`` and the figures (name without suffix → function returning a matplotlib
    figure, saved as NAME.FMT) into an atomically created ``folder`` (every file listed in its
    manifest); then drop the finished run's task store. An interrupt after this says the results are
    complete (``stochformer.kept``)."""
    from ..io.store import output_folder
    from ..io.outputs import remove_own

    meta = click.get_current_context().meta
    command = meta.get("stochformer.command", "")

    def complete() -> None:  # from the move on, an interrupt (the summary, the lock's release) finds them complete
        meta["stochformer.kept"] = f"the run had finished; its results are complete in {folder}"

    with output_folder(folder, force, command, committed=complete) as tmp:
        result.save(tmp)
        save_figures(tmp, figures, fmt)
    if store is not None:
        remove_own(store, command)
