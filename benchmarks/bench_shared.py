"""A shared machine: how much a run slows down while another process keeps every core busy, under
each OpenMP thread setting.

    python benchmarks/bench_shared.py               # writes the "Shared machine" section of docs/benchmarks.md
    python benchmarks/bench_shared.py --quick --no-write   # small size, a smoke test

One run of the discrete transformer (``run_simulate``, batch 64, N 32, d 16, m 256, L 128, the
first size of ``bench_transformer.py``) is timed inside a fresh process (start-up excluded),
for each thread setting, alone and beside a competitor: a second process multiplying 1000 × 1000
float64 matrices in a loop with one BLAS thread per core. Settings and conditions alternate,
round after round. With one competitor using every core, a run's fair share is half the machine:
a slow-down of about 2× is fair, many-fold is not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Shared machine"
SIZE = dict(batch=64, N=32, d=16, m=256, L=128)
QUICK_SIZE = dict(batch=8, N=8, d=4, m=32, L=16)
#: thread settings: extra environment of the timed process (all but the first opt out of stochformer's
#: own default with STOCHFORMER_OMP=keep, so that each is exactly what it names)
KEEP = {"STOCHFORMER_OMP": "keep"}
SETTINGS = {
    "stochformer's default": {},
    "OpenMP's default (spin, then sleep)": KEEP,
    "OMP_WAIT_POLICY=PASSIVE": {**KEEP, "OMP_WAIT_POLICY": "PASSIVE"},
    "GOMP_SPINCOUNT=10000": {**KEEP, "GOMP_SPINCOUNT": "10000"},
    "1 thread (OMP_NUM_THREADS=1)": {**KEEP, "OMP_NUM_THREADS": "1"},
}
#: variables the settings control: removed from the inherited environment
CONTROLLED = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT", "STOCHFORMER_OMP")
COMPETITOR = "import numpy as np\na = np.random.default_rng(0).random((1000, 1000))\nwhile True:\n    a @ a\n"
RUN = """
import time, stochformer
from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
cfg = RunConfig(**{size}, T=5.0, sigma_U=0.1, sigma_W=0.1, record_every={L}, seed=1)
run_simulate(cfg.with_updates(L=2))  # warm-up
start = time.perf_counter()
run_simulate(cfg)
print(time.perf_counter() - start)
"""


def timed_run(size: dict, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", RUN.format(size=size, L=size["L"])], env=env, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(size: dict, rounds: int) -> dict[str, dict[str, list[float]]]:
    base = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    base["PYTHONPATH"] = str(ROOT)
    cores = str(os.cpu_count() or 1)
    comp_env = {**base, "OPENBLAS_NUM_THREADS": cores, "MKL_NUM_THREADS": cores, "OMP_NUM_THREADS": cores}
    times = {name: {"alone": [], "shared": []} for name in SETTINGS}
    for _ in range(rounds):
        for condition in ("alone", "shared"):
            competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR], env=comp_env) if condition == "shared" else None
            try:
                if competitor is not None:
                    time.sleep(1.0)  # let it start its threads
                for name, extra in SETTINGS.items():
                    times[name][condition].append(timed_run(size, {**base, **extra}))
            finally:
                if competitor is not None:
                    competitor.kill()
                    competitor.wait()
    return times


def default_text() -> str:
    from stochformer import OMP_DEFAULTS

    return ", ".join(f"{k}={v}" for k, v in OMP_DEFAULTS.items()) + " unless set (or STOCHFORMER_OMP=keep)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    size, rounds = (QUICK_SIZE, 1) if args.quick else (SIZE, args.rounds)
    load, started = os.getloadavg()[0], time.time()
    times = measure(size, rounds)
    alone = statistics.median(times["stochformer's default"]["alone"])
    rows = ["| setting | alone (s) | beside the competitor (s) | slow-down beside it | beside it, vs stochformer's default alone |",
            "| --- | ---: | ---: | ---: | ---: |"]
    for name, t in times.items():
        a, s = statistics.median(t["alone"]), statistics.median(t["shared"])
        rows.append(f"| {name} | {a:.3f} | {s:.3f} | {s / a:.1f}× | {s / alone:.1f}× |")
    cmd = "python benchmarks/bench_shared.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        SECTION, "",
        f"`{cmd}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; load average "
        f"{load:.1f} before, {os.getloadavg()[0]:.1f} after (the competitor counts in it). One run of "
        f"`run_simulate` at batch {size['batch']}, N {size['N']}, d {size['d']}, m {size['m']}, L {size['L']}, timed "
        f"inside a fresh process (start-up excluded), alone and beside a process multiplying 1000² float64 matrices "
        f"with {os.cpu_count()} BLAS threads; medians of {rounds} rounds, settings and conditions in alternation. "
        "A fair share of the machine is a slow-down of about 2×. stochformer's default: "
        f"{default_text()}.", "",
        *rows, "",
    ])
    publish(DOC, SECTION, text, write=not (args.no_write or args.quick))


if __name__ == "__main__":
    main()
