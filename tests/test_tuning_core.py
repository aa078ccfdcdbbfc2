"""The tuning core: profiles merge, journals persist, apply is all-or-nothing, revert is idempotent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.api.tune import Change, Plan, Scope, runtime_write, verify_writes
from nodeagent.core.errors import UsageError
from nodeagent.host import SnapshotHost
from nodeagent.tuning import apply, journal, profile
from tests.helpers import make_tree

KNOB = "/proc/sys/vm/knob"
SEL = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.fixture(autouse=True)
def test_tuner_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Revert writes only what a registered tuner owns: register the tuner "test" of these plans."""
    from nodeagent import tuners
    from nodeagent.api.tune import Tuner

    fake = Tuner("test", "test", lambda h: None, lambda f, p: Plan("test"), object, writes=(KNOB, SEL))
    real = tuners.all_tuners()
    monkeypatch.setattr(tuners, "all_tuners", lambda: (*real, fake))


def _tree(tmp_path: Path) -> SnapshotHost:
    make_tree(tmp_path / "node", {KNOB: "1\n", SEL: "[always] madvise never\n", "/proc/sys/vm/other": "5\n"})
    return SnapshotHost(tmp_path / "node", writable=True)


def _plan(host: SnapshotHost) -> Plan:
    return Plan(
        "test",
        [
            runtime_write("test", "vm.knob", "why", {KNOB: host.read(KNOB)}, "0"),
            runtime_write("test", "thp", "why", {SEL: host.read(SEL)}, "madvise"),
            Change("test", "env X", "(unset)", "4", Scope.PROCESS, "why", profile_key="env.X", value="4"),
            Change("test", "cmdline", "-", "idle=poll", Scope.BOOT, "why"),
        ],
    )


def test_profile_merge_sets_dotted_keys_and_keeps_the_rest() -> None:
    doc = profile.merged({"env": {"A": "1"}, "ranks": [1]}, [("env.B", "2"), ("launcher.x", 0)], "p", "h")
    assert doc["env"] == {"A": "1", "B": "2"} and doc["ranks"] == [1] and doc["launcher"] == {"x": 0}
    assert doc["name"] == "p" and doc["host"] == "h"
    with pytest.raises(UsageError, match="profile name"):
        profile.profile_path("../escape")


def test_apply_then_revert_restores_values_and_profile(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    state = tmp_path / "state"
    result = apply.apply(host, [_plan(host)], "default", state)
    assert result.journal is not None and result.journal.state == journal.APPLIED
    assert host.read_value(KNOB) == "0" and host.read_value(SEL) == "madvise"
    assert [f.status.value for f in result.findings] == ["OK", "OK"]
    assert json.loads(result.profile_path.read_text())["env"] == {"X": "4"}  # type: ignore[union-attr]
    assert [c.target for c in result.skipped] == ["cmdline"]  # boot changes are advice only

    saved = journal.load(result.journal.path)
    assert [(w.path, w.before, w.after) for w in saved.writes] == [
        (KNOB, "1", "0"),
        (SEL, "always", "madvise"),  # a selector file is restored by writing its old choice
    ]
    first = apply.revert(saved)
    assert first[0].status.value == "OK"
    assert host.read_value(KNOB) == "1"
    assert not (state / "profiles" / "default.json").exists()  # it did not exist before
    again = apply.revert(journal.load(saved.path))  # idempotent
    assert again[0].status.value == "OK" and host.read_value(KNOB) == "1"


def test_values_already_right_write_nothing(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    plan = Plan("test", [runtime_write("test", "other", "why", {"/proc/sys/vm/other": "5\n"}, "5")])
    result = apply.apply(host, [plan], "default", tmp_path / "state")
    assert result.journal is None and not (tmp_path / "state" / "journal").exists()


def test_failed_write_undoes_earlier_writes(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    # A directory where a file is expected: open(..., "w") fails with EISDIR on the second write.
    (tmp_path / "node" / "sys/kernel/mm/transparent_hugepage/enabled").unlink()
    (tmp_path / "node" / "sys/kernel/mm/transparent_hugepage/enabled").mkdir()
    plan = Plan(
        "test",
        [
            runtime_write("test", "vm.knob", "why", {KNOB: "1"}, "0"),
            runtime_write("test", "thp", "why", {SEL: "[always] madvise never"}, "madvise"),
        ],
    )
    with pytest.raises(UsageError, match="earlier write"):
        apply.apply(host, [plan], "default", tmp_path / "state")
    assert host.read_value(KNOB) == "1"
    (j,) = journal.all_journals(tmp_path / "state")
    assert j.state == journal.ROLLED_BACK


def test_verify_reports_values_that_did_not_take(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    change = runtime_write("test", "vm.knob", "why", {KNOB: "1"}, "0")
    (finding,) = verify_writes(host, [change])
    assert finding.status.value == "FAIL" and KNOB in finding.evidence


def test_find_by_prefix_and_unknown(tmp_path: Path) -> None:
    j = journal.create({"kind": "local"}, [], [], None, tmp_path)
    assert journal.find(j.id[:10], tmp_path).id == j.id
    with pytest.raises(UsageError, match="no journal matches"):
        journal.find("nope", tmp_path)
    (tmp_path / "journal" / "broken.json").write_text("{")
    with pytest.raises(UsageError, match="not a readable nodeagent journal"):
        journal.all_journals(tmp_path)
