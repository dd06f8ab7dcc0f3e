"""Output folders that cannot destroy or collide: unsafe paths refused, --force only on
stochformer's own folders (a valid manifest bound to the folder), one run per folder at a time, writability checked before any work,
Ctrl-C that keeps what finished and says how to resume.

Faults end in one line and a clean folder, with real processes where the fault is a process's:

- A full disk: a real tmpfs (mounted here when permitted, else skipped with the reason) filled
  while a real ``simulate`` or ``sweep`` computes; and, everywhere, ENOSPC at every operation of a
  run that creates or writes something (the lock, the partial folder, its manifest, a temporary
  file, a rename, a file's data: fault injection). One line naming the errno, no traceback, no
  temporary file or partial folder, no lock; finished tasks kept; the rerun (or ``--resume``) completes.
- A read-only file system: refused before any work; turned read-only mid-run: one line.
- Ctrl-C or SIGTERM inside a finaliser (a garbage collection) is raised again, never lost.
- SIGTERM and SIGHUP at seeded random moments of a real ``simulate`` and ``sweep``: exit status
  128 + the signal's number, one line saying what was kept and the command to continue, no stale
  lock, and that command then completes.
- ``kill -9`` of a ``sweep --workers 2``: its worker processes are gone within seconds.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.io.outputs import (MARKER, OutputError, check_output_folder, hold, is_own, lock_path, make_partial, remove_own,
                                 tracking, writing)

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--quiet", "--set", "L=3", "--set", "N=4", "--set", "batch=2", "--set", "m=8"]
CLI = [sys.executable, "-c", "from stochformer.cli import main; main()"]



def _interruptible() -> None:
    """In the child: SIGINT back to its default, so that Python turns it into KeyboardInterrupt even
    when the suite itself runs with SIGINT ignored (a background job of a non-interactive shell)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """A working directory holding files that must survive every refused command."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    (work / "data" / "keep.txt").write_text("mine too")
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("out", ["", " ", ".", "..", "./", "WORK", "/", "~"])
@pytest.mark.parametrize("command", [["simulate", *FAST], ["converge", "--quiet"], ["reproduce", "--profile", "tiny"]])
def test_force_refuses_unsafe_paths(scratch: Path, out: str, command: list[str]) -> None:
    out = str(scratch) if out == "WORK" else out
    before = _tree(scratch.parent)
    res = CliRunner().invoke(main, [*command, "--out", out, "--force"])
    assert res.exit_code == 2 and "--out:" in res.output and "Traceback" not in res.output
    assert _tree(scratch.parent) == before


def test_sweep_force_refuses_empty_path(scratch: Path) -> None:
    (scratch / "s.toml").write_text("samples = 2\nsamples_per_task = 2\n[model]\nL = 2\nN = 4\n")
    before = _tree(scratch)
    res = CliRunner().invoke(main, ["sweep", "--config", "s.toml", "--out", "", "--force", "--scheduler", "serial"])
    assert res.exit_code == 2 and "--out: empty path" in res.output and _tree(scratch) == before


def test_force_replaces_only_own_folders(scratch: Path) -> None:
    res = CliRunner().invoke(main, ["simulate", *FAST, "--out", "data", "--force"])
    assert res.exit_code == 2 and "not created by stochformer" in res.output
    assert _tree(scratch / "data") == {"keep.txt": b"mine too"}
    assert CliRunner().invoke(main, ["simulate", *FAST, "--out", "run"]).exit_code == 0
    assert is_own(scratch / "run", "simulate")
    res = CliRunner().invoke(main, ["simulate", *FAST, "--set", "seed=5", "--out", "run", "--force"])
    assert res.exit_code == 0 and '"seed": 5' in (scratch / "run" / "config.json").read_text()
    with pytest.raises(OutputError, match="not created by stochformer"):
        remove_own(scratch / "data")
    (scratch / "data" / MARKER).mkdir()  # a folder named like the marker is not the marker
    with pytest.raises(OutputError):
        remove_own(scratch / "data")
    assert _tree(scratch / "data") == {"keep.txt": b"mine too"}


@pytest.mark.parametrize("out, text", [
    ("/dev/null", "exists and is not a folder"),
    ("notes.txt", "exists and is not a folder"),
    ("notes.txt/sub", "is a file, not a folder"),
    ("/proc/stochformer-out", "cannot write in /proc"),
])
def test_unusable_output_paths_fail_before_any_work(scratch: Path, out: str, text: str) -> None:
    for command in (["simulate", *FAST], ["sync", "--quiet", "--set", "pairs=2", "--set", "model.batch=2"]):
        res = CliRunner().invoke(main, [*command, "--out", out])
        assert res.exit_code == 2 and text in res.output and "Traceback" not in res.output
    assert (scratch / "notes.txt").read_text() == "mine"


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with hold(out, "first"):
        with pytest.raises(OutputError, match=f"in use by another stochformer run \\(pid {os.getpid()}, stochformer first"):
            with hold(out, "second"):
                pass
        (tmp_path / "s.toml").write_text("samples = 2\nsamples_per_task = 2\n[model]\nL = 2\nN = 4\n")
        res = CliRunner().invoke(main, ["sweep", "--config", str(tmp_path / "s.toml"), "--out", str(out), "--scheduler", "serial"])
        assert res.exit_code == 2 and "in use" in res.output and not out.exists()
    assert not lock_path(out).exists()
    with hold(out, "again"):
        pass


def test_leftovers_of_interrupted_runs_are_removed(scratch: Path) -> None:
    manifest = make_partial(scratch / "run", "simulate")  # what a killed run leaves: its partial folder
    with tracking(manifest), writing(manifest.folder / "config.json") as tmp:
        tmp.write_text("{}")
    ours, foreign = manifest.folder, scratch / ".run.xyz.partial"
    foreign.mkdir()
    (foreign / "x").write_text("not ours")
    (foreign / MARKER).write_text("{}")  # a planted marker grants nothing
    assert CliRunner().invoke(main, ["simulate", *FAST, "--out", "run"]).exit_code == 0
    assert not ours.exists() and (foreign / "x").exists() and not lock_path(scratch / "run").exists()
    store = scratch / "conv.tasks"
    store.mkdir()
    (store / "x").write_text("not ours")
    res = CliRunner().invoke(main, ["converge", "--quiet", "--out", "conv"])
    assert res.exit_code == 2 and "conv.tasks" in res.output and (store / "x").exists()


def test_check_output_folder_accepts_new_and_empty(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output_folder("new/deeper") == Path("new/deeper") and not Path("new").exists()
    Path("empty").mkdir()
    assert check_output_folder("empty") == Path("empty")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_two_processes_on_one_out_and_ctrl_c(tmp_path: Path) -> None:
    """A second run on a held folder fails at once naming the first; Ctrl-C on the first (no task
    store) exits 130 with one line, and nothing is left behind."""
    out = tmp_path / "o"
    args = ["simulate", "--quiet", "--set", "L=1000000", "--set", "record_every=1000", "--set", "N=8", "--set", "batch=2",
            "--set", "m=8", "--out", str(out)]
    first = subprocess.Popen([*CLI, *args], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_interruptible)
    _wait_for(lambda: lock_path(out).exists() and lock_path(out).read_text(), first)
    second = CliRunner().invoke(main, [*args[:-2], "--set", "seed=9", "--out", str(out)])  # this process
    assert second.exit_code == 2 and f"in use by another stochformer run (pid {first.pid}, stochformer simulate" in second.output
    assert first.poll() is None
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=60)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert first.returncode == 130 and len(lines) == 1, stderr
    assert lines[0].startswith("interrupted: nothing was written; run the same command again to start afresh: "
                               "stochformer simulate --quiet")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command, store, again", [
    (["converge", "--quiet", "--set", "model.N=4", "--set", "model.batch=8", "--set", "samples_per_task=4", "--set", "depths=[4,8]",
      "--set", "widths=[4,8]", "--set", "bootstrap=100", "--out", "conv"], "conv.tasks", []),
    (["sweep", "--config", "s.toml", "--quiet", "--scheduler", "serial", "--out", "sw"], "sw/tasks", ["--resume"]),
])
def test_ctrl_c_keeps_finished_tasks_and_says_how_to_resume(scratch: Path, monkeypatch, command, store, again) -> None:
    """Ctrl-C after the first stored task (in-process; the real signal is tested above): exit 130
    and one line naming what was kept and the command as given to ``main`` (not the process's own
    argv, here a notebook kernel's); the same command (or --resume) completes and leaves nothing
    else behind."""
    import shlex

    from stochformer.io.store import ResultStore

    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "kernel-1.json"])

    (scratch / "s.toml").write_text("samples = 8\nsamples_per_task = 2\n[model]\nL = 3\nN = 4\nm = 8\n")
    original, stored = ResultStore.store, []

    def store_then_interrupt(self, *args, **kwargs):
        original(self, *args, **kwargs)
        stored.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResultStore, "store", store_then_interrupt)
    res = CliRunner().invoke(main, command)
    lines = [line for line in res.output.splitlines() if line.strip() and not line.startswith("sweep: ")]
    assert res.exit_code == 130 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert lines[0].startswith(f"interrupted: finished tasks are kept in {store}; ")
    assert lines[0].endswith(("continue with: " if again else "run the same command again to continue: ")
                             + shlex.join(["stochformer", *command, *again])), lines[0]
    assert len(list((scratch / store).glob("*.json"))) == 1
    monkeypatch.setattr(ResultStore, "store", original)
    res = CliRunner().invoke(main, [*command, *again])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in scratch.iterdir()) == sorted(["data", "notes.txt", "s.toml", command[-1]])


def test_dask_connect_fails_fast_naming_the_address(monkeypatch) -> None:
    from stochformer.tasks.parallel import TIMEOUT_ENV, _connect

    monkeypatch.setenv(TIMEOUT_ENV, "1")
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:1' within 1 s"):
        _connect("tcp://127.0.0.1:1")
    assert time.monotonic() - t0 < 10
    with pytest.raises(ValueError, match="tls:// address but Dask's TLS settings are missing"):
        _connect("tls://127.0.0.1:1")
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=TIMEOUT_ENV):
        _connect("tcp://127.0.0.1:1")


PY = [sys.executable, "-m", "stochformer"]
SWEEP_FILE = "samples = 6\nsamples_per_task = 1\n[model]\nL = {L}\nN = 4\nm = 8\nrecord_every = {every}\n"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _leftovers(folder: Path) -> list[str]:
    """Temporary files, partial folders and locks anywhere below ``folder``."""
    return [str(p) for p in folder.rglob("*") if p.name.endswith((".tmp", ".partial", ".lock"))]


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    """A tmpfs of ``size`` mounted at ``where``; the test is skipped if mounting is not permitted."""
    where.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or 'mount failed'}); the injected faults cover ENOSPC")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder: Path, leave: int = 4096) -> None:
    """Fill the file system of ``folder`` up to ``leave`` bytes."""
    st = os.statvfs(folder)
    with open(folder / "ballast", "wb") as fh:
        with contextlib.suppress(OSError):
            fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


# --- a full disk ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_disk_full_on_a_real_tmpfs(tmp_path: Path, command: str) -> None:
    with tmpfs(tmp_path / "disk", "24m") as disk:
        (tmp_path / "s.toml").write_text(SWEEP_FILE.format(L=20000, every=10))
        out = disk / "run"
        args = (["simulate", "--quiet", "--set", "L=30000", "--set", "N=8", "--set", "batch=4", "--set", "m=8", "--set",
                 "record_every=10", "--out", str(out)] if command == "simulate" else
                ["sweep", "--config", str(tmp_path / "s.toml"), "--quiet", "--scheduler", "serial", "--out", str(out)])
        proc = subprocess.Popen([*PY, *args], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: lock_path(out).exists(), proc)  # every check passed: the run computes now
        if command == "sweep":
            _wait_for(lambda: len(list((out / "tasks").glob("*.json"))) >= 1, proc)
        _fill(disk)
        stdout, stderr = proc.communicate(timeout=300)
        lines = _lines(stderr)
        assert proc.returncode == 1 and len(lines) == 1, stderr
        assert "No space left on device [errno 28]" in lines[0] and "Traceback" not in stderr
        assert not _leftovers(disk), _leftovers(disk)
        if command == "sweep":
            assert "finished tasks are kept in" in lines[0] and "--resume" in lines[0]
            kept = len(list((out / "tasks").glob("*.json")))
            assert kept >= 1
        else:
            assert not out.exists()
        (disk / "ballast").unlink()
        again = args + (["--resume"] if command == "sweep" else [])
        res = subprocess.run([*PY, *again], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        assert is_own(out, command) and not _leftovers(disk)


@pytest.mark.slow
def test_too_little_free_space_is_refused_before_any_work(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "8m") as disk:
        res = subprocess.run([*PY, "simulate", *FAST, "--out", str(disk / "run")], env=_env(), cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "free where" in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert sorted(p.name for p in disk.iterdir()) == []


@pytest.mark.slow
def test_read_only_file_system(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "64m") as disk:
        (disk / "sub").mkdir()
        remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only ({remount.stderr.strip()})")
        res = subprocess.run([*PY, "simulate", *FAST, "--out", str(disk / "sub" / "run")], env=_env(), cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "Read-only file system" in res.stderr and "Traceback" not in res.stderr, res.stderr
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        subprocess.run(["rmdir", str(disk / "sub")], check=True)
        # a sweep into the (empty) mount point itself: its lock is outside, its tasks inside
        (tmp_path / "s.toml").write_text(SWEEP_FILE.format(L=3000, every=100))
        args = ["sweep", "--config", "s.toml", "--quiet", "--scheduler", "serial", "--out", str(disk)]
        proc = subprocess.Popen([*PY, *args], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: len(list((disk / "tasks").glob("*.json"))) >= 1, proc)
        end = time.monotonic() + 30
        while subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True).returncode != 0:
            assert time.monotonic() < end and proc.poll() is None, "could not remount read-only mid-run"
            time.sleep(0.01)
        _, stderr = proc.communicate(timeout=300)
        lines = _lines(stderr)
        assert proc.returncode == 1 and len(lines) == 1 and "Read-only file system [errno 30]" in lines[0], stderr
        assert "finished tasks are kept in" in lines[0] and "Traceback" not in stderr
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        assert not lock_path(disk).exists()
        res = subprocess.run([*PY, *args, "--resume"], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and is_own(disk, "sweep"), res.stderr


class _FileSystemFaults:
    """ENOSPC at the ``at``-th operation that creates or writes something below ``root`` (0: none,
    only counted), whichever module of ``stochformer.io`` makes it: ``os.open`` for writing,
    ``os.write`` on such a descriptor, ``os.replace``, ``os.chmod``, ``mkdir``, ``tempfile.mkdtemp`` /
    ``mkstemp``, ``Path.write_text`` / ``write_bytes``, ``open(..., "w...")``; and the data of a file
    written through ``writing`` (its ``file_digest``: after its data went to the temporary file)."""

    MODULES = ("stochformer.io.outputs", "stochformer.io.store", "stochformer.io.results")

    def __init__(self, monkeypatch, root: Path, at: int = 0) -> None:
        import importlib
        import tempfile
        import types

        self.root, self.at, self.seen, self.fds = str(root.resolve()), at, 0, set()
        real_os, real_tempfile = os, tempfile
        fake_os = types.SimpleNamespace(**{k: getattr(real_os, k) for k in dir(real_os) if not k.startswith("__")})
        fake_os.path = real_os.path

        def opened(path, flags, *args, **kwargs):
            writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND)
            if writes:
                self._op(path)
            fd = real_os.open(path, flags, *args, **kwargs)
            if writes and self._below(path):
                self.fds.add(fd)
            return fd

        def written(fd, data):
            if fd in self.fds:
                self._op(self.root)
            return real_os.write(fd, data)

        def closed(fd):
            self.fds.discard(fd)
            return real_os.close(fd)

        fake_os.open, fake_os.write, fake_os.close = opened, written, closed
        for name in ("replace", "rename", "chmod", "mkdir", "makedirs", "link"):
            setattr(fake_os, name, self._wrap(getattr(real_os, name)))
        fake_tempfile = types.SimpleNamespace(**{k: getattr(real_tempfile, k) for k in dir(real_tempfile) if not k.startswith("__")})
        for name in ("mkdtemp", "mkstemp"):
            setattr(fake_tempfile, name, self._wrap(getattr(real_tempfile, name), lambda *a, **k: k.get("dir", self.root)))
        for module in map(importlib.import_module, self.MODULES):
            if hasattr(module, "os"):
                monkeypatch.setattr(module, "os", fake_os)
            if hasattr(module, "tempfile"):
                monkeypatch.setattr(module, "tempfile", fake_tempfile)
            monkeypatch.setattr(module, "open", self._wrap_open(open), raising=False)
        for name in ("write_text", "write_bytes", "mkdir"):
            real = getattr(Path, name)
            monkeypatch.setattr(Path, name, self._wrap(real))
        import stochformer.io.outputs as outputs

        digest = outputs.file_digest

        def digested(path):
            self._op(path)
            return digest(path)

        monkeypatch.setattr(outputs, "file_digest", digested)

    def _below(self, path) -> bool:
        return os.path.abspath(os.fspath(path)).startswith(self.root)

    def _op(self, path) -> None:
        if not self._below(path):
            return
        self.seen += 1
        if self.seen == self.at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))

    def _wrap(self, fn, where=lambda *a, **k: a[0]):
        def wrapped(*args, **kwargs):
            self._op(where(*args, **kwargs))
            return fn(*args, **kwargs)
        return wrapped

    def _wrap_open(self, fn):
        def wrapped(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+") and isinstance(file, (str, os.PathLike)):
                self._op(file)
            return fn(file, mode, *args, **kwargs)
        return wrapped


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_file_system_operation_failing_at_every_position_ends_cleanly(tmp_path: Path, monkeypatch, command: str) -> None:
    """ENOSPC at the k-th operation that creates or writes anything below the run's folder (the
    lock, the partial folder, its manifest and each line added to it, a temporary file, a rename, a
    file's data), for every k: one line naming the errno, no traceback, no temporary file, partial
    folder or lock left; a simulate leaves nothing, a sweep's ``--resume`` completes."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "s.toml").write_text(SWEEP_FILE.format(L=3, every=1).replace("samples = 6", "samples = 2"))
    args = ["simulate", *FAST] if command == "simulate" else ["sweep", "--config", "s.toml", "--quiet", "--scheduler", "serial"]
    with monkeypatch.context() as m:
        faults = _FileSystemFaults(m, work)
        assert CliRunner().invoke(main, [*args, "--out", "count"]).exit_code == 0
    total = faults.seen
    assert total >= 10
    for k in range(1, total + 1):
        out = work / f"run{k}"
        with monkeypatch.context() as m:
            faults = _FileSystemFaults(m, work, k)
            res = CliRunner().invoke(main, [*args, "--out", str(out)])
        lines = [line for line in _lines(res.output) if not line.startswith(("sweep: ", "Usage: ", "Try '"))]
        # exit 2: refused before any work (click's usage lines, then one "Error:" line); 1: failed while writing
        assert res.exit_code in (1, 2) and len(lines) == 1 and "Traceback" not in res.output, (k, res.output)
        assert "No space left on device" in lines[0], (k, lines[0])
        assert not _leftovers(work), (k, _leftovers(work))
        if command == "simulate":
            assert not out.exists(), (k, sorted(p.name for p in out.rglob("*")))
        elif out.exists():
            res = CliRunner().invoke(main, [*args, "--out", str(out), "--resume"])
            assert res.exit_code == 0 and is_own(out, "sweep"), (k, res.output)


# --- signals --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("seed", [0, 1])
def test_signal_at_a_random_moment_of_simulate(tmp_path: Path, sig: int, seed: int) -> None:
    """The signal lands at a seeded random moment after the checks (computing, writing, or after
    the end): an interrupted run exits 128 + signum with one line, leaves no lock and no partial
    folder, and the same command then completes."""
    delay = random.Random(seed * 31 + sig).uniform(0.0, 2.5)
    out = tmp_path / "run"
    args = ["simulate", "--quiet", "--set", "L=400", "--set", "N=16", "--set", "batch=8", "--set", "m=32", "--out", str(out)]
    proc = subprocess.Popen([*PY, *args], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: lock_path(out).exists(), proc)
    time.sleep(delay)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert not lock_path(out).exists() and not _leftovers(tmp_path), _leftovers(tmp_path)
    if proc.returncode in (0, -sig) and is_own(out, "simulate"):
        return  # finished before the signal (-sig: it came while the interpreter exited, every file in place)
    assert proc.returncode == 128 + sig, (delay, proc.returncode, stderr)
    lines = _lines(stderr)
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {signal.Signals(sig).name}: "), stderr
    assert "stochformer simulate" in lines[0] and not out.exists()
    res = subprocess.run([*PY, *args], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and is_own(out, "simulate"), res.stderr


@pytest.mark.parametrize("when", ["results in", "mean cosine"])
def test_ctrl_c_after_the_results_are_written_says_they_are_complete(tmp_path: Path, monkeypatch, when: str) -> None:
    """An interrupt after the output folder is complete (while the summary is printed, or after)
    exits 130 with one line saying the results are complete and where, never "nothing was
    written"; the folder is the run's own and complete."""
    import click

    real_echo = click.echo

    def echo(message: object = None, *args: object, **kwargs: object) -> None:
        if isinstance(message, str) and when in message:
            raise KeyboardInterrupt
        real_echo(message, *args, **kwargs)

    monkeypatch.setattr(click, "echo", echo)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["simulate", "--quiet", "--set", "L=3", "--set", "N=4", "--set", "batch=2", "--set", "m=8",
                                    "--out", str(out)])
    assert res.exit_code == 130, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines[-1] == f"interrupted: the run had finished; its results are complete in {out}", res.output
    assert "nothing was written" not in res.output and is_own(out, "simulate") and not lock_path(out).exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("moment", ["after the old output's removal", "after the move"])
def test_a_signal_while_the_output_is_put_in_place_lands_after_it(tmp_path: Path, monkeypatch, sig: int, moment: str) -> None:
    """Fault injection: a real signal sent at each step of putting a run's folder in place (with
    --force over the command's own earlier output: after the old folder is removed, after the new one
    is moved in). The run ends 128 + signum with one line saying its results are complete and where;
    the folder is the new run's own, complete; no lock, no partial folder, and never both outputs lost."""
    import stochformer.io.store as store

    out = tmp_path / "run"
    args = ["simulate", "--quiet", "--set", "L=3", "--set", "N=4", "--set", "batch=2", "--set", "m=8", "--out", str(out)]
    assert CliRunner().invoke(main, [*args, "--set", "seed=1"]).exit_code == 0
    step = "remove_own" if moment == "after the old output's removal" else "replace"
    owner = store if step == "remove_own" else store.os
    real, sent = getattr(owner, step), []

    def then_signal(*a, **k):
        real(*a, **k)
        if Path(a[-1] if step == "replace" else a[0]) == out:
            sent.append(sig)
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(owner, step, then_signal)
    res = CliRunner().invoke(main, [*args, "--set", "seed=2", "--force"])
    by = "" if sig == signal.SIGINT else f" by {signal.Signals(sig).name}"
    assert sent == [sig] and res.exit_code == 128 + sig, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines[-1] == f"interrupted{by}: the run had finished; its results are complete in {out}", res.output
    assert is_own(out, "simulate") and json.loads((out / "config.json").read_text())["seed"] == 2
    assert not lock_path(out).exists() and not _leftovers(tmp_path), _leftovers(tmp_path)


@pytest.mark.slow
def test_ctrl_c_at_any_moment_from_the_start_ends_cleanly(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) at seeded random moments from the process's start: while Python starts, the
    command line is read, the checks run, the run computes or writes. Each ends with status 130 and
    one line (or, before stochformer's code runs at all, killed by the signal with nothing created, or
    after it has ended, killed while the interpreter shuts down with its folder complete), or finishes;
    never click's "Aborted!", a traceback, a lock or a partial folder."""
    rng = random.Random(2)
    args = ["simulate", "--quiet", "--set", "L=200", "--set", "N=16", "--set", "batch=8", "--set", "m=32"]
    for k, delay in enumerate(sorted(rng.uniform(0.0, 4.0) for _ in range(8))):
        out = tmp_path / f"run{k}"
        proc = subprocess.Popen([*PY, *args, "--out", str(out)], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        assert not lock_path(out).exists() and not _leftovers(tmp_path), (delay, _leftovers(tmp_path))
        if proc.returncode == 0:
            assert is_own(out, "simulate"), delay
            continue
        if proc.returncode == -signal.SIGINT:  # Python's own ending: before the command line was read
            # (nothing created) or after the command ended, while the interpreter shuts down (its folder complete)
            assert not out.exists() or is_own(out, "simulate"), (delay, stderr)
            continue
        lines = _lines(stderr)
        assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted: "), (delay, stderr)
        if "results are complete in" in lines[0]:  # after the results were written (the summary, the lock's release)
            assert is_own(out, "simulate"), (delay, stderr)
            continue
        assert not out.exists(), (delay, proc.returncode, stderr)


#: A child that runs the command line with a signal raised inside the K-th garbage collection once
#: stochformer handles that signal (fault injection: a signal that lands in a finaliser, where Python would drop
#: the KeyboardInterrupt it raises, print "Exception ignored" and run on).
IN_A_FINALISER = """
import gc, signal, sys
from stochformer.cli import main
sig, k = int(sys.argv[1]), int(sys.argv[2])
def fire(phase, info, seen=[0]):
    seen[0] += phase == "start" and callable(signal.getsignal(sig))
    if seen[0] == k and phase == "start":
        signal.raise_signal(sig)
        for _ in range(10):  # bytecode in the callback, where the handler runs
            pass
gc.callbacks.append(fire)
main(sys.argv[3:], prog_name="stochformer")
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_a_finaliser_is_not_lost(tmp_path: Path, sig: int) -> None:
    """A Ctrl-C or SIGTERM that arrives while a garbage collection (a finaliser) runs, at seeded
    random collections of a real ``simulate``, still ends it: status 128 + the signal's number, one
    line, no "Exception ignored", nothing written; never a run that goes on as if not interrupted."""
    rng = random.Random(int(sig))
    args = ["simulate", "--quiet", "--set", "L=20000", "--set", "N=8", "--set", "batch=2", "--set", "m=8"]
    for k in sorted(rng.sample(range(1, 60), 3)):
        out = tmp_path / f"run{k}"
        res = subprocess.run([sys.executable, "-c", IN_A_FINALISER, str(int(sig)), str(k), *args, "--out", str(out)],
                             env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        lines = _lines(res.stderr)
        assert res.returncode == 128 + sig, (k, res.returncode, res.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("interrupted"), (k, res.stderr)
        assert not out.exists() and not lock_path(out).exists() and not _leftovers(tmp_path), k


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_a_sweep_keeps_tasks_and_resumes(tmp_path: Path, sig: int) -> None:
    (tmp_path / "s.toml").write_text(SWEEP_FILE.format(L=3000, every=100))
    out = tmp_path / "sw"
    args = ["sweep", "--config", "s.toml", "--quiet", "--workers", "2", "--out", str(out)]
    proc = subprocess.Popen([*PY, *args], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(list((out / "tasks").glob("*.json"))) >= 1, proc, timeout=300)
    time.sleep(random.Random(sig).uniform(0.0, 0.5))
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal")
    lines = _lines(stderr)
    assert proc.returncode == 128 + sig and len(lines) == 1, stderr
    assert lines[0].startswith(f"interrupted by {signal.Signals(sig).name}: finished tasks are kept in {out / 'tasks'}")
    resume = lines[0].split("continue with: ", 1)[1].split()
    assert resume[:2] == ["stochformer", "sweep"] and resume[-1] == "--resume"
    assert not lock_path(out).exists() and not _leftovers(tmp_path)
    res = subprocess.run([*PY, *resume[1:]], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and is_own(out, "sweep"), res.stderr


def _children(pid: int) -> set[int]:
    """The live descendants of ``pid`` (zombies excluded), from /proc."""
    kids, found = {pid}, set()
    for _ in range(4):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) in kids and fields[0] != "Z":
                        found.add(int(entry.name))
        kids |= found
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_killed_parent_takes_its_workers_with_it(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SWEEP_FILE.format(L=200000, every=10000))
    proc = subprocess.Popen([*PY, "sweep", "--config", "s.toml", "--quiet", "--workers", "2", "--out", str(tmp_path / "sw")],
                            env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while len(workers := _children(proc.pid)) < 3:  # two workers and the resource tracker
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.5)
    workers = _children(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    end = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < end:
        time.sleep(0.1)
    left = [p for p in workers if _alive(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(workers)} child processes outlived their killed parent"
