"""Checkouts of stochformer timed against each other: each run a fresh ``python`` importing one tree.

    times = alternate({"before": OLD_TREE, "after": NEW_TREE}, config, seeds=[1001, 1002, 1003], work=DIR)
    ratio = ratio_summary(times["seconds"]["before"], times["seconds"]["after"])

:func:`run_in_tree` runs a piece of code in a fresh interpreter with ``PYTHONPATH`` the tree, so it
imports that tree's sources; :func:`alternate` times ``run_simulate`` of the discrete model in each
tree, round after round with the same seed for all trees in a round and the trees' order
alternating, and checks that the trees' final tokens agree to 1e-12 (relative and absolute: a
change of where the products are computed moves the last bits only; a change of the draws changes
the tokens, so they then differ).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: one run of ``run_simulate``, timed inside the process after a two-layer warm-up (thread pools,
#: first allocations); torch is imported first, so that stochformer's OpenMP defaults do not apply
#: and every tree runs under the thread settings inherited from the environment
SIMULATE = r"""
import json, sys, time
import numpy as np
import torch
from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
config, out = json.loads(sys.argv[1]), sys.argv[2]
cfg = RunConfig(**config)
run_simulate(cfg.with_updates(L=2))
start = time.perf_counter()
res = run_simulate(cfg)
seconds = time.perf_counter() - start
np.save(out, res.data["X_final"].values)
print(json.dumps({"seconds": seconds}))
"""


def recorded_command(script: str, argv: Sequence[str]) -> str:
    """The command line of a benchmark run as its results record it: ``python SCRIPT ARGS``, where an
    absolute path (a checkout, an output folder) is written ``PATH``: the record names trees by
    their commits, not by where they lay on the machine that ran it.

    Parameters
    ----------
    script : str
        The script, relative to the repository root (e.g. ``benchmarks/bench_field.py``).
    argv : sequence of str
        Its arguments.

    Returns
    -------
    str
        The command line.
    """
    return " ".join(["python", script, *("PATH" if os.path.isabs(a) else a for a in argv)])


def run_in_tree(code: str, argv: Sequence[str], tree: Path, env: Mapping[str, str] | None = None) -> dict:
    """Run ``python -c code *argv`` with ``PYTHONPATH=tree`` and read the JSON its last line prints.

    Parameters
    ----------
    code : str
        Python source of the child; its last line of standard output must be a JSON object.
    argv : sequence of str
        The child's ``sys.argv[1:]``.
    tree : Path
        Root of a checkout of stochformer (the folder holding the package ``stochformer/``).
    env : mapping of str to str, optional
        Variables added to (or overriding) the inherited environment.

    Returns
    -------
    dict
        The child's last line of output, parsed; a failing child raises ``RuntimeError`` with the
        end of its standard error.
    """
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=full_env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the child in {tree} failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tree_commit(tree: Path) -> str:
    """The git commit (short hash, ``-dirty`` when the working tree has changes) of ``tree``.

    Parameters
    ----------
    tree : Path
        A checkout of stochformer.

    Returns
    -------
    str
        ``git describe --always --dirty`` of the tree, or ``"unknown"`` where that fails.
    """
    proc = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def alternate(trees: Mapping[str, Path], config: Mapping, seeds: Sequence[int], work: Path,
              env: Mapping[str, str] | None = None) -> dict:
    """Time ``run_simulate(RunConfig(**config, seed=s))`` in every tree, one round per seed.

    Parameters
    ----------
    trees : mapping of str to Path
        Name → checkout; the first is the reference of the token comparison. Round r runs the
        trees in this order for even r and in the reverse order for odd r.
    config : mapping
        Fields of ``RunConfig`` (without ``seed``), the same for every tree.
    seeds : sequence of int
        One seed per round, the same for every tree in that round.
    work : Path
        Folder for the final tokens (``<name>.npy``, overwritten round after round).
    env : mapping of str to str, optional
        Variables added to the children's environment.

    Returns
    -------
    dict
        ``seconds``: name → the run's times, one per round (seconds, timed inside the process);
        ``tokens_equal``: whether every tree's final tokens agreed with the first tree's to
        1e-12 (``numpy.allclose``, rtol = atol = 1e-12) in every round; ``max_abs_diff``: the
        largest absolute difference of tokens seen.
    """
    import numpy as np

    names = list(trees)
    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    equal, diff = True, 0.0
    for r, seed in enumerate(seeds):
        for name in names if r % 2 == 0 else names[::-1]:
            out = work / f"{name}.npy"
            seconds[name].append(float(run_in_tree(SIMULATE, [json.dumps({**config, "seed": seed}), str(out)], trees[name], env)["seconds"]))
        ref = np.load(work / f"{names[0]}.npy")
        for name in names[1:]:
            other = np.load(work / f"{name}.npy")
            equal &= bool(np.allclose(other, ref, rtol=1e-12, atol=1e-12))
            diff = max(diff, float(np.abs(other - ref).max()))
    return {"seconds": seconds, "tokens_equal": equal, "max_abs_diff": diff}


def ratio_summary(numerator: Sequence[float], denominator: Sequence[float]) -> dict:
    """Ratio of two series of times taken in the same rounds.

    Parameters
    ----------
    numerator, denominator : sequence of float
        Times (seconds), one per round, of equal lengths.

    Returns
    -------
    dict
        ``rounds``: the per-round ratios (a drift of the machine's speed cancels within a round);
        ``median``: their median; ``range``: their minimum and maximum.
    """
    rounds = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {"median": statistics.median(rounds), "rounds": rounds,
            "range": [min(rounds), max(rounds)]}
