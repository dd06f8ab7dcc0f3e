"""``stochformer pair``: the exact two-token theory (SPEC §8) of a configuration."""

from __future__ import annotations

import json

import click

from .common import config_options, fail_cleanly, resolve_config
from .rates import RATES_FIELDS, check_rates_fields

#: the fields ``pair`` reads: κ's, the attention's over the pair, the energy's and the queries'
PAIR_FIELDS = (*RATES_FIELDS, "noise", "noise_args", "mlp", "attention", "attention_kind", "beta", "N", "z0", "eps", "t")


def _fmt(v) -> str:
    if v is None:
        return "—"
    return f"{v:.8g}" if isinstance(v, float) else str(v)


@click.command(
    "pair",
    short_help='Exact theory of two tokens (SPEC §8): exponents, hitting probability, synchronisation time, energy.',
)
@config_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@fail_cleanly
def pair_cmd(config_file, overrides, as_json) -> None:
    """Print the exact theory of two tokens (SPEC §8) for a configuration: the exponents at z = 1 and
    z = -1, the probability of ending antipodal from z0, beta* (odd activations), the mean and sd of
    the time to reach z >= 1 - eps, the stationary law's status, E[z_t] and the exact expected energy
    at t with its long-time rate beside Theorem 1.4's bound.

    Fields as for ``rates`` (activation, d, sigma_U, sigma_W, noise_scale; attention, beta, gamma:
    softmax attention Q^T K = beta I, V = gamma I over the pair, gamma default 0 here; energy_beta and
    N for the energy) and the pair's own: z0 in (-1, 1) (default 0), eps in [1e-12, 2) (default 1e-3),
    t >= 0 (default 1). A quantity that does not exist is null (JSON) or — with a reason."""
    from ..experiments.pair import PairConfig, pair_report

    cfg = resolve_config(config_file, overrides, model=PairConfig, base={"gamma": 0.0, "N": 2})
    check_rates_fields(cfg.model_fields_set, PAIR_FIELDS, "pair")
    report = pair_report(cfg)
    if as_json:
        click.echo(json.dumps(report, allow_nan=False))
        return
    v = report["v"]
    click.echo(f"activation={cfg.activation} d={cfg.d} sigma_U={cfg.sigma_U} sigma_W={cfg.sigma_W} "
               f"noise_scale={cfg.noise_scale} beta={cfg.beta} v={v} z0={cfg.z0} eps={cfg.eps} t={cfg.t}")
    rows = [
        ("lambda_1", report["lambda_1"]), ("lambda_bar", report["lambda_bar"]),
        (f"exponent at z = 1 (lambda_1 - v), {report['diagonal']}", report["exponent_diagonal"]),
        (f"exponent at z = -1, {report['antipode']}", report["exponent_antipode"]),
        ("beta* (odd kernel: the antipode's threshold)", report["beta_star"]),
        (f"P(z -> -1 | z0) ({report['p_antipodal_status']})", report["p_antipodal"]),
        ("E tau, tau = first t with z >= 1 - eps", report["sync_time_mean"]),
        ("sd tau", report["sync_time_sd"]),
        ("P(tau < inf)", report["p_reach"]),
        ("E[tau | tau < inf]", report["sync_time_mean_given_reach"]),
        ("log10 E[tau | tau < inf] (finite where E tau passes float64)", report["sync_time_log10_mean_given_reach"]),
        ("sd[tau | tau < inf]", report["sync_time_sd_given_reach"]),
        (f"stationary mean ({report['stationary_reason']})", report["stationary_mean"]),
        (f"E z_t at t = {cfg.t}", report["mean_z_t"]),
        (f"E E_beta(mu^N_t), N = {cfg.N}, uniform tokens, t = 0", report["energy_0"]),
        (f"E E_beta(mu^N_t) at t = {cfg.t} ({report['energy_reason']})", report["energy_t"]),
        (f"long-time rate of E E_beta ({report['energy_rate_kind']})", report["energy_rate"]),
        ("Theorem 1.4 bound eps + lambda_bar'", report["lambda_bar_prime"]),
    ]
    for name, value in rows:
        click.echo(f"  {name:<72s} {_fmt(value)}")
