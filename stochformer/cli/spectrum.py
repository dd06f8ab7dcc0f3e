"""``stochformer spectrum``: the Lyapunov spectrum of one token's tangent flow beside SPEC §8."""

from __future__ import annotations

import json

import click

from .common import experiment_options, fail_cleanly, format_option, resolve, write_results


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.5g}"


@click.command(
    "spectrum",
    short_help="Lyapunov spectrum of one token's tangent flow (Benettin's method) against the prediction (SPEC §8).",
)
@experiment_options
@format_option
@click.option("--json", "as_json", is_flag=True, help="Print spectrum.json on stdout instead of the table.")
@fail_cleanly
def spectrum_cmd(config_file, overrides, out, force, quiet, fmt: str, as_json: bool) -> None:
    """Measure the d − 1 Lyapunov exponents of one token's tangent flow (Benettin's method: the
    tangent map of every step, QR renormalisation) on the transformer or (dynamics=sde) the limit
    SDE, with the sum rule, the spacing κ' and the finite-time law of log|v_t| (variance rate
    κ + κ', mean-square rate g(2) = λ̄).

    Writes config.json, spectrum.json (lists measured, se, err, predicted, z; law: sum, spacing,
    variance_rate, moment_exponent_2; levels: the exponents at every step count and width),
    dataset.nc and spectrum.png. Rates are per unit time t = layer · T/L, extrapolated to Δt → 0
    from L, L/2, L/4 steps (extrapolate=false: at L) and, for the transformer, to 1/m → 0 from
    widths m, m/2, m/4 (extrapolate_width=false: at m); z = (measured − predicted)/√(SE² + err²)."""
    from ..experiments.spectrum import SpectrumConfig, run_spectrum
    from ..plotting.spectrum import plot_spectrum

    cfg, folder = resolve("spectrum", config_file, overrides, out, force, model=SpectrumConfig)
    result = run_spectrum(cfg, progress=not quiet and not as_json)
    write_results(folder, force, result, {"spectrum": lambda: plot_spectrum(result)}, fmt=fmt)
    if as_json:
        from ..io.store import to_jsonable

        click.echo(json.dumps(to_jsonable(result.to_dict())))
        return
    click.echo(f"{cfg.model.dynamics}, {cfg.model.activation}, d={cfg.model.d}: {result.elapsed_s:.1f} s")
    click.echo(f"  {'quantity':<36s} {'measured':>11s} {'SE':>9s} {'err':>9s} {'predicted':>11s} {'z':>7s}")
    for row in result.table():
        click.echo(f"  {row['quantity']:<36s} {_fmt(row['measured']):>11s} {_fmt(row['se']):>9s} {_fmt(row['err']):>9s} "
                   f"{_fmt(row['predicted']):>11s} {_fmt(row['z']):>7s}")
    click.echo(f"results in {folder}")
