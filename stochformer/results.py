"""Results: one protocol, one way to save, one way to load.

Every experiment returns a :class:`Result`: its validated ``config``, a labelled
:class:`xarray.Dataset` (:meth:`Result.to_dataset`), a JSON summary derived from it
(:meth:`Result.to_dict`), the run's provenance and time. :meth:`Result.save` writes the folder
every command writes::

    config.json     command, resolved config, seed, versions, device, run time
    dataset.nc      the dataset (NetCDF-4; ``xarray.open_dataset`` reads it)
    <summary>.json  the summary

and :func:`load` reads the dataset back, with the provenance in its attributes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import xarray as xr

from .io import write_json

DATASET = "dataset.nc"


def run_record(command: str, config: Any, provenance: dict, elapsed_s: float, **extra: Any) -> dict:
    """The provenance block written as ``config.json`` by every command."""
    return {
        "command": command,
        "config": config.model_dump(mode="json") if hasattr(config, "model_dump") else config,
        "seed": seed_of(config),
        "version": provenance.get("stochformer"),
        "versions": provenance,
        "device": provenance.get("device"),
        "elapsed_s": elapsed_s,
        **extra,
    }


def seed_of(config: Any) -> Any:
    """The run's seed: ``seed`` of a config (or of its ``model``, for an experiment's config)."""
    if isinstance(config, dict):
        return config.get("seed", (config.get("model") or {}).get("seed"))
    return getattr(getattr(config, "model", config), "seed", getattr(config, "seed", None))


def write_dataset(ds: xr.Dataset, path: Path | str) -> None:
    """Write ``ds`` as NetCDF-4 to a temporary name, then move it into place. The engine is
    xarray's default (netCDF4 when installed, else h5netcdf, a required dependency), the one
    ``xarray.open_dataset(path)`` picks to read it back."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        ds.to_netcdf(tmp, format="NETCDF4")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Result:
    """Base of every experiment's result (a dataclass with ``config``, ``provenance``,
    ``elapsed_s`` and optionally ``meta``). Subclasses set :attr:`command` and
    :attr:`summary_name` and implement :meth:`_dataset` (the data) and :meth:`to_dict`."""

    command: ClassVar[str] = ""
    summary_name: ClassVar[str] = "summary.json"

    def _dataset(self) -> xr.Dataset:  # pragma: no cover - interface
        raise NotImplementedError

    def to_dict(self) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def record(self) -> dict:
        """``config.json``: command, config, seed, versions, device, run time (and ``meta``)."""
        return run_record(self.command, self.config, self.provenance, self.elapsed_s, **getattr(self, "meta", {}))

    def to_dataset(self) -> xr.Dataset:
        """The labelled data with the run record in its attributes (JSON strings where nested)."""
        ds = self._dataset().copy()
        rec = self.record()
        ds.attrs.update({
            "command": self.command,
            "config": json.dumps(rec["config"]),
            "seed": "none" if rec["seed"] is None else str(rec["seed"]),
            "versions": json.dumps(rec["versions"]),
            "device": str(rec["device"]),
            "elapsed_s": float(rec["elapsed_s"]),
        })
        return ds

    def save(self, folder: Path | str) -> None:
        """Write config.json, dataset.nc and the summary JSON into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "config.json", self.record())
        write_dataset(self.to_dataset(), folder / DATASET)
        write_json(folder / self.summary_name, self.to_dict())

    def __repr__(self) -> str:
        seed = seed_of(getattr(self, "config", None))
        return f"<{type(self).__name__} {self.command}: seed {seed}, {getattr(self, 'elapsed_s', 0.0):.2f} s; .to_dataset(), .to_dict(), .save(folder)>"


def load(folder: Path | str) -> xr.Dataset:
    """The dataset of a result folder (or a ``.nc`` file), loaded into memory; its attributes
    hold the command, config, seed, versions and device (nested ones as JSON strings)."""
    path = Path(folder)
    if path.is_dir():
        path = path / DATASET
    if not path.exists():
        raise FileNotFoundError(f"load: no {DATASET} in {folder}")
    with xr.open_dataset(path) as ds:
        return ds.load()
