"""The tuning core: profiles merge, journals persist, apply is all-or-nothing, revert is idempotent."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Change, Plan, Scope, runtime_write, verify_writes
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.host import SnapshotHost
from nodeagent.tuning import apply, journal, profile
from nodeagent.tuning.state import StateDiskError
from tests.support.helpers import make_tree

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


# --- The files: what is written, and one line naming file, line and field for a bad one -------------

JOURNAL_FIELDS = [
    "id",
    "host",
    "created",
    "state",
    "writes",
    "files",
    "profile",
    "host_files",
    "host_dirs",
    "created_ns",
    "seq",
]


def one_line(load: Any) -> str:
    with pytest.raises(UsageError) as e:
        load()
    message = str(e.value)
    assert "\n" not in message and e.value.exit_code == 64
    return message


def test_files_written_now_are_in_the_format_of_before(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    state = tmp_path / "state"
    result = apply.apply(host, [_plan(host)], "default", state)
    assert result.journal is not None and result.profile_path is not None
    text = result.journal.path.read_text()
    doc = json.loads(text)
    assert list(doc) == JOURNAL_FIELDS and text == json.dumps(doc, indent=2) + "\n"
    assert list(doc["writes"][0]) == ["path", "before", "after", "tuner", "got"]
    assert list(doc["files"][0]) == ["path", "before", "after"]
    assert journal.load(result.journal.path) == result.journal
    profile_text = result.profile_path.read_text()
    assert profile_text == profile.text(json.loads(profile_text))
    assert profile.load("default", state) == json.loads(profile_text)
    for path in (result.journal.path, result.profile_path):
        assert path.stat().st_mode & 0o777 == 0o600  # journals hold old file contents


def test_a_journal_older_than_its_later_fields_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    write = {"path": KNOB, "before": "1", "after": "0", "tuner": "test"}
    doc = {"id": "x", "host": {"kind": "local"}, "created": "2024-01-01T00:00:00Z", "state": "applied"}
    path.write_text(json.dumps(doc | {"writes": [write], "files": [{"path": "/p", "before": None}]}))
    j = journal.load(path)
    assert (j.seq, j.created_ns, j.host_files, j.host_dirs, j.profile) == (0, 0, [], [], None)
    assert j.writes[0].got is None and j.files[0].after is None and j.path == path


GOOD_JOURNAL = {
    "id": "20260101T000000Z-abcdef",
    "host": {"kind": "local"},
    "created": "2026-01-01T00:00:00Z",
    "state": "applied",
    "writes": [{"path": KNOB, "before": "1", "after": "0", "tuner": "test"}],
    "files": [],
    "seq": 1,
}


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"seq": "1"}, ':17: seq: must be an integer (got "1")'),
        ({"state": "done"}, ':7: state: "done" is not a journal state'),
        (
            {"writes": [{"path": KNOB, "before": 1, "after": "0", "tuner": "t"}]},
            ":11: writes[0].before: must be a string",
        ),
        ({"writes": [{"path": KNOB, "after": "0", "tuner": "t"}]}, ":9: writes[0].before: is required"),
        (
            {"writes": [{"path": KNOB, "befor": "1", "before": "1", "after": "0", "tuner": "t"}]},
            ":11: writes[0].befor: unknown field (did you mean 'before'?)",
        ),
        ({"host": ["local"]}, ":3: host: must be an object (got a list)"),
        ({"files": None}, ":16: files: must be a list (got null)"),
        ({"id": None}, ":2: id: must be a string (got null)"),
        ({"path": "/elsewhere.json"}, ":18: path: unknown field"),
    ],
)
def test_a_bad_journal_names_file_line_and_field(tmp_path: Path, change: dict[str, Any], where: str) -> None:
    path = tmp_path / "j.json"
    path.write_text(json.dumps(GOOD_JOURNAL | change, indent=2))
    assert f"{path}{where}" in one_line(lambda: journal.load(path))


@pytest.mark.parametrize("missing", ["id", "host", "created", "state", "writes", "files"])
def test_a_journal_missing_a_field_names_it(tmp_path: Path, missing: str) -> None:
    path = tmp_path / "j.json"
    path.write_text(json.dumps({k: v for k, v in GOOD_JOURNAL.items() if k != missing}, indent=2))
    assert f"{path}:1: {missing}: is required; move it aside" in one_line(lambda: journal.load(path))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"id": "x",\n "writes": [}', ":2: not a readable nodeagent journal: not JSON"),
        ("[]", ":1: not a nodeagent journal: the top level is a list, not an object"),
        ("[" * 200 + "]" * 200, ": not a readable nodeagent journal: the JSON is nested deeper than 64"),
    ],
)
def test_a_journal_that_is_not_json_is_one_line(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "j.json"
    path.write_text(text)
    assert f"{path}{where}" in one_line(lambda: journal.load(path))


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"name": 3}, ":2: name: must be a string (got 3)"),
        (
            {"env": {"A": {"B": 1}}},
            ":3: env.A: must be a string, a number, true/false or null (got an object)",
        ),
        ({"rank_env": {"zero": {}}}, ':3: rank_env.zero: "zero" is not a local rank'),
        ({"ranks": [{"local_rank": 0, "cpus": True}]}, ":5: ranks[0].cpus: must be a CPU list"),
        ({"ranks": [{"local_rank": None}]}, ":4: ranks[0].local_rank: is null"),
        (
            {"ranks": [{"mems": [0, -1]}]},
            ":6: ranks[0].mems[1]: must be a NUMA node number (0 or more) (got -1)",
        ),
        ({"launcher": {"cpu_dma_latency_us": "0"}}, ":3: launcher.cpu_dma_latency_us: must be a number"),
        ({"launcher": {"hold": 1}}, ":3: launcher.hold: unknown field"),
        ({"snippets": {"tf-data": 1}}, ":3: snippets.tf-data: must be a string (got 1)"),
    ],
)
def test_a_bad_profile_names_file_line_and_field(tmp_path: Path, doc: dict[str, Any], where: str) -> None:
    path = profile.profile_path("p", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=2))
    message = one_line(lambda: profile.load("p", tmp_path))
    assert f"{path}{where}" in message and "recreate the profile with `nodeagent tune --apply`" in message


def test_a_profile_holds_what_every_tuner_writes_and_more(tmp_path: Path) -> None:
    from nodeagent.facts.ranks import RankSlot

    slot = RankSlot(0, "GPU0", "0000:07:00.0", 0, [0], [0, 1, 2, 3], 2, ["mlx5_0"], "PIX", [1])
    doc = profile.merged(
        {},
        [
            ("ranks", [document.dump(slot) | {"env": {"CUDA_VISIBLE_DEVICES": "0"}}]),
            ("env.OMP_NUM_THREADS", "4"),
            ("rank_env.0.TF_NUM_INTRAOP_THREADS", 2),
            ("launcher.cpu_dma_latency_us", 0),
            ("launcher.memlock_soft", "unlimited"),
            ("tf_data", {"autotune.enabled": True, "threading.private_threadpool_size": 16}),
            ("snippets.tf-data", "options = tf.data.Options()\n"),
            ("third-party.setting", [1, {"x": None}]),  # a tuner of the entry-point group keeps its own
        ],
        "p",
        "node01",
    )
    profile.save(profile.profile_path("p", tmp_path), doc)
    assert profile.load("p", tmp_path) == doc


def test_a_full_state_disk_stops_the_apply_before_any_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC from the atomic write itself (not a stand-in for it): exit 74, nothing changed, no
    temporary file left in the state folder."""
    host = _tree(tmp_path)

    def no_space(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StateDiskError) as e:
        apply.apply(host, [_plan(host)], "default", tmp_path / "state")
    monkeypatch.undo()
    assert e.value.exit_code == 74 and "(ENOSPC)" in str(e.value) and "nothing was changed" in str(e.value)
    assert host.read_value(KNOB) == "1" and host.read_value(SEL) == "[always] madvise never"
    assert [p for p in (tmp_path / "state").rglob("*") if p.is_file() and p.name != "lock"] == []
