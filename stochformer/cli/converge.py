"""``stochformer converge``: the pathwise error of Theorem 1.1 over depths and widths."""

from __future__ import annotations

from typing import Optional

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, scheduler_option, task_store, write_results


def _ci(entry: dict) -> str:
    return f"{entry['value']:.3f}  95% CI [{entry['ci'][0]:.3f}, {entry['ci'][1]:.3f}]"


@click.command("converge", short_help='Convergence of the transformer to the limit SDE in depth L and width m (Theorem 1.1).')
@experiment_options
@scheduler_option
@format_option
@fail_cleanly
def converge_cmd(config_file, overrides, out, force, quiet, scheduler: Optional[str], fmt: str) -> None:
    """Couple the transformer (depth L, width m) with the limit SDE through the same normals
    (SPEC §3) and measure E sup (1/N) Σ|X − X̄|² over the grid depths × (widths, ∞), sup over layer
    times and over continuous time.

    Writes config.json, convergence.json (table with SEs; exponent_L, exponent_L_ci, exponent_m,
    exponent_m_ci; fits a/L + b/m and a log L/L + b/m), dataset.nc and convergence.png. Finished
    tasks are kept in OUT.tasks beside the output folder until the run completes, so an interrupted
    run continues when the same command is run again."""
    from ..experiments.converge import ConvergeConfig, run_converge
    from ..plotting.converge import plot_convergence

    cfg, folder = resolve("converge", config_file, overrides, out, force, model=ConvergeConfig)
    store = task_store(folder)
    result = run_converge(cfg, progress=not quiet, store=store, scheduler=scheduler)
    write_results(folder, force, result, {"convergence": lambda: plot_convergence(result)}, store, fmt)
    f = result.fits
    run = cfg.model
    click.echo(f"converge: N={run.N}, d={run.d}, T={run.T}, {run.batch} samples, depths {result.depths}, "
               f"widths {sorted(cfg.widths)} and ∞, {run.integrator} SDE with {cfg.refine} steps per layer: "
               f"{result.elapsed_s:.1f} s")
    click.echo(f"  exponent in L (m = ∞, layer times):      {_ci(f['exponent_L'])}")
    click.echo(f"  exponent in L (m = ∞, continuous time):  {_ci(f['exponent_L_continuous'])}")
    click.echo(f"  exponent in L (m = {f['exponent_L_large_m']['m']}, layer times):    {_ci(f['exponent_L_large_m'])}")
    click.echo(f"  exponent in m (L = {f['exponent_m']['L']}, layer times):    {_ci(f['exponent_m'])}")
    for kind in ("layer", "continuous"):
        a = f[f"additive_{kind}"]
        click.echo(f"  fit ({kind}) err ≈ {a['form']}: a = {_ci(a['a'])}, b = {_ci(a['b'])}, "
                   f"max relative residual {a['max_rel_residual']:.2f}")
    click.echo(f"results in {folder}")
