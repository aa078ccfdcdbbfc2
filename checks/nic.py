"""Network interfaces: link state, speed, MTU, driver and NUMA locality of physical NICs; nvidia_peermem.

A data NIC that trained down, runs a 1500-byte MTU or sits on an unknown NUMA node costs all-reduce
bandwidth on every step; a GPU node with RDMA ports but without nvidia_peermem stages every transfer
through host memory. Virtual interfaces (lo, bridges, veth, VLANs, bonds) carry no hardware state and
are not judged.

Attributes: Documentation/ABI/testing/sysfs-class-net (operstate, carrier, speed, mtu, type:
https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-net). A value that was not recorded
is never read as a state: a NIC whose operstate and carrier say nothing is not "down".
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace

from nodeagent.api.check import Area, Check, param
from nodeagent.core import parse
from nodeagent.core.finding import Finding, Status, not_recorded, unparsable
from nodeagent.facts import gpus, network, pci, topology
from nodeagent.facts.gpus import Gpu
from nodeagent.facts.network import ARPHRD_INFINIBAND, NET_DIR, Nic, RdmaPort
from nodeagent.host import Host

ID = "nic"
PROC_MODULES = "/proc/modules"
SYS_MODULE = "/sys/module"
# nvidia_peermem ships with the NVIDIA driver since R470; nv_peer_mem is the older Mellanox module.
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
# Drivers of 25 Gb/s-and-faster adapters: a NIC driven by one of them is a data NIC by default.
HIGH_SPEED_DRIVERS = frozenset(
    {"mlx5_core", "mlx4_en", "mlx4_core", "bnxt_en", "ice", "i40e", "ionic", "qede", "cxgb4", "ena", "gve"}
)
_HIGH_SPEED_MBPS = 25_000
_GPUDIRECT_DOC = "https://docs.nvidia.com/cuda/gpudirect-rdma/index.html#nvidia-peermem"
_TUNING_DOC = "https://enterprise-support.nvidia.com/s/article/performance-tuning-for-mellanox-adapters"
_IPOIB_DOC = "https://docs.nvidia.com/networking/display/mlnxofedv581011/ip+over+infiniband+(ipoib)"
# RFC 2863 operational states other than "up" and "unknown", as operstate prints them (sysfs-class-net;
# https://www.kernel.org/doc/Documentation/networking/operstates.rst): none of them passes traffic.
_NOT_UP = frozenset({"down", "lowerlayerdown", "notpresent", "dormant", "testing"})


@dataclass(frozen=True)
class Params:
    required: tuple[str, ...] = param(
        (),
        "Interface names or shell patterns (e.g. 'ib*') that must be up: down is FAIL. A port that was "
        "never cabled is common, so other NICs are not required (sysfs-class-net operstate: "
        "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-net).",
    )
    data_interfaces: tuple[str, ...] = param(
        (),
        "Names or patterns of the NICs that carry training traffic. Empty: RDMA-backed, IPoIB and "
        f"{_HIGH_SPEED_MBPS // 1000} Gb/s-class NICs (by driver or speed); only these are judged on "
        "speed, MTU and driver.",
    )
    min_speed_mbps: int = param(
        25_000,
        "Slowest acceptable link of a data NIC; below 25 GbE one GPU's all-reduce outruns the wire "
        "(NCCL performance guidance: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/"
        "troubleshooting.html). Set 200000/400000 per SKU; 0 disables.",
    )
    min_mtu_ethernet: int = param(
        9000,
        f"Ethernet data NICs (RoCE, TCP) want jumbo frames: NVIDIA's adapter tuning guide ({_TUNING_DOC}); "
        "the RoCE path MTU is capped by the netdev MTU. 0 disables.",
    )
    min_mtu_ipoib: int = param(
        4092,
        f"IPoIB's datagram-mode maximum with a 4K IB MTU; connected mode allows 65520 ({_IPOIB_DOC}). "
        "2044 means a 2K fabric MTU. 0 disables.",
    )
    expected_drivers: tuple[str, ...] = param(
        (),
        "Drivers data NICs must use (e.g. 'mlx5_core'); another driver means the wrong firmware/driver "
        "stack or a fallback. Empty: not judged (sysfs device/driver link).",
    )
    require_peermem: bool = param(
        False,
        f"Without nvidia_peermem GPUDirect RDMA is off unless DMA-BUF is used ({_GPUDIRECT_DOC}); "
        "True makes a missing module FAIL instead of WARN.",
    )


@dataclass(frozen=True)
class Facts:
    net_listed: bool  # /sys/class/net was readable
    nics: list[Nic]
    numa_raw: dict[str, str | None]  # physical NIC -> device/numa_node as read ("-1" when unknown)
    rx_packets: dict[str, int | None]  # physical NIC -> packets received since boot
    rdma: list[RdmaPort]
    gpus: list[Gpu]
    numa_nodes: int  # NUMA nodes with CPUs
    peermem: str | None  # loaded GPUDirect module, None when not loaded
    peermem_evidence: dict[str, str]  # where the module was looked for -> what was there
    modules_readable: bool  # /proc/modules or /sys/module could be read
    # physical NIC -> carrier as read: "" is a recorded read error (EINVAL: the interface is not
    # up, net-sysfs.c carrier_show), None an absent file.
    carrier_raw: dict[str, str | None] = field(default_factory=dict)
    net_recorded: bool = True  # False: a recording that does not hold /sys/class/net (Host.recorded)


def collect(host: Host) -> Facts:
    nics = network.collect_nics(host)
    numa_raw: dict[str, str | None] = {}
    rx: dict[str, int | None] = {}
    carrier: dict[str, str | None] = {}
    for n in nics:
        if not n.physical:
            continue
        numa_raw[n.name] = host.read_value(f"{_device_dir(n)}/numa_node")
        carrier[n.name] = host.read_value(f"{NET_DIR}/{n.name}/carrier")
        raw = host.read_value(f"{NET_DIR}/{n.name}/statistics/rx_packets")
        rx[n.name] = parse.decimal(raw) if raw is not None else None
    peermem, evidence, readable = _peermem(host)
    return Facts(
        net_listed=host.listdir(NET_DIR) is not None,
        nics=nics,
        numa_raw=numa_raw,
        rx_packets=rx,
        rdma=network.collect_rdma(host),
        gpus=gpus.collect(host),
        numa_nodes=len([n for n in topology.collect(host).numa_nodes if n.cpus]),
        peermem=peermem,
        peermem_evidence=evidence,
        modules_readable=readable,
        carrier_raw=carrier,
        net_recorded=host.recorded(NET_DIR),
    )


def _device_dir(n: Nic) -> str:
    """Where the NIC's device attributes are: its `device` link, or the device folder its own link
    leads into when the recording kept no `device` link."""
    return n.device_dir or f"{NET_DIR}/{n.name}/device"


def _peermem(host: Host) -> tuple[str | None, dict[str, str], bool]:
    evidence: dict[str, str] = {}
    readable = False
    for name in PEERMEM_MODULES:
        # A loadable module has /sys/module/<name>/initstate ("live"); peermem is never built in.
        state = host.read_value(f"{SYS_MODULE}/{name}/initstate")
        if state is not None:
            readable = True
            evidence[f"{SYS_MODULE}/{name}/initstate"] = state
            if state == "live":
                return name, evidence, True
    modules = host.read(PROC_MODULES)
    if modules is not None:
        readable = True
        loaded = {line.split()[0] for line in modules.splitlines() if line.split()}
        for name in PEERMEM_MODULES:
            if name in loaded:
                evidence[PROC_MODULES] = name
                return name, evidence, True
        evidence[PROC_MODULES] = f"{len(loaded)} modules, none of {', '.join(PEERMEM_MODULES)}"
    elif host.is_dir(SYS_MODULE):
        readable = True
        evidence[SYS_MODULE] = f"no {' or '.join(PEERMEM_MODULES)}"
    return None, evidence, readable


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _rdma_backed(n: Nic, ports: list[RdmaPort]) -> bool:
    return any(n.name in p.netdevs or (n.pci_address and n.pci_address == p.pci_address) for p in ports)


def _is_data(n: Nic, f: Facts, p: Params) -> bool:
    if p.data_interfaces:
        return _matches(n.name, p.data_interfaces)
    return (
        _rdma_backed(n, f.rdma)
        or n.link_type == ARPHRD_INFINIBAND
        or (n.driver or "") in HIGH_SPEED_DRIVERS
        or (n.speed_mbps or 0) >= _HIGH_SPEED_MBPS
    )


def _link(n: Nic, f: Facts) -> tuple[bool | None, str]:
    """(up, why not): up is None when the recorded files do not tell."""
    if n.operstate == "up":
        return True, ""
    carrier = f.carrier_raw.get(n.name)
    if n.carrier is False:
        return False, "no carrier (cable, transceiver or switch port)"
    if carrier == "":
        # carrier_show returns EINVAL unless the interface is up (IFF_UP): recorded as empty.
        return False, "administratively down or never configured"
    if n.operstate in (None, "unknown"):
        # "unknown" is what drivers without operstate support report; carrier then tells.
        if n.carrier is True:
            return True, ""
        return None, _unknown_link(n, carrier)
    if n.operstate == "down" and n.carrier is None:
        # operstate is "down" both without a carrier and when administratively down.
        return False, "operstate down, carrier not recorded (no link or administratively down)"
    if n.operstate in _NOT_UP:
        return False, f"operstate {n.operstate}"
    return None, f"operstate {n.operstate!r} is not one the kernel prints"


def _unknown_link(n: Nic, carrier: str | None) -> str:
    """Why neither operstate nor carrier tells the link state, naming what was read or missing."""
    base = f"{NET_DIR}/{n.name}"
    operstate = f"{base}/operstate absent" if n.operstate is None else f"operstate {n.operstate}"
    return f"{operstate}, " + (f"{base}/carrier absent" if carrier is None else f"carrier {carrier!r}")


def _shown(raw: str | None, parsed: bool | None = None) -> str:
    """A file's value for evidence: as read, "(empty)" when its read failed when recorded, "(absent)"
    when not there, or the parsed value of hand-built facts."""
    if raw is not None:
        return raw or "(empty)"
    return "(absent)" if parsed is None else str(int(parsed))


def _describe(n: Nic, f: Facts) -> str:
    speed = f"{n.speed_mbps} Mb/s" if n.speed_mbps else "speed unknown"
    numa = f.numa_raw.get(n.name)
    return (
        f"{n.operstate or 'state unknown'}, {speed}, MTU {n.mtu if n.mtu is not None else '?'}, "
        f"driver {n.driver or '?'}, NUMA node {numa if numa is not None else '?'}"
    )


def _evidence(n: Nic, f: Facts) -> dict[str, str]:
    base = f"{NET_DIR}/{n.name}"
    device = _device_dir(n)
    ev = {
        f"{base}/operstate": _shown(n.operstate),
        f"{base}/carrier": _shown(f.carrier_raw.get(n.name), n.carrier),
        f"{base}/speed": str(n.speed_mbps) if n.speed_mbps else "unknown (-1 or absent)",
        f"{base}/mtu": str(n.mtu),
        f"{device}/driver": str(n.driver),
        f"{device}/numa_node": _shown(f.numa_raw.get(n.name)),
    }
    if device == f"{base}/device":
        ev[device] = str(n.pci_address)
    else:
        ev[base] = f"links to {device}/net/{n.name} (no device link): {n.pci_address}"
    rx = f.rx_packets.get(n.name)
    if rx is not None:
        ev[f"{base}/statistics/rx_packets"] = str(rx)
    return ev


def _role(data: bool, required: bool) -> str:
    if required:
        return "required data NIC" if data else "required"
    return "data NIC" if data else "NIC"


def _nic_findings(n: Nic, f: Facts, p: Params) -> list[Finding]:
    data = _is_data(n, f, p)
    required = _matches(n.name, p.required)
    role = _role(data, required)
    ev = _evidence(n, f)
    up, why = _link(n, f)
    if up is None:
        return [_link_unknown(n, role, why, ev, judged=data or required)]
    if not up:
        return [_link_down(n, f, role, why, ev, data=data, required=required)]
    found = [_speed_finding(n, p, ev), _mtu_finding(n, p, ev), _driver_finding(n, p, ev)] if data else []
    found.append(_numa_finding(n, f, ev))
    out = [x for x in found if x is not None]
    if not out:
        ipoib = n.link_type == ARPHRD_INFINIBAND
        note = "" if data else " (not a data interface: speed and MTU not judged)"
        if data and n.speed_mbps is None:
            note = " (speed not reported" + ("; the IB rate is judged by the rdma check)" if ipoib else ")")
        out.append(Finding(ID, Status.OK, f"{role} {n.name}: {_describe(n, f)}{note}", ev, subject=n.name))
    return out


def _link_down(
    n: Nic, f: Facts, role: str, why: str, ev: dict[str, str], *, data: bool, required: bool
) -> Finding:
    """A NIC whose link is down: FAIL when required, WARN for a data NIC or one that carried traffic,
    OK for a port that was never cabled."""
    rx = f.rx_packets.get(n.name) or 0
    if required:
        status = Status.FAIL
    elif data or rx > 0:
        status = Status.WARN
    else:
        return Finding(
            ID,
            Status.OK,
            f"{n.name} is down ({why}); not a data interface, so not cabled is fine "
            "(list it in `required` if it must be up)",
            ev,
            subject=n.name,
        )
    traffic = f", though it received {rx} packets since boot (it lost its link)" if rx and not data else ""
    return Finding(
        ID,
        status,
        f"{role} {n.name} is down: {why}{traffic}",
        ev,
        expected="operstate up, carrier 1",
        remediation=(
            f"ip link set {n.name} up; check the cable and the switch port (ethtool {n.name}; "
            f"for IB/RoCE ports: ibstat, mlxlink -d <device>)."
        ),
        subject=n.name,
    )


def _speed_finding(n: Nic, p: Params, ev: dict[str, str]) -> Finding | None:
    if p.min_speed_mbps <= 0 or n.speed_mbps is None or n.speed_mbps >= p.min_speed_mbps:
        return None
    return Finding(
        ID,
        Status.WARN,
        f"data NIC {n.name} links at {n.speed_mbps} Mb/s, below {p.min_speed_mbps} Mb/s",
        ev,
        expected=f">= {p.min_speed_mbps} Mb/s",
        remediation=f"ethtool {n.name} (supported vs advertised modes); check the cable/transceiver "
        f"rating and the switch port speed; ethtool -s {n.name} autoneg on.",
        subject=n.name,
    )


def _mtu_finding(n: Nic, p: Params, ev: dict[str, str]) -> Finding | None:
    ipoib = n.link_type == ARPHRD_INFINIBAND
    want_mtu = p.min_mtu_ipoib if ipoib else p.min_mtu_ethernet
    if want_mtu <= 0 or n.mtu is None or n.mtu >= want_mtu:
        return None
    hint = (
        f"IPoIB: set the fabric (subnet manager partition) to 4K MTU, or connected mode "
        f"(echo connected > {NET_DIR}/{n.name}/mode) for up to 65520"
        if ipoib
        else f"ip link set dev {n.name} mtu {want_mtu} (and the switch ports: every hop must carry it)"
    )
    return Finding(
        ID,
        Status.WARN,
        f"data NIC {n.name} has MTU {n.mtu}, below {want_mtu}"
        + (" (IPoIB)" if ipoib else " (jumbo frames off)"),
        ev,
        expected=f"MTU >= {want_mtu}",
        remediation=hint + "; persist it in the interface's netplan/NetworkManager configuration.",
        subject=n.name,
    )


def _driver_finding(n: Nic, p: Params, ev: dict[str, str]) -> Finding | None:
    if not p.expected_drivers or (n.driver or "") in p.expected_drivers:
        return None
    return Finding(
        ID,
        Status.WARN,
        f"data NIC {n.name} is driven by {n.driver or 'no driver'}, "
        f"expected {' or '.join(p.expected_drivers)}",
        ev,
        expected=" or ".join(p.expected_drivers),
        remediation="Install or load the expected driver stack (e.g. DOCA-OFED/MLNX_OFED for "
        "mlx5_core) and rebind the device.",
        subject=n.name,
    )


def _numa_finding(n: Nic, f: Facts, ev: dict[str, str]) -> Finding | None:
    raw = f.numa_raw.get(n.name)
    if f.numa_nodes <= 1 or n.numa_node is not None or not _no_node(raw):
        return None
    return Finding(
        ID,
        Status.WARN,
        f"{n.name} ({n.pci_address}) has no NUMA node (numa_node {raw}) "
        f"on a {f.numa_nodes}-node machine: NIC/GPU/CPU affinity cannot be derived",
        ev,
        expected="numa_node >= 0",
        remediation="The firmware gives no proximity (_PXM) for this slot: update the BIOS or enable "
        "its NUMA/SRAT options; until then pin by hand (NCCL_IB_HCA, numactl) from the board manual.",
        subject=n.name,
        # No tuner: the node is the firmware's to give; numa-pinning places ranks by it, cannot supply it.
    )


def _no_node(raw: str | None) -> bool:
    """numa_node holds NUMA_NO_NODE (-1): the firmware gave the slot no proximity. An absent or
    unparsable file says nothing about the firmware."""
    return raw is not None and re.fullmatch(r"-\d+", raw) is not None


def _link_unknown(n: Nic, role: str, why: str, ev: dict[str, str], judged: bool) -> Finding:
    """A NIC whose recorded files do not tell its link state: UNKNOWN for the NICs the check
    judges (data, required), SKIPPED for the others."""
    if not judged:
        return Finding(
            ID,
            Status.SKIPPED,
            f"{role} {n.name}: link state not judged ({why})",
            ev,
            subject=n.name,
        )
    return Finding(
        ID,
        Status.UNKNOWN,
        f"{role} {n.name}: link state unknown ({why})",
        ev,
        expected="operstate up, carrier 1",
        remediation=f"ip -d link show {n.name}; ethtool {n.name}; record the node again if the "
        "files are missing from a snapshot.",
        subject=n.name,
    )


def _peermem_finding(f: Facts, p: Params) -> Finding:
    nvidia = [g for g in f.gpus if g.vendor == "NVIDIA"]
    subject = "nvidia_peermem"
    if not f.rdma:
        return Finding(
            ID,
            Status.SKIPPED,
            "nvidia_peermem not judged: no RDMA ports (/sys/class/infiniband), so no GPUDirect RDMA",
            {network.IB_DIR: "absent or no ports"},
            subject=subject,
        )
    if not nvidia:
        return Finding(
            ID,
            Status.SKIPPED,
            "nvidia_peermem not judged: no NVIDIA GPU found (PCI class 03xx, vendor 0x10de)",
            {"/sys/bus/pci/devices": "no NVIDIA GPU"},
            subject=subject,
        )
    ports = ", ".join(f"{r.device}/{r.port}" for r in f.rdma)
    if f.peermem:
        return Finding(
            ID,
            Status.OK,
            f"{f.peermem} loaded: GPUDirect RDMA available to {len(nvidia)} GPU(s) over {ports}",
            f.peermem_evidence,
            subject=subject,
        )
    if not f.modules_readable:
        return Finding(
            ID,
            Status.SKIPPED,
            f"cannot tell whether nvidia_peermem is loaded: {PROC_MODULES} and {SYS_MODULE} unreadable",
            {PROC_MODULES: "absent", SYS_MODULE: "absent"},
            subject=subject,
        )
    return Finding(
        ID,
        Status.FAIL if p.require_peermem else Status.WARN,
        f"nvidia_peermem not loaded on a node with {len(nvidia)} NVIDIA GPU(s) and RDMA ports {ports}: "
        "NCCL stages GPU buffers through host memory unless it uses DMA-BUF",
        f.peermem_evidence,
        expected="nvidia_peermem (or nv_peer_mem) loaded",
        remediation="modprobe nvidia-peermem; persist: "
        "echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf "
        f"(or use DMA-BUF: kernel >= 5.12, open GPU kernel modules, NCCL >= 2.13). See {_GPUDIRECT_DOC}",
        subject=subject,
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    if not f.net_listed and not f.net_recorded:
        return [not_recorded(ID, NET_DIR, "interfaces", "network interfaces")]
    if not f.net_listed:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no network interfaces: {NET_DIR} absent",
                {NET_DIR: "absent"},
                subject="interfaces",
            )
        ]
    physical = [n for n in f.nics if n.physical]
    findings: list[Finding] = []
    if not physical:
        virtual = ", ".join(n.name for n in f.nics) or "none"
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"no physical NIC under {NET_DIR} (virtual only: {virtual})",
                {NET_DIR: virtual},
                subject="interfaces",
            )
        )
    for n in physical:
        findings += _nic_findings(n, f, p)
    # What cannot be parsed is not known: UNKNOWN, naming each file and its value.
    findings += [
        replace(u, status=Status.UNKNOWN)
        for u in unparsable(
            ID,
            [q for n in f.nics for q in n.problems],
            "interface attribute(s)",
            "`ip -d link` and `ethtool`",
        )
    ]
    findings += _required_missing(f, p, [n.name for n in physical])
    findings.append(_peermem_finding(f, p))
    return findings


def _required_missing(f: Facts, p: Params, names: list[str]) -> list[Finding]:
    """A FAIL for each `required` pattern that no physical NIC matches."""
    return [
        Finding(
            ID,
            Status.FAIL,
            f"required interface {pattern} not found among physical NICs ({', '.join(names) or 'none'})",
            {NET_DIR: ", ".join(n.name for n in f.nics) or "(empty)"},
            expected=f"a physical NIC matching {pattern}",
            remediation="Check the adapter is seated and its driver loaded (lspci -k; "
            "dmesg | grep -i eth), and that udev naming did not rename it.",
            subject=pattern,
        )
        for pattern in p.required
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names)
    ]


CHECK = Check(
    id=ID,
    title="Network interfaces",
    area=Area.NETWORK,
    tags=("preflight", "network"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        *network.PATHS,
        f"{NET_DIR}/*/statistics/rx_packets",
        *gpus.PATHS,
        *pci.PATHS,
        *topology.PATHS,
        *(f"{SYS_MODULE}/{m}/initstate" for m in PEERMEM_MODULES),
        PROC_MODULES,
    ),
    commands=gpus.COMMANDS,
)
