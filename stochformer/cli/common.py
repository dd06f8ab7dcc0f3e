"""Options and plumbing shared by every experiment command: ``--config``, ``--set``, ``--out``,
``--format``, the size check, the output-folder lock and Ctrl-C.

This module and every command module import only click and the standard library at module level:
``stochformer --help`` and ``--version`` load neither torch nor matplotlib. Each command imports
what it runs when it runs."""

from __future__ import annotations

import functools
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import click

#: the formats of saved figures (``--format``; the same as ``stochformer.plotting.FORMATS``)
FIGURE_FORMATS = ("png", "pdf", "svg")
#: exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it
EXIT_INTERRUPTED = 130


def config_options(func: Callable) -> Callable:
    """Add ``--config FILE`` and ``--set FIELD=VALUE`` (repeatable): how every command takes its fields."""

    @click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="TOML file with configuration fields.")
    @click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                  help="Override a field (nested fields dotted, e.g. init.kind=pair); repeatable.")
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def resolve_config(config_file: Optional[Path], overrides: tuple[str, ...], model: Optional[type] = None,
                   base: Optional[dict] = None) -> Any:
    """The validated config (``model``, default :class:`~stochformer.config.RunConfig`; defaults ←
    ``base`` ← file ← overrides); errors become one usage message."""
    from ..config import ConfigError, RunConfig, build_config

    try:
        return build_config(base, list(overrides), config_file, model=RunConfig if model is None else model)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def experiment_options(func: Callable) -> Callable:
    """Add ``--config FILE``, ``--set FIELD=VALUE`` (repeatable), ``--out DIR``, ``--force``, ``--quiet``,
    ``--max-memory SIZE`` and ``--no-size-check``."""

    @config_options
    @click.option("--out", type=str, default=None,  # a string: "" must reach the check, not become "."
                  help="Output folder (default runs/<command>-<timestamp>).")
    @click.option("--force", is_flag=True, help="Replace a non-empty output folder (only one stochformer created).")
    @click.option("--quiet", is_flag=True, help="No progress bars.")
    @size_options
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def size_options(func: Callable) -> Callable:
    """``--max-memory SIZE`` and ``--no-size-check``: kept in the click context for :func:`size_check`,
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
    from ..extras import MissingExtraError
    from ..tasks.parallel import parse_scheduler

    try:
        kind, arg = parse_scheduler(scheduler)
    except (ValueError, MissingExtraError):
        return 1
    return arg if kind in ("processes", "local-cluster") else 1


def size_check(cfg: Any, scheduler: Optional[str] = None) -> None:
    """The pre-flight estimate of :mod:`stochformer.preflight` with this command's options."""
    from ..preflight import check_size, parse_size

    max_memory, skip = click.get_current_context().meta.get("stochformer.size", (None, False))
    if skip:
        return
    try:
        check_size(cfg, parse_size(max_memory) if max_memory is not None else None, workers=workers_of(scheduler))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def check_scheduler(scheduler: Optional[str]) -> None:
    """A usage error naming ``--scheduler`` unless it is one of the valid forms (and its extra is installed)."""
    if scheduler is not None:
        from ..extras import MissingExtraError
        from ..tasks.parallel import parse_scheduler

        try:
            parse_scheduler(scheduler)
        except (ValueError, MissingExtraError) as exc:
            raise click.BadParameter(str(exc), param_hint="--scheduler") from None


def command_line() -> str:
    """The command as typed (for messages that say how to resume)."""
    return shlex.join(["stochformer", *sys.argv[1:]])


def resume_command(resumed: bool) -> str:
    """The command that continues this one: as typed, without ``--force``, with ``--resume``."""
    args = [a for a in sys.argv[1:] if a != "--force"]
    return shlex.join(["stochformer", *args, *([] if resumed else ["--resume"])])


def hold_output(folder: Path, command: str) -> None:
    """Lock ``folder`` until the command ends (a second run on it fails at once) and remove the
    temporary folders of interrupted runs."""
    from ..outputs import OutputError, hold, remove_stale_partials

    ctx = click.get_current_context()
    try:
        ctx.with_resource(hold(folder, command))
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    remove_stale_partials(folder)


def default_out(command: str, out: Optional[Path | str]) -> Path | str:
    """``out`` as given (checked later by :func:`~stochformer.outputs.check_output_folder`), or
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
) -> tuple[Any, Path]:
    """Validate the config (``model``, default :class:`~stochformer.config.RunConfig`), the output
    folder, the scheduler and the size before any work (errors become one clean message), then
    hold the output folder for the rest of the command."""
    from ..config import ConfigError, RunConfig, build_config
    from ..outputs import OutputError, check_output_folder

    model = RunConfig if model is None else model
    try:
        cfg = build_config(base, list(overrides), config_file, model=model)
        folder = check_output_folder(default_out(command, out), force)
    except (ConfigError, FileExistsError, OutputError) as exc:
        raise click.UsageError(str(exc)) from None
    scheduler = click.get_current_context().params.get("scheduler")
    check_scheduler(scheduler)
    size_check(cfg, scheduler)
    hold_output(folder, command)
    return cfg, folder


def fail_cleanly(func: Callable) -> Callable:
    """Turn input errors raised during a run (bad .npy file, missing CUDA, a missing optional
    dependency, a non-finite state, ...) into one message, and Ctrl-C into exit status 130 with one
    line saying what was kept and how to resume. (``ConfigError`` is a ``ValueError``;
    ``MissingExtraError`` an ``ImportError``.)"""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..extras import MissingExtraError

        try:
            return func(*args, **kwargs)
        except (ValueError, FileExistsError, MissingExtraError) as exc:
            from ..outputs import MARKER, remove_owned

            store = click.get_current_context().meta.get("stochformer.store")
            if store is not None and [p.name for p in store.iterdir()] == [MARKER]:
                remove_owned(store)  # nothing finished: leave no empty task store behind
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            kept = click.get_current_context().meta.get("stochformer.kept")
            what = kept or f"nothing was written; run the same command again to start afresh: {command_line()}"
            click.echo(f"\ninterrupted: {what}", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper


def scheduler_option(func: Callable) -> Callable:
    """``--scheduler NAME``: how independent tasks run (see :func:`stochformer.tasks.run_tasks`)."""
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
    """Where finished tasks wait (beside the output folder) until the run completes, so that the
    same command run again after an interruption continues instead of starting afresh. Created
    (marked as stochformer's own) here; a foreign folder of that name is refused."""
    from ..outputs import has_marker, make_owned

    store = folder.with_name(folder.name + ".tasks")
    if store.exists() and not has_marker(store) and (not store.is_dir() or any(store.iterdir())):
        raise click.UsageError(f"--out: {store} (where finished tasks are kept) exists and was not created by "
                               "stochformer; move it away or choose another folder")
    make_owned(store)
    click.get_current_context().meta["stochformer.store"] = store
    click.get_current_context().meta["stochformer.kept"] = (
        f"finished tasks are kept in {store}; run the same command again to continue: {command_line()}")
    return store


def write_results(
    folder: Path, force: bool, result: Any, figures: dict[str, Callable[[], Any]], store: Optional[Path] = None,
    fmt: str = "png",
) -> None:
    """Save ``result`` and the figures (name without suffix → function returning a matplotlib
    figure, saved as NAME.FMT) into an atomically created ``folder``; then drop the finished run's
    task store."""
    from ..io import output_folder
    from ..outputs import remove_owned

    with output_folder(folder, force) as tmp:
        result.save(tmp)
        save_figures(tmp, figures, fmt)
    if store is not None:
        remove_owned(store)
