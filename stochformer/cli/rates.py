"""``stochformer rates``: κ(1), κ'(1), λ₁, λ̄, λ̄' (SPEC §2, §5) of a run configuration."""

from __future__ import annotations

import json

import click

from .common import config_options, fail_cleanly, resolve_config


@click.command("rates")
@config_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@fail_cleanly
def rates_cmd(config_file, overrides, as_json) -> None:
    """Print the noise kernel at 1 and the synchronisation rates of a configuration (fields
    activation, d, sigma_U, sigma_W, noise_scale; energy_beta is the β of Theorem 1.4's bound λ̄';
    gamma the attention V = γI, default 0 here, which adds −γ to λ₁ and −2γ to λ̄)."""
    from ..config.build import make_kernel
    from ..model.kernel import rates

    cfg = resolve_config(config_file, overrides, base={"gamma": 0.0})
    r = rates(make_kernel(cfg), beta=cfg.energy_beta, gamma=cfg.gamma_value)
    if as_json:
        click.echo(json.dumps(r.to_dict()))
        return
    click.echo(f"activation={cfg.activation} d={cfg.d} sigma_U={cfg.sigma_U} sigma_W={cfg.sigma_W} noise_scale={cfg.noise_scale}")
    rows = [
        ("kappa(1)", r.kappa), ("kappa'(1)", r.kappa_prime),
        ("lambda_1  (Lyapunov exponent)", r.lambda_1), ("lambda_bar (first-moment rate)", r.lambda_bar),
        (f"lambda_bar' (Theorem 1.4 bound, beta={cfg.energy_beta})", r.lambda_bar_prime),
        (f"lambda_1 - gamma (gamma={r.gamma})", r.lambda_1_total), ("lambda_bar - 2 gamma", r.lambda_bar_total),
    ]
    for name, value in rows:
        click.echo(f"  {name:<44s} {value: .8g}")
