"""``stochformer sync``: measured λ₁ and energy rates beside the closed forms (SPEC §5)."""

from __future__ import annotations

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, write_results


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.5g}"


@click.command(
    "sync",
    short_help='Synchronisation by noise: Lyapunov exponent of a pair and energy decay rate against λ₁, λ̄ (SPEC §5).',
)
@experiment_options
@format_option
@fail_cleanly
def sync_cmd(config_file, overrides, out, force, quiet, fmt: str) -> None:
    """Measure the Lyapunov exponent (pairs, renormalised) and the first-moment energy rate (near
    synchronisation and from uniform tokens) of the transformer or (dynamics=sde) the limit SDE.

    Writes config.json, sync.json (lambda_1, lambda_1_se, lambda_1_extrap_err, energy_rate,
    energy_rate_se, energy_rate_extrap_err beside lambda_1_pred, lambda_bar_pred,
    lambda_bar_prime_pred, epsilon and bound_pred = ε + λ̄'), dataset.nc and sync.png. Rates are per unit time t = layer · T/L; every
    rate is extrapolated to Δt → 0 from L, L/2 and L/4 steps (set extrapolate=false for the plain
    estimates at L); z = (measured − predicted)/√(SE² + err²) for the rows that predict a value (none
    for the uniform start's bound ε + λ̄', an inequality: "—")."""
    from ..experiments.sync import SyncConfig, run_sync
    from ..plotting.sync import plot_sync

    cfg, folder = resolve("sync", config_file, overrides, out, force, model=SyncConfig)
    result = run_sync(cfg, progress=not quiet)
    write_results(folder, force, result, {"sync": lambda: plot_sync(result)}, fmt=fmt)
    click.echo(f"{cfg.model.dynamics}, {cfg.model.activation}, d={cfg.model.d}: {result.elapsed_s:.1f} s")
    click.echo(f"  {'quantity':<42s} {'measured':>11s} {'SE':>9s} {'err':>9s} {'predicted':>11s} {'z':>7s}")
    for row in result.table():
        click.echo(f"  {row['quantity']:<42s} {_fmt(row['measured']):>11s} {_fmt(row['se']):>9s} {_fmt(row['err']):>9s} "
                   f"{_fmt(row['predicted']):>11s} {_fmt(row['z']):>7s}")
    click.echo(f"results in {folder}")
