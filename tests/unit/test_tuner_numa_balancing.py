"""numa-balancing (the exemplar tuner): its plan on recorded and hand-built trees, and that an
apply turns the `numa` check's kernel.numa_balancing finding OK."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.api.tune import Plan, Scope, Write
from nodeagent.checks import numa
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Status
from nodeagent.host import Host, SnapshotHost
from nodeagent.tuners import numa_balancing
from nodeagent.tuning import apply, journal
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree, one_finding

PATH = "/proc/sys/kernel/numa_balancing"
NODE = "/sys/devices/system/node"


def two_nodes(root: Path, balancing: str | None = "1\n") -> SnapshotHost:
    files = {
        "/sys/devices/system/cpu/online": "0-3\n",
        f"{NODE}/node0/cpulist": "0-1\n",
        f"{NODE}/node1/cpulist": "2-3\n",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal:       16777216 kB\n",
        f"{NODE}/node1/meminfo": "Node 1 MemTotal:       16777216 kB\n",
        f"{NODE}/node0/distance": "10 21\n",
        f"{NODE}/node1/distance": "21 10\n",
        f"{NODE}/online": "0-1\n",
    }
    if balancing is not None:
        files[PATH] = balancing
    return make_tree(root, files)


def plan_of(host: Host, **params: int) -> Plan:
    return numa_balancing.TUNER.run_plan(host, numa_balancing.TUNER.make_params(params))


def test_plans_the_sysctl_on_two_nodes(tmp_path: Path) -> None:
    plan = plan_of(two_nodes(tmp_path))
    (change,) = plan.changes
    assert change.scope is Scope.RUNTIME and change.target == "kernel.numa_balancing"
    assert (change.before, change.after) == ("1", "0")
    assert change.writes == (Write(PATH, "1", "0"),)
    assert "kernel.html#numa-balancing" in change.why
    assert (change.answers, change.asked) == (("numa/kernel.numa_balancing",), None)


def test_value_parameter(tmp_path: Path) -> None:
    """The numa check accepts 0: writing 1 over it is the parameter's doing, and the change says so."""
    (change,) = plan_of(two_nodes(tmp_path, "0\n"), value=1).changes
    assert change.writes == (Write(PATH, "0", "1"),)
    assert (change.answers, change.asked) == ((), "numa-balancing.value")
    assert change.why.startswith(
        "value=1 asked by the tuner parameter numa-balancing.value; the numa check accepts 0"
    )
    with pytest.raises(UsageError, match="parameter 'value' wants int"):
        numa_balancing.TUNER.make_params({"value": "off"})


def test_writes_what_the_numa_check_expects(tmp_path: Path) -> None:
    """The target is the check's numa_balancing parameter: one value, not two kept in step."""
    host = two_nodes(tmp_path, "2\n")
    (flagged,) = [f for f in numa.CHECK.run(host, numa.Params()) if f.fix == numa_balancing.ID]
    (change,) = plan_of(host).changes
    assert flagged.status is Status.WARN and change.after == flagged.expected == "0"


@pytest.mark.parametrize(
    ("balancing", "note"),
    [
        (None, f"{PATH} is absent: this kernel has no automatic NUMA balancing"),
        ("0\n", "kernel.numa_balancing is already 0"),
    ],
)
def test_nothing_to_plan(tmp_path: Path, balancing: str | None, note: str) -> None:
    plan = plan_of(two_nodes(tmp_path, balancing))
    assert plan.changes == [] and plan.notes == [note]


def test_one_node_has_nothing_to_balance(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {"/sys/devices/system/cpu/online": "0-1\n", PATH: "1\n"})
    plan = plan_of(host)
    assert plan.changes == []
    assert plan.notes == ["one NUMA node: kernel.numa_balancing has nothing to balance, left at 1"]


def test_recorded_trees_have_no_sysctl() -> None:
    # hwloc recorded /sys and a few /proc files, never /proc/sys.
    plan = plan_of(fixture_host("64amd64-4s2n4ca2co"))
    assert plan.changes == [] and "is absent" in plan.notes[0]


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_plans(name: str) -> None:
    plan = plan_of(fixture_host(name))
    assert plan.changes or plan.notes


def test_apply_fixes_the_numa_check_and_revert_restores(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    before = numa.CHECK.run(two_nodes(tree), numa.Params())
    finding = one_finding(before, "kernel.numa_balancing")
    assert finding.status is Status.WARN and finding.fix == numa_balancing.ID

    host = SnapshotHost(tree, writable=True)
    result = apply.apply(host, [plan_of(host)], "default", state=tmp_path / "state")
    assert [f.status for f in result.findings] == [Status.OK]
    assert (tree / PATH.lstrip("/")).read_text() == "0"
    after = numa.CHECK.run(SnapshotHost(tree), numa.Params())
    assert one_finding(after, "kernel.numa_balancing").status is Status.OK

    assert result.journal is not None
    (j,) = journal.all_journals(tmp_path / "state")
    assert j.state == journal.APPLIED and [(w.path, w.before, w.after) for w in j.writes] == [
        (PATH, "1", "0")
    ]
    assert [f.status for f in apply.revert(j)] == [Status.OK]
    assert (tree / PATH.lstrip("/")).read_text().strip() == "1"
    assert journal.all_journals(tmp_path / "state")[0].state == journal.REVERTED
