"""Figure of the ``spectrum`` experiment: the measured Lyapunov spectrum of one token's tangent flow
beside SPEC §8's closed form, and the log-volume growth it is read from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .core import assign, figure_axes, finish, linear_band

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_spectrum(result: Any, axes: Optional[Any] = None) -> "Figure":
    """SpectrumResult: λ̂_i ± 2√(SE² + err²) against i with the predicted line λ_i (left); the mean
    cumulative Σ log R_ii of every exponent against t (± 2 SE, at the finest level) with the
    predicted slopes (right).

    Parameters
    ----------
    result : SpectrumResult
        What [`run_spectrum`][stochformer.experiments.spectrum.run_spectrum] returns.
    axes : sequence of matplotlib Axes, optional
        Two axes to draw into, or None for a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new one when ``axes`` is None).
    """
    created = axes is None
    fig, ax = figure_axes(axes, (1, 2), (11, 4))
    a1, a2 = ax[0]
    i = np.arange(1, len(result.measured) + 1)
    a1.errorbar(i, result.measured, yerr=2 * np.hypot(result.se, result.err), fmt="o", ms=4, color="C0",
                label="measured (± 2 SE, extrapolation error included)")
    a1.plot(i, result.predicted, "k--", label=r"$\lambda_i = \frac{d-1-2i}{2}\kappa' - \frac{d-1}{2}\kappa$")
    a1.set(xlabel="$i$", ylabel=r"$\lambda_i$", title="Lyapunov spectrum of one token")
    from matplotlib.ticker import MaxNLocator

    a1.xaxis.set_major_locator(MaxNLocator(integer=True))
    a1.legend(fontsize=8)
    t = result.times
    mean, se = result.volume
    for j in range(mean.shape[1]):
        linear_band(a2, t, mean[:, j], se[:, j], f"C{j % 10}")
        a2.plot(t, result.predicted[j] * t, color=f"C{j % 10}", ls="--", lw=0.8)
    a2.set(xlabel="$t$ = layer · $T/L$", ylabel=r"mean $\sum \log R_{ii}$", title="log-growth per direction (dashed: predicted)")
    c = result.config.model
    title = ", ".join([f"{c.dynamics}: {c.activation}"] + [assign(k, v) for k, v in (
        ("d", c.d), ("sigma_U", c.sigma_U), ("sigma_W", c.sigma_W), ("noise_scale", c.noise_scale), ("gain", c.gain), ("T", c.T),
        ("L", c.L))])
    return finish(fig, created, title)
