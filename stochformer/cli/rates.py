"""``stochformer rates``: κ(1), κ'(1), λ₁, λ̄, λ̄' (SPEC §2, §5)."""

from __future__ import annotations

import json
import math

import click


class _Activations(click.Choice):
    """The activation names, read from :mod:`stochformer.activations` (which needs torch) only when
    this command parses its options or shows its help, not when ``stochformer --help`` lists it."""

    def __init__(self) -> None:
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        from ..activations import ACTIVATIONS

        return tuple(sorted(ACTIVATIONS))


@click.command("rates")
@click.option("--activation", type=_Activations(), default="relu", show_default=True)
@click.option("--d", "d", type=click.IntRange(min=2), default=3, show_default=True, help="dimension, >= 2")
@click.option("--sigma-U", "sigma_U", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--sigma-W", "sigma_W", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--noise-scale", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--beta", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="β of E_β in Theorem 1.4's bound λ̄'")
@click.option("--gamma", type=float, default=0.0, show_default=True,
              help="attention V = γI: adds −γ to λ₁ and −2γ to λ̄ (the *_total values)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def rates_cmd(activation, d, sigma_U, sigma_W, noise_scale, beta, gamma, as_json) -> None:
    """Print the noise kernel at 1 and the synchronisation rates."""
    for name, value in (("--sigma-U", sigma_U), ("--sigma-W", sigma_W), ("--noise-scale", noise_scale),
                        ("--beta", beta), ("--gamma", gamma)):
        if not math.isfinite(value):
            raise click.BadParameter(f"must be a finite number (got {value})", param_hint=name)
    from ..kernel import NoiseKernel, rates

    r = rates(NoiseKernel(activation, d, sigma_U, sigma_W, noise_scale), beta=beta, gamma=gamma)
    if as_json:
        click.echo(json.dumps(r.to_dict()))
        return
    click.echo(f"activation={activation} d={d} sigma_U={sigma_U} sigma_W={sigma_W} noise_scale={noise_scale}")
    rows = [
        ("kappa(1)", r.kappa), ("kappa'(1)", r.kappa_prime),
        ("lambda_1  (Lyapunov exponent)", r.lambda_1), ("lambda_bar (first-moment rate)", r.lambda_bar),
        (f"lambda_bar' (Theorem 1.4 bound, beta={beta})", r.lambda_bar_prime),
        (f"lambda_1 - gamma (gamma={gamma})", r.lambda_1_total), ("lambda_bar - 2 gamma", r.lambda_bar_total),
    ]
    for name, value in rows:
        click.echo(f"  {name:<44s} {value: .8g}")
