"""nodeagent.facts.ranks: the local-rank layout (GPU, NUMA node, CPUs, NICs) of recorded and built nodes."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.core import document
from nodeagent.core.parse import cpulist, format_cpulist
from nodeagent.facts import ranks
from nodeagent.facts.ranks import SOURCE_NUMA, SOURCE_SMI, SOURCE_SYSFS, GpuPlace, RankLayout
from nodeagent.host import SnapshotHost
from tests.support.fuzzing import GARBAGE, FuzzHost
from tests.support.helpers import FIXTURE_TREES, GPU, NIC, fixture_host, make_tree, pci_tree
from tests.support.rank_nodes import A100, CGROUP2, DGX1, MULTI_SOCKET, SMI_CMD, hand_facts, smi_host


def cpus_of(lay: RankLayout) -> list[str]:
    return [s.cpulist for s in lay.slots]


# -- nvidia-smi topo -m recordings -----------------------------------------------------------------


def test_dgx_a100_from_nvidia_smi(tmp_path: Path) -> None:
    lay = ranks.layout(smi_host(tmp_path, A100))
    assert lay.source == SOURCE_SMI and lay.error is None
    assert [s.gpu for s in lay.slots] == [f"GPU{i}" for i in range(8)]
    r0, r2 = lay.slots[0], lay.slots[2]
    # Expected: each rank on its GPU's full NUMA-local affinity.
    assert (r0.cpulist, r0.numa_node, r0.mems, r0.nic, r0.nic_level) == (
        "48-63,176-191",
        3,
        [3],
        ["mlx5_0", "mlx5_1"],
        "PXB",
    )
    assert (r2.cpulist, r2.numa_node, r2.nic, r2.nic_level) == (
        "16-31,144-159",
        1,
        ["mlx5_2", "mlx5_3"],
        "PXB",
    )
    assert [s.numa_node for s in lay.slots] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert cpus_of(lay)[4:] == ["112-127,240-255"] * 2 + ["80-95,208-223"] * 2
    assert r0.shares_with == [1] and lay.slots[1].shares_with == [0]
    # Without sysfs nothing says which CPUs are SMT siblings: no core count is invented.
    assert r0.physical_cores is None
    assert any("SMT siblings is unknown" in n for n in lay.notes)
    assert any("ranks 0, 1 share NUMA node 3's CPUs 48-63,176-191" in n for n in lay.notes)


def test_dgx_a100_split_keeps_each_core_with_one_rank(tmp_path: Path) -> None:
    lay = ranks.layout(smi_host(tmp_path, A100), split_shared_nodes=True)
    # Linux numbers 176-191 as the second threads of 48-63: run-by-run halves keep siblings together.
    assert cpus_of(lay)[:4] == ["48-55,176-183", "56-63,184-191", "16-23,144-151", "24-31,152-159"]
    assert all(s.shares_with == [] for s in lay.slots)
    assert set(lay.slots[0].cpus) | set(lay.slots[1].cpus) == set(cpulist("48-63,176-191"))


def test_dgx1_two_nodes_four_gpus_each(tmp_path: Path) -> None:
    lay = ranks.layout(smi_host(tmp_path, DGX1))
    assert cpus_of(lay) == ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4
    assert [s.numa_node for s in lay.slots] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [s.nic for s in lay.slots[:4]] == [["mlx5_0"], ["mlx5_0"], ["mlx5_1"], ["mlx5_1"]]
    assert {s.nic_level for s in lay.slots} == {"PIX"}
    assert lay.slots[0].shares_with == [1, 2, 3]
    split = ranks.layout(smi_host(tmp_path, DGX1), split_shared_nodes=True)
    assert cpus_of(split)[:4] == ["0-4,40-44", "5-9,45-49", "10-14,50-54", "15-19,55-59"]


def test_rank_count_against_gpus(tmp_path: Path) -> None:
    host = smi_host(tmp_path, A100)
    two = ranks.layout(host, 2)
    assert [s.gpu for s in two.slots] == ["GPU0", "GPU1"] and two.error is None
    too_many = ranks.layout(host, 9)
    assert too_many.error is not None and "ranks=9 but this node has 8 GPU(s)" in too_many.error
    assert ranks.layout(host, -1).error is not None
    # Memoized per run and per request.
    assert ranks.layout(host, 2) is two and ranks.layout(host) is not two


def test_cpu_only_on_a_gpu_node_ignores_the_gpus(tmp_path: Path) -> None:
    # A commands-only snapshot has no NUMA node with CPUs: nothing to place, said so.
    lay = ranks.layout(smi_host(tmp_path, A100), cpu_only=True)
    assert lay.slots == [] and lay.source == SOURCE_NUMA
    assert any("no NUMA node with CPUs" in n for n in lay.notes)


# -- hwloc trees: one rank per NUMA node on CPU-only machines ---------------------------------------


@pytest.mark.parametrize("name", MULTI_SOCKET)
def test_cpu_only_tree_gives_one_rank_per_numa_node(name: str) -> None:
    host = fixture_host(name)
    lay = ranks.layout(host)
    topo = ranks.collect(host).topology
    assert lay.source == SOURCE_NUMA and lay.error is None
    assert [s.numa_node for s in lay.slots] == [n.id for n in topo.numa_nodes]
    assert [sorted(s.cpus) for s in lay.slots] == [n.cpus for n in topo.numa_nodes]
    assert all(s.gpu is None and s.shares_with == [] for s in lay.slots)


def test_cpu_only_exact_cpu_lists() -> None:
    assert cpus_of(ranks.layout(fixture_host("16amd64-8n2c"))) == [f"{2 * i}-{2 * i + 1}" for i in range(8)]
    intel = ranks.layout(fixture_host("40intel64-2g2n4c+pcilocality"))
    assert intel.slots[1].cpulist == "1,5,9,13,17,21,25,29,33,37" and intel.slots[1].physical_cores == 10
    amd = ranks.layout(fixture_host("64amd64-4s2n4ca2co"))
    assert [s.cpulist for s in amd.slots][5] == "40-47" and amd.slots[5].numa_node == 5
    em64t = ranks.layout(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert cpus_of(em64t) == ["0-7", "8-15"]


def test_fewer_and_more_cpu_ranks_than_nodes() -> None:
    host = fixture_host("64amd64-4s2n4ca2co")
    three = ranks.layout(host, 3)
    # 8 nodes over 3 ranks: 3, 3 and 2 neighbouring nodes; no single node to bind memory to.
    assert [s.mems for s in three.slots] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [s.numa_node for s in three.slots] == [None, None, None]
    assert three.slots[2].cpulist == "48-63"
    ten = ranks.layout(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), 3)
    assert [s.numa_node for s in ten.slots] == [0, 0, 1]
    assert ten.slots[0].shares_with == [1]  # sharing node 0's CPUs unless split
    split = ranks.layout(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), 3, split_shared_nodes=True)
    assert cpus_of(split) == ["0-3", "4-7", "8-15"]


def test_power9_gpu_memory_nodes_and_gpus_without_numa() -> None:
    host = fixture_host("nvidiagpunumanodes")
    lay = ranks.layout(host)
    assert lay.source == SOURCE_SYSFS
    # numa_node is absent for these GPUs: the node is inferred from their local_cpus masks (GPU3-5:
    # node 8, which the recorder's cpuset excludes, so those ranks bind neither CPUs nor memory).
    assert [s.numa_node for s in lay.slots] == [0, 0, 0, None, None, None]
    assert [s.gpu_pci for s in lay.slots[:3]] == ["0004:05:00.0", "0004:06:00.0", "0006:00:00.0"]
    assert any(
        "GPU3: NUMA node not reported (numa_node -1 or absent); node 8 taken from its local CPUs 88-103" in n
        for n in lay.notes
    )
    # The recorder ran in cgroup cpuset /jjh = 0-87: node 8's CPUs are not ours, ranks 3-5 stay unpinned.
    assert cpus_of(lay) == ["0-15"] * 3 + [""] * 3
    assert any(
        "rank 3 (GPU3): none of NUMA node 8's CPUs 88-103 is allowed" in n and "jjh" in n for n in lay.notes
    )
    # GPU memory nodes (250-255) never carry a rank.
    assert all((s.numa_node or 0) < 250 for s in lay.slots)
    assert any("250-255 hold GPU memory" in n for n in lay.notes)


def test_power9_cpu_only_smt4_physical_cores_first() -> None:
    host = fixture_host("nvidiagpunumanodes")
    lay = ranks.layout(host, cpu_only=True)
    assert [s.numa_node for s in lay.slots] == [0]
    r0 = lay.slots[0]
    assert r0.cpus[:4] == [0, 4, 8, 12] and r0.physical_cores == 4 and r0.cpulist == "0-15"
    assert any("NUMA node 8: none of its CPUs 88-103 is allowed" in n for n in lay.notes)
    # Without the recorder's cpuset both CPU nodes carry a rank; the GPU memory nodes still do not.
    facts = ranks.collect(host)
    free = dataclasses.replace(facts, cpus=dataclasses.replace(facts.cpus, cpuset=None, cpuset_source=None))
    both = ranks.build(free, cpu_only=True)
    assert [(s.numa_node, s.cpulist) for s in both.slots] == [(0, "0-15"), (8, "88-103")]


# -- hand-built sysfs trees --------------------------------------------------------------------------

ROOT0 = "pci0000:00/0000:00:01.0/0000:01:00.0"  # a switch under node 0's root port
ROOT1 = "pci0000:80/0000:80:01.0/0000:81:00.0"


def _two_socket(tmp_path: Path, gpu1: dict[str, str], commands: dict[str, str] | None = None) -> SnapshotHost:
    return pci_tree(
        tmp_path,
        {
            f"{ROOT0}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "0", "local_cpulist": "0-3"},
            f"{ROOT0}/0000:02:01.0/0000:04:00.0": {**NIC, "numa_node": "0"},
            f"{ROOT1}/0000:82:00.0/0000:83:00.0": {**GPU, **gpu1},
        },
        rdma={"mlx5_0": "0000:04:00.0"},
        nodes={0: "0-3", 1: "4-7"},
        commands=commands,
    )


def test_sysfs_gpus_nics_and_numa_inferred_from_local_cpulist(tmp_path: Path) -> None:
    host = _two_socket(tmp_path, {"numa_node": "-1", "local_cpulist": "4-7"})
    lay = ranks.layout(host)
    assert lay.source == SOURCE_SYSFS
    r0, r1 = lay.slots
    assert (r0.gpu, r0.gpu_pci, r0.numa_node, r0.cpulist, r0.nic, r0.nic_level) == (
        "GPU0",
        "0000:03:00.0",
        0,
        "0-3",
        ["mlx5_0"],
        "PIX",
    )
    # -1 with local_cpulist 4-7: node 1; the only NIC is across the socket link: none is "nearest".
    assert (r1.numa_node, r1.cpulist, r1.nic) == (1, "4-7", [])
    assert any("GPU1: NUMA node not reported" in n and "node 1" in n for n in lay.notes)
    assert any("rank 1 (GPU1): no RDMA" in n for n in lay.notes)


def test_gpu_with_no_locality_is_unpinned_unless_nvidia_smi_says(tmp_path: Path) -> None:
    lay = ranks.layout(_two_socket(tmp_path / "a", {"numa_node": "-1"}))
    assert lay.slots[1].cpus == [] and lay.slots[1].numa_node is None
    assert document.dump(lay.slots[1])["cpus"] is None  # the launcher binds nothing rather than []
    assert any("GPU1: NUMA node unknown" in n for n in lay.notes)
    # The driver's NUMA Affinity fills what the firmware left out.
    smi = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tSYS\tPIX\t0-3\t0\n"
        "GPU1\tSYS\t X \tSYS\t4-7\t1\n"
        "mlx5_0\tPIX\tSYS\t X \n"
    )
    filled = ranks.layout(_two_socket(tmp_path / "b", {"numa_node": "-1"}, {SMI_CMD: smi}))
    assert (filled.slots[1].numa_node, filled.slots[1].cpulist) == (1, "4-7")
    assert filled.source == f"{SOURCE_SYSFS} + {SOURCE_SMI}"


def test_empty_cpu_affinity_in_nvidia_smi_leaves_the_rank_unbound(tmp_path: Path) -> None:
    """nvidia-smi prints a GPU's local CPUs as far as the caller may use them: an empty CPU Affinity
    beside NUMA Affinity 1 says the job has none of node 1's CPUs (a Slurm job given socket 0), as
    a cgroup cpuset without them would, so the rank binds neither CPUs nor memory there, even where
    sysfs knows node 1's CPUs."""
    smi = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-3\t0\nGPU1\tSYS\t X \t\t1\n"
    nodes = {
        "/sys/devices/system/cpu/online": "0-7\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node1/cpulist": "4-7\n",
    }
    for files in ({}, nodes):
        root = tmp_path / str(len(files))
        root.mkdir()
        lay = ranks.layout(make_tree(root, files, commands={SMI_CMD: smi}))
        assert [(s.gpu, s.numa_node, s.cpulist, s.mems) for s in lay.slots] == [
            ("GPU0", 0, "0-3", [0]),
            ("GPU1", None, "", []),
        ]
        assert any("rank 1 (GPU1): `nvidia-smi topo -m` prints no CPU Affinity" in n for n in lay.notes)


def test_cgroup_cpuset_trims_and_empties_nodes(tmp_path: Path) -> None:
    files = {
        **CGROUP2,
        "/sys/fs/cgroup/job/cpuset.cpus.effective": "1-3,5\n",
        "/sys/devices/system/cpu/online": "0-11\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node1/cpulist": "4-7\n",
        "/sys/devices/system/node/node2/cpulist": "8-11\n",
    }
    lay = ranks.layout(make_tree(tmp_path, files))
    assert [(s.numa_node, s.cpulist) for s in lay.slots] == [(0, "1-3"), (1, "5")]
    assert any(
        "rank 0: NUMA node 0's CPUs 0-3 trimmed to 1-3" in n and "cpuset.cpus.effective" in n
        for n in lay.notes
    )
    assert any("NUMA node 2: none of its CPUs 8-11 is allowed" in n for n in lay.notes)


def test_split_by_whole_cores_with_smt_siblings(tmp_path: Path) -> None:
    files = {"/sys/devices/system/cpu/online": "0-7\n", "/sys/devices/system/node/node0/cpulist": "0-7\n"}
    for c in range(8):
        t = f"/sys/devices/system/cpu/cpu{c}/topology"
        files[f"{t}/core_id"] = f"{c % 4}\n"
        files[f"{t}/physical_package_id"] = "0\n"
        files[f"{t}/thread_siblings_list"] = f"{c % 4},{c % 4 + 4}\n"
    host = make_tree(tmp_path, files)
    shared = ranks.layout(host, 2)
    assert [s.cpus for s in shared.slots] == [[0, 1, 2, 3, 4, 5, 6, 7]] * 2
    assert [s.physical_cores for s in shared.slots] == [4, 4]
    split = ranks.layout(host, 2, split_shared_nodes=True)
    # Whole cores: 0 with its sibling 4, 1 with 5; physical cores listed first.
    assert [s.cpus for s in split.slots] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert [s.physical_cores for s in split.slots] == [2, 2]
    three = ranks.layout(host, 3, split_shared_nodes=True)
    assert [s.cpulist for s in three.slots] == ["0-1,4-5", "2,6", "3,7"]
    five = ranks.layout(host, 5, split_shared_nodes=True)
    assert all(s.cpulist == "0-7" for s in five.slots)  # 4 cores cannot go to 5 ranks: shared, said so
    assert any("4 physical core(s) in 0-7 cannot be split between 5 ranks" in n for n in five.notes)


# -- purity ------------------------------------------------------------------------------------------


def test_build_is_pure_and_deterministic() -> None:
    facts = hand_facts(
        {0: "0-7", 1: "8-15"},
        gpus=[GpuPlace("GPU0", None, 0, None, ["mlx5_0"], "PXB"), GpuPlace("GPU1", None, 0, None, [], None)],
        cpuset="0-5,8-15",
    )
    frozen = copy.deepcopy(facts)
    first = ranks.build(facts, split_shared_nodes=True)
    assert ranks.build(facts, split_shared_nodes=True) == first and facts == frozen
    assert [s.cpulist for s in first.slots] == ["0-2", "3-5"]
    assert first.slots[0].nic == ["mlx5_0"] and first.slots[1].nic == []


def test_layout_dict_shape() -> None:
    lay = ranks.build(
        hand_facts({0: "0-3"}, gpus=[GpuPlace("GPU0", "0000:03:00.0", 0, [0, 1, 2, 3], ["mlx5_0"], "PIX")])
    )
    d = document.dump(lay.slots[0])
    assert {"local_rank", "gpu", "cpus", "numa_node", "nic"} <= set(d)
    assert (
        d["cpus"] == [0, 1, 2, 3]
        and d["cpulist"] == format_cpulist(range(4))
        and d["gpu_pci"] == "0000:03:00.0"
    )


# -- never raising on odd machines ---------------------------------------------------------------------

FUZZ_BASES = ["nvidiagpunumanodes", "40intel64-2g2n4c+pcilocality", "32em64t-2n8c+dax+nvme+mic+dimms"]


def _plan_all(host: Any) -> None:
    from nodeagent.api.tune import Tuner
    from nodeagent.tuners import numa_pinning, pinned_memory, tf_threads

    tuners: tuple[Tuner[Any, Any], ...] = (numa_pinning.TUNER, tf_threads.TUNER, pinned_memory.TUNER)
    for tuner in tuners:
        host.refresh()
        for params in ({}, {"split_shared_nodes": True} if tuner is numa_pinning.TUNER else {"ranks": 2}):
            plan = tuner.run_plan(host, tuner.make_params(params))
            assert plan.changes or plan.notes, f"{tuner.id}: neither a change nor a reason"


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_fixture_tree_plans_or_says_why(name: str) -> None:
    _plan_all(fixture_host(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", FUZZ_BASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_trees_never_raise(name: str, data: Any) -> None:
    base = fixture_host(name)
    paths = sorted(
        {
            real
            for pattern in ranks.PATHS
            for p in base.glob(pattern)
            if (real := base.realpath(p)) and not base.is_dir(real)
        }
    )
    changes = data.draw(
        st.dictionaries(
            st.sampled_from(paths),
            st.one_of(st.none(), st.sampled_from(GARBAGE), st.binary(max_size=32)),
            min_size=1,
            max_size=12,
        )
    )
    _plan_all(FuzzHost(base, changes))
