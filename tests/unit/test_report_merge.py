"""`nodeagent report merge` (nodeagent.cluster.merge): real reports written by
`nodeagent check --root TREE --format json --facts` on recorded trees, merged into the fleet view;
copies of one tree with one changed make drift naming the odd host; corrupt files, foreign JSON and
duplicate hosts become error entries and notes, never a crash."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from nodeagent.cluster.merge import UNREADABLE, merge_reports
from nodeagent.core.errors import UsageError
from tests.support.cli import run_cli
from tests.support.helpers import SYSFS_FIXTURES
from tests.support.paths import VM

HWLOC_TREES = ("16amd64-8n2c", "2arm-2c", "nvidiagpunumanodes")
SWAPPINESS = "check.kernel.vm.swappiness./proc/sys/vm/swappiness"
# A finding with every field but its status.
FINDING: dict[str, Any] = {
    "check_id": "x",
    "host": "node1",
    "subject": "",
    "summary": "s",
    "evidence": {},
    "expected": "",
    "remediation": "",
    "fix": None,
}


def check_report(root: Path, out: Path) -> dict[str, Any]:
    """What a node leaves behind: `nodeagent check --root ROOT --format json --facts` > OUT."""
    result = run_cli("check", "--root", str(root), "--format", "json", "--facts")
    assert result.returncode in (0, 1, 2, 3), result.stderr
    out.write_text(result.stdout)
    doc: dict[str, Any] = result.json()
    return doc


def vm_copy(tmp_path: Path, name: str, swappiness: int | None = None) -> Path:
    """The recorded VM extracted and renamed `name` (nodeagent.json hostname), maybe changed."""
    root = tmp_path / "trees" / name
    root.mkdir(parents=True)
    with tarfile.open(VM) as tar:
        tar.extractall(root, filter="tar")
    meta = root / "nodeagent.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "hostname": name}))
    if swappiness is not None:
        (root / "proc/sys/vm/swappiness").write_text(f"{swappiness}\n")
    return root


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """node1..node4 from one recorded VM, node4 with vm.swappiness changed: a fleet with drift."""
    base = tmp_path_factory.mktemp("fleet")
    reports = base / "reports"
    reports.mkdir()
    for name in ("node1", "node2", "node3", "node4"):
        root = vm_copy(base, name, swappiness=10 if name == "node4" else None)
        check_report(root, reports / f"{name}.json")
    return reports


def test_reports_of_several_recorded_trees(tmp_path: Path) -> None:
    archives = [VM, *(SYSFS_FIXTURES / f"{n}.tar.bz2" for n in HWLOC_TREES)]
    docs = {}
    for archive in archives:
        doc = check_report(archive, tmp_path / f"{archive.name}.json")
        docs[doc["host"]] = doc
    merged = merge_reports([tmp_path])
    assert sorted(merged.outcomes) == sorted(docs)
    for name, outcome in merged.outcomes.items():
        assert outcome.ok and outcome.facts is not None
        assert outcome.facts["host"] == name  # the facts travel apart from the report, as over SSH
        assert (outcome.doc or {})["status"] == docs[name]["status"]
        assert (outcome.doc or {})["findings"] == docs[name]["findings"]
    assert merged.summary().hosts == len(archives) and merged.summary().unreachable == 0
    worst = max((d["status"] for d in docs.values()), key=["SKIPPED", "OK", "WARN", "UNKNOWN", "FAIL"].index)
    assert merged.status.value == worst
    # Different machines: their CPU counts differ, and the comparison says so.
    assert any(d.key == "topology.cores" for d in merged.comparison.drift)
    out = merged.to_dict()
    assert "facts" not in out["hosts"][docs.popitem()[0]] and "notes" not in out


def test_drift_names_the_odd_host(fleet_dir: Path) -> None:
    merged = merge_reports([fleet_dir])
    assert sorted(merged.outcomes) == ["node1", "node2", "node3", "node4"]
    swap = {d.key: d for d in merged.comparison.drift}[SWAPPINESS]
    assert swap.majority == 60 and swap.majority_hosts == 3
    assert swap.hosts == {"node4": 10}
    # Nothing else differs: the four are one machine recorded once.
    assert {d.key for d in merged.comparison.drift} <= {SWAPPINESS, "check.kernel.vm.swappiness.status"}
    assert merged.to_dict()["hosts"]["node4"]["report_file"].endswith("node4.json")


def test_a_corrupt_file_is_that_hosts_error(tmp_path: Path, fleet_dir: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    for f in fleet_dir.glob("*.json"):
        (reports / f.name).write_bytes(f.read_bytes())
    (reports / "node5.json").write_text('{"schema": 1,\n "host": "node5",\n "findings": [\n')  # cut short
    (reports / "node6.json").write_text(json.dumps({"hello": "world"}))
    (reports / "node7.json").write_bytes(b"\xff\xfe binary")
    fleet = merge_reports([fleet_dir]).to_dict()
    (reports / "fleet.json").write_text(json.dumps(fleet))
    (reports / ".node1.json.1234.tmp").write_text("half a file")  # an atomic write in progress
    (reports / "notes.txt").write_text("not a report")

    merged = merge_reports([reports])
    errors = {n: o.error for n, o in merged.outcomes.items() if o.error is not None}
    assert sorted(errors) == ["fleet", "node5", "node6", "node7"]
    assert all(e.kind == UNREADABLE for e in errors.values())
    assert "node5.json: line 4: not JSON" in errors["node5"].message
    assert "no 'schema', 'host', 'findings'" in errors["node6"].message
    assert "not UTF-8" in errors["node7"].message
    assert "merged fleet report (4 hosts)" in errors["fleet"].message
    # The others are merged as before, and an unreadable host fails the fleet like an unreachable one.
    assert {"node1", "node2", "node3", "node4"} <= set(merged.outcomes)
    assert merged.summary().unreachable == 4 and merged.exit_code == 2
    doc = merged.to_dict()
    assert doc["hosts"]["node5"]["status"] == "FAIL"
    assert doc["hosts"]["node5"]["error"]["kind"] == UNREADABLE
    assert any(d.key == SWAPPINESS for d in merged.comparison.drift)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"schema": 2}, "field schema is 2"),
        ({"host": ""}, "field host is ''"),
        ({"findings": {"a": 1}}, "findings: must be a list (got an object)"),
        ({"findings": ["oops"]}, 'findings[0]: must be an object (got "oops")'),
        ({"findings": [FINDING]}, "findings[0].status: is required"),
        (
            {"findings": [FINDING | {"status": "BAD"}]},
            "findings[0].status: must be 'SKIPPED', 'OK', 'WARN', 'UNKNOWN' or 'FAIL' (got \"BAD\")",
        ),
    ],
)
def test_a_malformed_report_is_an_error_entry(
    tmp_path: Path, fleet_dir: Path, change: dict[str, Any], problem: str
) -> None:
    doc = json.loads((fleet_dir / "node1.json").read_text())
    (tmp_path / "node1.json").write_text(json.dumps(doc | change))
    merged = merge_reports([tmp_path / "node1.json"])
    outcome = merged.outcomes["node1"]
    assert outcome.error is not None and outcome.error.kind == UNREADABLE
    assert problem in outcome.error.message and "\n" not in outcome.error.message


def test_a_duplicate_host_keeps_the_newest(tmp_path: Path, fleet_dir: Path) -> None:
    newer = json.loads((fleet_dir / "node1.json").read_text())
    older = newer | {"started": newer["started"] - 3600, "status": "FAIL"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "node1.json").write_text(json.dumps(older))
    (tmp_path / "b" / "node1.json").write_text(json.dumps(newer))
    (tmp_path / "b" / "node1-copy.json").write_text(json.dumps(older))
    merged = merge_reports([tmp_path / "a", tmp_path / "b"])
    assert list(merged.outcomes) == ["node1"]
    assert (merged.outcomes["node1"].doc or {})["status"] == newer["status"] != "FAIL"
    (note,) = merged.to_dict()["notes"]
    assert note.startswith("node1: 3 reports; kept the newest")
    assert str(tmp_path / "b" / "node1.json") in note.split("left out")[0]
    assert str(tmp_path / "a" / "node1.json") in note.split("left out")[1]


def test_a_readable_report_beats_an_unreadable_file_of_the_same_name(tmp_path: Path, fleet_dir: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "node1.json").write_text("{")
    merged = merge_reports([tmp_path / "old", fleet_dir / "node1.json"])
    assert merged.outcomes["node1"].ok
    assert "left out" in merged.to_dict()["notes"][0]


def test_without_started_the_file_time_decides(tmp_path: Path, fleet_dir: Path) -> None:
    doc = json.loads((fleet_dir / "node2.json").read_text())
    del doc["started"]
    for name, status, mtime in (("x.json", "FAIL", 1_000_000), ("y.json", "OK", 2_000_000)):
        (tmp_path / name).write_text(json.dumps(doc | {"status": status}))
        os.utime(tmp_path / name, (mtime, mtime))
    merged = merge_reports([tmp_path])
    assert (merged.outcomes["node2"].doc or {})["status"] == "OK"


def test_the_same_file_twice_is_one_report(fleet_dir: Path) -> None:
    merged = merge_reports([fleet_dir, fleet_dir / "node1.json"])
    assert len(merged.outcomes) == 4 and "notes" not in merged.to_dict()


def test_nothing_to_merge_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no \*\.json report"):
        merge_reports([tmp_path])
    with pytest.raises(UsageError, match="no such file"):
        merge_reports([tmp_path / "absent"])
