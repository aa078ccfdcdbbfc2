"""PCIe links and peer-to-peer: downtrained links (GPUs and NICs first), IOMMU and ACS settings.

A GPU trained to x8 instead of x16 moves half the data between host and device; a NIC at half its
lanes cannot feed its port. Links are read from sysfs (Documentation/ABI/testing/sysfs-bus-pci:
current_link_speed/width against max_link_speed/width, the device's own Link Capabilities).

Where sysfs has no link attributes for a GPU (a recording holding only `nvidia-smi -q -x`, older
kernels, some virtual machines), the GPU's driver says the same through NVML or `nvidia-smi -q -x`
(<pci_gpu_link_info>): those GPUs are judged from it, each GPU once. GPUs lower their link
generation when idle, so a generation below the maximum counts only while the GPU is busy; a
width below the maximum is a physical matter (slot, riser, bifurcation); and a host whose slot
tops out below the GPU's own maximum (max_host_link_gen < max_device_link_gen) limits the link
without any fault of the GPU.

GPU peer-to-peer (GPUDirect P2P between GPUs, GPUDirect RDMA between a GPU and a NIC) goes
directly through the PCIe switch that the two devices share, unless Access Control Services (ACS)
on the switch's ports redirect it up to the root complex, or the IOMMU translates it: "IO
virtualization (also known as VT-d or IOMMU) can interfere with GPU Direct by redirecting all PCI
point-to-point traffic to the CPU root complex, causing a significant performance reduction or
even a hang" (NCCL troubleshooting,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, param
from nodeagent.core import parse
from nodeagent.core.finding import Finding, Status, not_recorded
from nodeagent.facts import gpus, network, nvidia_smi, nvml, pci, system
from nodeagent.facts.gpu_report import GpuHealth, GpuReport, PcieLink
from nodeagent.facts.pci import PCI_DIR, PciDevice
from nodeagent.host import Host

ID = "pcie"
IOMMU_DIR = "/sys/kernel/iommu_groups"
NCCL_ACS_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"
SMI_DOC = "https://docs.nvidia.com/deploy/nvidia-smi/index.html"
_LINK_ATTRS = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
_IOMMU_PARAMS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict")

# PCIe Base Specification, 7.7.8 ACS Extended Capability: ID 0x000D; Capability register at +4,
# Control register at +6. Control bits in lspci's names (ls-ecaps.c, cap_acs).
ACS_CAP_ID = 0x000D
EXT_CAP_START = 0x100
CONFIG_SPACE_EXP = 4096
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# Request Redirect, Completion Redirect and Egress Control send peer-to-peer traffic up to the root
# complex or block it; the other bits (source validation, translation blocking) do not reroute it.
ACS_P2P_REDIRECT = (1 << 2) | (1 << 3) | (1 << 5)

# Per-lane payload rate of each generation, one direction, after line encoding (8b/10b up to 5 GT/s,
# 128b/130b from 8 GT/s; 64 GT/s is PCIe 6.0 FLIT mode): GB/s.
_LANE_GBPS = {2.5: 0.25, 5.0: 0.5, 8.0: 0.985, 16.0: 1.969, 32.0: 3.938, 64.0: 7.563}
_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class Params:
    gpu_under_load: bool = param(
        False,
        "GPUs lower their link speed when idle to save power: nvidia-smi documents that the current "
        "link generation and width 'may be reduced when the GPU is not in use' "
        f"({SMI_DOC}). By default a GPU below its max speed at full width is a WARN to re-check under "
        "load; set true when the check runs while the GPUs are busy, to make it a FAIL.",
    )
    busy_utilization_pct: float = param(
        20.0,
        "A GPU whose utilization (the share of the last sample period with a kernel running, "
        f"nvidia-smi's utilization.gpu, {SMI_DOC}) is above this is busy, and its link should run at "
        "its maximum generation; below it, a lower generation is the driver's idle power saving.",
    )
    busy_max_pstate: int = param(
        2,
        "A GPU in this performance state or a faster one (P0, P1: maximum performance; P2: "
        f"balanced; P8 and up: idle, {SMI_DOC}) counts as busy for the link generation.",
    )
    allow_acs_redirect: bool = param(
        False,
        "ACS P2P redirect on PCIe switch ports sends GPU peer-to-peer traffic through the root "
        f"complex ({NCCL_ACS_DOC}). Set true on hosts that pass GPUs to VMs, where that isolation is "
        "the point (https://docs.kernel.org/driver-api/vfio.html).",
    )
    min_gpu_width: int = param(
        0,
        "The lanes every GPU's link must run at (16 on a server GPU in its intended slot). In sysfs a "
        "GPU below its own maximum width FAILs anyway; where only the driver reports the link (NVML, "
        "`nvidia-smi -q -x`) a width below this FAILs, and without it (0) a width below the GPU's "
        "maximum is a WARN, since the slot may be narrower by design. "
        "A playbook's `expect: {gpu_min_pcie_width: 16}` sets it.",
    )
    allow_iommu_translation: bool = param(
        False,
        "An IOMMU translating GPU DMA interferes with GPUDirect P2P and RDMA "
        f"({NCCL_ACS_DOC}); bare-metal training nodes run it off or in passthrough (iommu=pt, "
        "https://docs.kernel.org/admin-guide/kernel-parameters.html). Set true on virtualisation hosts.",
    )


@dataclass(frozen=True)
class Acs:
    """What the config space of one bridge says about ACS."""

    readable: int  # bytes of config space readable (64 without root, 256 without extended space)
    control: int | None = None  # ACS Control register; None: no ACS capability or not readable
    capability: int | None = None
    problem: str | None = None  # the extended capability list is corrupt

    @property
    def extended(self) -> bool:
        return self.readable >= EXT_CAP_START + 8

    def describe(self) -> str:
        if self.problem:
            return self.problem
        if not self.extended:
            return f"only {self.readable} bytes of config space readable"
        if self.control is None:
            return "no ACS capability"
        flags = " ".join(f"{n}{'+' if self.control >> i & 1 else '-'}" for i, n in enumerate(ACS_BITS))
        return f"ACSCtl: {flags} (0x{self.control:04x})"


def acs_from_config(data: bytes) -> Acs:
    """Find the ACS extended capability in a config space dump, as the kernel walks the list.

    drivers/pci/pci.c, pci_find_next_ext_capability: start at 0x100, follow "next" offsets (bits
    31:20, dword aligned, never below 0x100), at most (4096 - 256) / 8 steps.
    """
    size = len(data)
    if size < EXT_CAP_START + 8:
        return Acs(size)
    pos, ttl = EXT_CAP_START, (CONFIG_SPACE_EXP - EXT_CAP_START) // 8
    while ttl > 0:
        ttl -= 1
        if pos + 8 > size:
            return Acs(size, problem=f"extended capability at 0x{pos:x} runs past the {size} bytes read")
        (header,) = struct.unpack_from("<I", data, pos)
        if header in (0, 0xFFFFFFFF):  # no extended capabilities (or an all-ones read)
            return Acs(size)
        if header & 0xFFFF == ACS_CAP_ID:
            cap, ctl = struct.unpack_from("<HH", data, pos + 4)
            return Acs(size, control=ctl, capability=cap)
        nxt = (header >> 20) & 0xFFC
        if nxt == 0:
            return Acs(size)
        if nxt < EXT_CAP_START:
            return Acs(size, problem=f"extended capability list points below 0x100 (0x{nxt:x} at 0x{pos:x})")
        pos = nxt
    return Acs(size, problem="extended capability list loops")


@dataclass(frozen=True)
class Facts:
    devices: list[PciDevice]
    gpus: list[str]  # PCI addresses of GPUs and accelerators
    nics: list[str]  # PCI addresses of NICs: network class or RDMA devices (a QLogic HCA is 0x0c06)
    unparsable: dict[str, str]  # link attribute path -> raw value that did not parse
    cmdline: str | None
    iommu_groups: list[str] | None  # None: /sys/kernel/iommu_groups absent
    gpu_iommu: dict[str, tuple[str | None, str | None]]  # GPU -> (group, group type)
    acs: dict[str, Acs | None] = field(default_factory=dict)  # bridge above a GPU/NIC -> ACS; None: no config
    # What the GPUs' driver says (NVML here, `nvidia-smi -q -x` on recordings): read only when a GPU
    # has no sysfs link to judge, or a recording shows no GPU in sysfs. None: not read.
    gpu_report: GpuReport | None = None
    pci_recorded: bool = True  # False: a recording that does not hold /sys/bus/pci/devices (Host.recorded)


def _bad_link_value(attr: str, raw: str) -> bool:
    """A present link attribute that is neither a value nor the kernel's "Unknown" (link down).

    drivers/pci/pci-sysfs.c prints "Unknown" (older kernels "Unknown speed") for a speed it cannot
    name, and width 0 for a link that is down: both are data, not corruption.
    """
    text = raw.strip()
    if text.lower().startswith("unknown"):
        return False
    if attr.endswith("speed"):
        return parse.link_speed_gts(text) is None
    return re.fullmatch(r"x?\d+", text) is None


def collect(host: Host) -> Facts:
    devices = pci.collect(host)
    by_addr = pci.by_address(devices)
    gpu_addrs = sorted(
        {g.pci_address for g in gpus.collect(host) if g.pci_address}
        | {d.address for d in devices if d.kind == "accelerator"}
    )
    rdma = {p.pci_address for p in network.collect_rdma(host) if p.pci_address}
    nic_addrs = sorted({d.address for d in devices if d.kind == "nic"} | (rdma & set(by_addr)))
    unparsable = _unparsable_links(host, devices)
    groups = host.listdir(IOMMU_DIR)
    gpu_iommu = _gpu_iommu(host, gpu_addrs) if groups else {}
    acs = _acs_above(host, by_addr, gpu_addrs, nic_addrs)
    return Facts(
        pci_recorded=host.recorded(PCI_DIR),
        devices=devices,
        gpus=gpu_addrs,
        nics=nic_addrs,
        unparsable=unparsable,
        cmdline=system.collect(host).cmdline,
        iommu_groups=groups,
        gpu_iommu=gpu_iommu,
        acs=acs,
        gpu_report=nvml.collect(host) if _driver_needed(host, by_addr, gpu_addrs) else None,
    )


def _unparsable_links(host: Host, devices: list[PciDevice]) -> dict[str, str]:
    """Link attribute path -> raw value, for the attributes present but not parsable."""
    unparsable: dict[str, str] = {}
    for d in devices:
        values = (d.speed_gts, d.width, d.max_speed_gts, d.max_width)
        for attr, value in zip(_LINK_ATTRS, values, strict=True):
            # Only values that did not parse are read again, to tell "absent" from "garbage".
            if value is not None:
                continue
            path = f"{PCI_DIR}/{d.address}/{attr}"
            raw = host.read(path)
            if raw is not None and _bad_link_value(attr, raw):
                # ascii(): control bytes of a corrupt file must not reach a terminal raw
                unparsable[path] = ascii(raw.strip()[:40])[1:-1] or "(empty)"
    return unparsable


def _gpu_iommu(host: Host, gpu_addrs: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """GPU -> (its IOMMU group, the group's type) as far as they can be read."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for a in gpu_addrs:
        link = host.readlink(f"{PCI_DIR}/{a}/iommu_group")
        group = link.rstrip("/").rsplit("/", 1)[-1] if link else None
        group = group if group and parse.is_decimal(group) else None
        kind = host.read_value(f"{IOMMU_DIR}/{group}/type") if group else None
        out[a] = (group, kind)
    return out


def _acs_above(
    host: Host, by_addr: dict[str, PciDevice], gpu_addrs: list[str], nic_addrs: list[str]
) -> dict[str, Acs | None]:
    """The ACS of every bridge above a GPU or NIC (none looked for on a node without GPUs)."""
    acs: dict[str, Acs | None] = {}
    if not gpu_addrs:
        return acs
    for a in sorted(set(gpu_addrs) | set(nic_addrs)):
        for bridge in by_addr[a].upstream if a in by_addr else []:
            if bridge not in acs:
                data = host.read_bytes(f"{PCI_DIR}/{bridge}/config")
                acs[bridge] = None if data is None else acs_from_config(data)
    return acs


def _driver_needed(host: Host, by_addr: dict[str, PciDevice], gpu_addrs: list[str]) -> bool:
    """Whether some GPU's link can only come from its driver (memoized: the gpu check reads it too).

    On this machine NVML is asked only for GPUs that sysfs shows without a judgeable link, so
    `nodeagent check --only pcie` on a healthy node never loads it.
    """
    if not gpu_addrs:
        return host.kind != "local"  # a recording may hold only nvidia-smi's view of its GPUs
    return any(a not in by_addr or not _judgeable(by_addr[a]) for a in gpu_addrs)


# -- links ---------------------------------------------------------------------------------------
def _gen(speed: float | None) -> str:
    if speed is None:
        return "?"
    gen = _GEN.get(speed)
    return f"{speed:g} GT/s" + (f" (Gen{gen})" if gen else "")


def _gbps(speed: float | None, width: int | None) -> float | None:
    if speed is None or width is None or speed not in _LANE_GBPS:
        return None
    return _LANE_GBPS[speed] * width


def _judgeable(d: PciDevice) -> bool:
    return (d.speed_gts is not None and d.max_speed_gts is not None) or (
        d.width is not None and d.max_width is not None
    )


def _has_link_attrs(d: PciDevice) -> bool:
    return any(v is not None for v in (d.speed_gts, d.width, d.max_speed_gts, d.max_width))


def _short(d: PciDevice) -> tuple[bool, bool]:
    """(speed below max, width below max)."""
    slow = d.speed_gts is not None and d.max_speed_gts is not None and d.speed_gts < d.max_speed_gts
    narrow = d.width is not None and d.max_width is not None and d.width < d.max_width
    return slow, narrow


def _explained_by(d: PciDevice, partners: list[PciDevice]) -> bool:
    """The link trained to the best both ends support: a partner's max is what `d` runs at.

    A root port's x16 capability linked to a x1 BMC is not downtrained: its partner is x1.
    """
    slow, narrow = _short(d)
    for p in partners:
        speed_ok = not slow or (
            p.max_speed_gts is not None and d.speed_gts is not None and p.max_speed_gts <= d.speed_gts
        )
        width_ok = not narrow or (p.max_width is not None and d.width is not None and p.max_width <= d.width)
        if speed_ok and width_ok:
            return True
    return False


def _evidence(d: PciDevice) -> dict[str, str]:
    base = f"{PCI_DIR}/{d.address}"
    ev = {
        f"{base}/current_link_speed": _gen(d.speed_gts),
        f"{base}/current_link_width": f"x{d.width}" if d.width else "?",
        f"{base}/max_link_speed": _gen(d.max_speed_gts),
        f"{base}/max_link_width": f"x{d.max_width}" if d.max_width else "?",
    }
    if d.driver:
        ev[f"{base}/driver"] = d.driver
    return ev


def _link_text(d: PciDevice) -> str:
    return f"x{d.width or '?'} {_gen(d.speed_gts)}, max x{d.max_width or '?'} {_gen(d.max_speed_gts)}"


def _role(d: PciDevice, f: Facts) -> str:
    if d.address in f.gpus:
        return "gpu"
    if d.address in f.nics:
        return "nic"
    return d.kind


def _downtrained(f: Facts, p: Params) -> tuple[list[Finding], int]:
    """Findings for links below their capability; also the count judged at full capability."""
    by_addr = pci.by_address(f.devices)
    children: dict[str, list[PciDevice]] = {}
    for d in f.devices:
        if d.upstream:
            children.setdefault(d.upstream[-1], []).append(d)
    out: list[tuple[int, str, Finding]] = []
    full = 0
    for d in f.devices:
        if not _judgeable(d):
            continue
        slow, narrow = _short(d)
        if not (slow or narrow):
            full += 1
            continue
        role = _role(d, f)
        parent = by_addr.get(d.upstream[-1]) if d.upstream else None
        if role in ("gpu", "nic"):
            out.append((0 if role == "gpu" else 1, d.address, _endpoint_downtrained(d, role, parent, p)))
            continue
        below = children.get(d.address, [])
        if d.kind == "bridge" and not below:
            continue  # a port with nothing below it (an empty slot) has no link to judge
        # A port's link is also its partner's: when the partner cannot do more, nothing is lost.
        if _explained_by(d, ([parent] if parent else []) + below):
            full += 1
            continue
        # The endpoint below reports the same link: one finding per link, on the device.
        if any(c.width == d.width and c.speed_gts == d.speed_gts and c.downtrained for c in below):
            continue
        out.append((2, d.address, _port_downtrained(d, parent)))
    return [fi for _, _, fi in sorted(out, key=lambda t: (t[0], t[1]))], full


def _downtrained_evidence(d: PciDevice, parent: PciDevice | None) -> dict[str, str]:
    """The link's attributes, and the maxima of the port above it."""
    ev = _evidence(d)
    if parent is not None and parent.max_width is not None:
        ev[f"{PCI_DIR}/{parent.address}/max_link_width"] = f"x{parent.max_width} (the port above)"
    if parent is not None and parent.max_speed_gts is not None:
        ev[f"{PCI_DIR}/{parent.address}/max_link_speed"] = f"{_gen(parent.max_speed_gts)} (the port above)"
    return ev


def _shortfall(d: PciDevice) -> tuple[str, str]:
    """What is below capability ("width", "speed", "speed and width"), and the bandwidth it costs."""
    slow, narrow = _short(d)
    now, cap = _gbps(d.speed_gts, d.width), _gbps(d.max_speed_gts, d.max_width)
    rate = f"; about {now:.1f} of {cap:.1f} GB/s per direction" if now is not None and cap else ""
    what = "width" if narrow and not slow else "speed" if slow and not narrow else "speed and width"
    return what, rate


def _endpoint_downtrained(d: PciDevice, role: str, parent: PciDevice | None, p: Params) -> Finding:
    """A GPU or NIC below its link capability: FAIL, or WARN for a GPU that may be idle."""
    slow, narrow = _short(d)
    what, rate = _shortfall(d)
    slot_limited = parent is not None and _explained_by(d, [parent])
    idle = role == "gpu" and slow and not narrow and not p.gpu_under_load
    note = (
        ": possibly idle power saving (GPUs lower their link speed when not in use); re-check under load"
        if idle
        else ": the port above supports no more; move the card to a full slot"
        if slot_limited
        else ""
    )
    remediation = (
        "Re-check while a job runs: nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.current,"
        "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv. "
        if role == "gpu"
        else ""
    ) + (
        "Move the card to a slot wired for its full width and speed (check the board manual and the "
        "BIOS bifurcation setting)."
        if slot_limited
        else f"Reseat the card, check the riser/cable and the BIOS PCIe speed setting (Auto), then "
        f"compare LnkCap and LnkSta: lspci -vv -s {d.address} | grep -E 'LnkCap|LnkSta'."
    )
    return Finding(
        ID,
        Status.WARN if idle else Status.FAIL,
        f"{role.upper()} {d.address} link {what} below capability ({_link_text(d)}){rate}{note}",
        _downtrained_evidence(d, parent),
        expected=f"x{d.max_width or '?'} at {_gen(d.max_speed_gts)}",
        remediation=remediation,
        subject=d.address,
    )


def _port_downtrained(d: PciDevice, parent: PciDevice | None) -> Finding:
    """Another device (a bridge, storage) below its link capability, its partners able to do more."""
    what, rate = _shortfall(d)
    return Finding(
        ID,
        Status.WARN,
        f"{d.kind} {d.address} link {what} below capability ({_link_text(d)}){rate}",
        _downtrained_evidence(d, parent),
        expected=f"x{d.max_width or '?'} at {_gen(d.max_speed_gts)}",
        remediation=(
            f"Reseat the device or its riser and check the BIOS PCIe speed setting; compare LnkCap and "
            f"LnkSta: lspci -vv -s {d.address} | grep -E 'LnkCap|LnkSta'."
        ),
        subject=d.address,
    )


def _links(f: Facts, p: Params) -> list[Finding]:
    if not f.devices and not f.pci_recorded:
        return [not_recorded(ID, PCI_DIR, "links", "PCIe links")]
    if not f.devices:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no PCI devices under {PCI_DIR}",
                {PCI_DIR: "absent or empty"},
                subject="links",
            )
        ]
    findings, full = _downtrained(f, p)
    summary = _links_summary(f, bool(findings), full)
    if summary is not None:
        findings.append(summary)
    if f.unparsable:
        findings.append(
            Finding(
                ID,
                Status.WARN,
                f"{len(f.unparsable)} PCIe link attribute(s) could not be parsed",
                dict(f.unparsable),
                expected="values such as '16.0 GT/s PCIe' and '16'",
                remediation="A corrupt or truncated recording, or a kernel bug: re-record the snapshot, or "
                "compare with lspci -vv on the node.",
                subject="links",
            )
        )
    return findings


def _links_summary(f: Facts, downtrained: bool, full: int) -> Finding | None:
    """One finding for the links not reported one by one: all at capability, or not judgeable."""
    with_attrs = [d for d in f.devices if _has_link_attrs(d)]
    by_driver = {g.pci_address for g in _driver_gpus(f) if g.pcie is not None}
    unjudged = [d for d in with_attrs if not _judgeable(d) and d.address not in by_driver]
    unjudged_ev = {f"{PCI_DIR}/{d.address}/max_link_speed": "absent" for d in unjudged[:20]}
    note = (
        f"{len(unjudged)} device(s) with link attributes not judgeable: no max_link_speed/max_link_width "
        "(older kernels, or a recording without them)"
    )
    if not with_attrs:
        return Finding(
            ID,
            Status.SKIPPED,
            f"none of {len(f.devices)} PCI devices exposes PCIe link attributes (conventional PCI or "
            "virtual devices, or a recording without them)",
            {f"{PCI_DIR}/*/current_link_speed": f"absent on all {len(f.devices)} devices"},
            subject="links",
        )
    if downtrained:
        return Finding(ID, Status.SKIPPED, note, unjudged_ev, subject="links") if unjudged else None
    if full:
        summary = f"{full} PCIe link(s) at the speed and width their two ends support"
        return Finding(
            ID, Status.OK, summary + (f"; {note}" if unjudged else ""), unjudged_ev, subject="links"
        )
    return Finding(ID, Status.SKIPPED, note, unjudged_ev, subject="links")


# -- GPU links from the driver (NVML, or `nvidia-smi -q -x` on recordings) ------------------------
_LINK_FIELDS = ("gen_current", "gen_max", "gen_device_max", "gen_host_max", "width_current", "width_max")
_LOAD_FIELDS = ("utilization_pct", "performance_state")
_GPU_LINKS = "gpu-links"


# Where each source gives a link or load value: the XML path below <gpu>, or the NVML function. A
# report from another source (`nvidia-smi nvlink -s` alone) has no link values at all.
_WHERE = {
    nvidia_smi.SOURCE: {**nvidia_smi.PCIE_PATHS, **nvidia_smi.LOAD_PATHS},
    nvml.SOURCE: {**nvml.PCIE_QUERIES, **nvml.LOAD_QUERIES},
}


def _where(r: GpuReport, name: str) -> str | None:
    return _WHERE.get(r.source, {}).get(name)


def _driver_key(r: GpuReport, g: GpuHealth, name: str) -> str:
    return f"{r.source}: GPU{g.index} {_where(r, name) or name}"


def _driver_gpus(f: Facts) -> list[GpuHealth]:
    """The driver's GPUs whose link sysfs does not judge: each GPU is judged from one source only."""
    if f.gpu_report is None:
        return []
    by_sysfs = {d.address for d in f.devices if _judgeable(d)}
    return [g for g in f.gpu_report.gpus if g.pci_address not in by_sysfs]


def _gen_top(link: PcieLink) -> int | None:
    """The generation the link can reach: max_link_gen, else the lower of the GPU's and the host's."""
    if link.gen_max is not None:
        return link.gen_max
    if link.gen_device_max is not None and link.gen_host_max is not None:
        return min(link.gen_device_max, link.gen_host_max)
    return None


def _busy(g: GpuHealth, p: Params) -> bool | None:
    """Busy by utilization or performance state; None when the driver gave neither."""
    util, pstate = g.utilization_pct, g.performance_state
    if p.gpu_under_load:
        return True
    if (util is not None and util > p.busy_utilization_pct) or (
        pstate is not None and pstate <= p.busy_max_pstate
    ):
        return True
    return None if util is None and pstate is None else False


def _load(g: GpuHealth) -> str:
    parts = [] if g.utilization_pct is None else [f"utilization {g.utilization_pct:g}%"]
    if g.performance_state is not None:
        parts.append(f"P{g.performance_state}")
    return ", ".join(parts) or "load not reported"


def _unparsable_of(r: GpuReport, g: GpuHealth, names: tuple[str, ...]) -> dict[str, str]:
    paths = {_where(r, n) for n in names}
    return {f"{r.source}: GPU{g.index} {k}": why for k, why in g.unparsable.items() if k in paths}


def _driver_evidence(r: GpuReport, g: GpuHealth) -> dict[str, str]:
    link = g.pcie or PcieLink()
    ev: dict[str, str] = {}
    for name in _LINK_FIELDS:
        value = getattr(link, name)
        if value is not None and _where(r, name):
            ev[_driver_key(r, g, name)] = f"{value}x" if name.startswith("width") else str(value)
    if g.utilization_pct is not None:
        ev[_driver_key(r, g, "utilization_pct")] = f"{g.utilization_pct:g} %"
    if g.performance_state is not None:
        ev[_driver_key(r, g, "performance_state")] = f"P{g.performance_state}"
    return ev | _unparsable_of(r, g, _LINK_FIELDS + _LOAD_FIELDS)


def _gen_note(r: GpuReport, g: GpuHealth, link: PcieLink, p: Params) -> tuple[Status, str] | None:
    top = _gen_top(link)
    if link.gen_current is None or top is None or link.gen_current >= top:
        return None
    at = f"link at Gen{link.gen_current} (max Gen{top})"
    busy = _busy(g, p)
    if busy:
        return Status.WARN, f"{at} while the GPU is busy ({_load(g)})"
    if busy is False:
        return Status.OK, f"{at}: normal when idle; judged under load ({_load(g)})"
    bad_load = _unparsable_of(r, g, _LOAD_FIELDS)
    return (
        Status.UNKNOWN if bad_load else Status.SKIPPED
    ), f"{at}, and the GPU's load is unknown: not judged"


def _link_notes(r: GpuReport, g: GpuHealth, link: PcieLink, p: Params) -> list[tuple[Status, str]]:
    """What is worth saying about one link, each with its status; [] for a link at its maximum."""
    notes: list[tuple[Status, str]] = []
    if link.width_current is None or link.width_max is None:
        notes.append((Status.SKIPPED, "width not reported: not judged"))
    elif link.width_current < p.min_gpu_width:
        notes.append((Status.FAIL, f"width x{link.width_current} below the expected x{p.min_gpu_width}"))
    elif link.width_current < link.width_max:
        notes.append(
            (
                Status.WARN,
                f"width x{link.width_current} below its max x{link.width_max} (slot, riser or bifurcation)",
            )
        )
    if link.gen_current is None or _gen_top(link) is None:
        notes.append((Status.SKIPPED, "generation not reported: not judged"))
    gen = _gen_note(r, g, link, p)
    if gen is not None:
        notes.append(gen)
    if link.host_limited:
        host = link.gen_host_max if link.gen_host_max is not None else link.gen_max
        notes.append(
            (
                Status.OK,
                f"the host limits the link to Gen{host} (the GPU supports Gen{link.gen_device_max}): "
                "not a GPU fault",
            )
        )
    return notes


def _combined(statuses: list[Status]) -> Status:
    """WARN or UNKNOWN when any says so; SKIPPED when a part was not judged; else OK."""
    serious = [s for s in statuses if s.rank >= Status.WARN.rank]
    if serious:
        return max(serious, key=lambda s: s.rank)
    return Status.SKIPPED if Status.SKIPPED in statuses else Status.OK


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _link_finding(r: GpuReport, g: GpuHealth, link: PcieLink, notes: list[tuple[Status, str]]) -> Finding:
    status = _combined([s for s, _ in notes])
    top = _gen_top(link)
    shape = (
        f"x{_num(link.width_current)} Gen{_num(link.gen_current)}, max x{_num(link.width_max)} Gen{_num(top)}"
    )
    narrow = any(s in (Status.WARN, Status.FAIL) and t.startswith("width") for s, t in notes)
    return Finding(
        ID,
        status,
        f"{g.label} PCIe link {shape} ({r.source}): " + "; ".join(t for _, t in notes),
        _driver_evidence(r, g),
        expected=f"x{_num(link.width_max)}, and Gen{_num(top)} while busy",
        remediation=_link_remediation(g, narrow) if status in (Status.WARN, Status.FAIL) else "",
        subject=g.subject,
    )


def _link_remediation(g: GpuHealth, narrow: bool) -> str:
    check = (
        "Re-check while a job runs: nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.current,"
        f"pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv ({SMI_DOC})."
    )
    if not narrow:
        return (
            "Check the BIOS PCIe speed setting (Auto) and AER errors in dmesg (a link retrained down). "
            + check
        )
    address = g.pci_address or "ADDRESS"
    return (
        "Reseat the card, check the riser or cable, the slot's wiring (board manual) and the BIOS "
        f"bifurcation setting; compare LnkCap and LnkSta: lspci -vv -s {address} | grep -E 'LnkCap|LnkSta'. "
        + check
    )


def _driver_missing(f: Facts, r: GpuReport) -> list[Finding]:
    """GPUs without a sysfs link, and a driver report without GPUs: say what was not judged."""
    by_sysfs = {d.address for d in f.devices if _judgeable(d)}
    missing = [a for a in f.gpus if a not in by_sysfs]
    if not missing:
        return []
    why = r.error or r.reason or r.failure or ("no link values" if r.gpus else "no GPU listed")
    ev = {f"{PCI_DIR}/{a}/max_link_speed": "absent" for a in missing[:8]} | r.status_evidence()
    return [
        Finding(
            ID,
            Status.UNKNOWN if r.error else Status.SKIPPED,
            f"PCIe links of {len(missing)} GPU(s) not judged: no link attributes in sysfs, and no link "
            f"from {r.source} ({why})",
            ev,
            subject=_GPU_LINKS,
        )
    ]


def _driver_links(f: Facts, p: Params) -> list[Finding]:
    r = f.gpu_report
    if r is None:
        return []
    if not r.gpus or r.source not in _WHERE:
        return _driver_missing(f, r)
    out: list[Finding] = []
    at_max: list[GpuHealth] = []
    blind: list[GpuHealth] = []
    for g in _driver_gpus(f):
        link = g.pcie or PcieLink()
        bad = _unparsable_of(r, g, _LINK_FIELDS)
        if bad:
            out.append(_driver_unparsable(r, g, bad))
            continue
        comparable = (link.width_current is not None and link.width_max is not None) or (
            link.gen_current is not None and _gen_top(link) is not None
        )
        if not comparable:
            blind.append(g)
            continue
        notes = _link_notes(r, g, link, p)
        if notes:
            out.append(_link_finding(r, g, link, notes))
        else:
            at_max.append(g)
    if at_max:
        out.append(_driver_at_max(r, at_max))
    if blind:
        out.append(_driver_blind(r, blind))
    return out


def _driver_unparsable(r: GpuReport, g: GpuHealth, bad: dict[str, str]) -> Finding:
    return Finding(
        ID,
        Status.UNKNOWN,
        f"{g.label} PCIe link unknown: {len(bad)} value(s) in the {r.source} output could not be parsed",
        bad,
        expected="a generation number and a width such as 16x",
        remediation="Re-record the snapshot, or compare with `nvidia-smi -q -d PCI` on the node.",
        subject=g.subject,
    )


def _driver_at_max(r: GpuReport, at_max: list[GpuHealth]) -> Finding:
    return Finding(
        ID,
        Status.OK,
        f"{len(at_max)} GPU PCIe link(s) at their max generation and width ({r.source}; sysfs has no "
        "link attributes for them)",
        {k: v for g in at_max for k, v in _driver_evidence(r, g).items()},
        subject=_GPU_LINKS,
    )


def _driver_blind(r: GpuReport, blind: list[GpuHealth]) -> Finding:
    """GPUs whose driver gives no pair of current and max values to compare."""
    absent = {
        _driver_key(r, g, name): "absent or N/A"
        for g in blind[:8]
        for name in ("gen_current", "gen_max", "width_current", "width_max")
        if getattr(g.pcie or PcieLink(), name) is None
    }
    return Finding(
        ID,
        Status.SKIPPED,
        f"PCIe links of {len(blind)} GPU(s) not judged: neither sysfs nor {r.source} gives both the "
        "current and the max generation or width",
        absent | {k: v for g in blind[:8] for k, v in _driver_evidence(r, g).items()},
        subject=_GPU_LINKS,
    )


# -- IOMMU and ACS -------------------------------------------------------------------------------
def _iommu(f: Facts, p: Params) -> Finding:
    params = system.parse_cmdline(f.cmdline or "")
    ev = {f"/proc/cmdline {k}": (v or "(flag)") for k, v in params.items() if k in _IOMMU_PARAMS}
    if not f.iommu_groups:
        ev[IOMMU_DIR] = "absent" if f.iommu_groups is None else "empty"
        return Finding(
            ID,
            Status.OK,
            "no IOMMU groups: the IOMMU is off, GPU DMA is not translated",
            ev,
            subject="iommu",
        )
    translated, unknown = _gpu_iommu_modes(f, ev)
    passthrough = params.get("iommu") == "pt" or params.get("iommu.passthrough") in ("1", "on", "y")
    if not translated and unknown and passthrough:
        unknown = []  # no group type (kernel < 5.11) but iommu=pt on the command line
    status = Status.OK
    if translated or unknown:
        status = Status.OK if p.allow_iommu_translation else Status.WARN
    return Finding(
        ID,
        status,
        _iommu_summary(translated, unknown, len(f.iommu_groups)),
        ev,
        expected="IOMMU off, or iommu=pt (group type identity) for GPUs",
        remediation="Add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then "
        "update-grub and reboot), or disable VT-d/AMD-Vi in the BIOS on bare-metal training nodes."
        if status is Status.WARN
        else "",
        subject="iommu",
    )


def _gpu_iommu_modes(f: Facts, ev: dict[str, str]) -> tuple[list[str], list[str]]:
    """GPUs whose DMA the IOMMU translates, and GPUs whose IOMMU mode is unknown; evidence in `ev`."""
    translated: list[str] = []
    unknown: list[str] = []
    for gpu, (group, kind) in sorted(f.gpu_iommu.items()):
        path = f"{IOMMU_DIR}/{group}/type" if group else f"{PCI_DIR}/{gpu}/iommu_group"
        ev[path] = kind or ("absent" if group else "no group")
        if kind is None:
            unknown.append(gpu)
        elif kind.startswith("DMA"):
            translated.append(gpu)
    return translated, unknown


def _iommu_summary(translated: list[str], unknown: list[str], groups: int) -> str:
    if translated:
        return (
            f"the IOMMU translates the DMA of GPU(s) {', '.join(translated)}: "
            "P2P and GPUDirect RDMA go through it"
        )
    if unknown:
        return (
            f"the IOMMU is on ({groups} groups) and its mode for GPU(s) {', '.join(unknown)} is "
            "not readable; iommu=pt is not on the command line"
        )
    return f"the IOMMU is on ({groups} groups) and GPUs are in passthrough (identity)"


def _acs(f: Facts, p: Params) -> list[Finding]:
    out: list[Finding] = []
    corrupt = {b: a for b, a in f.acs.items() if a is not None and a.problem}
    if corrupt:
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"config space of {len(corrupt)} bridge(s) could not be parsed",
                {f"{PCI_DIR}/{b}/config": a.describe() for b, a in sorted(corrupt.items())},
                expected="a well-formed extended capability list",
                remediation="A corrupt recording or a failing device: check with sudo lspci -vvv -s BRIDGE.",
                subject="acs",
            )
        )
    if not f.acs:
        out.append(
            Finding(
                ID,
                Status.OK,
                "no PCIe bridge above the GPUs and NICs: ACS cannot redirect their P2P",
                subject="acs",
            )
        )
        return out
    checked = {b: a for b, a in f.acs.items() if a is not None and a.extended and not a.problem}
    if not checked:
        if not corrupt:
            out.append(_acs_unreadable(f))
        return out
    out.append(_acs_redirect(f, p, checked))
    return out


def _acs_unreadable(f: Facts) -> Finding:
    """No bridge's ACS could be read: say why (no root, no extended config space, not recorded)."""
    absent = [b for b, a in f.acs.items() if a is None]
    short = {b: a.readable for b, a in f.acs.items() if a is not None and not a.extended}
    ev = {f"{PCI_DIR}/{b}/config": "absent" for b in sorted(absent)}
    ev |= {f"{PCI_DIR}/{b}/config": f"{n} bytes readable" for b, n in sorted(short.items())}
    why = (
        "only 64 bytes of config space are readable without root: run as root"
        if short and max(short.values()) <= 64
        else "the kernel exposes no extended config space (256 bytes: no MMCONFIG/ECAM access)"
        if short
        else "config space was not recorded"
    )
    return Finding(
        ID,
        Status.SKIPPED,
        f"ACS of {len(f.acs)} bridge(s) above the GPUs and NICs could not be read: {why}",
        ev,
        subject="acs",
    )


def _acs_redirect(f: Facts, p: Params, checked: dict[str, Acs]) -> Finding:
    """Whether ACS on the readable switch ports (not root ports) redirects peer-to-peer traffic."""
    by_addr = pci.by_address(f.devices)
    root_ports = {d.upstream[0] for d in f.devices if d.upstream}
    redirecting = [
        b
        for b, a in sorted(checked.items())
        if b not in root_ports and a.control is not None and a.control & ACS_P2P_REDIRECT
    ]
    ev = {
        f"{PCI_DIR}/{b}/config": a.describe() + (" (root port)" if b in root_ports else "")
        for b, a in sorted(checked.items())
    }
    for b, a in sorted(f.acs.items()):
        if b not in checked and not (a is not None and a.problem):
            ev[f"{PCI_DIR}/{b}/config"] = "absent" if a is None else a.describe()
    if redirecting and not p.allow_acs_redirect:
        names = ", ".join(
            f"{b} ({by_addr[b].vendor}:{by_addr[b].device})" if b in by_addr else b for b in redirecting
        )
        return Finding(
            ID,
            Status.WARN,
            f"ACS redirects peer-to-peer traffic on {len(redirecting)} PCIe switch port(s) above "
            f"GPUs/NICs: {names}",
            ev,
            expected="ReqRedir- CmpltRedir- EgressCtrl- on switch ports "
            "(GPUDirect P2P and RDMA stay in the switch)",
            remediation="Disable ACS in the BIOS (IO virtualization / VT-d / ACS), "
            "or at run time (lost at reboot): "
            + "; ".join(f"setpci -s {b} ECAP_ACS+0x6.w=0000" for b in redirecting[:8])
            + f" (see {NCCL_ACS_DOC})",
            subject="acs",
        )
    summary = (
        f"ACS redirect is on for {len(redirecting)} switch port(s), allowed on this host"
        if redirecting
        else f"ACS does not redirect peer-to-peer traffic on the {len(checked)} readable bridge(s) "
        "above GPUs/NICs"
    )
    return Finding(ID, Status.OK, summary, ev, subject="acs")


def evaluate(f: Facts, p: Params) -> list[Finding]:
    findings = _links(f, p) + _driver_links(f, p)
    if not f.gpus:
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                "no GPU among the PCI devices: IOMMU and ACS settings for GPU peer-to-peer not judged",
                {PCI_DIR: f"{len(f.devices)} devices, none a GPU"},
                subject="p2p",
            )
        )
        return findings
    findings.append(_iommu(f, p))
    findings += _acs(f, p)
    return findings


CHECK = Check(
    id=ID,
    title="PCIe links",
    area=Area.PCIE,
    tags=("preflight", "pcie"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        *pci.PATHS,
        *network.PATHS,
        *gpus.PATHS,
        *system.PATHS,
        *nvml.PATHS,
        f"{PCI_DIR}/*/config",
        f"{PCI_DIR}/*/iommu_group",
        f"{IOMMU_DIR}/*/type",
    ),
    commands=(*gpus.COMMANDS, nvidia_smi.COMMAND),
)
