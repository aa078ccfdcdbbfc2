"""A GPU the kernel enumerated and the PCI tree no longer holds (the xid check's "bus" findings).

The kernel log is a real guest boot on a DGX H100 (tests/fixtures/kmsg/pci-enumeration-dgx-h100-
guest-lkml): it enumerates one NVIDIA device, `pci 0000:06:00.0: [10de:2330] type 00 class
0x030200` (vendor 10de NVIDIA, class 0302 3D controller: the H100 passed through), besides Intel,
virtio (1af4) and QEMU (1b36) devices. The PCI trees are made from the addresses the same log
enumerates.
"""

from __future__ import annotations

from nodeagent.checks import xid
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import kmsg
from tests.support.paths import FIXTURES

LOG = FIXTURES / "kmsg" / "pci-enumeration-dgx-h100-guest-lkml" / "kernel.log"
H100 = "0000:06:00.0"
# Every address the log shows the kernel enumerating ("pci ADDRESS: [VVVV:DDDD] type ..").
ENUMERATED = {
    "0000:00:1f.0",
    "0000:00:1f.2",
    "0000:00:1f.3",
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:03:00.0",
    "0000:04:00.0",
    "0000:05:00.0",
    H100,
}


def log() -> kmsg.KernelLog:
    return kmsg.KernelLog(kmsg.SOURCE, records=kmsg.parse(LOG.read_text()))


def bus(tree: frozenset[str] | None) -> list[Finding]:
    return [
        f
        for f in xid.evaluate(xid.Facts(log(), tree), xid.Params())
        if f.check_id == "xid" and f.subject != "kernel log"
    ]


def test_the_enumeration_is_read_by_structure() -> None:
    found = kmsg.enumerated(log().records)
    assert set(found) == ENUMERATED
    h100 = found[H100]
    assert (h100.vendor, h100.device, h100.class_code, h100.nvidia_gpu) == (
        "0x10de",
        "0x2330",
        "0x030200",
        True,
    )
    assert [a for a, e in found.items() if e.nvidia_gpu] == [H100]


def test_a_gpu_still_on_the_bus_is_ok() -> None:
    (f,) = bus(frozenset(ENUMERATED))
    assert (f.status, f.subject) == (Status.OK, "bus")
    assert f.summary == "the 1 NVIDIA GPU(s) the kernel enumerated are all in the PCI tree"


def test_a_gpu_gone_from_the_tree_fails() -> None:
    (f,) = bus(frozenset(ENUMERATED - {H100}))
    assert (f.status, f.subject) == (Status.FAIL, H100)
    assert f.summary.startswith(f"GPU {H100} [10de:2330] was enumerated by the kernel and is gone")
    assert f.evidence[f"/sys/bus/pci/devices/{H100}"] == "(absent)"
    assert "pci 0000:06:00.0: [10de:2330]" in f.evidence[f"dmesg -r: {H100}"]


def test_an_unreadable_tree_is_skipped_and_a_log_without_enumeration_says_nothing() -> None:
    (f,) = bus(None)
    assert f.status is Status.SKIPPED and "/sys/bus/pci/devices not readable" in f.summary
    # The ring buffer dropped the boot messages: no evidence either way, no finding.
    late = kmsg.KernelLog(
        kmsg.SOURCE, records=kmsg.parse("[ 9999.0] NVRM: loading NVIDIA UNIX Open Kernel Module\n")
    )
    assert [f for f in xid.evaluate(xid.Facts(late, frozenset()), xid.Params()) if f.subject == "bus"] == []


def test_a_line_written_by_user_space_is_not_the_kernels() -> None:
    # <14> is facility 1 (user), level 6: `echo ... > /dev/kmsg` by a process (ABI document).
    forged = kmsg.parse("<14>[ 1.0] pci 0000:07:00.0: [10de:2330] type 00 class 0x030200\n")
    assert kmsg.enumerated(forged) == {}
