"""``stochformer chaos``."""

from __future__ import annotations

import math
from typing import Optional

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, scheduler_option, task_store, write_results


@click.command(
    "chaos",
    short_help='Propagation of chaos (Proposition 1.2): coupling, W2 and decorrelation against the number of tokens N.',
)
@experiment_options
@scheduler_option
@format_option
@fail_cleanly
def chaos_cmd(config_file, overrides, out, force, quiet, scheduler: Optional[str], fmt: str) -> None:
    """Propagation of chaos (Proposition 1.2): synchronous coupling, W2 and conditional
    decorrelation against N, for a many-token system driven by one random-feature field, or
    by the exact field (--set model.noise=exact: all systems drawn jointly; the decorrelation
    stays random-feature, --set decorrelation=false leaves it out).

    Writes config.json, chaos.json (every table, exponent_coupling, exponent_coupling_ci),
    dataset.nc and chaos.png (and density.png when d = 3 is among dims). Needs POT
    (pip install 'stochformer[ot]'). Finished tasks are kept in
    OUT.tasks beside the output folder until the run completes, so an interrupted run continues
    when the same command is run again."""
    from ..experiments.chaos import NEEDS, ChaosConfig, run_chaos
    from ..plotting.chaos import plot_chaos, plot_density_s2

    cfg, folder = resolve("chaos", config_file, overrides, out, force, model=ChaosConfig, needs=NEEDS)
    store = task_store(folder)
    result = run_chaos(cfg, progress=not quiet, store=store, scheduler=scheduler)
    figures = {"chaos": lambda: plot_chaos(result)}
    if "initial" in result.clouds:
        figures["density"] = lambda: plot_density_s2(
            result.clouds["initial"], result.clouds["final"],
            rf"reference tokens on $S^2$ ($N_{{\mathrm{{ref}}}} = {cfg.model.N}$, one sample)")
    write_results(folder, force, result, figures, store, fmt)
    click.echo(f"chaos: {result.elapsed_s:.1f} s; coupling exponent {result.exponent_coupling:.3f} "
               f"{_interval(*result.to_dict()['exponent_coupling_ci'])} (d = {cfg.model.d}, target 1)")
    for d in cfg.dims:
        w = result.fits["w2"].get(str(d))
        if w:
            click.echo(f"  W2^2 exponent d = {d}: {w['exponent']:.3f} {_interval(*w['ci'])}"
                       f"  (r_d = {result.fits['r_d'][str(d)]['law']}: {result.fits['r_d'][str(d)]['exponent']:.3f}; "
                       f"S^{d - 1} rate {result.fits['sphere_rate'][str(d)]['law']}: {result.fits['sphere_rate'][str(d)]['exponent']:.3f})")
    click.echo(f"results in {folder}")


def _interval(lo: Optional[float], hi: Optional[float]) -> str:
    """``[lo, hi]``, or what stands instead of an interval the data do not give (too few samples)."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "(no interval: too few samples)"
    return f"[{lo:.3f}, {hi:.3f}]"
