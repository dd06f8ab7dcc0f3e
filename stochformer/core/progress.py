"""Progress bars for long runs: tqdm's notebook widget in Jupyter when ipywidgets is installed,
its text bar everywhere else (so a notebook without ipywidgets shows a text bar instead of
tqdm's "IProgress not found" warning)."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm"]
