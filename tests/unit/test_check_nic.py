"""nic: link state, speed, MTU, driver and NUMA node of physical NICs; nvidia_peermem on GPU+RDMA nodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodeagent.checks import nic
from nodeagent.checks.nic import Facts, Params
from nodeagent.core.finding import Status
from nodeagent.facts.gpus import Gpu
from nodeagent.facts.network import Nic, RdmaPort
from nodeagent.host import LocalHost, SnapshotHost
from tests.support import corpus
from tests.support.helpers import FIXTURE_TREES, findings_about, fixture_host, make_tree, one_finding

TREE_32 = "32em64t-2n8c+dax+nvme+mic+dimms"
TREE_40 = "40intel64-2g2n4c+pcilocality"


# -- recorded trees -------------------------------------------------------------------------------


def test_32em64t_nics() -> None:
    f = nic.CHECK.run(fixture_host(TREE_32), Params())
    eth0 = one_finding(f, "eth0")
    assert eth0.status is Status.OK
    assert (
        eth0.summary == "NIC eth0: up, 1000 Mb/s, MTU 1500, driver igb, NUMA node 0 "
        "(not a data interface: speed and MTU not judged)"
    )
    assert eth0.evidence["/sys/class/net/eth0/device"] == "0000:02:00.0"
    # eth1: operstate down, carrier unreadable (administratively down), never received a packet.
    eth1 = one_finding(f, "eth1")
    assert eth1.status is Status.OK and "administratively down" in eth1.summary
    # ib0 (mlx4_0's IPoIB netdev, connected mode, MTU 2044): a data NIC below the 4092 IPoIB MTU.
    ib0 = one_finding(f, "ib0")
    assert ib0.status is Status.WARN
    assert ib0.summary == "data NIC ib0 has MTU 2044, below 4092 (IPoIB)"
    assert ib0.evidence["/sys/class/net/ib0/device/driver"] == "mlx4_core"
    assert ib0.evidence["/sys/class/net/ib0/device/numa_node"] == "1"
    # Virtual interfaces are not judged.
    for virtual in ("lo", "br0", "eth0.1015", "mic0"):
        assert not findings_about(f, virtual)
    peermem = one_finding(f, "nvidia_peermem")
    assert peermem.status is Status.SKIPPED and "no NVIDIA GPU" in peermem.summary


def test_40intel64_numa_unknown_on_four_nodes() -> None:
    f = nic.CHECK.run(fixture_host(TREE_40), Params())
    eth0 = one_finding(f, "eth0")
    assert eth0.status is Status.WARN
    assert "numa_node -1" in eth0.summary and "4-node machine" in eth0.summary
    assert eth0.fix is None  # no tuner can give a NIC its NUMA node
    for down in ("eth1", "eth2", "eth3"):
        assert one_finding(f, down).status is Status.OK
    ib0 = one_finding(f, "ib0")  # qib0's IPoIB netdev on NUMA node 2, datagram MTU 2044
    assert ib0.status is Status.WARN
    assert ib0.evidence["/sys/class/net/ib0/device/numa_node"] == "2"
    assert ib0.evidence["/sys/class/net/ib0/device/driver"] == "ib_qib"


def test_required_and_data_interface_parameters_on_a_recorded_tree() -> None:
    host = fixture_host(TREE_32)
    f = nic.CHECK.run(host, Params(required=("eth1", "ens*")))
    eth1 = one_finding(f, "eth1")
    assert eth1.status is Status.FAIL
    assert "required eth1 is down" in eth1.summary
    missing = one_finding(f, "ens*")
    assert missing.status is Status.FAIL and "not found" in missing.summary
    f = nic.CHECK.run(host, Params(data_interfaces=("eth*",), min_speed_mbps=10_000))
    eth0 = findings_about(f, "eth0")
    assert {x.summary for x in eth0} == {
        "data NIC eth0 links at 1000 Mb/s, below 10000 Mb/s",
        "data NIC eth0 has MTU 1500, below 9000 (jumbo frames off)",
    }
    assert one_finding(f, "eth1").status is Status.WARN  # a data NIC that is down
    assert one_finding(f, "ib0").status is Status.OK  # no longer a data interface


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_without_unknown(name: str) -> None:
    findings = nic.CHECK.run(fixture_host(name), Params())
    assert findings
    assert all(f.status is not Status.UNKNOWN for f in findings)


def test_virtual_interfaces_stay_virtual() -> None:
    # The recording keeps lo, br0, eth0.1015 and mic0 as links into devices/virtual/net, whose
    # targets it left out: interfaces with no device, never PCI NICs.
    nics = {n.name: n for n in nic.collect(fixture_host(TREE_32)).nics}
    assert sorted(nics) == ["br0", "eth0", "eth0.1015", "eth1", "ib0", "lo", "mic0"]
    assert {name for name, n in nics.items() if not n.physical} == {"br0", "eth0.1015", "lo", "mic0"}
    # ib0 -> ../../devices/pci0000:80/0000:80:02.2/0000:82:00.0/net/ib0
    assert nics["ib0"].pci_address == "0000:82:00.0"


def test_trees_without_class_net_are_skipped() -> None:
    f = nic.CHECK.run(fixture_host("16amd64-8n2c"), Params())
    assert [(x.status, x.evidence) for x in f] == [(Status.SKIPPED, {"/sys/class/net": "absent"})]


# -- the real-machine corpus (tests/fixtures/corpus) ------------------------------------------------

NODE_EXPORTER = "sysfs-node-exporter-bonding-mlx4-i40iw"  # node_exporter's collector/fixtures/sys.ttar
GHW_RYZEN = "sysfs-ghw-ryzen5-1600-4nic"


def _corpus_host(tmp_path_factory: pytest.TempPathFactory, name: str) -> SnapshotHost:
    """A corpus recording's snapshot tree, built as the corpus truth test builds it."""
    return SnapshotHost(corpus.build_tree(corpus.load(name), tmp_path_factory.mktemp(name) / "tree"))


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> SnapshotHost:
    return _corpus_host(tmp_path_factory, NODE_EXPORTER)


def test_bonding_masters_file_is_not_an_interface(node_exporter: SnapshotHost) -> None:
    # tree.ttar: "Path: sys/class/net/bonding_masters / Lines: 1 / bond0 dmz int", a plain file the
    # bonding driver adds beside the interfaces; bond0, dmz and int are folders with type and
    # ifindex, eth0 a link.
    facts = nic.collect(node_exporter)
    assert [n.name for n in facts.nics] == ["bond0", "dmz", "eth0", "int"]
    findings = nic.evaluate(facts, Params())
    assert not [f for f in findings if "bonding_masters" in f.subject + f.summary + str(f.evidence)]


def test_nic_without_device_link_is_placed_by_its_own_link(node_exporter: SnapshotHost) -> None:
    # tree.ttar: sys/class/net/eth0 -> ../../devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0/
    # and no eth0/device link; that folder holds speed 1000, mtu 1500, operstate up, carrier 1.
    facts = nic.collect(node_exporter)
    eth0 = next(n for n in facts.nics if n.name == "eth0")
    assert eth0.pci_address == "0000:03:00.0" and eth0.physical
    assert eth0.device_dir == "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0"
    assert [n.name for n in facts.nics if n.physical] == ["eth0"]  # the bonds have no device
    f = one_finding(nic.evaluate(facts, Params()), "eth0")
    assert f.status is Status.OK, f.summary
    assert f.summary.startswith("NIC eth0: up, 1000 Mb/s, MTU 1500, driver ?, NUMA node ?")
    assert f.evidence["/sys/class/net/eth0"] == (
        "links to /sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0 (no device link): 0000:03:00.0"
    )


def test_nics_without_state_files_are_not_called_down(tmp_path_factory: pytest.TempPathFactory) -> None:
    # ghw's Ryzen 5 1600 recording: four links such as enp3s0 -> ../../devices/pci0000:00/0000:00:01.3/
    # 0000:01:00.2/0000:02:00.0/0000:03:00.0/net/enp3s0, whose folders hold addr_assign_type only:
    # no operstate, carrier, speed or mtu, so nothing says whether any link is up.
    host = _corpus_host(tmp_path_factory, GHW_RYZEN)
    facts = nic.collect(host)
    assert {n.name: n.pci_address for n in facts.nics} == {
        "enp3s0": "0000:03:00.0",
        "enp6s0f0": "0000:06:00.0",
        "enp6s0f1": "0000:06:00.1",
        "enp8s0": "0000:08:00.0",
    }
    findings = nic.evaluate(facts, Params())
    for name in ("enp3s0", "enp6s0f0", "enp6s0f1", "enp8s0"):
        f = one_finding(findings, name)
        assert f.status is Status.SKIPPED, f.summary
        assert "down" not in f.summary
        assert f.evidence[f"/sys/class/net/{name}/operstate"] == "(absent)"


def test_class_links_alone_place_nics_even_when_their_targets_were_not_recorded(tmp_path: Path) -> None:
    # Only the links of /sys/class/net: a PCI path makes a physical NIC, devices/virtual a virtual one.
    host = make_tree(
        tmp_path,
        {},
        {
            "/sys/class/net/ens5": "../../devices/pci0000:17/0000:17:02.0/0000:18:00.1/net/ens5",
            "/sys/class/net/veth0": "../../devices/virtual/net/veth0",
        },
    )
    nics = {n.name: n for n in nic.collect(host).nics}
    assert nics["ens5"].pci_address == "0000:18:00.1"
    assert nics["veth0"].pci_address is None and nics["veth0"].device_dir == "/sys/devices/virtual"
    assert one_finding(nic.CHECK.run(host, Params()), "ens5").status is Status.SKIPPED  # no state recorded


# -- hand-built facts -----------------------------------------------------------------------------


BASE_NIC = Nic("ens1", "0000:03:00.0", 200_000, 9000, "up", True, 1, "mlx5_core", 0)


def _nic(name: str = "ens1", **kw: Any) -> Nic:
    return replace(BASE_NIC, name=name, **kw)


PORT = RdmaPort(
    "mlx5_0", 1, "ACTIVE", "LinkUp", 200.0, "200 Gb/sec (4X HDR)", "InfiniBand", "0000:03:00.0", 0, ["ib0"]
)
GPU = Gpu(0, "0000:17:00.0", "NVIDIA", 0, [0, 1], "pci")


def _facts(*nics: Nic, rdma: bool = False, gpu: bool = False, **kw: Any) -> Facts:
    facts = Facts(
        net_listed=True,
        nics=list(nics),
        numa_raw={n.name: str(n.numa_node if n.numa_node is not None else -1) for n in nics},
        rx_packets=dict.fromkeys((n.name for n in nics), 0),
        rdma=[PORT] if rdma else [],
        gpus=[GPU] if gpu else [],
        numa_nodes=1,
        peermem=None,
        peermem_evidence={"/proc/modules": "120 modules, none of nvidia_peermem, nv_peer_mem"},
        modules_readable=True,
    )
    return replace(facts, **kw)


def test_healthy_data_nic_is_ok() -> None:
    f = nic.evaluate(_facts(_nic()), Params())
    ens1 = one_finding(f, "ens1")
    assert ens1.status is Status.OK
    assert ens1.summary == "data NIC ens1: up, 200000 Mb/s, MTU 9000, driver mlx5_core, NUMA node 0"


def test_class_net_absent_is_skipped() -> None:
    f = nic.evaluate(replace(_facts(), net_listed=False), Params())
    assert len(f) == 1 and f[0].status is Status.SKIPPED and "/sys/class/net" in f[0].evidence


def test_only_virtual_interfaces_is_skipped() -> None:
    f = nic.evaluate(_facts(_nic("lo", pci_address=None), _nic("br0", pci_address=None)), Params())
    skipped = one_finding(f, "interfaces")
    assert skipped.status is Status.SKIPPED and "lo, br0" in skipped.summary


def test_down_data_nic_warns_and_required_fails() -> None:
    down = _nic(operstate="down", carrier=False, speed_mbps=None)
    warn = one_finding(nic.evaluate(_facts(down), Params()), "ens1")
    assert warn.status is Status.WARN and "no carrier" in warn.summary
    fail = one_finding(nic.evaluate(_facts(down), Params(required=("ens*",))), "ens1")
    assert fail.status is Status.FAIL
    assert "ip link set ens1 up" in fail.remediation


def test_down_management_nic_that_once_carried_traffic_warns() -> None:
    mgmt = _nic("eno1", driver="igb", speed_mbps=None, operstate="down", carrier=False)
    quiet = one_finding(nic.evaluate(_facts(mgmt), Params()), "eno1")
    assert quiet.status is Status.OK
    lost = one_finding(nic.evaluate(_facts(mgmt, rx_packets={"eno1": 5000}), Params()), "eno1")
    assert lost.status is Status.WARN and "5000 packets" in lost.summary


def test_operstate_unknown_with_carrier_counts_as_up() -> None:
    f = nic.evaluate(_facts(_nic(operstate="unknown", carrier=True)), Params())
    assert one_finding(f, "ens1").status is Status.OK


def test_link_state_unreadable_is_unknown_for_data_nics_and_skipped_for_others() -> None:
    blind = _nic(operstate=None, carrier=None)
    data = one_finding(nic.evaluate(_facts(blind), Params()), "ens1")
    assert data.status is Status.UNKNOWN and "down" not in data.summary
    assert data.evidence["/sys/class/net/ens1/operstate"] == "(absent)"
    other = one_finding(nic.evaluate(_facts(replace(blind, driver="igb", speed_mbps=None)), Params()), "ens1")
    assert other.status is Status.SKIPPED
    # "unknown" (a driver without operstate support) and no carrier file: still nothing known.
    vague = one_finding(nic.evaluate(_facts(_nic(operstate="unknown", carrier=None)), Params()), "ens1")
    assert vague.status is Status.UNKNOWN


def test_down_with_carrier_not_recorded_does_not_guess_why() -> None:
    down = _nic(operstate="down", carrier=None, speed_mbps=None)
    f = one_finding(nic.evaluate(_facts(down), Params()), "ens1")
    assert f.status is Status.WARN
    assert "administratively down or never configured" not in f.summary
    assert "carrier not recorded" in f.summary
    # An empty carrier file is the recorded EINVAL of an interface that is not up (net-sysfs.c
    # carrier_show): administratively down.
    admin = one_finding(nic.evaluate(_facts(down, carrier_raw={"ens1": ""}), Params()), "ens1")
    assert "administratively down" in admin.summary


def test_slow_data_nic_warns() -> None:
    f = nic.evaluate(_facts(_nic(speed_mbps=10_000)), Params())
    slow = one_finding(f, "ens1")
    assert slow.status is Status.WARN
    assert slow.summary == "data NIC ens1 links at 10000 Mb/s, below 25000 Mb/s"
    assert nic.evaluate(_facts(_nic(speed_mbps=10_000)), Params(min_speed_mbps=0))[0].status is Status.OK


def test_mtu_ethernet_and_ipoib() -> None:
    eth = one_finding(nic.evaluate(_facts(_nic(mtu=1500)), Params()), "ens1")
    assert eth.status is Status.WARN and "mtu 9000" in eth.remediation
    ipoib = _nic("ib0", link_type=32, mtu=2044, speed_mbps=None)
    ib = one_finding(nic.evaluate(_facts(ipoib), Params()), "ib0")
    assert ib.status is Status.WARN and "connected" in ib.remediation
    connected = one_finding(
        nic.evaluate(_facts(_nic("ib0", link_type=32, mtu=65520, speed_mbps=None)), Params()), "ib0"
    )
    assert connected.status is Status.OK
    assert "rdma check" in connected.summary


def test_expected_driver() -> None:
    f = nic.evaluate(_facts(_nic(driver="mlx4_en")), Params(expected_drivers=("mlx5_core",)))
    assert one_finding(f, "ens1").status is Status.WARN


def test_numa_unknown_only_matters_on_multi_node_machines() -> None:
    lost = _nic(numa_node=None)
    assert one_finding(nic.evaluate(_facts(lost), Params()), "ens1").status is Status.OK
    multi = one_finding(nic.evaluate(_facts(lost, numa_nodes=2), Params()), "ens1")
    assert multi.status is Status.WARN and multi.fix is None
    assert multi.evidence["/sys/class/net/ens1/device/numa_node"] == "-1"
    # numa_node not recorded at all says nothing about the firmware: not judged.
    absent = one_finding(nic.evaluate(_facts(lost, numa_nodes=2, numa_raw={"ens1": None}), Params()), "ens1")
    assert absent.status is Status.OK


def test_peermem_branches() -> None:
    ens1 = _nic()
    no_rdma = one_finding(nic.evaluate(_facts(ens1, gpu=True), Params()), "nvidia_peermem")
    assert no_rdma.status is Status.SKIPPED and "no RDMA ports" in no_rdma.summary
    no_gpu = one_finding(nic.evaluate(_facts(ens1, rdma=True), Params()), "nvidia_peermem")
    assert no_gpu.status is Status.SKIPPED and "no NVIDIA GPU" in no_gpu.summary
    missing = one_finding(nic.evaluate(_facts(ens1, rdma=True, gpu=True), Params()), "nvidia_peermem")
    assert missing.status is Status.WARN
    assert "modprobe nvidia-peermem" in missing.remediation
    assert "https://docs.nvidia.com/cuda/gpudirect-rdma/" in missing.remediation
    required = nic.evaluate(_facts(ens1, rdma=True, gpu=True), Params(require_peermem=True))
    assert one_finding(required, "nvidia_peermem").status is Status.FAIL
    loaded = nic.evaluate(
        _facts(ens1, rdma=True, gpu=True, peermem="nvidia_peermem", peermem_evidence={"/proc/modules": "x"}),
        Params(),
    )
    assert one_finding(loaded, "nvidia_peermem").status is Status.OK
    unreadable = nic.evaluate(_facts(ens1, rdma=True, gpu=True, modules_readable=False), Params())
    assert one_finding(unreadable, "nvidia_peermem").status is Status.SKIPPED
    amd = replace(GPU, vendor="AMD")
    other = nic.evaluate(_facts(ens1, rdma=True, gpus=[amd]), Params())
    assert one_finding(other, "nvidia_peermem").status is Status.SKIPPED


# -- collect on built trees -----------------------------------------------------------------------

NIC_DEV = "/sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0"
GPU_DEV = "/sys/devices/pci0000:00/0000:00:03.0/0000:17:00.0"


def _gpu_rdma_tree(
    tmp_path: Path, extra: dict[str, str], nic_attrs: dict[str, str] | None = None
) -> SnapshotHost:
    attrs = {"operstate": "up\n", "carrier": "1\n", "mtu": "4092\n", "speed": "200000\n", "type": "32\n"}
    attrs.update(nic_attrs or {})
    files = {
        **{f"{NIC_DEV}/net/ib0/{k}": v for k, v in attrs.items()},
        f"{NIC_DEV}/net/ib0/statistics/rx_packets": "123\n",
        f"{NIC_DEV}/numa_node": "0\n",
        f"{NIC_DEV}/class": "0x020700\n",
        f"{NIC_DEV}/vendor": "0x15b3\n",
        f"{NIC_DEV}/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
        f"{NIC_DEV}/infiniband/mlx5_0/ports/1/phys_state": "5: LinkUp\n",
        f"{NIC_DEV}/infiniband/mlx5_0/ports/1/rate": "200 Gb/sec (4X HDR)\n",
        f"{NIC_DEV}/infiniband/mlx5_0/ports/1/link_layer": "InfiniBand\n",
        f"{GPU_DEV}/class": "0x030200\n",
        f"{GPU_DEV}/vendor": "0x10de\n",
        f"{GPU_DEV}/device": "0x20b0\n",
        f"{GPU_DEV}/numa_node": "0\n",
        "/sys/bus/pci/drivers/mlx5_core/bind": "",
        **extra,
    }
    links = {
        "/sys/class/net/ib0": "../../devices/pci0000:00/0000:00:02.0/0000:03:00.0/net/ib0",
        "/sys/class/net/lo": "../../devices/virtual/net/lo",
        f"{NIC_DEV}/net/ib0/device": "../../../0000:03:00.0",
        f"{NIC_DEV}/driver": "../../../../bus/pci/drivers/mlx5_core",
        "/sys/class/infiniband/mlx5_0": "../../devices/pci0000:00/0000:00:02.0/0000:03:00.0/"
        "infiniband/mlx5_0",
        f"{NIC_DEV}/infiniband/mlx5_0/device": "../../../0000:03:00.0",
        "/sys/bus/pci/devices/0000:03:00.0": "../../../devices/pci0000:00/0000:00:02.0/0000:03:00.0",
        "/sys/bus/pci/devices/0000:17:00.0": "../../../devices/pci0000:00/0000:00:03.0/0000:17:00.0",
    }
    (tmp_path / "sys/devices/virtual/net/lo").mkdir(parents=True)
    return make_tree(tmp_path, files, links)


def test_collect_gpu_rdma_node_with_peermem(tmp_path: Path) -> None:
    host = _gpu_rdma_tree(tmp_path, {"/sys/module/nvidia_peermem/initstate": "live\n"})
    facts = nic.collect(host)
    assert [n.name for n in facts.nics if n.physical] == ["ib0"]
    assert facts.rx_packets == {"ib0": 123}
    assert facts.peermem == "nvidia_peermem"
    findings = nic.evaluate(facts, Params())
    ib0 = one_finding(findings, "ib0")
    assert ib0.status is Status.OK, ib0.summary
    assert ib0.summary.startswith("data NIC ib0: up, 200000 Mb/s, MTU 4092, driver mlx5_core, NUMA node 0")
    peermem = one_finding(findings, "nvidia_peermem")
    assert peermem.status is Status.OK
    assert peermem.evidence == {"/sys/module/nvidia_peermem/initstate": "live"}
    assert not findings_about(findings, "lo")


def test_collect_gpu_rdma_node_without_peermem(tmp_path: Path) -> None:
    host = _gpu_rdma_tree(tmp_path, {"/proc/modules": "mlx5_ib 4 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n"})
    findings = nic.CHECK.run(host, Params())
    peermem = one_finding(findings, "nvidia_peermem")
    assert peermem.status is Status.WARN
    assert "mlx5_0/1" in peermem.summary
    assert peermem.evidence == {"/proc/modules": "2 modules, none of nvidia_peermem, nv_peer_mem"}


def test_collect_legacy_nv_peer_mem_in_proc_modules(tmp_path: Path) -> None:
    host = _gpu_rdma_tree(tmp_path, {"/proc/modules": "nv_peer_mem 16384 0 - Live 0x0\n"})
    assert nic.collect(host).peermem == "nv_peer_mem"


def test_collect_corrupt_attributes(tmp_path: Path) -> None:
    host = _gpu_rdma_tree(
        tmp_path,
        {f"{NIC_DEV}/numa_node": "\x00\x00garbage", f"{NIC_DEV}/net/ib0/statistics/rx_packets": "-x\n"},
        {"mtu": "big\n", "speed": "\x00\x00", "operstate": "up\x00\x00\x00", "type": "??\n"},
    )
    findings = nic.CHECK.run(host, Params())
    # What cannot be parsed is UNKNOWN, each file with its value; the rest is judged as usual.
    corrupt = one_finding(findings, "consistency")
    assert corrupt.status is Status.UNKNOWN
    assert set(corrupt.evidence) == {  # speed "\x00\x00" is empty once NULs go: not recorded
        "/sys/class/net/ib0/mtu",
        "/sys/class/net/ib0/type",
        "/sys/class/net/ib0/device/numa_node",
    }
    assert [f for f in findings if f.status is Status.UNKNOWN] == [corrupt]
    ib0 = one_finding(findings, "ib0")
    assert ib0.evidence["/sys/class/net/ib0/mtu"] == "None"
    assert ib0.evidence["/sys/class/net/ib0/device/numa_node"] == "\x00\x00garbage"
    assert "rx_packets" not in " ".join(ib0.evidence)  # "-x" is not a count
    facts = nic.collect(host)
    assert facts.nics[0].numa_node is None and facts.nics[0].mtu is None


def test_collect_empty_tree(tmp_path: Path) -> None:
    findings = nic.CHECK.run(make_tree(tmp_path, {}), Params())
    assert [f.status for f in findings] == [Status.SKIPPED]


# -- this machine ---------------------------------------------------------------------------------


def test_local_host() -> None:
    host = LocalHost()
    findings = nic.CHECK.run(host, Params())
    assert all(f.status is not Status.UNKNOWN for f in findings)
    facts = nic.collect(host)
    for n in facts.nics:
        if n.physical:
            assert findings_about(findings, n.name), n.name
        else:
            assert not findings_about(findings, n.name), n.name
    assert one_finding(findings, "nvidia_peermem").status in (Status.SKIPPED, Status.OK, Status.WARN)
