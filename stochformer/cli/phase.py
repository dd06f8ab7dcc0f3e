"""``stochformer phase``: a phase diagram over two config fields with the predicted boundary."""

from __future__ import annotations

from typing import Optional

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, scheduler_option, task_store, write_results


@click.command(
    "phase",
    short_help='Phase diagram over two fields: pair exponent or fraction synchronised, with the predicted boundaries.',
)
@experiment_options
@scheduler_option
@format_option
@fail_cleanly
def phase_cmd(config_file, overrides, out, force, quiet, scheduler: Optional[str], fmt: str) -> None:
    """Sweep two fields (x_field/x_values, y_field/y_values; 'sigma' sets sigma_U = sigma_W) and
    measure the pair exponent (measure=lyapunov) or the fraction synchronised at T
    (measure=sync_fraction), with the boundaries lambda_1 - gamma = 0 and lambda_bar - 2 gamma = 0.

    Finished grid points are kept in OUT.tasks beside the output folder until the run completes, so
    an interrupted run continues when the same command is run again."""
    from ..experiments.phase import PhaseConfig, run_phase
    from ..plotting.sync import plot_phase

    cfg, folder = resolve("phase", config_file, overrides, out, force, model=PhaseConfig)
    store = task_store(folder)
    result = run_phase(cfg, progress=not quiet, store=store, scheduler=scheduler)
    write_results(folder, force, result, {"phase": lambda: plot_phase(result)}, store, fmt)
    agree = result.agreement()
    click.echo(f"phase ({cfg.measure}) over {cfg.x_field} x {cfg.y_field}: {agree['points']} points in "
               f"{result.elapsed_s:.1f} s; agreement with the predicted boundary: {agree}")
    click.echo(f"results in {folder}")
