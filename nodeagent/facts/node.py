"""Every fact about a node in one document: `nodeagent facts`, snapshots' summary, fleet drift."""

from __future__ import annotations

import dataclasses
from typing import Any

from nodeagent.facts import gpus, memory, network, pci, pci_topology, system, topology
from nodeagent.facts.gpu_report import SMI_COMMAND
from nodeagent.host import Host

# Where each part of the document is read, by the value keys it gives (nodeagent.compare.values): a
# recording that does not hold the place (Host.recorded: no sys/ at all, `snapshot --only kernel`)
# has that part empty, and `unrecorded` names the place, so that an empty list of HCAs there is
# never read as a node without HCAs.
SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("topology", (topology.CPU_DIR,)),
    ("pci", (pci.PCI_DIR,)),
    ("nics", (network.NET_DIR,)),
    ("rdma", (network.IB_DIR,)),
    ("hugepages.thp_", (memory.THP_DIR,)),
    ("hugepages.pools", (memory.HUGE_DIR,)),
    ("memory", ("/proc/meminfo",)),
    ("kernel.release", ("/proc/sys/kernel/osrelease",)),
    ("kernel.cmdline", ("/proc/cmdline",)),
    ("dmi", (system.DMI_DIR,)),
)

# The places the checks' evidence is read from, by path: a check's value under one that was not
# recorded ("check.numa.kernel.numa_balancing./proc/sys/kernel/numa_balancing" without /proc/sys)
# is not recorded either.
ROOTS = (
    "/proc/sys",
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/modules",
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/kernel/mm",
    "/sys/bus/pci/devices",
    "/sys/class/net",
    "/sys/class/infiniband",
    "/sys/class/block",
    "/sys/fs/cgroup",
    "/sys/module",
)

PATHS = (*topology.PATHS, *pci.PATHS, *network.PATHS, *memory.PATHS, *system.PATHS, *gpus.PATHS)
COMMANDS = gpus.COMMANDS


def collect(host: Host, commands: bool = True) -> dict[str, Any]:
    """The node's facts. `commands=False` runs no command (`nvidia-smi topo -m` takes seconds on a
    big GPU node): what a time-boxed gate uses when a check has not already run it."""
    t = topology.collect(host)
    mem = memory.collect(host)
    sysinfo = system.collect(host)
    if commands:
        matrix, matrix_missing = gpus.topo_matrix(host)
    else:
        matrix, matrix_missing = None, "not run (the pre-flight gate runs no command of its own)"
    return {
        "host": host.name,
        "source": host.kind,
        "topology": _topology(t),
        "pci": [_plain(d) for d in pci.collect(host)],
        # Where sysfs shows no GPU, those of `nvidia-smi -q -x` (addressed): what the gpu check judges.
        # A recording's driver list costs no command, so a gate on one names GPUs by address too.
        "gpus": [
            _plain(g)
            for g in (gpus.inventory(host) if commands or host.kind != "local" else gpus.collect(host))
        ],
        "nvidia_smi_topo": None
        if matrix is None
        else {"devices": matrix.devices, "links": matrix.links, "numa_affinity": matrix.numa_affinity},
        "pci_topology": _pci_topology(host),
        "nics": [_plain(n) for n in network.collect_nics(host)],
        "rdma": [_plain(p) for p in network.collect_rdma(host)],
        "hugepages": {
            "thp_enabled": mem.thp_enabled,
            "thp_defrag": mem.thp_defrag,
            "pools": [_plain(p) for p in mem.pools],
        },
        "memory": {"total_mib": mem.total_mib, "available_mib": mem.available_mib},
        "kernel": {"release": sysinfo.kernel, "cmdline": sysinfo.cmdline},
        "dmi": sysinfo.dmi,
        "problems": sorted({*t.problems, *mem.problems}),
        "notes": [] if matrix is not None else [f"nvidia-smi topo -m: {matrix_missing}"],
        "unrecorded": unrecorded(host),
    }


def unrecorded(host: Host) -> dict[str, str]:
    """Value key prefix -> the place not recorded, for the parts of the document (SOURCES) a
    recording does not hold; GPUs when neither the PCI tree nor the driver's list was recorded; and
    path -> path for the ROOTS of the checks' evidence. Empty on a machine (Host.recorded)."""
    out = {
        prefix: ", ".join(places)
        for prefix, places in SOURCES
        if not any(host.recorded(place) for place in places)
    }
    out.update({root: root for root in ROOTS if not host.recorded(root)})
    if "pci" in out and not host.recorded(gpus.NVIDIA_PROC) and not host.recorded_command(SMI_COMMAND):
        out["gpus"] = f"{pci.PCI_DIR}, {gpus.NVIDIA_PROC}, {' '.join(SMI_COMMAND)}"
    return out


def _topology(t: topology.Topology) -> dict[str, Any]:
    return {
        "cpu_model": t.cpu_model,
        "packages": t.packages,
        "cores": t.cores,
        "threads_per_core": t.threads_per_core,
        "cpus_online": t.cpus_online,
        "cpus_offline": t.cpus_offline,
        "smt_control": t.smt_control,
        "memory_total_mib": t.memory_total_mib,
        "numa_nodes": [
            {"id": n.id, "cpus": n.cpus, "memory_mib": n.memory_mib, "distances": n.distances}
            for n in t.numa_nodes
        ],
        "gpu_memory_nodes": [_plain(g) for g in t.gpu_memory_nodes],
        "ignored_numa_nodes": t.ignored_numa_nodes,
    }


def _pci_topology(host: Host) -> dict[str, Any]:
    """The GPU/NIC matrix the topology check derives from the PCI tree in sysfs, in the terms of
    `nvidia-smi topo -m` (so it is there on nodes without the driver, and compared across a fleet)."""
    pt = pci_topology.collect(host)
    return {
        "gpus": [_plain(e) for e in pt.gpus],
        "nics": [_plain(e) for e in pt.nics],
        "links": pt.links,
        "unplaced": pt.unplaced,
    }


def _plain(record: Any) -> Any:
    """A facts dataclass as new dicts and lists, like dataclasses.asdict, without its deep copy of
    every value: these hold str, numbers and None, which need none (a quarter less time here, paid
    for every host of a fleet)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, (list, tuple)):
        return type(record)(_plain(v) for v in record)
    if isinstance(record, dict):
        return {k: _plain(v) for k, v in record.items()}
    return record
