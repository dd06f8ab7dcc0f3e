"""Every benchmark script runs at its smallest size (a smoke test, no timing): in a fresh
``python``, writing only into a temporary folder (never into docs/). Scripts that need a GPU or an
optional peer skip when it is absent, saying which."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
#: modules of benchmarks/ imported by the scripts, not scripts themselves
LIBRARIES = {"busy", "checkouts", "docsection"}

#: deselected from the default run (pyproject addopts) and from the quick loop; .ci/run runs them
pytestmark = [pytest.mark.benchmark_smoke, pytest.mark.slow]


def _cases(tmp: Path) -> dict[str, list[str]]:
    """Script (and variant) → its smallest command line."""
    return {
        "bench_field[torch]": ["bench_field.py", "--quick", "--peers", "torch", "--out", str(tmp / "field.json"), "--no-doc"],
        "bench_field[torchsde]": ["bench_field.py", "--quick", "--peers", "torchsde", "--out", str(tmp / "field.json"), "--no-doc"],
        "bench_field[diffrax]": ["bench_field.py", "--quick", "--peers", "diffrax", "--out", str(tmp / "field.json"), "--no-doc"],
        "bench_field[exact]": ["bench_field.py", "--quick", "--problem", "exact", "--peers", "torch", "--load", "1",
                               "--out", str(tmp / "field_exact.json"), "--no-doc"],
        "bench_field[exact,torchsde]": ["bench_field.py", "--quick", "--problem", "exact", "--peers", "torchsde",
                                        "--out", str(tmp / "field_exact.json"), "--no-doc"],
        "bench_field[exact,diffrax]": ["bench_field.py", "--quick", "--problem", "exact", "--peers", "diffrax",
                                       "--out", str(tmp / "field_exact.json"), "--no-doc"],
        "bench_field_layout": ["bench_field_layout.py", "--quick", "--out", str(tmp / "layout.json")],
        "bench_capture": ["bench_capture.py", "--quick", "--out", str(tmp / "capture.json")],
        "bench_capture[cuda]": ["bench_capture.py", "--quick", "--device", "cuda", "--no-write"],
        "bench_joint_field": ["bench_joint_field.py", "--sizes", "32,8,8", "--reps", "1"],
        "bench_meanfield": ["bench_meanfield.py", "--quick"],
        "bench_meanfield_gpu": ["bench_meanfield_gpu.py", str(tmp / "meanfield_gpu"), "--quick"],
        "bench_meanfield_gpu[cpu]": ["bench_meanfield_gpu.py", str(tmp / "meanfield_cpu"), "--device", "cpu", "--quick"],
        "bench_scaling": ["bench_scaling.py", "--out", str(tmp), "--quick", "--repeats", "1"],
        "bench_random_batch": ["bench_random_batch.py", "--quick", "--no-write"],
        "bench_random_batch[json]": ["bench_random_batch.py", "--quick", "--no-doc", "--out", str(tmp / "rb.json")],
        "bench_random_batch[cuda]": ["bench_random_batch.py", "--quick", "--device", "cuda", "--no-write"],
        "bench_sde": ["bench_sde.py", "--quick"],
        "bench_shared": ["bench_shared.py", "--quick", "--rounds", "1", "--no-write"],
        "bench_startup": ["bench_startup.py", "--repeats", "1", "--no-write"],
        "bench_sweep": ["bench_sweep.py", "--L", "2", "--no-write"],
        "bench_theory": ["bench_theory.py", "--no-write", "--repeats", "1"],
        "bench_transformer": ["bench_transformer.py", "--quick", "--repeats", "1", "--process-repeats", "0", "--out", str(tmp), "--no-write"],
        "bench_transformer[load]": ["bench_transformer.py", "--quick", "--process-repeats", "0", "--load", "1", "--out", str(tmp)],
        "bench_transformer[before]": ["bench_transformer.py", "--quick", "--process-repeats", "0", "--before", str(ROOT), "--out", str(tmp)],
        "bench_transformer_gpu": ["bench_transformer_gpu.py", "--quick", "--repeats", "1", "--out", str(tmp), "--no-write"],
        "cluster_stability": ["cluster_stability.py", "--limit", "1", "--batch", "3", "--steps", "10",
                              "--json", str(tmp / "cluster_stability.json")],
        "energy_gap": ["energy_gap.py", "--runs", "4", "--json", str(tmp / "energy_gap.json")],
        "exact_pairs": ["exact_pairs.py", "--pairs", "100", "--json", str(tmp / "exact_pairs.json")],
        "bench_versions": ["bench_versions.py", str(ROOT), str(ROOT), "--quick", "--work", str(tmp)],
        "false_failures": ["false_failures.py", "--quick", "--json", str(tmp / "false_failures.json")],
        "precision": ["precision.py", "--quick", "--no-write"],
        "profile_sde": ["profile_sde.py", "--quick", "--out", str(tmp / "profile_sde.json")],
        "synchronisation": ["synchronisation.py", "--cases", "1", "--store", str(tmp / "store"), "--doc", str(tmp / "sync.md"),
                            "--json", str(tmp / "sync.json")],
    }


NAMES = list(_cases(Path("/tmp")))


def _check_load(tmp: Path) -> None:
    rep = json.loads((tmp / "bench_transformer_cpu_shared.json").read_text())
    assert rep["load"] == 1 and "torch loop, float32 draws / stochformer" in rep["results"][0]["speedups"]


def _check_before(tmp: Path) -> None:
    report = json.loads((tmp / "bench_transformer_cpu.json").read_text())
    before = report["before"]
    # the before tree is named by its commit (this checkout's here), no machine path is recorded
    assert before["commit"] == before["after_commit"] and len(before["results"]) == 2
    assert "tree" not in before and str(ROOT) not in json.dumps(report) and "--before PATH" in report["command"]
    for res in before["results"]:  # the same checkout, the same seeds: the same tokens
        assert res["tokens_equal"], res
        assert len(res["times_s"]["before"]) == len(res["times_s"]["after"]) == 1


#: what a case's output must say, beyond running (no timing)
def _check_layout(tmp: Path) -> None:
    record = json.loads((tmp / "layout.json").read_text())
    assert [r["threads"] for r in record["results"]] == [1, 2]
    assert all(r["max_relative_difference"] <= 1e-12 and r["first_over_last"]["median"] > 0 for r in record["results"])


CHECKS = {"bench_transformer[load]": _check_load, "bench_transformer[before]": _check_before,
          "bench_field_layout": _check_layout}
GPU = {"bench_meanfield_gpu", "bench_transformer_gpu"}
PEERS = {"bench_field[torchsde]": "torchsde", "bench_field[diffrax]": "diffrax", "bench_field[exact,torchsde]": "torchsde",
         "bench_field[exact,diffrax]": "diffrax"}


def _docs_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "docs").rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def test_every_script_has_a_smoke_case():
    scripts = {p.stem for p in BENCH.glob("*.py")} - LIBRARIES
    assert scripts == {n.split("[")[0] for n in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_script_runs_at_its_smallest_size(name, tmp_path):
    if name in GPU and not torch.cuda.is_available():
        pytest.skip(f"{name} needs a CUDA GPU (none here)")
    if name in PEERS and importlib.util.find_spec(PEERS[name]) is None:
        pytest.skip(f"{name} needs the optional peer {PEERS[name]} (not installed; pip install stochformer[bench])")
    cmd = _cases(tmp_path)[name]
    before = _docs_digest()
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(BENCH / cmd[0]), *cmd[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _docs_digest() == before, f"{name} wrote into docs/"
    if name in CHECKS:
        CHECKS[name](tmp_path)
