"""The local-rank layout of a node: for each training rank, its GPU, NUMA node, CPUs and nearest NICs.

One rank per GPU, bound to the CPUs and memory of the GPU's NUMA node, is NVIDIA's guidance for
multi-GPU servers: NCCL itself runs its threads on "the CPU affinity of the GPU" unless told
otherwise (NCCL_IGNORE_CPU_AFFINITY,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ignore-cpu-affinity), the
DGX user guides bind each rank with numactl to its GPU's socket
(https://docs.nvidia.com/dgx/dgxa100-user-guide/index.html), and GPUDirect RDMA wants the rank's NIC
under the same root complex (https://docs.nvidia.com/cuda/gpudirect-rdma/index.html). The binding
itself is numactl(8)'s `--physcpubind` and `--membind`
(https://man7.org/linux/man-pages/man8/numactl.8.html).

Sources, in order:
  (a) GPUs in sysfs PCI (facts.gpus, facts.pci_topology): the NUMA node of the PCI device
      (numa_node; -1 means the firmware did not say, and the node whose CPUs equal the device's
      local_cpulist/local_cpus is taken instead: Documentation/ABI/testing/sysfs-bus-pci), the
      nearest RDMA or fast NIC from the PCI tree;
  (b) a live or recorded `nvidia-smi topo -m` (facts.gpus.topo_matrix): the driver's CPU Affinity,
      NUMA Affinity and nearest NICs, for snapshots holding only commands/nvidia-smi-topo-m.txt and
      to fill what sysfs leaves unknown;
  (c) no GPU: one rank per NUMA node that has CPUs (GPU memory nodes have none and are skipped).

Every rank's CPUs are intersected with what this process may use (affinity, cgroup cpuset: facts.
cgroup) and ordered physical cores first, SMT siblings after (topology.physical_cores_first), so
the first `physical_cores` entries are one thread per core. Ranks that share a NUMA node (two GPUs
per node, or more CPU ranks than nodes) either share the node's CPUs, as nvidia-smi reports them,
or split them into disjoint sets of whole physical cores (`split_shared_nodes`).

`collect(host)` does the I/O; `build(facts, ...)` is pure and decides the layout; `layout(host,
ranks)` is both, memoized per run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.core import document, parse
from nodeagent.facts import cgroup, gpus, pci, pci_topology, topology
from nodeagent.facts.cgroup import CgroupCpus
from nodeagent.facts.pci_topology import Endpoint, rank
from nodeagent.facts.reader import Reader
from nodeagent.facts.topo_matrix import LINK_RANK, TopoMatrix
from nodeagent.facts.topology import Topology
from nodeagent.host import Host

PATHS = (
    *topology.PATHS,
    *cgroup.PATHS,
    *pci_topology.PATHS,
    # The CPU mask form: some platforms (and recordings) have local_cpus but no local_cpulist.
    f"{pci.PCI_DIR}/*/local_cpus",
)
COMMANDS = gpus.COMMANDS

# Ethernet ports slower than this are management networks, not the job's data path; RDMA devices
# always count. Same threshold as checks/topology.py (speed from /sys/class/net/*/speed,
# https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-net).
MIN_NIC_GBPS = 25.0

SOURCE_SYSFS = "sysfs PCI"
SOURCE_SMI = "nvidia-smi topo -m"
SOURCE_NUMA = "NUMA nodes"


@dataclass(frozen=True)
class GpuPlace:
    """A GPU as the layout sees it: where it sits and which NICs are nearest."""

    name: str  # GPU0 (nvidia-smi's name), AMD-GPU0 for other vendors
    pci_address: str | None
    numa_node: int | None  # as reported (sysfs numa_node, else nvidia-smi NUMA Affinity); None: unknown
    local_cpus: list[int] | None  # sysfs local_cpulist/local_cpus, else nvidia-smi CPU Affinity
    nics: list[str] = field(default_factory=list)  # nearest RDMA/fast NICs (all ties), none past SYS
    nic_level: str | None = None  # PIX, PXB, PHB, NODE (nvidia-smi levels) of those NICs
    source: str = SOURCE_SYSFS
    # nvidia-smi topo -m printed no CPU Affinity beside a NUMA Affinity: it prints a GPU's local CPUs
    # as far as the calling process may use them, so this process may use none of them.
    cpus_withheld: bool = False


@dataclass(frozen=True)
class RankFacts:
    """Everything the layout needs, gathered once (the layout itself is pure: see `build`)."""

    topology: Topology
    cpus: CgroupCpus
    gpus: list[GpuPlace]
    smi_missing: str | None  # why there is no nvidia-smi matrix (only asked for when GPUs exist)
    notes: list[str] = field(default_factory=list)  # what collection could not establish

    @property
    def allowed(self) -> list[int] | None:
        return self.cpus.allowed


@pydantic_dataclass(frozen=True, config=document.LATE)
class RankSlot(document.InKeyOrder):
    """One local rank's place; its document is the rank's entry in the profile and the tune
    report. `cpus` and `cpulist` are null (not empty) for an unpinned rank: there is nothing to bind."""

    document_keys = (
        "local_rank",
        "gpu",
        "gpu_pci",
        "cpus",
        "cpulist",
        "numa_node",
        "mems",
        "nic",
        "nic_level",
        "physical_cores",
        "shares_with",
    )

    local_rank: int
    gpu: str | None  # "GPU0"; None on CPU-only layouts
    gpu_pci: str | None
    numa_node: int | None  # the node whose memory the rank binds to; None: unknown or several
    mems: list[int]  # NUMA nodes for --membind (several when a CPU rank spans nodes); [] unknown
    # Physical cores first, SMT siblings after; [] when the rank cannot be pinned.
    cpus: Annotated[list[int], document.EMPTY_AS_NULL]
    physical_cores: int | None  # cores among `cpus`; None when the SMT layout is unknown
    nic: list[str]
    nic_level: str | None
    shares_with: list[int] = Field(default_factory=list)  # local ranks whose CPUs overlap these

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpulist(self) -> Annotated[str, document.EMPTY_AS_NULL]:
        return parse.format_cpulist(self.cpus)


@dataclass(frozen=True)
class RankLayout:
    slots: list[RankSlot]
    source: str  # SOURCE_SYSFS, SOURCE_SMI, both joined by " + ", or SOURCE_NUMA
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the request cannot be met (more ranks than GPUs)
    split: bool = False  # shared nodes were split into disjoint core sets

    @property
    def by_rank(self) -> dict[int, RankSlot]:
        return {s.local_rank: s for s in self.slots}


# -- collection (I/O) ----------------------------------------------------------------------------


def collect(host: Host) -> RankFacts:
    return host.memo("facts.ranks", lambda: _collect(host))


def layout(
    host: Host, ranks: int = 0, *, split_shared_nodes: bool = False, cpu_only: bool = False
) -> RankLayout:
    """The layout for `ranks` local ranks (0: one per GPU, or one per NUMA node without GPUs)."""
    return host.memo(
        f"facts.ranks.layout.{ranks}.{int(split_shared_nodes)}.{int(cpu_only)}",
        lambda: build(collect(host), ranks, split_shared_nodes=split_shared_nodes, cpu_only=cpu_only),
    )


def _training_gpus(endpoints: list[Endpoint]) -> list[Endpoint]:
    """NVIDIA GPUs where there are any (an Intel iGPU or a second vendor's card is not a rank's
    device: CUDA does not see it), else every compute GPU."""
    nvidia = [e for e in endpoints if re.fullmatch(r"GPU\d+", e.name)]
    return nvidia or endpoints


def _data_nics(t: pci_topology.PciTopology) -> list[str]:
    return [n.name for n in t.nics if n.rdma or (n.speed_gbps is not None and n.speed_gbps >= MIN_NIC_GBPS)]


def _smi_nics(smi: TopoMatrix, gpu: str) -> tuple[list[str], str | None]:
    names = smi.nearest_nics(gpu)
    return names, (smi.link(gpu, names[0]) if names else None)


def _collect(host: Host) -> RankFacts:
    topo = topology.collect(host)
    cpus = cgroup.collect(host)
    notes: list[str] = []
    found = gpus.collect(host)
    # Memoized: facts.gpus already asked for it when sysfs showed no GPU, so this spawns nvidia-smi
    # at most once per run.
    smi, smi_missing = gpus.topo_matrix(host)
    places: list[GpuPlace] = []
    if any(g.source == "pci" for g in found):
        places = _sysfs_places(host, topo, smi, notes)
    elif smi is not None:
        for name in smi.gpus:
            nics, level = _smi_nics(smi, name)
            places.append(
                GpuPlace(
                    name=name,
                    pci_address=None,
                    numa_node=smi.numa_affinity.get(name),
                    local_cpus=smi.cpu_affinity.get(name),
                    nics=nics,
                    nic_level=level,
                    source=SOURCE_SMI,
                    cpus_withheld=_withheld(smi, name),
                )
            )
    return RankFacts(topology=topo, cpus=cpus, gpus=places, smi_missing=smi_missing, notes=notes)


def _sysfs_places(host: Host, topo: Topology, smi: TopoMatrix | None, notes: list[str]) -> list[GpuPlace]:
    r = Reader(host)
    t = pci_topology.collect(host)
    devices = pci.by_address(pci.collect(host))
    online = set(topo.cpus_online)
    data_nics = _data_nics(t)
    places = []
    for e in _training_gpus(t.gpus):
        local = local_cpus(r, devices.get(e.pci_address), e.pci_address, online)
        numa, source = e.numa_node, SOURCE_SYSFS
        level, nics = t.nearest(e.name, data_nics)
        if level is None or rank(level) >= LINK_RANK["SYS"]:
            level, nics = None, []
        if smi is not None and e.name in smi.gpus:
            # The driver fills what the firmware left out (NUMA -1, no locality, no NIC in sysfs).
            if numa is None and smi.numa_affinity.get(e.name) is not None:
                numa, source = smi.numa_affinity[e.name], f"{SOURCE_SYSFS} + {SOURCE_SMI}"
            if local is None and smi.cpu_affinity.get(e.name):
                local, source = smi.cpu_affinity[e.name], f"{SOURCE_SYSFS} + {SOURCE_SMI}"
            if not nics:
                nics, level = _smi_nics(smi, e.name)
                if nics:
                    source = f"{SOURCE_SYSFS} + {SOURCE_SMI}"
        withheld = local is None and smi is not None and _withheld(smi, e.name)
        places.append(GpuPlace(e.name, e.pci_address, numa, local, nics, level, source, withheld))
    notes += r.problems  # a corrupt local_cpus mask: the GPU's locality is then unknown, and said so
    return places


def _withheld(smi: TopoMatrix, gpu: str) -> bool:
    return gpu in smi.gpus and smi.cpu_affinity.get(gpu) is None and smi.numa_affinity.get(gpu) is not None


def local_cpus(r: Reader, dev: pci.PciDevice | None, address: str, online: set[int]) -> list[int] | None:
    """A PCI device's local CPUs: local_cpulist, else the local_cpus mask (some platforms and
    recordings have only the mask), the online ones only (the mask covers possible CPUs; only
    online ones can be bound). None when neither is there."""
    local = dev.local_cpus if dev is not None and dev.local_cpus else None
    if local is None:
        local = r.cpumask(f"{pci.PCI_DIR}/{address}/local_cpus")
    if local is not None and online:
        local = [c for c in local if c in online] or None
    return local


# -- the layout (pure) ---------------------------------------------------------------------------


def _cpus_text(cpus: list[int] | set[int]) -> str:
    return parse.format_cpulist(cpus) or "none"


def _allowed_text(f: RankFacts) -> str:
    c = f.cpus
    if c.cpuset is not None and c.cpuset_source:
        return f"the cgroup cpuset ({c.cpuset_source} = {_cpus_text(c.cpuset)})"
    if c.affinity is not None:
        return f"this process's affinity (Cpus_allowed_list {_cpus_text(c.affinity)})"
    return f"the allowed CPUs {_cpus_text(f.allowed or [])}"


def node_by_cpus(local: list[int] | None, node_cpus: dict[int, list[int]]) -> int | None:
    """The NUMA node a device's local CPUs place it on, where the firmware gave it none (numa_node
    -1 or absent): the node whose CPUs are exactly these, else the one node holding them all. None
    when no single node matches. The topology check and the rank layout both place GPUs by it, so
    that they never disagree about where a GPU is."""
    if not local:
        return None
    cpus = set(local)
    exact = [n for n, node in node_cpus.items() if set(node) == cpus]
    within = [n for n, node in node_cpus.items() if cpus <= set(node)]
    match = exact or within
    return match[0] if len(match) == 1 else None


def _node_of(g: GpuPlace, node_cpus: dict[int, list[int]]) -> tuple[int | None, str | None]:
    """The GPU's NUMA node and, when it had to be inferred or stays unknown, why."""
    if g.numa_node is not None:
        return g.numa_node, None
    if g.local_cpus:
        local = set(g.local_cpus)
        node = node_by_cpus(g.local_cpus, node_cpus)
        if node is not None:
            return node, (
                f"{g.name}: NUMA node not reported (numa_node -1 or absent); node {node} taken from its "
                f"local CPUs {_cpus_text(local)}"
            )
        return None, (
            f"{g.name}: NUMA node not reported and its local CPUs {_cpus_text(local)} match no single "
            "node: bound to those CPUs without memory binding"
        )
    return None, (
        f"{g.name}: NUMA node unknown (numa_node -1, no local_cpulist, no nvidia-smi NUMA Affinity): "
        "its rank is not pinned"
    )


@dataclass
class _Draft:
    gpu: GpuPlace | None
    nodes: list[int]
    cpus: list[int]


def build(
    f: RankFacts, ranks: int = 0, *, split_shared_nodes: bool = False, cpu_only: bool = False
) -> RankLayout:
    """The layout for `ranks` ranks (0: one per GPU; one per NUMA node without GPUs or with
    `cpu_only`). Never raises: what cannot be placed is said in `notes` (or `error`)."""
    notes = list(f.notes)
    topo = f.topology
    node_cpus = {n.id: list(n.cpus) for n in topo.numa_nodes if n.cpus}
    if topo.gpu_memory_nodes:
        ids = parse.format_cpulist(n.id for n in topo.gpu_memory_nodes)
        notes.append(f"NUMA node(s) {ids} hold GPU memory and have no CPUs: never a rank's node")
    if ranks < 0:
        return RankLayout(
            [], SOURCE_NUMA, notes, error=f"ranks={ranks}: give 0 (automatic) or a positive count"
        )
    error: str | None = None
    if f.gpus and not cpu_only:
        source = _gpu_source(f.gpus)
        error = _too_many_ranks(f.gpus, ranks)
        drafts = _gpu_drafts(f.gpus, ranks, node_cpus, notes)
    else:
        source = SOURCE_NUMA
        numa_drafts = _numa_drafts(f, ranks, node_cpus, notes)
        if numa_drafts is None:
            return RankLayout([], source, notes)
        drafts = numa_drafts
    _keep_allowed(drafts, f, notes)
    _nic_notes(drafts, notes)
    if split_shared_nodes:
        _split(drafts, topo, notes)
    slots = _slots(drafts, topo)
    _slot_notes(slots, notes)
    return RankLayout(slots, source, notes, error=error, split=split_shared_nodes)


def _trim(cpus: list[int], allowed: list[int] | None) -> list[int]:
    """The CPUs of `cpus` this process may use (all of them when the allowed set is unknown)."""
    if allowed is None:
        return list(cpus)
    permitted = set(allowed)
    return [c for c in cpus if c in permitted]


def _gpu_source(places: list[GpuPlace]) -> str:
    sources = sorted({s for g in places for s in g.source.split(" + ")}, key=(SOURCE_SYSFS, SOURCE_SMI).index)
    return " + ".join(sources)


def _too_many_ranks(places: list[GpuPlace], ranks: int) -> str | None:
    if ranks <= len(places):
        return None
    return (
        f"ranks={ranks} but this node has {len(places)} GPU(s) "
        f"({', '.join(g.name for g in places)}): "
        "one rank per GPU is the layout planned here; give ranks <= the GPU count, or cpu_only "
        "for CPU ranks"
    )


def _gpu_drafts(
    places: list[GpuPlace], ranks: int, node_cpus: dict[int, list[int]], notes: list[str]
) -> list[_Draft]:
    """One rank per GPU (the first `ranks` of them when fewer are asked for)."""
    drafts = []
    chosen = places[:ranks] if 0 < ranks <= len(places) else places
    for i, g in enumerate(chosen):
        node, why = _node_of(g, node_cpus)
        if why:
            notes.append(why)
        if g.cpus_withheld:
            # The same judgement as a cpuset without the node's CPUs (_keep_allowed_cpus), and the
            # topology check's `cpuset` finding.
            notes.append(
                f"rank {i} ({g.name}): `nvidia-smi topo -m` prints no CPU Affinity beside NUMA Affinity "
                f"{node}: none of its local CPUs is this job's: not pinned, and no memory binding there "
                "either (a cpuset without a node's CPUs rarely allows its memory)"
            )
            drafts.append(_Draft(g, [], []))
            continue
        # The node's CPUs when the topology knows them (what --membind pairs with), else the
        # GPU's own local CPUs (sysfs local_cpulist or nvidia-smi's CPU Affinity).
        base = node_cpus[node] if node is not None and node in node_cpus else list(g.local_cpus or [])
        drafts.append(_Draft(g, [] if node is None else [node], base))
    return drafts


def _numa_drafts(
    f: RankFacts, ranks: int, node_cpus: dict[int, list[int]], notes: list[str]
) -> list[_Draft] | None:
    """CPU ranks over the NUMA nodes with allowed CPUs; None when there is no such node."""
    if not node_cpus:
        notes.append("no NUMA node with CPUs is known (no /sys/devices/system/node or cpu topology)")
        return None
    usable = []
    for n, cpus in sorted(node_cpus.items()):
        if _trim(cpus, f.allowed):
            usable.append(n)
        else:
            notes.append(
                f"NUMA node {n}: none of its CPUs {_cpus_text(cpus)} is allowed by {_allowed_text(f)}: "
                "no rank there"
            )
    if not usable:
        return None
    count = ranks or len(usable)
    if count <= len(usable):
        # Fewer ranks than nodes: each rank takes a run of neighbouring nodes (contiguous ids,
        # which on multi-node sockets are the same package).
        return [
            _Draft(None, chunk, [c for n in chunk for c in node_cpus[n]]) for chunk in _chunks(usable, count)
        ]
    # More ranks than nodes: ranks fill nodes in order, the first nodes taking one extra.
    drafts = []
    for n, k in zip(usable, _sizes(count, len(usable)), strict=True):
        drafts += [_Draft(None, [n], list(node_cpus[n])) for _ in range(k)]
    return drafts


def _keep_allowed(drafts: list[_Draft], f: RankFacts, notes: list[str]) -> None:
    """cgroup: keep the CPUs and memory nodes this process may use, and say what it cost."""
    for i, d in enumerate(drafts):
        label = f"rank {i}" + (f" ({d.gpu.name})" if d.gpu else "")
        _keep_allowed_cpus(d, label, f, notes)
        _keep_allowed_mems(d, label, f.cpus.mems_allowed, notes)


def _keep_allowed_cpus(d: _Draft, label: str, f: RankFacts, notes: list[str]) -> None:
    mine = _trim(d.cpus, f.allowed)
    where = f"NUMA node {d.nodes[0]}'s" if len(d.nodes) == 1 else "its"
    by = _allowed_text(f)
    if d.cpus and not mine:
        notes.append(
            f"{label}: none of {where} CPUs {_cpus_text(d.cpus)} is allowed by {by}: not pinned, "
            "and no memory binding there either (a cpuset without a node's CPUs rarely allows its memory)"
        )
        d.nodes = []
    elif len(mine) < len(d.cpus):
        notes.append(f"{label}: {where} CPUs {_cpus_text(d.cpus)} trimmed to {_cpus_text(mine)} by {by}")
    d.cpus = mine


def _keep_allowed_mems(d: _Draft, label: str, mems_allowed: list[int] | None, notes: list[str]) -> None:
    if mems_allowed is None:
        return
    refused = [n for n in d.nodes if n not in mems_allowed]
    if refused:
        notes.append(
            f"{label}: memory of node(s) {parse.format_cpulist(refused)} is not allowed "
            f"(Mems_allowed_list {_cpus_text(mems_allowed)}): no memory binding there"
        )
    d.nodes = [n for n in d.nodes if n in mems_allowed]


def _nic_notes(drafts: list[_Draft], notes: list[str]) -> None:
    """Say which GPU ranks have no data NIC near them (once for all when none has)."""
    gpu_drafts = [(i, d.gpu) for i, d in enumerate(drafts) if d.gpu is not None]
    if gpu_drafts and not any(g.nics for _, g in gpu_drafts):
        notes.append(
            f"no RDMA or >= {MIN_NIC_GBPS:g} Gb/s NIC closer to a GPU than SYS (cross-socket) is known"
        )
        return
    for i, g in gpu_drafts:
        if not g.nics:
            notes.append(f"rank {i} ({g.name}): no RDMA or >= {MIN_NIC_GBPS:g} Gb/s NIC closer than SYS")


def _slots(drafts: list[_Draft], topo: Topology) -> list[RankSlot]:
    slots = []
    core_of = topo.core_of
    for i, d in enumerate(drafts):
        ordered = topo.physical_cores_first(d.cpus)
        smt_known = bool(ordered) and all(c in core_of for c in ordered)
        slots.append(
            RankSlot(
                local_rank=i,
                gpu=d.gpu.name if d.gpu else None,
                gpu_pci=d.gpu.pci_address if d.gpu else None,
                numa_node=d.nodes[0] if len(d.nodes) == 1 else None,
                mems=list(d.nodes),
                cpus=ordered,
                physical_cores=len({core_of[c] for c in ordered}) if smt_known else None,
                nic=list(d.gpu.nics) if d.gpu else [],
                nic_level=d.gpu.nic_level if d.gpu else None,
                shares_with=[j for j, o in enumerate(drafts) if j != i and set(o.cpus) & set(d.cpus)],
            )
        )
    return slots


def _slot_notes(slots: list[RankSlot], notes: list[str]) -> None:
    """What the finished layout leaves to the job: an unknown SMT layout, ranks sharing CPUs."""
    if any(s.cpus and s.physical_cores is None for s in slots):
        notes.append(
            "which CPUs are SMT siblings is unknown (no /sys/devices/system/cpu/*/topology here): CPUs "
            "are listed in numeric order and physical cores are not counted"
        )
    for group in _sharing_groups(slots):
        first = slots[group[0]]
        where = f"NUMA node {first.numa_node}'s" if first.numa_node is not None else "the same"
        notes.append(
            f"ranks {', '.join(map(str, group))} share {where} CPUs {_cpus_text(first.cpus)}: their "
            "thread pools must divide these CPUs"
        )


def _sizes(total: int, parts: int) -> list[int]:
    """`total` split into `parts` counts as even as possible, the larger first: (5, 2) -> [3, 2]."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _chunks(items: list[int], parts: int) -> list[list[int]]:
    out, at = [], 0
    for size in _sizes(len(items), parts):
        out.append(items[at : at + size])
        at += size
    return out


def _cores(cpus: list[int], topo: Topology) -> list[list[int]]:
    """`cpus` grouped by physical core, cores in the order of their lowest CPU. A CPU whose core is
    unknown is a core of its own."""
    by_core: dict[int, list[int]] = {}
    for c in sorted(cpus):
        by_core.setdefault(topo.core_of.get(c, -1 - c), []).append(c)
    return sorted(by_core.values(), key=lambda group: group[0])


def _split(drafts: list[_Draft], topo: Topology, notes: list[str]) -> None:
    """Ranks bound to the same CPU set get disjoint runs of whole physical cores of it: SMT siblings
    stay together (two ranks on the two threads of one core would contend for its units)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, d in enumerate(drafts):
        if d.cpus:
            groups.setdefault(tuple(sorted(d.cpus)), []).append(i)
    for cpus, members in groups.items():
        if len(members) < 2:
            continue
        if not all(c in topo.core_of for c in cpus):
            _split_runs(drafts, members, list(cpus))
            notes.append(
                f"ranks {', '.join(map(str, members))}: SMT siblings unknown, so {_cpus_text(list(cpus))} is "
                "split run by run (Linux numbers second threads after all first ones, so a core's "
                "threads stay with one rank)"
            )
            continue
        cores = _cores(list(cpus), topo)
        if len(cores) < len(members):
            notes.append(
                f"ranks {', '.join(map(str, members))}: {len(cores)} physical core(s) in "
                f"{_cpus_text(list(cpus))} cannot be split between {len(members)} ranks: they share them"
            )
            continue
        at = 0
        for i, size in zip(members, _sizes(len(cores), len(members)), strict=True):
            drafts[i].cpus = [c for core in cores[at : at + size] for c in core]
            at += size


def _runs(cpus: list[int]) -> list[list[int]]:
    """[48..63, 176..191] -> [[48..63], [176..191]]: maximal runs of consecutive CPU numbers."""
    out: list[list[int]] = []
    for c in sorted(cpus):
        if out and out[-1][-1] == c - 1:
            out[-1].append(c)
        else:
            out.append([c])
    return out


def _split_runs(drafts: list[_Draft], members: list[int], cpus: list[int]) -> None:
    """Without SMT information: rank k takes the k-th part of every run. x86 Linux numbers the
    second hardware threads after all first ones (48-63 and their siblings 176-191 on a DGX A100),
    so 48-55 goes with 176-183; without SMT the parts are disjoint and even all the same."""
    shares: list[list[int]] = [[] for _ in members]
    for run in _runs(cpus):
        at = 0
        for k, size in enumerate(_sizes(len(run), len(members))):
            shares[k] += run[at : at + size]
            at += size
    for i, share in zip(members, shares, strict=True):
        drafts[i].cpus = share


def _sharing_groups(slots: list[RankSlot]) -> list[list[int]]:
    """Ranks whose CPU sets overlap, as connected groups of two or more."""
    seen: set[int] = set()
    groups = []
    for s in slots:
        if s.local_rank in seen or not s.shares_with:
            continue
        group, todo = set(), [s.local_rank]
        while todo:
            r = todo.pop()
            if r in group:
                continue
            group.add(r)
            todo += slots[r].shares_with
        seen |= group
        groups.append(sorted(group))
    return groups
