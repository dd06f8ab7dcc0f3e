"""Figures of the variants checks and of the bridge (SPEC §7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import figure_axes, finish, integer_ticks, linear_band

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_bridge(result, axes: Optional[Any] = None) -> "Figure":
    """Mean pairwise cosine against the depth fraction ℓ/L, one panel per depth: the block (± 2 SE
    band), the paper's model with the matched MLP (dashed) and the limit SDE of the matched kernel
    (dotted). ``axes``: one axis per depth, or None."""
    depths = sorted(result.curves["measured"])
    created = axes is None
    fig, ax = figure_axes(axes, (1, len(depths)), (4.2 * len(depths), 3.4))
    for a, L in zip(ax[0], depths):
        t = np.arange(L + 1) / L
        mean, se = result.summary("measured", L)
        linear_band(a, t, mean, se, "C0", f"{result.config.block} (measured)")
        a.plot(t, result.summary("model", L)[0], "--", color="C1", label="paper's model, matched MLP")
        a.plot(t, result.summary("sde", L)[0], ":", color="C3", label="limit SDE, matched κ")
        a.set(xlabel="depth fraction ℓ/L", ylabel="mean cosine", title=f"L = {L}")
    ax[0][0].legend(fontsize=8)
    return finish(fig, created)


def plot_variants(numbers: dict, axes: Optional[Any] = None) -> "Figure":
    """Three panels from the numbers of `run_variants` (``VariantsResult.to_dict()``):
    equiangular ρ(t) against the ODE (softmax, USA); log(1 − ρ) under post-LN (against t) and pre-LN
    (against log t) attention; the per-layer random attention's final mean cosine minus the
    averaged drift's, against L (± 2 SE). ``axes``: three axes, or None."""
    created = axes is None
    fig, ax = figure_axes(axes, (1, 3), (13, 3.6))
    a, b, c = ax[0]
    for kind, color in (("softmax", "C0"), ("usa", "C1")):
        e = numbers["equiangular"][kind]
        a.plot(e["t"], e["rho_ode"], color=color, label=f"{kind}: ODE")
        a.plot(e["t"][::10], e["rho_sim"][::10], "o", ms=3, color=color, label=f"{kind}: simulated")
    a.set(xlabel="t", ylabel="ρ (equiangular)", title="equiangular tokens")
    a.legend(fontsize=8)
    for key, color, label in (("post", "C0", "post-LN (x: t)"), ("pre", "C3", "pre-LN (x: log t)")):
        f = numbers["normalisation"][key]
        x = np.asarray(f["t"]) if key == "post" else np.log(f["t"])
        b.plot(x, np.log(f["one_minus_rho"]), color=color, label=f"{label}: slope {f['slope']['value']:.2f}")
    b.set(xlabel="t or log t", ylabel="log(1 − ρ)", title=r"post-LN $e^{-2t}$ vs pre-LN $1/t^2$")
    b.legend(fontsize=8)
    rows = numbers["resampled"]["rows"]
    diff, se = np.array([r["diff"] for r in rows]), np.array([r["diff_se"] for r in rows])
    c.errorbar([r["L"] for r in rows], diff, yerr=2 * se, fmt="o-", capsize=3)
    c.axhline(0.0, color="k", lw=0.8)
    c.set(xscale="log", xlabel="depth $L$", ylabel="final mean cos: resampled − averaged",
          title="per-layer random attention")
    integer_ticks(c, [r["L"] for r in rows])
    return finish(fig, created)
