"""Output folders that cannot destroy or collide, and input files that cannot hang or flood.

**The manifest.** Every folder stochformer writes holds `MARKER`, a manifest of the files it
wrote there: a header bound to the folder (its device and inode, and the command that made it:
``simulate``, ``sweep``, ``reproduce``, ...) and one line per file written (relative path, size,
SHA-256), appended before the file is moved into place; every line carries an HMAC-SHA256 under the
key kept outside every output folder ([`stochformer.io.store.cache_key_bytes`][stochformer.io.store.cache_key_bytes]), each entry's after
the header's, so a line edited, added by hand or copied from another manifest lists nothing. A
folder is stochformer's own only if its
manifest is valid *for that folder*: a manifest copied with the folder (``cp -r``: another inode),
planted, truncated or edited grants nothing. `verify` accepts a folder only if every file in
it is listed with its current size and hash (a file that changed since, a file the manifest does
not list, a link or a special file is refused, naming it; folders go only once empty), and only for the command that made
it; `remove_own` deletes only such a folder. So ``--force``, ``--resume`` and reruns remove
or replace only files stochformer wrote and that are unchanged since, and a folder made by one
command is never taken over by another.

**Writing.** `writing` is the one way a file is written: to a temporary name beside it
(itself listed, so an interrupted write leaves nothing foreign), hashed and recorded in the
manifest of the folder being written (`tracking`), then renamed into place. A failed write
(disk full, read-only file system) raises `WriteError` (one line naming the file) and
leaves no temporary file behind.

**Before any work.** `check_output_folder` refuses an output path that is empty, ``.``, the
working directory or one of its ancestors, the home directory or ``/``; a symbolic link (dangling or
not); a name or path too long for the file system; a path that exists and is not a folder; a
non-empty folder (unless asked to replace it, and then only a folder `verify` accepts); a
location where nothing can be written; and one with less than `MIN_FREE_BYTES` free
(`check_free_space` also takes a size estimate). An existing empty folder is accepted.
`hold` locks the *resolved* output path for the whole run (a lock file ``.NAME.lock`` beside
it, ``flock``), so two spellings of one folder cannot run at once.

**Input files.** [`open_input`][stochformer.io.outputs.open_input] opens a user's input file (a config, a token array, a result):
only a regular file (a FIFO, a device or a folder is refused at once, without blocking), and only
up to a size limit.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: the manifest file of every folder stochformer writes (JSON lines: a header, then one line per file)
MARKER = ".stochformer"
#: the manifest's format (older markers, a bare ``.stochformer`` file included, grant nothing)
MANIFEST_FORMAT = 3
#: the least free space an output location needs before any work (bytes)
MIN_FREE_BYTES = 16 << 20
#: characters stochformer adds to an output folder's name for its own files beside it
#: (``.NAME.XXXXXXXX.partial``, ``NAME.tasks``, ``.NAME.lock``)
NAME_MARGIN = 24
#: bytes stochformer adds below an output folder (``cache/<section>-<key>/<task>-<key>.json`` and temporaries)
PATH_MARGIN = 200
#: the largest manifest read back (bytes)
MANIFEST_MAX_BYTES = 1 << 30

_UMASK = os.umask(0)
os.umask(_UMASK)


class OutputError(ValueError):
    """An output path that cannot or must not be written; the message names the option."""


class WriteError(OutputError):
    """A write that failed (disk full, read-only, no permission): one line naming the file."""


class InputError(ValueError):
    """An input file that cannot be read safely; the message names the option and the file."""


# ---------------------------------------------------------------------------------------------
# input files


def _size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def open_input(path: Path | str, option: str, max_bytes: int) -> BinaryIO:
    """``path`` opened for reading in binary mode, or [`InputError`][stochformer.io.outputs.InputError] naming ``option``: a
    missing or unreadable file, anything but a regular file (a FIFO, a device, a socket or a folder
    is refused without being read or blocking on), or a file of more than ``max_bytes`` bytes.
    Read what it returns with `read_limited` (or a reader that stops at the file's end): a
    file that grows after the check is cut at the limit, not read on.

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    option : str
        The option it came from, for messages.
    max_bytes : int
        The largest size accepted.

    Returns
    -------
    BinaryIO
        The open file.
    """
    p = Path(path)
    try:
        st = os.stat(p)  # before opening: a device is never opened
    except FileNotFoundError:
        raise InputError(f"{option}: cannot read {p}: file not found") from None
    except OSError as exc:
        raise InputError(f"{option}: cannot read {p} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{option}: {p} is a {_kind(st.st_mode)}, not a regular file; give a file")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"{option}: cannot read {p} ({exc.strerror or exc})") from None
    st = os.fstat(fd)  # what was opened (the path may have been swapped in between)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{option}: {p} is a {_kind(st.st_mode)}, not a regular file; give a file")
        raise InputError(f"{option}: {p} is {_size_text(st.st_size)}, more than the {_size_text(max_bytes)} "
                         "this input can be; check the file")
    if fcntl is not None and hasattr(os, "O_NONBLOCK"):
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def read_limited(fh: BinaryIO, option: str, max_bytes: int, name: str = "") -> bytes:
    """At most ``max_bytes`` bytes of ``fh`` ([`InputError`][stochformer.io.outputs.InputError] if there are more)."""
    data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{option}: {name or 'the file'} is more than the {_size_text(max_bytes)} this input can be")
    return data


def read_input(path: Path | str, option: str, max_bytes: int) -> bytes:
    """The bytes of the user's input file ``path`` (see [`open_input`][stochformer.io.outputs.open_input])."""
    with open_input(path, option, max_bytes) as fh:
        return read_limited(fh, option, max_bytes, str(path))


# ---------------------------------------------------------------------------------------------
# the manifest


def file_digest(path: Path | str) -> tuple[int, str]:
    """``(size, sha256 hex)`` of a regular file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


@dataclass
class Manifest:
    """The files stochformer wrote in ``folder`` (relative POSIX path → every ``(size, sha256)``
    it wrote there; ``temps``: the temporary names it created), for ``command``."""

    folder: Path
    command: str
    files: dict[str, set[tuple[int, str]]] = field(default_factory=dict)
    temps: set[str] = field(default_factory=set)
    #: the header's signature, which every entry's signature includes (binds the entries to this manifest)
    seal: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def path(self) -> Path:
        return self.folder / MARKER

    @classmethod
    def start(cls, folder: Path | str, command: str) -> "Manifest":
        """A new manifest for the existing folder ``folder`` (replacing any marker in it)."""
        from ..core.version import __version__

        folder = Path(folder)
        st = os.stat(folder)
        header = {"stochformer": "output manifest", "format": MANIFEST_FORMAT, "command": command, "dev": st.st_dev,
                  "ino": st.st_ino, "version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "nonce": secrets.token_hex(8)}
        seal = header["mac"] = _mac("", header)
        marker = folder / MARKER
        if os.path.lexists(marker) and (marker.is_symlink() or not marker.is_file()):
            raise OutputError(f"--out: {marker} is not a file stochformer wrote; remove it or choose another folder")
        try:
            marker.write_text(json.dumps(header) + "\n")
        except OSError as exc:
            raise write_error(folder / MARKER, exc) from None
        return cls(folder, command, seal=seal)

    @classmethod
    def read(cls, folder: Path | str) -> Optional["Manifest"]:
        """The manifest of ``folder`` if it is valid and bound to this very folder, else None."""
        folder = Path(folder)
        try:
            if folder.is_symlink() or not folder.is_dir():
                return None
            st = os.stat(folder)
            with open_input(folder / MARKER, "manifest", MANIFEST_MAX_BYTES) as fh:
                lines = read_limited(fh, "manifest", MANIFEST_MAX_BYTES).decode("utf-8").splitlines()
            header = json.loads(lines[0])
            ok = (isinstance(header, dict) and header.get("stochformer") == "output manifest"
                  and header.get("format") == MANIFEST_FORMAT and isinstance(header.get("command"), str)
                  and header.get("dev") == st.st_dev and header.get("ino") == st.st_ino and _signed("", header))
        except (OSError, ValueError, IndexError, UnicodeDecodeError):
            return None
        if not ok:
            return None
        manifest = cls(folder, header["command"], seal=header["mac"])
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                rel = entry["path"]
                if not isinstance(rel, str) or not _signed(manifest.seal, entry):
                    continue  # an entry stochformer did not write here (edited or copied in) lists nothing
                if entry.get("temp") is True:
                    manifest.temps.add(rel)
                elif isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str):
                    manifest.files.setdefault(rel, set()).add((entry["size"], entry["sha256"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill: the file it names is treated as unlisted
        return manifest

    def _append(self, entry: dict) -> None:
        line = (json.dumps({**entry, "mac": _mac(self.seal, entry)}) + "\n").encode()
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise write_error(self.path, exc) from None

    def record(self, rel: str, size: int, sha256: str) -> None:
        """List the file ``rel`` (relative to the folder) with its size and hash."""
        self._append({"path": rel, "size": size, "sha256": sha256})
        self.files.setdefault(rel, set()).add((size, sha256))

    def record_temp(self, rel: str) -> None:
        """List the temporary file ``rel`` (removable whatever its content: a write cut short)."""
        self._append({"path": rel, "temp": True})
        self.temps.add(rel)


def _mac(seal: str, record: dict) -> str:
    """The HMAC-SHA256 of a manifest line (without its ``mac``) after ``seal``, under the key kept
    outside every output folder ([`stochformer.io.store.cache_key_bytes`][stochformer.io.store.cache_key_bytes]): a line edited, added or
    copied from another manifest does not match."""
    from .store import cache_key_bytes

    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True)
    return hmac.new(cache_key_bytes(), f"{seal}\n{body}".encode(), hashlib.sha256).hexdigest()


def _signed(seal: str, record: dict) -> bool:
    """Whether the manifest line ``record`` carries its valid signature after ``seal``."""
    mac = record.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, _mac(seal, record))


def _entries(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below ``folder`` (relative POSIX path, lstat), deepest last, links not followed."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        base = Path(root)
        for name in sorted(dirs) + sorted(files):
            p = base / name
            yield p.relative_to(folder).as_posix(), os.lstat(p)


def _not_ours(folder: Path, rel: str, option: str, why: str) -> OutputError:
    return OutputError(f"{option}: {folder / rel} {why}; nothing was removed or replaced: move it out of {folder} "
                       "or choose another folder")


def verify(folder: Path | str, command: Optional[str] = None, option: str = "--force") -> Manifest:
    """The manifest of ``folder`` if stochformer may replace every file in it, else
    [`OutputError`][stochformer.io.outputs.OutputError] naming the first file it may not touch: no valid manifest bound to this
    folder (one copied from elsewhere grants nothing), a manifest made by another command (when
    ``command`` is given), a file not listed, a listed file whose size or hash changed, a link or a
    special file."""
    folder = Path(folder)
    manifest = Manifest.read(folder)
    try:
        entries = list(_entries(folder))
    except OSError as exc:
        raise OutputError(f"{option}: cannot read {folder} ({exc.strerror or exc}); choose another folder") from None
    if manifest is None:
        first = next((rel for rel, _ in entries if rel != MARKER), MARKER)
        raise OutputError(f"{option}: {folder} was not created by stochformer here (no valid {MARKER} manifest bound to "
                          f"this folder; one copied from elsewhere grants nothing); it holds {folder / first}, which is "
                          "never removed or replaced: choose another folder")
    if command is not None and manifest.command != command:
        raise OutputError(f"{option}: {folder} holds the output of 'stochformer {manifest.command}'; 'stochformer {command}' "
                          "never takes over another command's folder: choose another folder")
    for rel, st in entries:
        if rel == MARKER:
            if not stat.S_ISREG(st.st_mode):
                raise _not_ours(folder, rel, option, "is not the manifest stochformer wrote")
            continue
        if stat.S_ISDIR(st.st_mode):
            continue  # a folder goes only once empty: what is in it is checked file by file
        if not stat.S_ISREG(st.st_mode):
            raise _not_ours(folder, rel, option, f"is a {'symbolic link' if stat.S_ISLNK(st.st_mode) else _kind(st.st_mode)} "
                                                 "stochformer did not create")
        elif rel in manifest.temps:
            continue
        elif rel not in manifest.files:
            raise _not_ours(folder, rel, option, f"was not written by stochformer (it is not in {MARKER})")
        elif not any(size == st.st_size for size, _ in manifest.files[rel]) or \
                file_digest(folder / rel) not in manifest.files[rel]:
            raise _not_ours(folder, rel, option, "has changed since stochformer wrote it")
    return manifest


def _below(rel: str, under: str) -> bool:
    return not under or rel == under or rel.startswith(under.rstrip("/") + "/")


def _remove_listed(folder: Path, manifest: Manifest, under: str = "", check: bool = False) -> None:
    """Delete the files of ``manifest`` below ``folder/under`` (with ``check``, only those unchanged
    since: `verify` has not checked them), then the folders left empty; with ``under`` empty,
    the manifest and ``folder`` itself too once nothing else is left."""
    if not (folder / under).is_dir():
        return
    entries = [(rel, st) for rel, st in _entries(folder) if _below(rel, under)]
    for rel, st in entries:
        if stat.S_ISREG(st.st_mode) and rel != MARKER and (
                rel in manifest.temps or rel in manifest.files and (not check or file_digest(folder / rel) in manifest.files[rel])):
            (folder / rel).unlink()
    for rel, st in reversed(entries):
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                (folder / rel).rmdir()  # only if empty
    if under:
        with contextlib.suppress(OSError):
            (folder / under).rmdir()
    elif [p.name for p in folder.iterdir()] == [MARKER]:
        (folder / MARKER).unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()


def remove_own(folder: Path | str, command: Optional[str] = None, option: str = "--force") -> None:
    """Delete ``folder`` if `verify` accepts it (nothing in it but unchanged files stochformer
    wrote, for ``command``); [`OutputError`][stochformer.io.outputs.OutputError] naming the file otherwise (nothing deleted)."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise OutputError(f"{option}: {folder} is not a folder stochformer created; it is never removed")
    try:
        _remove_listed(folder, verify(folder, command, option))
    except OSError as exc:
        raise write_error(folder, exc) from None


def remove_own_files(manifest: Manifest, under: str = "") -> None:
    """Delete what stochformer wrote below ``manifest.folder/under`` and is unchanged since (a
    sub-folder of a folder it is writing, or all of it; files it did not write, or changed since, stay)."""
    try:
        _remove_listed(manifest.folder, manifest, under, check=True)
    except OSError as exc:
        raise write_error(manifest.folder / under, exc) from None


def own_folder(folder: Path | str, command: str, derived: bool = False) -> Manifest:
    """The manifest to write ``folder`` with: the folder's own (which `verify` must accept for
    ``command``) if it has files, else a new one (the folder and its parents created). With
    ``derived`` (a folder whose name stochformer derives, such as ``OUT.tasks``, not one the user
    named), a folder that existed before must be stochformer's own even when empty: a user's empty
    folder of that name is refused, never adopted and later removed."""
    folder = Path(folder)
    try:
        existed = folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True)
        if derived and existed and not os.path.lexists(folder / MARKER) and not any(folder.iterdir()):
            raise OutputError(f"--out: {folder} exists and was not created by stochformer (an empty folder; a run "
                              "killed while creating it leaves one: if so, remove it); move it away or choose another folder")
        if (derived and existed) or any(p.name != MARKER for p in folder.iterdir()):
            return verify(folder, command, "--out")
    except OSError as exc:
        raise write_error(folder, exc) from None
    return Manifest.start(folder, command)


def is_own(folder: Path | str, command: Optional[str] = None) -> bool:
    """Whether ``folder`` is a folder `verify` accepts (for ``command``)."""
    try:
        verify(folder, command)
    except OutputError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# writing


#: real path of a folder being written → its manifest (see `tracking`)
_TRACKED: dict[Path, Manifest] = {}


@contextlib.contextmanager
def tracking(manifest: Manifest) -> Iterator[Manifest]:
    """While the block runs, every file `writing` writes below ``manifest.folder`` is recorded in it."""
    key = Path(os.path.realpath(manifest.folder))
    _TRACKED[key] = manifest
    try:
        yield manifest
    finally:
        if _TRACKED.get(key) is manifest:
            del _TRACKED[key]


def _tracked(path: Path) -> tuple[Optional[Manifest], str]:
    real = Path(os.path.realpath(path.parent)) / path.name
    for folder in real.parents:
        if folder in _TRACKED:
            return _TRACKED[folder], real.relative_to(folder).as_posix()
    return None, ""


#: the errors of a write that fails for the place, not the data (a full disk, a read-only file system, ...)
WRITE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO)


def write_error(path: Path | str, exc: OSError) -> WriteError:
    """One line for a failed write: the file, the reason, what to do."""
    hints = {errno.ENOSPC: "the disk is full: free some space", errno.EROFS: "the file system is read-only",
             errno.EDQUOT: "the disk quota is exceeded", errno.EACCES: "no permission to write there",
             errno.EPERM: "no permission to write there"}
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = hints.get(exc.errno or 0, "check the output location")
    return WriteError(f"cannot write {path}: {reason} [errno {exc.errno}]; {hint}, or choose another --out")


@contextlib.contextmanager
def writing(path: Path | str) -> Iterator[Path]:
    """Write ``path`` atomically: yields a temporary path beside it to write to; on success the file
    is recorded in the manifest of the folder being written (if any, `tracking`) and renamed
    into place; on any failure the temporary file is removed, and an ``OSError`` becomes
    `WriteError`."""
    path = Path(path)
    manifest, rel = _tracked(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise write_error(path, exc) from None
    tmp = Path(name)
    try:
        if manifest is not None:
            manifest.record_temp(str(Path(rel).with_name(tmp.name).as_posix()))
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        if manifest is not None:
            manifest.record(rel, *file_digest(tmp))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise (exc if isinstance(exc, WriteError) else write_error(path, exc)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def free_bytes(out: Path | str) -> int:
    """Free space (bytes) where ``out`` is or would be created (its nearest existing folder)."""
    probe = Path(os.path.abspath(out))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except (OSError, AttributeError):  # pragma: no cover - no statvfs
        return 1 << 62
    return st.f_bavail * st.f_frsize


def check_free_space(out: Path | str, need: float = MIN_FREE_BYTES, option: str = "--out") -> None:
    """[`OutputError`][stochformer.io.outputs.OutputError] unless the file system of ``out`` has ``need`` bytes free."""
    free = free_bytes(out)
    if free < need:
        raise OutputError(f"{option}: {_size_text(free)} free where {out} is written, less than the {_size_text(need)} "
                          "this run may write; free some space or choose another folder")


# ---------------------------------------------------------------------------------------------
# the output location


def refuse_unsafe(out: Path | str, option: str = "--out") -> Path:
    """``out`` as a Path, or [`OutputError`][stochformer.io.outputs.OutputError] if it is empty or names ``.``, an ancestor of the
    working directory, the home directory or the file-system root (places a run must never own)."""
    if not str(out).strip():
        raise OutputError(f"{option}: empty path (an unset variable?); give a new folder, e.g. {option} runs/my-run")
    out = Path(out)
    where = out.expanduser().resolve()
    cwd = Path.cwd().resolve()
    reason = None
    if where == Path(where.anchor):
        reason = "the file-system root"
    elif where == cwd or where in cwd.parents:
        reason = "the working directory" if where == cwd else "an ancestor of the working directory"
    elif where == Path.home().resolve():
        reason = "the home directory"
    if reason:
        raise OutputError(f"{option}: {out} is {reason}; give a new folder, e.g. {option} runs/my-run")
    return out


def _nearest_existing(path: Path) -> Path:
    probe = Path(os.path.abspath(path))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_names(out: Path | str, option: str = "--out") -> None:
    """[`OutputError`][stochformer.io.outputs.OutputError] if a part of ``out`` is longer than the file system allows, or ``out``'s
    name or path leaves no room for the names stochformer adds (`NAME_MARGIN`, `PATH_MARGIN`)."""
    full = Path(os.path.abspath(out))
    probe = _nearest_existing(full)
    try:
        name_max, path_max = os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # pragma: no cover
        name_max, path_max = 255, 4096
    for part in full.parts[1:]:
        if len(os.fsencode(part)) > name_max:
            raise OutputError(f"{option}: the name {part[:40]!r}… is {len(os.fsencode(part))} bytes; this file system "
                              f"allows {name_max}")
    if len(os.fsencode(full.name)) + NAME_MARGIN > name_max:
        raise OutputError(f"{option}: the folder name is {len(os.fsencode(full.name))} bytes; at most "
                          f"{name_max - NAME_MARGIN} (stochformer adds up to {NAME_MARGIN} for its own files beside it)")
    if len(os.fsencode(str(full))) + PATH_MARGIN > path_max:
        raise OutputError(f"{option}: the path is {len(os.fsencode(str(full)))} bytes; at most {path_max - PATH_MARGIN} "
                          f"(stochformer writes up to {PATH_MARGIN} more below it)")


def check_writable(out: Path | str, option: str = "--out") -> None:
    """Fail unless a file can be created at ``out`` (the nearest existing folder on its path is
    tried with a temporary file); nothing is left behind."""
    out = Path(out)
    probe = out if out.is_dir() else out.parent
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{option}: {probe} is a file, not a folder, so {out} cannot be created")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".stochformer-write-test-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise OutputError(f"{option}: cannot write in {probe} ({exc.strerror or exc}); choose another folder") from None


def check_output_folder(out: Path | str, force: bool = False, option: str = "--out", command: Optional[str] = None,
                        replace: bool = False, need: float = MIN_FREE_BYTES) -> Path:
    """Everything about ``out`` that can be checked before any work (see the module docstring).
    A non-empty ``out`` is accepted only with ``force`` or ``replace`` (a rerun that updates its
    own folder: ``--resume``, ``reproduce``), and then only if `verify` accepts it for
    ``command``; ``need``: the free space required (bytes)."""
    out = refuse_unsafe(out, option)
    check_names(out, option)
    if out.is_symlink():
        target = os.readlink(out)
        state = "" if out.exists() else ", which does not exist"
        raise OutputError(f"{option}: {out} is a symbolic link (to {target}{state}); give the real folder or a new one")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option}: {out} exists and is not a folder; choose a new folder")
    try:
        first = next(iter(sorted(out.iterdir())), None) if out.is_dir() else None
    except OSError as exc:
        raise OutputError(f"{option}: cannot read {out} ({exc.strerror or exc}); choose another folder") from None
    if first is not None:
        if not (force or replace):
            raise OutputError(f"{option}: {out} already exists and is not empty (it holds {first.name}; choose another "
                              "folder or pass --force)")
        verify(out, command, "--force" if force else option)
    check_writable(out, option)
    check_free_space(out, need, option)
    return out


def remove_stale_partials(out: Path) -> None:
    """Delete the temporary ``.NAME.*.partial`` folders that an interrupted run left beside ``out``
    (only those `verify` accepts; call while holding ``out``)."""
    if out.parent.is_dir():
        for p in out.parent.glob(f".{out.name}.*.partial"):
            with contextlib.suppress(OutputError):
                remove_own(p)


def lock_path(out: Path | str) -> Path:
    """The lock file of the output path ``out``: beside its *resolved* path, so every spelling of
    one folder (a symbolic link to it, ``a/../b``) takes the same lock."""
    real = Path(os.path.realpath(out))
    return real.parent / f".{real.name}.lock"


@contextlib.contextmanager
def hold(out: Path | str, command: str = "", option: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on the output path ``out`` while the block runs; a second holder
    (another process, or the same one) gets [`OutputError`][stochformer.io.outputs.OutputError] at once, naming the first."""
    out = Path(out)
    path = lock_path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(path, exc) from None
    while True:
        fd = _open_lock(path, out, option)
        if fd is None:  # removed between two looks: look again
            continue
        try:
            _lock(fd)
        except OSError:
            try:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            except OSError:
                holder = "another process"
            os.close(fd)
            raise OutputError(f"{option}: {out} is in use by another stochformer run ({holder}); "
                              "wait for it to finish or choose another folder") from None
        try:  # the previous holder may have removed the file between our open and lock
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    try:
        try:  # who holds it, for a second run's message
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()}, stochformer {command}, started {stamp}".encode())
        except OSError as exc:
            raise write_error(path, exc) from None
        yield out
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                os.unlink(path)
        os.close(fd)


#: what a lock file holds (`hold`): empty while its run starts, else the holder
_LOCK_TEXT = re.compile(rb"(pid \d+, stochformer [^\n]*)?")


def _open_lock(path: Path, out: Path, option: str) -> Optional[int]:
    """A descriptor of the lock file ``path``: created here, or one an earlier run left (a killed run
    cannot remove it: a regular file with one link, empty or naming its holder as `hold` writes);
    None when the name vanished between two looks. Anything else of that name is not stochformer's
    and is never written or removed: [`OutputError`][stochformer.io.outputs.OutputError]."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    except OSError as exc:
        raise write_error(path, exc) from None
    foreign = OutputError(f"{option}: {path} (the lock file of {out}) exists and is not a lock stochformer wrote; "
                          "move it away or choose another folder")
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link, a folder, a socket
            raise foreign from None
        raise write_error(path, exc) from None
    try:
        st = os.fstat(fd)
        ours = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= 4096
        if ours:
            ours = _LOCK_TEXT.fullmatch(os.pread(fd, 4096, 0)) is not None
    except OSError as exc:
        os.close(fd)
        raise write_error(path, exc) from None
    if not ours:
        os.close(fd)
        raise foreign
    return fd


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def make_partial(out: Path, command: str) -> Manifest:
    """A new temporary folder ``.NAME.XXXXXXXX.partial`` beside ``out`` with its manifest (the
    folder that `os.replace` later moves to ``out``)."""
    try:
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp creates 0700; give the usual permissions
        return Manifest.start(tmp, command)
    except BaseException as exc:  # the new folder holds at most its marker, cut short: both go
        with contextlib.suppress(OSError):
            (tmp / MARKER).unlink(missing_ok=True)
            tmp.rmdir()
        if isinstance(exc, OSError):
            raise write_error(out, exc) from None
        raise


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP that arrive inside the block are held and delivered (to the handlers
    in place before it) as it ends: the block is one step for a user who stops the run. In the main
    thread only (elsewhere Python runs no signal handler); a signal's C-level arrival is not blocked,
    only its Python handler deferred, so this holds in a process with other threads too."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    signals = [signal.SIGINT, *(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))]
    before = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):  # each held signal once, in the order it came
            signal.raise_signal(sig)


def discard(manifest: Manifest) -> None:
    """Remove what stochformer wrote in ``manifest.folder`` after a failed run (files it did not
    write stay, and so does the folder then)."""
    with contextlib.suppress(OSError):
        remove_own_files(manifest)
