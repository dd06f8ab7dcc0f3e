"""Figures of the variants checks and of the bridge (SPEC §7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


def plot_bridge(result) -> "plt.Figure":
    """Mean pairwise cosine against t = layer · T/L for every depth: the block (± 2 SE band), the
    paper's model with the matched MLP (dashed) and the limit SDE of the matched kernel (dotted)."""
    import matplotlib.pyplot as plt

    depths = sorted(result.curves["measured"])
    fig, axes = plt.subplots(1, len(depths), figsize=(4.2 * len(depths), 3.4), squeeze=False)
    for ax, L in zip(axes[0], depths):
        t = np.arange(L + 1) / L
        m, se = result.summary("measured", L)
        ax.plot(t, m, color="C0", label=f"{result.config.block} (measured)")
        ax.fill_between(t, m - 2 * se, m + 2 * se, color="C0", alpha=0.25)
        ax.plot(t, result.summary("model", L)[0], "--", color="C1", label="paper's model, matched MLP")
        ax.plot(t, result.summary("sde", L)[0], ":", color="C3", label="limit SDE, matched κ")
        ax.set(xlabel="depth fraction ℓ/L", ylabel="mean cosine", title=f"L = {L}")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_variants(numbers: dict) -> "plt.Figure":
    """Three panels from the variants section's numbers: equiangular ρ(t) against the ODE (softmax,
    USA); 1 − ρ under post-LN (semi-log) and pre-LN (log-log) attention; the per-layer random
    attention's final mean cosine minus the averaged drift's, against L (± 2 SE)."""
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.6))
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
    b.set(xlabel="t or log t", ylabel="log(1 − ρ)", title="post-LN e^{−2t} vs pre-LN 1/t²")
    b.legend(fontsize=8)
    rows = numbers["resampled"]["rows"]
    L = [r["L"] for r in rows]
    diff, se = np.array([r["diff"] for r in rows]), np.array([r["diff_se"] for r in rows])
    c.errorbar(L, diff, yerr=2 * se, fmt="o-", capsize=3)
    c.axhline(0.0, color="k", lw=0.8)
    c.set(xscale="log", xlabel="depth L", ylabel="final mean cos: resampled − averaged",
          title="per-layer random attention")
    fig.tight_layout()
    return fig
