from __future__ import annotations

import struct
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.checks import pcie
from nodeagent.checks.pcie import Acs, acs_from_config
from nodeagent.core.finding import Finding, Status
from nodeagent.facts.pci import PciDevice
from nodeagent.host import LocalHost, SnapshotHost
from tests.support import corpus
from tests.support import fake_nvml as fake
from tests.support.helpers import FIXTURE_TREES, GPU, NIC, fixture_host, make_tree, pci_tree

DEFAULT = pcie.Params()
PCI = "/sys/bus/pci/devices"


def _by_subject(findings: list[Finding]) -> dict[str, Finding]:
    return {f.subject: f for f in findings}


def pd(
    address: str,
    kind: str,
    link: tuple[float | None, int | None, float | None, int | None] = (None, None, None, None),
    upstream: tuple[str, ...] = (),
) -> PciDevice:
    """A device with (current speed, current width, max speed, max width)."""
    speed, width, max_speed, max_width = link
    return PciDevice(
        address=address,
        kind=kind,
        class_code="0x000000",
        vendor="0x10de",
        device="0x20b0",
        numa_node=0,
        local_cpus=None,
        speed_gts=speed,
        max_speed_gts=max_speed,
        width=width,
        max_width=max_width,
        driver=None,
        root="pci0000:00",
        upstream=list(upstream),
    )


ROOT_PORT = pd("0000:00:01.0", "bridge", (16.0, 16, 16.0, 16))
UPSTREAM = pd("0000:01:00.0", "bridge", (16.0, 16, 16.0, 16), ("0000:00:01.0",))
DOWN_GPU = pd("0000:02:00.0", "bridge", (16.0, 16, 16.0, 16), ("0000:00:01.0", "0000:01:00.0"))
DOWN_NIC = pd("0000:02:01.0", "bridge", (16.0, 16, 16.0, 16), ("0000:00:01.0", "0000:01:00.0"))
SW = ("0000:00:01.0", "0000:01:00.0")
GPU_DEV = pd("0000:03:00.0", "gpu", (16.0, 16, 16.0, 16), (*SW, "0000:02:00.0"))
NIC_DEV = pd("0000:04:00.0", "nic", (16.0, 16, 16.0, 16), (*SW, "0000:02:01.0"))


def _facts(devices: list[PciDevice], **kw: object) -> pcie.Facts:
    base = pcie.Facts(
        devices=devices,
        gpus=[d.address for d in devices if d.kind == "gpu"],
        nics=[d.address for d in devices if d.kind == "nic"],
        unparsable={},
        cmdline="quiet",
        iommu_groups=None,
        gpu_iommu={},
        acs={},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _healthy() -> list[PciDevice]:
    return [ROOT_PORT, UPSTREAM, DOWN_GPU, DOWN_NIC, GPU_DEV, NIC_DEV]


# -- recorded trees ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_recorded_tree_evaluates_without_unknown(name: str) -> None:
    findings = pcie.CHECK.run(fixture_host(name), DEFAULT)
    assert findings and all(f.status is not Status.UNKNOWN for f in findings)


def test_recorded_tree_with_current_link_attributes_only() -> None:
    # hwloc recorded current_link_speed/width of three devices and no max_*: 0000:43:00.0 (QLogic
    # HCA, "8 GT/s" x4), 0000:03:00.1 (bnx2, "2.5 GT/s" x1), 0000:00:1f.2 (SATA, "5 GT/s" x2).
    found = _by_subject(pcie.CHECK.run(fixture_host("40intel64-2g2n4c+pcilocality"), DEFAULT))
    links = found["links"]
    assert links.status is Status.SKIPPED
    assert links.summary.startswith("3 device(s) with link attributes not judgeable")
    assert sorted(links.evidence) == [
        f"{PCI}/0000:00:1f.2/max_link_speed",
        f"{PCI}/0000:03:00.1/max_link_speed",
        f"{PCI}/0000:43:00.0/max_link_speed",
    ]
    assert found["p2p"].status is Status.SKIPPED  # no GPU on this node


def test_recorded_tree_without_link_attributes() -> None:
    found = _by_subject(pcie.CHECK.run(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), DEFAULT))
    assert found["links"].status is Status.SKIPPED
    assert found["links"].summary.startswith("none of 137 PCI devices exposes PCIe link attributes")


def test_recorded_gpus_without_bridges() -> None:
    # nvidiagpunumanodes: six GPUs known to the driver, no links, no IOMMU groups recorded.
    found = _by_subject(pcie.CHECK.run(fixture_host("nvidiagpunumanodes"), DEFAULT))
    assert found["iommu"].status is Status.OK
    assert found["iommu"].evidence == {"/sys/kernel/iommu_groups": "absent"}
    assert found["acs"].status is Status.OK


# -- downtrained links on hand-built facts ---------------------------------------------------------
def test_healthy_links_are_ok() -> None:
    found = _by_subject(pcie.evaluate(_facts(_healthy()), DEFAULT))
    assert found["links"].status is Status.OK
    assert found["links"].summary == "6 PCIe link(s) at the speed and width their two ends support"


def test_gpu_at_half_width_fails_with_bandwidth() -> None:
    gpu = replace(GPU_DEV, width=8)
    down = replace(DOWN_GPU, width=8)  # the port above reports the same link
    findings = pcie.evaluate(_facts([ROOT_PORT, UPSTREAM, down, DOWN_NIC, gpu, NIC_DEV]), DEFAULT)
    bad = [f for f in findings if f.status in (Status.WARN, Status.FAIL)]
    assert [(f.status, f.subject) for f in bad] == [(Status.FAIL, "0000:03:00.0")]
    assert bad[0].summary == (
        "GPU 0000:03:00.0 link width below capability (x8 16 GT/s (Gen4), max x16 16 GT/s (Gen4)); "
        "about 15.8 of 31.5 GB/s per direction"
    )
    assert bad[0].evidence[f"{PCI}/0000:03:00.0/current_link_width"] == "x8"
    assert bad[0].evidence[f"{PCI}/0000:02:00.0/max_link_width"] == "x16 (the port above)"
    assert "lspci -vv -s 0000:03:00.0" in bad[0].remediation


def test_gpu_in_a_narrow_slot_fails_and_says_so() -> None:
    gpu = replace(GPU_DEV, width=8)
    down = replace(DOWN_GPU, width=8, max_width=8)
    found = _by_subject(pcie.evaluate(_facts([ROOT_PORT, UPSTREAM, down, DOWN_NIC, gpu, NIC_DEV]), DEFAULT))
    assert found["0000:03:00.0"].status is Status.FAIL
    assert "the port above supports no more" in found["0000:03:00.0"].summary
    assert "slot wired for its full width" in found["0000:03:00.0"].remediation


def test_idle_gpu_at_low_speed_warns_unless_under_load() -> None:
    gpu = replace(GPU_DEV, speed_gts=2.5)
    down = replace(DOWN_GPU, speed_gts=2.5)
    facts = _facts([ROOT_PORT, UPSTREAM, down, DOWN_NIC, gpu, NIC_DEV])
    idle = _by_subject(pcie.evaluate(facts, DEFAULT))["0000:03:00.0"]
    assert idle.status is Status.WARN
    assert "possibly idle power saving" in idle.summary
    assert "pcie.link.gen.current" in idle.remediation
    busy = _by_subject(pcie.evaluate(facts, pcie.Params(gpu_under_load=True)))["0000:03:00.0"]
    assert busy.status is Status.FAIL


def test_gpus_first_then_nics_then_others() -> None:
    nvme = pd("0000:05:00.0", "nvme", (8.0, 2, 8.0, 4), ("0000:00:02.0",))
    port = pd("0000:00:02.0", "bridge", (8.0, 4, 16.0, 4))
    nic = replace(NIC_DEV, speed_gts=8.0)
    gpu = replace(GPU_DEV, width=4)
    findings = pcie.evaluate(_facts([ROOT_PORT, UPSTREAM, DOWN_GPU, DOWN_NIC, port, nvme, nic, gpu]), DEFAULT)
    bad = [(f.status, f.subject) for f in findings if f.status in (Status.WARN, Status.FAIL)]
    assert bad == [
        (Status.FAIL, "0000:03:00.0"),
        (Status.FAIL, "0000:04:00.0"),
        (Status.WARN, "0000:05:00.0"),
    ]


def test_links_limited_by_their_partner_are_not_downtrained() -> None:
    # A root port (x16 capable) linked to a BMC's x1 VGA; a Gen4 NVMe below a Gen3 root port.
    port = pd("0000:00:1c.0", "bridge", (2.5, 1, 8.0, 16))
    vga = pd("0000:06:00.0", "display", (2.5, 1, 2.5, 1), ("0000:00:1c.0",))
    port2 = pd("0000:00:03.0", "bridge", (8.0, 4, 8.0, 4))
    nvme = pd("0000:07:00.0", "nvme", (8.0, 4, 16.0, 4), ("0000:00:03.0",))
    empty = pd("0000:00:04.0", "bridge", (2.5, None, 16.0, 16))  # an empty slot
    found = _by_subject(pcie.evaluate(_facts([port, vga, port2, nvme, empty]), DEFAULT))
    assert found["links"].status is Status.OK
    assert found["links"].summary.startswith("4 PCIe link(s)")


def test_downtrained_switch_uplink_is_reported_once() -> None:
    # The switch's upstream port trained x8 against an x16 root port: both ends see x8.
    root = replace(ROOT_PORT, width=8)
    up = replace(UPSTREAM, width=8)
    found = _by_subject(pcie.evaluate(_facts([root, up, DOWN_GPU, DOWN_NIC, GPU_DEV, NIC_DEV]), DEFAULT))
    assert found["0000:01:00.0"].status is Status.WARN
    assert found["0000:01:00.0"].summary.startswith("bridge 0000:01:00.0 link width below capability")
    assert "0000:00:01.0" not in found


def test_unjudgeable_devices_are_counted() -> None:
    old = pd("0000:09:00.0", "other", (5.0, 2, None, None))
    found = _by_subject(pcie.evaluate(_facts([*_healthy(), old]), DEFAULT))
    assert found["links"].summary == (
        "6 PCIe link(s) at the speed and width their two ends support; 1 device(s) with link attributes "
        "not judgeable: no max_link_speed/max_link_width (older kernels, or a recording without them)"
    )
    assert found["links"].evidence == {f"{PCI}/0000:09:00.0/max_link_speed": "absent"}


def test_unparsable_values_warn_with_evidence() -> None:
    facts = _facts(_healthy(), unparsable={f"{PCI}/0000:03:00.0/current_link_speed": "fast"})
    warn = [f for f in pcie.evaluate(facts, DEFAULT) if f.status is Status.WARN]
    assert len(warn) == 1
    assert warn[0].evidence == {f"{PCI}/0000:03:00.0/current_link_speed": "fast"}


def test_no_pci_devices_is_skipped() -> None:
    findings = pcie.evaluate(_facts([]), DEFAULT)
    assert [(f.status, f.subject) for f in findings] == [(Status.SKIPPED, "links"), (Status.SKIPPED, "p2p")]


# -- IOMMU -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("groups", "gpu_iommu", "cmdline", "params", "status", "words"),
    [
        (None, {}, "quiet", DEFAULT, Status.OK, "IOMMU is off"),
        ([], {}, "intel_iommu=on", DEFAULT, Status.OK, "IOMMU is off"),
        (["0", "7"], {"0000:03:00.0": ("7", "DMA-FQ")}, "intel_iommu=on", DEFAULT, Status.WARN, "translates"),
        (
            ["0", "7"],
            {"0000:03:00.0": ("7", "DMA")},
            "",
            pcie.Params(allow_iommu_translation=True),
            Status.OK,
            "translates",
        ),
        (["0", "7"], {"0000:03:00.0": ("7", "identity")}, "iommu=pt", DEFAULT, Status.OK, "passthrough"),
        (["0", "7"], {"0000:03:00.0": ("7", None)}, "amd_iommu=on", DEFAULT, Status.WARN, "not readable"),
        (
            ["0", "7"],
            {"0000:03:00.0": ("7", None)},
            "amd_iommu=on iommu=pt",
            DEFAULT,
            Status.OK,
            "passthrough",
        ),
    ],
)
def test_iommu(
    groups: list[str] | None,
    gpu_iommu: dict[str, tuple[str | None, str | None]],
    cmdline: str,
    params: pcie.Params,
    status: Status,
    words: str,
) -> None:
    facts = _facts(_healthy(), iommu_groups=groups, gpu_iommu=gpu_iommu, cmdline=cmdline)
    found = _by_subject(pcie.evaluate(facts, params))["iommu"]
    assert found.status is status and words in found.summary
    if status is Status.WARN:
        assert "iommu=pt" in found.remediation
    if "intel_iommu=on" in cmdline:
        assert found.evidence["/proc/cmdline intel_iommu"] == "on"


# -- ACS -------------------------------------------------------------------------------------------
def config(*caps: tuple[int, int, int, int, int], size: int = 4096) -> bytes:
    """Config space with extended capabilities (offset, id, next, capability, control)."""
    data = bytearray(size)
    for pos, cap_id, nxt, cap, ctl in caps:
        struct.pack_into("<IHH", data, pos, cap_id | 1 << 16 | nxt << 20, cap, ctl)
    return bytes(data)


AER_THEN_ACS = config((0x100, 0x0001, 0x148, 0, 0), (0x148, 0x000D, 0, 0x005F, 0x001D))


def test_acs_from_config_walks_the_capability_list() -> None:
    acs = acs_from_config(AER_THEN_ACS)
    assert (acs.readable, acs.capability, acs.control, acs.problem) == (4096, 0x5F, 0x1D, None)
    assert acs.describe() == (
        "ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans- (0x001d)"
    )
    assert acs_from_config(config((0x100, 0x0001, 0, 0, 0))).control is None
    assert acs_from_config(b"\xff" * 4096).control is None  # all-ones: no extended capabilities
    assert acs_from_config(AER_THEN_ACS[:64]) == Acs(64)
    assert acs_from_config(AER_THEN_ACS[:256]).describe() == "only 256 bytes of config space readable"


def test_acs_from_config_never_trusts_a_corrupt_list() -> None:
    assert acs_from_config(config((0x100, 0x0001, 0x100, 0, 0))).problem == "extended capability list loops"
    assert "points below 0x100" in (acs_from_config(config((0x100, 0x0001, 0x40, 0, 0))).problem or "")
    assert "runs past" in (acs_from_config(config((0x100, 0x0001, 0x148, 0, 0))[:0x14A]).problem or "")


def _acs_facts(acs: dict[str, Acs | None]) -> pcie.Facts:
    return _facts(_healthy(), acs=acs)


def test_acs_redirect_on_switch_ports_warns() -> None:
    redirect = acs_from_config(AER_THEN_ACS)
    off = acs_from_config(config((0x100, 0x000D, 0, 0x5F, 0)))
    facts = _acs_facts(
        {"0000:00:01.0": redirect, "0000:01:00.0": off, "0000:02:00.0": redirect, "0000:02:01.0": off}
    )
    found = _by_subject(pcie.evaluate(facts, DEFAULT))["acs"]
    assert found.status is Status.WARN
    assert found.summary == (
        "ACS redirects peer-to-peer traffic on 1 PCIe switch port(s) above GPUs/NICs: "
        "0000:02:00.0 (0x10de:0x20b0)"
    )
    assert "setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000" in found.remediation
    assert found.evidence[f"{PCI}/0000:00:01.0/config"].endswith("(0x001d) (root port)")
    allowed = _by_subject(pcie.evaluate(facts, pcie.Params(allow_acs_redirect=True)))["acs"]
    assert allowed.status is Status.OK


def test_acs_on_root_ports_only_is_fine() -> None:
    facts = _acs_facts({"0000:00:01.0": acs_from_config(AER_THEN_ACS), "0000:01:00.0": Acs(4096)})
    found = _by_subject(pcie.evaluate(facts, DEFAULT))["acs"]
    assert found.status is Status.OK
    assert found.evidence[f"{PCI}/0000:01:00.0/config"] == "no ACS capability"


@pytest.mark.parametrize(
    ("acs", "why"),
    [
        ({"0000:02:00.0": Acs(64)}, "run as root"),
        ({"0000:02:00.0": Acs(256)}, "no MMCONFIG/ECAM access"),
        ({"0000:02:00.0": None}, "config space was not recorded"),
    ],
)
def test_unreadable_acs_is_skipped_with_the_reason(acs: dict[str, Acs | None], why: str) -> None:
    found = _by_subject(pcie.evaluate(_acs_facts(acs), DEFAULT))["acs"]
    assert found.status is Status.SKIPPED and why in found.summary


def test_corrupt_config_warns() -> None:
    facts = _acs_facts({"0000:02:00.0": acs_from_config(config((0x100, 1, 0x100, 0, 0)))})
    found = _by_subject(pcie.evaluate(facts, DEFAULT))["acs"]
    assert found.status is Status.WARN
    assert found.evidence == {f"{PCI}/0000:02:00.0/config": "extended capability list loops"}


# -- collect on hand-built trees -------------------------------------------------------------------
SWITCH = "pci0000:00/0000:00:01.0/0000:01:00.0"
LINK16 = {
    "current_link_speed": "16.0 GT/s PCIe",
    "current_link_width": "16",
    "max_link_speed": "16.0 GT/s PCIe",
}


def test_collect_reads_links_iommu_and_acs(tmp_path: Path) -> None:
    gpu_path = f"{SWITCH}/0000:02:00.0/0000:03:00.0"
    host = pci_tree(
        tmp_path,
        {
            "pci0000:00/0000:00:01.0": {**LINK16, "max_link_width": "16"},
            SWITCH: {**LINK16, "max_link_width": "16"},
            f"{SWITCH}/0000:02:00.0": {**LINK16, "current_link_width": "8", "max_link_width": "16"},
            gpu_path: {**GPU, **LINK16, "current_link_width": "8", "max_link_width": "16", "numa_node": "0"},
            f"{SWITCH}/0000:02:01.0/0000:04:00.0": {**NIC, **LINK16, "max_link_width": "16\x00\x00"},
        },
        rdma={"mlx5_0": "0000:04:00.0"},
        files={
            "/proc/cmdline": "BOOT_IMAGE=/vmlinuz intel_iommu=on",
            "/sys/kernel/iommu_groups/7/type": "DMA-FQ",
        },
        links={f"/sys/devices/{gpu_path}/iommu_group": "../../../../../../kernel/iommu_groups/7"},
    )
    (tmp_path / f"sys/devices/{SWITCH}/0000:02:00.0/config").write_bytes(AER_THEN_ACS)
    (tmp_path / f"sys/devices/{SWITCH}/config").write_bytes(AER_THEN_ACS[:64])
    facts = pcie.collect(host)
    assert facts.gpus == ["0000:03:00.0"] and facts.nics == ["0000:04:00.0"]
    assert facts.gpu_iommu == {"0000:03:00.0": ("7", "DMA-FQ")}
    assert facts.acs["0000:02:00.0"] == acs_from_config(AER_THEN_ACS)
    assert facts.acs["0000:01:00.0"] == Acs(64)
    assert facts.acs["0000:00:01.0"] is None
    found = _by_subject(pcie.evaluate(facts, DEFAULT))
    assert found["0000:03:00.0"].status is Status.FAIL
    assert found["iommu"].status is Status.WARN
    assert found["iommu"].evidence["/sys/kernel/iommu_groups/7/type"] == "DMA-FQ"
    assert found["acs"].status is Status.WARN
    assert found["acs"].evidence[f"{PCI}/0000:01:00.0/config"] == "only 64 bytes of config space readable"


def test_collect_reports_garbage_but_not_unknown_or_absent(tmp_path: Path) -> None:
    host = pci_tree(
        tmp_path,
        {
            f"{SWITCH}/0000:02:00.0/0000:03:00.0": {
                **GPU,
                "current_link_speed": "fast",
                "current_link_width": "\x00\xff",
                "max_link_speed": "Unknown",
            },
            "pci0000:00/0000:00:02.0": {"current_link_speed": "Unknown speed", "current_link_width": "0"},
        },
    )
    facts = pcie.collect(host)
    assert facts.unparsable == {
        f"{PCI}/0000:03:00.0/current_link_speed": "fast",
        f"{PCI}/0000:03:00.0/current_link_width": "\\x00\\xff",
    }
    findings = pcie.evaluate(facts, DEFAULT)
    assert all(f.status is not Status.UNKNOWN for f in findings)
    assert _by_subject(findings)["links"].status is Status.WARN


def test_this_machine() -> None:
    findings = pcie.CHECK.run(LocalHost(), DEFAULT)
    assert findings and all(f.status is not Status.UNKNOWN for f in findings)
    assert {f.subject for f in findings} >= {"links"}


# -- GPU links from the driver: `nvidia-smi -q -x` recordings, NVML -----------------------------------
def _recorded(name: str) -> str:
    raw = corpus.load(name).raw("nvidia-smi -q -x")
    assert raw is not None
    return raw.decode()


def _smi_host(tmp_path: Path, xml: str, files: dict[str, str] | None = None) -> SnapshotHost:
    return make_tree(tmp_path, files or {}, commands={"nvidia-smi-q-x": xml})


def _gpu_links(findings: list[Finding]) -> list[tuple[Status, str, str]]:
    return [
        (f.status, f.subject, f.summary)
        for f in findings
        if f.subject not in ("links", "p2p", "iommu", "acs")
    ]


def test_recorded_idle_gpus_below_max_generation_are_ok(tmp_path: Path) -> None:
    # Two RTX 2080 Ti: <current_link_gen> 1, <max_link_gen> 3, 16x of 16x, P8, gpu_util 0 %.
    host = _smi_host(tmp_path, _recorded("smix-pai-2x-rtx2080ti"))
    findings = pcie.CHECK.run(host, DEFAULT)
    idle = "link at Gen1 (max Gen3): normal when idle; judged under load (utilization 0%, P8)"
    assert _gpu_links(findings) == [
        (
            Status.OK,
            "0000:02:00.0",
            f"GPU0 (0000:02:00.0) PCIe link x16 Gen1, max x16 Gen3 (nvidia-smi -q -x): {idle}",
        ),
        (
            Status.OK,
            "0000:03:00.0",
            f"GPU1 (0000:03:00.0) PCIe link x16 Gen1, max x16 Gen3 (nvidia-smi -q -x): {idle}",
        ),
    ]
    evidence = _by_subject(findings)["0000:02:00.0"].evidence
    assert evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/pcie_gen/current_link_gen"] == "1"
    assert evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/pcie_gen/max_link_gen"] == "3"
    assert evidence["nvidia-smi -q -x: GPU0 utilization/gpu_util"] == "0 %"
    assert evidence["nvidia-smi -q -x: GPU0 performance_state"] == "P8"


def test_recorded_narrow_link_warns_busy_or_not(tmp_path: Path) -> None:
    # GTX 1080 mining rig: <current_link_width> 1x of <max_link_width> 16x, Gen3 of 3, P2, 100 %.
    findings = pcie.CHECK.run(_smi_host(tmp_path, _recorded("smix-a0s-exporter-2x-gtx1080-x1")), DEFAULT)
    assert _gpu_links(findings) == [
        (
            Status.WARN,
            f"0000:0{i}:00.0",
            f"GPU{n} (0000:0{i}:00.0) PCIe link x1 Gen3, max x16 Gen3 (nvidia-smi -q -x): "
            "width x1 below its max x16 (slot, riser or bifurcation)",
        )
        for n, i in ((0, 1), (1, 3))
    ]
    warn = _by_subject(findings)["0000:01:00.0"]
    assert warn.expected == "x16, and Gen3 while busy"
    assert "lspci -vv -s 0000:01:00.0" in warn.remediation
    assert (
        warn.evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/link_widths/current_link_width"] == "1x"
    )


def test_recorded_busy_and_idle_gpus_at_their_max(tmp_path: Path) -> None:
    # Azure 4x K80: GPUs 0-1 at Gen3 of 3 busy (P0, 99 %), GPUs 2-3 at Gen1 of 3 idle (P8, 0 %).
    findings = pcie.CHECK.run(_smi_host(tmp_path, _recorded("smix-pai-azure-4x-tesla-k80")), DEFAULT)
    found = _by_subject(findings)
    assert [(s, subject) for s, subject, _ in _gpu_links(findings)] == [
        (Status.OK, "4968:00:00.0"),
        (Status.OK, "f8d6:00:00.0"),
        (Status.OK, "gpu-links"),
    ]
    assert found["gpu-links"].summary == (
        "2 GPU PCIe link(s) at their max generation and width "
        "(nvidia-smi -q -x; sysfs has no link attributes for them)"
    )
    assert (
        found["gpu-links"].evidence["nvidia-smi -q -x: GPU1 pci/pci_gpu_link_info/pcie_gen/current_link_gen"]
        == "3"
    )


def test_busy_gpu_below_max_generation_warns(tmp_path: Path) -> None:
    # The K80 recording with GPU0's <current_link_gen> 3 made 1, while it is at P0 and 99 %:
    # nvidia-smi documents the lower generation for a GPU *not in use* only.
    xml = _recorded("smix-pai-azure-4x-tesla-k80")
    first = xml.index("<current_link_gen>3</current_link_gen>")
    xml = (
        xml[:first]
        + "<current_link_gen>1</current_link_gen>"
        + xml[first + len("<current_link_gen>3</current_link_gen>") :]
    )
    found = _by_subject(pcie.CHECK.run(_smi_host(tmp_path, xml), DEFAULT))
    busy = found["1580:00:00.0"]
    assert (busy.status, busy.summary) == (
        Status.WARN,
        "GPU0 (1580:00:00.0) PCIe link x16 Gen1, max x16 Gen3 (nvidia-smi -q -x): "
        "link at Gen1 (max Gen3) while the GPU is busy (utilization 99%, P0)",
    )
    assert "BIOS PCIe speed setting" in busy.remediation


def test_host_limited_link_is_not_a_gpu_fault(tmp_path: Path) -> None:
    # RTX PRO 6000 Blackwell: <max_device_link_gen> 5, <max_host_link_gen> 4, current 1 at P8.
    host = _smi_host(tmp_path, _recorded("smi-telegraf-rtx-pro-6000-blackwell-maxq"))
    found = _by_subject(pcie.CHECK.run(host, DEFAULT))["0000:61:00.0"]
    assert found.status is Status.OK
    assert found.summary == (
        "GPU0 (0000:61:00.0) PCIe link x16 Gen1, max x16 Gen4 (nvidia-smi -q -x): "
        "link at Gen1 (max Gen4): normal when idle; judged under load (utilization 0%, P8); "
        "the host limits the link to Gen4 (the GPU supports Gen5): not a GPU fault"
    )
    assert found.evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"] == "5"
    assert found.evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"] == "4"


def test_link_values_not_available_are_skipped(tmp_path: Path) -> None:
    # GeForce GT 730: every <pcie_gen> and <link_widths> value is N/A.
    found = _by_subject(pcie.CHECK.run(_smi_host(tmp_path, _recorded("smix-lampaa-gt730-link-na")), DEFAULT))
    skipped = found["gpu-links"]
    assert skipped.status is Status.SKIPPED
    assert skipped.summary.startswith("PCIe links of 1 GPU(s) not judged")
    assert (
        skipped.evidence["nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/pcie_gen/current_link_gen"]
        == "absent or N/A"
    )


def test_unknown_load_is_not_taken_for_idle(tmp_path: Path) -> None:
    # The 2080 Ti recording with <gpu_util> and <performance_state> N/A: Gen1 of 3 cannot be judged.
    xml = (
        _recorded("smix-pai-2x-rtx2080ti")
        .replace("<gpu_util>0 %</gpu_util>", "<gpu_util>N/A</gpu_util>")
        .replace("<performance_state>P8</performance_state>", "<performance_state>N/A</performance_state>")
    )
    found = _by_subject(pcie.CHECK.run(_smi_host(tmp_path, xml), DEFAULT))["0000:02:00.0"]
    assert found.status is Status.SKIPPED
    assert found.summary.endswith("link at Gen1 (max Gen3), and the GPU's load is unknown: not judged")


def test_unparsable_link_value_is_unknown(tmp_path: Path) -> None:
    xml = _recorded("smix-lampaa-gtx1650-super-x8").replace(
        "<current_link_width>8x</current_link_width>", "<current_link_width>eight</current_link_width>"
    )
    found = _by_subject(pcie.CHECK.run(_smi_host(tmp_path, xml), DEFAULT))["0000:06:00.0"]
    assert found.status is Status.UNKNOWN
    assert found.evidence == {
        "nvidia-smi -q -x: GPU0 pci/pci_gpu_link_info/link_widths/current_link_width": (
            "unparsable value 'eight'"
        )
    }


def test_a_gpu_judged_by_sysfs_is_not_judged_again(tmp_path: Path) -> None:
    # The 2080 Ti pair; sysfs holds GPU0 (02:00.0) with its link files, GPU1 (03:00.0) without.
    pci_tree(
        tmp_path,
        {
            "pci0000:00/0000:00:01.0": {**LINK16, "max_link_width": "16"},
            "pci0000:00/0000:00:01.0/0000:02:00.0": {**GPU, **LINK16, "max_link_width": "16"},
            "pci0000:00/0000:00:03.0/0000:03:00.0": {**GPU},
        },
    )
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands/nvidia-smi-q-x.txt").write_text(_recorded("smix-pai-2x-rtx2080ti"))
    findings = pcie.CHECK.run(SnapshotHost(tmp_path), DEFAULT)
    assert [(s, subject) for s, subject, _ in _gpu_links(findings)] == [(Status.OK, "0000:03:00.0")]
    assert not any("0000:02:00.0" in f.summary for f in findings if f.subject != "links")


def test_driver_gives_nothing_for_gpus_without_sysfs_links(tmp_path: Path) -> None:
    # hwloc's POWER9 tree: six GPUs known to the driver, no link files, no nvidia-smi recorded.
    found = _by_subject(pcie.CHECK.run(fixture_host("nvidiagpunumanodes"), DEFAULT))
    assert found["gpu-links"].status is Status.SKIPPED
    assert found["gpu-links"].summary.startswith(
        "PCIe links of 6 GPU(s) not judged: no link attributes in sysfs, and no link from nvidia-smi -q -x"
    )


def test_nvml_links_for_gpus_sysfs_shows_without_link_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = fake.hgx(2)
    gpus[1].pcie_gen, gpus[1].utilization, gpus[1].pstate = 1, 0, fake.NVML_PSTATE_8
    monkeypatch.setitem(sys.modules, "pynvml", fake.module(gpus))
    for bus in ("0000:07:00.0", "0000:0f:00.0"):
        for name, value in GPU.items():
            path = tmp_path / f"sys/bus/pci/devices/{bus}/{name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)
    (tmp_path / "proc").mkdir()
    found = _by_subject(pcie.CHECK.run(LocalHost(str(tmp_path)), DEFAULT))
    assert found["gpu-links"].status is Status.OK
    assert found["gpu-links"].evidence["NVML: GPU0 nvmlDeviceGetCurrPcieLinkGeneration"] == "4"
    assert found["0000:0f:00.0"].status is Status.OK
    assert found["0000:0f:00.0"].summary.endswith(
        "link at Gen1 (max Gen4): normal when idle; judged under load (utilization 0%, P8)"
    )


def test_sysfs_links_need_no_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    host = pci_tree(
        tmp_path, {"pci0000:00/0000:00:01.0/0000:02:00.0": {**GPU, **LINK16, "max_link_width": "16"}}
    )
    facts = pcie.collect(host)
    assert facts.gpu_report is None
    assert "pynvml" not in sys.modules


def test_a_link_is_at_its_max_only_when_both_halves_are_known(tmp_path: Path) -> None:
    # The 2080 Ti pair with <max_link_gen> N/A: the width (16x of 16x) is fine, the generation unjudged.
    xml = _recorded("smix-pai-2x-rtx2080ti").replace(
        "<max_link_gen>3</max_link_gen>", "<max_link_gen>N/A</max_link_gen>"
    )
    findings = pcie.CHECK.run(_smi_host(tmp_path, xml), DEFAULT)
    assert [(s, subject) for s, subject, _ in _gpu_links(findings)] == [
        (Status.SKIPPED, "0000:02:00.0"),
        (Status.SKIPPED, "0000:03:00.0"),
    ]
    assert _by_subject(findings)["0000:02:00.0"].summary.endswith("generation not reported: not judged")
