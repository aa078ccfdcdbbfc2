from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.checks import numa
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.topology import NumaNode, Topology
from nodeagent.host import LocalHost
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

DEFAULT = numa.Params()


def _by_subject(findings: list[Finding]) -> dict[str, Finding]:
    return {f.subject: f for f in findings}


def _topology(**kw: object) -> Topology:
    base = Topology(
        cpus_online=[0, 1, 2, 3],
        cpus_offline=[],
        packages=2,
        cores=4,
        threads_per_core=1,
        numa_nodes=[NumaNode(0, [0, 1], 1024, {0: 10, 1: 21}), NumaNode(1, [2, 3], 1024, {0: 21, 1: 10})],
        gpu_memory_nodes=[],
        ignored_numa_nodes={},
        cpu_model="test",
        smt_control="on",
        memory_total_mib=2048,
        cpu_package={0: 0, 1: 0, 2: 1, 3: 1},
        core_of={0: 0, 1: 1, 2: 2, 3: 3},
        problems=[],
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _facts(**kw: object) -> numa.Facts:
    return numa.Facts(topology=_topology(**kw), numa_balancing="0", zone_reclaim_mode="0", smt_active="0")


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_recorded_tree_evaluates_without_unknown(name: str) -> None:
    findings = numa.CHECK.run(fixture_host(name), DEFAULT)
    assert findings and all(f.status is not Status.UNKNOWN for f in findings)


def test_unbalanced_memory_on_recorded_opteron() -> None:
    found = _by_subject(numa.CHECK.run(fixture_host("64amd64-4s2n4ca2co"), DEFAULT))
    assert found["balance"].status is Status.WARN
    assert "node 5 (8192 MiB)" in found["balance"].summary
    assert "sub-NUMA clustering" in found["layout"].summary  # 8 nodes on 4 packages


def test_buggy_numa_tree_reports_the_inconsistency() -> None:
    found = _by_subject(numa.CHECK.run(fixture_host("8em64t-2s2ca2c-buggynuma"), DEFAULT))
    assert found["consistency"].status is Status.WARN
    assert "nodes 1, 2, 3, 4, 5, 6, 7" in found["consistency"].summary


def test_gpu_memory_nodes_reported_as_such() -> None:
    findings = numa.CHECK.run(fixture_host("nvidiagpunumanodes"), DEFAULT)
    gpu_nodes = [f for f in findings if "GPU memory" in f.summary]
    assert [f.subject for f in gpu_nodes] == [f"node{i}" for i in range(250, 256)]
    assert all(f.status is Status.OK for f in gpu_nodes)


def test_offline_cpus_warn_unless_allowed() -> None:
    findings = numa.CHECK.run(fixture_host("16em64t-4s2c2t-offlines"), DEFAULT)
    offline = _by_subject(findings)["offline"]
    assert offline.status is Status.WARN and "2,5,13-14" in offline.summary
    allowed = numa.evaluate(
        numa.collect(fixture_host("16em64t-4s2c2t-offlines")), numa.Params(allow_offline_cpus=True)
    )
    assert _by_subject(allowed)["offline"].status is Status.OK


def test_one_node_across_sockets_warns() -> None:
    f = _facts(numa_nodes=[NumaNode(0, [0, 1, 2, 3], 2048)])
    assert _by_subject(numa.evaluate(f, DEFAULT))["layout"].status is Status.WARN


def test_memoryless_node_warns_and_memory_only_node_is_ok() -> None:
    nodes = [NumaNode(0, [0, 1, 2, 3], 2048), NumaNode(1, [], 512), NumaNode(2, [4], 0)]
    found = _by_subject(numa.evaluate(_facts(numa_nodes=nodes, packages=1), DEFAULT))
    assert found["node1"].status is Status.OK and "memory-only" in found["node1"].summary
    assert found["node2"].status is Status.WARN


def test_sysctls_judged_only_with_several_nodes() -> None:
    f = replace(_facts(), numa_balancing="1", zone_reclaim_mode="1")
    found = _by_subject(numa.evaluate(f, DEFAULT))
    assert found["kernel.numa_balancing"].status is Status.WARN
    assert found["kernel.numa_balancing"].fix == "numa-balancing"
    assert found["vm.zone_reclaim_mode"].status is Status.WARN
    single = replace(f, topology=_topology(numa_nodes=[NumaNode(0, [0, 1, 2, 3], 2048)]))
    assert "kernel.numa_balancing" not in _by_subject(numa.evaluate(single, DEFAULT))


def test_smt_expectation() -> None:
    f = _facts(threads_per_core=2)
    assert _by_subject(numa.evaluate(f, numa.Params(smt="off")))["smt"].status is Status.WARN
    assert _by_subject(numa.evaluate(f, numa.Params(smt="on")))["smt"].status is Status.OK
    assert _by_subject(numa.evaluate(f, DEFAULT))["smt"].status is Status.OK


def test_corrupt_files_are_reported_not_raised(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/sys/devices/system/cpu/online": "0-3",
            "/sys/devices/system/node/node0/cpulist": "0-1",
            "/sys/devices/system/node/node0/meminfo": "Node 0 MemTotal: 1048576 kB\n",
            "/sys/devices/system/node/node0/distance": "10 21",
            "/sys/devices/system/node/node1/cpulist": "zz-top",
            "/sys/devices/system/node/node1/cpumap": "\x00\x00",
            "/sys/devices/system/node/node1/meminfo": "garbage",
            "/sys/devices/system/node/node1/distance": "21 ten",
            "/sys/devices/system/cpu/cpu0/topology/core_id": "\x00",
        },
    )
    found = numa.CHECK.run(host, DEFAULT)
    consistency = [f for f in found if f.subject == "consistency"]
    assert consistency and consistency[0].status is Status.WARN
    assert any("node1/cpulist" in k for k in consistency[0].evidence)


def test_runs_on_this_machine() -> None:
    findings = numa.CHECK.run(LocalHost(), DEFAULT)
    assert _by_subject(findings)["layout"].status in (Status.OK, Status.WARN)


def test_unrecorded_node_memory_is_not_missing_memory(tmp_path: Path) -> None:
    """node0/meminfo was not recorded: its memory is unknown, not absent."""
    host = make_tree(
        tmp_path,
        {
            "/sys/devices/system/cpu/online": "0-1\n",
            "/sys/devices/system/node/node0/cpulist": "0-1\n",
        },
    )
    found = _by_subject(numa.CHECK.run(host, DEFAULT))
    assert "node0" not in found
    assert found["node-memory"].status is Status.SKIPPED
    assert found["node-memory"].evidence == {"/sys/devices/system/node/node0/meminfo": "(absent)"}


def test_a_tree_without_sys_is_skipped_not_judged(tmp_path: Path) -> None:
    findings = numa.CHECK.run(make_tree(tmp_path, {"/proc/meminfo": "MemTotal: 1024 kB\n"}), DEFAULT)
    assert [(f.status, f.subject) for f in findings] == [(Status.SKIPPED, "layout")]


def test_smt_unknown_without_thread_siblings(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/sys/devices/system/cpu/online": "0-3\n",
            "/sys/devices/system/node/node0/cpulist": "0-3\n",
            "/sys/devices/system/node/node0/meminfo": "Node 0 MemTotal:       1048576 kB\n",
        },
    )
    smt = _by_subject(numa.CHECK.run(host, DEFAULT))["smt"]
    assert smt.status is Status.SKIPPED
    assert smt.summary.startswith("SMT state unknown")
