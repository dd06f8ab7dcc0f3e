"""Results: one protocol, one way to save, one way to load.

Every experiment returns a [`Result`][stochformer.io.results.Result]: its validated ``config``, a labelled
`xarray.Dataset` ([`Result.to_dataset`][stochformer.io.results.Result.to_dataset]), a JSON summary derived from it
(`Result.to_dict`), the run's provenance and time. [`Result.save`][stochformer.io.results.Result.save] writes the folder
every command writes:

```text
config.json     command, resolved config, seed, versions, device, run time
dataset.nc      the dataset (NetCDF-4; xarray.open_dataset reads it)
<summary>.json  the summary
```

and [`load`][stochformer.io.results.load] reads the dataset back, with the provenance in its attributes.
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import h5netcdf
import xarray as xr

from .names import describe, numeric_attrs
from .store import write_json
from .outputs import free_bytes, open_input, write_error, writing
from ..core.validation import validated

DATASET = "dataset.nc"


def run_record(command: str, config: Any, provenance: dict, elapsed_s: float, **extra: Any) -> dict:
    """The provenance block written as ``config.json`` by every command.

    Parameters
    ----------
    command : str
        The command's name.
    config : Any
        The validated config.
    provenance : dict
        Versions, platform and device.
    elapsed_s : float
        The run time in seconds.
    **extra : Any
        Further entries (a result's ``meta``).

    Returns
    -------
    dict
        The record, JSON-able.
    """
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
    """The run's seed: ``seed`` of a config (or of its ``model``, for an experiment's config).

    Parameters
    ----------
    config : Any
        A config (or an experiment's config with a ``model``).

    Returns
    -------
    int or None
        The seed.
    """
    if isinstance(config, dict):
        return config.get("seed", (config.get("model") or {}).get("seed"))
    return getattr(getattr(config, "model", config), "seed", getattr(config, "seed", None))


#: a dataset up to this size is encoded in memory before it is written (so a full disk fails in
#: plain Python, never inside HDF5); a larger one is encoded to a temporary file beside its path
IN_MEMORY_MAX_BYTES = 256 << 20


def _netcdf_bytes(ds: xr.Dataset) -> bytes:
    """``ds`` encoded as a NetCDF-4 file in memory (h5netcdf on a ``BytesIO``, through xarray's public
    ``Dataset.dump_to_store``: the same file ``to_netcdf(engine="h5netcdf")`` writes, with any
    supported xarray release), so that a full disk fails in a plain ``write``, never inside HDF5."""
    buffer = io.BytesIO()
    store = xr.backends.H5NetCDFStore(h5netcdf.File(buffer, "w"), mode="w")
    try:
        ds.dump_to_store(store)
    finally:
        store.close()
    return buffer.getvalue()


def write_dataset(ds: xr.Dataset, path: Path | str) -> None:
    """Write ``ds`` as NetCDF-4 (h5netcdf, a required dependency; ``xarray.open_dataset(path)`` reads
    it back) atomically (`stochformer.io.outputs.writing`), after checking the free space for it.
    A full disk (found before writing when the free space is less than the dataset) or a read-only
    folder raises `WriteError` and leaves no temporary file.

    Parameters
    ----------
    ds : xarray.Dataset
        The data.
    path : str or pathlib.Path
        The file.
    """
    path = Path(path)
    if free_bytes(path.parent) < 1.1 * ds.nbytes + (1 << 20):  # a full disk found before HDF5 writes a byte
        raise write_error(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with writing(path) as tmp:
        if ds.nbytes <= IN_MEMORY_MAX_BYTES:
            data = _netcdf_bytes(ds)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            ds.to_netcdf(tmp, engine="h5netcdf", format="NETCDF4")


class Result:
    """Base of every experiment's result (a dataclass with ``config``, ``provenance``,
    ``elapsed_s`` and optionally ``meta``). Subclasses set `command` and
    `summary_name` and implement `_dataset` (the data) and `to_dict`."""

    command: ClassVar[str] = ""
    summary_name: ClassVar[str] = "summary.json"

    if TYPE_CHECKING:  # each subclass's fields (or properties)
        @property
        def config(self) -> Any: ...
        @property
        def provenance(self) -> dict: ...
        @property
        def elapsed_s(self) -> float: ...

    def _dataset(self) -> xr.Dataset:  # pragma: no cover - interface
        raise NotImplementedError

    def to_dict(self) -> dict:  # pragma: no cover - interface
        """The result's summary JSON (``summary_name``).

        Returns
        -------
        dict
            JSON-able numbers and lists.
        """
        raise NotImplementedError

    def names(self) -> dict[str, dict[str, str]]:
        """The dataset's own names (``long_name`` and ``units``) beside the shared table
        `NAMES` (none by default).

        Returns
        -------
        dict of str to dict
            Variable name → ``{"long_name": ..., "units": ...}``.
        """
        return {}

    def record(self) -> dict:
        """``config.json``: command, config, seed, versions, device, run time (and ``meta``).

        Returns
        -------
        dict
            The record (`run_record`).
        """
        return run_record(self.command, self.config, self.provenance, self.elapsed_s, **getattr(self, "meta", {}))

    def to_dataset(self) -> xr.Dataset:
        """The labelled data (every variable and coordinate described, every dim indexed:
        [`describe`][stochformer.io.names.describe]) with the run record in its attributes: numbers as
        numbers (the seed an integer, uint64 above 2⁶³ − 1), nested values as JSON strings, None left
        out ([`attr_value`][stochformer.io.names.attr_value]).

        Returns
        -------
        xarray.Dataset
            The dataset written as ``dataset.nc``.
        """
        ds = describe(self._dataset().copy(), self.names())
        ds.attrs = numeric_attrs(ds.attrs)
        rec = self.record()
        ds.attrs.update(numeric_attrs({
            "command": self.command,
            "config": json.dumps(rec["config"]),
            "seed": rec["seed"],
            "versions": json.dumps(rec["versions"]),
            "device": str(rec["device"]),
            "elapsed_s": float(rec["elapsed_s"]),
        }))
        return ds

    def save(self, folder: Path | str) -> None:
        """Write config.json, dataset.nc and the summary JSON into ``folder``.

        Parameters
        ----------
        folder : str or pathlib.Path
            An existing folder.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "config.json", self.record())
        write_dataset(self.to_dataset(), folder / DATASET)
        write_json(folder / self.summary_name, self.to_dict())

    def __repr__(self) -> str:
        seed = seed_of(getattr(self, "config", None))
        return f"<{type(self).__name__} {self.command}: seed {seed}, {getattr(self, 'elapsed_s', 0.0):.2f} s; .to_dataset(), .to_dict(), .save(folder)>"


@validated
def load(folder: Path | str) -> xr.Dataset:
    """The dataset of a result folder (or a ``.nc`` file), loaded into memory.

    Parameters
    ----------
    folder : str or pathlib.Path
        A result folder (its ``dataset.nc`` is read) or a ``.nc`` file.

    Returns
    -------
    xarray.Dataset
        The dataset; its attributes hold the command, config, seed, versions and device (nested
        ones as JSON strings).

    Raises
    ------
    FileNotFoundError
        No dataset in ``folder``.
    ValueError
        Not a regular file (a FIFO or a device is refused at once), or a file larger than the
        memory available now.

    Examples
    --------
    >>> import stochformer as sf
    >>> ds = sf.load("runs/simulate")                   # doctest: +SKIP
    """
    from ..core.validation import available_memory

    path = Path(folder)
    if path.is_dir():
        path = path / DATASET
    if not os.path.lexists(path):
        raise FileNotFoundError(f"load: no {DATASET} in {folder}")
    with open_input(path, "load", available_memory()) as fh:
        try:
            with xr.open_dataset(fh, engine="h5netcdf") as ds:
                return ds.load()
        except (OSError, ValueError) as exc:
            raise ValueError(f"load: cannot read {path} as a NetCDF-4 dataset ({exc})") from None
