"""Output folders that cannot destroy or collide: unsafe paths refused, --force only on
stochformer's own folders (a valid manifest bound to the folder), one run per folder at a time, writability checked before any work,
Ctrl-C that keeps what finished and says how to resume."""

from __future__ import annotations

import os
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
        time.sleep(0.05)


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
    and one line naming what was kept and the command; the same command (or --resume) completes
    and leaves nothing else behind."""
    from stochformer.io.store import ResultStore

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
    assert ("continue with: stochformer " if again else "run the same command again to continue: stochformer ") in lines[0]
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
