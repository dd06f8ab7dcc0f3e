"""``stochformer chaos``."""

from __future__ import annotations

import shutil
from typing import Optional

import click

from ..experiments.chaos import ChaosConfig, run_chaos
from ..io import output_folder
from ..plotting import save_figure
from ..plotting.chaos import plot_chaos, plot_density_s2
from .common import experiment_options, fail_cleanly, resolve


@click.command("chaos")
@experiment_options
@click.option("--scheduler", default=None, metavar="NAME",
              help="How tasks run: 'serial' (default), 'processes[:N]', 'local-cluster:N' or a Dask address.")
@fail_cleanly
def chaos_cmd(config_file, overrides, out, force, quiet, scheduler: Optional[str]) -> None:
    """Propagation of chaos (Proposition 1.2): synchronous coupling, W2 and conditional
    decorrelation against N, for a many-token system driven by one random-feature field.

    Writes config.json, chaos.json (every table, exponent_coupling, exponent_coupling_ci),
    arrays.npz and chaos.png (and density.png when d = 3 is among dims). Finished tasks are kept in
    OUT.tasks beside the output folder until the run completes, so an interrupted run continues
    when the same command is run again."""
    cfg, folder = resolve("chaos", config_file, overrides, out, force, model=ChaosConfig)
    store = folder.with_name(folder.name + ".tasks")
    result = run_chaos(cfg, progress=not quiet, store=store, scheduler=scheduler)
    with output_folder(folder, force) as tmp:
        result.save(tmp)
        save_figure(plot_chaos(result), tmp / "chaos.png")
        if "initial" in result.clouds:
            save_figure(plot_density_s2(result.clouds["initial"], result.clouds["final"],
                                        f"reference tokens on S² (N_ref = {cfg.N}, one sample)"), tmp / "density.png")
    shutil.rmtree(store, ignore_errors=True)
    lo, hi = result.to_dict()["exponent_coupling_ci"]
    click.echo(f"chaos: {result.elapsed_s:.1f} s; coupling exponent {result.exponent_coupling:.3f} "
               f"[{lo:.3f}, {hi:.3f}] (d = {cfg.d}, target 1)")
    for d in cfg.dims:
        w = result.fits["w2"].get(str(d))
        if w:
            click.echo(f"  W2^2 exponent d = {d}: {w['exponent']:.3f} [{w['ci'][0]:.3f}, {w['ci'][1]:.3f}]"
                       f"  (r_d = {result.fits['r_d'][str(d)]['law']}: {result.fits['r_d'][str(d)]['exponent']:.3f}; "
                       f"S^{d - 1} rate {result.fits['sphere_rate'][str(d)]['law']}: {result.fits['sphere_rate'][str(d)]['exponent']:.3f})")
    click.echo(f"results in {folder}")
