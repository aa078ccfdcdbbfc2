"""Huge pages: transparent huge pages (mode, defrag) and hugetlb pools (per size, per node).

Transparent huge pages cut TLB misses on the large tensors and pinned staging buffers of a
training job, provided compaction does not stall its allocations. Persistent hugetlb pages are
the opposite trade: set aside at boot or by sysctl, they are memory no other allocation can use,
so a pool the job does not map is memory taken from it, and an exhausted pool fails the job's
hugetlb mappings.

Sources: Documentation/admin-guide/mm/hugetlbpage.rst (nr/free/resv/surplus, per-node pools) and
Documentation/admin-guide/mm/transhuge.rst (enabled, defrag).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status, unparsable
from nodeagent.facts import memory, topology
from nodeagent.facts.memory import HUGE_DIR, NODE_DIR, THP_DIR, HugePagePool
from nodeagent.host import Host

ID = "hugepages"
DOC_HUGETLB = "https://docs.kernel.org/admin-guide/mm/hugetlbpage.html"
DOC_THP = "https://docs.kernel.org/admin-guide/mm/transhuge.html"
# What a defrag setting the check flags is changed to, in order of preference: defer+madvise lets
# madvised regions compact directly and every other fault wake kcompactd; kernels before 4.11 lack
# it, and madvise is the next best (transhuge.rst, Global THP controls).
THP_DEFRAG_REMEDIES = ("defer+madvise", "madvise")


@dataclass(frozen=True)
class Params:
    thp_enabled: tuple[str, ...] = param(
        ("always", "madvise"),
        "Accepted THP modes; 'never' leaves tensor and pinned buffers in 4 KiB pages and their TLB "
        f"misses ({DOC_THP}#global-thp-controls).",
    )
    thp_defrag_avoid: tuple[str, ...] = param(
        ("always",),
        "defrag=always makes every THP fault stall in direct reclaim/compaction; 'madvise' or "
        f"'defer+madvise' keep the benefit without the stalls ({DOC_THP}#global-thp-controls).",
    )
    # The default is None, so no mutable default is shared: RUF009 only sees the dict annotation.
    expected_pages: dict[str | int, int] | None = param(  # noqa: RUF009
        None,
        "Huge pages the job maps, per size ({'2048kB': 4096, '1GB': 64}): the pool must have that "
        "many free and unreserved, and pages beyond it are memory taken from the job. Default: the "
        f"job needs none ({DOC_HUGETLB}).",
    )
    max_node_imbalance_pct: float = param(
        10.0,
        "A pool spread unevenly over NUMA nodes leaves ranks pinned to the short node without local "
        f"huge pages; size per node with node*/hugepages ({DOC_HUGETLB}).",
    )


@dataclass(frozen=True)
class Facts:
    memory: memory.Memory
    cpu_nodes: list[int] = field(default_factory=list)  # NUMA nodes with CPUs and memory


def collect(host: Host) -> Facts:
    mem = memory.collect(host)
    topo = topology.collect(host)
    return Facts(
        memory=mem,
        cpu_nodes=[n.id for n in topo.numa_nodes if n.cpus and n.memory_mib],
    )


# -- evaluation --------------------------------------------------------------------------------


def size_kb(key: str | int) -> int | None:
    """A page size as a user writes it -> kB: 2048, "2048kB", "2MB", "2M", "1GB", "1G" -> 2048 / 1048576."""
    if isinstance(key, int):
        return key if key > 0 else None
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(key))
    if not m:
        return None
    scale = {"": 1, "k": 1, "m": 1024, "g": 1024 * 1024}[m.group(2).lower()]
    value = int(m.group(1)) * scale
    return value or None


def _size(kb: int) -> str:
    if kb >= 1 << 20 and kb % (1 << 20) == 0:
        return f"{kb >> 20} GiB"
    if kb >= 1024 and kb % 1024 == 0:
        return f"{kb >> 10} MiB"
    return f"{kb} kB"


def _mem(pages: int, kb: int) -> str:
    total = pages * kb
    if total >= 1 << 20:
        return f"{total / (1 << 20):.1f} GiB"
    return f"{total / 1024:.0f} MiB"


def _boot_size(kb: int) -> str:
    """The hugepagesz= spelling of a size: 2048 -> "2M", 1048576 -> "1G"."""
    return _size(kb).replace(" ", "").replace("iB", "").replace("kB", "K")


def _pool_dir(pool: HugePagePool) -> str:
    return f"{HUGE_DIR}/hugepages-{pool.size_kb}kB"


def thp_enabled_accepted(mode: str, p: Params) -> bool:
    """Whether the check accepts THP mode `mode` (the bracketed word of enabled)."""
    return mode in p.thp_enabled


def thp_enabled_remedy(p: Params) -> str:
    """The mode a flagged THP mode is changed to: the last accepted one (madvise by default: huge
    pages where asked for, no bloat elsewhere)."""
    return p.thp_enabled[-1] if p.thp_enabled else "madvise"


def thp_defrag_accepted(defrag: str, p: Params) -> bool:
    """Whether the check accepts THP defrag setting `defrag` (the bracketed word of defrag)."""
    return defrag not in p.thp_defrag_avoid


def _thp(f: Facts, p: Params) -> list[Finding]:
    enabled_path = f"{THP_DIR}/enabled"
    mode = f.memory.thp_enabled
    if f.memory.thp_enabled_raw is None and mode is None:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no transparent huge pages at {enabled_path} (kernel without THP, or not recorded)",
                {enabled_path: "(absent)"},
                subject="thp",
            )
        ]
    out = [_thp_mode(f, p)]
    defrag = _thp_defrag(f, p)
    if defrag is not None:
        out.append(defrag)
    return out


def _thp_mode(f: Facts, p: Params) -> Finding:
    enabled_path = f"{THP_DIR}/enabled"
    mode = f.memory.thp_enabled
    evidence = {enabled_path: f.memory.thp_enabled_raw or str(mode)}
    if f.memory.thp_defrag_raw is not None:
        evidence[f"{THP_DIR}/defrag"] = f.memory.thp_defrag_raw
    if mode is None:
        return Finding(
            ID,
            Status.WARN,
            f"THP mode unparsable: {f.memory.thp_enabled_raw!r}",
            evidence,
            expected="one mode in [brackets]",
            remediation=f"A corrupt recording: re-record the snapshot or read {enabled_path} on the node.",
            subject="thp",
        )
    if not thp_enabled_accepted(mode, p):
        return Finding(
            ID,
            Status.WARN,
            f"transparent huge pages {mode}: large tensors and pinned buffers stay in 4 KiB pages",
            evidence,
            expected=" or ".join(p.thp_enabled),
            remediation=f"echo {thp_enabled_remedy(p)} > {enabled_path} "
            "(persist with transparent_hugepage=madvise on the kernel command line)",
            subject="thp",
            fix="thp",
        )
    return Finding(
        ID,
        Status.OK,
        f"transparent huge pages {mode}",
        evidence,
        expected=" or ".join(p.thp_enabled),
        subject="thp",
    )


def _thp_defrag(f: Facts, p: Params) -> Finding | None:
    """The defrag setting; None when it is not recorded, or THP is off (then defrag does not matter)."""
    defrag_path = f"{THP_DIR}/defrag"
    mode, defrag, raw = f.memory.thp_enabled, f.memory.thp_defrag, f.memory.thp_defrag_raw
    if raw is not None and defrag is None:
        return Finding(
            ID,
            Status.WARN,
            f"THP defrag unparsable: {raw!r}",
            {defrag_path: raw},
            expected="one setting in [brackets]",
            remediation=f"A corrupt recording: re-record the snapshot or read {defrag_path} on the node.",
            subject="thp-defrag",
        )
    if defrag is None or mode in (None, "never"):
        return None
    if not thp_defrag_accepted(defrag, p):
        return Finding(
            ID,
            Status.WARN,
            f"THP defrag {defrag}: page faults stall in direct compaction when memory is fragmented",
            {defrag_path: raw or defrag},
            expected=" or ".join(reversed(THP_DEFRAG_REMEDIES)),
            remediation=f"echo {THP_DEFRAG_REMEDIES[0]} > {defrag_path}",
            subject="thp-defrag",
            fix="thp",
        )
    return Finding(ID, Status.OK, f"THP defrag {defrag}", {defrag_path: raw or defrag}, subject="thp-defrag")


def _expected(p: Params) -> tuple[dict[int, int], list[str]]:
    wanted: dict[int, int] = {}
    bad: list[str] = []
    given = p.expected_pages or {}
    if not isinstance(given, dict):
        return {}, [repr(given)]
    for key, pages in given.items():
        kb = size_kb(key)
        if kb is None or not isinstance(pages, int) or isinstance(pages, bool) or pages < 0:
            bad.append(f"{key!r}: {pages!r}")
        else:
            wanted[kb] = pages
    return wanted, bad


class _Counts(NamedTuple):
    """A readable pool's page counts."""

    total: int
    free: int
    reserved: int

    @property
    def available(self) -> int:
        return self.free - self.reserved  # free pages not yet promised to a mapping

    @property
    def used(self) -> int:
        return self.total - self.free

    @property
    def text(self) -> str:
        return f"{self.total} total, {self.free} free, {self.reserved} reserved"


def _pool(pool: HugePagePool, want: int | None) -> Finding:
    base = _pool_dir(pool)
    evidence = {
        f"{base}/nr_hugepages": str(pool.total),
        f"{base}/free_hugepages": str(pool.free),
        f"{base}/resv_hugepages": str(pool.reserved),
    }
    if pool.surplus:
        evidence[f"{base}/surplus_hugepages"] = str(pool.surplus)
    if pool.total is None or pool.free is None:
        return Finding(
            ID,
            Status.WARN,
            f"{_size(pool.size_kb)} pool unreadable: nr_hugepages {pool.total}, free_hugepages {pool.free}",
            evidence,
            expected="integer page counts",
            remediation="A corrupt recording: re-record the snapshot or run `grep -i huge /proc/meminfo` on "
            "the node.",
            subject=f"hugepages-{pool.size_kb}kB",
        )
    counts = _Counts(pool.total, pool.free, pool.reserved or 0)
    if want:
        return _pool_for_job(pool, counts, want, evidence)
    return _pool_unasked(pool, counts, evidence)


def _pool_for_job(pool: HugePagePool, n: _Counts, want: int, evidence: dict[str, str]) -> Finding:
    """A pool the job maps `want` pages of: short is a FAIL, pages beyond it are memory taken."""
    size = _size(pool.size_kb)
    subject = f"hugepages-{pool.size_kb}kB"
    nr_path = f"{_pool_dir(pool)}/nr_hugepages"
    if n.available < want:
        return Finding(
            ID,
            Status.FAIL,
            f"{size} pool has {max(n.available, 0)} pages available, the job expects {want} ({n.text})",
            evidence,
            expected=f">= {want} free and unreserved",
            remediation=f"echo {n.used + n.reserved + want} > {nr_path}; allocation at run time fails once "
            f"memory is fragmented, so reserve them at boot: hugepagesz={_boot_size(pool.size_kb)} "
            f"hugepages={n.used + n.reserved + want} on the kernel command line.",
            subject=subject,
            fix="hugepages",
        )
    if n.available > want:
        extra = n.available - want
        return Finding(
            ID,
            Status.WARN,
            f"{size} pool holds {extra} pages ({_mem(extra, pool.size_kb)}) beyond the {want} the job "
            f"expects: memory the job cannot use ({n.text})",
            evidence,
            expected=f"{want} free pages",
            remediation=f"echo {n.total - extra} > {nr_path}",
            subject=subject,
            fix="hugepages",
        )
    return Finding(
        ID,
        Status.OK,
        f"{size} pool has the {want} pages the job expects ({n.text})",
        evidence,
        subject=subject,
    )


def _pool_unasked(pool: HugePagePool, n: _Counts, evidence: dict[str, str]) -> Finding:
    """A pool the job maps nothing from: free pages in it are memory taken from the job."""
    size = _size(pool.size_kb)
    subject = f"hugepages-{pool.size_kb}kB"
    nr_path = f"{_pool_dir(pool)}/nr_hugepages"
    if n.total == 0:
        return Finding(
            ID,
            Status.OK,
            f"no {size} huge pages set aside",
            evidence,
            expected="0 (the job maps none)",
            subject=subject,
        )
    if n.available <= 0:
        return Finding(
            ID,
            Status.WARN,
            f"{size} pool exhausted: all {n.total} pages in use or reserved ({n.text})",
            evidence,
            expected="free pages for new hugetlb mappings, or no pool",
            remediation=f"If the job maps huge pages, grow the pool (echo N > {nr_path}) and set "
            "expected_pages to what it needs; otherwise find who holds them: grep -l huge /proc/*/numa_maps.",
            subject=subject,
            fix="hugepages",
        )
    return Finding(
        ID,
        Status.WARN,
        f"{n.available} free {size} huge pages ({_mem(n.available, pool.size_kb)}) set aside: memory taken "
        f"from the job, which maps none ({n.text})",
        evidence,
        expected="0 free pages (or set expected_pages)",
        remediation=f"echo {n.used + n.reserved} > {nr_path} (and drop hugepages= from the kernel command "
        "line), or set expected_pages if the job maps huge pages.",
        subject=subject,
        fix="hugepages",
    )


def _per_node(pool: HugePagePool, cpu_nodes: list[int], p: Params) -> Finding | None:
    nodes = {n: v for n, v in pool.per_node.items() if not cpu_nodes or n in cpu_nodes}
    if len(nodes) < 2 or not pool.total:
        return None
    size = _size(pool.size_kb)
    subject = f"hugepages-{pool.size_kb}kB-nodes"
    name = f"hugepages-{pool.size_kb}kB"
    evidence = {
        f"{NODE_DIR}/node{n}/hugepages/{name}/nr_hugepages": f"{total} (free {free})"
        for n, (total, free) in nodes.items()
    }
    totals = {n: t for n, (t, _) in nodes.items() if t is not None}
    if len(totals) < len(nodes):
        return Finding(
            ID,
            Status.WARN,
            f"{size} per-node pool sizes unreadable",
            evidence,
            expected="integer page counts",
            remediation="A corrupt recording: re-record the snapshot or run `numastat -m` on the node.",
            subject=subject,
        )
    largest = max(totals.values())
    short = [
        n for n, t in totals.items() if largest and (largest - t) * 100 / largest > p.max_node_imbalance_pct
    ]
    empty = [n for n, (t, fr) in nodes.items() if t and fr == 0]
    with_free = [n for n, (_, fr) in nodes.items() if fr]
    exhausted = empty if with_free else []  # all nodes empty is the pool finding's business
    per = ", ".join(f"node {n} {t}" for n, t in totals.items())
    if not short and not exhausted:
        return Finding(ID, Status.OK, f"{size} pool balanced across nodes: {per}", evidence, subject=subject)
    problems = []
    if short:
        problems.append(f"unbalanced ({per})")
    if exhausted:
        problems.append(f"no free pages left on node {', '.join(map(str, exhausted))}")
    even = -(-max(sum(totals.values()), 1) // len(totals))
    return Finding(
        ID,
        Status.WARN,
        f"{size} pool {'; '.join(problems)}: ranks pinned there get no local huge pages",
        evidence,
        expected=f"each node within {p.max_node_imbalance_pct:g}% of the largest, free pages on every node",
        remediation=f"Size the pool per node: echo {even} > {NODE_DIR}/nodeN/hugepages/{name}/nr_hugepages "
        "for each node (or hugepages=N:count,... on the kernel command line).",
        subject=subject,
        fix="hugepages",
    )


def _pools(f: Facts, p: Params) -> list[Finding]:
    pools = f.memory.pools
    if not pools:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"no hugetlb pools at {HUGE_DIR} (kernel without HugeTLB, or not recorded)",
                {HUGE_DIR: "(absent)"},
                subject="hugetlb",
            )
        ]
    wanted, bad = _expected(p)
    out: list[Finding] = []
    if bad:
        out.append(
            Finding(
                ID,
                Status.WARN,
                f"parameter expected_pages has entries that are not 'size: pages': {', '.join(bad)}",
                {"expected_pages": str(p.expected_pages)},
                expected="{'2048kB': 1024, '1GB': 16}",
                remediation="Fix the playbook: sizes as 2048kB / 2MB / 1GB, page counts as non-negative "
                "integers.",
                subject="params",
            )
        )
    sizes = {pool.size_kb for pool in pools}
    for kb, pages in sorted(wanted.items()):
        if kb not in sizes and pages:
            out.append(
                Finding(
                    ID,
                    Status.FAIL,
                    f"the job expects {pages} huge pages of {_size(kb)}, a size this kernel does not offer "
                    f"(sizes: {', '.join(_size(s) for s in sorted(sizes))})",
                    {HUGE_DIR: ", ".join(f"hugepages-{s}kB" for s in sorted(sizes))},
                    expected=f"{HUGE_DIR}/hugepages-{kb}kB",
                    remediation=f"Boot with hugepagesz={_boot_size(kb)} "
                    "hugepages=N if the CPU supports the size, or map a size listed here.",
                    subject=f"hugepages-{kb}kB",
                    fix="hugepages",
                )
            )
    for pool in pools:
        out.append(_pool(pool, wanted.get(pool.size_kb)))
        node = _per_node(pool, f.cpu_nodes, p)
        if node:
            out.append(node)
    return out


def evaluate(f: Facts, p: Params) -> list[Finding]:
    findings = _thp(f, p) + _pools(f, p)
    findings += unparsable(ID, f.memory.problems, "huge page file(s)", "`grep -i huge /proc/meminfo`")
    return findings


CHECK = Check(
    id=ID,
    title="Huge pages",
    area=Area.MEMORY,
    tags=("preflight", "memory"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(*memory.PATHS, *topology.PATHS),
)
