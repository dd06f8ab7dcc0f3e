"""The report's sections of SPEC §6.1–§6.6 and the motions of SPEC §3–§4, in the order of the page:
``clusters``, ``scenarios``, ``table``, ``convergence``, ``chaos``, ``chaos-exact``, ``sync`` and
``motions`` (the phase diagrams are in `phase`).

Each section calls an experiment module's public ``run_xxx`` and its plotting functions, turns the
result into predicted-vs-measured rows ([`Comparison`][stochformer.measure.verdict.Comparison], the shared row
builders of [`rows`][stochformer.report.sections.rows]) and embedded figures, and declares its sizes for every profile.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ...model.activations import ODD_ACTIVATIONS
from ...config import RunConfig, build_config
from ...io.results import seed_of
from ...core.runtime import child_seeds, provenance, resolve_device
from ...measure.stats import loglog_slope, newcombe_interval
from ..profiles import sizes
from ...experiments import chaos, converge, motions, paper, sync
from ...experiments.chaos import ChaosConfig
from ...experiments.converge import ConvergeConfig
from ...experiments.motions import MotionsConfig
from ...experiments.paper import ClustersConfig, ScenariosConfig, TableConfig
from ...experiments.sync import SyncConfig, energy_max, predicted_rates
from ...plotting import chaos as chaos_plots
from ...plotting import converge as converge_plots
from ...plotting import sync as sync_plots
from ..registry import Section, SectionContext, SectionOutput, figure_png, register
from ...measure.verdict import Z95, Comparison, quantile
from .rows import (
    EXTRAPOLATED_RTOL,
    KERNEL_RTOL,
    RATE_RTOL,
    SLOPE_TOL,
    bound_row,
    extrapolated_rate_row,
    fit_row,
    rate_row,
)

# --------------------------------------------------------------------------- helpers


def _prov(cfg: Any) -> dict:
    return provenance(resolve_device(getattr(cfg, "device", "cpu")))


def _fraction_row(quantity: str, predicted: float, samples, **kw) -> Comparison:
    """A row of a fraction averaged over independent samples (e.g. per sample, the fraction of its
    pairs): Student's t interval of the samples' mean, cut to [0, 1] (the true fraction lies there,
    so cutting keeps the coverage); no interval from fewer than 3 samples."""
    row = Comparison.from_samples(quantity, predicted, samples, **kw)
    if row.ci is not None and row.ci[0] is not None and row.ci[1] is not None:
        row = Comparison(row.quantity, row.predicted, row.measured, (max(0.0, row.ci[0]), min(1.0, row.ci[1])),
                         row.rule, row.tol, row.note, row.alternative, row.reach, row.n)
    return row


def _seeds(cfg: Any, n: int) -> dict:
    seed = seed_of(cfg)
    return {"seed": seed, "child_seeds": child_seeds(seed, n), "rule": "runtime.child_seeds(seed, n)"}


# --------------------------------------------------------------------------- §6.1 clusters


def _uniform_tail(d: int, tol: float) -> float:
    """P(|⟨x, y⟩| ≥ 1 − tol) for independent uniform x, y on S^{d−1}: (1 + ⟨x, y⟩)/2 ~ Beta((d−1)/2, (d−1)/2)."""
    from scipy.stats import beta

    a = (d - 1) / 2
    return float(2 * beta.sf(1 - tol / 2, a, a))


def cluster_count_row(act: str, cl, N: int, T: float, notes: list) -> Comparison:
    """The claim itself: one cluster at the end (ReLU), or for an odd field (tanh) one point of
    projective space {x, −x} (two antipodal clusters); mean ± SE over samples of the count of
    ``cl`` (a ClusterSummary), "matches" 1 with no tolerance. Appends to ``notes`` the horizon at
    which the attractor is predicted (``paper.attractor_horizon``, from e^{λ₁T})."""
    odd = act in ODD_ACTIVATIONS
    counts = np.asarray(cl.n_projective if odd else cl.n_clusters, float)
    p = predicted_rates(build_config({"d": 4, "activation": act, "attention": False}), with_bound=False)
    horizon = paper.attractor_horizon(p["lambda_1_noise"], p["kappa"], p["kappa_prime"], N, cl.tol)
    notes.append(f"{act}: λ₁ = {p['lambda_1_noise']:.4g}; all N = {N} tokens linked (cos ≥ 1 − {cl.tol:g}"
                 f"{', up to sign' if odd else ''}) predicted by t ≈ {horizon:.3g} (slowest of N(N−1)/2 pairs, "
                 f"linearised two-point motion), against T = {T:g}; counts at T per sample: {counts.astype(int).tolist()}")
    what = "points {x, −x} of projective space (antipodal clusters count once)" if odd else "clusters"
    return Comparison.from_samples(f"{act}: number of {what} at the last layer", 1.0, counts, rule="matches",
                                   alternative=2.0,
                                   note=f"the attractor: {'two antipodal clusters' if odd else 'one cluster'}; "
                                        f"reached by t ≈ {horizon:.3g} (predicted), T = {T:g}; alternative: 2")


def attractor_row(act: str, course: dict) -> Comparison:
    """The claim at the predicted horizon: the number of clusters (points of projective space for an
    odd field) of the attractor run (``course``: ``paper.cluster_course``) at its last snapshot,
    t ≥ the horizon predicted from e^{λ₁T}; mean ± SE over samples, "matches" 1 with no tolerance."""
    counts = np.asarray(course["long_counts"], float)
    odd = bool(course["up_to_sign"])
    what = "points {x, −x} of projective space" if odd else "clusters"
    quantity = f"{act}: number of {what} at the predicted attractor horizon"
    if counts.size == 0:
        return Comparison(quantity, 1.0, note="λ₁ ≥ 0: no attractor predicted, no run")
    t_end = float(np.asarray(course["long_times"])[-1])
    return Comparison.from_samples(
        quantity, 1.0, counts[:, -1], rule="matches", alternative=2.0,
        note=f"a run of the same model at the same step to t = {t_end:.4g} ≥ horizon {course['horizon']:.4g} "
             f"(λ₁ = {course['lambda_1']:.4g}); counts per sample {counts[:, -1].astype(int).tolist()}")


def _run_clusters(cfg: ClustersConfig, ctx: SectionContext) -> SectionOutput:
    plots = sync_plots
    res = paper.run_clusters(cfg, progress=ctx.progress)
    rows: list[Comparison] = []
    notes: list[str] = []
    uniform = _uniform_tail(4, cfg.tol)
    N, T = int(res.sizes["N"]), float(res.sizes["T"])
    for act, cl in res.clusters.items():
        rows.append(cluster_count_row(act, cl, N, T, notes))
        rows.append(attractor_row(act, res.courses[act]))
        rows.append(_fraction_row(
            f"{act}: fraction of pairs with |cos| ≥ 1 − tol at the last layer", uniform,
            np.asarray(cl.frac_near_plus) + np.asarray(cl.frac_near_minus), rule="above",
            note="clusters: far more synchronised pairs (up to sign) than among uniform tokens (predicted column); "
                 "t interval over samples, cut to [0, 1]"))
        antipodal = f"{act}: fraction of antipodal pairs (cos ≤ −1 + tol)"
        if act in ODD_ACTIVATIONS:
            rows.append(_fraction_row(antipodal, 0.0, cl.frac_near_minus, rule="above",
                                      note="odd field: two antipodal clusters"))
        else:
            rows.append(_fraction_row(antipodal, 0.0, cl.frac_near_minus, rule="matches", tol=0.05, alternative=0.5,
                                      note="field not odd: one cluster, no antipodal pair; alternative 0.5: two "
                                           "antipodal clusters of equal size"))
    figs = [figure_png(plots.plot_clusters(res), "clusters",
                       "Mean and min pairwise cosine against layer (left); histogram of the pair cosines at the last layer")]
    figs.append(figure_png(plots.plot_cluster_course(res), "clusters-course",
                           "Top: the number of clusters against t (tanh: points of projective space {x, −x}), each "
                           "sample (thin) and the mean (thick), over the paper's run to T (solid) and a run to the "
                           "horizon predicted from e^{λ₁T} (dashed vertical line; dotted: T). Bottom: the paper's "
                           "picture, the first two coordinates of the final tokens of one sample at T"))
    notes.insert(0, f"sizes: {res.sizes}; d = 4, no attention, no biases, uniform initial tokens")
    return SectionOutput(res.to_dict(), rows, figs, _prov(cfg), _seeds(cfg, 2), notes)


register(Section(
    name="clusters",
    title="Clusters on S³",
    spec="SPEC §6.1",
    claim="Without attention, the MLP noise alone makes near-uniform tokens on S³ form clusters; with tanh "
          "(an odd field) they end in two antipodal clusters.",
    model=ClustersConfig,
    sizes=sizes(tiny={"sizes": {"N": 16, "L": 100, "m": 64, "batch": 2}}, quick={"size": "quick"},
                full={"size": "paper"}),
    run=_run_clusters,
))


# --------------------------------------------------------------------------- §6.2 scenarios

#: A scenario has a clear prediction at its horizon T when |λ₁ − γ|·T is at least this.
CLEAR_PREDICTION = 2.5


def _scenario_model(key: dict) -> RunConfig:
    """The model of one scenario (activation, d, σ, γ), for its predicted rates."""
    act = key["activation"]
    return build_config({"d": key["d"], "activation": "relu" if act == "none" else act, "mlp": act != "none",
                         "sigma_U": key["sigma"], "sigma_W": key["sigma"], "gamma": key["gamma"],
                         "attention": key["gamma"] != 0.0, "beta": 1.0})


#: E_β near synchronisation is resolved in float64 only down to about 1e-13 of its start (rounding
#: in the sums of e^{β⟨x_i, x_j⟩}; measured: sigmoid d = 128 reaches 1.5e-13·E_β(0) at t ≈ 1.6 and
#: stays there): a rate is measured only while E_β is above this fraction of E_β(0)
ENERGY_RESOLVED = 1e-9


def scenario_row(coords: dict, energy: np.ndarray, energy_se: np.ndarray, T: float, pred: dict,
                 N: Optional[int] = None, n: Optional[int] = None, beta: float = 1.0) -> list[Comparison]:
    """The verdict rows of one scenario (``coords``: activation, d, sigma, gamma) from its E_β curve
    (mean ± SE over ``n`` runs per layer, t from 0 to T) and its predicted rates ``pred``
    (``predicted_rates``); none when (λ₁ − γ)·T > −CLEAR_PREDICTION (no clear prediction at this
    horizon).

    Where the noise is coercive (λ̄ < 0), Theorem 1.4 bounds the rate by ε + λ̄' (``bound_pred``;
    ε = max(0, −2γ), Assumption 2 for the attention V = γI): the measured rate is
    log(E_β(t*)/E_β(0))/t* with the delta-method SE, t* = T or, if E_β falls below
    ``ENERGY_RESOLVED``·E_β(0) (float64's floor) before T, the last time before it does, judged
    "at_most" the bound; with ``N`` tokens its reach is log(E_max/E_β(0))/t* (a bound above it is not
    testable). Where attention repels (γ < 0) or the noise is not coercive, the prediction is that
    E_β decreases ("below" 0)."""
    if pred["lambda_1_pred"] * T > -CLEAR_PREDICTION:
        return []
    e0 = float(energy[0])
    where = f"{coords['activation']}, d={coords['d']}, σ={coords['sigma']:g}, γ={coords['gamma']:g}"
    unresolved = np.nonzero(np.asarray(energy) < ENERGY_RESOLVED * e0)[0]
    k = int(unresolved[0]) - 1 if len(unresolved) else len(energy) - 1
    bound = pred.get("bound_pred", pred["lambda_bar_prime_pred"] if coords["gamma"] >= 0 else None)
    rows = []
    if pred["lambda_bar_noise"] < 0 and bound is not None and e0 > 0 and k > 0:
        t, ek = T * k / (len(energy) - 1), float(energy[k])
        rate = math.log(ek / e0) / t
        se = math.hypot(float(energy_se[k]) / ek, float(energy_se[0]) / e0) / t
        until = "" if k == len(energy) - 1 else f" Measured up to t = {t:.3g}: E_β then falls to float64's floor."
        reach = math.log(energy_max(N, beta) / e0) / t if N is not None else None
        eps = max(0.0, -2.0 * coords["gamma"])
        rows.append(bound_row(
            f"E_β rate over the run: {where}", bound, rate, se, reach=reach, n=n,
            note=f"Theorem 1.4 (λ̄ = {pred['lambda_bar_noise']:.3g} < 0): E E_β(μ_t) ≤ e^{{(ε + λ̄')t}} E E_β(μ_0), "
                 f"ε = {eps:g}, λ̄' = {pred['lambda_bar_prime_pred']:.3g}; predicted column = ε + λ̄'." + until))
    if coords["gamma"] < 0 or pred["lambda_bar_noise"] >= 0:
        delta, delta_se = float(energy[-1]) - e0, float(np.hypot(energy_se[-1], energy_se[0]))
        rows.append(Comparison.from_mean_se(
            f"ΔE_β over the run: {where}", 0.0, delta, delta_se, n=n, rule="below",
            note=f"λ₁ − γ = {pred['lambda_1_pred']:.3g} < 0: tokens synchronise, E_β decreases ("
                 + ("attention repels)" if coords["gamma"] < 0 else "noise not coercive, λ̄ ≥ 0: no rate)")))
    return rows


def _run_scenarios(cfg: ScenariosConfig, ctx: SectionContext) -> SectionOutput:
    plots = sync_plots
    res = paper.run_scenarios(cfg, progress=ctx.progress, store=ctx.workdir, scheduler=ctx.scheduler)
    rows, table = [], []
    apart = lost = 0
    T = float(res.sizes["T"])
    for key, coords in res.keys.items():
        run = res.runs[key]
        pred = predicted_rates(_scenario_model(coords))
        e, se = np.asarray(run["energy"]), np.asarray(run["energy_se"])
        delta, delta_se = float(e[-1] - e[0]), float(np.hypot(se[-1], se[0]))
        table.append([coords["activation"], coords["d"], coords["sigma"], coords["gamma"], pred["lambda_1_pred"],
                      run["mean_cosine"][-1], run["min_cosine"][-1], e[-1], delta, delta_se])
        if pred["lambda_1_pred"] > 0:
            apart += 1
            lost += int(delta + 1.96 * delta_se < 0)
        rows.extend(scenario_row(coords, e, se, T, pred, N=int(res.sizes["N"]), n=int(res.sizes["batch"])))
    figs = [figure_png(plots.plot_scenarios(res, "mean_cosine"), "scenarios-cosine",
                       "Mean pairwise cosine against layer: one panel per (d, σ), colour = activation, line style = γ "
                       "(solid +1, dashed 0, dotted −1)"),
            figure_png(plots.plot_scenarios(res, "energy"), "scenarios-energy", "E_β against layer, same layout")]
    tables = [{"title": "Every scenario at the last layer (E_β change with its SE)",
               "columns": ["activation", "d", "σ", "γ", "λ₁ − γ", "mean cos", "min cos", "E_β", "ΔE_β", "SE"],
               "rows": table}]
    notes = [f"sizes: {res.sizes}. Verdict rows for the scenarios with (λ₁ − γ)·T ≤ −{CLEAR_PREDICTION:g} "
             "(synchronisation clearly predicted at this horizon): the E_β rate against Theorem 1.4's bound ε + λ̄' where "
             "λ̄ < 0 (ε = max(0, −2γ)), the sign of ΔE_β where γ < 0 or λ̄ ≥ 0; all scenarios are in the table.",
             f"λ₁ − γ > 0 predicts only that close pairs separate, not the sign of the change of E_β from uniform "
             f"tokens: of the {apart} such scenarios, {lost} lose energy significantly at this size (see the table)."]
    return SectionOutput(res.to_dict(), rows, figs, _prov(cfg), _seeds(cfg, len(res.keys)), notes, tables)


register(Section(
    name="scenarios",
    title="Grid of scenarios (the paper's Figures 2–6)",
    spec="SPEC §6.2",
    claim="Across activations, dimensions d ∈ {5, 64, 128}, σ ∈ {0, 0.1} and attention γ ∈ {+1, 0, −1}, tokens "
          "synchronise where the Lyapunov exponent λ₁ − γ is clearly negative: E_β decays at least at Theorem 1.4's "
          "rate ε + λ̄' where the noise is coercive (ε = 0 unless attention repels), and decreases where attention "
          "repels or the noise is not coercive.",
    model=ScenariosConfig,
    sizes=sizes(tiny={"sizes": {"N": 8, "L": 20, "m": 32, "batch": 2, "ds": [5], "sigmas": [0.0]}},
                quick={"size": "quick"}, full={"size": "paper"}),
    run=_run_scenarios,
))


# --------------------------------------------------------------------------- §6.3 the table

_TABLE_QUANTITIES = (("kappa", "κ(1)", KERNEL_RTOL), ("kappa_prime", "κ'(1)", KERNEL_RTOL),
                     ("lambda_1", "λ₁", EXTRAPOLATED_RTOL), ("lambda_bar", "λ̄", RATE_RTOL))


def _run_table(cfg: TableConfig, ctx: SectionContext) -> SectionOutput:
    plots = sync_plots
    res = paper.run_table(cfg, progress=ctx.progress, store=ctx.workdir, scheduler=ctx.scheduler)
    comps = []
    for r in res.rows:
        where = f"{r['activation']}, d={r['d']}, σ={r['sigma']:g}"
        for q, sym, rtol in _TABLE_QUANTITIES:
            if f"{q}_extrap_err" in r:
                comps.append(extrapolated_rate_row(f"{sym} ({where}, Δt → 0)", r[f"{q}_pred"], r[q], r[f"{q}_se"],
                                                   r[f"{q}_extrap_err"], rtol=rtol, n=r.get(f"{q}_n")))
            else:
                comps.append(rate_row(f"{sym} ({where})", r[f"{q}_pred"], r[q], r[f"{q}_se"], rtol))
    figs = [figure_png(plots.plot_table(res), "table", "Measured (transformer) against computed λ₁ and λ̄, ± 2 SE; dashed: y = x")]
    notes = [f"sizes: {res.sizes}. κ(1) = E|G(x)|²/d and κ'(1) from |G(x) − G(y)|² at |x − y| = 10⁻³ over MLP draws; "
             "λ₁ by the pair estimator, λ̄ as the energy rate of a near-synchronised pair (cluster spread 1e-3 for a "
             "smooth φ, 1e-4/√d for ReLU: kinked kernel), both extrapolated to Δt → 0 (L, L/2, L/4 layers; "
             "experiments.paper); λ̄ keeps a 10% allowance (finite width m, the bootstrap SE of near-lognormal paths)."]
    return SectionOutput(res.to_dict(), comps, figs, _prov(cfg), _seeds(cfg, len(res.rows)), notes)


register(Section(
    name="table",
    title="The paper's table: κ(1), κ'(1), λ₁, λ̄",
    spec="SPEC §6.3, §5",
    claim="The kernel constants κ(1), κ'(1) and the rates λ₁ (Lyapunov exponent) and λ̄ (first-moment rate) of the "
          "paper's Appendix C follow from the activation, d and σ, and match what the transformer measures.",
    model=TableConfig,
    sizes=sizes(tiny={"activations": ["relu"], "sizes": {"draws": 200, "pairs": 16, "energy_pairs": 32, "L": 40,
                                                          "T_units": 2.0, "m": 32, "ds": [5], "sigmas": [0.0]}},
                quick={"size": "quick"}, full={"size": "paper"}),
    run=_run_table,
))


# --------------------------------------------------------------------------- §6.4 Theorem 1.1


def _loglog_exponent(x, y) -> float:
    """Decay exponent p of y ≈ c x^{−p} by least squares in log–log (for the rate laws' own slope)."""
    return -loglog_slope(x, y)[0]


#: "The limits commute": the additive law a/L + b/m (no cross term) fits the whole grid to this
#: largest relative residual.
ADDITIVE_RESIDUAL = 0.25


def _run_converge(cfg: Any, ctx: SectionContext) -> SectionOutput:
    conv, plots = converge, converge_plots
    res = conv.run_converge(cfg, progress=ctx.progress, store=ctx.workdir, scheduler=ctx.scheduler)
    f, L = res.fits, np.asarray(res.depths, float)
    logL_over_L = _loglog_exponent(L, np.log(L) / L)
    rows = [
        fit_row("error exponent in L (layer times, m = ∞)", 1.0, f["exponent_L"], "at_least", SLOPE_TOL,
                "Theorem 1.1: error ≲ 1/L at layer times; alternative 1/2 (an error ≲ 1/√L)", 0.5),
        fit_row("error exponent in L (continuous time, m = ∞)", logL_over_L, f["exponent_L_continuous"], "at_least",
                SLOPE_TOL, f"≲ log L/L: its own log–log slope over these depths is {logL_over_L:.3f}"),
        fit_row(f"error exponent in m (layer times, L = {f['exponent_m']['L']})", 1.0, f["exponent_m"], "at_least",
                SLOPE_TOL, "Theorem 1.1: error ≲ 1/m; alternative 1/2 (an error ≲ 1/√m)", 0.5),
        fit_row("max relative residual of a/L + b/m over the (L, m) grid", 0.0, f["additive_layer"]["residual"],
                "at_most", ADDITIVE_RESIDUAL, "the limits commute: an additive law without cross term fits the whole "
                                              "grid (interval: bootstrap over samples, Student's t)"),
    ]
    figs = [figure_png(plots.plot_convergence(res), "convergence",
                       "Pathwise error against L and m (log–log, fitted slopes beside 1/L, log L/L and 1/m) and the "
                       "heat map over (L, m)")]
    return SectionOutput(res.to_dict(), rows, figs, res.provenance, _seeds(cfg, -(-cfg.model.batch // cfg.samples_per_task)))


register(Section(
    name="convergence",
    title="Theorem 1.1: the deep transformer converges to the SDE",
    spec="SPEC §6.4, §3",
    claim="The pathwise mean-square distance between the transformer of depth L and width m and the limit SDE is "
          "at most c (log L/L + 1/m) (1/L + 1/m at layer times), and the limits in L and m commute.",
    model=ConvergeConfig,
    sizes=sizes(
        tiny={"N": 4, "d": 3, "batch": 8, "samples_per_task": 8, "depths": [4, 8, 16], "widths": [8, 32], "refine": 2, "bootstrap": 100},
        quick={"N": 8, "d": 3, "batch": 128, "samples_per_task": 64, "depths": [8, 16, 32, 64, 128], "widths": [16, 64, 256],
               "refine": 4, "bootstrap": 400},
        # Theorem 1.1 beyond toy sizes: N = 32 tokens in d = 8, L up to 2048, 64 samples in tasks of 8
        full={"N": 32, "d": 8, "batch": 64, "samples_per_task": 8, "depths": [8, 16, 32, 64, 128, 256, 512, 1024, 2048],
              "widths": [16, 64, 256], "refine": 2},
        gpu={"batch": 4096, "samples_per_task": 1024, "depths": [8, 16, 32, 64, 128, 256, 512, 1024], "widths": [16, 32, 64, 128, 256, 512, 1024]},
    ),
    run=_run_converge,
))


# --------------------------------------------------------------------------- §6.5 Proposition 1.2


def w2_row(d: int, fit: dict, sharp: dict, bound: dict) -> Comparison:
    """W₂² exponent in N (``fit``: exponent, ci, of sup_t W₂²/(1 − N/N_ref), the finite reference
    removed) against the sharp rate of a measure with a density on
    S^{d−1} (``sharp``: local exponent of log N/N for d = 3, N^{−2/(d−1)} for d ≥ 4 over the sizes),
    two-sided ("matches", tol SLOPE_TOL). Proposition 1.2's r_d(N) (``bound``) is only an upper
    bound for any measure on R^d and is slower; it is quoted in the note."""
    return fit_row(f"W₂² decay exponent in N (d = {d}, finite N_ref removed)", sharp["exponent"], fit, "matches",
                   SLOPE_TOL, f"sharp rate on S^{d - 1}: {sharp['law']}, of W₂²/(1 − N/N_ref); Proposition 1.2's bound "
                              f"r_d(N) = {bound['law']} (local exponent {bound['exponent']:.3f}) is slower: the alternative",
                   bound["exponent"])


def coupling_row(d: int, fit: dict, noise: str, predicted: float = 1.0) -> Comparison:
    """The coupled-error exponent in N (``fit``: exponent, ci, of sup_t err2/(1 − N/N_ref)) of the
    systems driven by one field (``noise``: "random_features" or "exact") against ``predicted`` (1:
    the N-system's drift differs by a fluctuation of variance ∝ 1/N − 1/N_ref), two-sided."""
    field = "exact field" if noise == "exact" else "random-feature field"
    return fit_row(f"coupled error exponent in N (d = {d}, {field}, finite N_ref removed)", predicted, fit, "matches",
                   SLOPE_TOL, "synchronous coupling: ≈ C (1/N − 1/N_ref); alternative 1/2 (Proposition 1.2's r_3(N))",
                   0.5 * predicted)


def chaos_rows(cfg: Any, f: dict) -> list[Comparison]:
    """The rows of a chaos result's fits ``f``: W₂² per dimension, the coupled error, and the
    conditional decorrelation when it was run."""
    rows = [w2_row(d, f["w2_corrected"][str(d)], f["sphere_rate"][str(d)], f["r_d"][str(d)]) for d in cfg.dims
            if str(d) in f["w2"]]
    rows.append(coupling_row(cfg.model.d, f["coupling_corrected"][str(cfg.model.d)], cfg.model.noise))
    if "decorrelation" in f:
        rows.append(fit_row("conditional correlation exponent in N", 1.0, f["decorrelation"], "at_least", SLOPE_TOL,
                            "tokens become independent given the noise: correlation O(1/N) (every size in the fit, "
                            "weighted by its SE); alternative 1/2 (O(1/√N))", 0.5))
    return rows


def _run_chaos(cfg: Any, ctx: SectionContext) -> SectionOutput:
    plots = chaos_plots
    res = chaos.run_chaos(cfg, progress=ctx.progress, store=ctx.workdir, scheduler=ctx.scheduler)
    rows = chaos_rows(cfg, res.fits)
    figs = [figure_png(plots.plot_chaos(res), "chaos",
                       "Coupled error and W₂² against N with fitted slopes beside r_d(N); conditional decorrelation; "
                       "the reference measure")]
    notes = []
    if res.clouds:
        figs.append(figure_png(plots.plot_density_s2(res.clouds["initial"], res.clouds["final"]), "chaos-density",
                               "Reference tokens on S² at t = 0 and t = T (equal-area histogram)"))
    warn = [w for row in res.to_dict()["coupling"].values() for w in row.get("w2_warnings", [])]
    if warn:
        notes.append(f"{len(warn)} optimal-transport warning(s), e.g. {warn[0]}")
    return SectionOutput(res.to_dict(), rows, figs, res.provenance, _seeds(cfg, 2), notes)


register(Section(
    name="chaos",
    title="Proposition 1.2: propagation of chaos",
    spec="SPEC §6.5, §4",
    claim="With i.i.d. initial tokens, the empirical measure of N tokens approaches the conditional law μ_t, "
          "E sup W₂² at the sharp rate of a measure with a density on S^{d−1} (within Proposition 1.2's bound r_d(N)), "
          "and tokens become independent given the noise.",
    model=ChaosConfig,
    sizes=sizes(
        tiny={"N": 32, "d": 3, "L": 8, "batch": 3, "sizes": [4, 8, 16], "dims": [3], "dims_batch": 2, "records": 2,
              "w2_records": 1, "w2_batch": 3, "decor_sizes": [4, 8], "decor_repeats": 32, "decor_fields": 1,
              "bootstrap": 100, "features": 64},
        quick={"N": 1024, "L": 20, "batch": 8, "sizes": [32, 64, 128, 256], "dims_batch": 4, "records": 4,
               "w2_batch": 4, "decor_repeats": 512, "decor_fields": 2, "bootstrap": 500, "features": 256},
        # N_ref = 4096, sizes up to 1024, d ∈ {3, 4, 6}, the random-feature field (preflight estimate 48 s,
        # which leaves out the optimal transport: measured 6.7 times the estimate at N_ref = 2048)
        full={"N": 4096, "sizes": [32, 64, 128, 256, 512, 1024]},
        gpu={"N": 16384, "sizes": [64, 128, 256, 512, 1024, 2048], "batch": 32, "dims_batch": 16, "w2_batch": 16},
    ),
    run=_run_chaos,
))


register(Section(
    name="chaos-exact",
    title="Proposition 1.2 with the exact field (m = ∞)",
    spec="SPEC §6.5, §3–§4",
    claim="Driven by the exact field K^{1/2}Ξ (the infinitely wide MLP), drawn jointly at the tokens of the reference "
          "and of every N-system, the coupled error decays like 1/N − 1/N_ref and W₂² at the sharp rate on S^{d−1}.",
    model=ChaosConfig,
    sizes=sizes(
        tiny={"noise": "exact", "decorrelation": False, "N": 32, "d": 3, "L": 4, "batch": 3, "sizes": [4, 8, 16],
              "dims": [3], "records": 2, "w2_batch": 3, "bootstrap": 100},
        # N_ref + Σ sizes = 752 points: 160 steps, 13 s CPU in all (docs/meanfield.md)
        quick={"noise": "exact", "decorrelation": False, "N": 512, "L": 10, "batch": 16, "sizes": [16, 32, 64, 128],
               "dims": [3], "records": 4, "w2_batch": 8, "bootstrap": 500},
        # N_ref = 4096: 4576 points, one joint Cholesky factor per step, 5.2 s CPU; 128 steps ≈ 6–11 min (docs/reproduce.md)
        full={"noise": "exact", "decorrelation": False, "N": 4096, "L": 16, "batch": 8, "sizes": [32, 64, 128, 256],
              "dims": [3], "records": 4, "w2_batch": 8},
        gpu={"batch": 32, "w2_batch": 16},
    ),
    run=_run_chaos,
))


# --------------------------------------------------------------------------- §6.6 Theorem 1.4


def _run_sync(cfg: Any, ctx: SectionContext) -> SectionOutput:
    res = sync.run_sync(cfg, progress=ctx.progress)
    return SectionOutput(res.to_dict(), sync_rows(res.table(), cfg.extrapolate), [_sync_figure(res)], res.provenance,
                       _seeds(cfg, 3))


def sync_rows(table: list[dict], extrapolated: bool) -> list[Comparison]:
    """The verdict rows of ``SyncResult.table()``: λ₁ against λ₁ − γ and the rate near synchronisation
    against λ̄ − 2γ ("matches"), the rate from uniform tokens against Theorem 1.4's bound ε + λ̄'
    ([`bound_row`][stochformer.report.sections.rows.bound_row], "at_most", with its reach); extrapolated to Δt → 0, each interval includes
    the extrapolation error."""
    rows = []
    for r in table:
        bound = r.get("rule") == "at_most" or "bound" in r["quantity"]
        sym = "ε + λ̄'" if bound else "λ₁ − γ" if "lambda_1" in r["quantity"] else "λ̄ − 2γ"
        name = f"{r['quantity']} vs {sym}"
        if bound:
            parts = ["Theorem 1.4: E E_β(μ_t) ≤ e^{(ε + λ̄')t} E E_β(μ_0)"]
            if r.get("lambda_bar_prime") is not None:
                parts.append(f"λ̄' = {r['lambda_bar_prime']:.4g}")
            parts.append(r.get("note") or "")
            rows.append(bound_row(name, r["predicted"], r["measured"], r["se"], r.get("err", 0.0), r.get("reach"),
                                  n=r.get("n"), note="; ".join(x for x in parts if x)))
        elif extrapolated:
            rows.append(extrapolated_rate_row(name, r["predicted"], r["measured"], r["se"], r["err"], n=r.get("n")))
        else:
            rows.append(rate_row(name, r["predicted"], r["measured"], r["se"], n=r.get("n")))
    return rows


def _sync_figure(res) -> Any:
    return figure_png(sync_plots.plot_sync(res), "sync",
                      "Pair log-distance against t with slope λ₁ − γ (left); E[E_β(μ_t)] semi-log near synchronisation "
                      "and from uniform tokens (at L steps), with λ̄ − 2γ and the bound ε + λ̄' (right); the rates in the "
                      "legend are extrapolated to Δt → 0")


_SYNC_MODEL = {"activation": "relu", "d": 8, "sigma_U": 0.3, "sigma_W": 0.3, "attention": False, "dynamics": "sde"}

register(Section(
    name="sync",
    title="Theorem 1.4: synchronisation by noise",
    spec="SPEC §6.6, §5",
    claim="When the noise is coercive (λ̄ < 0), the expected interaction energy decays at least like e^{λ̄' t}, "
          "near synchronisation at the rate λ̄, and the distance of two tokens decays at the Lyapunov rate λ₁.",
    model=SyncConfig,
    sizes=sizes(
        tiny={**_SYNC_MODEL, "N": 6, "L": 20, "T": 4.0, "batch": 6, "pairs": 16, "bootstrap": 20},
        quick={**_SYNC_MODEL, "N": 16, "L": 200, "T": 8.0, "batch": 64, "pairs": 512, "bootstrap": 200},
        full={**_SYNC_MODEL, "N": 64, "L": 1000, "T": 10.0, "batch": 256, "pairs": 4096, "bootstrap": 400},
        gpu={"batch": 1024, "pairs": 16384},
    ),
    run=_run_sync,
))


# --------------------------------------------------------------------------- §3–§4 the motions


def motion_rows(measured: dict, reference: dict, predicted: dict) -> list[Comparison]:
    """Per dynamics (``measured[dyn]``, ``experiments.motions``): the one-point decay rate of
    E⟨x₀, X_t⟩ (fitted slope ± bootstrap SE) against −κ(1)(d−1)/2 and its value at T against
    e^{−κ(1)(d−1)T/2} (each judged against the law without the factor ½); the mean of u_T and
    P(u_T > threshold) against the scalar two-point diffusion (``reference``, a Monte Carlo with its
    own SE: the interval of the mean is measured ± q √(SE² + SE_ref²), that of the tail Newcombe's
    score interval of the difference of the two fractions when the counts are stored). All
    "matches" with no tolerance: the laws hold for every width m and the step bias is below the SE
    at these sizes (docs/synchronisation.md); the eight rows are one family (Holm)."""
    rows = []
    for dyn, m in measured.items():
        n = m.get("n")
        rows.append(Comparison.from_mean_se(f"{dyn}: decay rate of E⟨x₀, X_t⟩", predicted["one_point_rate"],
                                            m["one_point_rate"], m["one_point_rate_se"], n=n, rule="matches",
                                            alternative=2 * predicted["one_point_rate"],
                                            note="one point: Brownian motion on S^{d−1} with generator (κ(1)/2)Δ; "
                                                 "slope of log of the mean against t, bootstrap SE over pairs; "
                                                 "alternative: −κ(1)(d−1) (generator κ(1)Δ)"))
        rows.append(Comparison.from_mean_se(f"{dyn}: E⟨x₀, X_T⟩", predicted["one_point_T"], m["one_point_T"],
                                            m["one_point_T_se"], n=n, rule="matches",
                                            alternative=predicted["one_point_T"] ** 2,
                                            note="e^{−κ(1)(d−1)T/2}; alternative e^{−κ(1)(d−1)T}"))
        for key, name in (("u_mean", "E u_T"), ("tail", f"P(u_T > {predicted['threshold']:g})")):
            quantity = f"{dyn}: {name}, u = ⟨X¹, X²⟩"
            ref = f"two points: the scalar diffusion of u from u0 = {predicted['u0']:g} (reference {reference[key]:.4g} ± " \
                  f"{reference[key + '_se']:.2g})"
            if key == "tail" and "tail_count" in m and "tail_count" in reference:
                lo, hi = newcombe_interval(m["tail_count"], m["n"], reference["tail_count"], reference["n"])
                rows.append(Comparison(quantity, reference[key], m[key], (reference[key] + lo, reference[key] + hi),
                                       rule="matches", note=ref + "; CI: Newcombe's score interval of the difference, "
                                                                  "shifted by the reference"))
                continue
            half = (Z95 if n is None else quantile(n)) * math.hypot(m[f"{key}_se"], reference[f"{key}_se"])
            rows.append(Comparison(quantity, reference[key], m[key], (m[key] - half, m[key] + half), rule="matches",
                                   n=n, note=ref + "; CI = ± q √(SE² + SE_ref²)"))
    return rows


def _run_motions(cfg: MotionsConfig, ctx: SectionContext) -> SectionOutput:
    res = motions.run_motions(cfg, progress=ctx.progress)
    figs = [figure_png(sync_plots.plot_motions(res), "motions",
                       "One point: E⟨x₀, X_t⟩ against t (mean ± 2 SE) for the SDE and the transformer with "
                       "e^{−κ(1)(d−1)t/2} (left); two points: the law of u_T = ⟨X¹_T, X²_T⟩ beside the scalar "
                       "diffusion's (right)")]
    p = res.predicted
    notes = [f"κ(1) = {p['kappa']:.4g}, d = {p['d']}, T = {p['T']:g}, {cfg.model.batch} pairs from cosine {cfg.u0:g}, "
             f"L = {cfg.model.L} steps, m = {cfg.model.m}; reference: {cfg.reference_steps} Euler steps × {cfg.reference_paths} paths"]
    return SectionOutput(res.to_dict(), motion_rows(res.measured, res.reference, p), figs, res.provenance,
                       _seeds(cfg, 4), notes)


register(Section(
    name="motions",
    title="The one- and two-point motions of the noise",
    spec="SPEC §3–§4 (derived: docs/synchronisation.md)",
    claim="Without attention one token is a Brownian motion on the sphere with generator (κ(1)/2)Δ, so "
          "E⟨x₀, X_t⟩ = e^{−κ(1)(d−1)t/2}, and the cosine u of two tokens is the scalar diffusion "
          "du = [κ(u)(d − 2 + u²) − κ(1)(d − 1)u] dt + √(2(1 − u²)(κ(1) − uκ(u))) dB, on the SDE and the transformer.",
    model=MotionsConfig,
    sizes=sizes(
        # L = 100 and 400 reference steps: at L = 20 and 50 the step biases of both were a sizeable part
        # of the SE of 64 pairs (docs/reproduce.md, "Measured false-failure rates")
        tiny={"batch": 64, "L": 100, "reference_steps": 400, "reference_paths": 2000, "bootstrap": 400},
        quick={"batch": 2000, "L": 100, "reference_steps": 400, "reference_paths": 20000},
        full={"batch": 8192, "L": 200, "m": 256, "reference_steps": 1000, "reference_paths": 100000},
        gpu={"batch": 65536, "L": 400, "m": 256, "reference_steps": 2000, "reference_paths": 400000},
    ),
    run=_run_motions,
))
