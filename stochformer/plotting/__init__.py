"""Figures. One module per experiment; plotting reads result objects and never computes them."""

from .core import plot_sphere_paths, plot_summary, save_figure

__all__ = ["plot_sphere_paths", "plot_summary", "save_figure"]
