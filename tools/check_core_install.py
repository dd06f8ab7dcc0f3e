#!/usr/bin/env python3
"""Check an environment holding the core install only (``pip install .``, no extras).

Run from an empty folder outside the source tree (CI does: .ci/run, "core install"). The core
commands (simulate, rates, sync, phase) and ``sf.solve`` must work; ``chaos`` (POT) and
``--local-cluster`` (Dask) must stop before any work with one message naming the extra, no
traceback and no output folder. Exits 1 naming every check that failed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

# model.L = 20: sync refuses a coarsest step T/(L/4) that is not small beside |gamma| = 1 (T = 5)
SMALL_MODEL = ["--set", "model.L=20", "--set", "model.batch=8"]
WORKS = {
    "simulate": ["simulate", "--set", "N=8", "--set", "L=6", "--set", "batch=2", "--out", "core-simulate"],
    "rates": ["rates", "--set", "d=5", "--json"],
    "sync": ["sync", "--set", "pairs=8", "--set", "bootstrap=10", *SMALL_MODEL, "--out", "core-sync"],
    "phase": ["phase", "--set", "pairs=4", "--set", "x_values=[0,1]", "--set", "y_values=[0]", *SMALL_MODEL,
              "--out", "core-phase"],
}
SWEEP_TOML = "samples = 2\nsamples_per_task = 1\n[model]\nN = 4\nL = 4\n[grid]\ngamma = [0.0, 1.0]\n"
NEEDS_EXTRA = {
    "chaos": (["chaos", "--out", "core-chaos"], "stochformer[ot]", "core-chaos"),
    "sweep --local-cluster": (["sweep", "--config", "sweep.toml", "--local-cluster", "2", "--out", "core-sweep"],
                              "stochformer[cluster]", "core-sweep"),
}
SOLVE = """
import stochformer as sf
model = sf.Transformer(sf.SoftmaxAttention(beta=1.0, gamma=1.0), sf.RandomMLP(width=16))
X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
out = sf.solve(model, X0, T=1.0, steps=4, seed=0)
assert out.X_final.shape == (2, 4, 3), out.X_final.shape
print("solve ok", float(out.mean_cosine.isel(time=-1).mean()))
"""


def stochformer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stochformer", *args], capture_output=True, text=True, timeout=600)


def main() -> int:
    if Path("pyproject.toml").exists() or Path("stochformer").exists():
        print("run this from a folder outside the source tree", file=sys.stderr)
        return 2
    failed = []
    for extra_module in ("ot", "dask"):
        if importlib.util.find_spec(extra_module) is not None:
            failed.append(f"{extra_module} is importable: this is not a core-only environment")
    for name, args in WORKS.items():
        run = stochformer(*args)
        print(f"{name}: exit {run.returncode}")
        if run.returncode != 0:
            failed.append(f"{name} failed:\n{run.stderr[-2000:]}")
    run = subprocess.run([sys.executable, "-c", SOLVE], capture_output=True, text=True, timeout=600)
    print(f"sf.solve: exit {run.returncode} {run.stdout.strip()}")
    if run.returncode != 0:
        failed.append(f"sf.solve failed:\n{run.stderr[-2000:]}")
    Path("sweep.toml").write_text(SWEEP_TOML)
    for name, (args, extra, out) in NEEDS_EXTRA.items():
        run = stochformer(*args)
        said = (run.stdout + run.stderr).strip()
        print(f"{name}: exit {run.returncode}: {said}")
        if run.returncode == 0 or extra not in said or "Traceback" in said or len(said.splitlines()) != 1:
            failed.append(f"{name} should stop with one line naming {extra}; said ({run.returncode}):\n{said[-2000:]}")
        if Path(out).exists():
            failed.append(f"{name} left {out} behind")
    for f in failed:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
