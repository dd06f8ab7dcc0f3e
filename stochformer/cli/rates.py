"""``stochformer rates``: κ(1), κ'(1), λ₁, λ̄, λ̄' (SPEC §2, §5) of a run configuration, and the
Lyapunov spectrum and finite-time law of one token's tangent flow (SPEC §8)."""

from __future__ import annotations

import json
import math

import click

from .common import config_options, fail_cleanly, print_config_and_exit, resolve_config


#: the fields rates reads (the noise kernel's, ``config.build.KERNEL_FIELDS`` — not imported: the CLI
#: loads only click at start, tests/test_cli_conventions.py keeps the two equal —, the β of E_β and
#: the attention's γ); any other is refused
RATES_FIELDS = ("activation", "d", "sigma_U", "sigma_W", "noise_scale", "gain", "energy_beta", "gamma")
#: the largest d of ``rates``: it lists the d − 1 Lyapunov exponents (10 s and 1.4 GB at 10⁷)
RATES_D_MAX = 10**7
#: the JSON keys of ``rates(...).to_dict()`` renamed after the field they echo (``beta`` is E_β's β)
RENAMED_KEYS = {"beta": "energy_beta"}


def check_rates_fields(given: set[str], fields: tuple[str, ...] = RATES_FIELDS, command: str = "rates") -> None:
    """``click.UsageError`` naming every field in ``given`` that ``command`` does not read (one error)."""
    unused = sorted(set(given) - set(fields))
    if unused:
        raise click.UsageError(
            f"invalid configuration: {', '.join(unused)}: {'has' if len(unused) == 1 else 'have'} no effect in {command}, "
            f"which reads only {', '.join(fields)}; remove {'it' if len(unused) == 1 else 'them'}"
            + ("; the β of E_β and of Theorem 1.4's bound is energy_beta (beta is the attention's)"
               if "beta" in unused else ""))


def _spectrum_text(values: list[float]) -> str:
    """The spectrum on one line: every exponent up to 8 of them, else the first three and the last."""
    shown = [f"{v:.6g}" for v in values]
    return ", ".join(shown) if len(shown) <= 8 else ", ".join(shown[:3]) + f", …, {shown[-1]}"


@click.command(
    "rates",
    short_help="Noise kernel κ(1), κ'(1), the synchronisation rates λ₁, λ̄, λ̄' and the Lyapunov spectrum (no simulation).",
)
@config_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@fail_cleanly
def rates_cmd(config_file, overrides, as_json) -> None:
    """Print the noise kernel at 1 and the synchronisation rates of a configuration (fields
    activation, d, sigma_U, sigma_W, gain, noise_scale; energy_beta is the β of Theorem 1.4's bound λ̄';
    gamma the attention V = γI, default 0 here, which adds −γ to λ₁ and −2γ to λ̄; any other field
    is refused, as it would have no effect), and the noise's
    Lyapunov spectrum λ_i = ((d−1−2i)/2)κ' − ((d−1)/2)κ, i = 1..d−1 (``lyapunov_spectrum``), with
    the finite-time law of log|v_t|: variance rate κ + κ', g(2) = λ̄, stability index p* = −2λ₁/(κ + κ')
    (null without noise). ``gain`` g is the std of the inner weights U (variance g²); g_c is the
    critical gain where λ₁ changes sign, searched on (0, 100] (``critical_gain``; null where λ₁
    keeps its sign there; it does not depend on the config's own gain)."""
    from ..config.build import make_kernel
    from ..model.kernel import G_MAX, critical_gain, lyapunov_spectrum, moment_exponent, rates, stability_index

    cfg = resolve_config(config_file, overrides, base={"gamma": 0.0}, print_it=False)
    check_rates_fields(cfg.model_fields_set)
    if cfg.d > RATES_D_MAX:
        raise click.UsageError(f"invalid configuration: d: rates lists the d - 1 Lyapunov exponents: d <= {RATES_D_MAX} "
                               f"(got {cfg.d})")
    print_config_and_exit({name: getattr(cfg, name) for name in RATES_FIELDS})
    r = rates(make_kernel(cfg), beta=cfg.energy_beta, gamma=cfg.gamma_value)
    spectrum = lyapunov_spectrum(r.kappa, r.kappa_prime, cfg.d)
    p_star = stability_index(r.kappa, r.kappa_prime, cfg.d)
    extra = {
        "lyapunov_spectrum": spectrum,
        "lyapunov_sum": math.fsum(spectrum),
        "log_norm_variance_rate": r.kappa + r.kappa_prime,
        "moment_exponent_2": moment_exponent(2.0, r.kappa, r.kappa_prime, cfg.d),
        "stability_index": None if math.isnan(p_star) else p_star,
        "g_c": critical_gain(make_kernel(cfg)),
    }
    if as_json:
        click.echo(json.dumps({RENAMED_KEYS.get(k, k): v for k, v in {**r.to_dict(), **extra}.items()}))
        return
    click.echo(f"activation={cfg.activation} d={cfg.d} sigma_U={cfg.sigma_U} sigma_W={cfg.sigma_W} noise_scale={cfg.noise_scale} "
               f"gain={cfg.gain}")
    rows = [
        ("kappa(1)", r.kappa), ("kappa'(1)", r.kappa_prime),
        ("lambda_1  (Lyapunov exponent)", r.lambda_1), ("lambda_bar (first-moment rate)", r.lambda_bar),
        (f"lambda_bar' (Theorem 1.4 bound, beta={cfg.energy_beta})", r.lambda_bar_prime),
        (f"lambda_1 - gamma (gamma={r.gamma})", r.lambda_1_total), ("lambda_bar - 2 gamma", r.lambda_bar_total),
        ("sum of the Lyapunov spectrum", extra["lyapunov_sum"]),
        ("kappa + kappa' (variance rate of log|v|)", extra["log_norm_variance_rate"]),
        ("g(2) (mean-square growth of |v|)", extra["moment_exponent_2"]),
        ("p* = -2 lambda_1/(kappa + kappa')", p_star),
    ]
    for name, value in rows:
        click.echo(f"  {name:<44s} {value: .8g}")
    click.echo(f"  {'Lyapunov spectrum (spacing kappa_prime)':<44s} {_spectrum_text(spectrum)}")
    g_c = extra["g_c"]
    click.echo(f"  {'g_c (lambda_1 = 0 as the gain grows)':<44s} " + (f"{g_c: .8g}" if g_c is not None else
                                                                     f"none on (0, {G_MAX:g}]"))
