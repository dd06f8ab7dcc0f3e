"""``stochformer sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from .common import (
    check_output,
    default_out,
    disk_check,
    fail_cleanly,
    format_option,
    hold_output,
    log_options,
    out_option,
    print_config_and_exit,
    print_config_option,
    resume_command,
    save_figures,
    size_check,
    size_options,
    stop_on_signals,
)


def _scheduler(scheduler: Optional[str], local_cluster: Optional[int], workers: Optional[int]) -> str:
    from ..core.extras import MissingExtraError
    from ..tasks.parallel import parse_scheduler

    given = [name for name, v in (("--scheduler", scheduler), ("--local-cluster", local_cluster), ("--workers", workers)) if v]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)}: give only one way to run the tasks")
    if local_cluster:
        chosen = f"local-cluster:{local_cluster}"
    elif workers:
        chosen = f"processes:{workers}"
    else:
        chosen = scheduler or "processes"
    try:
        parse_scheduler(chosen)
    except ValueError as exc:
        raise click.UsageError(f"--{exc}") from None
    except MissingExtraError as exc:  # a valid option whose extra is missing: one line, no usage
        raise click.ClickException(str(exc)) from None
    return chosen


@click.command(
    "sweep",
    short_help='Run many simulations over a grid or list of points from a TOML file, resumable, on one time axis.',
)
@click.option("--config", "file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="TOML file of the sweep: samples, samples_per_task, [model], [grid] and/or [[points]].")
@click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
              help="Override a field of the sweep file (e.g. samples=256, grid.gamma=[0,1]); repeatable.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address (tcp://HOST:8786), or 'processes[:N]', 'local-cluster:N', 'serial'.")
@click.option("--local-cluster", type=click.IntRange(min=1), default=None, metavar="N",
              help="Start a local Dask cluster of N worker processes for this sweep.")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Size of the local process pool (the default scheduler; default: the number of CPUs).")
@out_option("Output folder (default runs/sweep-<timestamp>); finished tasks are kept in OUT/tasks.")
@click.option("--resume", is_flag=True, help="Continue the sweep stored in --out, reusing its finished tasks.")
@click.option("--force", is_flag=True, help="Delete a non-empty --out folder (only one stochformer created) and start afresh.")
@log_options
@print_config_option
@format_option
@size_options
@fail_cleanly
def sweep_cmd(file, overrides, scheduler, local_cluster, workers, out, resume, force, quiet, fmt: str) -> None:
    """Run the sweep described in the --config file (TOML: samples, samples_per_task, [model], [grid] and/or [[points]]).

    Writes OUT/dataset.nc (xarray, NetCDF-4), config.json, summary.json and summary.png; each
    finished task is stored in OUT/tasks as it completes, so a killed sweep continues with --resume."""
    if resume and force:
        raise click.UsageError("--resume and --force: choose one (continue the stored sweep, or replace it)")
    if resume and out is None:
        raise click.UsageError("--resume: give the folder of the sweep to continue with --out DIR")
    stop_on_signals()
    chosen = _scheduler(scheduler, local_cluster, workers)
    from ..config import ConfigError
    from ..experiments.sweep import load_sweep, plan_sweep, run_sweep
    from ..io.outputs import OutputError, discard, own_folder, remove_own, tracking
    from ..plotting.sweep import plot_sweep

    try:  # everything is validated before any work or any folder
        cfg = load_sweep(file, list(overrides))
        plan = plan_sweep(cfg)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    print_config_and_exit(cfg)
    if resume:
        folder = check_output(out, "sweep", replace=True, option="--resume")
        if not folder.is_dir():
            raise click.UsageError(f"--resume: {folder} does not exist; check --out (or run without --resume to start)")
    else:
        try:
            folder = check_output(default_out("sweep", out), "sweep", force)
        except click.UsageError as exc:
            more = "; or pass --resume to continue the sweep stored there" if "not empty" in exc.message else ""
            raise click.UsageError(f"{exc.message}{more}") from None
    click.get_current_context().meta["stochformer.command"] = "sweep"
    disk_check(folder, size_check(cfg, chosen))
    hold_output(folder, "sweep")
    try:
        if force:
            remove_own(folder, "sweep")
        created = not folder.exists() or not any(folder.iterdir())
        manifest = own_folder(folder, "sweep")
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    click.get_current_context().with_resource(tracking(manifest))
    click.get_current_context().meta["stochformer.kept"] = (
        f"finished tasks are kept in {folder / 'tasks'}; continue with: {resume_command(resume)}")
    n_tasks = len(plan.configs) * len(plan.task_sizes)
    click.echo(f"sweep: {len(plan.configs)} points x {len(plan.task_sizes)} tasks = {n_tasks} tasks on {chosen}")
    try:
        result = run_sweep(cfg, store=folder / "tasks", scheduler=chosen, progress=not quiet)
    except BaseException:
        if created and not any((folder / "tasks").glob("*.json")):  # nothing finished: leave nothing behind
            discard(manifest)
            click.get_current_context().meta.pop("stochformer.kept", None)
        raise
    result.save(folder)
    save_figures(folder, {"summary": lambda: plot_sweep(result)}, fmt)
    m = result.meta
    click.echo(
        f"{m['tasks']} tasks ({m['tasks_already_stored']} already stored) in {result.elapsed_s:.2f} s "
        f"on {', '.join(m['task_devices'])}"
    )
    click.echo(f"results in {folder}")
