"""nodeagent.facts.pci_topology: nvidia-smi topo levels derived from the PCI tree in sysfs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.facts import pci, pci_topology
from nodeagent.facts.pci import PciDevice
from nodeagent.facts.pci_topology import level, placed, switch_chain
from tests.support.helpers import ETH, FIXTURE_TREES, GPU, NIC, fixture_host, pci_tree


def dev(address: str, path: str = "", numa: int | None = 0, cpus: list[int] | None = None) -> PciDevice:
    """A PciDevice at /sys/devices/<path>/<address>; path "pci0000:00/0000:00:01.0" etc."""
    parts = [p for p in path.split("/") if p]
    return PciDevice(
        address=address,
        kind="gpu",
        class_code="0x030200",
        vendor="0x10de",
        device="0x20b0",
        numa_node=numa,
        local_cpus=cpus,
        speed_gts=None,
        max_speed_gts=None,
        width=None,
        max_width=None,
        driver=None,
        root=parts[0] if parts else "",
        upstream=parts[1:],
    )


# One switch: root port 00:01.0, upstream port 01:00.0, downstream ports 02:00.0 and 02:01.0.
SWITCH = "pci0000:00/0000:00:01.0/0000:01:00.0"


def test_one_switch_is_pix() -> None:
    gpu = dev("0000:03:00.0", f"{SWITCH}/0000:02:00.0")
    nic = dev("0000:04:00.0", f"{SWITCH}/0000:02:01.0")
    assert switch_chain(gpu) == ["0000:01:00.0"] == switch_chain(nic)
    assert level(gpu, nic) == "PIX"


def test_nested_switches_are_pxb() -> None:
    # The DGX A100 layout: a top switch whose downstream ports each hold a second-level switch.
    top = "pci0000:00/0000:00:01.0/0000:01:00.0"
    gpu = dev("0000:07:00.0", f"{top}/0000:02:00.0/0000:03:00.0/0000:04:00.0")
    nic = dev("0000:0c:00.0", f"{top}/0000:02:01.0/0000:08:00.0/0000:09:00.0")
    assert switch_chain(gpu) == ["0000:03:00.0", "0000:01:00.0"]
    assert level(gpu, nic) == "PXB"
    # A NIC straight under the top switch is still two switches away from the GPU.
    assert level(gpu, dev("0000:0a:00.0", f"{top}/0000:02:02.0")) == "PXB"


def test_root_ports_host_bridges_and_numa() -> None:
    a = dev("0000:17:00.0", "pci0000:00/0000:00:01.0", numa=0)
    assert level(a, dev("0000:18:00.0", "pci0000:00/0000:00:02.0", numa=0)) == "PHB"
    assert level(a, dev("0000:3b:00.0", "pci0000:3a/0000:3a:00.0", numa=0)) == "NODE"
    assert level(a, dev("0000:86:00.0", "pci0000:85/0000:85:00.0", numa=1)) == "SYS"
    assert level(a, a) == "X"


def test_functions_of_one_card_are_pix() -> None:
    # mlx5_4 and mlx5_5 of the DGX A100 fixture: the two ports of one storage NIC.
    port0 = dev("0000:e1:00.0", "pci0000:e0/0000:e0:03.1")
    port1 = dev("0000:e1:00.1", "pci0000:e0/0000:e0:03.1")
    assert level(port0, port1) == "PIX"


def test_unknown_numa_uses_node_count_and_cpus() -> None:
    a = dev("0000:17:00.0", "pci0000:00/0000:00:01.0", numa=None, cpus=[0, 1])
    b = dev("0000:3b:00.0", "pci0000:3a/0000:3a:00.0", numa=None, cpus=[2, 3])
    assert level(a, b, cpu_numa_nodes=1) == "NODE"
    assert level(a, b, cpu_numa_nodes=2) == "SYS"  # disjoint local CPUs: different sockets
    c = dev("0000:3c:00.0", "pci0000:3a/0000:3a:01.0", numa=None, cpus=[0, 1, 2, 3])
    assert level(a, c, cpu_numa_nodes=2) is None


def test_devices_outside_a_hierarchy() -> None:
    # hwloc's nvidiagpunumanodes tree: folders, not links, so the path is /sys/bus/pci/devices/X.
    loose = dev("0004:05:00.0", "pci/devices", numa=None)
    assert not placed(loose)
    assert level(loose, dev("0000:03:00.0", f"{SWITCH}/0000:02:00.0")) is None
    far = dev("0004:06:00.0", "", numa=1)
    assert level(far, dev("0000:03:00.0", f"{SWITCH}/0000:02:00.0", numa=0), cpu_numa_nodes=2) == "SYS"


def test_collect_names_gpus_and_nics_like_nvidia_smi(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path,
        {
            f"{SWITCH}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "0"},
            f"{SWITCH}/0000:02:01.0/0000:04:00.0": {**NIC, "numa_node": "0"},
            "pci0000:80/0000:80:01.0/0000:81:00.0": {**GPU, "numa_node": "1"},
            "pci0000:80/0000:80:02.0/0000:82:00.0": {**ETH, "numa_node": "1"},
            "pci0000:80/0000:80:02.0/0000:82:00.1": {**ETH, "numa_node": "1"},
            "pci0000:00/0000:00:1c.0/0000:05:00.0": {**ETH, "numa_node": "0"},
        },
        rdma={"mlx5_0": "0000:04:00.0"},
        netdevs={
            "ib0": ("0000:04:00.0", 200000),
            "ens2f0": ("0000:82:00.0", 100000),
            "eno1": ("0000:05:00.0", 1000),
        },
        nodes={0: "0-3", 1: "4-7"},
    )
    t = pci_topology.collect(host)
    assert [(g.name, g.pci_address, g.numa_node) for g in t.gpus] == [
        ("GPU0", "0000:03:00.0", 0),
        ("GPU1", "0000:81:00.0", 1),
    ]
    # ib0 is mlx5_0's netdev: the RDMA name stands for the card, as in nvidia-smi.
    assert [(n.name, n.rdma, n.speed_gbps) for n in t.nics] == [
        ("mlx5_0", True, 200.0),
        ("eno1", False, 1.0),
        ("ens2f0", False, 100.0),
    ]
    assert t.cpu_numa_nodes == 2
    assert t.link("GPU0", "mlx5_0") == "PIX"
    assert t.link("GPU1", "ens2f0") == "PHB"
    assert t.link("GPU0", "ens2f0") == "SYS"
    assert t.link("GPU0", "eno1") == "PHB"
    assert t.link("GPU0", "GPU1") == "SYS"
    assert t.nearest("GPU1", ["mlx5_0", "ens2f0"]) == ("PHB", ["ens2f0"])
    assert t.unplaced == []


def test_collect_survives_missing_and_corrupt_files(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path,
        {f"{SWITCH}/0000:02:00.0/0000:03:00.0": {**GPU, "numa_node": "garbage\x00"}},
        rdma={},
        links={"/sys/class/infiniband/mlx5_9/device": "/sys/devices/nowhere"},
        files={"/sys/class/infiniband/mlx5_9/ports/1/state": "\x00\x00"},
    )
    t = pci_topology.collect(host)
    assert [g.numa_node for g in t.gpus] == [None]
    assert t.nics == []  # an RDMA device whose PCI function is gone has no place in the matrix


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_recorded_tree_gives_a_matrix(name: str) -> None:
    t = pci_topology.collect(fixture_host(name))
    names = [e.name for e in t.gpus + t.nics]
    assert sorted(t.links) == sorted(names)
    assert all(t.link(n, n) in ("X", None) for n in names)


def test_recorded_xeon_with_infiniband() -> None:
    # 32em64t: mlx4_0 at 0000:82:00.0 below root port 80:02.2 of host bridge pci0000:80 on node 1;
    # eth0/eth1 are functions 0 and 3 of the i350 at 0000:02:00 below 00:01.1 on node 0.
    t = pci_topology.collect(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert [(n.name, n.pci_address, n.numa_node, n.rdma) for n in t.nics] == [
        ("mlx4_0", "0000:82:00.0", 1, True),
        ("eth0", "0000:02:00.0", 0, False),
        ("eth1", "0000:02:00.3", 0, False),
    ]
    assert t.link("eth0", "eth1") == "PIX"
    assert t.link("eth0", "mlx4_0") == "SYS"
    assert t.gpus == []


def test_recorded_quad_socket_with_qlogic_hca() -> None:
    # 40intel64: qib0 at 0000:43:00.0 (host bridge pci0000:40, node 2); the bnx2 ports have
    # numa_node -1 and every CPU local, so the distance between host bridges is unknown.
    t = pci_topology.collect(fixture_host("40intel64-2g2n4c+pcilocality"))
    assert [n.name for n in t.nics] == ["qib0", "eth0", "eth1", "eth2", "eth3"]
    assert t.link("eth0", "eth1") == "PIX"  # 02:00.0 and 02:00.1
    assert t.link("eth0", "eth2") == "PHB"  # root ports 00:05.0 and 00:06.0
    assert t.link("eth0", "qib0") is None
    assert (
        pci.by_address(pci.collect(fixture_host("40intel64-2g2n4c+pcilocality")))["0000:43:00.0"].numa_node
        == 2
    )


def test_gpus_of_other_vendors_do_not_shift_nvidia_names(tmp_path: Path) -> None:
    # A workstation: an Intel iGPU at 00:02.0 sorts before the NVIDIA card, which nvidia-smi calls GPU0.
    host = pci_tree(
        tmp_path,
        {
            "pci0000:00/0000:00:02.0": {"class": "0x030000", "vendor": "0x8086", "device": "0x3e92"},
            "pci0000:00/0000:00:01.0/0000:01:00.0": {**GPU, "numa_node": "0"},
        },
    )
    assert [(g.name, g.pci_address) for g in pci_topology.collect(host).gpus] == [
        ("Intel-GPU0", "0000:00:02.0"),
        ("GPU0", "0000:01:00.0"),
    ]
