"""Writing results: atomic files and folders, JSON that stays valid, and the store of finished
results ([`ResultStore`][stochformer.io.store.ResultStore]) that makes runs resumable.

Nothing is ever left half-written: files are written to a temporary name and moved into place
(`stochformer.io.outputs.writing`, which also lists each file in the manifest of the folder being
written); output folders are assembled under a temporary name and renamed at the end
([`output_folder`][stochformer.io.store.output_folder]). Entries of a [`ResultStore`][stochformer.io.store.ResultStore] are signed with a key kept outside every
output folder ([`cache_key_bytes`][stochformer.io.store.cache_key_bytes]), so an entry edited or forged in the folder is never reused.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import math
import os
import secrets
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from .outputs import (
    InputError,
    OutputError,
    check_output_folder,
    discard,
    make_partial,
    open_input,
    read_limited,
    remove_own,
    remove_stale_partials,
    signals_held,
    tracking,
    write_error,
    writing,
)

__all__ = ["InputError", "OutputError", "ResultStore", "atomic_write_bytes", "cache_key_bytes", "config_key", "open_input",
           "output_folder", "read_json", "source_hash", "to_jsonable", "tree_hash", "write_json"]


def to_jsonable(obj: Any) -> Any:
    """numpy/torch scalars and arrays → lists and floats; non-finite floats → None.

    Parameters
    ----------
    obj : Any
        Nested dicts, lists, numbers, arrays and tensors.

    Returns
    -------
    Any
        The same structure, JSON-able.
    """
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


#: the largest JSON file read back from an output folder (a stored task or section, bytes)
JSON_MAX_BYTES = 256 << 20


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see `stochformer.io.outputs.writing`).

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    data : bytes
        Its content.
    """
    with writing(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


def write_json(path: Path | str, obj: Any) -> None:
    """Write ``obj`` (made JSON-able: `to_jsonable`) to ``path`` as indented JSON, atomically.

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    obj : Any
        The value.
    """
    atomic_write_bytes(path, (json.dumps(to_jsonable(obj), indent=2) + "\n").encode())


def read_json(path: Path | str, option: str = "json", max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A JSON file read with [`open_input`][stochformer.io.outputs.open_input] (a regular file of at most ``max_bytes``).

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    option : str, optional
        The option it came from, for messages.
    max_bytes : int, optional
        The largest size read.

    Returns
    -------
    Any
        The parsed JSON.
    """
    with open_input(path, option, max_bytes) as fh:
        return json.loads(read_limited(fh, option, max_bytes, str(path)))


@contextlib.contextmanager
def output_folder(out: Path | str, force: bool = False, command: str = "",
                  committed: Optional[Callable[[], None]] = None) -> Iterator[Path]:
    """Assemble an output folder under a temporary name beside ``out``, listing every file in its
    manifest (made by ``command``); move it to ``out`` only on success.

    An existing non-empty ``out`` is replaced only with ``force``, and only if it is wholly
    ``command``'s own unchanged output (`verify`, checked again at the
    moment of replacing); an empty ``out`` is replaced. On failure, what was written is removed.
    The old output's removal, the move and ``committed`` are one step for a signal
    (``io.outputs.signals_held``): a Ctrl-C among them lands after them,
    never between the removal and the move (both outputs lost) or between the move and
    ``committed`` (the caller not knowing its results are in place).

    Parameters
    ----------
    out : str or pathlib.Path
        The output folder.
    force : bool, optional
        Replace a non-empty folder of this command's own output.
    command : str, optional
        The command writing it.
    committed : callable, optional
        Called once the folder is in place, before any signal held meanwhile is delivered.

    Yields
    ------
    pathlib.Path
        The temporary folder to write into.
    """
    out = check_output_folder(out, force, command=command or None, need=0)  # again, now: what changed during the run
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(out.parent, exc) from None
    remove_stale_partials(out)
    manifest = make_partial(out, command)
    moved = False
    try:
        with tracking(manifest):
            yield manifest.folder
        with signals_held():
            if out.is_dir() and any(out.iterdir()):
                remove_own(out, command or None)
            try:
                os.replace(manifest.folder, out)
            except OSError as exc:
                raise write_error(out, exc) from None
            moved = True
            if committed is not None:
                committed()
    except BaseException:
        if not moved:
            discard(manifest)
        raise


def tree_hash(root: Path) -> str:
    """A hash of every ``*.py`` file under ``root``, subfolders included (path and bytes of each).

    Parameters
    ----------
    root : Path
        The folder.

    Returns
    -------
    str
        The first 16 hex digits of the SHA-256 digest.
    """
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """A hash of the whole package's source files (`tree_hash` of the ``stochformer`` folder): part
    of every cache and task-store key, so changed code in any module never reuses results stored by
    other code under the same version number.

    Returns
    -------
    str
        The hex digest.
    """
    return tree_hash(Path(__file__).resolve().parents[1])


def config_key(payload: Any) -> str:
    """A stable hash of a JSON-able payload (resolved config + version).

    Parameters
    ----------
    payload : Any
        JSON-able.

    Returns
    -------
    str
        The hex digest.
    """
    blob = json.dumps(to_jsonable(payload), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


#: environment variable: the folder holding the key that signs cache entries (default
#: ``$XDG_CONFIG_HOME/stochformer``, else ``~/.config/stochformer``)
KEY_DIR_ENV = "STOCHFORMER_CONFIG_DIR"


def key_dir() -> Path:
    """Where the cache's signing key lives: ``$STOCHFORMER_CONFIG_DIR``, else
    ``$XDG_CONFIG_HOME/stochformer``, else ``~/.config/stochformer`` (never an output folder)."""
    if os.environ.get(KEY_DIR_ENV):
        return Path(os.environ[KEY_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "stochformer"


_EPHEMERAL = secrets.token_bytes(32)


def _read_key(path: Path) -> Optional[bytes]:
    st = os.lstat(path)
    if not os.path.isfile(path) or os.path.islink(path) or st.st_mode & 0o077 or st.st_uid != os.getuid():
        warnings.warn(f"{path}: the cache key must be a file of yours that only you can read (mode 600); "
                      "cached results are not reused until it is", stacklevel=3)
        return None
    with open_input(path, "cache key", 4096) as fh:
        key = bytes.fromhex(read_limited(fh, "cache key", 4096).decode().strip())
    return key if len(key) >= 16 else None


def cache_key_bytes() -> bytes:
    """The secret that signs every [`ResultStore`][stochformer.io.store.ResultStore] entry: ``key_dir()/key``, created (mode
    0600) on first use. Where it cannot be read or created, a key of this process alone is used
    (entries are then reused only within the process: a resumed run recomputes them).

    Returns
    -------
    bytes
        The key.
    """
    return _key_at(str(key_dir() / "key"))


@functools.lru_cache(maxsize=8)
def _key_at(where: str) -> bytes:
    path = Path(where)
    folder = path.parent
    try:
        if not os.path.lexists(path):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = folder / f".key.{os.getpid()}.{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, (secrets.token_hex(32) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # atomic, and never replaces a key another process made first
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        return _read_key(path) or _EPHEMERAL
    except (OSError, ValueError, UnicodeDecodeError):
        return _EPHEMERAL


class ResultStore:
    """A content-addressed store of finished results (the tasks of ``tasks.run_tasks``, the
    sections of the report): a folder of ``<name>-<key>.json`` entries, each written atomically.

    Each entry stores its name, key and an HMAC-SHA256 of all three with the result, under the key
    of [`cache_key_bytes`][stochformer.io.store.cache_key_bytes] (kept outside every output folder). An entry whose signature does
    not match (edited, forged, corrupt, truncated, from another config/version, or signed with
    another key) is ignored and recomputed.

    Parameters
    ----------
    folder : str or pathlib.Path
        The store's folder.
    """

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    def _path(self, name: str, key: str) -> Path:
        return self.folder / f"{name}-{key}.json"

    def entry_path(self, name: str, key: str) -> Path:
        """Where the entry ``name`` with ``key`` is (or would be) stored.

        Parameters
        ----------
        name : str
            The entry's name.
        key : str
            Its key (a hash of the resolved config, version and source).

        Returns
        -------
        pathlib.Path
            The entry's file.
        """
        return self._path(name, key)

    @staticmethod
    def _checksum(result: Any) -> str:
        """A plain hash of a result (what anyone can compute; not what makes an entry trusted)."""
        return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()

    @staticmethod
    def signature(name: str, key: str, result: Any) -> str:
        """The HMAC of an entry under [`cache_key_bytes`][stochformer.io.store.cache_key_bytes].

        Parameters
        ----------
        name : str
            The entry's name.
        key : str
            Its key (a hash of the resolved config, version and source).
        result : Any
            The JSON-able result.

        Returns
        -------
        str
            The hex HMAC-SHA256.
        """
        blob = json.dumps([name, key, result], sort_keys=True, separators=(",", ":")).encode()
        return hmac.new(cache_key_bytes(), blob, hashlib.sha256).hexdigest()

    def load(self, name: str, key: str) -> Optional[Any]:
        """The stored result of ``name`` with ``key``, or None where there is none or its signature does not verify.

        Parameters
        ----------
        name : str
            The entry's name.
        key : str
            Its key (a hash of the resolved config, version and source).

        Returns
        -------
        Any or None
            The result.
        """
        path = self._path(name, key)
        try:
            entry = read_json(path, "cache entry")
            if entry["key"] == key and entry["name"] == name and isinstance(entry["hmac"], str) and \
                    hmac.compare_digest(entry["hmac"], self.signature(name, key, entry["result"])):
                return entry["result"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def store(self, name: str, key: str, result: Any) -> None:
        """Store ``result`` (made JSON-able) as the signed entry ``name`` with ``key``, atomically.

        Parameters
        ----------
        name : str
            The entry's name.
        key : str
            Its key (a hash of the resolved config, version and source).
        result : Any
            The result.
        """
        result = to_jsonable(result)
        write_json(self._path(name, key), {"name": name, "key": key, "hmac": self.signature(name, key, result), "result": result})
