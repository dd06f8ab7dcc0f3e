"""The bookkeeping of ``tools/mutation.py`` on synthetic runs (no mutmut needed): the fingerprint
of a mutation, the rules by which an entry of the equivalent table counts or drops out, the two
scores, and the recording of fingerprints in the config."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
sys.modules["mutation_tool"] = mutation  # dataclasses look their module up
_spec.loader.exec_module(mutation)

#: a generated module in mutmut's layout: the original copy of x_f, then its mutants
GENERATED = '''\
def x_f__mutmut_orig(x, device=None):
    y = torch.ones(3, device=device)
    return x + y


def x_f__mutmut_1(x, device=None):
    y = torch.ones(3, device=None)
    return x + y


def x_f__mutmut_2(x, device=None):
    y = torch.ones(3, device=device)
    return x - y


def x_g__mutmut_orig(x):
    return x + 1


def x_g__mutmut_1(x):
    return x - 1

mutants_x_g__mutmut['x_g__mutmut_1'] = x_g__mutmut_1 # type: ignore # mutmut generated
'''
MOD = "stochformer.m"


def _run_folder(tmp_path: Path, codes: dict[str, int | None]) -> Path:
    """A run folder with GENERATED as the mutants of ``stochformer/m.py`` and mutmut's exit codes."""
    mutants = tmp_path / "run" / "mutants" / "stochformer"
    mutants.mkdir(parents=True)
    (mutants / "m.py").write_text(GENERATED)
    (mutants / "m.py.meta").write_text(json.dumps({"exit_code_by_key": {f"{MOD}.{k}": v for k, v in codes.items()}}))
    return tmp_path / "run"


def test_fingerprint_is_the_function_and_its_changed_lines():
    diff = "-    y = torch.ones(3, device=device)\n+    y = torch.ones(3, device=None)"
    fp = mutation.fingerprint(f"{MOD}.x_f__mutmut_1", diff)
    assert len(fp) == 12 and int(fp, 16) >= 0
    # the same edit under another number, re-indented, with mutmut's marker: the same fingerprint
    moved = ("-        y = torch.ones(3,  device=device)  # type: ignore # mutmut generated\n"
             "+        y = torch.ones(3, device=None)")
    assert mutation.fingerprint(f"{MOD}.x_f__mutmut_7", moved) == fp
    assert mutation.fingerprint(f"{MOD}.x_f__mutmut_7", moved + "\n-\n+   ") == fp  # blank lines are no edit
    # another edit, the edit undone, or the same edit in another function: another fingerprint
    assert mutation.fingerprint(f"{MOD}.x_f__mutmut_1", diff.replace("None", "'cpu'")) != fp
    assert mutation.fingerprint(f"{MOD}.x_f__mutmut_1", "+    y = torch.ones(3, device=device)\n"
                                "-    y = torch.ones(3, device=None)") != fp
    assert mutation.fingerprint(f"{MOD}.x_h__mutmut_1", diff) != fp


def test_fingerprint_of_a_generated_module(tmp_path):
    run = _run_folder(tmp_path, {"x_f__mutmut_1": 0, "x_f__mutmut_2": 1, "x_g__mutmut_1": 0})
    diff = mutation.mutant_diff(run, f"{MOD}.x_f__mutmut_1")
    assert diff == "-    y = torch.ones(3, device=device)\n+    y = torch.ones(3, device=None)"
    assert mutation.mutant_diff(run, f"{MOD}.x_f__mutmut_2") == "-    return x + y\n+    return x - y"
    # the last mutant of a function is followed by one blank line, its original copy by two: no change
    assert mutation.mutant_diff(run, f"{MOD}.x_g__mutmut_1") == "-    return x + 1\n+    return x - 1"
    fps = mutation.current_fingerprints(run, [f"{MOD}.x_f__mutmut_1", f"{MOD}.x_f__mutmut_9"], mutation.statuses(run))
    assert fps == {f"{MOD}.x_f__mutmut_1": mutation.fingerprint(f"{MOD}.x_f__mutmut_1", diff)}


def test_equivalent_entries_read_both_forms_and_filter_by_module():
    cfg = tomllib.loads('[equivalent]\n"stochformer.m.x_f__mutmut_1" = "why"\n'
                        '"stochformer.n.x_g__mutmut_2" = { fingerprint = "0123456789ab", reason = "because" }\n')
    entries = mutation.equivalent_entries(cfg)
    assert entries == {"stochformer.m.x_f__mutmut_1": mutation.Entry("why"),
                       "stochformer.n.x_g__mutmut_2": mutation.Entry("because", "0123456789ab")}
    assert list(mutation.equivalent_entries(cfg, ["stochformer/n.py"])) == ["stochformer.n.x_g__mutmut_2"]


def test_each_rule_drops_its_entries_and_only_matching_undetected_ones_count():
    status = {"a": "survived", "b": "survived", "c": "killed", "d": "timeout", "e": "survived", "f": "no tests",
              "g": "not checked"}
    now = {n: f"fp-{n}" for n in status}
    entries = {
        "a": mutation.Entry("r", "fp-a"),  # the same mutation, survived: counts
        "b": mutation.Entry("r", "fp-old"),  # the name now denotes another mutation
        "c": mutation.Entry("r", "fp-c"),  # killed now
        "d": mutation.Entry("r", "fp-d"),  # a timeout is detected too
        "e": mutation.Entry("r"),  # never fingerprinted: unverified
        "f": mutation.Entry("r", "fp-f"),  # no test calls it: counts
        "g": mutation.Entry("r", "fp-g"),  # a stopped run: not counted
        "z": mutation.Entry("r", "fp-z"),  # no such mutant in this run
    }
    t = mutation.check_equivalents(status, now, entries)
    assert t.equivalent == ["a", "f"]
    assert t.dropped == {"changed": ["b"], "detected": ["c", "d"], "unverified": ["e"], "not checked": ["g"],
                         "missing": ["z"]}
    assert t.reasons()["b"] == "changed"
    assert "entry b now names a different mutation (fingerprint fp-old, now fp-b)" in t.messages[0]
    assert any(m.startswith("entry c is now detected (killed)") for m in t.messages)
    # a detected mutant whose fingerprint also changed is reported as changed, once
    assert mutation.check_equivalents({"b": "killed"}, now, {"b": entries["b"]}).dropped == {"changed": ["b"]}


@pytest.mark.parametrize("stored, counted", [("fp-a", 1), ("fp-x", 0)])
def test_a_changed_fingerprint_drops_an_entry(stored, counted):
    t = mutation.check_equivalents({"a": "survived"}, {"a": "fp-a"}, {"a": mutation.Entry("r", stored)})
    assert len(t.equivalent) == counted and len(t.dropped.get("changed", [])) == 1 - counted


def test_scores_count_timeouts_as_detected_and_as_undetected():
    status = dict.fromkeys("abcdef", "killed") | dict.fromkeys("gh", "timeout") | {"i": "crashed"}
    status |= {"j": "survived", "k": "survived", "l": "not checked"}
    s = mutation.scores(status, equivalent=2)  # 12 generated, 10 non-equivalent
    assert s == {"score_timeouts_detected": 0.9, "score_timeouts_undetected": 0.7, "score_checked": 1.0}
    assert mutation.scores(status, equivalent=0)["score_timeouts_detected"] == round(9 / 12, 4)


def test_summary_counts_only_checked_entries_and_reports_the_others(tmp_path, capsys):
    run = _run_folder(tmp_path, {"x_f__mutmut_1": 0, "x_f__mutmut_2": 1, "x_g__mutmut_1": 0})
    fp = mutation.fingerprint(f"{MOD}.x_f__mutmut_1", mutation.mutant_diff(run, f"{MOD}.x_f__mutmut_1"))
    entries = {f"{MOD}.x_f__mutmut_1": mutation.Entry("device None", fp),
               f"{MOD}.x_f__mutmut_2": mutation.Entry("wrong", mutation.fingerprint(f"{MOD}.x_f__mutmut_2", "")),
               f"{MOD}.x_g__mutmut_1": mutation.Entry("not reviewed")}
    s = mutation.summarise(run, mutation.statuses(run), entries, "t", "synthetic")
    assert (s["generated"], s["killed"], s["survived"], s["equivalent"]) == (3, 1, 2, 1)
    assert s["equivalent_dropped"] == {"unverified": 1, "changed": 1}
    assert (s["score_timeouts_detected"], s["score_timeouts_undetected"]) == (0.5, 0.5)
    assert f"entry {MOD}.x_f__mutmut_2 now names a different mutation" in capsys.readouterr().out
    survivors = (run / "survivors.txt").read_text()
    assert "[EQUIVALENT: device None]" in survivors and "LISTED AS EQUIVALENT BUT UNVERIFIED" in survivors


def test_fingerprints_are_recorded_beside_the_sentence_for_undetected_entries_only(tmp_path):
    run = _run_folder(tmp_path, {"x_f__mutmut_1": 0, "x_f__mutmut_2": 1, "x_g__mutmut_1": None})
    config = tmp_path / "mutation.toml"
    config.write_text('[mutation]\nmodules = ["stochformer/m.py"]\n\n# the table\n[equivalent]\n'
                      f'"{MOD}.x_f__mutmut_1" = "a \\"quoted\\" reason"\n'
                      f'"{MOD}.x_f__mutmut_2" = "killed, so not recorded"\n'
                      f'"{MOD}.x_g__mutmut_1" = "not run yet: identified all the same"\n'
                      f'"{MOD}.x_f__mutmut_9" = "no such mutant"\n'
                      f'"{MOD}.x_g__mutmut_2" = {{ fingerprint = "0123456789ab", reason = "kept" }}\n')
    before = config.read_text()
    new = mutation.fill_fingerprints(config, run, [])
    assert sorted(new) == [f"{MOD}.x_f__mutmut_1", f"{MOD}.x_g__mutmut_1"]
    entries = mutation.equivalent_entries(tomllib.loads(config.read_text()))
    assert entries[f"{MOD}.x_f__mutmut_1"] == mutation.Entry('a "quoted" reason', new[f"{MOD}.x_f__mutmut_1"])
    assert entries[f"{MOD}.x_f__mutmut_2"].fingerprint is None and entries[f"{MOD}.x_f__mutmut_9"].fingerprint is None
    assert entries[f"{MOD}.x_g__mutmut_2"] == mutation.Entry("kept", "0123456789ab")
    changed = [a for a, b in zip(before.splitlines(), config.read_text().splitlines()) if a != b]
    assert len(changed) == 2 and "# the table" in config.read_text()
    # a pattern restricts what is recorded; a second run records nothing new
    config.write_text(before)
    assert list(mutation.fill_fingerprints(config, run, ["*x_g*"])) == [f"{MOD}.x_g__mutmut_1"]
    assert mutation.fill_fingerprints(config, run, []) == {f"{MOD}.x_f__mutmut_1": new[f"{MOD}.x_f__mutmut_1"]}


def test_reruns_include_the_equivalent_entries():
    base = {"a": "killed", "b": "survived", "c": "no tests", "d": "timeout", "e": "not checked"}
    assert mutation.rerun_names(base, 0) == ["b", "c"]
    assert mutation.rerun_names(base, 5) == ["b", "c", "e"]
    assert mutation.rerun_names(base, 0, ("timeout",)) == ["b", "c", "d"]


def test_a_rerun_replaces_only_what_it_checked_and_timeouts_only_when_retried():
    base = {"a": "killed", "b": "survived", "c": "no tests", "d": "timeout", "e": "not checked"}
    found = {"a": "survived", "b": "killed", "d": "survived"}  # c and e not checked by the rerun
    assert mutation.merged(base, found) == {"a": "killed", "b": "killed", "c": "no tests", "d": "timeout", "e": "not checked"}
    assert mutation.merged(base, found, ("timeout",))["d"] == "survived"
    assert mutation.merged(base, {"d": "not checked"}, ("timeout",))["d"] == "timeout"


def test_the_scratch_copy_collects_the_selected_tests(tmp_path):
    """The copy mutmut runs the tests in (``mutants/``: the package, what mutmut copies by default and
    the ``also_copy`` entries of the generated ``setup.cfg``) holds what the tests read at collection
    (``tests/conftest.py`` reads ``tools/mutation.toml``): pytest collects the first pass's selection
    there without error. Without the config copied, collection fails and the whole run stops at its
    first step."""
    import configparser
    import shutil
    import subprocess

    cfg = tomllib.loads((ROOT / "tools" / "mutation.toml").read_text(encoding="utf-8"))["mutation"]
    work = tmp_path / "scratch"
    mutation.prepare(work, cfg, None)
    parser = configparser.ConfigParser()
    parser.read(work / "setup.cfg")
    copied = [p.strip() for p in parser["mutmut"].get("also_copy", "").splitlines() if p.strip()]
    mutants = work / "mutants"
    shutil.copytree(work / "stochformer", mutants / "stochformer")
    for path in ["tests", "setup.cfg", "pyproject.toml", *copied]:  # mutmut's defaults, then also_copy
        src = work / path
        if src.is_dir():
            shutil.copytree(src, mutants / path, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, mutants / path)
    files = sorted({t.split("::")[0] for t in cfg["fast_tests"]})[:3]
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                          cwd=mutants, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
