"""numa-pinning: per-rank CPU and memory binding from nvidia-smi recordings, hwloc trees and built trees."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Plan, Scope
from nodeagent.core.parse import cpulist
from nodeagent.facts.ranks import GpuPlace
from nodeagent.host import LocalHost
from nodeagent.tuners import numa_pinning
from nodeagent.tuners.numa_pinning import Params
from tests.support.helpers import fixture_host, make_tree
from tests.support.paths import REPO
from tests.support.rank_nodes import A100, CGROUP2, DGX1, MULTI_SOCKET, hand_facts, smi_host


def plan_of(host: Any, **params: Any) -> Plan:
    return numa_pinning.TUNER.run_plan(host, numa_pinning.TUNER.make_params(params))


def ranks_of(plan: Plan) -> list[dict[str, Any]]:
    assert len(plan.changes) == 1, plan.notes
    change = plan.changes[0]
    assert (
        change.scope is Scope.PROCESS
        and change.profile_key == "ranks"
        and change.target == numa_pinning.TARGET
    )
    assert change.value == plan.details["ranks"]
    return change.value  # type: ignore[no-any-return]


def test_dgx_a100_plan(tmp_path: Path) -> None:
    plan = plan_of(smi_host(tmp_path, A100))
    entries = ranks_of(plan)
    assert len(entries) == 8
    r0, r2 = entries[0], entries[2]
    assert (r0["gpu"], r0["cpus"], r0["numa_node"], r0["nic"], r0["nic_level"]) == (
        "GPU0",
        cpulist("48-63,176-191"),
        3,
        ["mlx5_0", "mlx5_1"],
        "PXB",
    )
    assert (r2["gpu"], r2["cpus"], r2["numa_node"], r2["nic"]) == (
        "GPU2",
        cpulist("16-31,144-159"),
        1,
        ["mlx5_2", "mlx5_3"],
    )
    change = plan.changes[0]
    assert "rank 0 GPU0 CPUs 48-63,176-191 node 3 NIC mlx5_0,mlx5_1 (PXB)" in change.after
    assert change.before.startswith("not pinned") and "docs.nvidia.com" in change.why
    assert any("nodeagent exec --local-rank N" in n and "--membind" in n for n in plan.notes)
    assert any("split_shared_nodes=true" in n for n in plan.notes)


def test_dgx_a100_split_shared_nodes(tmp_path: Path) -> None:
    entries = ranks_of(plan_of(smi_host(tmp_path, A100), split_shared_nodes=True))
    assert [e["cpulist"] for e in entries[:2]] == ["48-55,176-183", "56-63,184-191"]
    assert not set(entries[0]["cpus"]) & set(entries[1]["cpus"])
    assert [e["numa_node"] for e in entries[:2]] == [3, 3]


def test_dgx1_ranks_0_to_3_on_node_0(tmp_path: Path) -> None:
    entries = ranks_of(plan_of(smi_host(tmp_path, DGX1)))
    assert [(e["cpulist"], e["numa_node"]) for e in entries[:4]] == [("0-19,40-59", 0)] * 4
    assert [(e["cpulist"], e["numa_node"]) for e in entries[4:]] == [("20-39,60-79", 1)] * 4
    assert [e["nic"] for e in entries] == [["mlx5_0"]] * 2 + [["mlx5_1"]] * 2 + [["mlx5_2"]] * 2 + [
        ["mlx5_3"]
    ] * 2


def test_more_ranks_than_gpus_plans_nothing(tmp_path: Path) -> None:
    plan = plan_of(smi_host(tmp_path, A100), ranks=12)
    assert plan.changes == [] and "ranks=12 but this node has 8 GPU(s)" in plan.notes[0]
    four = ranks_of(plan_of(smi_host(tmp_path, A100), ranks=4))
    assert [e["gpu"] for e in four] == ["GPU0", "GPU1", "GPU2", "GPU3"]


def test_json_plan_shape_from_the_cli(tmp_path: Path) -> None:
    smi_host(tmp_path, A100)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "tune",
            "--root",
            str(tmp_path),
            "--only",
            "numa-pinning",
            "--format",
            "json",
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (plan,) = doc["plans"]
    assert plan["tuner"] == "numa-pinning" and doc["applied"] is False
    assert all({"local_rank", "gpu", "cpus", "numa_node", "nic"} <= set(r) for r in plan["ranks"])
    by_rank = {r["local_rank"]: r for r in plan["ranks"]}
    assert by_rank[0]["cpus"] == cpulist("48-63,176-191") and by_rank[0]["numa_node"] == 3
    assert by_rank[0]["nic"] == ["mlx5_0", "mlx5_1"]
    assert by_rank[2]["cpus"] == cpulist("16-31,144-159") and by_rank[2]["numa_node"] == 1
    assert by_rank[2]["nic"] == ["mlx5_2", "mlx5_3"]
    assert plan["changes"][0]["scope"] == "process" and plan["changes"][0]["profile_key"] == "ranks"


@pytest.mark.parametrize("name", MULTI_SOCKET)
def test_hwloc_trees_one_rank_per_numa_node(name: str) -> None:
    host = fixture_host(name)
    entries = ranks_of(plan_of(host))
    nodes = numa_pinning.collect(host).topology.numa_nodes
    assert [(e["numa_node"], sorted(e["cpus"])) for e in entries] == [(n.id, n.cpus) for n in nodes]
    assert all(e["gpu"] is None for e in entries)


def test_hwloc_exact_lists() -> None:
    amd = ranks_of(plan_of(fixture_host("16amd64-8n2c")))
    assert [e["cpulist"] for e in amd] == [f"{2 * i}-{2 * i + 1}" for i in range(8)]
    intel = ranks_of(plan_of(fixture_host("40intel64-2g2n4c+pcilocality")))
    assert [e["cpulist"] for e in intel][3] == "3,7,11,15,19,23,27,31,35,39"
    big = ranks_of(plan_of(fixture_host("64amd64-4s2n4ca2co")))
    assert (big[7]["numa_node"], big[7]["cpulist"]) == (7, "56-63")


def test_power9_cpu_only_and_smt_off() -> None:
    host = fixture_host("nvidiagpunumanodes")
    entries = ranks_of(plan_of(host, cpu_only=True))
    assert [(e["numa_node"], e["cpulist"]) for e in entries] == [(0, "0-15")]
    one_thread = ranks_of(plan_of(host, cpu_only=True, smt=False))
    # SMT4 POWER9: one thread per core of node 0, the first thread of each.
    assert one_thread[0]["cpus"] == [0, 4, 8, 12]
    gpu_plan = plan_of(host)
    gpu_entries = ranks_of(gpu_plan)
    assert [e["numa_node"] for e in gpu_entries] == [0, 0, 0, None, None, None]
    assert [e["cpus"] for e in gpu_entries[3:]] == [None] * 3  # node 8 is outside the recorded cpuset
    assert "rank 3 GPU3 not pinned; rank 4" in gpu_plan.changes[0].after


def test_cgroup_cpuset_is_honoured(tmp_path: Path) -> None:
    files = {
        **CGROUP2,
        "/sys/fs/cgroup/job/cpuset.cpus.effective": "2-7\n",
        "/sys/devices/system/cpu/online": "0-7\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node1/cpulist": "4-7\n",
    }
    plan = plan_of(make_tree(tmp_path, files))
    assert [(e["numa_node"], e["cpulist"]) for e in ranks_of(plan)] == [(0, "2-3"), (1, "4-7")]
    assert any("trimmed to 2-3" in n for n in plan.notes)
    assert "may run on CPUs 2-7" in plan.changes[0].before


def test_one_node_one_rank_plans_nothing(tmp_path: Path) -> None:
    files = {"/sys/devices/system/cpu/online": "0-3\n", "/sys/devices/system/node/node0/cpulist": "0-3\n"}
    host = make_tree(tmp_path, files)
    plan = plan_of(host)
    assert plan.changes == [] and "binding changes nothing" in plan.notes[0]
    split = ranks_of(plan_of(host, ranks=2, split_shared_nodes=True))
    assert [e["cpulist"] for e in split] == ["0-1", "2-3"]


def test_no_topology_at_all_says_why(tmp_path: Path) -> None:
    plan = plan_of(make_tree(tmp_path, {}))
    assert plan.changes == [] and plan.notes[0].startswith("nothing planned")


def test_plan_is_pure_on_hand_built_facts() -> None:
    facts = hand_facts(
        {0: "0-7", 1: "8-15"},
        siblings={c: c % 8 for c in range(16)},  # no SMT: each CPU its own core (core ids reused per node)
        gpus=[
            GpuPlace("GPU0", "0000:17:00.0", 0, None, ["mlx5_0"], "PIX"),
            GpuPlace("GPU1", "0000:18:00.0", 0, None, ["mlx5_0"], "PIX"),
            GpuPlace("GPU2", "0000:86:00.0", 1, None, ["mlx5_1"], "PXB"),
        ],
        cpuset="0-15",
    )
    frozen = copy.deepcopy(facts)
    params = Params(split_shared_nodes=True)
    first = numa_pinning.plan(facts, params)
    assert numa_pinning.plan(facts, params) == first and facts == frozen
    entries = ranks_of(first)
    assert [(e["gpu"], e["cpulist"], e["numa_node"]) for e in entries] == [
        ("GPU0", "0-3", 0),
        ("GPU1", "4-7", 0),
        ("GPU2", "8-15", 1),
    ]
    # Odd facts never raise: no CPUs at all, negative ranks.
    empty = hand_facts({0: "0"}, cpuset="0")
    assert numa_pinning.plan(empty, Params(ranks=-1)).changes == []


def test_this_machine() -> None:
    host = LocalHost()
    plan = plan_of(host)
    allowed = numa_pinning.collect(host).allowed or []
    nodes = [n for n in numa_pinning.collect(host).topology.numa_nodes if n.cpus]
    if len(nodes) == 1:
        assert plan.changes == [] and "binding changes nothing" in plan.notes[0]
    else:
        assert len(ranks_of(plan)) == len(nodes)
    if len(allowed) >= 2:
        split = ranks_of(plan_of(host, ranks=2, split_shared_nodes=True))
        assert len(split) == 2 and not set(split[0]["cpus"]) & set(split[1]["cpus"])
        assert set(split[0]["cpus"]) | set(split[1]["cpus"]) <= set(allowed)
