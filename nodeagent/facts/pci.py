"""PCI devices from /sys/bus/pci/devices: class, ids, NUMA node, link speed and width, driver, tree.

Attributes: Documentation/ABI/testing/sysfs-bus-pci (current_link_speed, max_link_width, ...).
Class codes: PCI Code and ID Assignment Specification (https://pcisig.com/), e.g. 0x0302xx 3D
controller (datacenter GPUs), 0x0207xx InfiniBand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

PCI_DIR = "/sys/bus/pci/devices"
_ATTRS = (
    "class",
    "vendor",
    "device",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
)
PATHS = (*(f"{PCI_DIR}/*/{a}" for a in _ATTRS), f"{PCI_DIR}/*/driver")
_HOST_BRIDGE = re.compile(r"pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}")
_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

VENDOR_NVIDIA = "0x10de"
VENDOR_MELLANOX = "0x15b3"

# Vendors whose display-class devices are compute GPUs. A BMC's VGA (ASPEED 0x1a03, Matrox 0x102b)
# is a display-class device too, and is not a GPU for training: its kind is "display".
GPU_VENDORS = {VENDOR_NVIDIA: "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}

# (class code prefix, kind) - most specific first.
_KINDS = (
    ("0300", "gpu"),  # VGA-compatible controller (consumer and some datacenter GPUs)
    ("0302", "gpu"),  # 3D controller (A100, H100, ...)
    ("0380", "gpu"),  # display controller, other
    ("0200", "nic"),  # Ethernet
    ("0207", "nic"),  # InfiniBand
    ("0280", "nic"),  # network controller, other
    ("0c06", "nic"),  # serial bus controller, InfiniBand (QLogic/Intel True Scale HCAs)
    ("0108", "nvme"),
    ("0604", "bridge"),  # PCI-to-PCI bridge: root ports and switch ports
    ("1200", "accelerator"),  # processing accelerators (Gaudi, Inferentia, ...)
)


@dataclass(frozen=True)
class PciDevice:
    address: str
    kind: str  # gpu (compute vendors only), display, nic, nvme, bridge, accelerator, other
    class_code: str  # "0x030200"
    vendor: str | None
    device: str | None
    numa_node: int | None
    local_cpus: list[int] | None
    speed_gts: float | None
    max_speed_gts: float | None
    width: int | None
    max_width: int | None
    driver: str | None
    root: str  # host bridge, e.g. "pci0000:40"; "" when the device is not in a PCI hierarchy
    upstream: list[str] = field(default_factory=list)  # bridges from the root port down to the parent

    @property
    def downtrained(self) -> bool:
        """Running below its own capability (speed or width), where both are known."""
        slow = (
            self.speed_gts is not None
            and self.max_speed_gts is not None
            and self.speed_gts < self.max_speed_gts
        )
        narrow = self.width is not None and self.max_width is not None and self.width < self.max_width
        return slow or narrow


def _kind(class_code: str, vendor: str | None) -> str:
    digits = class_code.lower().removeprefix("0x").rjust(6, "0")
    for prefix, kind in _KINDS:
        if digits.startswith(prefix):
            if kind == "gpu" and vendor not in GPU_VENDORS:
                return "display"
            return kind
    return "other"


def collect(host: Host) -> list[PciDevice]:
    return host.memo("facts.pci", lambda: _collect(host))


def _collect(host: Host) -> list[PciDevice]:
    r = Reader(host)
    out: list[PciDevice] = []
    for addr in host.listdir(PCI_DIR) or []:
        if not _ADDRESS.match(addr):
            continue
        base = f"{PCI_DIR}/{addr}"
        real = host.realpath(base) or ""
        components = [c for c in real.split("/") if c]
        root = next((c for c in components if _HOST_BRIDGE.fullmatch(c)), "")
        upstream = [c for c in components if _ADDRESS.match(c) and c != addr]
        class_code = r.value(f"{base}/class") or "0x000000"
        vendor = r.value(f"{base}/vendor")
        numa = r.int(f"{base}/numa_node")
        driver_link = host.readlink(f"{base}/driver")
        out.append(
            PciDevice(
                address=addr,
                kind=_kind(class_code, vendor),
                class_code=class_code,
                vendor=vendor,
                device=r.value(f"{base}/device"),
                # -1: the platform did not say (no ACPI _PXM); not node 0.
                numa_node=numa if numa is not None and numa >= 0 else None,
                local_cpus=r.cpulist(f"{base}/local_cpulist"),
                speed_gts=r.parsed(f"{base}/current_link_speed", parse.link_speed_gts),
                max_speed_gts=r.parsed(f"{base}/max_link_speed", parse.link_speed_gts),
                width=r.parsed(f"{base}/current_link_width", parse.link_width),
                max_width=r.parsed(f"{base}/max_link_width", parse.link_width),
                driver=driver_link.rsplit("/", 1)[-1] if driver_link else None,
                root=root,
                upstream=upstream,
            )
        )
    return out


def by_address(devices: list[PciDevice]) -> dict[str, PciDevice]:
    return {d.address: d for d in devices}


def normalize_address(addr: str) -> str:
    """NVML and nvidia-smi print "00000000:17:00.0"; sysfs uses "0000:17:00.0". Lower case, 4-digit domain.

    Anything that is not a PCI address comes back stripped and lower-cased, unchanged otherwise.
    """
    text = addr.strip().lower()
    m = re.fullmatch(r"([0-9a-f]{1,8}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", text)
    return f"{int(m.group(1), 16):04x}:{m.group(2)}" if m else text
