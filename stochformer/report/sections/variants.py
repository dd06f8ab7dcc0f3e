"""Report sections beyond the paper's model (SPEC §7): the attention variants, weight laws and
per-layer random attention (``variants``), and standard blocks at initialisation (``bridge``).
Registered after the sections of SPEC §6 (the order of [`stochformer.report.sections`][stochformer.report.sections])."""

from __future__ import annotations

import math
from typing import Any

from ..profiles import sizes
from ...experiments import bridge as bridge_exp
from ...experiments import variants as variants_exp
from ...experiments.bridge import BridgeConfig
from ...experiments.variants import VariantsConfig
from ...plotting import variants as variants_plots
from ..registry import Section, SectionContext, SectionOutput, figure_png, register
from ...measure.verdict import Comparison

#: allowance on the fitted decay slopes of the deterministic flows (first order in Δt)
FLOW_SLOPE_RTOL = 0.05
#: largest |ρ_simulated − ρ_ODE| of the equiangular check at FLOW_ODE_STEPS steps (Heun, second order:
#: ~1e-5 at 200 steps on [0, 2]); at other step counts the tolerance scales as Δt²
FLOW_ODE_TOL = 1e-4
FLOW_ODE_STEPS = 200
#: allowance of the per-layer random attention against its averaged drift (Monte Carlo bank of draws)
AVERAGED_TOL = 0.01


def variants_rows(numbers: dict, beta: float, flow_steps: int = FLOW_ODE_STEPS) -> list[Comparison]:
    """The verdict rows of the variants section from the numbers of `run_variants`
    (``VariantsResult.to_dict()``) (``flow_steps``: the Heun steps of the equiangular check, whose tolerance scales as Δt²)."""
    ode_tol = FLOW_ODE_TOL * (FLOW_ODE_STEPS / flow_steps) ** 2
    rows = [
        Comparison("multi-head, H = 1, d_h = d, O = I: max |difference| from the single head", 0.0,
                   numbers["one_head_max_diff"], rule="at_most", tol=1e-12, note="exact identity (rounding only)"),
        Comparison("Sinkhorn: max |row or column sum − 1|", 0.0, numbers["sinkhorn_max_sum_error"], rule="at_most",
                   tol=1e-12, note="iterated to tolerance 1e-13 in log space"),
    ]
    for kind in ("softmax", "usa"):
        e = numbers["equiangular"][kind]
        rows.append(Comparison(f"equiangular tokens ({kind}): max |ρ − ρ_ODE| over t ∈ [0, 2]", 0.0, e["max_error"],
                               rule="at_most", tol=ode_tol,
                               note=f"spread of the cosines stays {e['max_spread']:.1e}; tol = {FLOW_ODE_TOL:g}·"
                                    f"({FLOW_ODE_STEPS}/{flow_steps} steps)² (second order in Δt)"))
    fits = numbers["normalisation"]
    for key, pred, what in (("post", -2.0, "softmax post-LN: slope of log(1 − ρ) in t"),
                            ("usa_post", -2.0 * math.exp(beta), "USA post-LN: slope of log(1 − ρ) in t"),
                            ("pre", -2.0, "softmax pre-LN: slope of log(1 − ρ) in log t")):
        s = fits[key]["slope"]
        rows.append(Comparison(what, pred, s["value"], tuple(s["ci"]), rule="matches", tol=FLOW_SLOPE_RTOL * abs(pred),
                               note=f"tol = {FLOW_SLOPE_RTOL:g}·|predicted| (step Δt = {fits[key]['dt']:g})"))
    w = numbers["weight_laws"]
    for law, (mean, se) in w["laws"].items():
        rows.append(Comparison.from_mean_se(f"MLP covariance, {law} weights, d = {w['d']}, cosine {w['cosine']:.2f}",
                                            w["kappa"], mean, se, n=w.get("draws"), rule="matches",
                                            note="predicted: κ (ReLU, σ_U = σ_W = 0.3)"))
    sm = w["small_d"]
    rows.append(Comparison.from_mean_se(
        "MLP covariance, Rademacher inner weights, d = 2, x = e₁, y = (e₁+e₂)/√2", sm["exact"], sm["measured"][0],
        sm["measured"][1], n=sm.get("draws"), rule="matches", alternative=sm["kappa"],
        note=f"predicted: the exact Rademacher value 1/(4√2); the alternative is the Gaussian κ, {sm['kappa']:.4f}"))
    r = numbers["resampled"]
    last = r["rows"][-1]
    rows.append(Comparison.from_mean_se(
        f"per-layer random attention, L = {last['L']}: final mean cosine minus the averaged drift's", 0.0,
        last["diff"], last["diff_se"], rule="matches", tol=AVERAGED_TOL,
        note=f"tol = {AVERAGED_TOL:g} (Monte Carlo bank of the averaged drift)"))
    ex = r["sq_error_exponent"]
    rows.append(Comparison("per-layer random attention: decay exponent in L of the squared path difference", 0.0,
                           ex["exponent"], tuple(ex["ci"]), rule="above", n=ex.get("n"),
                           note="the fluctuation's variance is O(T²/L): exponent 1 asymptotically; above 0 = converges"))
    return rows


def _run_variants(cfg: VariantsConfig, ctx: SectionContext) -> SectionOutput:
    exp, plots = variants_exp, variants_plots
    res = exp.run_variants(cfg)
    numbers = res.to_dict()
    figs = [figure_png(plots.plot_variants(numbers), "variants",
                       "Equiangular tokens against the ODE (left); 1 − ρ under post-LN (against t) and pre-LN (against "
                       "log t) attention (middle); per-layer random attention minus its averaged drift, ± 2 SE (right)")]
    notes = ["Non-Gaussian inner weights change the kernel at finite d (the pre-activation u·x/√d is Gaussian only "
             "as d → ∞): the d = 2 row shows it; at d = 64 the change is below the SE."]
    return SectionOutput(numbers, variants_rows(numbers, cfg.beta, cfg.flow_steps), figs, res.provenance, {"seed": cfg.seed}, notes)


register(Section(
    name="variants",
    title="Attention variants, weight laws and per-layer random attention",
    spec="SPEC §7",
    claim="Multi-head attention with one head is the single head; Sinkhorn weights are doubly stochastic; equiangular "
          "tokens follow the stated ODEs; post-LN gives 1 − ρ ~ e^{−2t} (USA e^{−2e^β t}) and pre-LN 1/t²; every "
          "unit-variance weight law gives κ at large d; per-layer random attention tends to its averaged drift.",
    model=VariantsConfig,
    sizes=sizes(
        tiny={"flow_steps": 40, "law_d": 16, "law_m": 128, "law_draws": 8, "depths": [2, 8], "samples": 8,
              "attention_draws": 16},
        quick={"law_m": 512, "law_draws": 32, "depths": [4, 16, 64], "samples": 32, "attention_draws": 128},
        full={"flow_steps": 400, "law_m": 2048, "law_draws": 128, "depths": [4, 16, 64, 256], "samples": 128,
              "attention_draws": 512},
    ),
    run=_run_variants,
))


def _run_bridge(cfg: Any, ctx: SectionContext) -> SectionOutput:
    exp, plots = bridge_exp, variants_plots
    res = exp.run_bridge(cfg, progress=ctx.progress)
    figs = [figure_png(plots.plot_bridge(res), f"bridge-{cfg.block}",
                       f"{cfg.block}: mean pairwise cosine by depth (± 2 SE) with the paper's model (matched MLP, dashed) "
                       "and the limit SDE of the matched kernel (dotted)")]
    notes = [f"κ(1) of the matched kernel on the unit sphere: {res.kappa1:.4g}. The random attention has centred values, "
             "so both predictions have no attention drift; its fluctuation (variance O(T²/L)) is what they miss at small L."]
    return SectionOutput(res.to_dict(), res.comparisons(), figs, res.provenance, {"seed": cfg.seed}, notes)


register(Section(
    name="bridge",
    title="Bridge: torch.nn.TransformerEncoderLayer at random initialisation",
    spec="SPEC §7",
    claim="A post-LN encoder stack with branches scaled by T/L and √(T/L) moves its tokens' mean cosine as the paper's "
          "model and the limit SDE of the matched kernel predict, within the finite-depth allowance.",
    model=BridgeConfig,
    sizes=sizes(
        tiny={"block": "encoder_post", "d": 8, "heads": 2, "m": 16, "N": 4, "depths": [4], "samples": 4, "pred_samples": 8},
        quick={"block": "encoder_post", "d": 16, "heads": 2, "m": 64, "N": 6, "depths": [8, 32], "samples": 24,
               "pred_samples": 96},
        full={"block": "encoder_post", "d": 32, "heads": 4, "m": 128, "N": 8, "depths": [8, 32, 128], "samples": 128,
              "pred_samples": 512},
    ),
    run=_run_bridge,
))
