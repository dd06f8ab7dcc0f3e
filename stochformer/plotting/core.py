"""Figures (matplotlib, Agg backend). Plotting reads result objects; it never computes them."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save_figure(fig, path: Path | str) -> None:
    """Save atomically-enough (to a temporary name, then rename) and close."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def plot_summary(summary: dict, title: str = "") -> "plt.Figure":
    """E_β (log scale) and mean/min pairwise cosine against layer, ± 2 SE bands."""
    layers = np.asarray(summary["layers"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    e, ese = np.asarray(summary["energy"]), np.asarray(summary["energy_se"])
    ax1.plot(layers, e, color="C0")
    ax1.fill_between(layers, np.maximum(e - 2 * ese, e * 1e-3), e + 2 * ese, color="C0", alpha=0.25)
    if np.all(e > 0):
        ax1.set_yscale("log")
    ax1.set(xlabel="layer", ylabel=r"$E_\beta(\mu)$", title="interaction energy (mean ± 2 SE)")
    for key, color, label in (("mean_cosine", "C1", "mean cosine"), ("min_cosine", "C2", "min cosine")):
        y, se = np.asarray(summary[key]), np.asarray(summary[f"{key}_se"])
        ax2.plot(layers, y, color=color, label=label)
        ax2.fill_between(layers, y - 2 * se, y + 2 * se, color=color, alpha=0.25)
    ax2.set(xlabel="layer", ylabel=r"$\langle x_i, x_j\rangle$", ylim=(-1.05, 1.05), title="pairwise cosines")
    ax2.legend(loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_sphere_paths(paths: np.ndarray, sample: int = 0, title: str = "") -> "plt.Figure":
    """Token paths on S² for one sample: paths (batch, n_paths, N, 3)."""
    P = paths[sample]
    fig = plt.figure(figsize=(5.5, 5.5))
    ax = fig.add_subplot(projection="3d")
    u, v = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", linewidth=0.4)
    colors = plt.cm.viridis(np.linspace(0, 1, P.shape[1]))
    for i in range(P.shape[1]):
        ax.plot(P[:, i, 0], P[:, i, 1], P[:, i, 2], color=colors[i], linewidth=0.9)
        ax.scatter(*P[-1, i], color=colors[i], s=14)
    ax.set_box_aspect((1, 1, 1))
    ax.set_axis_off()
    ax.set_title(title or "token paths (dots: final layer)")
    return fig
