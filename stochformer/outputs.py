"""Output folders that cannot destroy or collide.

- :func:`check_output_folder` refuses, before any work, an output path that is empty, ``.``, the
  working directory or one of its ancestors, the home directory or ``/``; a path that exists and is
  not a folder; a non-empty folder (unless ``force``, and then only a folder stochformer created);
  and a location where nothing can be written.
- Every folder stochformer creates carries the marker file :data:`MARKER`; :func:`remove_owned`
  deletes only folders that carry it, so ``--force`` never deletes what stochformer did not write.
- :func:`hold` takes an exclusive lock on an output path for the whole run (a lock file
  ``.NAME.lock`` beside it, ``flock``); a second run on the same path fails at once, naming the first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: the file that marks a folder as written by stochformer
MARKER = ".stochformer"


class OutputError(ValueError):
    """An output path that cannot or must not be written; the message names the option."""


def refuse_unsafe(out: Path | str, option: str = "--out") -> Path:
    """``out`` as a Path, or :class:`OutputError` if it is empty or names ``.``, an ancestor of the
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


def has_marker(folder: Path | str) -> bool:
    """Whether ``folder`` was created by stochformer (carries :data:`MARKER`)."""
    return (Path(folder) / MARKER).is_file()


def write_marker(folder: Path | str, command: str = "") -> None:
    """Mark ``folder`` (which must exist) as stochformer's own."""
    from . import __version__

    text = json.dumps({"created_by": "stochformer", "version": __version__, "command": command}) + "\n"
    (Path(folder) / MARKER).write_text(text)


def make_owned(folder: Path | str, command: str = "") -> Path:
    """Create ``folder`` (and parents) if needed and mark it as stochformer's own."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not has_marker(folder):
        write_marker(folder, command)
    return folder


def remove_owned(folder: Path | str, option: str = "--force") -> None:
    """Delete ``folder`` if it is stochformer's own; :class:`OutputError` otherwise (nothing deleted)."""
    folder = Path(folder)
    if not folder.exists():
        return
    if folder.is_symlink() or not folder.is_dir() or not has_marker(folder):
        raise OutputError(f"{option}: {folder} was not created by stochformer (no {MARKER} marker); "
                          "it is never deleted: remove it yourself or choose another folder")
    shutil.rmtree(folder)


def check_writable(out: Path | str, option: str = "--out") -> None:
    """Fail unless a file can be created at ``out`` (the nearest existing folder on its path is
    tried with a temporary file); nothing is left behind."""
    out = Path(out)
    probe = out if out.is_dir() else out.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{option}: {probe} is a file, not a folder, so {out} cannot be created")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".stochformer-write-test-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise OutputError(f"{option}: cannot write in {probe} ({exc.strerror or exc}); choose another folder") from None


def check_output_folder(out: Path | str, force: bool = False, option: str = "--out") -> Path:
    """Everything about ``out`` that can be checked before any work (see the module docstring)."""
    out = refuse_unsafe(out, option)
    if out.exists() and (out.is_symlink() or not out.is_dir()):
        raise OutputError(f"{option}: {out} exists and is not a folder; choose a new folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutputError(f"{option}: {out} already exists and is not empty (choose another folder or pass --force)")
        if not has_marker(out):
            raise OutputError(f"{option}: {out} is not empty and was not created by stochformer (no {MARKER} "
                              "marker); --force replaces only stochformer's own folders: choose another folder")
    check_writable(out, option)
    return out


def remove_stale_partials(out: Path) -> None:
    """Delete the temporary ``.NAME.*.partial`` folders that an interrupted run left beside ``out``
    (only stochformer's own; call while holding ``out``)."""
    if out.parent.is_dir():
        for p in out.parent.glob(f".{out.name}.*.partial"):
            if p.is_dir() and not p.is_symlink() and has_marker(p):
                shutil.rmtree(p, ignore_errors=True)


def lock_path(out: Path | str) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def hold(out: Path | str, command: str = "", option: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on the output path ``out`` while the block runs; a second holder
    (another process, or the same one) gets :class:`OutputError` at once, naming the first."""
    out = Path(out)
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd)
        except OSError:
            try:
                holder = Path(path).read_text().strip() or "another process"
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
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, stochformer {command}, started {stamp}".encode())
    try:
        yield out
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
