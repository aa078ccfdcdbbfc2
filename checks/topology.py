"""GPU <-> NIC <-> NUMA affinity in `nvidia-smi topo -m` terms, from sysfs, checked against the driver.

The matrix comes from the PCI tree and NUMA nodes in sysfs (nodeagent.facts.pci_topology, which
defines the levels X, PIX, PXB, PHB, NODE, SYS), so it works on a node whose GPU driver is broken
or absent. Where `nvidia-smi topo -m` is available (live, or recorded in a snapshot as
commands/nvidia-smi-topo-m.txt) the two are compared cell by cell: a disagreement means a device
the driver does not see, a stale recording, or a topology sysfs does not describe (the WARN shows
both values).

What is flagged: a GPU whose nearest RDMA or high-speed NIC is across the inter-socket link (SYS),
so its GPUDirect RDMA traffic, if any, crosses sockets ("the two devices must share the same
upstream PCI Express root complex", https://docs.nvidia.com/cuda/gpudirect-rdma/index.html), and
a GPU whose NUMA node is unknown, so its rank cannot be pinned near it. Where the firmware reports
no node (numa_node -1 or absent) the GPU's local CPUs (local_cpulist, or the local_cpus mask) place
it, by the same rule the numa-pinning tuner binds its rank with (facts.ranks.node_by_cpus), so the
two never disagree about where a GPU is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import cgroup, gpus, pci, pci_topology, ranks, topology
from nodeagent.facts.cgroup import CgroupCpus
from nodeagent.facts.pci import PCI_DIR
from nodeagent.facts.pci_topology import LEVELS, PciTopology, rank
from nodeagent.facts.reader import Reader
from nodeagent.facts.topo_matrix import COMMAND as TOPO_COMMAND
from nodeagent.facts.topo_matrix import TopoMatrix
from nodeagent.host import Host

ID = "topology"
SMI = " ".join(TOPO_COMMAND)
GDR_DOC = "https://docs.nvidia.com/cuda/gpudirect-rdma/index.html"
NCCL_GDR_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net-gdr-level-formerly-nccl-ib-gdr-level"
_MAX_CELLS = 24  # disagreeing cells shown in evidence; the summary gives the total


@dataclass(frozen=True)
class Params:
    max_nic_level: str = param(
        "NODE",
        "Farthest acceptable level from a GPU to its nearest RDMA/high-speed NIC (X PIX PXB PHB NODE "
        f"SYS). SYS crosses the inter-socket link; GPUDirect RDMA wants a shared root complex ({GDR_DOC}) "
        f"and NCCL uses it only up to NCCL_NET_GDR_LEVEL ({NCCL_GDR_DOC}). Set PXB on rail-optimised "
        "nodes with one NIC per PCIe switch.",
    )
    min_nic_speed_gbps: float = param(
        25.0,
        "Ethernet ports without RDMA count as data NICs from this speed up; 1/10 GbE ports are "
        "management networks (speed from /sys/class/net/*/speed, "
        "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-net).",
    )


@dataclass(frozen=True)
class Facts:
    topo: PciTopology
    smi: TopoMatrix | None
    smi_missing: str | None  # why there is no nvidia-smi matrix
    numa_raw: dict[str, str | None]  # GPU PCI address -> raw numa_node (None: absent), GPUs without a node
    pci_devices: int
    cpus: CgroupCpus | None = None  # what limits the CPUs of a job started here
    # GPU -> its online local CPUs (sysfs local_cpulist, else the local_cpus mask), and the file read
    local_cpus: dict[str, list[int]] = field(default_factory=dict)
    local_files: dict[str, str] = field(default_factory=dict)
    node_cpus: dict[int, list[int]] = field(default_factory=dict)  # NUMA node -> its CPUs (nodes with CPUs)


def collect(host: Host) -> Facts:
    topo = pci_topology.collect(host)
    smi, missing = gpus.topo_matrix(host)
    numa_raw = {
        g.pci_address: host.read_value(f"{PCI_DIR}/{g.pci_address}/numa_node")
        for g in topo.gpus
        if g.numa_node is None
    }
    devices = pci.by_address(pci.collect(host))
    nodes = topology.collect(host)
    r = Reader(host)
    online = set(nodes.cpus_online)
    local_cpus = {
        g.name: cpus
        for g in topo.gpus
        if (cpus := ranks.local_cpus(r, devices.get(g.pci_address), g.pci_address, online))
    }
    local_files = {g.name: _local_file(devices.get(g.pci_address), g.pci_address) for g in topo.gpus}
    return Facts(
        topo=topo,
        smi=smi,
        smi_missing=missing,
        numa_raw=numa_raw,
        pci_devices=len(host.listdir(PCI_DIR) or []),
        cpus=cgroup.collect(host),
        local_cpus=local_cpus,
        local_files=local_files,
        node_cpus={n.id: list(n.cpus) for n in nodes.numa_nodes if n.cpus},
    )


def _local_file(dev: pci.PciDevice | None, address: str) -> str:
    """The file a GPU's local CPUs were read from: local_cpulist, else the local_cpus mask."""
    return f"{PCI_DIR}/{address}/{'local_cpulist' if dev is not None and dev.local_cpus else 'local_cpus'}"


def _norm(cell: str | None) -> str | None:
    return "SYS" if cell == "SOC" else cell


@dataclass(frozen=True)
class _View:
    """GPUs and data NICs of both sources (sysfs first, then nvidia-smi), NUMA nodes, addresses."""

    gpus: list[str]
    nics: list[str]
    numa: dict[str, int | None]
    address: dict[str, str]
    by_cpus: dict[str, int]  # GPUs whose node neither the firmware nor the driver gave: placed by local CPUs

    @staticmethod
    def build(f: Facts, p: Params) -> _View:
        t = f.topo
        data_nics = [
            n.name
            for n in t.nics
            if n.rdma or (n.speed_gbps is not None and n.speed_gbps >= p.min_nic_speed_gbps)
        ]
        names = [g.name for g in t.gpus]
        numa: dict[str, int | None] = {g.name: g.numa_node for g in t.gpus}
        address = {g.name: g.pci_address for g in t.gpus}
        if f.smi is not None:
            for g in f.smi.gpus:
                if g not in names:
                    names.append(g)
                # sysfs first; the driver's NUMA Affinity where the firmware gave sysfs none
                if numa.get(g) is None:
                    numa[g] = f.smi.numa_affinity.get(g)
            data_nics += [n for n in f.smi.nics if n not in data_nics]
        by_cpus = {
            g: node
            for g in names
            if numa.get(g) is None and (node := ranks.node_by_cpus(local_cpus(f, g), f.node_cpus)) is not None
        }
        numa.update(by_cpus)
        return _View(names, data_nics, numa, address, by_cpus)


def local_cpus(f: Facts, gpu: str) -> list[int] | None:
    """A GPU's local CPUs: from sysfs, else the driver's CPU Affinity."""
    return f.local_cpus.get(gpu) or (f.smi.cpu_affinity.get(gpu) if f.smi is not None else None)


def gpu_nodes(f: Facts, p: Params) -> dict[str, int | None]:
    """Each GPU's NUMA node as the check judges it (None: unknown)."""
    return dict(_View.build(f, p).numa)


def link(f: Facts, a: str, b: str) -> str | None:
    """The level between two endpoints: from sysfs when it could derive it, else from nvidia-smi."""
    own = f.topo.link(a, b)
    if own is not None:
        return own
    if f.smi is None:
        return None
    cell = _norm(f.smi.link(a, b))
    return cell if cell in LEVELS else None  # NV# says NVLink, nothing about PCIe


def _nearest(f: Facts, gpu: str, nics: list[str]) -> tuple[str | None, list[str]]:
    cells = [(link(f, gpu, n), n) for n in nics]
    known = [(rank(c), n, c) for c, n in cells if c is not None]
    if not known:
        return None, []
    best = min(r for r, _, _ in known)
    found = [(n, c) for r, n, c in known if r == best]
    return found[0][1], [n for n, _ in found]


def _row(f: Facts, v: _View, gpu: str) -> str:
    numa = v.numa.get(gpu)
    cells = ", ".join(f"{n} {link(f, gpu, n) or '?'}" for n in v.nics)
    return f"NUMA {numa if numa is not None else '?'}" + (f"; {cells}" if cells else "; no NIC")


def _matrix(f: Facts, v: _View) -> Finding:
    ev: dict[str, str] = {}
    for g in v.gpus:
        key = f"{PCI_DIR}/{v.address[g]} ({g})" if g in v.address else f"{SMI}: {g}"
        ev[key] = _row(f, v, g)
    source = "sysfs" if f.topo.gpus else SMI
    if f.smi is None:
        ev[SMI] = f"not available: {f.smi_missing or 'no output'}"
    elif f.topo.gpus:
        ev[SMI] = f"{len(f.smi.gpus)} GPU(s), {len(f.smi.nics)} NIC(s): compared below"
    if f.smi is not None and f.smi.notes:
        ev[f"{SMI}: what the output lacks"] = "; ".join(f.smi.notes)
    nodes = sorted({n for n in v.numa.values() if n is not None})
    summary = (
        f"{len(v.gpus)} GPU(s) on NUMA node(s) {','.join(map(str, nodes)) or '?'}, "
        f"{len(v.nics)} RDMA/high-speed NIC(s); matrix from {source}"
    )
    return Finding(ID, Status.OK, summary, ev, subject="matrix")


def _affinity(f: Facts, v: _View, p: Params) -> list[Finding]:
    if not v.nics:
        ignored = [n.name for n in f.topo.nics]
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no RDMA or >= {p.min_nic_speed_gbps:g} Gb/s NIC: GPU-NIC affinity does not apply",
                {"/sys/class/infiniband": "no RDMA device"}
                | ({"/sys/class/net": f"only slower or down ports: {', '.join(ignored)}"} if ignored else {}),
                subject="gpu-nic",
            )
        ]
    limit = p.max_nic_level if p.max_nic_level in LEVELS else "NODE"
    out: list[Finding] = []
    good: list[str] = []
    good_cells: dict[str, str] = {}
    for g in v.gpus:
        best, names = _nearest(f, g, v.nics)
        if best is not None and rank(best) <= rank(limit):
            good.append(f"{g} {'+'.join(names)} {best}")
            good_cells |= {f"{g}-{n}": best for n in names}
        else:
            out.append(_far_from_nics(f, v, g, best, names, limit))
    if good and len(good) == len(v.gpus):
        out.append(
            Finding(
                ID,
                Status.OK,
                f"every GPU has a NIC at {limit} or closer: " + "; ".join(good),
                good_cells,
                subject="gpu-nic",
            )
        )
    return out


def _far_from_nics(f: Facts, v: _View, g: str, best: str | None, names: list[str], limit: str) -> Finding:
    """A GPU whose nearest NIC is beyond `limit`, or whose distance to the NICs is unknown (best None)."""
    ev = {f"{g}-{n}": link(f, g, n) or "?" for n in v.nics}
    if best is None:
        return Finding(
            ID,
            Status.WARN,
            f"{g}: distance to the NICs unknown (not placed in the PCI tree, no nvidia-smi)",
            ev,
            expected=f"a NIC at {limit} or closer",
            remediation=f"Run `{SMI}` on the node, or record it in the snapshot.",
            subject=g,
        )
    return Finding(
        ID,
        Status.WARN,
        f"{g} has no NIC closer than {best} (nearest: {', '.join(names)})",
        ev,
        expected=f"a NIC at {limit} or closer",
        remediation=(
            "Install or move a NIC onto this GPU's socket (its root complex, ideally behind "
            "the GPU's PCIe switch). Until then its network traffic crosses sockets and NCCL "
            f"does not use GPUDirect RDMA for it beyond NCCL_NET_GDR_LEVEL; see {GDR_DOC}."
        ),
        subject=g,
    )


def _numa(f: Facts, v: _View) -> list[Finding]:
    unknown = [g for g in v.gpus if v.numa.get(g) is None]
    if f.topo.cpu_numa_nodes <= 1:
        return []  # one node: nothing to pin to, and -1 is what such firmware reports
    if not unknown:
        return [_placed_by_cpus(f, v)] if v.by_cpus else []
    ev: dict[str, str] = {}
    for g in unknown:
        addr = v.address.get(g)
        if addr:
            raw = f.numa_raw.get(addr)
            ev[f"{PCI_DIR}/{addr}/numa_node"] = "absent" if raw is None else raw or "(empty)"
        else:
            ev[f"{SMI}: {g} NUMA Affinity"] = "N/A"
    addresses = [v.address[g] for g in unknown if g in v.address]
    fix = f"echo NODE > {PCI_DIR}/{addresses[0]}/numa_node (root; taints the kernel), " if addresses else ""
    return [
        Finding(
            ID,
            Status.WARN,
            f"NUMA node unknown for {', '.join(unknown)} on a {f.topo.cpu_numa_nodes}-node machine: "
            "their ranks cannot be pinned near them",
            ev,
            expected="numa_node >= 0 (the firmware's ACPI _PXM for the GPU's root complex)",
            remediation="Update the BIOS (it should report PCIe proximity domains); until then set it "
            "by hand: " + fix + f"using the CPU Affinity column of `{SMI}`.",
            subject="numa",
        )
    ]


def _placed_by_cpus(f: Facts, v: _View) -> Finding:
    """GPUs the firmware gave no node whose local CPUs place them: their ranks can be pinned there."""
    ev: dict[str, str] = {}
    by_node: dict[int, list[str]] = {}
    for g, node in v.by_cpus.items():
        by_node.setdefault(node, []).append(g)
        addr = v.address.get(g)
        if addr:
            raw = f.numa_raw.get(addr)
            ev[f"{PCI_DIR}/{addr}/numa_node"] = "absent" if raw is None else raw or "(empty)"
            ev[f"{f.local_files.get(g, f'{PCI_DIR}/{addr}/local_cpulist')} ({g})"] = format_cpulist(
                f.local_cpus.get(g) or []
            )
        else:
            ev[f"{SMI}: {g} CPU Affinity"] = format_cpulist(local_cpus(f, g) or [])
    where = "; ".join(f"{', '.join(gs)} on node {n}" for n, gs in sorted(by_node.items()))
    return Finding(
        ID,
        Status.OK,
        f"NUMA node not reported for {', '.join(v.by_cpus)}; their local CPUs place them: {where}",
        ev,
        expected="numa_node >= 0, or local CPUs within one node",
        subject="numa",
    )


def _outside(f: Facts, v: _View) -> dict[str, tuple[str, str]]:
    """GPUs none of whose local CPUs this job may use, each with its evidence (path, value seen).

    Two kinds of evidence: sysfs local CPUs disjoint from the allowed CPUs (affinity, cgroup
    cpuset), or an empty CPU Affinity cell beside a known NUMA Affinity in `nvidia-smi topo -m`,
    which prints each GPU's local CPUs as far as the calling process may use them.
    """
    c = f.cpus
    limited = c is not None and (c.affinity is not None or c.cpuset is not None)
    allowed = set(c.allowed) if c is not None and limited and c.allowed is not None else None
    out: dict[str, tuple[str, str]] = {}
    for g in v.gpus:
        local = f.local_cpus.get(g)
        if local and allowed is not None and not set(local) & allowed:
            path = f.local_files.get(g, f"{PCI_DIR}/{v.address[g]}/local_cpulist")
            out[g] = (f"{path} ({g})", format_cpulist(local))
        elif (
            f.smi is not None
            and g in f.smi.gpus
            and f.smi.cpu_affinity.get(g) is None
            and f.smi.numa_affinity.get(g) is not None
        ):
            out[g] = (f"{SMI}: {g}", f"CPU Affinity empty, NUMA Affinity {f.smi.numa_affinity[g]}")
    return out


def gpus_outside_cpuset(f: Facts, p: Params) -> list[str]:
    """The GPUs whose ranks would run on the far NUMA node: none of their local CPUs is allowed."""
    return list(_outside(f, _View.build(f, p)))


def _outside_cpuset(f: Facts, v: _View) -> list[Finding]:
    """GPUs none of whose local CPUs this job may use: their ranks would run on the far node."""
    found = _outside(f, v)
    outside = list(found)
    ev = dict(found.values())
    c = f.cpus
    allowed = c.allowed if c is not None and (c.affinity is not None or c.cpuset is not None) else None
    if not outside:
        return []
    if c is not None and allowed is not None:
        # What the files hold, each under its own path (their intersection with the online CPUs
        # is what the job gets).
        if c.cpuset is not None and c.cpuset_source:
            ev[c.cpuset_source] = format_cpulist(c.cpuset)
        if c.affinity is not None:
            ev["/proc/self/status Cpus_allowed_list"] = format_cpulist(c.affinity)
    return [
        Finding(
            ID,
            Status.WARN,
            f"{', '.join(outside)}: none of their NUMA-local CPUs is in this job's CPU set; ranks on "
            "them would run on the far NUMA node",
            ev,
            expected="every GPU the job uses has CPUs of its own NUMA node in the job's cpuset",
            remediation="Give the job CPUs on every GPU's NUMA node (Slurm: --gres-flags=enforce-binding "
            "or --cpu-bind; Kubernetes: the topology manager with policy single-numa-node), or restrict it "
            "to the GPUs whose CPUs it has (CUDA_VISIBLE_DEVICES).",
            subject="cpuset",
        )
    ]


def _cross_check(f: Facts) -> list[Finding]:
    smi, t = f.smi, f.topo
    if smi is None:
        if f.smi_missing and f.smi_missing.startswith("unparsable"):
            return [
                Finding(
                    ID,
                    Status.UNKNOWN,
                    "nvidia-smi topo -m output could not be parsed: no cross-check of the sysfs matrix",
                    {SMI: f.smi_missing},
                    expected="a complete matrix (every column with its row)",
                    remediation=f"Re-run `{SMI}` on the node (or re-record the snapshot) and read it.",
                    subject="cross-check",
                )
            ]
        return []
    if not t.gpus:
        return []
    ev: dict[str, str] = {}
    sys_gpus = [g.name for g in t.gpus]
    only_sysfs = [g for g in sys_gpus if g not in smi.gpus]
    only_smi = [g for g in smi.gpus if g not in sys_gpus]
    if only_sysfs:
        ev["GPUs in sysfs, not in nvidia-smi"] = ", ".join(only_sysfs)
    if only_smi:
        ev["GPUs in nvidia-smi, not in sysfs"] = ", ".join(only_smi)
    differ, compared = _differing_cells(smi, t, ev)
    differ += _differing_numa(smi, t, ev)
    if differ or only_sysfs or only_smi:
        return [_disagreement(ev, differ, compared, only_sysfs, only_smi)]
    return [
        Finding(
            ID,
            Status.OK,
            f"sysfs matrix agrees with nvidia-smi topo -m on {compared} PCIe cell(s) and on NUMA nodes",
            {SMI: f"{len(smi.gpus)} GPU(s), {len(smi.nics)} NIC(s)"},
            subject="cross-check",
        )
    ]


def _disagreement(
    ev: dict[str, str], differ: int, compared: int, only_sysfs: list[str], only_smi: list[str]
) -> Finding:
    parts = []
    if differ:
        parts.append(f"{differ} of {compared} cell(s) differ")
    if only_sysfs:
        parts.append(f"{', '.join(only_sysfs)} not seen by the driver")
    if only_smi:
        parts.append(f"{', '.join(only_smi)} not found in sysfs")
    return Finding(
        ID,
        Status.WARN,
        "sysfs topology and nvidia-smi topo -m disagree: " + "; ".join(parts),
        ev,
        expected="the same level in both for every GPU/NIC pair",
        remediation="A GPU missing from the driver has fallen off the bus or failed to initialise "
        "(check dmesg for Xid/AER errors); otherwise re-record the snapshot on the node, where "
        "nvidia-smi and sysfs are read together.",
        subject="cross-check",
    )


def _differing_cells(smi: TopoMatrix, t: PciTopology, ev: dict[str, str]) -> tuple[int, int]:
    """PCIe cells (GPU-GPU, GPU-NIC) where the two matrices give different levels, and the cells
    compared; the first few differences go to `ev`. NVLink cells are not compared: sysfs has no NVLink."""
    differ = compared = 0
    sys_gpus = [g.name for g in t.gpus]
    names = [g for g in sys_gpus if g in smi.gpus] + [n.name for n in t.nics if n.name in smi.devices]
    gpu_names = set(sys_gpus)
    for i, a in enumerate(names):
        if a not in gpu_names:
            continue
        for b in names[i + 1 :]:
            theirs, ours = _norm(smi.link(a, b)), t.link(a, b)
            if theirs is None or theirs not in LEVELS:
                continue  # NV#: NVLink, which sysfs does not show
            compared += 1
            if ours != theirs:
                differ += 1
                if differ <= _MAX_CELLS:
                    ev[f"{SMI}: {a}-{b}"] = theirs
                    ev[f"sysfs: {a}-{b}"] = ours or "unknown"
    return differ, compared


def _differing_numa(smi: TopoMatrix, t: PciTopology, ev: dict[str, str]) -> int:
    """GPUs whose NUMA node differs between sysfs and the driver's NUMA Affinity (each into `ev`)."""
    differ = 0
    by_name = {g.name: g for g in t.gpus}
    for g in [g.name for g in t.gpus]:
        theirs_numa = smi.numa_affinity.get(g)
        ours_numa = by_name[g].numa_node
        if g in smi.gpus and theirs_numa is not None and ours_numa is not None and theirs_numa != ours_numa:
            differ += 1
            ev[f"{SMI}: {g} NUMA Affinity"] = str(theirs_numa)
            ev[f"{PCI_DIR}/{by_name[g].pci_address}/numa_node"] = str(ours_numa)
    return differ


def _unplaced(f: Facts, v: _View) -> list[Finding]:
    gpus_unplaced = [g for g in f.topo.unplaced if g in v.address]
    if not gpus_unplaced:
        return []
    return [
        Finding(
            ID,
            Status.WARN,
            f"{', '.join(gpus_unplaced)} not placed in the PCI tree: sysfs gives no path from a host bridge",
            {
                f"{PCI_DIR}/{v.address[g]}": "not a link into /sys/devices/pciDDDD:BB/..."
                for g in gpus_unplaced
            },
            expected="/sys/bus/pci/devices/* linking into /sys/devices/pci*",
            remediation="A partial recording (re-record with `nodeagent snapshot`, which keeps the links), "
            f"or a platform that hides the PCI hierarchy; `{SMI}` still gives the driver's view.",
            subject="tree",
        )
    ]


def evaluate(f: Facts, p: Params) -> list[Finding]:
    v = _View.build(f, p)
    if not v.gpus and f.smi_missing and f.smi_missing.startswith("unparsable"):
        return [
            Finding(
                ID,
                Status.UNKNOWN,
                "the GPU matrix could not be read: nvidia-smi topo -m output not understood, no GPU in sysfs",
                {SMI: f.smi_missing, PCI_DIR: f"{f.pci_devices} device(s), none a GPU"},
                expected="a complete `nvidia-smi topo -m` matrix",
                remediation=f"Run `{SMI}` on the node; attach its output to a nodeagent bug report.",
                subject="matrix",
            )
        ]
    if not v.gpus:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                "no GPUs: neither a GPU in the PCI devices nor an nvidia-smi topo -m matrix",
                {
                    PCI_DIR: f"{f.pci_devices} device(s), none a GPU",
                    SMI: f.smi_missing or "no GPUs",
                },
                subject="matrix",
            )
        ]
    findings = [_matrix(f, v)]
    findings += _unplaced(f, v)
    findings += _affinity(f, v, p)
    findings += _numa(f, v)
    findings += _outside_cpuset(f, v)
    findings += _cross_check(f)
    return findings


CHECK = Check(
    id=ID,
    title="GPU/NIC/NUMA topology",
    area=Area.PCIE,
    tags=("gpu", "network", "pcie"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    # ranks.PATHS: the local_cpus masks and the NUMA nodes' CPUs that place a GPU the firmware did not.
    paths=(*pci_topology.PATHS, *cgroup.PATHS, *ranks.PATHS),
    commands=pci_topology.COMMANDS,
)
