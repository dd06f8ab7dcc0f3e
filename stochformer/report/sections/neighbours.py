"""The report's section on the neighbouring stochastic limits (``neighbours``, docs/neighbours.md):
homogenized transformers (Koubbi, Geshkovski, Rigollet), random quadratic forms on the sphere (Engel
& Shalova; Shalova), value-matrix noise and independent noise, each against its own published or
exact prediction ([`run_neighbours`][stochformer.experiments.neighbours.run_neighbours]). Registered
last (the order of [`stochformer.report.sections`][stochformer.report.sections]).

The rows ([`NeighboursResult.rows`][stochformer.experiments.neighbours.NeighboursResult.rows]) are one
family, judged as every section's (Holm's step-down at the family-wise level 5%).
"""

from __future__ import annotations

from typing import Any

from ...experiments.neighbours import NeighboursConfig, NeighboursResult, run_neighbours
from ...plotting import neighbours as plots
from ...theory.value_noise import critical_beta
from ..profiles import sizes
from ..registry import Section, SectionContext, SectionOutput, figure_png, register


def _run_neighbours(cfg: Any, ctx: SectionContext) -> SectionOutput:
    return neighbours_output(run_neighbours(cfg), cfg.seed)


def neighbours_output(res: NeighboursResult, seed: int) -> SectionOutput:
    """The section's output from the checks ``res``: their numbers, rows (one family), five figures,
    the value-noise table and the notes.

    Parameters
    ----------
    res : NeighboursResult
        The checks of [`run_neighbours`][stochformer.experiments.neighbours.run_neighbours].
    seed : int
        The run's seed (the config's ``seed``), recorded as the section's seeds.

    Returns
    -------
    SectionOutput
        Numbers, judged rows, figures, provenance, seeds, notes and tables.
    """
    numbers = res.to_dict()
    curves = numbers["curves"]
    figs = [
        figure_png(plots.plot_logistic(numbers["overlap"], curves["logistic"]), "logistic",
                   "Homogenized attention at β = 0: the mean overlap m(t) (± 2 SE) against the logistic law on "
                   "τ = σ_V²(d − 1)t, with the O(1/d) band the rows allow"),
        figure_png(plots.plot_large_beta(numbers["large_beta"], curves["linear"], curves["aligned"],
                                         run=numbers["aligned"]), "large-beta",
                   "Homogenized attention at large β: the change of a pair's E z and E z² on the slow time s = t/d against the linear "
                   "kernel's exact law (left); P(aligned | u₀) from the linear kernel's scale function against "
                   "arcsin(u₀)/π + ½ (right), with the layers' long run at large d where it was run"),
        figure_png(plots.plot_attractor(numbers["unforced"], numbers["forced"], curves), "attractor",
                   "Random quadratic forms: E dist(X_t, A) simulated (± 2 SE), exact, and the published bounds "
                   "(π/√2)e^{−t/2} (unforced) and π e^{−λ_γ t} (forced, n = d)"),
        figure_png(plots.plot_value_transition(curves["value"], numbers["value"]), "value",
                   "Value-matrix noise: P(antipodal | z₀ = 0) over (β, d) from the scale function, zero left of the "
                   "threshold (d − 2) sech 2β = 1; the simulated fractions with z_T < 0 at the runs (the exact law at T in "
                   "brackets)"),
        figure_png(plots.plot_contrast(numbers["contrast"]), "contrast",
                   "Common against independent noise of one ReLU kernel (λ₁ < 0): E z_T simulated (± 2 SE) and exact"),
    ]
    lb = numbers["large_beta"]
    tables = [{"title": "Value-matrix noise: pairs from z₀ = 0 across the threshold",
               "columns": ["d", "β", "β_c(d)", "P(antipodal)", "exact P(z_T < 0)", "measured", "pairs", "Δt",
                           "undecided"],
               "rows": [[v["d"], v["beta"], b, v["predicted"], v["exact"], v["antipodal"] / v["pairs"], v["pairs"],
                         v["dt"], v["undecided"]]
                        for v, b in zip(numbers["value"], [critical_beta(int(v["d"])) for v in numbers["value"]])]}]
    weak = numbers["weak"]
    if weak is not None:
        tables.append({"title": "Homogenized layers: E z² at s = {:g} against the residual step η (fit E₀ + C η^p: "
                                "p = {:.2f}, 95% interval [{:.2f}, {:.2f}])".format(weak["s"], weak["fit"]["exponent"],
                                                                                 *weak["fit"]["ci"]),
                       "columns": ["η", "layers", "E z²", "SE", "E z² − limit", "E z", "SE (E z)"],
                       "rows": [[e, round(weak["s"] * weak["d"] / e), m, se, m - weak["exact"], mz, sz]
                                for e, m, se, mz, sz in zip(weak["etas"], weak["mean"], weak["se"], weak["mean_z"],
                                                            weak["se_z"])]})
    al = numbers["aligned"]
    if al is not None:
        tables.append({"title": "Homogenized layers at large d (Gram chain): pairs from z₀ = {:g} at s = {:g}".format(
                           al["z0"], al["s"]),
                       "columns": ["d", "η", "layers", "pairs", "P(z_s > 0)", "linear kernel at s", "P(aligned)",
                                   "|z_s| < 0.9"],
                       "rows": [[al["d"], al["eta"], round(al["s"] * al["d"] / al["eta"]), al["pairs"],
                                 al["above"] / al["pairs"], al["exact"], al["limit"], al["undecided"]]]})
    notes = [f"Homogenized attention (our reading of the step: covariance η σ_V² per unit of layer time, tied "
             f"A = WWᵀ, σ_V² = 1/d): the overlaps move on the time t·d at large β; the pair runs to t = s·d = "
             f"{lb['s'] * lb['d']:g} (s = {lb['s']:g}), short of the finite-d zone 1 − z ≲ 18/d where the tokens "
             "partly attend to each other.",
             "Homogenized layers, weak error: the discrete layers x ← LN(x + ΔW), one per η, at a fixed time; the "
             "issue's η·max(η, α) read as the error at a fixed time predicts p = 2 (α ∝ η), a first-order error p = 1; "
             "E₀ absorbs the finite-d bias of the limit. Not run at the tiny size (tens of seconds).",
             "Homogenized layers at large d: the pair's Gram matrix is a Markov chain of its own (rotation invariance), "
             "drawn exactly in law at O(1) cost per pair and layer whatever d, so the long run reaches d = 1024 (quick) "
             "and 4096 (full); its row tests P(z_s > 0) against the linear kernel's law at s, whose long-time value "
             "is the published arcsin(z₀)/π + ½. Not run at the tiny size.",
             "Value-matrix noise: the threshold (d − 2) sech 2β = 1 is derived here (docs/neighbours.md); the cited "
             "paper's own threshold was not available to us, so we do not claim that it is theirs.",
             "Rows are one family (Holm at 5% family-wise): where every prediction holds at these sizes, some row "
             "fails in at most 5% of runs."]
    return SectionOutput(numbers, res.rows(), figs, res.provenance, {"seed": seed}, notes, tables)


register(Section(
    name="neighbours",
    title="Neighbouring stochastic limits: homogenized attention, random quadratic forms, value-matrix and independent noise",
    spec="docs/neighbours.md (beside SPEC §3, §5, §8)",
    claim="Each neighbouring limit follows its own published prediction: homogenized attention's mean overlap is "
          "logistic at β = 0 and a pair follows the linear kernel (arcsin scale function) on the time t·d at large β, "
          "with a weak error of the discrete layers η·max(η, α); "
          "random quadratic forms meet the exact pair law and the bounds (π/√2)e^{−t/2} and π e^{−λ_γ t}; value-matrix "
          "noise ends antipodal with its scale function's probability, zero when (d − 2) sech 2β ≥ 1 (its rows: the "
          "exact law at the horizon, which tends to it); independent "
          "noise does not synchronise where the common field with the same κ does.",
    model=NeighboursConfig,
    sizes=sizes(
        tiny={"attractor_pairs": 400, "attractor_steps": 200, "contrast_pairs": 300, "contrast_steps": 200,
              "overlap_batch": 16, "overlap_steps": 150, "large_beta_pairs": 800, "large_beta_dt": 0.05,
              "value_pairs": 300, "value_steps": 200, "value_betas": [0.5, 1.0, 1.5, 2.0, 3.0], "value_dims": [3, 4, 5, 6, 7],
              "weak_pairs": 0, "aligned_pairs": 0},
        quick={"attractor_pairs": 2000, "attractor_steps": 400, "contrast_pairs": 1000, "contrast_steps": 400,
               "overlap_batch": 64, "overlap_steps": 400, "large_beta_pairs": 2000, "large_beta_dt": 0.025,
               "value_pairs": 2000, "value_steps": 400, "weak_pairs": 4000, "aligned_pairs": 2000},
        full={"attractor_pairs": 20000, "attractor_steps": 800, "contrast_pairs": 8000, "contrast_steps": 800,
              "overlap_batch": 512, "overlap_steps": 800, "large_beta_pairs": 4000, "large_beta_dt": 0.0125,
              "value_pairs": 10000, "value_steps": 800, "weak_pairs": 16000,
              "aligned_pairs": 8000, "aligned_d": 4096,
              "value_points": [[3, 1.0], [4, 2.0], [4, 0.3], [6, 1.5], [6, 0.9], [10, 2.0]]},
    ),
    run=_run_neighbours,
))
