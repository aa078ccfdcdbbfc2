"""NUMA layout and balance: nodes vs packages, memory per node, automatic balancing, zone reclaim, SMT.

A training rank pinned to its GPU's NUMA node is only as good as the layout it lands on: a node
without memory, a missing DIMM or BIOS node interleaving all turn local accesses remote.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status, unparsable
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import system, topology
from nodeagent.facts.topology import CPU_DIR, NODE_DIR, Topology
from nodeagent.host import Host

ID = "numa"
NUMA_BALANCING = "kernel.numa_balancing"
ZONE_RECLAIM = "vm.zone_reclaim_mode"


@dataclass(frozen=True)
class Params:
    max_memory_imbalance_pct: float = param(
        10.0,
        "Nodes of one machine carry the same DIMMs; >10% less on one node means a missing or failed "
        "DIMM (memory channel population: https://www.kernel.org/doc/html/latest/mm/numa.html).",
    )
    numa_balancing: int = param(
        0,
        "Pinned training ranks gain nothing from automatic NUMA balancing and pay for its page "
        "faults and migrations (https://docs.kernel.org/admin-guide/sysctl/kernel.html#numa-balancing).",
    )
    zone_reclaim_mode: int = param(
        0,
        "Non-zero reclaims page cache on the local node before going remote, stalling input "
        "pipelines (https://docs.kernel.org/admin-guide/sysctl/vm.html#zone-reclaim-mode).",
    )
    smt: str = param(
        "any",
        "Expected SMT state: 'on', 'off' or 'any'. Thread pools sized to logical CPUs over-subscribe "
        "cores when SMT is on (https://docs.kernel.org/admin-guide/hw-vuln/core-scheduling.html).",
    )
    allow_offline_cpus: bool = param(
        False, "Offline CPUs are cores the job cannot use (Documentation/core-api/cpu_hotplug.rst)."
    )


@dataclass(frozen=True)
class Facts:
    topology: Topology
    numa_balancing: str | None
    zone_reclaim_mode: str | None
    smt_active: str | None


def collect(host: Host) -> Facts:
    return Facts(
        topology=topology.collect(host),
        numa_balancing=system.sysctl(host, NUMA_BALANCING),
        zone_reclaim_mode=system.sysctl(host, ZONE_RECLAIM),
        smt_active=host.read_value(f"{CPU_DIR}/smt/active"),
    )


def _layout(t: Topology, p: Params) -> list[Finding]:
    cpu_nodes = [n for n in t.numa_nodes if n.cpus]
    evidence = {f"{NODE_DIR}/node{n.id}/cpulist": format_cpulist(n.cpus) or "(none)" for n in t.numa_nodes}
    evidence["packages"] = str(t.packages)
    layout = f"{len(cpu_nodes)} NUMA node(s) with CPUs on {t.packages} package(s)"
    out = []
    if t.packages > 1 and len(cpu_nodes) == 1:
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"{layout}: one node spans every socket",
                evidence,
                expected="at least one NUMA node per package",
                remediation="Disable 'node interleaving' (enable NUMA) in the BIOS, or fix the firmware's "
                "ACPI SRAT, so that each socket's memory is local to it and ranks can be pinned.",
                subject="layout",
            )
        )
    else:
        note = ""
        if len(cpu_nodes) > t.packages:
            per = len(cpu_nodes) // max(t.packages, 1)
            note = f": sub-NUMA clustering is on (SNC{per}/NPS{per}); pin ranks per node, not per socket"
        out.append(Finding(ID, Status.OK, layout + note, evidence, subject="layout"))
    if t.cpus_offline:
        out.append(
            Finding(
                ID,
                Status.OK if p.allow_offline_cpus else Status.WARN,
                f"CPUs {format_cpulist(t.cpus_offline)} are offline",
                {f"{CPU_DIR}/online": format_cpulist(t.cpus_online)},
                expected="all present CPUs online",
                remediation="Bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) or find why "
                "they were taken offline (maxcpus=, nosmt, hardware errors in the kernel log).",
                subject="offline",
            )
        )
    return out


def _balance(t: Topology, p: Params) -> Finding | None:
    nodes = [n for n in t.numa_nodes if n.cpus and n.memory_mib is not None]
    if len(nodes) < 2:
        return None
    evidence = {f"{NODE_DIR}/node{n.id}/meminfo": f"MemTotal {n.memory_mib} MiB" for n in nodes}
    largest = max(n.memory_mib or 0 for n in nodes)
    short = [
        n
        for n in nodes
        if largest and (largest - (n.memory_mib or 0)) * 100 / largest > p.max_memory_imbalance_pct
    ]
    if not short:
        return Finding(
            ID, Status.OK, f"memory balanced across {len(nodes)} nodes", evidence, subject="balance"
        )
    names = ", ".join(f"node {n.id} ({n.memory_mib} MiB)" for n in short)
    return Finding(
        ID,
        Status.WARN,
        f"memory unbalanced: {names} vs {largest} MiB on the largest node",
        evidence,
        expected=f"every node within {p.max_memory_imbalance_pct:g}% of the largest",
        remediation="Check DIMM population and the BMC's memory error log (a failed DIMM is mapped out "
        "at boot); ranks on the short node spill to remote memory.",
        subject="balance",
    )


def _memoryless(t: Topology) -> list[Finding]:
    out = []
    unread = [n for n in t.numa_nodes if n.cpus and n.memory_mib is None]
    if unread:
        # Not recorded is not "no memory": only a MemTotal of 0 shows a node without DIMMs.
        out.append(
            Finding(
                ID,
                Status.SKIPPED,
                f"memory of node(s) {format_cpulist(n.id for n in unread)} unknown: meminfo not readable",
                {f"{NODE_DIR}/node{n.id}/meminfo": "(absent)" for n in unread},
                subject="node-memory",
            )
        )
    for n in t.numa_nodes:
        path = f"{NODE_DIR}/node{n.id}"
        if n.cpus and n.memory_mib == 0:
            out.append(
                Finding(
                    ID,
                    Status.WARN,
                    f"node {n.id} has CPUs {format_cpulist(n.cpus)} but no memory",
                    {f"{path}/meminfo": "MemTotal 0 MiB"},
                    expected="memory on every node with CPUs",
                    remediation="Populate that socket's memory channels; every allocation of a rank "
                    "pinned there is remote.",
                    subject=f"node{n.id}",
                )
            )
        elif not n.cpus:
            out.append(
                Finding(
                    ID,
                    Status.OK,
                    f"node {n.id} is memory-only ({n.memory_mib} MiB, no CPUs: CXL, PMEM or HBM)",
                    {f"{path}/cpulist": "(none)"},
                    subject=f"node{n.id}",
                )
            )
    for g in t.gpu_memory_nodes:
        out.append(
            Finding(
                ID,
                Status.OK,
                f"node {g.id} is GPU memory of {g.gpu} ({g.memory_mib} MiB); not a CPU node",
                {f"/proc/driver/nvidia/gpus/{g.gpu}/numa_status": f"Node: {g.id}"},
                subject=f"node{g.id}",
            )
        )
    return out


def _inconsistent(t: Topology) -> list[Finding]:
    out = []
    if t.ignored_numa_nodes:
        ids = sorted(t.ignored_numa_nodes)
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"kernel NUMA information is inconsistent: nodes {', '.join(map(str, ids))} repeat CPUs of "
                "an earlier node and were ignored",
                {f"{NODE_DIR}/node{i}": why for i, why in t.ignored_numa_nodes.items()},
                expected="each CPU in exactly one NUMA node",
                remediation="The firmware's ACPI SRAT is wrong: update the BIOS, or boot with numa=off; "
                "until then NUMA pinning on this node is meaningless.",
                subject="consistency",
            )
        )
    other = [p for p in t.problems if not p.startswith("kernel reports NUMA nodes")]
    out += unparsable(ID, other, "topology file(s)", "`lscpu` and `numactl -H`")
    return out


def sysctl_accepted(raw: str, want: int) -> bool:
    """Whether the check accepts a NUMA sysctl as read (`raw`) when it expects `want`."""
    return raw.strip() == str(want)


def _sysctl(name: str, raw: str | None, want: int, why: str) -> Finding | None:
    if raw is None:
        return None
    evidence = {system.sysctl_path(name): raw}
    if sysctl_accepted(raw, want):
        return Finding(ID, Status.OK, f"{name} = {raw}", evidence, expected=str(want), subject=name)
    return Finding(
        ID,
        Status.WARN,
        f"{name} = {raw}: {why}",
        evidence,
        expected=str(want),
        remediation=f"sysctl -w {name}={want} (persist it in /etc/sysctl.d/)",
        subject=name,
        fix="numa-balancing" if name == NUMA_BALANCING else None,
    )


def _smt(f: Facts, p: Params) -> Finding:
    t = f.topology
    if not t.cpus_online or not (t.smt_known or t.smt_control or f.smt_active):
        path = f"{CPU_DIR}/cpu*/topology/thread_siblings_list"
        return Finding(
            ID,
            Status.SKIPPED,
            "SMT state unknown: which CPUs are thread siblings was not readable",
            {path: "(absent)", f"{CPU_DIR}/smt/control": t.smt_control or "(absent)"},
            subject="smt",
        )
    on = t.threads_per_core > 1
    state = "on" if on else "off"
    evidence = {"threads per core": str(t.threads_per_core)}
    if t.smt_control is not None:
        evidence[f"{CPU_DIR}/smt/control"] = t.smt_control
    if p.smt in ("on", "off") and p.smt != state:
        return Finding(
            ID,
            Status.WARN,
            f"SMT is {state} ({t.threads_per_core} thread(s) per core), expected {p.smt}",
            evidence,
            expected=f"SMT {p.smt}",
            remediation=f"Turn SMT {p.smt} in the BIOS, or at run time: "
            f"echo {p.smt} > /sys/devices/system/cpu/smt/control",
            subject="smt",
        )
    return Finding(
        ID,
        Status.OK,
        f"SMT {state}: {t.cores} cores, {len(t.cpus_online)} logical CPUs",
        evidence,
        subject="smt",
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    t = f.topology
    if not t.cpus_online and not any(n.cpus for n in t.numa_nodes):
        return [
            Finding(
                ID,
                Status.SKIPPED,
                "no CPU or NUMA topology readable",
                {f"{CPU_DIR}/online": "(absent)", NODE_DIR: "(absent)"},
                subject="layout",
            )
        ]
    findings = _layout(t, p)
    findings += _inconsistent(t)
    balance = _balance(t, p)
    if balance:
        findings.append(balance)
    findings += _memoryless(t)
    multi = len([n for n in t.numa_nodes if n.cpus]) > 1
    for name, raw, want, why in (
        (
            NUMA_BALANCING,
            f.numa_balancing,
            p.numa_balancing,
            "automatic NUMA balancing migrates pinned ranks' pages",
        ),
        (ZONE_RECLAIM, f.zone_reclaim_mode, p.zone_reclaim_mode, "local reclaim stalls allocations"),
    ):
        # On a single node neither setting has anything to act on.
        finding = _sysctl(name, raw, want, why) if multi else None
        if finding:
            findings.append(finding)
    findings.append(_smt(f, p))
    return findings


CHECK = Check(
    id=ID,
    title="NUMA layout and balance",
    area=Area.MEMORY,
    tags=("preflight", "cpu", "memory"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        *topology.PATHS,
        system.sysctl_path(NUMA_BALANCING),
        system.sysctl_path(ZONE_RECLAIM),
        f"{CPU_DIR}/smt/active",
    ),
)
