"""The report's "exact theory" section (``exact-theory``, SPEC §8): the two-token diffusion's
probability of ending antipodal across β*, the full Lyapunov spectrum, the exact energy decay beside
Theorem 1.4's bound, the order-to-chaos phase diagram and (quick and full profiles) the stability
of a cluster under repulsive attention at the paper's settings, each exact prediction beside a simulation
of the same system ([`run_exact`][stochformer.experiments.exact.run_exact]). Registered last (the
order of [`stochformer.report.sections`][stochformer.report.sections]).

The rows ([`theory_rows`][stochformer.report.sections.theory.theory_rows]) are one family, judged as
every section's (Holm's step-down at the family-wise level 5%): where every prediction below is
true at the sizes run (its finite-size bias inside its tolerance), the chance that some row of the
section "does not hold" is at most 5%, and each row alone fails with chance at most 5%.
"""

from __future__ import annotations

import math
from typing import Any

from ...experiments import exact as exact_exp
from ...experiments.cluster_spectrum import PAPER_SETTINGS, ClusterStability, stability_rows
from ...experiments.exact import ExactConfig
from ...measure.stats import MIN_SAMPLES
from ...measure.verdict import Comparison
from ...plotting import spectrum as spectrum_plots
from ...plotting import theory as theory_plots
from ..profiles import sizes
from ..registry import Section, SectionContext, SectionOutput, figure_png, register
from .rows import extrapolated_rate_row, rate_row

#: absolute allowance of P(z_T < 0) against the exact law at T: the first-order time-step bias of
#: the runs (measured at Δt = 0.05 on erf, d = 4: below 0.015 at every β of the quick profile)
PAIR_TOL = 0.02
#: allowance of the measured E[E_β(μ_t)] against the exact value, as a fraction of it. The energy
#: runs carry the Heun step's first-order bias (benchmarks/energy_gap.py: erf, d = 4, N = 8,
#: σ_U = σ_W = 1, 4000 runs per step: at t = 0.5 +8.5%, +5.8%, +3.1% (SE 1.2%) at Δt = 0.02, 0.01,
#: 0.005; up to +23% at t = 2), which the runs remove by Richardson over L and L/2
#: (`ExactConfig.energy_levels`); this allows the second-order residual (from Δt = 0.02, 0.01:
#: +3.0 ± 2.7% at t = 0.5, −9 ± 5% at t = 1; from 0.01, 0.005: +0.3 ± 2.7%, +7 ± 5%)
ENERGY_RTOL = 0.10


def pair_rows(pair: dict) -> list[Comparison]:
    """One row per β: the fraction of pairs with z_T < 0 (Clopper–Pearson 95% interval) "matches" the
    exact P(Z_T < 0) with tol `PAIR_TOL`, judged against the pair without attention (the
    alternative: attention plays no part); fewer than ``MIN_SAMPLES`` pairs: inconclusive.

    Parameters
    ----------
    pair : dict
        ``ExactResult.pair``.

    Returns
    -------
    list of Comparison
        The rows.
    """
    rows = []
    star = pair.get("beta_star")
    for i, beta in enumerate(pair["beta"]):
        n = pair["n"][i]
        side = "" if star is None else (" (β > β*: the antipode attracts)" if beta > star else " (β < β*: the antipode repels)")
        pa = pair["p_antipodal"][i]
        note = (f"exact law at T = {pair['T']:g} (forward equation) from z₀ = {pair['z0']:g}; P(ending antipodal) = "
                + ("undefined (recurrent)" if pa is None else f"{pa:.3g}") + side
                + f"; tol = {PAIR_TOL:g} (time-step bias, Δt = {pair['dt']:.3g}); alternative: no attention "
                  f"({pair['p_T_free'][i]:.3g}); Clopper–Pearson interval")
        name = f"P(z_T < 0) at β = {beta:g} ({pair['dynamics']}) vs the exact law"
        if n < MIN_SAMPLES:
            rows.append(Comparison(name, pair["p_T"][i], pair["p_hat"][i], None, tol=PAIR_TOL, n=n, note=note,
                                   alternative=pair["p_T_free"][i]))
            continue
        rows.append(Comparison(name, pair["p_T"][i], pair["p_hat"][i], tuple(pair["ci"][i]), rule="matches", tol=PAIR_TOL,
                               alternative=pair["p_T_free"][i], note=note))
    return rows


def spectrum_rows(spec: dict) -> list[Comparison]:
    """Every λ̂_i (Δt → 0) against SPEC §8's λ_i, and the sum rule and the mean spacing κ', as
    [`extrapolated_rate_row`][stochformer.report.sections.rows.extrapolated_rate_row] (Student's t over the samples).

    Parameters
    ----------
    spec : dict
        The spectrum part of ``ExactResult.to_dict()``.

    Returns
    -------
    list of Comparison
        The rows.
    """
    n = spec["samples"]
    rows = [extrapolated_rate_row(f"λ̂_{i + 1} vs λ_{i + 1} = ((d−1−2i)/2)κ' − ((d−1)/2)κ (d = {spec['d']})", p, m, s, e, n=n)
            for i, (m, s, e, p) in enumerate(zip(spec["measured"], spec["se"], spec["err"], spec["predicted"]))]
    for key, text in (("sum", "sum of the spectrum vs −(d−1)κ'/2 − (d−1)²κ/2"), ("spacing", "mean spacing vs κ'")):
        law = spec["law"][key]
        rows.append(extrapolated_rate_row(text, law["predicted"], law["measured"], law["se"], law["err"], n=n))
    return rows


def energy_rows(energy: dict) -> list[Comparison]:
    """The measured E[E_β(μ_t)] at every kept t > 0 "matches" the exact value (tol `ENERGY_RTOL`·exact,
    Student's t over the runs), and Theorem 1.4's bound on the measured mean rate
    log(mean E_T/E_0)/T "at_most" λ̄' (delta-method SE), judged against no decay when λ̄' < 0.

    Parameters
    ----------
    energy : dict
        ``ExactResult.energy``.

    Returns
    -------
    list of Comparison
        The rows.
    """
    n = energy["n"]
    steps = energy.get("levels", [])
    how = f"Δt → 0 from {steps[0]} and {steps[1]} steps" if len(steps) == 2 else "no Δt extrapolation"
    rows = [rate_row(f"E[E_β(μ_t)] at t = {t:g} (N = {energy['N']}) vs exact", p, m, s, ENERGY_RTOL, n=n,
                     note=f"exact: backward equation, every pair the pair diffusion; measured: {how}; tol = "
                          f"{ENERGY_RTOL:g}·exact (the step's residual bias)")
             for t, p, m, s in zip(energy["times"], energy["exact"], energy["mean"], energy["se"]) if t > 0]
    ratio, se, T = energy["ratio"], energy["ratio_se"], energy["T"]
    bound = energy["lambda_bar_prime"]
    name = "mean rate log(E[E_T/E_0])/T vs Theorem 1.4's λ̄'"
    note = (f"exact long-time rate {energy['rate']:.3g} ({energy['rate_kind']}): the bound is loose by "
            f"{bound - energy['rate']:.3g}")
    if ratio <= 0 or n < MIN_SAMPLES:
        rows.append(Comparison(name, bound, None, None, rule="at_most", n=n, note=note))
    else:
        rate, rate_se = math.log(ratio) / T, se / (ratio * T)
        rows.append(Comparison.from_mean_se(name, bound, rate, rate_se, n=n, rule="at_most",
                                            alternative=0.0 if bound < 0 else None, note=note))
    return rows


def phase_rows(points: list[dict]) -> list[Comparison]:
    """At every measured (g, σ_U): λ̂₁ (Δt → 0) "matches" the formula's λ₁ (tol 3%), and its sign is
    the predicted phase ("below" 0 on the ordered side λ₁ < 0, "above" 0 on the chaotic side).

    Parameters
    ----------
    points : list of dict
        ``ExactResult.points``.

    Returns
    -------
    list of Comparison
        The rows.
    """
    rows = []
    for pt in points:
        where = f"g = {pt['gain']:g}, σ_U = {pt['sigma_U']:g}"
        rows.append(extrapolated_rate_row(f"λ̂₁ at {where} vs λ₁(g)", pt["predicted"], pt["measured"], pt["se"], pt["err"],
                                          n=pt["n"]))
        half = pt["se"] * 1.959963984540054 + pt["err"]
        chaotic = pt["predicted"] > 0
        rows.append(Comparison(f"phase at {where}: λ̂₁ {'above' if chaotic else 'below'} 0 "
                               f"({'chaos' if chaotic else 'synchronisation by noise'})", 0.0, pt["measured"],
                               (pt["measured"] - half, pt["measured"] + half), rule="above" if chaotic else "below",
                               note="the side of the critical gain g_c(σ_U) the formula puts the point on"))
    return rows


def cluster_rows(clusters: list[dict]) -> list[Comparison]:
    """Per measured setting, a cluster under V = −δI: the relative modes' top exponent "below" 0 where
    λ₁ < −δ predicts a stable cluster, "above" 0 where it predicts one that spreads
    ([`stability_rows`][stochformer.experiments.cluster_spectrum.stability_rows]).

    Parameters
    ----------
    clusters : list of dict
        ``ExactResult.clusters`` (each a `ClusterStability` as a dict).

    Returns
    -------
    list of Comparison
        The rows.
    """
    return stability_rows([ClusterStability(**c) for c in clusters])


def theory_rows(numbers: dict) -> list[Comparison]:
    """Every row of the section from [`ExactResult`][stochformer.experiments.exact.ExactResult]'s
    ``to_dict()``: `pair_rows`, `spectrum_rows`, `energy_rows`, `phase_rows`, `cluster_rows`.

    Parameters
    ----------
    numbers : dict
        ``ExactResult.to_dict()``.

    Returns
    -------
    list of Comparison
        The rows.
    """
    return (pair_rows(numbers["pair"]) + spectrum_rows(numbers["spectrum"]) + energy_rows(numbers["energy"])
            + phase_rows(numbers["points"]) + cluster_rows(numbers.get("clusters", [])))


def _run_theory(cfg: Any, ctx: SectionContext) -> SectionOutput:
    res = exact_exp.run_exact(cfg, progress=ctx.progress)
    numbers = res.to_dict()
    pair, energy = numbers["pair"], numbers["energy"]
    star = pair["beta_star"]
    figs = [
        figure_png(theory_plots.plot_antipodal(pair), "exact-antipodal",
                   "Two tokens: the probability of ending antipodal against the attention's β (scale function), the "
                   "exact P(Z_T < 0) at the runs' horizon and the simulated fraction (95% Clopper–Pearson intervals); "
                   "dotted: the threshold β*"),
        figure_png(spectrum_plots.plot_spectrum(res.spectrum), "exact-spectrum",
                   "The Lyapunov spectrum of one token: measured (Benettin, Δt → 0, ± 2 SE) against SPEC §8's formula "
                   "(left); the log-growth per direction with the predicted slopes (right)"),
        figure_png(theory_plots.plot_energy(energy), "exact-energy",
                   "E[E_β(μ_t)] without attention from uniform tokens: exact (backward equation), measured (± 2 SE) "
                   "and Theorem 1.4's bound"),
        figure_png(theory_plots.plot_phase_measured(res.phase, numbers["points"]), "exact-phase",
                   "The order-to-chaos transition: λ₁ over the gain g and σ_U from the formula, its zero contour "
                   "g_c(σ_U), and λ̂₁ measured at the marked points (measured, predicted in brackets)"),
    ]
    tables = [{"title": "Two tokens across β*: simulated against exact",
               "columns": ["β", "P(ending antipodal)", "exact P(Z_T < 0)", "measured", "95% CI", "pairs"],
               "rows": [[b, pa, p, h, f"[{lo:.3f}, {hi:.3f}]", n] for b, pa, p, h, (lo, hi), n in zip(
                   pair["beta"], pair["p_antipodal"], pair["p_T"], pair["p_hat"], pair["ci"], pair["n"])]},
              {"title": "Energy: exact long-time rate beside Theorem 1.4's bound",
               "columns": ["σ_U = σ_W", "N", "λ̄", "exact rate", "kind", "λ̄' (bound)", "bound − rate"],
               "rows": [[energy["sigma_U"], energy["N"], energy["lambda_bar"], energy["rate"], energy["rate_kind"],
                         energy["lambda_bar_prime"], energy["lambda_bar_prime"] - energy["rate"]]]}]
    if numbers.get("clusters"):
        tables.append({"title": "A cluster under repulsive attention V = −δI: stable iff λ₁ < −δ (limit SDE, N = 4)",
                       "columns": ["activation", "d", "σ_U = σ_W", "λ₁", "−δ", "predicted", "λ₁ + δ",
                                   "measured relative exponent", "SE", "contracted"],
                       "rows": [[c["activation"], c["d"], c["sigma"], c["lambda_1"], -c["delta"],
                                 "stable" if c["predicted_stable"] else "spreads", c["lambda_1"] + c["delta"], c["measured"],
                                 c["se"], c["contracted"]] for c in numbers["clusters"]]})
    notes = [("β* = " + (f"{star:.4g}" if star is not None else "none (κ not odd, or no attractive attention)")
              + f": below it the antipode repels and two tokens synchronise almost surely; above it they end antipodal "
                f"with the scale function's probability. At the finite horizon T = {pair['T']:g} the mass below 0 is "
                "that of the exact law at T (forward equation), which the rows test; it tends to P(ending antipodal)."),
             "Rows are one family (Holm at 5% family-wise): where every prediction holds at these sizes, some row "
             "fails in at most 5% of runs."]
    return SectionOutput(numbers, theory_rows(numbers), figs, res.provenance, {"seed": cfg.model.seed}, notes, tables)


register(Section(
    name="exact-theory",
    title="Exact theory: two tokens, the spectrum, the energy, order to chaos",
    spec="SPEC §8 (exact results)",
    claim="The isotropic noise makes the two-token overlap a one-dimensional diffusion: its law at any time and its "
          "probability of ending antipodal (positive only above β* for an odd κ with attractive attention) are exact; "
          "one token's Lyapunov spectrum is λ_i = ((d−1−2i)/2)κ' − ((d−1)/2)κ; the expected energy without attention is "
          "exact for any N and decays below Theorem 1.4's bound; λ₁ changes sign at the critical gain g_c(σ_U).",
    model=ExactConfig,
    sizes=sizes(
        tiny={"batch": 200, "L": 100, "T": 10.0, "betas": [0.5, 2.0], "spectrum_batch": 100, "spectrum_L": 64,
              "energy_batch": 64, "energy_T": 1.0, "energy_L": 100, "energy_every": 50, "gains": [0.5, 4.0, 8.0, 12.0],
              "sigmas": [0.0, 0.5], "beta_grid": 21, "phase_points": [[2.0, 0.0], [10.0, 0.0]]},
        quick={"batch": 1000, "L": 200, "T": 10.0, "betas": [0.5, 1.0, 1.5, 2.0, 4.0], "spectrum_batch": 1000,
               "spectrum_L": 128, "energy_batch": 200, "energy_L": 400, "energy_every": 100,
               "gains": [k / 2 for k in range(1, 25)], "sigmas": [k / 10 for k in range(7)],
               "cluster_settings": [["relu", 5, 0.1], ["sigmoid", 64, 0.0]]},
        full={"batch": 10000, "L": 400, "T": 10.0, "betas": [0.5, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0],
              "spectrum_batch": 4000, "spectrum_L": 256, "energy_batch": 400, "energy_L": 800, "energy_every": 100,
              "gains": [k / 4 for k in range(1, 57)], "sigmas": [k / 20 for k in range(13)],
              "phase_points": [[2.0, 0.0], [6.0, 0.0], [10.0, 0.0], [12.0, 0.5]],
              "cluster_settings": [list(s) for s in PAPER_SETTINGS]},
    ),
    run=_run_theory,
))
