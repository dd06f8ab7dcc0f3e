"""benchmarks/busy.py: the busy processes spin while the block runs and none outlives it, however
the block ends (normally, by an exception, by KeyboardInterrupt) or the benchmark dies (SIGKILL)."""

from __future__ import annotations

import importlib.util
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("bench_busy", BENCH / "busy.py")
assert _spec is not None and _spec.loader is not None
busy_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(busy_module)
busy = busy_module.busy

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_busy_processes_spin_and_are_killed_at_the_end():
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    with busy(2) as procs:
        pids = [p.pid for p in procs]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        time.sleep(1.0)
        assert all(alive(p) for p in pids)
    assert not any(alive(p) for p in pids)
    assert all(p.returncode is not None for p in procs)  # reaped, not left as zombies
    # each spun: CPU time well beyond a python start-up (~0.02 s), even on a loaded machine
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before > 0.3


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_busy_processes_are_killed_when_the_block_raises(error):
    pids: list[int] = []
    with pytest.raises(error):
        with busy(1) as procs:
            pids = [p.pid for p in procs]
            assert all(alive(p) for p in pids)
            raise error("stop")
    assert len(pids) == 1 and not any(alive(p) for p in pids)


def test_busy_processes_exit_when_the_benchmark_is_killed():
    """SIGKILL leaves the benchmark no chance to clean up: its busy processes notice and exit."""
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom busy import busy\nimport time\n"
            "with busy(1) as procs:\n    print(procs[0].pid, flush=True)\n    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code, str(BENCH)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert alive(pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        parent.stdout.close()
    assert wait_gone([pid]), f"busy process {pid} outlived its killed parent"


def test_no_load_starts_nothing():
    with busy(0) as procs:
        assert procs == []


@pytest.mark.parametrize("k", [-1, 1.5, True, "2"])
def test_bad_k_is_refused_before_starting_anything(k):
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        with busy(k):
            pass
