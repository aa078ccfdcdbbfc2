from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.api.check import Check
from nodeagent.checks import pcie, topology
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.pci_topology import Endpoint, PciTopology
from nodeagent.facts.topo_matrix import parse_topo
from nodeagent.host import LocalHost, SnapshotHost
from tests.support.fuzzing import FuzzHost, files_matching
from tests.support.helpers import (
    FIXTURE_TREES,
    GPU,
    NIC,
    SYSFS_FIXTURES,
    fixture_host,
    make_tree,
    nvidia_smi_text,
    pci_tree,
)

DEFAULT = topology.Params()
A100_TEXT = "topo-m-dgx-a100.txt"
SMI_CMD = "nvidia-smi-topo-m"


def _by_subject(findings: list[Finding]) -> dict[str, Finding]:
    return {f.subject: f for f in findings}


def _run(host: SnapshotHost, params: topology.Params = DEFAULT) -> dict[str, Finding]:
    return _by_subject(topology.CHECK.run(host, params))


# -- one GPU and one NIC, in each relation of the nvidia-smi legend ----------------------------
ROOT = "pci0000:00/0000:00:01.0"
SWITCH = f"{ROOT}/0000:01:00.0"


@pytest.mark.parametrize(
    ("gpu_path", "nic_path", "nic_numa", "expected"),
    [
        (f"{SWITCH}/0000:02:00.0/0000:03:00.0", f"{SWITCH}/0000:02:01.0/0000:04:00.0", "0", "PIX"),
        (
            f"{SWITCH}/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
            f"{SWITCH}/0000:02:01.0/0000:06:00.0/0000:07:00.0/0000:08:00.0",
            "0",
            "PXB",
        ),
        (f"{ROOT}/0000:03:00.0", "pci0000:00/0000:00:02.0/0000:04:00.0", "0", "PHB"),
        (f"{ROOT}/0000:03:00.0", "pci0000:40/0000:40:01.0/0000:41:00.0", "0", "NODE"),
        (f"{ROOT}/0000:03:00.0", "pci0000:80/0000:80:01.0/0000:81:00.0", "1", "SYS"),
    ],
)
def test_hand_built_trees_give_each_level(
    tmp_path: Path, gpu_path: str, nic_path: str, nic_numa: str, expected: str
) -> None:
    host = pci_tree(
        tmp_path,
        {gpu_path: {**GPU, "numa_node": "0"}, nic_path: {**NIC, "numa_node": nic_numa}},
        rdma={"mlx5_0": nic_path.rsplit("/", 1)[-1]},
        nodes={0: "0-3", 1: "4-7"},
    )
    found = _run(host)
    gpu_address = gpu_path.rsplit("/", 1)[-1]
    assert (
        found["matrix"].evidence[f"/sys/bus/pci/devices/{gpu_address} (GPU0)"] == f"NUMA 0; mlx5_0 {expected}"
    )
    if expected == "SYS":
        warn = found["GPU0"]
        assert warn.status is Status.WARN
        assert warn.summary == "GPU0 has no NIC closer than SYS (nearest: mlx5_0)"
        assert warn.evidence == {"GPU0-mlx5_0": "SYS"}
        assert "gpu-nic" not in found
    else:
        ok = found["gpu-nic"]
        assert ok.status is Status.OK and ok.evidence == {"GPU0-mlx5_0": expected}
        assert f"GPU0 mlx5_0 {expected}" in ok.summary


# -- a DGX A100 rebuilt in sysfs, against the published nvidia-smi topo -m of one ----------------
# (address, host bridge, NUMA node) per device, GPUs and NICs in pairs behind a two-level switch.
A100_GPUS = [
    ("0000:07:00.0", "00", 3),
    ("0000:0f:00.0", "00", 3),
    ("0000:47:00.0", "40", 1),
    ("0000:4e:00.0", "40", 1),
    ("0000:87:00.0", "80", 7),
    ("0000:90:00.0", "80", 7),
    ("0000:b7:00.0", "a0", 5),
    ("0000:bd:00.0", "a0", 5),
]
A100_NICS = [
    ("mlx5_0", "0000:0c:00.0", "00", 3),
    ("mlx5_1", "0000:12:00.0", "00", 3),
    ("mlx5_2", "0000:4b:00.0", "40", 1),
    ("mlx5_3", "0000:54:00.0", "40", 1),
    ("mlx5_6", "0000:8d:00.0", "80", 7),
    ("mlx5_7", "0000:94:00.0", "80", 7),
    ("mlx5_8", "0000:ba:00.0", "a0", 5),
    ("mlx5_9", "0000:cc:00.0", "a0", 5),
]
# The storage NICs: two dual-port cards on root ports of their own, on nodes without GPUs.
A100_STORAGE = [
    ("mlx5_4", "0000:61:00.0", "60", 2),
    ("mlx5_5", "0000:61:00.1", "60", 2),
    ("mlx5_10", "0000:e1:00.0", "e0", 6),
    ("mlx5_11", "0000:e1:00.1", "e0", 6),
]


def _behind_switch(address: str, hb: str, port: int) -> str:
    """root port hb:01.1 -> top switch (hb+1:00.0, downstream hb+2:port.0) -> second-level switch."""
    bus, hbbus = int(address[5:7], 16), int(hb, 16)
    top = f"pci0000:{hb}/0000:{hb}:01.1/0000:{hbbus + 1:02x}:00.0/0000:{hbbus + 2:02x}:{port:02x}.0"
    return f"{top}/0000:{bus - 2:02x}:00.0/0000:{bus - 1:02x}:00.0/{address}"


def a100_tree(
    root: Path, *, move: Mapping[str, str] | None = None, drop: tuple[str, ...] = ()
) -> SnapshotHost:
    devices: dict[str, Mapping[str, str]] = {}
    rdma: dict[str, str] = {}
    for i, (address, hb, numa) in enumerate(A100_GPUS):
        if address not in drop:
            devices[_behind_switch(address, hb, i % 2)] = {**GPU, "numa_node": str(numa)}
    for i, (name, address, hb, numa) in enumerate(A100_NICS):
        path = (move or {}).get(name) or _behind_switch(address, hb, 2 + i % 2)
        devices[path] = {**NIC, "numa_node": str(numa)}
        rdma[name] = address
    for name, address, hb, numa in A100_STORAGE:
        devices[f"pci0000:{hb}/0000:{hb}:03.1/{address}"] = {**NIC, "numa_node": str(numa)}
        rdma[name] = address
    return pci_tree(
        root,
        devices,
        rdma=rdma,
        nodes={n: f"{16 * n}-{16 * n + 15}" for n in range(8)},
        commands={SMI_CMD: nvidia_smi_text(A100_TEXT)},
    )


def test_sysfs_reproduces_the_published_dgx_a100_matrix(tmp_path: Path) -> None:
    found = _run(a100_tree(tmp_path))
    cross = found["cross-check"]
    # Every GPU x NIC cell (GPU x GPU cells are NV12: NVLink, not comparable): 8 x 12.
    assert cross.status is Status.OK
    assert "on 96 PCIe cell(s)" in cross.summary
    matrix = found["matrix"]
    assert matrix.summary.startswith(
        "8 GPU(s) on NUMA node(s) 1,3,5,7, 12 RDMA/high-speed NIC(s); matrix from sysfs"
    )
    row = matrix.evidence["/sys/bus/pci/devices/0000:07:00.0 (GPU0)"]
    assert row.startswith("NUMA 3; mlx5_0 PXB, mlx5_1 PXB, mlx5_2 SYS")
    ok = found["gpu-nic"]
    assert ok.status is Status.OK
    assert "GPU0 mlx5_0+mlx5_1 PXB" in ok.summary and "GPU7 mlx5_8+mlx5_9 PXB" in ok.summary
    assert "numa" not in found and "tree" not in found


def test_disagreement_with_nvidia_smi_shows_both_values(tmp_path: Path) -> None:
    # mlx5_1 moved to a root port of its own on GPU0's host bridge: PHB in sysfs, PXB recorded.
    host = a100_tree(tmp_path, move={"mlx5_1": "pci0000:00/0000:00:03.1/0000:12:00.0"})
    cross = _run(host)["cross-check"]
    assert cross.status is Status.WARN
    assert cross.summary == "sysfs topology and nvidia-smi topo -m disagree: 2 of 96 cell(s) differ"
    assert cross.evidence["nvidia-smi topo -m: GPU0-mlx5_1"] == "PXB"
    assert cross.evidence["sysfs: GPU0-mlx5_1"] == "PHB"
    assert cross.evidence["sysfs: GPU1-mlx5_1"] == "PHB"


def test_gpu_missing_from_sysfs_is_named(tmp_path: Path) -> None:
    cross = _run(a100_tree(tmp_path, drop=("0000:bd:00.0",)))["cross-check"]
    assert cross.status is Status.WARN
    assert "GPU7 not found in sysfs" in cross.summary
    assert cross.evidence["GPUs in nvidia-smi, not in sysfs"] == "GPU7"


# -- a snapshot holding only the driver's view ---------------------------------------------------
def test_recorded_nvidia_smi_alone(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {}, commands={SMI_CMD: nvidia_smi_text(A100_TEXT)})
    found = _run(host)
    matrix = found["matrix"]
    assert matrix.status is Status.OK
    assert (
        matrix.summary
        == "8 GPU(s) on NUMA node(s) 1,3,5,7, 12 RDMA/high-speed NIC(s); matrix from nvidia-smi topo -m"
    )
    assert matrix.evidence["nvidia-smi topo -m: GPU2"].startswith(
        "NUMA 1; mlx5_0 SYS, mlx5_1 SYS, mlx5_2 PXB"
    )
    ok = found["gpu-nic"]
    assert ok.status is Status.OK and "GPU0 mlx5_0+mlx5_1 PXB" in ok.summary
    assert ok.evidence["GPU4-mlx5_6"] == "PXB"
    assert set(found) == {"matrix", "gpu-nic"}  # nothing to cross-check, NUMA known for all


def test_recorded_dgx1_pcie_paths(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {}, commands={SMI_CMD: nvidia_smi_text("topo-m-dgx1-pcie.txt")})
    ok = _run(host)["gpu-nic"]
    assert "GPU0 mlx5_0 PIX" in ok.summary and "GPU6 mlx5_3 PIX" in ok.summary


def test_unparsable_recording_is_unknown(tmp_path: Path) -> None:
    text = nvidia_smi_text(A100_TEXT).replace("PXB", "???", 1)
    host = pci_tree(
        tmp_path,
        {f"{SWITCH}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "0"}},
        commands={SMI_CMD: text},
    )
    cross = _run(host)["cross-check"]
    assert cross.status is Status.UNKNOWN
    assert cross.evidence["nvidia-smi topo -m"].startswith(
        "unparsable `nvidia-smi topo -m` output: malformed row for GPU0"
    )


# -- NUMA, NICs, placement -----------------------------------------------------------------------
def test_unknown_numa_on_two_node_machine(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path,
        {f"{ROOT}/0000:03:00.0": {**GPU, "numa_node": "-1"}},
        nodes={0: "0-3", 1: "4-7"},
    )
    found = _run(host)
    numa = found["numa"]
    assert numa.status is Status.WARN
    assert numa.summary.startswith("NUMA node unknown for GPU0 on a 2-node machine")
    assert numa.evidence == {"/sys/bus/pci/devices/0000:03:00.0/numa_node": "-1"}
    assert "echo NODE > /sys/bus/pci/devices/0000:03:00.0/numa_node" in numa.remediation
    assert found["gpu-nic"].status is Status.SKIPPED  # no NIC at all


def test_unknown_numa_on_one_node_machine_is_normal(tmp_path: Path) -> None:
    host = pci_tree(tmp_path, {f"{ROOT}/0000:03:00.0": {**GPU, "numa_node": "-1"}}, nodes={0: "0-3"})
    assert "numa" not in _run(host)


def test_slow_ethernet_is_not_a_data_nic(tmp_path: Path) -> None:
    eth = {"class": "0x020000", "vendor": "0x8086", "device": "0x1521", "numa_node": "1"}
    devices = {
        f"{ROOT}/0000:03:00.0": {**GPU, "numa_node": "0"},
        "pci0000:80/0000:80:01.0/0000:81:00.0": eth,
        "pci0000:80/0000:80:02.0/0000:82:00.0": eth,
    }
    netdevs = {"eno1": ("0000:81:00.0", 1000), "ens2": ("0000:82:00.0", 100000)}
    found = _run(pci_tree(tmp_path, devices, netdevs=netdevs, nodes={0: "0-3", 1: "4-7"}))
    # Only the 100 GbE port counts, and it is on the other socket.
    assert found["GPU0"].summary == "GPU0 has no NIC closer than SYS (nearest: ens2)"
    slow = _run(pci_tree(tmp_path / "b", devices, netdevs={"eno1": ("0000:81:00.0", 1000)}, nodes={0: "0-3"}))
    assert slow["gpu-nic"].status is Status.SKIPPED
    assert slow["gpu-nic"].evidence["/sys/class/net"] == "only slower or down ports: eno1"


def test_no_gpus_is_skipped_with_the_reason(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path, {f"{ROOT}/0000:04:00.0": {**NIC, "numa_node": "0"}}, rdma={"mlx5_0": "0000:04:00.0"}
    )
    findings = topology.CHECK.run(host, DEFAULT)
    assert [f.status for f in findings] == [Status.SKIPPED]
    assert findings[0].evidence == {
        "/sys/bus/pci/devices": "2 device(s), none a GPU",
        "nvidia-smi topo -m": f"nvidia-smi: not recorded in snapshot {tmp_path.name}",
    }


def test_gpu_outside_the_pci_tree(tmp_path: Path) -> None:
    # hwloc-style recording: folders in /sys/bus/pci/devices instead of links into /sys/devices.
    files = {f"/sys/bus/pci/devices/0000:03:00.0/{k}": v for k, v in GPU.items()}
    files |= {
        "/sys/bus/pci/devices/0000:04:00.0/class": "0x020700",
        "/sys/bus/pci/devices/0000:04:00.0/numa_node": "0",
        "/sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE",
    }
    host = make_tree(
        tmp_path,
        files,
        links={"/sys/class/infiniband/mlx5_0/device": "/sys/bus/pci/devices/0000:04:00.0"},
    )
    found = _run(host)
    assert found["tree"].status is Status.WARN
    assert found["tree"].summary.startswith("GPU0 not placed in the PCI tree")
    assert found["GPU0"].summary.startswith("GPU0: distance to the NICs unknown")


def test_corrupt_files_do_not_raise(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path,
        {f"{SWITCH}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "\x00\x00"}},
        files={"/sys/devices/system/node/node0/cpulist": "zz", "/sys/devices/system/cpu/online": "\x00"},
        commands={SMI_CMD: "\x00\xff garbage"},
    )
    findings = topology.CHECK.run(host, DEFAULT)
    # Only what could not be read is UNKNOWN, and it says why.
    unknown = [f for f in findings if f.status is Status.UNKNOWN]
    assert findings and [f.subject for f in unknown] == ["cross-check"]
    assert "unparsable" in unknown[0].evidence["nvidia-smi topo -m"]


# -- evaluate on hand-built facts ----------------------------------------------------------------
def _facts(level: str, *, smi_text: str | None = None) -> topology.Facts:
    gpu = Endpoint("GPU0", "gpu", "0000:03:00.0", 0)
    nic = Endpoint("mlx5_0", "nic", "0000:04:00.0", 0, rdma=True, speed_gbps=200.0)
    links: dict[str, dict[str, str | None]] = {
        "GPU0": {"GPU0": "X", "mlx5_0": level},
        "mlx5_0": {"GPU0": level, "mlx5_0": "X"},
    }
    return topology.Facts(
        topo=PciTopology([gpu], [nic], links, cpu_numa_nodes=2, unplaced=[]),
        smi=None if smi_text is None else parse_topo(smi_text),
        smi_missing=None if smi_text else "nvidia-smi: command not found",
        numa_raw={},
        pci_devices=2,
    )


def test_max_nic_level_is_a_parameter() -> None:
    assert _by_subject(topology.evaluate(_facts("PHB"), DEFAULT))["gpu-nic"].status is Status.OK
    strict = _by_subject(topology.evaluate(_facts("PHB"), topology.Params(max_nic_level="PXB")))
    assert strict["GPU0"].status is Status.WARN
    assert strict["GPU0"].expected == "a NIC at PXB or closer"
    # A level that is not one falls back to the default rather than failing.
    odd = _by_subject(topology.evaluate(_facts("SYS"), topology.Params(max_nic_level="far")))
    assert odd["GPU0"].status is Status.WARN


def test_numa_disagreement_is_reported() -> None:
    smi = "\tGPU0\tmlx5_0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-7\t1\nmlx5_0\tPIX\t X \n"
    cross = _by_subject(topology.evaluate(_facts("PIX", smi_text=smi), DEFAULT))["cross-check"]
    assert cross.status is Status.WARN
    assert cross.evidence["nvidia-smi topo -m: GPU0 NUMA Affinity"] == "1"
    assert cross.evidence["/sys/bus/pci/devices/0000:03:00.0/numa_node"] == "0"
    agree = smi.replace("\t1\n", "\t0\n")
    ok = _by_subject(topology.evaluate(_facts("PIX", smi_text=agree), DEFAULT))["cross-check"]
    assert ok.status is Status.OK and "on 1 PCIe cell(s)" in ok.summary


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_recorded_tree_evaluates_without_unknown(name: str) -> None:
    findings = topology.CHECK.run(fixture_host(name), DEFAULT)
    assert findings and all(f.status is not Status.UNKNOWN for f in findings)


def test_recorded_trees_without_gpus_are_skipped() -> None:
    findings = topology.CHECK.run(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), DEFAULT)
    assert [(f.status, f.subject) for f in findings] == [(Status.SKIPPED, "matrix")]
    assert findings[0].evidence["/sys/bus/pci/devices"] == "137 device(s), none a GPU"


def _hwloc_placement(name: str) -> tuple[dict[str, int], dict[int, set[int]]]:
    """From hwloc's own reading of a tree (NAME.console): each PCI device's NUMA node (the NUMANode
    of the package it is listed under) and each NUMA node's PUs."""
    busids: dict[str, int] = {}
    pus: dict[int, set[int]] = {}
    node: int | None = None
    for line in (SYSFS_FIXTURES / f"{name}.console").read_text().splitlines():
        text = line.strip()
        if text.startswith("Package "):
            node = None
        elif text.startswith("NUMANode ") and (m := re.search(r"\(P#(\d+)", text)):
            node = int(m.group(1))
            pus[node] = set()
        elif node is not None and text.startswith("PU ") and (m := re.search(r"\(P#(\d+)\)", text)):
            pus[node].add(int(m.group(1)))
        elif node is not None and (m := re.search(r"busid=([0-9a-f:.]+)", text)):
            busids[m.group(1)] = node
    return busids, pus


def test_recorded_power9_gpus_placed_by_their_local_cpus() -> None:
    """nvidiagpunumanodes: six NVIDIA GPUs known from /proc/driver/nvidia, recorded without links or
    numa_node but with each GPU's local_cpus mask, on a POWER9 with two CPU nodes (0 and 8). hwloc's
    reading of the same tree places three GPUs under each package; the check places them alike
    (where the numa-pinning tuner binds their ranks), and finds node 8's GPUs outside the recorded
    job's cpuset (cpuset.effective_cpus of /jjh: 0-87)."""
    host = fixture_host("nvidiagpunumanodes")
    gpu_nodes, pus = _hwloc_placement("nvidiagpunumanodes")
    assert sorted(set(gpu_nodes.values())) == [0, 8]
    facts = topology.collect(host)
    address = {g.name: g.pci_address for g in facts.topo.gpus}
    assert {address[g]: n for g, n in topology.gpu_nodes(facts, DEFAULT).items()} == gpu_nodes

    found = _run(host)
    assert found["matrix"].summary.startswith("6 GPU(s) on NUMA node(s) 0,8")
    assert found["numa"].status is Status.OK
    assert "GPU0, GPU1, GPU2 on node 0; GPU3, GPU4, GPU5 on node 8" in found["numa"].summary
    assert found["tree"].status is Status.WARN  # the recording keeps no links into /sys/devices
    assert found["gpu-nic"].status is Status.SKIPPED

    low, high = (
        int(x) for x in (host.read("/sys/fs/cgroup/cpuset/jjh/cpuset.effective_cpus") or "").split("-")
    )
    job = set(range(low, high + 1))
    outside = sorted(g for g, a in address.items() if not pus[gpu_nodes[a]] & job)
    assert outside == ["GPU3", "GPU4", "GPU5"]
    assert found["cpuset"].status is Status.WARN
    assert found["cpuset"].summary.startswith("GPU3, GPU4, GPU5: none of their NUMA-local CPUs")


def test_this_machine() -> None:
    findings = topology.CHECK.run(LocalHost(), DEFAULT)
    assert findings and all(f.status is not Status.UNKNOWN for f in findings)
    if not (Path("/proc/driver/nvidia").exists() or any(Path("/dev").glob("nvidia[0-9]*"))):
        assert [f.status for f in findings] == [Status.SKIPPED]


# -- fuzz: the hwloc trees hold no GPU, so corrupt a small GPU node's tree as well -----------------
@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory: pytest.TempPathFactory) -> tuple[SnapshotHost, list[str]]:
    """Two GPUs and two NICs behind a switch, with config space, an IOMMU group and nvidia-smi."""
    root = tmp_path_factory.mktemp("gpunode")
    link = {
        "current_link_speed": "16.0 GT/s PCIe",
        "current_link_width": "16",
        "max_link_speed": "16.0 GT/s PCIe",
    }
    host = pci_tree(
        root,
        {
            f"{SWITCH}/0000:02:00.0/0000:03:00.0": {**GPU, **link, "max_link_width": "16", "numa_node": "0"},
            f"{SWITCH}/0000:02:01.0/0000:04:00.0": {**NIC, **link, "max_link_width": "16", "numa_node": "0"},
            "pci0000:80/0000:80:01.0/0000:81:00.0": {**GPU, **link, "max_link_width": "16", "numa_node": "1"},
            "pci0000:80/0000:80:02.0/0000:82:00.0": {**NIC, **link, "max_link_width": "8", "numa_node": "1"},
        },
        rdma={"mlx5_0": "0000:04:00.0", "mlx5_1": "0000:82:00.0"},
        nodes={0: "0-3", 1: "4-7"},
        files={"/proc/cmdline": "iommu=pt", "/sys/kernel/iommu_groups/3/type": "identity"},
        links={f"/sys/devices/{SWITCH}/0000:02:00.0/0000:03:00.0/iommu_group": "/sys/kernel/iommu_groups/3"},
        commands={
            SMI_CMD: "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tSYS\tPIX\tSYS\t0-3\t0\nGPU1\tSYS\t X \tSYS\tPHB\t4-7\t1\n"
            "mlx5_0\tPIX\tSYS\t X \tSYS\nmlx5_1\tSYS\tPHB\tSYS\t X \n"
        },
    )
    for bridge in (SWITCH, f"{SWITCH}/0000:02:00.0", "pci0000:00/0000:00:01.0"):
        (root / f"sys/devices/{bridge}/config").write_bytes(bytes(range(256)) * 16)
    return host, files_matching(host, [*pcie.CHECK.paths, *topology.CHECK.paths])


def test_gpu_node_is_healthy(gpu_node: tuple[SnapshotHost, list[str]]) -> None:
    host, _ = gpu_node
    found = _run(host)
    assert found["cross-check"].status is Status.OK and "on 5 PCIe cell(s)" in found["cross-check"].summary
    assert (
        found["gpu-nic"].summary == "every GPU has a NIC at NODE or closer: GPU0 mlx5_0 PIX; GPU1 mlx5_1 PHB"
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_gpu_node_gives_findings(
    gpu_node: tuple[SnapshotHost, list[str]], data: st.DataObject
) -> None:
    base, paths = gpu_node
    garbage = [
        b"",
        b"\x00\x00",
        b"-1",
        b"x16",
        b"Unknown",
        b"99999999999999999999",
        b"\xff\xfe",
        b"16.0 GT/s",
    ]
    changes = data.draw(
        st.dictionaries(
            st.sampled_from(paths),
            st.one_of(st.none(), st.sampled_from(garbage), st.binary(max_size=300)),
            min_size=1,
            max_size=20,
        )
    )
    host = FuzzHost(base, changes)
    checks: tuple[Check[Any, Any], ...] = (pcie.CHECK, topology.CHECK)
    for check in checks:
        host.refresh()
        findings = check.run(host, check.make_params())
        assert findings
        assert all(isinstance(k, str) and isinstance(v, str) for f in findings for k, v in f.evidence.items())


def test_unparsable_matrix_alone_is_unknown_not_no_gpus(tmp_path: Path) -> None:
    text = nvidia_smi_text(A100_TEXT).replace("PXB", "???", 1)
    matrix = _run(make_tree(tmp_path, {}, commands={SMI_CMD: text}))["matrix"]
    assert matrix.status is Status.UNKNOWN
    assert "no GPUs" not in matrix.summary


def test_gpus_outside_the_jobs_cpuset_warn(tmp_path: Path) -> None:
    """Recorded inside a job whose cpuset holds only NUMA nodes 3 and 1: GPUs 4-7 (nodes 7, 5) show
    empty CPU Affinity cells."""
    lines = []
    for line in nvidia_smi_text(A100_TEXT).splitlines():
        cells = line.split("\t")
        if cells[0] in ("GPU4", "GPU5", "GPU6", "GPU7"):
            cells[-2] = ""
        lines.append("\t".join(cells))
    found = _run(make_tree(tmp_path, {}, commands={SMI_CMD: "\n".join(lines) + "\n"}))["cpuset"]
    assert found.status is Status.WARN
    assert found.summary.startswith("GPU4, GPU5, GPU6, GPU7: none of their NUMA-local CPUs")
    assert found.evidence["nvidia-smi topo -m: GPU4"] == "CPU Affinity empty, NUMA Affinity 7"
