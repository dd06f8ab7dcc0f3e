"""Options and plumbing shared by every experiment command: ``--config``, ``--set``, ``--out``."""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import click

from ..config import ConfigError, RunConfig, build_config
from ..io import check_output_folder


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


def resolve_config(config_file: Optional[Path], overrides: tuple[str, ...], model: type = RunConfig,
                   base: Optional[dict] = None) -> Any:
    """The validated config (defaults ← ``base`` ← file ← overrides); errors become one usage message."""
    try:
        return build_config(base, list(overrides), config_file, model=model)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def experiment_options(func: Callable) -> Callable:
    """Add ``--config FILE``, ``--set FIELD=VALUE`` (repeatable), ``--out DIR``, ``--force``, ``--quiet``."""

    @config_options
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Output folder (default runs/<command>-<timestamp>).")
    @click.option("--force", is_flag=True, help="Replace a non-empty output folder.")
    @click.option("--quiet", is_flag=True, help="No progress bars.")
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def default_out(command: str, out: Optional[Path]) -> Path:
    return out if out is not None else Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"


def resolve(
    command: str,
    config_file: Optional[Path],
    overrides: tuple[str, ...],
    out: Optional[Path],
    force: bool,
    model: type = RunConfig,
    base: Optional[dict] = None,
) -> tuple[Any, Path]:
    """Validate the config and the output folder before any work; errors become one clean message."""
    cfg = resolve_config(config_file, overrides, model, base)
    try:
        folder = check_output_folder(default_out(command, out), force)
    except FileExistsError as exc:
        raise click.UsageError(str(exc)) from None
    return cfg, folder


def fail_cleanly(func: Callable) -> Callable:
    """Turn input errors raised during a run (bad .npy file, missing CUDA, ...) into one message."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (ConfigError, ValueError, FileExistsError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def scheduler_option(func: Callable) -> Callable:
    """``--scheduler NAME``: how independent tasks run (see :func:`stochformer.tasks.run_tasks`)."""
    return click.option(
        "--scheduler", default=None, metavar="NAME",
        help="How tasks run: 'serial' (default), 'processes[:N]', 'local-cluster:N' or a Dask address.",
    )(func)


def task_store(folder: Path) -> Path:
    """Where finished tasks wait (beside the output folder) until the run completes, so that the
    same command run again after an interruption continues instead of starting afresh."""
    return folder.with_name(folder.name + ".tasks")


def write_results(
    folder: Path, force: bool, result: Any, figures: dict[str, Callable[[], Any]], store: Optional[Path] = None
) -> None:
    """Save ``result`` and the figures (file name → function returning a matplotlib figure) into an
    atomically created ``folder``; then drop the finished run's task store."""
    from ..io import output_folder
    from ..plotting import save_figure

    with output_folder(folder, force) as tmp:
        result.save(tmp)
        for name, make in figures.items():
            save_figure(make(), tmp / name)
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
