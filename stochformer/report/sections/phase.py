"""The report's phase diagrams of SPEC §6.6 on the SDE, over (γ, σ) (``phase-gamma``) and over
(d, σ) (``phase-dim``): their rows, the finite-depth table, the section's ``run`` and the presets of
the two grids, which the transformer's phase diagrams of `beyond` reuse.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ..profiles import sizes
from ...experiments import phase
from ...experiments.phase import PhaseConfig
from ...experiments.sync import attention_gamma
from ...plotting import sync as sync_plots
from ..registry import Section, SectionContext, SectionOutput, figure_png, register
from ...measure.verdict import Comparison
from .rows import extrapolated_rate_row, rate_row

# --------------------------------------------------------------------------- §6.6 phase diagrams


def phase_rows(cfg: Any, res: Any) -> list[Comparison]:
    """The rows of a phase diagram: λ̂₁ at every grid point against λ₁ − γ. Extrapolated to Δt → 0
    they test the boundary of the L → ∞ limit (the SDE's), so each is named so; the value at the
    model's own L is in `phase_shift_table`."""
    rows = []
    limit = " (Δt → 0: the L → ∞ boundary)" if cfg.extrapolate else ""
    for i, y in enumerate(res.y):
        for j, x in enumerate(res.x):
            p, name = float(res.pred_lambda_1[i, j]), f"λ̂₁{limit} at {cfg.x_field} = {x:g}, {cfg.y_field} = {y:g} vs λ₁ − γ"
            if cfg.extrapolate:
                rows.append(extrapolated_rate_row(name, p, float(res.value[i, j]), float(res.se[i, j]),
                                                  float(res.err[i, j])))
            else:
                rows.append(rate_row(name, p, float(res.value[i, j]), float(res.se[i, j]), n=cfg.pairs))
    return rows


def phase_shift_table(cfg: Any, res: Any) -> Optional[dict]:
    """The finite-depth shift of every grid point: λ̂₁ at the model's L steps beside its Δt → 0 value
    and the L → ∞ prediction, with the attention's exact finite-Δt exponent −log(1 + γΔt)/Δt (the
    transformer's post-LN step; the noise's own O(Δt) term has no closed form) and whether the
    sign at L steps is that of the L → ∞ prediction; None when not extrapolated."""
    at_L = getattr(res, "value_at_L", None)
    if not cfg.extrapolate or at_L is None:
        return None
    rows = []
    for i, y in enumerate(res.y):
        for j, x in enumerate(res.x):
            point = cfg.point(x, y)
            g, dt = attention_gamma(point) or 0.0, point.dt
            discrete = -math.log1p(g * dt) / dt if point.dynamics == "transformer" and g * dt > -1 else -g
            p, v, vL = float(res.pred_lambda_1[i, j]), float(res.value[i, j]), float(at_L[i, j])
            rows.append([x, y, p, v, vL, vL - v, discrete + g, "yes" if np.sign(vL) == np.sign(p) else "no"])
    return {"title": f"Finite depth: λ̂₁ at L = {cfg.model.L} steps beside Δt → 0 and the L → ∞ prediction",
            "columns": [cfg.x_field, cfg.y_field, "λ₁ − γ (L → ∞)", "λ̂₁ (Δt → 0)", f"λ̂₁ (L = {cfg.model.L})",
                        "shift at L", "attention's shift −log(1+γΔt)/Δt + γ", "sign at L as predicted"],
            "rows": rows}


def run_phase(cfg: Any, ctx: SectionContext) -> SectionOutput:
    """The ``run`` of a phase-diagram section (``cfg``: a [`PhaseConfig`][stochformer.experiments.phase.PhaseConfig],
    on the SDE or the transformer): ``experiments.phase.run_phase`` over the grid, its rows
    (`phase_rows`), the finite-depth table (`phase_shift_table`) and the figure."""
    plots = sync_plots
    res = phase.run_phase(cfg, progress=ctx.progress, store=ctx.workdir, scheduler=ctx.scheduler)
    rows = phase_rows(cfg, res)
    agree = res.agreement()
    notes = [f"grid points where the measured exponent has the predicted sign: {agree.get('same_sign', agree.get('same_side'))} "
             f"of {agree['points']}"]
    tables = []
    shift = phase_shift_table(cfg, res)
    if shift is not None:
        tables.append(shift)
        flips = sum(r[-1] == "no" for r in shift["rows"])
        notes.append(f"The rows judge λ̂₁ extrapolated to Δt → 0, i.e. the boundary of the L → ∞ limit, not of the "
                     f"{cfg.model.dynamics} at its own depth L = {cfg.model.L}: at that depth the sign of λ̂₁ differs from "
                     f"the L → ∞ prediction at {flips} of {len(shift['rows'])} grid points (table: the finite-L shift).")
    figs = [figure_png(plots.plot_phase(res), f"phase-{cfg.x_field}-{cfg.y_field}",
                       f"Measured pair exponent over ({cfg.x_field}, {cfg.y_field}) with the predicted boundaries "
                       "λ₁ − γ = 0 (solid) and λ̄ − 2γ = 0 (dashed)")]
    return SectionOutput(res.to_dict(), rows, figs, res.provenance, {"seed": cfg.model.seed, "rule": "runtime.child_seeds(seed, points)"},
                         notes, tables)


_PHASE_COMMON = {"activation": "relu", "measure": "lyapunov", "dynamics": "sde"}
#: the fields of the (γ, σ) phase diagram on the SDE (ReLU, d = 8, Lyapunov exponent), every profile
PHASE_GS = {**_PHASE_COMMON, "d": 8, "x_field": "gamma", "y_field": "sigma"}
#: the fields of the (d, σ) phase diagram on the SDE (ReLU, γ = −1/2, Lyapunov exponent), every profile
PHASE_DS = {**_PHASE_COMMON, "gamma": -0.5, "x_field": "d", "y_field": "sigma"}

register(Section(
    name="phase-gamma",
    title="Phase diagram over attention γ and noise σ",
    spec="SPEC §6.6, §5 (derived)",
    claim="Noise synchronises tokens even against repulsive attention (γ < 0) exactly where λ₁ − γ < 0: "
          "the measured pair exponent changes sign on the predicted boundary.",
    model=PhaseConfig,
    sizes=sizes(
        tiny={**PHASE_GS, "x_values": [-1.0, 0.0], "y_values": [0.0, 0.5], "L": 20, "T": 2.0, "pairs": 16},
        quick={**PHASE_GS, "x_values": [-2.0, -1.5, -1.0, -0.5, 0.0], "y_values": [0.0, 0.25, 0.5, 0.75],
               "L": 100, "T": 4.0, "pairs": 128},
        full={**PHASE_GS, "x_values": [-3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5],
              "y_values": [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75], "L": 400, "T": 8.0, "pairs": 1024},
        gpu={"pairs": 8192},
    ),
    run=run_phase,
))

register(Section(
    name="phase-dim",
    title="Phase diagram over dimension d and noise σ",
    spec="SPEC §6.6, §5",
    claim="Over (d, σ) with repulsive attention γ = −1/2, the sign of the measured pair exponent follows the "
          "predicted boundary λ₁ − γ = 0.",
    model=PhaseConfig,
    sizes=sizes(
        tiny={**PHASE_DS, "x_values": [3, 8], "y_values": [0.0, 0.4], "L": 20, "T": 2.0, "pairs": 16},
        quick={**PHASE_DS, "x_values": [3, 4, 6, 8, 12, 16], "y_values": [0.0, 0.2, 0.4, 0.6],
               "L": 100, "T": 4.0, "pairs": 128},
        # L = 600: a small step at d = 64, σ = 0.6 (the fastest predicted rate there is 17.5; check_small_step)
        full={**PHASE_DS, "x_values": [3, 4, 5, 6, 8, 12, 16, 32, 64], "y_values": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
              "L": 600, "T": 8.0, "pairs": 1024},
        gpu={"pairs": 8192},
    ),
    run=run_phase,
))
