"""RDMA ports (InfiniBand and RoCE): port state, physical state, rate, width and link layer.

NCCL's rings and trees run at the pace of the slowest rail: one port in INIT (no subnet manager), or
one that trained at a lower rate or on fewer lanes, slows or breaks every multi-node job on the node.
The memlock limit, which makes memory registration fail on these ports, is the kernel check's
finding (FAIL on a node with RDMA ports): one fact, one finding.

Attributes: Documentation/ABI/stable/sysfs-class-infiniband (ports/N/state, phys_state, rate,
link_layer), https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband, in the
formats of drivers/infiniband/core/sysfs.c. A file that was not recorded is never read as a state:
an absent state file is UNKNOWN, not "down".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status, not_recorded, unparsable
from nodeagent.facts import network
from nodeagent.facts.network import IB_DIR, RdmaPort
from nodeagent.host import Host

ID = "rdma"
_IB_DOC = "https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband"
_PORT_FILES = ("state", "phys_state", "rate", "link_layer")


@dataclass(frozen=True)
class Params:
    min_rate_gbps: float = param(
        100.0,
        "Slowest acceptable active port: EDR (100 Gb/s); GPU servers ship HDR 200 or NDR 400 per GPU "
        f"(ports/N/rate: {_IB_DOC}); set the SKU's rate, 0 disables.",
    )
    allow_mixed_rates: bool = param(
        False,
        "Ports of one link layer at different rates make collectives run at the slowest rail "
        "(NCCL uses all HCAs in parallel: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).",
    )
    require_all_ports: bool = param(
        False,
        "A port without link (state DOWN) on an HCA whose other port is ACTIVE is WARN: dual-port cards "
        "are often cabled on one port. True makes it FAIL like any other port that cannot carry traffic, "
        f"for nodes where every port is a rail (ports/N/state: {_IB_DOC}).",
    )
    expected_width: int = param(
        0,
        "Lanes every active InfiniBand port should run (ports/N/rate '(4X HDR)': the active width, "
        f"{_IB_DOC}). 0: each port is compared with the node's widest InfiniBand port, so a port that "
        "trained down to 1X or 2X beside 4X ports is flagged; a lone port is not judged. Set 4 to require "
        "full QSFP width, 2 for HDR100/NDR200 split cables.",
    )


@dataclass(frozen=True)
class Facts:
    ib_listed: bool  # /sys/class/infiniband was readable
    devices: list[str]
    ports: list[RdmaPort]
    device_real: dict[str, str | None]  # device -> where its sysfs link resolves (None: dangling)
    raw: dict[str, str | None] = field(default_factory=dict)  # port file -> text as read (None: absent)
    ib_recorded: bool = True  # False: a recording that does not hold /sys/class/infiniband (Host.recorded)


def collect(host: Host) -> Facts:
    devices = host.listdir(IB_DIR)
    ports = network.collect_rdma(host)
    return Facts(
        ib_listed=devices is not None,
        devices=devices or [],
        ports=ports,
        device_real={d: host.realpath(f"{IB_DIR}/{d}") for d in devices or []},
        raw={path: host.read_value(path) for p in ports for path in _port_paths(p)},
        ib_recorded=host.recorded(IB_DIR),
    )


def _port_paths(p: RdmaPort) -> list[str]:
    return [f"{_base(p)}/{name}" for name in _PORT_FILES]


def _base(p: RdmaPort) -> str:
    return f"{IB_DIR}/{p.device}/ports/{p.port}"


def _port_evidence(p: RdmaPort, f: Facts) -> dict[str, str]:
    """Each port file: its parsed value ("ACTIVE" from "4: ACTIVE"), the text as read when it did
    not parse, or "(absent)"."""
    base = _base(p)
    parsed = {"state": p.state, "phys_state": p.phys_state, "rate": p.rate, "link_layer": p.link_layer}
    ev: dict[str, str] = {}
    for name in _PORT_FILES:
        path = f"{base}/{name}"
        ev[path] = parsed[name] or _missing(path, f)
    ev.update(_device_evidence(p))
    return ev


def _missing(path: str, f: Facts) -> str:
    """A port file with no parsed value: its text when unparsable, else why there is none."""
    raw = f.raw.get(path)
    return "(absent)" if raw is None else raw or "(empty: the read failed when recorded)"


def _device_evidence(p: RdmaPort) -> dict[str, str]:
    link = f"{IB_DIR}/{p.device}/device"
    if p.device_dir is None and p.pci_address is None:
        return {link: "(absent)"}
    if p.device_dir in (None, link):
        return {link: p.pci_address or "(no PCI function on its path)"}
    target = f"{p.device_dir}/infiniband/{p.device}"
    return {
        f"{IB_DIR}/{p.device}": f"links to {target} (no device link): {p.pci_address or 'no PCI function'}"
    }


def _problem(p: RdmaPort, name: str) -> str | None:
    """Why ports/N/<name> could not be parsed, None when it was (or is absent)."""
    prefix = f"{_base(p)}/{name}: "
    return next((q.removeprefix(prefix) for q in p.problems if q.startswith(prefix)), None)


def _where(p: RdmaPort) -> str:
    if p.pci_address:
        return f", PCI {p.pci_address}"
    if network.is_virtual(p.device_dir):
        return ", virtual device (software RDMA)"
    if p.device_dir:
        return ", no PCI device"
    return f", device not recorded ({IB_DIR}/{p.device}/device absent)"


def _state_text(p: RdmaPort) -> str:
    def shown(word: str | None, name: str) -> str:
        return word or ("(unparsable)" if _problem(p, name) else "(absent)")

    return f"state {shown(p.state, 'state')}, phys_state {shown(p.phys_state, 'phys_state')}"


def _state_problem(p: RdmaPort) -> tuple[str, str] | None:
    """(why, remediation) when the port's state shows it cannot carry traffic; None when ACTIVE
    (and LinkUp, or its physical state not known: see _state_unknown) or not known at all."""
    name = f"{p.device} port {p.port}"
    if p.state is None or (p.state == "ACTIVE" and p.phys_state in ("LinkUp", None)):
        return None
    ib = (p.link_layer or "InfiniBand") == "InfiniBand"
    state = _state_text(p)
    if p.state in ("INIT", "ARMED") and ib:
        return (
            f"{name} is {state}: the cable is up but no subnet manager has configured the port",
            "Run a subnet manager on the fabric (systemctl enable --now opensm on one node, or the SM of the "
            "managed switch/UFM); sminfo and ibstat show whether one answers.",
        )
    if p.phys_state == "Polling":
        return (
            f"{name} is {state}: no peer on the cable (unplugged, bad cable or switch port down)",
            f"Check the cable/transceiver and the switch port; ibstat {p.device}; "
            f"mlxlink -d {p.device} -p {p.port}.",
        )
    if p.phys_state == "Disabled":
        return (
            f"{name} is {state}: the port is disabled",
            f"Re-enable it (ibportstate -C {p.device} -P {p.port} <lid> {p.port} enable, or on the switch).",
        )
    if not ib:
        netdevs = ", ".join(p.netdevs) or "<netdev>"
        return (
            f"{name} (RoCE) is {state}: its Ethernet link is down",
            f"ip link set {netdevs} up; check the cable and the switch port (ethtool {netdevs}).",
        )
    return (
        f"{name} is {state}",
        f"ibstat {p.device}; check cabling, firmware (mlxfwmanager) and the fabric's subnet manager.",
    )


def _state_unknown(p: RdmaPort, f: Facts) -> tuple[str, bool] | None:
    """(why, whole port) when a state file could not be read or parsed. Without the logical state
    nothing about the port is known; an ACTIVE port with an unparsable phys_state is still judged
    on its rate and width (the subnet manager only activates a trained link)."""
    base = _base(p)
    if p.state is None:
        why = _problem(p, "state") or _missing(f"{base}/state", f)
        phys = f"; phys_state {p.phys_state}" if p.phys_state else ""
        return f"{p.device} port {p.port}: port state unknown: {base}/state {why}{phys}", True
    phys_why = _problem(p, "phys_state")
    if p.state == "ACTIVE" and phys_why:
        return f"{p.device} port {p.port}: physical state unknown: {base}/phys_state {phys_why}", False
    return None


def _rate_findings(port: RdmaPort, params: Params, ev: dict[str, str]) -> list[Finding]:
    subject = f"{port.device}/{port.port}"
    name = f"{port.device} port {port.port}"
    if port.rate is None:
        return []  # not recorded: not judged (the OK summary says so)
    if port.rate_gbps is None:
        return [
            Finding(
                ID,
                Status.UNKNOWN,
                f"{name}: rate {port.rate!r} is not '<N> Gb/sec (<width>X <speed>)' as the kernel prints it",
                ev,
                expected="'<N> Gb/sec (<width>X <speed>)'",
                remediation=f"ibstat {port.device}; a corrupt recording or a driver bug.",
                subject=subject,
            )
        ]
    if params.min_rate_gbps > 0 and port.rate_gbps < params.min_rate_gbps:
        return [
            Finding(
                ID,
                Status.WARN,
                f"{name} runs at {port.rate}, below {params.min_rate_gbps:g} Gb/s",
                ev,
                expected=f">= {params.min_rate_gbps:g} Gb/sec",
                remediation=f"If the HCA and switch support more: check the cable rating and reseat it; "
                f"mlxlink -d {port.device} -p {port.port} shows the negotiated speed and width. "
                "If this is the fabric's rate, set min_rate_gbps for this SKU.",
                subject=subject,
            )
        ]
    return []


def _judged_on_width(p: RdmaPort) -> bool:
    """Active InfiniBand ports whose rate names a width. A RoCE port's width is its Ethernet speed
    mapped onto IB terms (ib_get_eth_speed in include/rdma/ib_verbs.h: 25 GbE is "1X EDR"), not a
    lane count that can train down; a rate without a width (ibstat's) tells nothing."""
    return p.state == "ACTIVE" and p.link_layer == "InfiniBand" and p.lanes is not None


def _width_reference(ports: list[RdmaPort], params: Params) -> tuple[int, RdmaPort | None] | None:
    """The width ports are held to: expected_width, or the node's widest judged port."""
    if params.expected_width > 0:
        return params.expected_width, None
    judged = [p for p in ports if _judged_on_width(p)]
    widest = max(judged, key=lambda p: p.lanes or 0, default=None)
    return (widest.lanes, widest) if widest and widest.lanes else None


def _width_finding(
    port: RdmaPort, reference: tuple[int, RdmaPort | None] | None, ev: dict[str, str], f: Facts
) -> Finding | None:
    if reference is None or not _judged_on_width(port) or (port.lanes or 0) >= reference[0]:
        return None
    width, ref = reference
    name = f"{port.device} port {port.port}"
    if ref is None:
        against = f"narrower than expected_width {width}X"
    else:
        against = f"fewer lanes than {ref.device}/{ref.port} at {width}X ({ref.rate})"
        ref_rate = f"{_base(ref)}/rate"
        ev = {**ev, ref_rate: f.raw.get(ref_rate) or str(ref.rate)}
    return Finding(
        ID,
        Status.WARN,
        f"{name} runs {port.width} ({port.rate}), {against}: trained down or cabled narrower",
        ev,
        expected=f"{width}X",
        remediation="A port that trained below its cable's width lost lanes: a damaged cable or "
        "transceiver, a dirty or half-seated connector, or a switch port limited in width. "
        f"mlxlink -d {port.device} -p {port.port} shows the enabled and active width; reseat or replace "
        "the cable. Split cables (HDR100, NDR200) run 2X by design: set expected_width=2.",
        subject=f"{port.device}/{port.port}",
    )


def _port_findings(
    port: RdmaPort, params: Params, reference: tuple[int, RdmaPort | None] | None, f: Facts
) -> list[Finding]:
    ev = _port_evidence(port, f)
    subject = f"{port.device}/{port.port}"
    out: list[Finding] = []
    unknown = _state_unknown(port, f)
    if unknown:
        why, whole = unknown
        out.append(
            Finding(
                ID,
                Status.UNKNOWN,
                why,
                ev,
                expected="state ACTIVE, phys_state LinkUp, as '<number>: <name>'",
                remediation=f"ibstat {port.device}; record the node again if the file is missing or "
                "corrupt in a snapshot.",
                subject=subject,
            )
        )
        if whole:
            return out
    problem = _state_problem(port)
    if problem:
        why, remediation = problem
        status, why = _down_severity(port, why, params, f)
        return [
            Finding(
                ID,
                status,
                why,
                ev,
                expected="state ACTIVE, phys_state LinkUp",
                remediation=remediation,
                subject=subject,
            )
        ]
    out += _rate_findings(port, params, ev)
    narrow = _width_finding(port, reference, ev, f)
    if narrow:
        out.append(narrow)
    if not out:
        out.append(_healthy(port, ev))
    return out


def _down_severity(port: RdmaPort, why: str, params: Params, f: Facts) -> tuple[Status, str]:
    """FAIL for a port that cannot carry traffic, unless it has no link (DOWN) while another port
    of its HCA is ACTIVE: then the HCA is in use and this port is as likely never cabled (WARN)."""
    if port.state != "DOWN" or params.require_all_ports:
        return Status.FAIL, why
    active = next((p for p in f.ports if p.device == port.device and p.state == "ACTIVE"), None)
    if active is None:
        return Status.FAIL, why
    return Status.WARN, (
        f"{why}; {active.device} port {active.port} is ACTIVE, so this may be an unused port "
        "(set require_all_ports if every port must carry traffic)"
    )


def _healthy(port: RdmaPort, ev: dict[str, str]) -> Finding:
    numa = f", NUMA node {port.numa_node}" if port.numa_node is not None else ""
    netdevs = f", netdev {', '.join(port.netdevs)}" if port.netdevs else ""
    phys = port.phys_state or f"phys_state not recorded ({_base(port)}/phys_state absent)"
    rate = port.rate or f"rate not recorded ({_base(port)}/rate absent)"
    return Finding(
        ID,
        Status.OK,
        f"{port.device} port {port.port}: ACTIVE/{phys}, {rate}, "
        f"{port.link_layer or 'link layer unknown'}{_where(port)}{numa}{netdevs}",
        ev,
        subject=f"{port.device}/{port.port}",
    )


def _rail_groups(ports: list[RdmaPort]) -> dict[str, list[RdmaPort]]:
    """Active ports that should run at one rate: the same link layer and HCA model. A GPU node's
    compute rails (8 ConnectX-7 at 400) and its storage or front-end ports (ConnectX-6 Dx at 100, a
    BlueField) are different networks by design; ports whose model is unknown are grouped by link
    layer alone."""
    groups: dict[str, list[RdmaPort]] = {}
    for p in ports:
        if p.state == "ACTIVE" and p.rate_gbps is not None:
            layer = p.link_layer or "unknown"
            key = f"{layer} ports of {p.hca_type}" if p.hca_type else f"{layer} ports"
            groups.setdefault(key, []).append(p)
    return groups


def _mixed_rates(ports: list[RdmaPort], params: Params) -> list[Finding]:
    out: list[Finding] = []
    for label, same in sorted(_rail_groups(ports).items()):
        if len({p.rate_gbps for p in same}) < 2:
            continue
        listing = ", ".join(f"{p.device}/{p.port} {p.rate_gbps:g}" for p in same)
        evidence = {f"{_base(p)}/rate": str(p.rate) for p in same}
        evidence |= {f"{IB_DIR}/{p.device}/hca_type": p.hca_type for p in same if p.hca_type}
        out.append(
            Finding(
                ID,
                Status.OK if params.allow_mixed_rates else Status.WARN,
                f"{label} run at different rates ({listing} Gb/s): collectives run at the slowest",
                evidence,
                expected="one rate across ports of the same model and link layer",
                remediation="Find the slow port (cable, transceiver, switch port configuration), "
                "or exclude it from NCCL with NCCL_IB_HCA.",
                subject="rates",
            )
        )
    return out


def _reported_per_port(problem: str, ports: list[RdmaPort]) -> bool:
    """State, phys_state and rate problems are UNKNOWN findings of their port already."""
    return any(
        problem.startswith(f"{_base(p)}/{name}: ") for p in ports for name in ("state", "phys_state", "rate")
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    if not f.ib_listed and not f.ib_recorded:
        return [not_recorded(ID, IB_DIR, "rdma", "RDMA ports")]
    if not f.ib_listed:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no RDMA devices: {IB_DIR} absent (no InfiniBand/RoCE driver loaded)",
                {IB_DIR: "absent"},
                subject="rdma",
            )
        ]
    findings: list[Finding] = []
    with_ports = {port.device for port in f.ports}
    for dev in f.devices:
        if dev in with_ports:
            continue
        real = f.device_real.get(dev)
        why = "its sysfs link dangles (no device behind it)" if real is None else "it has no ports"
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"{dev}: no ports readable under {IB_DIR}/{dev}/ports "
                f"({why}; e.g. a SCIF or software device)",
                {f"{IB_DIR}/{dev}": real or "(dangling link)"},
                subject=dev,
            )
        )
    if not f.ports:
        findings.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"no RDMA ports under {IB_DIR} ({', '.join(f.devices) or 'no devices'})",
                {IB_DIR: ", ".join(f.devices) or "(empty)"},
                subject="rdma",
            )
        )
        return findings
    reference = _width_reference(f.ports, p)
    for port in f.ports:
        findings += _port_findings(port, p, reference, f)
    findings += _mixed_rates(f.ports, p)
    # What cannot be parsed is not known: UNKNOWN, naming each file and its value.
    other = [q for port in f.ports for q in port.problems if not _reported_per_port(q, f.ports)]
    findings += [
        replace(u, status=Status.UNKNOWN) for u in unparsable(ID, other, "port attribute(s)", "`ibstat`")
    ]
    return findings


CHECK = Check(
    id=ID,
    title="RDMA ports",
    area=Area.NETWORK,
    tags=("preflight", "network"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=network.PATHS,
)
