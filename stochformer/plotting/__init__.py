"""Figures. One module per experiment; plotting reads result objects and never computes them.

No function here switches the matplotlib backend. Each takes ``ax=`` (one panel) or ``axes=``
(several) to draw into existing axes, or makes a new figure; each returns the figure.
"""

from .core import FORMATS, plot_sphere_paths, plot_summary, save_figure

__all__ = ["FORMATS", "plot_sphere_paths", "plot_summary", "save_figure"]
