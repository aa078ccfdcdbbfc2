"""The kernel log, and the NVIDIA driver's Xid reports in it.

Source: `dmesg -r`, run through the Host like every other command, so that this machine, a snapshot
(`nodeagent snapshot` records the output of the commands the checks declare) and a node pulled over
SSH are read the same way. util-linux dmesg reads /dev/kmsg itself: it opens it non-blocking and
reads one record per read() until EAGAIN (dmesg(1); the record format is the kernel's ABI,
https://www.kernel.org/doc/Documentation/ABI/testing/dev-kmsg). Reading /dev/kmsg directly would
need a Host primitive and a recorder path of its own: a plain read() of /dev/kmsg blocks after the
last record, so it cannot be one of the declared files. A kernel that restricts the log
(kernel.dmesg_restrict=1) refuses an unprivileged reader: that is reported as "not readable", never
as "no Xid".

Lines are read by structure; each is one of:
- a /dev/kmsg record "PRIO,SEQ,USEC,FLAGS[,...];MESSAGE", followed by " KEY=VALUE" continuation
  lines (the ABI document's format: a capture of /dev/kmsg itself);
- `dmesg -r`: "<PRIO>[SECONDS.MICROSECONDS] MESSAGE" (no timestamp with printk.time=0 on busybox);
- `dmesg`: "[SECONDS.MICROSECONDS] MESSAGE";
- anything else (journalctl, a syslog file, `dmesg -T`): the whole line is the message.
PRIO is the facility times 8 plus the level. User space may write to /dev/kmsg, but never with
facility 0 (LOG_KERN), "to make sure that the origin of the messages can always be reliably
determined" (the ABI document): a record of another facility was not printed by the driver.

Xid messages (https://docs.nvidia.com/deploy/xid-errors/index.html, "Viewing Xid messages"):
"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus." The address is
domain:bus:device of the GPU (function 0); older drivers omit "PCI:" (and the oldest the domain,
which is then 0000), newer ones sometimes add the function, and with MIG the GPU instance follows
("(PCI:0000:01:00 GPU-I:05)", https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/user-visible-statistics.html);
pid and name are absent for errors raised outside a process ("pid='<unknown>'" when the driver
could not tell).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodeagent.facts import pci

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from nodeagent.host import Host

COMMAND = ("dmesg", "-r")
SOURCE = "dmesg -r"
# dmesg only copies the kernel's buffer (1 MiB at most by default): a second is plenty; a kernel
# log that takes longer is a machine in trouble, reported as not readable.
TIMEOUT_S = 10.0
LOG_KERN = 0  # syslog facility of the kernel's own messages

_KMSG = re.compile(r"^(\d{1,20}),(\d{1,20}),(-?\d{1,20}),[^;]*;(.*)$")
_RAW = re.compile(r"^<(\d{1,20})>(?:\[\s*(\d{1,20})\.(\d{1,20})\]\s?)?(.*)$")
_TIMED = re.compile(r"^\[\s*(\d{1,20})\.(\d{1,20})\]\s?(.*)$")
_KMSG_CONTINUATION = re.compile(r"^ [A-Z][A-Z0-9_]*=")

XID_MARK = "NVRM: Xid"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?:\s+GPU-I:(?P<gi>\d{1,20}))?\): (?P<xid>\d{1,20})(?:,\s*(?P<rest>.*?))?\s*$"
)
_PROCESS = re.compile(r"pid=(?P<pid>[^,]*)(?:,\s*name=(?P<name>[^,]*))?(?:,\s*(?P<detail>.*))?$")


@dataclass(frozen=True)
class Record:
    """One kernel log record. Facility, level, sequence and time are None where the format lacks them."""

    message: str
    line: str  # as read, for evidence
    facility: int | None = None
    level: int | None = None
    seq: int | None = None
    usec: int | None = None  # microseconds since boot, the kernel's record timestamp

    @property
    def from_kernel(self) -> bool | None:
        """Printed by the kernel (facility 0); None where the format does not say."""
        return None if self.facility is None else self.facility == LOG_KERN

    @property
    def seconds(self) -> float | None:
        return None if self.usec is None else self.usec / 1e6


@dataclass(frozen=True)
class KernelLog:
    """The kernel log of one host: its records, or why there are none."""

    source: str
    records: tuple[Record, ...] = ()
    reason: str | None = None  # not readable: not recorded, no tool, no permission, empty
    evidence: Mapping[str, str] = field(default_factory=dict)

    def span(self) -> str:
        """What the records cover, for evidence: "0.00 s to 5600.12 s after boot" and whether it
        starts at boot (the ring buffer drops its oldest records when full)."""
        times = [r.seconds for r in self.records if r.seconds is not None]
        if not times:
            return f"{len(self.records)} records, without timestamps"
        start, end = times[0], times[-1]
        since = "from boot" if start == 0 else "earlier messages were overwritten"
        return f"{start:.2f} s to {end:.2f} s after boot ({since})"


def _usec(seconds: str, fraction: str) -> int:
    return int(seconds) * 1_000_000 + int(fraction.ljust(6, "0")[:6])


def parse_line(line: str) -> Record | None:
    """One line of any of the formats above; None for a blank line or a /dev/kmsg continuation."""
    text = line.rstrip("\r\n")
    # " KEY=VALUE" after a /dev/kmsg record (SUBSYSTEM=, DEVICE=) is metadata of the record above.
    if not text.strip() or _KMSG_CONTINUATION.match(text):
        return None
    m = _KMSG.match(text)
    if m:
        prio = int(m.group(1))
        return Record(m.group(4), text, prio >> 3, prio & 7, int(m.group(2)), int(m.group(3)))
    m = _RAW.match(text)
    if m:
        prio = int(m.group(1))
        usec = _usec(m.group(2), m.group(3)) if m.group(2) is not None else None
        return Record(m.group(4), text, prio >> 3, prio & 7, usec=usec)
    m = _TIMED.match(text)
    if m:
        return Record(m.group(3), text, usec=_usec(m.group(1), m.group(2)))
    return _plain(text)


def _plain(text: str) -> Record:
    return Record(text.strip(), text)


def parse(text: str) -> tuple[Record, ...]:
    """Every record of a kernel log in any of the formats above, in order."""
    found = (parse_line(line) for line in text.splitlines())
    return tuple(r for r in found if r is not None)


def collect(host: Host) -> KernelLog:
    """The kernel log of `host`, read once per run (the xid check and others share it)."""
    return host.memo("facts.kernel_log", lambda: _collect(host))


def _collect(host: Host) -> KernelLog:
    result = host.run(COMMAND, timeout=TIMEOUT_S)
    if not result.ok:
        why = result.first_line()
        if result.exited == 127:
            what = f"`{SOURCE}` not available ({why})"
        elif result.exited == 124:
            what = f"`{SOURCE}` did not finish ({why})"
        else:
            what = f"the kernel log is not readable ({why})"
        hint = " (kernel.dmesg_restrict: run as root)" if "permitted" in why.lower() else ""
        return KernelLog(SOURCE, reason=what + hint, evidence={SOURCE: why})
    records = parse(result.stdout)
    if not records:
        return KernelLog(SOURCE, reason=f"`{SOURCE}` printed no record", evidence={SOURCE: "empty output"})
    return KernelLog(SOURCE, records=records)


# -- Xid -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class XidEvent:
    """One "NVRM: Xid" report."""

    xid: int
    gpu: str  # the GPU's PCI address as sysfs writes it: "0000:3b:00.0"
    detail: str  # the text after the number (and after pid/name)
    record: Record
    pid: str | None = None  # None where the driver printed "'<unknown>'" or nothing
    process: str | None = None
    gpu_instance: int | None = None  # the MIG GPU instance, where the driver names one


@dataclass(frozen=True)
class XidScan:
    """The Xid reports of a kernel log: parsed, unparsable, and written by user space (ignored)."""

    events: tuple[XidEvent, ...] = ()
    unparsable: tuple[Record, ...] = ()
    not_kernel: tuple[Record, ...] = ()


def gpu_address(bus: str) -> str:
    """NVRM's "0000:3b:00" (no function: a GPU is function 0) -> "0000:3b:00.0"; "3b:00" (no
    domain) -> "0000:3b:00.0"."""
    full = bus if bus.count(":") == 2 else f"0000:{bus}"
    return pci.normalize_address(full if "." in full else f"{full}.0")


def parse_xid(record: Record) -> XidEvent | None:
    """The Xid report in `record`'s message, None when its text does not have the structure."""
    start = record.message.find(XID_MARK)
    m = _XID.match(record.message, start) if start >= 0 else None
    if m is None:
        return None
    rest = m.group("rest") or ""
    proc = _PROCESS.match(rest)
    pid = name = None
    if proc:
        pid, name, rest = _known(proc.group("pid")), _known(proc.group("name")), proc.group("detail") or ""
    return XidEvent(
        xid=int(m.group("xid")),
        gpu=gpu_address(m.group("bus")),
        detail=rest.strip(),
        record=record,
        pid=pid,
        process=name,
        gpu_instance=int(m.group("gi")) if m.group("gi") else None,
    )


def _known(value: str | None) -> str | None:
    """A pid or process name as printed; None for "'<unknown>'" (no process to blame) or empty."""
    text = (value or "").strip().strip("'")
    return None if not text or text == "<unknown>" else text


def scan_xids(records: Iterable[Record]) -> XidScan:
    events: list[XidEvent] = []
    unparsable: list[Record] = []
    not_kernel: list[Record] = []
    for record in records:
        if XID_MARK not in record.message:
            continue
        if record.from_kernel is False:
            not_kernel.append(record)
            continue
        event = parse_xid(record)
        if event is None:
            unparsable.append(record)
        else:
            events.append(event)
    return XidScan(tuple(events), tuple(unparsable), tuple(not_kernel))


# -- PCI enumeration -------------------------------------------------------------------------------
# pci_setup_device() prints every device it finds while scanning the bus, at boot and on a rescan:
# "pci 0000:06:00.0: [10de:2330] type 00 class 0x030200" (drivers/pci/probe.c; kernels since 6.7
# append the port type, "PCIe Endpoint"). It is logged at KERN_DEBUG on older kernels, which the
# ring buffer keeps all the same (dmesg shows every level it stores).
_ENUMERATED = re.compile(
    r"^pci (?P<address>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
    r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\] type [0-9a-fA-F]{2} "
    r"class (?P<class>0x[0-9a-fA-F]{6})\b"
)
# PCI base classes 0x03 (display): 0x0300 VGA, 0x0302 3D controller (PCI Code and ID Assignment).
_DISPLAY_SUBCLASSES = ("0x0300", "0x0302")


@dataclass(frozen=True)
class Enumerated:
    """One device as the kernel enumerated it."""

    address: str  # as sysfs writes it: "0000:06:00.0"
    vendor: str  # "0x10de"
    device: str  # "0x2330"
    class_code: str  # "0x030200"
    record: Record

    @property
    def nvidia_gpu(self) -> bool:
        return self.vendor == pci.VENDOR_NVIDIA and self.class_code[:6] in _DISPLAY_SUBCLASSES


def enumerated(records: Iterable[Record]) -> dict[str, Enumerated]:
    """Every device the kernel log shows being enumerated, by address (the last report wins: a
    rescan re-enumerates a device at the same address)."""
    out: dict[str, Enumerated] = {}
    for record in records:
        m = _ENUMERATED.match(record.message)
        if m is None or record.from_kernel is False:
            continue
        address = pci.normalize_address(m.group("address"))
        out[address] = Enumerated(
            address,
            f"0x{m.group('vendor').lower()}",
            f"0x{m.group('device').lower()}",
            m.group("class").lower(),
            record,
        )
    return out
