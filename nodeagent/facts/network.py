"""Network interfaces (/sys/class/net) and RDMA ports (/sys/class/infiniband).

Attributes: Documentation/ABI/testing/sysfs-class-net (speed, mtu, operstate, carrier, type:
https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-net) and
Documentation/ABI/stable/sysfs-class-infiniband (ports/N/state, phys_state, rate, link_layer:
https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband). The formats of the
port files are those of drivers/infiniband/core/sysfs.c (state_show, phys_state_show, rate_show).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

NET_DIR = "/sys/class/net"
IB_DIR = "/sys/class/infiniband"
DEVICES_DIR = "/sys/devices"
VIRTUAL_DIR = f"{DEVICES_DIR}/virtual"  # the parent of devices without hardware (lo, bridges, rxe)
_NET_ATTRS = ("speed", "mtu", "operstate", "carrier", "type", "device/numa_node")
_IB_PORT_ATTRS = ("state", "phys_state", "rate", "link_layer")
PATHS = (
    *(f"{NET_DIR}/*/{a}" for a in _NET_ATTRS),
    f"{NET_DIR}/*/device/driver",
    f"{NET_DIR}/*/device",
    *(f"{IB_DIR}/*/ports/*/{a}" for a in _IB_PORT_ATTRS),
    f"{IB_DIR}/*/device",
    f"{IB_DIR}/*/device/net/*",
    f"{IB_DIR}/*/device/numa_node",
    f"{IB_DIR}/*/fw_ver",
    f"{IB_DIR}/*/hca_type",
)
_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")

# ARPHRD_* from include/uapi/linux/if_arp.h
ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772

# drivers/infiniband/core/sysfs.c: state_show prints "%d: %s" from this table (ib_port_state),
# phys_state_show from phys_state_to_str (IBTA PortPhysicalState). Kernels 5.3-5.4 printed
# "PhyTest" where the others print "Phy Test".
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}
_PHYS_ALIASES = {"PhyTest": "Phy Test"}
# ib_width_enum_to_int (include/rdma/ib_verbs.h): the lane counts a port can train to.
IB_WIDTHS = frozenset({1, 2, 4, 8, 12})
# rate_show: "%d%s Gb/sec (%dX%s)" -> "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)". Kernels before
# 4.x printed SDR without a name ("10 Gb/sec (4X)"); ibstat gives the rate alone, so a recording
# converted from it holds "200 Gb/sec" and says nothing about the width.
_RATE = re.compile(
    r"(?P<gbps>\d+(?:\.\d+)?) Gb/sec(?: \((?P<width>\d{1,20})X(?: (?P<speed>[A-Z][A-Z0-9]*))?\))?"
)


@dataclass(frozen=True)
class Nic:
    name: str
    pci_address: str | None  # None for virtual interfaces (bridges, VLANs, veth, lo)
    speed_mbps: int | None  # None when unknown (link down, virtual); the kernel reports -1
    mtu: int | None
    operstate: str | None
    carrier: bool | None
    link_type: int | None
    driver: str | None
    numa_node: int | None
    problems: tuple[str, ...] = ()  # attributes present but unparsable
    # Where the device's attributes (numa_node, driver) are read: NET_DIR/<name>/device, or the
    # device folder the interface's own link leads into when the recording has no `device` link;
    # VIRTUAL_DIR for interfaces without a device; None when the recording does not say.
    device_dir: str | None = None

    @property
    def physical(self) -> bool:
        return self.pci_address is not None


@dataclass(frozen=True)
class RdmaPort:
    device: str  # mlx5_0
    port: int
    state: str | None  # "ACTIVE" (from "4: ACTIVE"); None when absent or unparsable (see problems)
    phys_state: str | None  # "LinkUp" (from "5: LinkUp"); None when absent or unparsable
    rate_gbps: float | None
    rate: str | None  # as printed: "200 Gb/sec (4X HDR)"
    link_layer: str | None  # InfiniBand or Ethernet (RoCE)
    pci_address: str | None
    numa_node: int | None
    netdevs: list[str]
    problems: tuple[str, ...] = ()  # "path: why" for attributes present but unparsable
    width: str | None = None  # active width as printed ("4X"); None when the rate does not say
    speed_name: str | None = None  # "HDR"; None when not printed (old kernels' SDR, ibstat)
    # The device folder, as for Nic.device_dir: the `device` link, the class link's parent,
    # VIRTUAL_DIR (rxe, siw), or None when the recording does not say.
    device_dir: str | None = None
    # The HCA model as the driver names it (/sys/class/infiniband/<dev>/hca_type: "MT4129" for a
    # ConnectX-7 on mlx5); None where the driver has no such file or it was not recorded.
    hca_type: str | None = None

    @property
    def lanes(self) -> int | None:
        """4 from "4X"."""
        return lanes(self.width)


@dataclass(frozen=True)
class Rate:
    gbps: float
    width: str | None  # "4X"; None when the text names none
    speed_name: str | None  # "EDR"; None when the text names none


def lanes(width: str | None) -> int | None:
    return int(width.removesuffix("X")) if width else None


def parse_rate(text: str) -> Rate | None:
    """ports/N/rate by the structure rate_show prints; None when it does not have that shape."""
    m = _RATE.fullmatch(text.strip())
    if not m:
        return None
    width = m.group("width")
    if width is not None and int(width) not in IB_WIDTHS:
        return None
    return Rate(float(m.group("gbps")), f"{width}X" if width else None, m.group("speed"))


def parse_port_state(text: str, table: dict[int, str]) -> tuple[str | None, str | None]:
    """ "4: ACTIVE" -> ("ACTIVE", None); what the kernel's "%d: %s" cannot have printed ->
    (None, why). The number and the name must agree with the kernel's table: a recording whose
    phys_state reads "4: ACTIVE" (4 is PortConfigurationTraining) says nothing certain."""
    m = re.fullmatch(r"(\d{1,20}): (.+)", text.strip())
    if not m:
        return None, "not '<number>: <name>' as the kernel prints it"
    number, name = int(m.group(1)), m.group(2).strip()
    name = _PHYS_ALIASES.get(name, name)
    known = table.get(number)
    if known is None:
        return None, f"{number} is not a state the kernel names ({name!r})"
    if name != known:
        return None, f"{number} is {known} in the kernel's table, not {name!r}"
    return known, None


def _resolve(host: Host, path: str) -> str | None:
    """Where `path` leads: the host's resolution, or, for a link whose target a recording left
    out, the target made absolute (the parent resolved, the rest taken as written)."""
    real = host.realpath(path)
    if real is not None:
        return real
    target = host.readlink(path)
    if target is None:
        return None
    parent = posixpath.dirname(path.rstrip("/"))
    return posixpath.normpath(posixpath.join(host.realpath(parent) or parent, target))


def _pci_in(path: str | None) -> str | None:
    """The PCI function a device path goes through: the last PCI address in it. A netdev of a
    virtio device (…/0000:00:03.0/virtio2) belongs to the PCI function above it. The path may be
    one a recording names without holding it (a dangling class link): it is read, not opened."""
    found = _PCI_ADDRESS.findall(path or "")
    return found[-1] if found else None


def _device_dir(host: Host, entry: str, subsystem: str) -> str | None:
    """The folder of a class device's parent device; VIRTUAL_DIR when it has none; None when the
    recording does not say.

    The `device` link names it (sysfs-class-net: /sys/class/net/<iface>/device). A recording may
    keep only the class entry's own link, ../../devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0:
    the class device sits in <parent>/<subsystem>/<name>, so the parent is the folder above
    <subsystem>; devices/virtual/net/lo has the virtual bus above it, no device."""
    if host.lexists(f"{entry}/device"):
        return f"{entry}/device"
    where = _resolve(host, entry)
    if where is None:
        return None
    parent, sub = posixpath.split(posixpath.dirname(where.rstrip("/")))
    if sub != subsystem or not parent.startswith(DEVICES_DIR + "/"):
        return None
    return VIRTUAL_DIR if is_virtual(parent) else parent


def is_virtual(device_dir: str | None) -> bool:
    return device_dir is not None and (device_dir + "/").startswith(VIRTUAL_DIR + "/")


def _hardware(device_dir: str | None) -> str | None:
    """The device folder to read attributes (numa_node, driver, net/) from: none for virtual."""
    return None if device_dir is None or is_virtual(device_dir) else device_dir


def is_interface(host: Host, name: str) -> bool:
    """An entry of /sys/class/net is an interface when it is a device: a link (the kernel links
    every net device there; a recording may have left its target out) or a folder (sysfs before
    class links, or a recording). The bonding driver adds a plain file beside them,
    bonding_masters (Documentation/networking/bonding.rst), which holds no type or ifindex."""
    base = f"{NET_DIR}/{name}"
    return host.readlink(base) is not None or host.is_dir(base)


def _numa(r: Reader, path: str) -> int | None:
    node = r.int(path)
    return node if node is not None and node >= 0 else None


def collect_nics(host: Host) -> list[Nic]:
    return host.memo("facts.nics", lambda: _collect_nics(host))


def _collect_nics(host: Host) -> list[Nic]:
    out: list[Nic] = []
    for name in host.listdir(NET_DIR) or []:
        if not is_interface(host, name):
            continue
        r = Reader(host)
        base = f"{NET_DIR}/{name}"
        speed = r.int(f"{base}/speed")
        carrier = r.value(f"{base}/carrier")
        device = _device_dir(host, base, "net")
        hardware = _hardware(device)
        pci_address = _pci_in(_resolve(host, hardware) or hardware) if hardware else None
        driver = host.readlink(f"{hardware}/driver") if hardware else None
        out.append(
            Nic(
                name=name,
                pci_address=pci_address,
                speed_mbps=speed if speed is not None and speed > 0 else None,
                mtu=r.int(f"{base}/mtu"),
                operstate=r.value(f"{base}/operstate"),
                carrier=None if carrier not in ("0", "1") else carrier == "1",
                link_type=r.int(f"{base}/type"),
                driver=driver.rstrip("/").rsplit("/", 1)[-1] if driver else None,
                numa_node=_numa(r, f"{hardware}/numa_node") if hardware else None,
                problems=tuple(r.problems),
                device_dir=device,
            )
        )
    return out


def collect_rdma(host: Host) -> list[RdmaPort]:
    return host.memo("facts.rdma", lambda: _collect_rdma(host))


def _collect_rdma(host: Host) -> list[RdmaPort]:
    out: list[RdmaPort] = []
    for dev in host.listdir(IB_DIR) or []:
        base = f"{IB_DIR}/{dev}"
        device = _device_dir(host, base, "infiniband")
        hardware = _hardware(device)
        pci_address = _pci_in(_resolve(host, hardware) or hardware) if hardware else None
        netdevs = (host.listdir(f"{hardware}/net") or []) if hardware else []
        for port in host.listdir(f"{base}/ports") or []:
            if parse.is_decimal(port):
                out.append(_port(host, dev, int(port), device, pci_address, netdevs))
    return out


def _port(
    host: Host, dev: str, port: int, device: str | None, pci_address: str | None, netdevs: list[str]
) -> RdmaPort:
    p = f"{IB_DIR}/{dev}/ports/{port}"
    hardware = _hardware(device)
    r = Reader(host)
    problems: list[str] = []
    rate_text = r.value(f"{p}/rate") or None
    rate = parse_rate(rate_text) if rate_text else None
    if rate_text and rate is None:
        problems.append(
            f"{p}/rate: {rate_text!r}: not '<N> Gb/sec (<width>X <speed>)' as the kernel prints it"
        )
    return RdmaPort(
        device=dev,
        port=port,
        state=_state(r, f"{p}/state", PORT_STATES, problems),
        phys_state=_state(r, f"{p}/phys_state", PHYS_STATES, problems),
        rate_gbps=rate.gbps if rate else None,
        rate=rate_text,
        link_layer=r.value(f"{p}/link_layer") or None,
        pci_address=pci_address,
        numa_node=_numa(r, f"{hardware}/numa_node") if hardware else None,
        netdevs=netdevs,
        problems=(*problems, *r.problems),
        width=rate.width if rate else None,
        speed_name=rate.speed_name if rate else None,
        device_dir=device,
        hca_type=r.value(f"{IB_DIR}/{dev}/hca_type") or None,
    )


def _state(r: Reader, path: str, table: dict[int, str], problems: list[str]) -> str | None:
    """A port state word; None when absent, empty (the read failed when recorded) or unparsable,
    the last noted in `problems` as "path: why"."""
    raw = r.value(path)
    if not raw:
        return None
    word, why = parse_port_state(raw, table)
    if why:
        problems.append(f"{path}: {raw!r}: {why}")
    return word
