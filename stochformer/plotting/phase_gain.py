"""Figure of the order-to-chaos transition (SPEC §8, docs/theory.md "The gain and the order-to-chaos
transition"): λ₁ over the gain g of the inner weights and the bias scale σ_U, from
[`stochformer.model.kernel.gain_phase`][stochformer.model.kernel.gain_phase], with its zero contour, the critical gain g_c(σ_U)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import SIGNED_CMAP, assign, figure_axes, finish

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_gain_phase(phase: Any, ax: Optional[Any] = None) -> "Figure":
    """GainPhase: λ₁(g, σ_U) in the signed colour map `SIGNED_CMAP` (cividis) centred on 0 (dark:
    λ₁ < 0, synchronisation by noise; light: λ₁ > 0, chaos), the contour λ₁ = 0 and the points
    g_c(σ_U) of ``critical_gain`` on it (they coincide: both are the root of the same formula). ``ax``: one axes, or None for a new figure.

    Parameters
    ----------
    phase : GainPhase
        λ₁ on the (g, σ_U) grid.
    ax : matplotlib.axes.Axes, optional
        One axes.

    Returns
    -------
    matplotlib.figure.Figure
        The figure (the given axes' figure, or a new one).
    """
    created = ax is None
    fig, axes = figure_axes(None if ax is None else [ax], (1, 1), (6.5, 4.5))
    a = axes[0, 0]
    from matplotlib.colors import TwoSlopeNorm

    lam = phase.lambda_1
    lo, hi = float(np.min(lam)), float(np.max(lam))
    norm = TwoSlopeNorm(0.0, min(lo, -1e-12), max(hi, 1e-12))
    mesh = a.pcolormesh(phase.gains, phase.sigmas, lam, cmap=SIGNED_CMAP, norm=norm, shading="nearest")
    fig.colorbar(mesh, ax=a, label=r"$\lambda_1 = \frac{d-3}{2}\kappa'(1) - \frac{d-1}{2}\kappa(1)$")
    if lo < 0 < hi:
        a.contour(phase.gains, phase.sigmas, lam, levels=[0.0], colors="k", linewidths=1.2)
    found = np.isfinite(phase.g_c) & (phase.g_c <= phase.gains.max())
    a.plot(phase.g_c[found], phase.sigmas[found], "o", ms=3, color="k", mfc="w", label="$g_c$ (brentq), $\\lambda_1 = 0$")
    a.set(xlabel="gain $g$ (std of the inner weights $U$)", ylabel=r"$\sigma_U$", xlim=(phase.gains.min(), phase.gains.max()))
    a.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.02), borderaxespad=0.0, frameon=False)
    k = phase.kernel
    title = ", ".join([f"order to chaos: {k.name}"] + [assign(n, v) for n, v in (("d", k.d), ("sigma_W", k.sigma_W),
                                                                                   ("noise_scale", k.scale))])
    return finish(fig, created, title)
