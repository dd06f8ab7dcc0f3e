"""stochformer deletes or overwrites only files it wrote and that are unchanged since, by property.

A Hypothesis state machine runs sequences of real commands (``simulate``, ``sweep`` with and
without ``--resume``, ``reproduce`` of a cheap section; plain, ``--force``) in process through the
command line, mixed with what users do between them: edit or delete a file stochformer wrote,
add a file of their own (at the top or in a sub-folder), copy a run folder (``shutil.copytree``),
plant an empty ``.stochformer`` in a folder of theirs. After every step:

- no file stochformer did not write (a user's file, an edited file, every file of a copy) has
  changed or disappeared;
- each command succeeded exactly when its folder was new, empty, or wholly that command's own
  unchanged output with the flag that allows reusing it; a refusal names the offending file (or
  the command that owns the folder);
- a folder a command wrote is accepted by :func:`stochformer.io.outputs.verify` for that command
  only, and no lock file is left behind.

The output-layer functions the commands share are also tested directly, by property.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stochformer.cli import main
from stochformer.io.outputs import (MARKER, Manifest, OutputError, check_output_folder, hold, is_own, lock_path, make_partial,
                                 own_folder, remove_own, tracking, verify, writing)

SIMULATE = ["simulate", "--quiet", "--set", "L=2", "--set", "N=3", "--set", "batch=2", "--set", "m=4", "--set", "d=4"]
SWEEP_FILE = "samples = 2\nsamples_per_task = 1\n[model]\nL = 2\nN = 3\nm = 4\nd = 4\n"
SWEEP = ["sweep", "--config", "s.toml", "--quiet", "--scheduler", "serial"]
REPRODUCE = ["reproduce", "--profile", "tiny", "--only", "fake", "--quiet"]
COMMANDS = ("simulate", "sweep", "reproduce")
FOLDERS = ("a", "b", "c")


def _square(x: int) -> int:
    return x * x


@pytest.fixture(autouse=True, scope="module")
def fake_section():
    """A cheap report section (two stored tasks in its work folder, no figure), registered for this module."""
    from stochformer.config import RunConfig
    from stochformer.report import registry
    from stochformer.report.registry import Section, SectionOutput
    from stochformer.measure.verdict import Comparison
    from stochformer.tasks import Task, run_tasks

    def run(cfg, ctx):
        done = run_tasks([Task(f"t{k}", _square, {"x": k}) for k in range(2)], store=ctx.workdir)
        return SectionOutput({"value": float(sum(done.values()))}, [Comparison.from_mean_se("q", 1.0, 1.0, 0.1)], [],
                             {"stochformer": "test"})

    registry._REGISTRY["fake"] = Section("fake", "Fake", "SPEC", "A fake claim.", RunConfig, {}, run)
    yield
    registry._REGISTRY.pop("fake", None)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class OutputFolders(RuleBasedStateMachine):
    """The model: for each folder, the command that owns it (None: a user's folder or a copy) and
    the files in it that stochformer did not write there (``dirty``); globally, every such file's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="sf-outputs-"))
        self.cwd = os.getcwd()
        os.chdir(self.base)
        Path("s.toml").write_text(SWEEP_FILE)
        self.user: dict[Path, bytes] = {self.base / "s.toml": SWEEP_FILE.encode()}
        self.owner: dict[str, str | None] = {}
        self.dirty: dict[str, set[str]] = {}

    def teardown(self) -> None:
        os.chdir(self.cwd)
        shutil.rmtree(self.base, ignore_errors=True)

    # --- the model's expectations -----------------------------------------------------------

    def _expected(self, command: str, folder: str, flag: str) -> bool:
        path = self.base / folder
        if not path.exists() or not any(path.iterdir()):
            return not (command == "sweep" and flag == "--resume" and not path.exists())
        if self.owner.get(folder) != command or self.dirty.get(folder):
            return False
        if command == "simulate":
            return flag == "--force"
        if command == "sweep":
            return flag in ("--force", "--resume")
        return True  # reproduce updates its own report folder

    def _user_file(self, path: Path, data: bytes, folder: str | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.user[path] = data
        if folder is not None:
            self.dirty.setdefault(folder, set()).add(path.relative_to(self.base / folder).as_posix())

    def _own_files(self, folder: str) -> list[str]:
        path = self.base / folder
        if self.owner.get(folder) is None or not path.is_dir():
            return []
        return sorted(rel for rel in _files(path) if rel != MARKER and rel not in self.dirty.get(folder, set()))

    # --- commands -----------------------------------------------------------------------------

    @rule(command=st.sampled_from(COMMANDS), folder=st.sampled_from(FOLDERS), flag=st.sampled_from(["", "--force", "--resume"]))
    def run(self, command: str, folder: str, flag: str) -> None:
        if flag == "--resume" and command == "simulate":
            flag = ""
        args = {"simulate": SIMULATE, "sweep": SWEEP, "reproduce": REPRODUCE}[command] + ["--out", folder]
        expected = self._expected(command, folder, flag)
        res = CliRunner().invoke(main, args + ([flag] if flag else []))
        event(f"{command} {flag or 'plain'}: {'runs' if expected else 'refused'}")
        assert "Traceback" not in res.output and not isinstance(res.exception, (AssertionError, TypeError)), res.output
        if expected:
            assert res.exit_code == 0, (args, flag, res.output)
            self.owner[folder], self.dirty[folder] = command, set()
            assert is_own(self.base / folder, command)
            assert not any(is_own(self.base / folder, other) for other in COMMANDS if other != command)
        else:
            assert res.exit_code == 2, (args, flag, res.output)
            named = {Path(rel).name for rel in self.dirty.get(folder, set())}
            owner = self.owner.get(folder)
            checked = bool(flag) or command == "reproduce"  # a plain simulate/sweep stops at "not empty"
            if owner is not None and owner != command and checked:
                assert f"'stochformer {owner}'" in res.output, res.output
            elif owner == command and named and checked:
                assert any(name in res.output for name in named), (named, res.output)
            elif owner is None and checked and (self.base / folder).exists():
                assert "not created by stochformer" in res.output, res.output
            elif (self.base / folder).exists():
                assert "not empty" in res.output or "not created by stochformer" in res.output, res.output

    # --- what users do ------------------------------------------------------------------------

    @rule(folder=st.sampled_from(FOLDERS), data=st.data())
    def edit_own_file(self, folder: str, data) -> None:
        files = self._own_files(folder)
        if files:
            rel = data.draw(st.sampled_from(files))
            path = self.base / folder / rel
            self._user_file(path, path.read_bytes() + b"\n% my edit\n", folder)

    @rule(folder=st.sampled_from(FOLDERS), data=st.data())
    def delete_own_file(self, folder: str, data) -> None:
        files = self._own_files(folder)
        if files:
            (self.base / folder / data.draw(st.sampled_from(files))).unlink()

    @rule(folder=st.sampled_from(FOLDERS), name=st.sampled_from(["my_analysis.ipynb", "notes.md", "cache/mine.json",
                                                                 "tasks/keep.txt", ".hidden"]))
    def add_foreign_file(self, folder: str, name: str) -> None:
        if (self.base / folder).is_dir():
            self._user_file(self.base / folder / name, f"mine: {folder}/{name}\n".encode(), folder)

    @rule(source=st.sampled_from(FOLDERS), into=st.sampled_from(FOLDERS))
    def copy_folder(self, source: str, into: str) -> None:
        src, dst = self.base / source, self.base / into
        if source != into and src.is_dir() and not dst.exists():
            shutil.copytree(src, dst)  # the copy's manifest names another inode: it grants nothing
            self.owner[into] = None
            for rel, data in _files(dst).items():
                self.user[dst / rel] = data
            self.dirty[into] = set(_files(dst))

    @rule(folder=st.sampled_from(FOLDERS))
    def plant_marker(self, folder: str) -> None:
        path = self.base / folder
        if not path.exists():
            self._user_file(path / "thesis.tex", b"\\documentclass{article}\n", folder)
            self._user_file(path / MARKER, b"", folder)
            self.owner[folder] = None

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def users_files_are_untouched(self) -> None:
        for path, data in self.user.items():
            assert path.is_file() and path.read_bytes() == data, f"{path} changed or disappeared"

    @invariant()
    def no_lock_or_partial_is_left(self) -> None:
        leftovers = [p.name for p in self.base.iterdir() if p.name.endswith((".lock", ".partial"))]
        assert not leftovers, leftovers


OutputFolders.TestCase.settings = settings(max_examples=12, stateful_step_count=8, deadline=None,
                                           suppress_health_check=list(HealthCheck))
TestOutputFolders = OutputFolders.TestCase


# --- the output layer, by property ----------------------------------------------------------

NAMES = st.text(alphabet="abcdefgh_.-", min_size=1, max_size=8).filter(lambda s: s not in (".", "..", MARKER))
TREES = st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=64), min_size=1, max_size=6)


def _consistent(tree: dict[str, bytes]) -> dict[str, bytes]:
    """``tree`` without paths that are also folders of another path."""
    return {p: d for p, d in tree.items() if not any(q.startswith(p + "/") for q in tree)}


def _write_own(folder: Path, tree: dict[str, bytes], command: str) -> Manifest:
    manifest = own_folder(folder, command)
    with tracking(manifest):
        for rel, data in tree.items():
            with writing(folder / rel) as tmp:
                tmp.write_bytes(data)
    return manifest


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES.map(_consistent), change=st.sampled_from(["none", "edit", "add", "copy", "delete", "link"]), data=st.data())
def test_replace_only_unchanged_own_files(tmp_path_factory, tree, change, data) -> None:
    """``remove_own`` removes a folder exactly when every file in it is one stochformer wrote there,
    unchanged; otherwise it removes nothing and names the offending file."""
    base = tmp_path_factory.mktemp("own")
    folder = base / "run"
    _write_own(folder, tree, "simulate")
    rel = data.draw(st.sampled_from(sorted(tree)))
    target = folder
    if change == "edit":
        (folder / rel).write_bytes((folder / rel).read_bytes() + b"x")
    elif change == "add":
        (folder / (rel + ".mine")).write_bytes(b"mine")
        rel = rel + ".mine"
    elif change == "copy":
        target = base / "copy"
        shutil.copytree(folder, target)
    elif change == "delete":
        (folder / rel).unlink()
    elif change == "link":
        (folder / "link").symlink_to(base)
        rel = "link"
    before = _files(target)
    if change in ("none", "delete"):
        remove_own(target, "simulate")
        assert not target.exists()
        return
    with pytest.raises(OutputError) as exc:
        remove_own(target, "simulate")
    assert _files(target) == before
    assert (Path(rel).name in str(exc.value)) or (change == "copy" and "not created by stochformer" in str(exc.value))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES.map(_consistent), made_by=st.sampled_from(COMMANDS), asked=st.sampled_from(COMMANDS))
def test_a_folder_belongs_to_the_command_that_made_it(tmp_path_factory, tree, made_by, asked) -> None:
    folder = tmp_path_factory.mktemp("cmd") / "run"
    _write_own(folder, tree, made_by)
    if made_by == asked:
        assert check_output_folder(folder, force=True, command=asked) == folder
    else:
        with pytest.raises(OutputError, match=f"'stochformer {made_by}'"):
            check_output_folder(folder, force=True, command=asked)
        with pytest.raises(OutputError):
            remove_own(folder, asked)
        assert is_own(folder, made_by)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200))
def test_planted_or_foreign_manifests_grant_nothing(tmp_path_factory, content) -> None:
    """Any bytes as ``.stochformer`` (an old marker, an empty file, another folder's manifest) grant nothing."""
    folder = tmp_path_factory.mktemp("planted")
    (folder / "thesis.tex").write_text("mine")
    (folder / MARKER).write_bytes(content)
    with pytest.raises(OutputError, match="thesis.tex|not created by stochformer"):
        remove_own(folder)
    assert (folder / "thesis.tex").read_text() == "mine"


def _forged_lines(folder: Path, other: Path, rel: str, data: bytes, how: str) -> list[str]:
    """Manifest lines listing the user's file ``rel`` that stochformer never wrote there: as a file
    with its true size and hash, or as a temporary name, unsigned, with a made-up signature, with
    the header's signature, or a signed line of another folder's manifest renamed to ``rel``."""
    import hashlib
    import json

    entry = {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    temp = {"path": rel, "temp": True}
    header = json.loads((folder / MARKER).read_text().splitlines()[0])
    theirs = [json.loads(line) for line in (other / MARKER).read_text().splitlines()[1:]]
    lines = {
        "unsigned": [entry], "unsigned temp": [temp], "made-up mac": [{**entry, "mac": "0" * 64}],
        "made-up mac temp": [{**temp, "mac": "f" * 64}], "header's mac": [{**entry, "mac": header["mac"]}],
        "copied from another manifest": [{**line, "path": rel} for line in theirs],
        "copied temp": [{**line, "path": rel, "temp": True} for line in theirs],
    }[how]
    return [json.dumps(line) for line in lines]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES.map(_consistent), mine=st.binary(max_size=64),
       how=st.sampled_from(["unsigned", "unsigned temp", "made-up mac", "made-up mac temp", "header's mac",
                            "copied from another manifest", "copied temp"]))
def test_an_edited_manifest_grants_nothing(tmp_path_factory, tree, mine, how) -> None:
    """A user's file added to a run folder stays refused (named, nothing removed) whatever line is
    appended to the folder's manifest to list it: every line is signed with the key kept outside
    the folder and bound to this manifest's header, so only lines stochformer wrote there count."""
    base = tmp_path_factory.mktemp("edited")
    folder, other = base / "run", base / "other"
    _write_own(folder, tree, "simulate")
    _write_own(other, {"mine.txt": mine, **tree}, "simulate")
    (folder / "mine.txt").write_bytes(mine)
    with (folder / MARKER).open("a") as fh:
        fh.write("".join(line + "\n" for line in _forged_lines(folder, other, "mine.txt", mine, how)))
    before = _files(folder)
    with pytest.raises(OutputError, match="mine.txt"):
        remove_own(folder, "simulate")
    assert _files(folder) == before
    (folder / "mine.txt").unlink()
    remove_own(folder, "simulate")  # the lines stochformer wrote still grant its own files
    assert not folder.exists()


def test_interrupted_write_leaves_nothing_foreign(tmp_path) -> None:
    """A write cut short leaves no temporary file; a temporary file left by a killed run is listed
    (its folder stays replaceable)."""
    folder = tmp_path / "run"
    manifest = own_folder(folder, "sweep")
    with tracking(manifest):
        with pytest.raises(KeyboardInterrupt):
            with writing(folder / "tasks" / "t.json") as tmp:
                tmp.write_text("{")
                raise KeyboardInterrupt
        assert not list((folder / "tasks").iterdir())
        with writing(folder / "x.json") as tmp:
            tmp.write_text("{}")
            left = tmp.with_name(tmp.name + "-copy")
        manifest.record_temp(left.name)
        left.write_text("partial")
    verify(folder, "sweep")
    remove_own(folder, "sweep")
    assert not folder.exists()


def test_empty_folder_and_checks_before_any_work(tmp_path, monkeypatch) -> None:
    """An existing empty folder is accepted; a dangling link, a link to a folder, a name too long
    for the names stochformer adds beside it are refused before any work (nothing is created)."""
    monkeypatch.chdir(tmp_path)
    Path("empty").mkdir()
    res = CliRunner().invoke(main, [*SIMULATE, "--out", "empty"])
    assert res.exit_code == 0 and is_own(tmp_path / "empty", "simulate"), res.output
    Path("dangling").symlink_to(tmp_path / "nowhere")
    Path("olink").symlink_to(tmp_path / "empty")
    for out, text in (("dangling", "which does not exist"), ("olink", "is a symbolic link"), ("x" * 240, "folder name is 240 bytes")):
        before = sorted(p.name for p in tmp_path.iterdir())
        res = CliRunner().invoke(main, [*SIMULATE, "--out", out])
        assert res.exit_code == 2 and text in res.output and "Traceback" not in res.output, res.output
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_lock_is_on_the_resolved_path(tmp_path) -> None:
    """Two spellings of one folder (a link to its parent, ``x/../``) take one lock."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert lock_path(tmp_path / "alias" / "o") == lock_path(tmp_path / "real" / "o") == lock_path(tmp_path / "real" / ".." / "real" / "o")
    with hold(tmp_path / "real" / "o", "reproduce"):
        with pytest.raises(OutputError, match="in use by another stochformer run"):
            with hold(tmp_path / "alias" / "o", "reproduce"):
                pass


def test_stale_partials_of_others_stay(tmp_path) -> None:
    """Only partial folders that are wholly stochformer's own are cleaned up."""
    from stochformer.io.outputs import remove_stale_partials

    out = tmp_path / "run"
    ours = make_partial(out, "simulate")
    theirs = make_partial(out, "simulate")
    (theirs.folder / "mine.txt").write_text("mine")
    remove_stale_partials(out)
    assert not ours.folder.exists() and (theirs.folder / "mine.txt").read_text() == "mine"


# --- the names stochformer derives beside --out, by property ---------------------------------

CONVERGE = ["converge", "--quiet", "--set", "model.batch=4", "--set", "samples_per_task=4", "--set", "depths=[2,4]",
            "--set", "widths=[2,4]", "--set", "bootstrap=100", "--set", "model.N=3", "--set", "model.d=3"]
#: the names a run derives from --out NAME: its lock, its task store (converge, chaos, phase), a partial folder
BESIDE = {"lock": ".{}.lock", "tasks": "{}.tasks", "partial": ".{}.k3x9q1zz.partial"}


def _plant(path: Path, what: str, base: Path) -> None:
    """A user's item of kind ``what`` at ``path`` (``base/thesis.txt`` is the target of links)."""
    target = base / "thesis.txt"
    if what == "text":
        path.write_text("my notes\n")
    elif what == "empty file":
        path.write_bytes(b"")
    elif what in ("stale lock", "linked lock"):
        text = b"pid 4242, stochformer simulate, started 2026-01-01 00:00:00 UTC"
        if what == "stale lock":
            path.write_bytes(text)
        else:  # a user's file that reads like a lock, hard-linked: writing the lock would write it
            target.write_bytes(text)
            os.link(target, path)
    elif what == "hard link":
        os.link(target, path)
    elif what == "symlink":
        path.symlink_to(target)
    elif what == "empty folder":
        path.mkdir()
    elif what == "folder":
        path.mkdir()
        (path / "keep.txt").write_text("mine\n")
    elif what == "fifo":
        os.mkfifo(path)


def _tree(base: Path) -> dict[str, tuple]:
    """Every item under ``base``: its kind, and a file's bytes and inode."""
    items = {}
    for p in sorted(base.rglob("*")):
        st = p.lstat()
        kind = "link" if p.is_symlink() else "fifo" if p.is_fifo() else "dir" if p.is_dir() else "file"
        items[p.relative_to(base).as_posix()] = (kind, p.read_bytes() if kind == "file" else None, st.st_ino)
    return items


@pytest.mark.parametrize("what", ["text", "empty file", "stale lock", "linked lock", "hard link", "symlink", "empty folder",
                                  "folder", "fifo"])
@pytest.mark.parametrize("where", sorted(BESIDE))
def test_what_a_user_has_beside_the_output_is_never_written_or_removed(tmp_path_factory, where, what) -> None:
    """A user's item at a name a run derives from ``--out`` (the lock, the task store, a partial
    folder's pattern), whatever its kind, is never written, replaced or removed: the run either
    uses what it may (no item there; a lock an earlier, killed run left: a plain file with one link,
    empty or naming its holder; a partial folder is not its own and stays) and succeeds, or stops
    before any work with one line naming that path. Every other item keeps its bytes and inode."""
    command = "converge" if where == "tasks" else "simulate"  # the task store is converge's; the rest every run's
    base = tmp_path_factory.mktemp("beside")
    (base / "thesis.txt").write_text("my thesis\n")
    name = BESIDE[where].format("out")
    _plant(base / name, what, base)
    ours = where == "lock" and what in ("empty file", "stale lock")  # an earlier run's lock, taken over
    used = where in ("lock", "tasks")  # a partial folder of that pattern is never its own: it stays
    expected = ours or not used
    before = {k: v for k, v in _tree(base).items() if not (ours and k == name)}
    cwd = os.getcwd()
    os.chdir(base)
    try:
        res = CliRunner().invoke(main, [*(SIMULATE if command == "simulate" else CONVERGE), "--out", "out"])
    finally:
        os.chdir(cwd)
    assert "Traceback" not in res.output and res.exit_code in (0, 2), res.output
    assert (res.exit_code == 0) == expected, (command, where, what, res.output)
    if not expected:
        assert name in res.output and res.output.count("Error:") == 1, res.output
    after = _tree(base)
    assert {k: v for k, v in after.items() if k in before} == before
    assert not os.path.lexists(base / BESIDE["lock"].format("out")) or not ours
    assert all(not k.startswith("out") or k.split("/")[0] in ("out", name) for k in after), sorted(after)
