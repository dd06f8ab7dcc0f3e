"""``stochformer simulate``."""

from __future__ import annotations

import click

from ..experiments.simulate import run_simulate
from ..plotting import plot_sphere_paths, plot_summary
from .common import experiment_options, fail_cleanly, resolve, write_results


@click.command("simulate")
@experiment_options
@fail_cleanly
def simulate_cmd(config_file, overrides, out, force, quiet) -> None:
    """Simulate the deep transformer (or, with --set dynamics=sde, the limit SDE).

    Writes config.json, dataset.nc (xarray), summary.json and figures to the output folder."""
    cfg, folder = resolve("simulate", config_file, overrides, out, force)
    result = run_simulate(cfg, progress=not quiet)
    s = result.summary()
    title = f"{cfg.dynamics}: N={cfg.N}, d={cfg.d}, L={cfg.L}, T={cfg.T}, m={cfg.m}, {cfg.activation}"
    figures = {"summary.png": lambda: plot_summary(s, title)}
    if cfg.d == 3 and "X" in result.data:
        figures["paths.png"] = lambda: plot_sphere_paths(result.data["X"].values)
    write_results(folder, force, result, figures)
    click.echo(
        f"{cfg.dynamics}: {cfg.batch} samples, {cfg.L} layers in {result.elapsed_s:.2f} s; at layer {cfg.L}: "
        f"mean cosine {s['mean_cosine'][-1]:.4f} ± {s['mean_cosine_se'][-1]:.4f}, "
        f"E_β {s['energy'][-1]:.4g} ± {s['energy_se'][-1]:.2g}"
    )
    click.echo(f"results in {folder}")
