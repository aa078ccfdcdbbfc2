"""CPU and NUMA topology from /sys/devices/system/{cpu,node} and /proc.

Sources: Documentation/admin-guide/cputopology.rst (cpu/online, topology/*),
Documentation/ABI/stable/sysfs-devices-node (node*/cpulist, meminfo, distance).
The merge rules for inconsistent kernels follow hwloc's Linux backend (topology-linux.c), so that
these facts agree with `lstopo` on the same tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"

PATHS = (
    f"{CPU_DIR}/online",
    f"{CPU_DIR}/possible",
    f"{CPU_DIR}/present",
    f"{CPU_DIR}/smt/control",
    f"{CPU_DIR}/smt/active",
    f"{CPU_DIR}/cpu*/online",
    f"{CPU_DIR}/cpu*/topology/physical_package_id",
    f"{CPU_DIR}/cpu*/topology/die_id",
    f"{CPU_DIR}/cpu*/topology/core_id",
    f"{CPU_DIR}/cpu*/topology/thread_siblings_list",
    f"{CPU_DIR}/cpu*/topology/thread_siblings",
    f"{NODE_DIR}/node*/cpulist",
    f"{NODE_DIR}/node*/cpumap",
    f"{NODE_DIR}/node*/meminfo",
    f"{NODE_DIR}/node*/distance",
    f"{NODE_DIR}/online",
    f"{NODE_DIR}/possible",
    f"{NVIDIA_GPUS_DIR}/*/numa_status",
    "/proc/meminfo",
    "/proc/cpuinfo",
)


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: list[int]
    memory_mib: int | None
    distances: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuMemoryNode:
    """A CPU-less NUMA node that is an NVIDIA GPU's memory (POWER9 NVLink, Grace Hopper)."""

    id: int
    memory_mib: int | None
    gpu: str  # the GPU's PCI address


@dataclass(frozen=True)
class Topology:
    cpus_online: list[int]
    cpus_offline: list[int]
    packages: int
    cores: int
    threads_per_core: int
    numa_nodes: list[NumaNode]
    gpu_memory_nodes: list[GpuMemoryNode]
    ignored_numa_nodes: dict[int, str]
    cpu_model: str | None
    smt_control: str | None
    memory_total_mib: int | None
    cpu_package: dict[int, int]  # online CPU -> package id
    core_of: dict[int, int]  # online CPU -> index of its physical core
    problems: list[str]
    # Whether any CPU's thread siblings were read: without them every CPU counts as its own core,
    # which says nothing about SMT.
    smt_known: bool = True

    @property
    def node_of_cpu(self) -> dict[int, int]:
        return {c: n.id for n in self.numa_nodes for c in n.cpus}

    def physical_cores_first(self, cpus: list[int]) -> list[int]:
        """`cpus` ordered one thread per core first, then the SMT siblings (for thread pinning)."""
        seen: set[int] = set()
        first: list[int] = []
        rest: list[int] = []
        for c in sorted(cpus):
            core = self.core_of.get(c, -1 - c)
            (rest if core in seen else first).append(c)
            seen.add(core)
        return first + rest


def _online_cpus(r: Reader) -> tuple[list[int], list[int]]:
    """Online and offline CPUs: cpu/online, else each cpuN/online (absent means online, as for cpu0),
    else, with no /sys/devices/system/cpu at all, the "processor" entries of /proc/cpuinfo, which
    lists online CPUs only (psutil's cpu_count falls back the same way)."""
    numbered = sorted(
        int(m.group(1)) for e in r.host.listdir(CPU_DIR) or [] if (m := re.fullmatch(r"cpu(\d{1,6})", e))
    )
    online = r.cpulist(f"{CPU_DIR}/online")
    if online is None and not numbered:
        online = _cpuinfo_processors(r.text("/proc/cpuinfo"))
    if online is None:
        online = [c for c in numbered if r.value(f"{CPU_DIR}/cpu{c}/online") != "0"]
    # "present" CPUs exist; "possible" ones include empty hot-plug slots and are not offline CPUs.
    known = set(r.cpulist(f"{CPU_DIR}/present") or numbered)
    offline = sorted(known - set(online))
    return online, offline


def _cpuinfo_processors(text: str | None) -> list[int] | None:
    found = [
        int(value)
        for line in (text or "").splitlines()
        if (parts := line.split(":", 1))[0].strip() == "processor"
        and parse.is_decimal(value := parts[-1].strip())
    ]
    return found or None


def _gpu_memory_nodes(r: Reader) -> dict[int, str]:
    """NUMA node id -> GPU PCI address, from the NVIDIA driver's numa_status (as hwloc does)."""
    out: dict[int, str] = {}
    for gpu in r.host.listdir(NVIDIA_GPUS_DIR) or []:
        text = r.text(f"{NVIDIA_GPUS_DIR}/{gpu}/numa_status") or ""
        m = re.search(r"^Node:\s*(-?\d{1,20})(?!\d)", text, re.MULTILINE)
        if m and int(m.group(1)) >= 0:
            out[int(m.group(1))] = gpu
    return out


def _node_memory_mib(r: Reader, node: int) -> int | None:
    text = r.text(f"{NODE_DIR}/node{node}/meminfo")
    total = parse.meminfo(text).get("MemTotal") if text else None
    return None if total is None else round(total / 1024)


def _distances(r: Reader, node: int, candidates: list[list[int]]) -> dict[int, int]:
    """node*/distance lists one value per online node (drivers/base/node.c, node_read_distance).

    The online list is tried first, then the node folders, then the possible nodes: recordings
    edited by hand (or kernels mid-hotplug) disagree, and the first list whose length fits wins.
    """
    raw = r.value(f"{NODE_DIR}/node{node}/distance")
    if not raw:
        return {}
    values = raw.split()
    if not all(parse.is_decimal(v) for v in values):
        r.problems.append(f"{NODE_DIR}/node{node}/distance: unparsable value {raw!r}")
        return {}
    for ids in candidates:
        if len(ids) == len(values):
            return {i: int(v) for i, v in zip(ids, values, strict=True)}
    r.problems.append(f"{NODE_DIR}/node{node}/distance: {len(values)} values for nodes {candidates[0]}")
    return {}


def _cpu_model(cpuinfo: str | None) -> str | None:
    if not cpuinfo:
        return None
    # x86: "model name"; POWER: "cpu"; older ARM: "Processor"; arm64 has none (left None).
    for key in ("model name", "cpu", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if m:
            return m.group(1).strip()
    return None


def collect(host: Host) -> Topology:
    return host.memo("facts.topology", lambda: _collect(host))


@dataclass
class _Cores:
    """Each online CPU's package and physical core, as hwloc counts cores."""

    packages: dict[int, int] = field(default_factory=dict)  # CPU -> package id
    keys: dict[int, tuple[int, ...]] = field(default_factory=dict)  # CPU -> (package, die, core_id, threads)
    smt_known: bool = False  # some CPU's thread siblings were read

    @property
    def distinct(self) -> list[tuple[int, ...]]:
        return sorted(set(self.keys.values()))

    @property
    def core_of(self) -> dict[int, int]:
        index = {k: i for i, k in enumerate(self.distinct)}
        return {c: index[k] for c, k in self.keys.items()}

    @property
    def threads_per_core(self) -> int:
        return max((sum(1 for k in self.keys.values() if k == key) for key in self.distinct), default=1)


def _cores(r: Reader, online: list[int]) -> _Cores:
    online_set = set(online)
    cores = _Cores()
    for c in online:
        t = f"{CPU_DIR}/cpu{c}/topology"
        pkg = r.int(f"{t}/physical_package_id")
        cores.packages[c] = pkg if pkg is not None and pkg >= 0 else 0
        # A core is the CPUs that share both core_id and thread_siblings (as hwloc counts them):
        # core_id alone repeats across the dies of one package (Opteron 6200), and thread_siblings
        # alone merges the two integer cores of an AMD Bulldozer module, which are two cores.
        siblings = r.cpulist(f"{t}/thread_siblings_list")
        if siblings is None:
            siblings = r.cpumask(f"{t}/thread_siblings")
        cores.smt_known = cores.smt_known or siblings is not None
        core_id = r.int(f"{t}/core_id")
        threads = tuple(sorted(set(siblings or [c]) & online_set)) or (c,)
        die = r.int(f"{t}/die_id") or 0
        cores.keys[c] = (cores.packages[c], die, -1 if core_id is None else core_id, *threads)
    return cores


@dataclass
class _Nodes:
    numa: list[NumaNode] = field(default_factory=list)
    gpu_memory: list[GpuMemoryNode] = field(default_factory=list)
    ignored: dict[int, str] = field(default_factory=dict)  # node -> why it was dropped


def _nodes(r: Reader, online: list[int], memory_total_mib: int | None) -> _Nodes:
    """The NUMA nodes: CPU nodes (each CPU in the first node that lists it), GPU memory nodes apart."""
    online_set = set(online)
    node_ids = sorted(
        int(m.group(1)) for e in r.host.listdir(NODE_DIR) or [] if (m := re.fullmatch(r"node(\d{1,6})", e))
    )
    distance_ids = [
        ids for ids in (r.cpulist(f"{NODE_DIR}/online"), node_ids, r.cpulist(f"{NODE_DIR}/possible")) if ids
    ]
    gpu_nodes = _gpu_memory_nodes(r)
    nodes = _Nodes()
    claimed: set[int] = set()
    for n in node_ids:
        path = f"{NODE_DIR}/node{n}"
        cpus = r.cpulist(f"{path}/cpulist")
        if cpus is None:
            cpus = r.cpumask(f"{path}/cpumap") or []
        cpus = sorted(set(cpus) & online_set)
        memory = _node_memory_mib(r, n)
        if n in gpu_nodes and not cpus:
            nodes.gpu_memory.append(GpuMemoryNode(n, memory, gpu_nodes[n]))
            continue
        overlap = claimed & set(cpus)
        if overlap:
            # The kernel listed these CPUs in an earlier node already: a broken SRAT/firmware table.
            # hwloc keeps the first node that claims a CPU and drops the later ones; so do we.
            nodes.ignored[n] = f"its CPUs {parse.format_cpulist(overlap)} also belong to an earlier node"
            continue
        claimed |= set(cpus)
        nodes.numa.append(NumaNode(n, cpus, memory, _distances(r, n, distance_ids)))
    if nodes.ignored:
        r.problems.append(
            f"kernel reports NUMA nodes with overlapping CPU sets; ignored node(s) "
            f"{', '.join(str(i) for i in sorted(nodes.ignored))}"
        )
    if not node_ids:
        # No NUMA support in the kernel (CONFIG_NUMA=n) or no node folders recorded: one node 0.
        nodes.numa.append(NumaNode(0, list(online), memory_total_mib, {0: 10}))
    return nodes


def _memory_total_mib(r: Reader) -> int | None:
    meminfo_text = r.text("/proc/meminfo")
    mem_total_kb = parse.meminfo(meminfo_text).get("MemTotal") if meminfo_text else None
    return None if mem_total_kb is None else round(mem_total_kb / 1024)


def _collect(host: Host) -> Topology:
    r = Reader(host)
    online, offline = _online_cpus(r)
    cores = _cores(r, online)
    memory_total_mib = _memory_total_mib(r)
    nodes = _nodes(r, online, memory_total_mib)
    packages = cores.packages
    return Topology(
        cpus_online=online,
        cpus_offline=offline,
        packages=len(set(packages.values())) if packages else (1 if online else 0),
        cores=len(cores.distinct),
        threads_per_core=cores.threads_per_core,
        numa_nodes=nodes.numa,
        gpu_memory_nodes=nodes.gpu_memory,
        ignored_numa_nodes=nodes.ignored,
        cpu_model=_cpu_model(r.text("/proc/cpuinfo")),
        smt_control=r.value(f"{CPU_DIR}/smt/control"),
        memory_total_mib=memory_total_mib,
        cpu_package=packages,
        core_of=cores.core_of,
        problems=r.problems,
        smt_known=cores.smt_known,
    )
