"""The tutorial notebook (examples/tutorial.ipynb) runs from top to bottom against this checkout,
so that it never drifts from the API."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"


def test_tutorial_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own (inline) backend
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    warned = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr" and "Warning" in o.text]
    assert not warned, warned  # e.g. tqdm's "IProgress not found" in a notebook without ipywidgets
    assert any("sf.solve(" in cell.source for cell in nb.cells if cell.cell_type == "code")  # the entry point is shown
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) >= 6  # every section shows its figure inline: no backend was switched
