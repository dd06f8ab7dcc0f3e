"""Start-up benchmark: whole-process wall time of ``stochformer --help``, ``--version`` and
``stochformer rates``, each as a ratio to ``python -c pass`` (the interpreter's own start-up).

    python benchmarks/bench_startup.py               # writes the "Start-up" section of docs/benchmarks.md
    python benchmarks/bench_startup.py --no-write    # prints only
    python benchmarks/bench_startup.py --src DIR     # times another checkout (e.g. an older commit)

Each command runs as a fresh process, ``--repeats`` times, interleaved with the others so that a
change in machine load affects every command alike; the median is reported with the min and max.
``stochformer`` runs as its console script does (``stochformer.cli:main``) from the checkout given.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docsection import publish

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Start-up"
ENTRY = "import sys; from stochformer.cli import main; sys.argv[0] = 'stochformer'; sys.exit(main())"
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch'": ["-c", "import torch"],  # the floor of any command that computes
    "stochformer --help": ["-c", ENTRY, "--help"],
    "stochformer --version": ["-c", ENTRY, "--version"],
    "stochformer rates": ["-c", ENTRY, "rates"],  # relu, d = 3: closed forms, so this is start-up
}


def run_once(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    # from a neutral folder: ``python -c`` puts the working directory first on sys.path
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    return time.perf_counter() - start


def measure(src: Path, repeats: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for args in COMMANDS.values():  # warm the file cache (and byte-code) once, untimed
        run_once(args, env)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(repeats):
        for name, args in COMMANDS.items():
            times[name].append(run_once(args, env))
    return times


def table(times: dict[str, list[float]]) -> str:
    base = statistics.median(times["python -c pass"])
    rows = ["| command | median (s) | min – max (s) | ratio to `python -c pass` |", "| --- | --- | --- | --- |"]
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append(f"| `{name}` | {med:.3f} | {min(ts):.3f} – {max(ts):.3f} | {med / base:.1f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--src", type=Path, default=ROOT, help="checkout whose stochformer is timed")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    times = measure(args.src.resolve(), args.repeats)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
               f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (a shared machine)")
    text = (
        f"{SECTION}\n\n"
        f"Whole-process wall time of a fresh `python` running each command ({args.repeats} runs each, interleaved; "
        f"median, min – max), on {machine}. `--help` and `--version` import neither torch nor matplotlib; "
        "`rates` imports torch (its kernel is computed with it) but no plotting, xarray or pydantic, so it costs "
        "about `import torch`.\n\n"
        f"{table(times)}\n\n"
        "Command: `python benchmarks/bench_startup.py`.\n"
    )
    publish(DOC, SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
