"""``stochformer simulate``."""

from __future__ import annotations

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, write_results


@click.command("simulate", short_help='Simulate the deep transformer at random initialisation (or its limit SDE).')
@experiment_options
@format_option
@fail_cleanly
def simulate_cmd(config_file, overrides, out, force, quiet, fmt: str) -> None:
    """Simulate the deep transformer (or, with --set dynamics=sde, the limit SDE).

    Writes config.json, dataset.nc (xarray), summary.json and figures to the output folder."""
    from ..experiments.simulate import run_simulate
    from ..plotting import plot_sphere_paths, plot_summary
    from ..plotting.core import assign

    cfg, folder = resolve("simulate", config_file, overrides, out, force)
    result = run_simulate(cfg, progress=not quiet)
    s = result.summary()
    title = ", ".join([f"{cfg.dynamics}: {assign('N', cfg.N)}"] + [assign(k, getattr(cfg, k)) for k in ("d", "L", "T", "m")]
                      + [cfg.activation])
    figures = {"summary": lambda: plot_summary(s, title)}
    if cfg.d == 3 and "X" in result.data:
        figures["paths"] = lambda: plot_sphere_paths(result.data["X"].values)
    write_results(folder, force, result, figures, fmt=fmt)
    click.echo(
        f"{cfg.dynamics}: {cfg.batch} samples, {cfg.L} layers in {result.elapsed_s:.2f} s; at layer {cfg.L}: "
        f"mean cosine {s['mean_cosine'][-1]:.4f} ± {s['mean_cosine_se'][-1]:.4f}, "
        f"E_β {s['energy'][-1]:.4g} ± {s['energy_se'][-1]:.2g}"
    )
    click.echo(f"results in {folder}")
