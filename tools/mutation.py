"""Mutation testing of the science modules with mutmut 3 (too long for CI; see docs/testing.md).

    pip install -e .[mutation]
    nice -n 19 python tools/mutation.py                    # the current tests, two passes
    nice -n 19 python tools/mutation.py --rerun-of current --tests tests/test_new.py --label after
    python tools/mutation.py --label current --summary-only   # re-read a run's results
    python tools/mutation.py --label current --fingerprint-equivalents   # record reviewed entries
    nice -n 19 python tools/mutation.py --modules stochformer/model/activations.py --label small

The modules to mutate, the test files whose tests may kill them, the deselected slow tests and the
mutants triaged as equivalent are read from ``tools/mutation.toml``. By default the run has two
passes: every mutant against ``fast_tests`` (the pathwise and exact tests, a few seconds per
function), then only the mutants that survived them, or that they never call, against the whole
selection ``tests`` (``--rerun-of`` the first pass). Each pass happens in a scratch copy
(``build/mutation/<label>-fast/`` and ``build/mutation/<label>/``, git-ignored): the package,
``pyproject.toml``, ``tools/mutation.toml`` and the tests (from the working tree, or from ``--tests-rev``) plus a generated
``setup.cfg`` with the ``[mutmut]`` section. mutmut records which tests call which function and
runs, for each mutant, only those tests (stopping at the first failure), under a CPU-time limit of
2 × ``timeout_multiplier`` × (their recorded time + 1 s) (mutmut 3.8 adds a wall-clock limit of
half that).

Every mutant is run, those of the equivalent table included: an entry counts as equivalent only
when the mutation its name denotes now still has the fingerprint stored beside its sentence (the
mutated function's name and the changed lines of its diff, hashed: :func:`fingerprint`) and the
tests did not detect it. An entry without a fingerprint is unverified, one whose fingerprint
differs now names a different mutation (mutmut numbers the mutants of a function anew when it
changes), one whose mutant is detected is no longer equivalent: all three are reported and do not
count (:func:`check_equivalents`). ``--fingerprint-equivalents`` records the fingerprints of
entries lacking one from a run folder, printing each entry's diff beside its sentence for review.

At the end the counts per module and every surviving mutant (with its diff) are written to
``summary.json`` and ``survivors.txt`` and printed: generated / killed / timeout / survived / no
tests, the equivalent entries counted and those dropped by reason, and the score = detected /
(generated − equivalent), with timeouts counted as detected and as undetected (:func:`scores`).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import functools
import hashlib
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
from dataclasses import dataclass, field
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
#: the statuses of a mutant that the tests ran (or would run) without detecting it: the only ones an
#: equivalent entry may have to count
UNDETECTED = ("survived", "no tests")
#: what mutmut appends to the lines it generates (not part of a mutation)
GENERATED_MARKER = "# type: ignore # mutmut generated"
#: why an entry of the equivalent table does not count, in the order the rules are applied, with the
#: line reported for each dropped entry
DROP_REASONS = {
    "missing": "entry {name} names no mutant of this run (its function changed or is no longer mutated): re-triage",
    "unverified": "entry {name} has no fingerprint ({status}): unverified, not counted (review its diff, then "
                  "--fingerprint-equivalents)",
    "changed": "entry {name} now names a different mutation (fingerprint {stored}, now {now}): re-triage",
    "detected": "entry {name} is now detected ({status}): not equivalent, remove it",
    "not checked": "entry {name} was not run to the end ({status}): not counted",
}


@dataclass(frozen=True)
class Entry:
    """One mutant of the equivalent table: why no test can kill it, and the fingerprint of the
    mutation it was triaged for (None: not recorded yet, the entry is unverified)."""

    reason: str
    fingerprint: str | None = None


@dataclass
class Triage:
    """The equivalent table checked against one run: the entries that count, and the others by
    reason (:data:`DROP_REASONS`), with the line reported for each."""

    equivalent: list[str]
    dropped: dict[str, list[str]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def reasons(self) -> dict[str, str]:
        """Dropped entry → why it was dropped."""
        return {name: reason for reason, names in self.dropped.items() for name in names}


def module_name(path: str) -> str:
    """``stochformer/model/noise.py`` → ``stochformer.model.noise``."""
    return path.removesuffix(".py").replace("/", ".")


def equivalent_entries(cfg: dict, modules: list[str] | None = None) -> dict[str, Entry]:
    """The ``[equivalent]`` table of the config: each value is the sentence alone (no fingerprint
    recorded) or ``{ fingerprint = "…", reason = "…" }``. With ``modules`` (paths), only the entries
    of those modules."""
    wanted = None if modules is None else {module_name(m) for m in modules}
    out: dict[str, Entry] = {}
    for name, value in cfg.get("equivalent", {}).items():
        if wanted is not None and module_of(name) not in wanted:
            continue
        out[name] = Entry(value) if isinstance(value, str) else Entry(value["reason"], value.get("fingerprint"))
    return out


def prepare(workdir: Path, cfg: dict, tests_rev: str | None, isolation: str = "forkserver") -> None:
    """A scratch copy of the package and the tests, with mutmut's configuration (``isolation``: how
    each mutant's process starts, mutmut's ``process_isolation``)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    shutil.copytree(ROOT / "stochformer", workdir / "stochformer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", workdir / "pyproject.toml")
    (workdir / "tools").mkdir()
    shutil.copy2(ROOT / "tools" / "mutation.toml", workdir / "tools" / "mutation.toml")  # tests/conftest.py reads it
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
        "also_copy=tools",  # into mutmut's own copy (mutants/), beside tests/ and pyproject.toml
        f"timeout_multiplier={float(cfg.get('timeout_multiplier', 5.0))}",
        # forkserver: each mutant's process is forked from a server that ran no test. Forked from the process
        # that ran them all (mutmut's default, "fork"), children of the whole selection hung in futex waits
        # until the time limit and counted as timeouts (most likely an OpenMP thread team inherited from a
        # test that raised torch's thread count; docs/testing.md); the fast pass forks (faster: no collection
        # per mutant, docs/testing.md) and its timeouts are run again under the fork server by the second pass
        f"process_isolation={isolation}",
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


@functools.lru_cache(maxsize=32)
def _generated_lines(path: Path, mtime_ns: int) -> tuple[str, ...]:
    """The lines of one of mutmut's generated modules, read once per module (and modification time)
    for all its mutants."""
    return tuple(path.read_text().splitlines())


def mutant_diff(workdir: Path, name: str) -> str:
    """The lines of ``name`` that differ from the original function, read from mutmut's generated
    module (``mutmut show`` gives the same, one slow process per mutant)."""
    module, func = name.rsplit(".", 1)
    path = workdir / "mutants" / (module.replace(".", "/") + ".py")
    text = _generated_lines(path, path.stat().st_mtime_ns)

    def body(fname: str) -> list[str]:
        start = next(i for i, line in enumerate(text) if line.lstrip().startswith(f"def {fname}("))
        indent = len(text[start]) - len(text[start].lstrip())
        end = next((j for j in range(start + 1, len(text)) if text[j].strip() and not text[j].lstrip().startswith(")")
                    and len(text[j]) - len(text[j].lstrip()) <= indent), len(text))
        while end > start and not text[end - 1].strip():  # the blank lines before the next definition
            end -= 1
        return [line.replace(fname, "f") for line in text[start:end]]

    orig = body(function_of(func) + "__mutmut_orig")
    diff = difflib.unified_diff(orig, body(func), lineterm="", n=0)
    return "\n".join(line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def module_of(mutant: str) -> str:
    """``stochformer.core.sphere.x_tangent__mutmut_3``, ``stochformer.attention.xǁAttentionǁ__call____mutmut_1``
    → the module name."""
    return mutant.rsplit(".", 1)[0]


def function_of(mutant: str) -> str:
    """``stochformer.core.sphere.x_tangent__mutmut_3`` → ``stochformer.core.sphere.x_tangent``: the mutated
    function (mutmut's mangled name), without the mutant's number."""
    return mutant.rsplit("__mutmut_", 1)[0]


def fingerprint(mutant: str, diff: str) -> str:
    """What identifies the mutation of ``mutant`` whatever mutmut numbers it: the first 12 hex
    digits of the SHA-256 of the mutated function's name and the changed lines of ``diff`` (those
    starting with + or −, each with its sign, without whitespace and without mutmut's generated
    marker; blank ones left out). The same edit in the same function has the same fingerprint at
    any line and under any number; another edit, or the edit in another function, has another."""
    lines = [function_of(mutant)]
    for line in diff.splitlines():
        code = "".join(line[1:].replace(GENERATED_MARKER, "").split())
        if line[:1] in "+-" and line[:3] not in ("+++", "---") and code:
            lines.append(line[0] + code)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def current_fingerprints(workdir: Path, names: list[str], status: dict[str, str]) -> dict[str, str]:
    """The fingerprint of each of ``names`` that the run in ``workdir`` generated, from its diff."""
    return {n: fingerprint(n, mutant_diff(workdir, n)) for n in names if n in status}


def check_equivalents(status: dict[str, str], fingerprints: dict[str, str], entries: dict[str, Entry]) -> Triage:
    """Which entries of the equivalent table count for a run with these statuses and current
    fingerprints (mutant name → fingerprint of the mutation the name denotes in this run): those
    whose mutant exists, whose stored fingerprint equals the current one and whose mutant the
    tests did not detect (survived, or no test calls it). The others are dropped with the first
    reason that applies: missing, unverified (no fingerprint stored), changed, detected, not
    checked (a stopped run, or a status mutmut could not classify)."""
    triage = Triage(equivalent=[])
    for name, entry in sorted(entries.items()):
        s, now = status.get(name), fingerprints.get(name)
        if s is None:
            reason = "missing"
        elif entry.fingerprint is None:
            reason = "unverified"
        elif now != entry.fingerprint:
            reason = "changed"
        elif s in DETECTED:
            reason = "detected"
        elif s not in UNDETECTED:
            reason = "not checked"
        else:
            triage.equivalent.append(name)
            continue
        triage.dropped.setdefault(reason, []).append(name)
        triage.messages.append(DROP_REASONS[reason].format(name=name, stored=entry.fingerprint, now=now, status=s))
    return triage


def scores(status: dict[str, str], equivalent: int) -> dict[str, float]:
    """The mutation score = detected / (generated − equivalent), with the timeouts counted as
    detected (``score_timeouts_detected``) and as undetected (``score_timeouts_undetected``, its
    lower bound: a mutant stopped by the time limit may only be slow); a crash is detected in
    both. ``score_checked``: the first over the mutants checked only (a stopped run)."""
    counts = Counter(status.values())
    detected = sum(counts[s] for s in DETECTED)
    base = len(status) - equivalent
    return {
        "score_timeouts_detected": round(detected / max(1, base), 4),
        "score_timeouts_undetected": round((detected - counts["timeout"]) / max(1, base), 4),
        "score_checked": round(detected / max(1, base - counts["not checked"]), 4),
    }


def summarise(workdir: Path, status: dict[str, str], entries: dict[str, Entry], label: str, tests: str) -> dict:
    """Counts (all mutants, and per module), the equivalent entries checked against this run, the
    scores and the list of survivors with their diffs."""
    survivors = sorted(n for n, s in status.items() if s == "survived")
    untested = sorted(n for n, s in status.items() if s == "no tests")
    per_module: dict[str, Counter] = {}
    for name, s in status.items():
        per_module.setdefault(module_of(name), Counter())[s] += 1
    triage = check_equivalents(status, current_fingerprints(workdir, list(entries), status), entries)
    counts = Counter(status.values())
    summary = {
        "label": label,
        "tests": tests,
        "generated": len(status),
        "killed": sum(counts[s] for s in DETECTED),  # a timeout or a crash is a detected mutant
        "timeout": counts["timeout"],
        "crashed": counts["crashed"],
        "survived": len(survivors),
        "no_tests": len(untested),
        "not_checked": counts["not checked"],
        "other": counts["other"],
        "equivalent_entries": len(entries),
        "equivalent": len(triage.equivalent),
        "equivalent_dropped": {r: len(triage.dropped[r]) for r in DROP_REASONS if r in triage.dropped},
        **scores(status, len(triage.equivalent)),
        "per_module": {m: dict(c) for m, c in sorted(per_module.items())},
        "equivalent_dropped_entries": triage.dropped,
        "survivors": survivors,
        "untested": untested,
    }
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    (workdir / "equivalent_dropped.txt").write_text("".join(m + "\n" for m in triage.messages))
    dropped = triage.reasons()
    with open(workdir / "survivors.txt", "w") as f:
        for name in survivors + untested:
            if name in triage.equivalent:
                tag = "EQUIVALENT: " + entries[name].reason
            elif name in dropped:
                tag = f"{status[name].upper()}, LISTED AS EQUIVALENT BUT {dropped[name].upper()}: {entries[name].reason}"
            else:
                tag = status[name].upper()
            f.write(f"## {name}  [{tag}]\n{mutant_diff(workdir, name)}\n")
    for message in triage.messages:
        print(message)
    return summary


def run_mutmut(workdir: Path, names: list[str], children: int) -> None:
    """``mutmut run`` in the scratch copy: all mutants, or only ``names``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts the mutants first
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # mutmut's command line, with the @validated functions mutated too (tools/mutmut_run.py)
    runner = [sys.executable, str(ROOT / "tools" / "mutmut_run.py")]
    subprocess.run([*runner, "run", "--max-children", str(children), *names], cwd=workdir, env=env, check=True)


def rerun_names(base: dict[str, str], sample: int, retry: tuple[str, ...] = ()) -> list[str]:
    """The mutants of an earlier run that are not yet detected, those of the equivalent table
    included (each entry is re-checked at every run), and those whose status is in ``retry``
    (``("timeout",)``: a time limit reached on a busy machine is not a detection one can trust),
    plus a seeded sample of ``sample`` that it left unchecked."""
    names = sorted(n for n, s in base.items() if s not in DETECTED + ("not checked",) or s in retry)
    unchecked = sorted(n for n, s in base.items() if s == "not checked")
    return names + random.Random(0).sample(unchecked, min(sample, len(unchecked)))


def merged(base: dict[str, str], found: dict[str, str], retry: tuple[str, ...] = ()) -> dict[str, str]:
    """The statuses of a rerun of ``base``: a mutant's status in ``found`` where the rerun checked it
    and ``base`` had it undetected or in ``retry``; else its status in ``base`` (detected before
    stays detected: the earlier tests are still there)."""
    return {n: (found[n] if (s not in DETECTED or s in retry) and found.get(n, "not checked") != "not checked" else s)
            for n, s in base.items()}


def one_pass(label: str, tests: list[str], tests_rev: str | None, rerun_of: str | None, sample: int,
             children: int, cfg: dict, summary_only: bool, retry: tuple[str, ...] = (),
             isolation: str = "forkserver") -> dict:
    """One mutmut run (all mutants, or the undetected ones of ``rerun_of``) and its summary."""
    workdir = ROOT / "build" / "mutation" / label
    base = final_statuses(ROOT / "build" / "mutation" / rerun_of) if rerun_of else {}
    if not summary_only:
        start = time.time()
        prepare(workdir, cfg["mutation"] | {"tests": tests}, tests_rev, isolation)
        run_mutmut(workdir, rerun_names(base, sample, retry) if base else [], children)
        (workdir / "elapsed_s").write_text(f"{time.time() - start:.0f}\n")
    # re-read without its base, a rerun's folder keeps the statuses merged with it
    status = final_statuses(workdir) if summary_only and not base else statuses(workdir)
    sample_names: list[str] = []
    if base:  # detected before stays detected: the earlier tests are still there
        # (and a mutant this run did not check, one detected before or left unchecked, keeps its status)
        status = merged(base, status, retry)
        sample_names = [n for n, s in base.items() if s == "not checked" and status[n] != "not checked"]
    (workdir / "status.json").write_text(json.dumps(status, indent=0, ensure_ascii=False) + "\n")
    what = ("working tree" if tests_rev is None else f"git {tests_rev}") + f" ({' '.join(tests)})"
    entries = equivalent_entries(cfg, cfg["mutation"]["modules"])
    s = summarise(workdir, status, entries, label, what + (f", rerun of {rerun_of}" if base else ""))
    elapsed = workdir / "elapsed_s"
    s["elapsed_s"] = int(elapsed.read_text()) if elapsed.exists() else None
    s["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    if sample_names:  # the kill fraction among the mutants the base run left unchecked, estimated
        k, n = sum(status[x] in DETECTED for x in sample_names), len(sample_names)
        p, se = k / n, math.sqrt(k / n * (1 - k / n) / n)
        s["unchecked_sample"] = {"size": n, "killed": k, "fraction": round(p, 4), "se": round(se, 4)}
    (workdir / "summary.json").write_text(json.dumps(s, indent=1, ensure_ascii=False) + "\n")
    long = ("survivors", "untested", "equivalent_dropped_entries")
    print(json.dumps({k: v for k, v in s.items() if k not in long}, indent=1, ensure_ascii=False))
    print(f"survivors and untested mutants with their diffs: {workdir / 'survivors.txt'}; the dropped "
          f"equivalent entries: {workdir / 'equivalent_dropped.txt'}", flush=True)
    return s


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def with_fingerprints(config_text: str, new: dict[str, str]) -> str:
    """The config text with the entries of ``new`` (name → fingerprint) of its ``[equivalent]``
    table written as ``"name" = { fingerprint = "…", reason = "…" }``; every other line unchanged."""
    out, section = [], None
    for line in config_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            section = stripped.strip("[]").strip()
        elif section == "equivalent" and stripped.startswith('"'):
            ((name, value),) = tomllib.loads(stripped).items()
            if name in new:
                reason = value if isinstance(value, str) else value["reason"]
                key = stripped.split("=", 1)[0].rstrip()
                line = f"{key} = {{ fingerprint = {toml_string(new[name])}, reason = {toml_string(reason)} }}\n"
        out.append(line)
    return "".join(out)


def fill_fingerprints(config: Path, workdir: Path, patterns: list[str]) -> dict[str, str]:
    """Record in ``config`` the fingerprint, in the run ``workdir``, of every equivalent entry
    without one (of those matching ``patterns``, fnmatch, when given), printing each entry's diff
    beside its sentence: running this states that each printed diff is the mutation its sentence
    argues for. An entry whose mutant the run does not have, or detected, gets none (reported).
    Returns the fingerprints recorded."""
    status = final_statuses(workdir)
    new: dict[str, str] = {}
    for name, entry in equivalent_entries(tomllib.loads(config.read_text())).items():
        if entry.fingerprint is not None or (patterns and not any(fnmatch.fnmatch(name, p) for p in patterns)):
            continue
        if name not in status or status[name] in DETECTED:
            print(f"not recorded: {name} is {'not in this run' if name not in status else status[name]}", file=sys.stderr)
            continue
        diff = mutant_diff(workdir, name)
        new[name] = fingerprint(name, diff)
        print(f"## {name}  [{status[name]}, fingerprint {new[name]}]\n   {entry.reason}\n{diff}")
    config.write_text(with_fingerprints(config.read_text(), new))
    print(f"{len(new)} fingerprints recorded in {config}", file=sys.stderr)
    return new


def equivalent_table(entries: dict[str, Entry]) -> str:
    """The mutants triaged as equivalent, grouped by reason (most frequent first) with the functions
    they live in, as the Markdown list of docs/testing.md."""
    groups: dict[str, Counter] = {}
    for name, entry in entries.items():
        module, func = module_of(name).removeprefix("stochformer."), function_of(name).rsplit(".", 1)[1]
        func = func.removeprefix("x_").replace("xǁ", "").replace("ǁ", ".")  # mutmut's mangled names
        groups.setdefault(entry.reason, Counter())[f"{module}.{func}"] += 1
    lines = []
    for reason, where in sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        funcs = ", ".join(f"`{f}`" + (f" ×{n}" if n > 1 else "") for f, n in sorted(where.items()))
        lines.append(f"- **{sum(where.values())}** — {reason}: {funcs}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests-rev", help="take tests/ from this git revision (e.g. a baseline), not the working tree")
    ap.add_argument("--rerun-of", metavar="LABEL", help="run only the mutants that the run LABEL did not detect "
                    "(the equivalent entries included) and keep its other results: valid when the tests were only "
                    "added to since")
    ap.add_argument("--sample", type=int, default=0, metavar="K", help="with --rerun-of: also run a seeded "
                    "uniform sample of K mutants that the run LABEL did not check (a stopped run), to estimate the rest")
    ap.add_argument("--retry-timeouts", action="store_true", help="with --rerun-of: also run again the mutants "
                    "LABEL counted as timeouts (on a quieter machine), keeping what this run finds")
    ap.add_argument("--tests", nargs="+", metavar="FILE", help="use these test files instead of the config's "
                    "(with --rerun-of: the tests added since, which alone decide whether a survivor is now killed)")
    ap.add_argument("--one-pass", action="store_true", help="run every mutant against the config's full `tests` "
                    "at once, instead of `fast_tests` first and `tests` on their survivors only")
    ap.add_argument("--modules", nargs="+", metavar="PATH", help="mutate only these of the config's modules "
                    "(e.g. stochformer/model/activations.py), to check the mechanics on a small run")
    ap.add_argument("--label", help="name of the run (default: 'current' or the revision)")
    ap.add_argument("--max-children", type=int, default=None, help="parallel mutant runs (default: config)")
    ap.add_argument("--config", type=Path, default=CONFIG, help="the configuration (default: tools/mutation.toml)")
    ap.add_argument("--summary-only", action="store_true", help="re-read an earlier run's results")
    ap.add_argument("--fingerprint-equivalents", nargs="*", metavar="PATTERN", help="record in the config the "
                    "fingerprint, in the run --label, of each equivalent entry without one (or of those matching "
                    "PATTERN), printing its diff beside its sentence, then exit: only for entries whose diffs were "
                    "reviewed")
    ap.add_argument("--equivalent-table", action="store_true", help="print the mutants triaged as equivalent, "
                    "grouped by reason (the list of docs/testing.md), then exit")
    args = ap.parse_args()
    cfg = tomllib.loads(args.config.read_text())
    if args.equivalent_table:
        print(equivalent_table(equivalent_entries(cfg)))
        return
    label = args.label or (args.tests_rev or "current").replace("/", "_")
    if args.fingerprint_equivalents is not None:
        fill_fingerprints(args.config, ROOT / "build" / "mutation" / label, args.fingerprint_equivalents)
        return
    if args.modules:
        unknown = sorted(set(args.modules) - set(cfg["mutation"]["modules"]))
        if unknown:
            ap.error(f"--modules: not modules of {args.config}: {', '.join(unknown)}")
        cfg["mutation"]["modules"] = args.modules
    children = args.max_children or cfg["mutation"].get("max_children", 2)
    if os.nice(0) < 10:
        print("note: run this under `nice -n 19`, it keeps both cores busy for a long time", file=sys.stderr)
    common = dict(tests_rev=args.tests_rev, sample=args.sample, children=children, cfg=cfg, summary_only=args.summary_only)
    if args.tests or args.rerun_of or args.one_pass:
        one_pass(label, args.tests or cfg["mutation"]["tests"], rerun_of=args.rerun_of,
                 retry=("timeout",) if args.retry_timeouts else (), **common)
        return
    # two passes: every mutant against the fast tests that pin the formulas exactly, then only their
    # undetected mutants (and those the fast tests never call) against the whole selection
    one_pass(label + "-fast", cfg["mutation"]["fast_tests"], rerun_of=None, isolation="fork", **common)
    one_pass(label, cfg["mutation"]["tests"], rerun_of=label + "-fast", retry=("timeout",), **(common | {"sample": 0}))


if __name__ == "__main__":
    sys.exit(main())
