"""``stochformer bridge``: standard transformer blocks at random initialisation against the
paper's model and its limit SDE for the matched kernel (SPEC §7)."""

from __future__ import annotations

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, write_results


@click.command(
    "bridge",
    short_help="Standard transformer blocks at random initialisation against the paper's model and limit SDE (SPEC §7).",
)
@experiment_options
@format_option
@fail_cleanly
def bridge_cmd(config_file, overrides, out, force, quiet, fmt: str) -> None:
    """Run networks of fresh standard blocks (block = paper, encoder_post, encoder_pre, gpt2,
    llama; residual branches scaled by T/L and √(T/L), or gpt2_init) and record the tokens' mean
    pairwise cosine by depth beside the paper's model with the matched MLP and the limit SDE of the
    matched kernel, with a verdict per prediction at the last layer.

    Writes config.json, bridge.json (curves with SEs, verdict rows), dataset.nc (the per-sample curves) and the
    figure bridge.FORMAT."""
    from ..experiments.bridge import BridgeConfig, run_bridge
    from ..plotting.variants import plot_bridge

    cfg, folder = resolve("bridge", config_file, overrides, out, force, model=BridgeConfig)
    result = run_bridge(cfg, progress=not quiet)
    write_results(folder, force, result, {"bridge": lambda: plot_bridge(result)}, fmt=fmt)
    click.echo(f"bridge: {cfg.block}, d={cfg.d}, N={cfg.N}, m={cfg.m}, T={cfg.T}, {cfg.samples} networks per depth; "
               f"κ(1) on the unit sphere {result.kappa1:.4g}: {result.elapsed_s:.1f} s")
    for row in result.comparisons():
        lo, hi = row.ci if row.ci is not None else (float("nan"), float("nan"))
        click.echo(f"  {row.quantity}: measured {row.measured:.4f} [{lo:.4f}, {hi:.4f}], "
                   f"predicted {row.predicted:.4f}: {row.verdict}")
    click.echo(f"results in {folder}")
