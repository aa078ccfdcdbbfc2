"""rdma: IB/RoCE port state, physical state, rate and mixed rates (the memlock limit is the kernel's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.checks import rdma
from nodeagent.checks.rdma import Facts, Params
from nodeagent.core.finding import Status
from nodeagent.facts import network
from nodeagent.facts.network import RdmaPort
from nodeagent.host import LocalHost, SnapshotHost
from tests.support import corpus
from tests.support.helpers import FIXTURE_TREES, findings_about, fixture_host, make_tree, one_finding

# -- recorded trees -------------------------------------------------------------------------------


def test_qlogic_qdr_port() -> None:
    host = fixture_host("40intel64-2g2n4c+pcilocality")
    ok = one_finding(rdma.CHECK.run(host, Params(min_rate_gbps=0)), "qib0/1")
    assert ok.status is Status.OK
    assert ok.summary == (
        "qib0 port 1: ACTIVE/LinkUp, 40 Gb/sec (4X QDR), InfiniBand, PCI 0000:43:00.0, "
        "NUMA node 2, netdev ib0"
    )
    assert ok.evidence["/sys/class/infiniband/qib0/ports/1/state"] == "ACTIVE"
    assert ok.evidence["/sys/class/infiniband/qib0/ports/1/phys_state"] == "LinkUp"
    slow = one_finding(rdma.CHECK.run(host, Params()), "qib0/1")
    assert slow.status is Status.WARN
    assert slow.summary == "qib0 port 1 runs at 40 Gb/sec (4X QDR), below 100 Gb/s"


def test_mellanox_fdr_port_and_scif_without_pci_device() -> None:
    findings = rdma.CHECK.run(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), Params(min_rate_gbps=56))
    mlx = one_finding(findings, "mlx4_0/1")
    assert mlx.status is Status.OK
    assert "56 Gb/sec (4X FDR), InfiniBand, PCI 0000:82:00.0, NUMA node 1, netdev ib0" in mlx.summary
    # scif0 -> ../../devices/scif_dma_0/infiniband/scif0: the Xeon Phi's SCIF device, not recorded.
    scif = one_finding(findings, "scif0")
    assert scif.status is Status.SKIPPED
    assert scif.evidence == {"/sys/class/infiniband/scif0": "(dangling link)"}
    assert not findings_about(findings, "rates")  # one port: nothing to mix
    hdr = one_finding(
        rdma.CHECK.run(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), Params(min_rate_gbps=200)), "mlx4_0/1"
    )
    assert hdr.status is Status.WARN and "below 200 Gb/s" in hdr.summary


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_without_unknown(name: str) -> None:
    findings = rdma.CHECK.run(fixture_host(name), Params())
    assert findings
    assert all(f.status is not Status.UNKNOWN for f in findings)


def test_trees_without_infiniband_are_skipped_with_the_path() -> None:
    findings = rdma.CHECK.run(fixture_host("64amd64-4s2n4ca2co"), Params())
    assert [(f.status, f.evidence) for f in findings] == [
        (Status.SKIPPED, {"/sys/class/infiniband": "absent"})
    ]


# -- the real-machine corpus (tests/fixtures/corpus) ------------------------------------------------


def _corpus_host(tmp_path_factory: pytest.TempPathFactory, name: str) -> SnapshotHost:
    """A corpus recording's snapshot tree, built as the corpus truth test builds it."""
    return SnapshotHost(corpus.build_tree(corpus.load(name), tmp_path_factory.mktemp(name) / "tree"))


@pytest.fixture(scope="module")
def procfs(tmp_path_factory: pytest.TempPathFactory) -> SnapshotHost:
    # prometheus/procfs testdata/fixtures.ttar: hfi1_0/1 "100 Gb/sec (4X EDR)", mlx4_0/1 and /2
    # "40 Gb/sec (4X QDR)", mlx5_0/1 "25 Gb/sec (1X EDR)" with phys_state "4: ACTIVE"; the ports
    # are folders (no class links, no device links).
    return _corpus_host(tmp_path_factory, "sysfs-procfs-fixtures-mixed-hca")


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> SnapshotHost:
    # node_exporter collector/fixtures/sys.ttar: i40iw0/1 "10 Gb/sec (4X)" (SDR, unnamed as kernels
    # before 4.x printed it), mlx4_0/1 and /2 "40 Gb/sec (4X QDR)", all "4: ACTIVE" / "5: LinkUp".
    return _corpus_host(tmp_path_factory, "sysfs-node-exporter-bonding-mlx4-i40iw")


def test_down_second_port_beside_an_active_port_warns(tmp_path_factory: pytest.TempPathFactory) -> None:
    # ibv_devinfo of two dual-port ConnectX-3: port 1 of each PORT_ACTIVE, port 2 of each PORT_DOWN
    # (-v on mlx4_1 port 2: phys_state POLLING); the tutorial host uses port 1 only. A down port
    # whose HCA carries traffic on its other port is no proof of a fault: WARN, not a drain.
    host = _corpus_host(tmp_path_factory, "ib-heioy-cx3-two-hca-port2-polling")
    findings = rdma.CHECK.run(host, Params(min_rate_gbps=0))
    for device, phys in (("mlx4_0", "(absent)"), ("mlx4_1", "Polling")):
        f = one_finding(findings, f"{device}/2")
        assert f.status is Status.WARN, f.summary
        assert f.evidence[f"/sys/class/infiniband/{device}/ports/2/state"] == "DOWN"
        assert f.evidence[f"/sys/class/infiniband/{device}/ports/2/phys_state"] == phys
        assert f"{device} port 1 is ACTIVE" in f.summary
    for port in ("mlx4_0/1", "mlx4_1/1"):
        assert one_finding(findings, port).status is Status.OK
    strict = rdma.CHECK.run(host, Params(min_rate_gbps=0, require_all_ports=True))
    assert one_finding(strict, "mlx4_1/2").status is Status.FAIL


def test_width_and_speed_read_from_the_rate(procfs: SnapshotHost, node_exporter: SnapshotHost) -> None:
    got = {
        f"{p.device}/{p.port}": (p.rate_gbps, p.width, p.speed_name)
        for host in (procfs, node_exporter)
        for p in rdma.collect(host).ports
    }
    assert got == {
        "hfi1_0/1": (100.0, "4X", "EDR"),
        "mlx4_0/1": (40.0, "4X", "QDR"),
        "mlx4_0/2": (40.0, "4X", "QDR"),
        "mlx5_0/1": (25.0, "1X", "EDR"),
        "i40iw0/1": (10.0, "4X", None),
    }


def test_port_trained_down_to_1x_beside_4x_ports_warns(procfs: SnapshotHost) -> None:
    findings = rdma.CHECK.run(procfs, Params(min_rate_gbps=0))
    narrow = [f for f in findings_about(findings, "mlx5_0/1") if "1X" in f.summary]
    assert len(narrow) == 1 and narrow[0].status is Status.WARN
    assert narrow[0].evidence["/sys/class/infiniband/mlx5_0/ports/1/rate"] == "25 Gb/sec (1X EDR)"
    assert narrow[0].evidence["/sys/class/infiniband/hfi1_0/ports/1/rate"] == "100 Gb/sec (4X EDR)"
    for wide in ("hfi1_0/1", "mlx4_0/1", "mlx4_0/2"):
        assert [f.status for f in findings_about(findings, wide)] == [Status.OK]
    # The rates differ only between HCA models (MT4099, MT4118, hfi1): different networks.
    assert findings_about(findings, "rates") == []


def test_all_4x_ports_are_not_judged_on_width(node_exporter: SnapshotHost) -> None:
    findings = rdma.CHECK.run(node_exporter, Params(min_rate_gbps=0, allow_mixed_rates=True))
    for port in ("i40iw0/1", "mlx4_0/1", "mlx4_0/2"):
        assert [f.status for f in findings_about(findings, port)] == [Status.OK]


def test_phys_state_the_kernel_cannot_print_is_unknown_not_fail(procfs: SnapshotHost) -> None:
    # "4: ACTIVE": phys_state 4 is PortConfigurationTraining in the kernel's table, and ACTIVE is a
    # logical state's name: the file says nothing certain about the physical link.
    findings = findings_about(rdma.CHECK.run(procfs, Params(min_rate_gbps=0)), "mlx5_0/1")
    assert Status.FAIL not in {f.status for f in findings}
    unknown = [f for f in findings if f.status is Status.UNKNOWN]
    assert len(unknown) == 1
    assert unknown[0].evidence["/sys/class/infiniband/mlx5_0/ports/1/phys_state"] == "4: ACTIVE"
    assert "PortConfigurationTraining" in unknown[0].summary


def test_device_not_recorded_is_not_called_software_rdma(procfs: SnapshotHost) -> None:
    hfi = one_finding(rdma.CHECK.run(procfs, Params(min_rate_gbps=0)), "hfi1_0/1")
    assert "software" not in hfi.summary and "device not recorded" in hfi.summary


# -- hand-built facts -----------------------------------------------------------------------------

PORT = RdmaPort(
    "mlx5_0",
    1,
    "ACTIVE",
    "LinkUp",
    200.0,
    "200 Gb/sec (4X HDR)",
    "InfiniBand",
    "0000:3b:00.0",
    0,
    ["ib0"],
    width="4X",
    speed_name="HDR",
)


def _facts(*ports: RdmaPort) -> Facts:
    devices = sorted({p.device for p in ports})
    return Facts(True, devices, list(ports), dict.fromkeys(devices, "/sys/devices/x"))


def test_healthy_hdr_port() -> None:
    findings = rdma.evaluate(_facts(PORT), Params(min_rate_gbps=200))
    assert one_finding(findings, "mlx5_0/1").status is Status.OK
    assert not findings_about(findings, "memlock")  # the kernel check's: one fact, one finding


@pytest.mark.parametrize(
    ("state", "phys", "layer", "words"),
    [
        ("INIT", "LinkUp", "InfiniBand", "no subnet manager"),
        ("ARMED", "LinkUp", "InfiniBand", "no subnet manager"),
        ("DOWN", "Polling", "InfiniBand", "no peer on the cable"),
        ("DOWN", "Disabled", "InfiniBand", "disabled"),
        ("DOWN", "Disabled", "Ethernet", "disabled"),
        ("DOWN", "LinkDown", "Ethernet", "Ethernet link is down"),
        ("ACTIVE", "LinkErrorRecovery", "InfiniBand", "phys_state LinkErrorRecovery"),
        ("DOWN", None, "InfiniBand", "state DOWN"),
    ],
)
def test_port_not_active_fails(state: str | None, phys: str | None, layer: str | None, words: str) -> None:
    port = replace(PORT, state=state, phys_state=phys, link_layer=layer)
    f = one_finding(rdma.evaluate(_facts(port), Params()), "mlx5_0/1")
    assert f.status is Status.FAIL
    assert words in f.summary
    assert f.expected == "state ACTIVE, phys_state LinkUp"
    assert f.remediation


def test_absent_state_is_unknown_naming_the_path() -> None:
    for phys in (None, "LinkUp", "Polling"):
        port = replace(PORT, state=None, phys_state=phys)
        f = one_finding(rdma.evaluate(_facts(port), Params()), "mlx5_0/1")
        assert f.status is Status.UNKNOWN, f.summary
        assert "/sys/class/infiniband/mlx5_0/ports/1/state" in f.summary
        assert f.evidence["/sys/class/infiniband/mlx5_0/ports/1/state"] == "(absent)"
        assert "down" not in f.summary.lower()


def test_active_port_without_phys_state_is_judged_on_its_state() -> None:
    # ibv_devinfo without -v shows no physical state: an ACTIVE port (which the subnet manager can
    # only have made ACTIVE over a trained link) is not failed for a file the recording lacks.
    f = one_finding(rdma.evaluate(_facts(replace(PORT, phys_state=None)), Params()), "mlx5_0/1")
    assert f.status is Status.OK
    assert "phys_state not recorded" in f.summary


def test_init_on_roce_is_not_blamed_on_a_subnet_manager() -> None:
    port = replace(PORT, state="INIT", link_layer="Ethernet")
    f = one_finding(rdma.evaluate(_facts(port), Params()), "mlx5_0/1")
    assert f.status is Status.FAIL and "subnet manager" not in f.summary


def test_unparsable_rate_is_unknown() -> None:
    port = replace(PORT, rate="garbage", rate_gbps=None, width=None)
    f = one_finding(rdma.evaluate(_facts(port), Params()), "mlx5_0/1")
    assert f.status is Status.UNKNOWN and "'garbage'" in f.summary


@pytest.mark.parametrize(
    ("text", "gbps", "width", "speed"),
    [
        # rate_show: "%d%s Gb/sec (%dX%s)": deci-Gb/s printed with ".5" or nothing, the active width,
        # and the speed's name (none for SDR before 4.x); ibstat's conversion gives the rate alone.
        ("100 Gb/sec (4X EDR)", 100.0, "4X", "EDR"),
        ("56 Gb/sec (4X FDR)", 56.0, "4X", "FDR"),
        ("10 Gb/sec (4X)", 10.0, "4X", None),
        ("25 Gb/sec (1X EDR)", 25.0, "1X", "EDR"),
        ("100 Gb/sec (2X HDR)", 100.0, "2X", "HDR"),
        ("2.5 Gb/sec (1X SDR)", 2.5, "1X", "SDR"),
        ("40 Gb/sec (4X FDR10)", 40.0, "4X", "FDR10"),
        ("200 Gb/sec\n", 200.0, None, None),
    ],
)
def test_parse_rate(text: str, gbps: float, width: str | None, speed: str | None) -> None:
    assert network.parse_rate(text) == network.Rate(gbps, width, speed)


@pytest.mark.parametrize(
    "text", ["garbage", "200", "200 Gb/sec (4 HDR)", "200 Gb/sec (3X HDR)", "fast Gb/sec"]
)
def test_parse_rate_refuses_other_shapes(text: str) -> None:
    assert network.parse_rate(text) is None


def _rated(device: str, rate: str, port: int = 1) -> RdmaPort:
    parsed = network.parse_rate(rate)
    assert parsed is not None
    return replace(
        PORT,
        device=device,
        port=port,
        rate=rate,
        rate_gbps=parsed.gbps,
        width=parsed.width,
        speed_name=parsed.speed_name,
    )


def test_width_judged_only_against_known_widths() -> None:
    # An ibstat-converted rate ("100 Gb/sec") has no width: never judged on it, never a reference.
    hdr100 = _rated("mlx5_0", "100 Gb/sec")
    narrow = _rated("mlx5_1", "100 Gb/sec (2X HDR)")
    alone = rdma.evaluate(_facts(hdr100, narrow), Params(min_rate_gbps=0))
    assert [f.status for f in findings_about(alone, "mlx5_0/1")] == [Status.OK]
    assert [f.status for f in findings_about(alone, "mlx5_1/1")] == [Status.OK]  # nothing wider known
    wide = _rated("mlx5_2", "200 Gb/sec (4X HDR)")
    mixed = rdma.evaluate(_facts(hdr100, narrow, wide), Params(min_rate_gbps=0, allow_mixed_rates=True))
    assert [f.status for f in findings_about(mixed, "mlx5_0/1")] == [Status.OK]
    down = one_finding(mixed, "mlx5_1/1")
    assert down.status is Status.WARN and "2X" in down.summary and "mlx5_2/1" in down.summary
    # HDR100 split cables run 2X by design: expected_width says so.
    by_design = rdma.evaluate(_facts(narrow), Params(min_rate_gbps=0, expected_width=2))
    assert [f.status for f in findings_about(by_design, "mlx5_1/1")] == [Status.OK]
    required = rdma.evaluate(_facts(narrow), Params(min_rate_gbps=0, expected_width=4))
    assert one_finding(required, "mlx5_1/1").status is Status.WARN


def test_roce_ports_are_not_judged_on_width() -> None:
    # RoCE ports report an Ethernet speed mapped onto IB width and speed (ib_get_eth_speed: 25 GbE
    # is "1X EDR"): the width is not a lane count that trained down.
    roce25 = replace(_rated("mlx5_0", "25 Gb/sec (1X EDR)"), link_layer="Ethernet")
    roce100 = replace(_rated("mlx5_1", "100 Gb/sec (4X EDR)"), link_layer="Ethernet")
    findings = rdma.evaluate(_facts(roce25, roce100), Params(min_rate_gbps=0, allow_mixed_rates=True))
    assert [f.status for f in findings_about(findings, "mlx5_0/1")] == [Status.OK]


def test_mixed_rates_warn_per_link_layer() -> None:
    slow = replace(PORT, device="mlx5_1", rate_gbps=100.0, rate="100 Gb/sec (4X EDR)")
    roce = replace(PORT, device="mlx5_2", rate_gbps=25.0, rate="25 Gb/sec (1X EDR)", link_layer="Ethernet")
    findings = rdma.evaluate(_facts(PORT, slow, roce), Params(min_rate_gbps=0))
    mixed = one_finding(findings, "rates")
    assert mixed.status is Status.WARN
    assert mixed.summary.startswith(
        "InfiniBand ports run at different rates (mlx5_0/1 200, mlx5_1/1 100 Gb/s)"
    )
    assert "mlx5_2" not in mixed.summary  # RoCE is compared with RoCE only
    allowed = one_finding(
        rdma.evaluate(_facts(PORT, slow), Params(min_rate_gbps=0, allow_mixed_rates=True)), "rates"
    )
    assert allowed.status is Status.OK


def test_device_directory_without_ports() -> None:
    facts = Facts(True, ["rxe0"], [], {"rxe0": "/sys/devices/virtual/infiniband/rxe0"})
    findings = rdma.evaluate(facts, Params())
    assert one_finding(findings, "rxe0").status is Status.SKIPPED
    assert one_finding(findings, "rdma").status is Status.SKIPPED


def test_no_infiniband_class() -> None:
    facts = Facts(False, [], [], {})
    assert [f.status for f in rdma.evaluate(facts, Params())] == [Status.SKIPPED]


# -- collect on built trees -----------------------------------------------------------------------

DEV = "/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0"
LIMITS = (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max locked memory         {soft:<20} {hard:<20} bytes     \n"
)


def _host(tmp_path: Path, ports: dict[str, dict[str, str]], extra: dict[str, str]) -> SnapshotHost:
    files = {f"{DEV}/numa_node": "1\n", **extra}
    for port, attrs in ports.items():
        for k, v in attrs.items():
            files[f"{DEV}/infiniband/mlx5_0/ports/{port}/{k}"] = v
    links = {
        "/sys/class/infiniband/mlx5_0": "../../devices/pci0000:00/0000:00:02.0/0000:3b:00.0/"
        "infiniband/mlx5_0",
        f"{DEV}/infiniband/mlx5_0/device": "../../../0000:3b:00.0",
    }
    return make_tree(tmp_path, files, links)


HDR = {
    "state": "4: ACTIVE\n",
    "phys_state": "5: LinkUp\n",
    "rate": "200 Gb/sec (4X HDR)\n",
    "link_layer": "InfiniBand\n",
}


def test_collect_two_ports_one_without_subnet_manager(tmp_path: Path) -> None:
    host = _host(
        tmp_path,
        {"1": HDR, "2": {**HDR, "state": "2: INIT\n", "rate": "100 Gb/sec (4X EDR)\n"}},
        {"/proc/self/limits": LIMITS.format(soft="unlimited", hard="unlimited")},
    )
    findings = rdma.CHECK.run(host, Params(min_rate_gbps=200))
    assert one_finding(findings, "mlx5_0/1").status is Status.OK
    init = one_finding(findings, "mlx5_0/2")
    assert init.status is Status.FAIL and "no subnet manager" in init.summary
    assert init.evidence["/sys/class/infiniband/mlx5_0/ports/2/state"] == "INIT"
    assert not findings_about(findings, "rates")  # only ACTIVE ports are compared


def test_collect_software_and_unrecorded_devices(tmp_path: Path) -> None:
    # rxe0 links into devices/virtual (soft RoCE, no PCI function); mlx5_0 is a plain folder with
    # no link at all: where it sits was not recorded, which is not the same as "software".
    ports = {f"/sys/class/infiniband/mlx5_0/ports/1/{k}": v for k, v in HDR.items()}
    virtual = {f"/sys/devices/virtual/infiniband/rxe0/ports/1/{k}": v for k, v in HDR.items()}
    host = make_tree(
        tmp_path,
        {**ports, **virtual},
        {"/sys/class/infiniband/rxe0": "../../devices/virtual/infiniband/rxe0"},
    )
    findings = rdma.CHECK.run(host, Params(min_rate_gbps=0))
    assert "device not recorded" in one_finding(findings, "mlx5_0/1").summary
    assert "virtual device (software RDMA)" in one_finding(findings, "rxe0/1").summary


def test_collect_corrupt_port_files(tmp_path: Path) -> None:
    host = _host(
        tmp_path,
        {"1": {**HDR, "rate": "\x00\x00fast\n", "state": "4: ACTIVE\x00\x00\x00"}, "2": {"state": "garbage"}},
        {"/proc/self/limits": "Limit Soft Hard Units\nMax locked memory  lots  lots  bytes\n"},
    )
    findings = rdma.CHECK.run(host, Params())
    # What cannot be parsed is UNKNOWN with the file and the reason, never a state: port 1's state
    # is fine once the NULs go, its rate is not a rate; port 2's state "garbage" is not "down".
    rate = one_finding(findings, "mlx5_0/1")
    assert rate.status is Status.UNKNOWN and "'\\x00\\x00fast'" in rate.summary
    state = one_finding(findings, "mlx5_0/2")
    assert state.status is Status.UNKNOWN
    assert "/sys/class/infiniband/mlx5_0/ports/2/state 'garbage'" in state.summary
    assert state.evidence["/sys/class/infiniband/mlx5_0/ports/2/state"] == "garbage"


# -- this machine ---------------------------------------------------------------------------------


def test_local_host() -> None:
    findings = rdma.CHECK.run(LocalHost(), Params())
    assert all(f.status is not Status.UNKNOWN for f in findings)
    if not Path("/sys/class/infiniband").exists():
        assert [(f.status, f.evidence) for f in findings] == [
            (Status.SKIPPED, {"/sys/class/infiniband": "absent"})
        ]
    assert not findings_about(findings, "memlock")


def test_rates_are_compared_within_one_hca_model(tmp_path: Path) -> None:
    """An H100 node: ConnectX-7 compute rails at 400, a ConnectX-6 Dx front-end port at 100 (by
    design), and one ConnectX-7 rail that came up at 200 (a fault)."""
    files = {}
    for dev, hca, rate in (
        ("mlx5_0", "MT4129", "400 Gb/sec (4X NDR)"),
        ("mlx5_1", "MT4129", "200 Gb/sec (2X NDR)"),
        ("mlx5_2", "MT4129", "400 Gb/sec (4X NDR)"),
        ("mlx5_3", "MT4125", "100 Gb/sec (4X EDR)"),
    ):
        base = f"/sys/class/infiniband/{dev}"
        files[f"{base}/hca_type"] = hca + "\n"
        files[f"{base}/ports/1/state"] = "4: ACTIVE\n"
        files[f"{base}/ports/1/phys_state"] = "5: LinkUp\n"
        files[f"{base}/ports/1/rate"] = rate + "\n"
        files[f"{base}/ports/1/link_layer"] = "Ethernet\n"
    found = one_finding(rdma.CHECK.run(make_tree(tmp_path, files), Params(min_rate_gbps=0)), "rates")
    assert found.status is Status.WARN
    assert found.summary.startswith("Ethernet ports of MT4129 run at different rates")
    assert "mlx5_3" not in found.summary
