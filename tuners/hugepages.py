"""hugepages: reserve N persistent huge pages of one size on every NUMA node that runs ranks.

Persistent (hugetlb) pages are a trade: a job that maps them (an allocator configured for
hugetlbfs, DPDK-style buffers) gets fewer TLB misses on its large buffers, and a pool set aside
on each node keeps a rank pinned there on local memory; but a reserved page is memory no other
allocation can use. So nothing is reserved unless asked for (pages_per_node > 0), and a request
larger than a sane share of a node's memory is refused.

The `hugepages` check judges pools against what the job maps (its expected_pages), and flags free
pages set aside that the job does not use; this tuner never picks a pool size by itself, so each
change is asked for by `pages_per_node` and says so, and every pool finding is otherwise left to
people, with why (the plan's `declined`).

Run-time allocation can come up short: each page needs physically contiguous free memory, and the
kernel stops at what it finds, which is why hugetlbpage.rst advises allocating early and checking
the count actually allocated. `verify` reads the pools back and reports the shortfall, per node.

Sources: Documentation/admin-guide/mm/hugetlbpage.rst (nr_hugepages, per-node pools under
/sys/devices/system/node/node*/hugepages), kernel-parameters.txt (hugepagesz=, hugepages=).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, finding_key, runtime_write
from nodeagent.checks import hugepages as hugepages_check
from nodeagent.checks.hugepages import size_kb
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import topology
from nodeagent.facts.memory import HUGE_DIR, NODE_DIR
from nodeagent.host import Host

ID = "hugepages"
# Every pool finding of the check: per size ("hugepages-2048kB") and per node ("...-nodes").
POOL_FINDINGS = finding_key(hugepages_check.ID, "hugepages-*")
ASKED = f"{ID}.pages_per_node"
DOC = "https://docs.kernel.org/admin-guide/mm/hugetlbpage.html"
DOC_PARAMS = "https://docs.kernel.org/admin-guide/kernel-parameters.html"


@dataclass(frozen=True)
class Params:
    size: str = param(
        "2MB",
        "Huge page size of the pool: 2MB (x86-64, most arm64), or 1GB where the CPU offers it "
        f"(a hugepages-1048576kB folder); only sizes this kernel lists can be reserved ({DOC}).",
    )
    pages_per_node: int = param(
        0,
        "Pages to reserve on each NUMA node with CPUs; 0 reserves nothing: reserved pages are taken "
        "from the memory the job can use for anything else, so reserving is a deliberate choice "
        f"(set it to what the job maps per rank times ranks per node) ({DOC}).",
    )
    max_fraction: float = param(
        0.5,
        "Refuse a request above this share of a node's memory: hugetlb pages serve only hugetlb "
        "mappings, and the job still needs ordinary memory for its heap, page cache and pinned "
        f"buffers, or the OOM killer ends it ({DOC}).",
    )

    def __post_init__(self) -> None:
        if size_kb(self.size) is None:
            raise UsageError(f"tuner {ID}: size {self.size!r} is not a page size (write 2MB, 1GB or 2048kB)")
        if isinstance(self.pages_per_node, bool) or self.pages_per_node < 0:
            raise UsageError(f"tuner {ID}: pages_per_node must be 0 or more, got {self.pages_per_node!r}")
        if not 0 < self.max_fraction <= 1:
            raise UsageError(f"tuner {ID}: max_fraction must be in (0, 1], got {self.max_fraction!r}")


@dataclass(frozen=True)
class Node:
    id: int
    cpus: list[int]
    memory_mib: int | None
    nr_hugepages: dict[int, str | None]  # size in kB -> nr_hugepages as read (None: unreadable)


@dataclass(frozen=True)
class Facts:
    per_node: bool  # node*/hugepages folders exist (a NUMA kernel); else only the global pools
    nodes: list[Node]  # NUMA nodes from the topology (GPU memory nodes are not among them)
    global_pools: dict[int, str | None]  # size in kB -> /sys/kernel/mm/hugepages/.../nr_hugepages
    memory_total_mib: int | None = None
    gpu_memory_nodes: list[int] = field(default_factory=list)


def _pools(host: Host, folder: str) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for entry in host.listdir(folder) or []:
        m = re.fullmatch(r"hugepages-(\d+)kB", entry)
        if m:
            out[int(m.group(1))] = host.read_value(f"{folder}/{entry}/nr_hugepages")
    return out


def collect(host: Host) -> Facts:
    topo = topology.collect(host)
    nodes = [
        Node(n.id, n.cpus, n.memory_mib, _pools(host, f"{NODE_DIR}/node{n.id}/hugepages"))
        for n in topo.numa_nodes
    ]
    return Facts(
        per_node=any(host.is_dir(f"{NODE_DIR}/node{n.id}/hugepages") for n in topo.numa_nodes),
        nodes=nodes,
        global_pools=_pools(host, HUGE_DIR),
        memory_total_mib=topo.memory_total_mib,
        gpu_memory_nodes=[g.id for g in topo.gpu_memory_nodes],
    )


def size_text(kb: int) -> str:
    if kb >= 1 << 20 and kb % (1 << 20) == 0:
        return f"{kb >> 20} GiB"
    if kb >= 1024 and kb % 1024 == 0:
        return f"{kb >> 10} MiB"
    return f"{kb} kB"


def _boot_size(kb: int) -> str:
    """hugepagesz= spelling: 2048 -> 2M, 1048576 -> 1G."""
    return size_text(kb).replace(" ", "").replace("iB", "").replace("kB", "K")


def _mib(pages: int, kb: int) -> float:
    return pages * kb / 1024


def _count(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None


class _Target(NamedTuple):
    label: str  # "node 0", or "the machine" without NUMA folders
    path: str  # its nr_hugepages
    raw: str | None  # the value read
    memory_mib: int | None  # the node's memory


def plan(f: Facts, p: Params) -> Plan:
    """The reservation `pages_per_node` asks for; without one, every pool finding of the check is
    declined with the reason the plan gives."""
    out = _plan(f, p)
    if out.changes:
        return out
    return dataclasses.replace(out, declined={POOL_FINDINGS: out.notes[-1]} if out.notes else {})


def _plan(f: Facts, p: Params) -> Plan:
    kb = size_kb(p.size)
    if kb is None:  # Params already refuses this; a plan never raises
        return Plan(ID, notes=[f"size {p.size!r} is not a page size: nothing planned"])
    size = size_text(kb)
    if p.pages_per_node == 0:
        return Plan(
            ID,
            notes=[
                "pages_per_node is 0: nothing reserved. Reserving huge pages is a deliberate choice, "
                "as they are taken from the memory the job can use otherwise; ask with --set "
                "hugepages.pages_per_node=N (and hugepages.size=2MB|1GB)"
            ],
        )
    notes: list[str] = []
    if f.gpu_memory_nodes:
        notes.append(
            f"GPU memory nodes {', '.join(map(str, f.gpu_memory_nodes))} are left out: ranks run on CPU nodes"
        )
    targets, stop = _node_targets(f, kb, size, notes) if f.per_node else _global_target(f, kb, size)
    if stop is not None:
        return Plan(ID, notes=[*notes, stop])
    if not targets:
        return Plan(ID, notes=[*notes, "no NUMA node with CPUs and memory: nothing planned"])
    refused = _refusals(targets, p, kb, size)
    if refused:
        return Plan(ID, notes=[*notes, "refused, nothing planned: " + "; ".join(refused)])
    if all(_count(t.raw) == p.pages_per_node for t in targets):
        return Plan(ID, notes=[*notes, f"already {p.pages_per_node} x {size} pages on each node"])
    return Plan(ID, [_change(f, targets, p, kb, size)], notes)


def _node_targets(f: Facts, kb: int, size: str, notes: list[str]) -> tuple[list[_Target], str | None]:
    """The pool of `kb` pages on every NUMA node that runs ranks; or why nothing can be planned."""
    run_nodes = [n for n in f.nodes if n.cpus]
    left = [n.id for n in f.nodes if not n.cpus]
    if left:
        notes.append(f"nodes without CPUs ({', '.join(map(str, left))}) are left out: no rank runs there")
    memoryless = [n.id for n in run_nodes if n.memory_mib == 0]
    if memoryless:
        notes.append(f"nodes {', '.join(map(str, memoryless))} have no memory: nothing to reserve there")
    targets = []
    for n in run_nodes:
        if n.memory_mib == 0:
            continue
        if kb not in n.nr_hugepages:
            offered = ", ".join(size_text(s) for s in sorted(n.nr_hugepages)) or "none"
            return [], (
                f"node {n.id} has no {size} pool (sizes offered: {offered}): nothing planned; "
                f"a size the CPU supports but the kernel did not set up needs "
                f"hugepagesz={_boot_size(kb)} at boot"
            )
        path = f"{NODE_DIR}/node{n.id}/hugepages/hugepages-{kb}kB/nr_hugepages"
        targets.append(_Target(f"node {n.id}", path, n.nr_hugepages[kb], n.memory_mib))
    return targets, None


def _global_target(f: Facts, kb: int, size: str) -> tuple[list[_Target], str | None]:
    """No NUMA folders (CONFIG_NUMA=n): the one global pool is the single node's."""
    if kb not in f.global_pools:
        offered = ", ".join(size_text(s) for s in sorted(f.global_pools)) or "none"
        return [], f"no {size} pool under {HUGE_DIR} (sizes: {offered}): nothing planned"
    path = f"{HUGE_DIR}/hugepages-{kb}kB/nr_hugepages"
    return [_Target("the machine", path, f.global_pools[kb], f.memory_total_mib)], None


def _refusals(targets: list[_Target], p: Params, kb: int, size: str) -> list[str]:
    """Why the request must not be applied: too large a share of a node's memory, or unknowable."""
    need = _mib(p.pages_per_node, kb)
    refused: list[str] = []
    for t in targets:
        if t.memory_mib is None:
            refused.append(
                f"memory of {t.label} unknown, so the request cannot be checked against max_fraction"
            )
        elif need > p.max_fraction * t.memory_mib:
            refused.append(
                f"{t.label}: {p.pages_per_node} x {size} = {need:.0f} MiB is more than "
                f"{p.max_fraction:g} of its {t.memory_mib} MiB"
            )
    unreadable = [t.label for t in targets if _count(t.raw) is None]
    if unreadable:
        refused.append(f"nr_hugepages unreadable on {', '.join(unreadable)}")
    return refused


def _change(f: Facts, targets: list[_Target], p: Params, kb: int, size: str) -> Change:
    where = ", ".join(t.label for t in targets)
    if f.per_node:
        node_ids = [int(t.label.split()[-1]) for t in targets]
        where = f"node{'s' if len(node_ids) > 1 else ''} {format_cpulist(node_ids)}"
    need = _mib(p.pages_per_node, kb)
    why = (
        f"pages_per_node={p.pages_per_node} asked by the tuner parameter {ASKED}; the {hugepages_check.ID} "
        "check expects no pool unless its expected_pages says the job maps huge pages. "
        f"{p.pages_per_node} x {size} = {need:.0f} MiB per node, local to the ranks pinned there; taken "
        "from ordinary memory; the kernel may give fewer when memory is fragmented (verify reports "
        f"it) ({DOC})"
    )
    change = runtime_write(
        ID, f"{size} huge pages on {where}", why, {t.path: t.raw for t in targets}, str(p.pages_per_node)
    )
    return dataclasses.replace(change, asked=ASKED)


def _node(path: str) -> str:
    m = re.search(r"/node(\d+)/", path)
    return f"node {m.group(1)}" if m else "the machine"


@dataclass
class _Readback:
    """The pools of one change as read back: what each holds against what was asked."""

    evidence: dict[str, str] = field(default_factory=dict)
    short: list[str] = field(default_factory=list)
    over: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    boot_counts: list[str] = field(default_factory=list)  # hugepages= entries, node:count


def _read_back(host: Host, c: Change) -> _Readback:
    back = _Readback()
    for w in c.writes:
        asked = int(w.after)
        got = _count(host.read_value(w.path))
        node = _node(w.path)
        back.evidence[w.path] = f"{'(unreadable)' if got is None else got} (asked {asked})"
        m = re.search(r"/node(\d+)/", w.path)
        back.boot_counts.append(f"{m.group(1)}:{asked}" if m else str(asked))
        if got is None:
            back.broken.append(node)
        elif got < asked:
            back.short.append(f"{node} got {got} of {asked} ({asked - got} short)")
        elif got > asked:
            back.over.append(f"{node} holds {got}, {got - asked} more than asked (pages in use stay)")
    return back


def verify(host: Host, changes: list[Change], check_id: str = "tune") -> list[Finding]:
    """Read the pools back. The kernel allocates what it can: fewer pages than asked is a WARN
    naming the shortfall per node (not a FAIL: the pool works, only smaller); an unreadable pool
    is a FAIL."""
    return [
        _verdict(c, _read_back(host, c), check_id)
        for c in changes
        if c.tuner == ID and c.scope is Scope.RUNTIME and c.writes
    ]


def _verdict(c: Change, back: _Readback, check_id: str) -> Finding:
    if back.broken:
        return Finding(
            check_id,
            Status.FAIL,
            f"{ID}: {c.target}: pool unreadable on {', '.join(back.broken)}",
            back.evidence,
            expected=c.after,
            remediation="Read the pool on the node (grep -i huge /proc/meminfo), or revert with "
            "`nodeagent revert`.",
            subject=c.target,
            fix=ID,
        )
    if back.short or back.over:
        size_kb_m = re.search(r"hugepages-(\d+)kB", c.writes[0].path)
        kb = int(size_kb_m.group(1)) if size_kb_m else 0
        boot = f"hugepagesz={_boot_size(kb)} hugepages={','.join(back.boot_counts)}"
        return Finding(
            check_id,
            Status.WARN,
            f"{ID}: {c.target}: " + "; ".join(back.short + back.over),
            back.evidence,
            expected=f"{c.after} per node",
            remediation="Run-time allocation stops at the contiguous free memory it finds: "
            "compact memory (echo 1 > /proc/sys/vm/compact_memory) or drop caches and apply "
            f"again, or reserve at boot, before memory fragments: {boot} on the kernel "
            f"command line ({DOC_PARAMS}).",
            subject=c.target,
            fix=ID,
        )
    return Finding(
        check_id, Status.OK, f"{ID}: {c.target} = {c.after} each", back.evidence, subject=c.target, fix=ID
    )


TUNER = Tuner(
    id=ID,
    title="Huge pages reserved per NUMA node",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(
        f"{NODE_DIR}/node*/hugepages/hugepages-*/nr_hugepages",
        f"{HUGE_DIR}/hugepages-*/nr_hugepages",
        *topology.PATHS,
    ),
    verify=verify,
    writes=(
        f"{NODE_DIR}/node*/hugepages/hugepages-*/nr_hugepages",
        f"{HUGE_DIR}/hugepages-*/nr_hugepages",
    ),
)
