"""Options and plumbing shared by every experiment command: ``--config``, ``--set``, ``--out``,
``--format``.

This module and every command module import only click and the standard library at module level:
``stochformer --help`` and ``--version`` load neither torch nor matplotlib. Each command imports
what it runs when it runs."""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import click

#: the formats of saved figures (``--format``; the same as ``stochformer.plotting.FORMATS``)
FIGURE_FORMATS = ("png", "pdf", "svg")


def experiment_options(func: Callable) -> Callable:
    """Add ``--config FILE``, ``--set FIELD=VALUE`` (repeatable), ``--out DIR``, ``--force``, ``--quiet``."""

    @click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="TOML file with configuration fields.")
    @click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                  help="Override a field (nested fields dotted, e.g. init.kind=pair); repeatable.")
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
    model: Optional[type] = None,
    base: Optional[dict] = None,
) -> tuple[Any, Path]:
    """Validate the config (``model``, default :class:`~stochformer.config.RunConfig`) and the output
    folder before any work; errors become one clean message."""
    from ..config import ConfigError, RunConfig, build_config
    from ..io import check_output_folder

    model = RunConfig if model is None else model
    try:
        cfg = build_config(base, list(overrides), config_file, model=model)
        folder = check_output_folder(default_out(command, out), force)
    except (ConfigError, FileExistsError) as exc:
        raise click.UsageError(str(exc)) from None
    return cfg, folder


def fail_cleanly(func: Callable) -> Callable:
    """Turn input errors raised during a run (bad .npy file, missing CUDA, a missing optional
    dependency, ...) into one message. (``ConfigError`` is a ``ValueError``; ``MissingExtraError``
    an ``ImportError``.)"""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..extras import MissingExtraError

        try:
            return func(*args, **kwargs)
        except (ValueError, FileExistsError, MissingExtraError) as exc:
            raise click.ClickException(str(exc)) from None

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
    same command run again after an interruption continues instead of starting afresh."""
    return folder.with_name(folder.name + ".tasks")


def write_results(
    folder: Path, force: bool, result: Any, figures: dict[str, Callable[[], Any]], store: Optional[Path] = None,
    fmt: str = "png",
) -> None:
    """Save ``result`` and the figures (name without suffix → function returning a matplotlib
    figure, saved as NAME.FMT) into an atomically created ``folder``; then drop the finished run's
    task store."""
    from ..io import output_folder

    with output_folder(folder, force) as tmp:
        result.save(tmp)
        save_figures(tmp, figures, fmt)
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
