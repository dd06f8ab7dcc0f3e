"""Mutation testing of the science modules with mutmut 3 (too long for CI; see docs/testing.md).

    pip install -e .[mutation]
    nice -n 19 python tools/mutation.py                    # the current tests, two passes
    nice -n 19 python tools/mutation.py --rerun-of current --tests tests/test_new.py --label after
    python tools/mutation.py --label current --summary-only   # re-read a run's results

The modules to mutate, the test files whose tests may kill them, the deselected slow tests and the
mutants triaged as equivalent are read from ``tools/mutation.toml``. By default the run has two
passes: every mutant against ``fast_tests`` (the pathwise and exact tests, a few seconds per
function), then only the mutants that survived them, or that they never call, against the whole
selection ``tests`` (``--rerun-of`` the first pass). Each pass happens in a scratch copy
(``build/mutation/<label>-fast/`` and ``build/mutation/<label>/``, git-ignored): the package,
``pyproject.toml`` and the tests (from the working tree, or from ``--tests-rev``) plus a generated
``setup.cfg`` with the ``[mutmut]`` section. mutmut records which tests call which function and
runs, for each mutant, only those tests (stopping at the first failure), under a CPU-time limit of
2 × ``timeout_multiplier`` × (their recorded time + 1 s): CPU time, so a loaded machine does not
turn slow tests into false timeouts. At the end the counts per module and every surviving mutant
(with its diff) are written to ``summary.json`` and ``survivors.txt`` and printed: generated /
killed / timeout / survived / no tests, the survivors triaged as equivalent in the config, and the
score = killed / (generated − equivalent).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tools" / "mutation.toml"
#: mutmut's exit-code classes (mutmut.stats.status_by_exit_code), collapsed to what the report counts
#: (a mutant whose tests crash the interpreter is detected too: "crashed")
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", -24: "timeout",
          24: "timeout", 152: "timeout", 255: "timeout", -11: "crashed", -9: "crashed"}
#: the statuses that count as detected
DETECTED = ("killed", "timeout", "crashed")


def prepare(workdir: Path, cfg: dict, tests_rev: str | None) -> None:
    """A scratch copy of the package and the tests, with mutmut's configuration."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    shutil.copytree(ROOT / "stochformer", workdir / "stochformer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", workdir / "pyproject.toml")
    if tests_rev is None:
        shutil.copytree(ROOT / "tests", workdir / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        with tempfile.TemporaryFile() as tar:
            subprocess.run(["git", "-C", str(ROOT), "archive", tests_rev, "tests"], stdout=tar, check=True)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as t:
                t.extractall(workdir, filter="data")
    tests = [t for t in cfg["tests"] if (workdir / t.split("::")[0]).exists()]
    selection = tests + [f"--deselect={node}" for node in cfg.get("deselect", [])]
    lines = [
        "[mutmut]",
        "source_paths=stochformer",
        "only_mutate=" + "\n    ".join(cfg["modules"]),
        "pytest_add_cli_args_test_selection=" + "\n    ".join(selection),
        "pytest_add_cli_args=-p no:cacheprovider\n    -W ignore",
        f"timeout_multiplier={float(cfg.get('timeout_multiplier', 5.0))}",
    ]
    (workdir / "setup.cfg").write_text("\n".join(lines) + "\n")


def statuses(workdir: Path) -> dict[str, str]:
    """mutant name → killed / timeout / survived / no tests / ..., from the ``.meta`` files of a run."""
    out: dict[str, str] = {}
    for meta in (workdir / "mutants").rglob("*.py.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = "not checked" if code is None else STATUS.get(code, "other")
    return out


def final_statuses(workdir: Path) -> dict[str, str]:
    """The statuses a run ended with: for a rerun those of its base with this run's detections
    (``status.json``, written by :func:`one_pass`), so that reruns chain; else its own."""
    merged = workdir / "status.json"
    return json.loads(merged.read_text()) if merged.exists() else statuses(workdir)


def mutant_diff(workdir: Path, name: str) -> str:
    """The lines of ``name`` that differ from the original function, read from mutmut's generated
    module (``mutmut show`` gives the same, one slow process per mutant)."""
    module, func = name.rsplit(".", 1)
    text = (workdir / "mutants" / (module.replace(".", "/") + ".py")).read_text().splitlines()

    def body(fname: str) -> list[str]:
        start = next(i for i, line in enumerate(text) if line.lstrip().startswith(f"def {fname}("))
        indent = len(text[start]) - len(text[start].lstrip())
        end = next((j for j in range(start + 1, len(text)) if text[j].strip() and not text[j].lstrip().startswith(")")
                    and len(text[j]) - len(text[j].lstrip()) <= indent), len(text))
        return [line.replace(fname, "f") for line in text[start:end]]

    orig = body(func.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
    diff = difflib.unified_diff(orig, body(func), lineterm="", n=0)
    return "\n".join(line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def module_of(mutant: str) -> str:
    """``stochformer.sphere.x_tangent__mutmut_3``, ``stochformer.attention.xǁAttentionǁ__call____mutmut_1``
    → the module name."""
    return mutant.rsplit(".", 1)[0]


def summarise(workdir: Path, status: dict[str, str], equivalent: dict[str, str], label: str, tests: str) -> dict:
    """Counts (all mutants, and per module), the score and the list of survivors with their diffs."""
    survivors = sorted(n for n, s in status.items() if s == "survived")
    untested = sorted(n for n, s in status.items() if s == "no tests")
    per_module: dict[str, Counter] = {}
    for name, s in status.items():
        per_module.setdefault(module_of(name), Counter())[s] += 1
    generated = len(status)
    killed = sum(s in DETECTED for s in status.values())  # a timeout or a crash is a detected mutant
    eq = [n for n in survivors + untested if n in equivalent]
    summary = {
        "label": label,
        "tests": tests,
        "generated": generated,
        "killed": killed,
        "timeout": sum(s == "timeout" for s in status.values()),
        "crashed": sum(s == "crashed" for s in status.values()),
        "survived": len(survivors),
        "no_tests": len(untested),
        "not_checked": sum(s == "not checked" for s in status.values()),
        "other": sum(s == "other" for s in status.values()),
        "equivalent": len(eq),
        "score_non_equivalent": round(killed / max(1, generated - len(eq)), 4),
        "score_checked_non_equivalent": round(killed / max(1, generated - len(eq) - sum(s == "not checked" for s in status.values())), 4),
        "per_module": {m: dict(c) for m, c in sorted(per_module.items())},
        "survivors": survivors,
        "untested": untested,
    }
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    with open(workdir / "survivors.txt", "w") as f:
        for name in survivors + untested:
            tag = "EQUIVALENT: " + equivalent[name] if name in equivalent else status[name].upper()
            diff = mutant_diff(workdir, name)
            f.write(f"## {name}  [{tag}]\n{diff}\n")
    return summary


def run_mutmut(workdir: Path, names: list[str], children: int) -> None:
    """``mutmut run`` in the scratch copy: all mutants, or only ``names``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts the mutants first
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.run(["mutmut", "run", "--max-children", str(children), *names], cwd=workdir, env=env, check=True)


def rerun_names(base: dict[str, str], sample: int, equivalent: dict[str, str]) -> list[str]:
    """The mutants of an earlier run that are not yet detected, except those triaged as equivalent
    (no test can kill them, and a surviving mutant costs all of its tests), plus a seeded sample of
    ``sample`` that it left unchecked."""
    names = sorted(n for n, s in base.items() if s not in DETECTED + ("not checked",) and n not in equivalent)
    unchecked = sorted(n for n, s in base.items() if s == "not checked")
    return names + random.Random(0).sample(unchecked, min(sample, len(unchecked)))


def one_pass(label: str, tests: list[str], tests_rev: str | None, rerun_of: str | None, sample: int,
             children: int, cfg: dict, summary_only: bool) -> dict:
    """One mutmut run (all mutants, or the survivors of ``rerun_of``) and its summary."""
    workdir = ROOT / "build" / "mutation" / label
    base = final_statuses(ROOT / "build" / "mutation" / rerun_of) if rerun_of else {}
    if not summary_only:
        start = time.time()
        prepare(workdir, cfg["mutation"] | {"tests": tests}, tests_rev)
        run_mutmut(workdir, rerun_names(base, sample, cfg.get("equivalent", {})) if base else [], children)
        (workdir / "elapsed_s").write_text(f"{time.time() - start:.0f}\n")
    status = statuses(workdir)
    sample_names: list[str] = []
    if base:  # detected before stays detected: the earlier tests are still there
        # (and a mutant this run did not check, e.g. one triaged as equivalent, keeps its status)
        rerun = {n: status.get(n, "not checked") for n in base}
        status = {n: (rerun[n] if s not in DETECTED and rerun[n] != "not checked" else s) for n, s in base.items()}
        sample_names = [n for n, s in base.items() if s == "not checked" and status[n] != "not checked"]
    (workdir / "status.json").write_text(json.dumps(status, indent=0, ensure_ascii=False) + "\n")
    what = ("working tree" if tests_rev is None else f"git {tests_rev}") + f" ({' '.join(tests)})"
    s = summarise(workdir, status, cfg.get("equivalent", {}), label, what + (f", rerun of {rerun_of}" if base else ""))
    elapsed = workdir / "elapsed_s"
    s["elapsed_s"] = int(elapsed.read_text()) if elapsed.exists() else None
    s["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    if sample_names:  # the kill fraction among the mutants the base run left unchecked, estimated
        k, n = sum(status[x] in DETECTED for x in sample_names), len(sample_names)
        p, se = k / n, math.sqrt(k / n * (1 - k / n) / n)
        s["unchecked_sample"] = {"size": n, "killed": k, "fraction": round(p, 4), "se": round(se, 4)}
    (workdir / "summary.json").write_text(json.dumps(s, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in s.items() if k not in ("survivors", "untested")}, indent=1, ensure_ascii=False))
    print(f"survivors and untested mutants with their diffs: {workdir / 'survivors.txt'}", flush=True)
    return s


def equivalent_table(equivalent: dict[str, str]) -> str:
    """The mutants triaged as equivalent, grouped by reason (most frequent first) with the functions
    they live in, as the Markdown list of docs/testing.md."""
    groups: dict[str, Counter] = {}
    for name, reason in equivalent.items():
        module, func = module_of(name).removeprefix("stochformer."), name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
        func = func.removeprefix("x_").replace("xǁ", "").replace("ǁ", ".")  # mutmut's mangled names
        groups.setdefault(reason, Counter())[f"{module}.{func}"] += 1
    lines = []
    for reason, where in sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        funcs = ", ".join(f"`{f}`" + (f" ×{n}" if n > 1 else "") for f, n in sorted(where.items()))
        lines.append(f"- **{sum(where.values())}** — {reason}: {funcs}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests-rev", help="take tests/ from this git revision (e.g. a baseline), not the working tree")
    ap.add_argument("--rerun-of", metavar="LABEL", help="run only the mutants that survived (or had no tests) in "
                    "the run LABEL and keep its other results: valid when the tests were only added to since")
    ap.add_argument("--sample", type=int, default=0, metavar="K", help="with --rerun-of: also run a seeded "
                    "uniform sample of K mutants that the run LABEL did not check (a stopped run), to estimate the rest")
    ap.add_argument("--tests", nargs="+", metavar="FILE", help="use these test files instead of the config's "
                    "(with --rerun-of: the tests added since, which alone decide whether a survivor is now killed)")
    ap.add_argument("--one-pass", action="store_true", help="run every mutant against the config's full `tests` "
                    "at once, instead of `fast_tests` first and `tests` on their survivors only")
    ap.add_argument("--label", help="name of the run (default: 'current' or the revision)")
    ap.add_argument("--max-children", type=int, default=None, help="parallel mutant runs (default: config)")
    ap.add_argument("--summary-only", action="store_true", help="re-read an earlier run's results")
    ap.add_argument("--equivalent-table", action="store_true", help="print the mutants triaged as equivalent, "
                    "grouped by reason (the list of docs/testing.md), then exit")
    args = ap.parse_args()
    cfg = tomllib.loads(CONFIG.read_text())
    if args.equivalent_table:
        print(equivalent_table(cfg.get("equivalent", {})))
        return
    label = args.label or (args.tests_rev or "current").replace("/", "_")
    children = args.max_children or cfg["mutation"].get("max_children", 2)
    if os.nice(0) < 10:
        print("note: run this under `nice -n 19`, it keeps both cores busy for a long time", file=sys.stderr)
    common = dict(tests_rev=args.tests_rev, sample=args.sample, children=children, cfg=cfg, summary_only=args.summary_only)
    if args.tests or args.rerun_of or args.one_pass:
        one_pass(label, args.tests or cfg["mutation"]["tests"], rerun_of=args.rerun_of, **common)
        return
    # two passes: every mutant against the fast tests that pin the formulas exactly, then only their
    # survivors (and the mutants those tests never call) against the whole selection
    one_pass(label + "-fast", cfg["mutation"]["fast_tests"], rerun_of=None, **common)
    one_pass(label, cfg["mutation"]["tests"], rerun_of=label + "-fast", **(common | {"sample": 0}))


if __name__ == "__main__":
    sys.exit(main())
