"""Writing results: atomic files and folders, JSON that stays valid, and the store of finished
results (:class:`ResultStore`) that makes runs resumable.

Nothing is ever left half-written: files are written to a temporary name and moved into place
with :func:`os.replace`; output folders are assembled under a temporary name and renamed at the
end (:func:`output_folder`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from .outputs import check_output_folder, remove_owned, remove_stale_partials, write_marker


def to_jsonable(obj: Any) -> Any:
    """numpy/torch scalars and arrays → lists and floats; non-finite floats → None."""
    if hasattr(obj, "detach"):
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: Path | str, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(to_jsonable(obj), indent=2) + "\n").encode())


def read_json(path: Path | str) -> Any:
    return json.loads(Path(path).read_text())


@contextlib.contextmanager
def output_folder(out: Path | str, force: bool = False) -> Iterator[Path]:
    """Assemble an output folder under a temporary name; move it to ``out`` only on success.

    The folder is marked as stochformer's own; an existing ``out`` is replaced only if it is
    stochformer's own (``force``), and temporary folders of interrupted runs are removed."""
    out = check_output_folder(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    try:
        write_marker(tmp)
        yield tmp
        remove_owned(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """A hash of the package's source files: part of every cache and task-store key, so changed
    code never reuses results stored by other code under the same version number."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def config_key(payload: Any) -> str:
    """A stable hash of a JSON-able payload (resolved config + version)."""
    blob = json.dumps(to_jsonable(payload), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


class ResultStore:
    """A content-addressed store of finished results (the tasks of ``tasks.run_tasks``, the
    sections of the report): a folder of ``<name>-<key>.json`` entries, each written atomically.

    Each entry stores its key and a checksum of its result; an entry whose key or checksum does not
    match (corrupt, truncated, or from another config/version) is ignored and recomputed.
    """

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    def _path(self, name: str, key: str) -> Path:
        return self.folder / f"{name}-{key}.json"

    def entry_path(self, name: str, key: str) -> Path:
        """Where the entry ``name`` with ``key`` is (or would be) stored."""
        return self._path(name, key)

    @staticmethod
    def _checksum(result: Any) -> str:
        return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()

    def load(self, name: str, key: str) -> Optional[Any]:
        path = self._path(name, key)
        try:
            entry = json.loads(path.read_text())
            if entry["key"] == key and entry["name"] == name and entry["checksum"] == self._checksum(entry["result"]):
                return entry["result"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def store(self, name: str, key: str, result: Any) -> None:
        result = to_jsonable(result)
        write_json(self._path(name, key), {"name": name, "key": key, "checksum": self._checksum(result), "result": result})
