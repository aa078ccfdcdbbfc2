"""Journal and state, crash- and race-consistent, on writable copies of a sysfs
tree (tests/support/sysfs_node.py's node) with the state folder in tmp:

- two applies in the same second (the clock frozen) are undone newest first by `revert --all`;
- two concurrent applies: the second waits for the state lock, no profile setting is lost; a
  second run that cannot get the lock in time stops with one line and exit 75;
- revert leaves a value changed since the apply alone: a conflict, exit 2;
- a journal naming a path no tuner writes is refused before any write;
- ENOSPC on the profile save or the final journal save: every value restored, one line, exit 74,
  and `revert --all` afterwards exits 0; a nearly full state disk refuses before the first write;
- temporary files of killed saves are removed; as root, a world-writable state folder is refused.

The command line runs in-process (`nodeagent.cli.main.main`), so the tests can inject the disk errors.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Change, Plan, Scope
from nodeagent.core import parse
from nodeagent.tuners import thp
from nodeagent.tuning import apply, journal, profile, state
from tests.support.cli import RunCli
from tests.support.sysfs_node import THP, SysfsHost, build_node

ENABLED, DEFRAG = f"{THP}/enabled", f"{THP}/defrag"


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(apply.FAULT_KILL_ENV, raising=False)
    return build_node(tmp_path / "node")


def shown(root: Path, path: str) -> str:
    """The choice a selector file holds."""
    text = (root / path.lstrip("/")).read_text().strip()
    return parse.selected(text) or text


@pytest.fixture(autouse=True)
def kernel_like(monkeypatch: pytest.MonkeyPatch) -> None:
    """Selector files re-rendered as the kernel does (tests/support/sysfs_node.py's SysfsHost), also
    for the host revert reopens, so a second apply plans from what the first left."""
    monkeypatch.setattr(apply, "reopen", lambda ref: SysfsHost(Path(ref["source"])))


def thp_apply(root: Path, enabled: str, defrag: str, extra: list[Plan] | None = None) -> apply.ApplyResult:
    host = SysfsHost(root)
    params = thp.TUNER.make_params({"enabled": enabled, "defrag": defrag})
    return apply.apply(host, [thp.TUNER.run_plan(host, params), *(extra or [])], "default")


def env_plan(var: str, value: str) -> Plan:
    return Plan(
        "tf-threads",
        [
            Change(
                "tf-threads",
                f"env {var}",
                "(unset)",
                value,
                Scope.PROCESS,
                "why",
                profile_key=f"env.{var}",
                value=value,
            )
        ],
    )


def test_two_applies_in_the_same_second_revert_all_restores_every_value(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    start = {p: shown(node, p) for p in (ENABLED, DEFRAG)}
    assert start == {ENABLED: "never", DEFRAG: "always"}
    frozen = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen)  # same second, same nanosecond
    for attempt in range(20):
        first = thp_apply(node, "madvise", "never")
        second = thp_apply(node, "always", "madvise")
        assert first.journal and second.journal
        assert first.journal.created_ns == second.journal.created_ns
        assert second.journal.seq == first.journal.seq + 1
        # The second's journal holds what the first left (read again under the lock).
        assert {w.path: w.before for w in second.journal.writes} == {ENABLED: "madvise", DEFRAG: "never"}
        code, out, err = run_cli("revert", "--all")
        assert code == 0, (attempt, out, err)
        assert {p: shown(node, p) for p in (ENABLED, DEFRAG)} == start, attempt
    order = [j.seq for j in journal.all_journals(tmp_path / "state")]
    assert order == list(range(1, 41))


def test_concurrent_applies_wait_for_the_lock_and_lose_no_profile_setting(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_merged = profile.merged

    def slow_merged(*args: Any) -> dict[str, Any]:
        time.sleep(0.3)  # widen the read-merge-save window: without the lock one setting is lost
        return real_merged(*args)

    monkeypatch.setattr(profile, "merged", slow_merged)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            host = SysfsHost(node)
            apply.apply(host, [env_plan(f"VAR{i}", str(i))], "default")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    doc = profile.load("default", tmp_path / "state")
    assert doc["env"] == {"VAR0": "0", "VAR1": "1", "VAR2": "2"}
    assert sorted(j.seq for j in journal.all_journals(tmp_path / "state")) == [1, 2, 3]


def test_a_second_run_that_cannot_get_the_lock_stops_with_one_line(node: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NODEAGENT_STATE_DIR": str(tmp_path / "state"), "NODEAGENT_LOCK_WAIT": "0.3"}
    with state.lock(tmp_path / "state") as lock_path:
        proc = subprocess.run(
            [sys.executable, "-m", "nodeagent", "tune", "--root", str(node), "--apply", "--only", "thp"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 75, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"another nodeagent apply/revert holds {lock_path} (pid {os.getpid()}); try again" in line
    assert shown(node, ENABLED) == "never"  # nothing written
    assert not (tmp_path / "state" / "journal").exists()


def test_revert_leaves_a_value_changed_since_alone(node: Path, tmp_path: Path, run_cli: RunCli) -> None:
    result = thp_apply(node, "madvise", "never")
    assert result.journal
    (node / DEFRAG.lstrip("/")).write_text("defer\n")  # someone else, since
    code, out, err = run_cli("revert", "--all")
    assert code == 2, out + err
    assert shown(node, DEFRAG) == "defer"  # not overwritten
    assert shown(node, ENABLED) == "never"  # the value still ours is restored
    assert f"not reverted: journal {result.journal.id}" in out
    assert DEFRAG in out and "'never'" in out and "'defer'" in out
    assert "OK" not in out and "every old value" not in out
    assert journal.load(result.journal.path).state == journal.APPLIED  # not marked reverted
    code, out, _ = run_cli("revert", "--all")  # again: the same conflict, nothing overwritten
    assert code == 2 and shown(node, DEFRAG) == "defer"


def test_a_tampered_journal_is_refused_and_nothing_is_written(
    node: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    result = thp_apply(node, "madvise", "never")
    assert result.journal
    victim = node / "etc" / "shadow"
    victim.parent.mkdir(parents=True)
    victim.write_text("root:x:1::\n")
    doc = json.loads(result.journal.path.read_text())
    doc["writes"].append({"path": "/etc/shadow", "before": "pwned", "after": "root:x:1::", "tuner": "thp"})
    result.journal.path.write_text(json.dumps(doc))
    for args in (["revert", "--all"], ["revert", result.journal.id]):
        code, out, err = run_cli(*args)
        assert code == 64, out + err
        (line,) = err.splitlines()
        assert str(result.journal.path) in line and "/etc/shadow" in line and "refused" in line
        assert victim.read_text() == "root:x:1::\n"
        assert (shown(node, ENABLED), shown(node, DEFRAG)) == ("madvise", "never")  # nothing written
    doc["writes"][-1]["path"] = "/sys/kernel/mm/transparent_hugepage/../../../../etc/shadow"
    result.journal.path.write_text(json.dumps(doc))
    code, _, err = run_cli("revert", "--all")
    assert code == 64 and "refused" in err and victim.read_text() == "root:x:1::\n"


def _enospc(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["profile", "final journal", "final journal, disk stays full"])
def test_enospc_after_the_journal_restores_every_value(
    node: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: RunCli,
    where: str,
) -> None:
    st = tmp_path / "state"
    code, out, err = run_cli("tune", "--root", str(node), "--apply", "--only", "tf-threads")
    assert code == 0, out + err  # an earlier profile
    old_profile = (st / "profiles" / "default.json").read_text()
    start = {p: shown(node, p) for p in (ENABLED, DEFRAG)}
    real_save = journal.Journal.save
    if where == "profile":
        monkeypatch.setattr(profile, "save", _enospc)
    else:

        def save(self: journal.Journal) -> None:
            if self.state == journal.APPLIED or (where.endswith("full") and self.state != journal.APPLYING):
                _enospc()
            real_save(self)

        monkeypatch.setattr(journal.Journal, "save", save)
    code, out, err = run_cli("tune", "--root", str(node), "--apply", "--only", "thp,tf-threads")
    assert code == 74, out + err
    (line,) = err.splitlines()
    j = journal.all_journals(st)[-1]
    path = st / "profiles" / "default.json" if where == "profile" else j.path
    tail = "every value restored; free space and apply again"
    assert line == f"nodeagent: error: state disk full (ENOSPC) at {path}: {tail}"
    assert {p: shown(node, p) for p in (ENABLED, DEFRAG)} == start
    assert (st / "profiles" / "default.json").read_text() == old_profile
    assert j.state == (journal.APPLYING if where.endswith("full") else journal.ROLLED_BACK)
    monkeypatch.undo()
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(st))
    code, out, err = run_cli("revert", "--all")  # this run's journal and the earlier one
    assert code == 0, out + err
    assert {p: shown(node, p) for p in (ENABLED, DEFRAG)} == start
    assert not (st / "profiles" / "default.json").exists()  # the earlier apply created it
    assert all(j.state == journal.REVERTED for j in journal.all_journals(st))


def test_a_nearly_full_state_disk_is_refused_before_any_write(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    monkeypatch.setattr(state, "free_bytes", lambda folder: 100 * 1024)
    code, out, err = run_cli("tune", "--root", str(node), "--apply", "--only", "thp")
    assert code == 74, out + err
    (line,) = err.splitlines()
    assert "state disk full at" in line and "nothing was changed" in line
    assert shown(node, ENABLED) == "never" and not (tmp_path / "state" / "journal").exists()


def test_temporary_files_of_killed_saves_are_removed(node: Path, tmp_path: Path) -> None:
    st = tmp_path / "state"
    for folder in (st, st / "journal", st / "profiles"):
        folder.mkdir(parents=True, exist_ok=True)
    leftovers = [
        # nodeagent.core.atomic's temporary files of the state's own files
        st / ".sequence.0123abcd.tmp",
        st / "journal" / ".20260101T000000Z-abcdef.json.89abcdef.tmp",
        st / "profiles" / ".default.json.00ff00ff.tmp",
        # tempfile.mkstemp's, which earlier versions wrote through
        st / ".sequence.k2j4h5g6",
        st / "journal" / ".x.json.abcd_123",
        st / "profiles" / ".default.json.zz9zz9zz",
    ]
    for p in leftovers:
        p.write_text("half")
    kept = [st / "journal" / "notes.txt", st / "profiles" / ".notes.txt.0123abcd.tmp"]
    for p in kept:
        p.write_text("mine")
    thp_apply(node, "madvise", "never")
    assert not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in kept)
    assert sorted(p.name for p in (st / "journal").iterdir() if p.name.startswith(".")) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the state folder is checked when running as root")
def test_as_root_a_world_writable_state_folder_is_refused(
    node: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    st = tmp_path / "state"
    st.mkdir()
    st.chmod(0o777)
    code, out, err = run_cli("tune", "--root", str(node), "--apply", "--only", "thp")
    assert code == 64, out + err
    (line,) = err.splitlines()
    assert str(st) in line and "chmod go-w" in line
    assert shown(node, ENABLED) == "never" and list(st.iterdir()) == []
    code, out, err = run_cli("revert", "--all")
    assert code == 64 and "chmod go-w" in err
