"""Topology facts agree with hwloc's expectation on every recorded tree in tests/fixtures/hwloc."""

from __future__ import annotations

import pytest

from nodeagent.facts import topology
from tests.support.helpers import FIXTURE_TREES, SYSFS_FIXTURES, fixture_host
from tests.support.hwloc_expect import expected_for


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_topology_matches_hwloc(name: str) -> None:
    host = fixture_host(name)
    want = expected_for(SYSFS_FIXTURES, name)
    got = topology.collect(host)

    assert [n.id for n in got.numa_nodes] == sorted(want.numa_memory_mib), "NUMA node ids"
    for node in got.numa_nodes:
        assert node.memory_mib is not None
        assert node.memory_mib == pytest.approx(want.numa_memory_mib[node.id], rel=0.01), f"node {node.id}"
    assert len(got.cpus_online) == want.pus, "online CPUs"
    if want.cores is not None:
        assert got.cores == want.cores, "cores"
    if want.packages is not None:
        assert got.packages == want.packages, "packages"


def test_buggy_numa_is_merged_and_reported() -> None:
    got = topology.collect(fixture_host("8em64t-2s2ca2c-buggynuma"))
    assert [n.id for n in got.numa_nodes] == [0]
    assert sorted(got.ignored_numa_nodes) == [1, 2, 3, 4, 5, 6, 7]
    assert any("overlapping" in p for p in got.problems)


def test_gpu_memory_nodes_are_not_cpu_nodes() -> None:
    got = topology.collect(fixture_host("nvidiagpunumanodes"))
    assert [n.id for n in got.numa_nodes] == [0, 8]
    assert [g.id for g in got.gpu_memory_nodes] == [250, 251, 252, 253, 254, 255]
    by_id = {g.id: g for g in got.gpu_memory_nodes}
    assert by_id[255].gpu == "0004:05:00.0"
    assert by_id[250].memory_mib == 15360


def test_offline_cpus_and_sparse_nodes() -> None:
    got = topology.collect(fixture_host("offline-cpu0-node0"))
    assert got.cpus_online == list(range(4, 21))
    assert [n.id for n in got.numa_nodes] == [1]
    # node1's distance file lists two values although only node 1 is online: mapped to nodes 0-1.
    assert got.numa_nodes[0].distances == {0: 21, 1: 10}


def test_no_cpu_online_file_uses_per_cpu_online() -> None:
    got = topology.collect(fixture_host("16em64t-4s2c2t-offlines"))
    assert len(got.cpus_online) == 12
    assert got.cpus_offline == [2, 5, 13, 14]


def test_no_numa_folders_means_one_node_with_all_memory() -> None:
    got = topology.collect(fixture_host("2arm-2c"))
    assert [(n.id, n.cpus) for n in got.numa_nodes] == [(0, [0, 1])]
    assert got.numa_nodes[0].memory_mib == got.memory_total_mib
