"""Huge pages and transparent huge pages.

Sources: Documentation/admin-guide/mm/hugetlbpage.rst (/sys/kernel/mm/hugepages, per-node pools)
and Documentation/admin-guide/mm/transhuge.rst (transparent_hugepage/enabled, defrag).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

HUGE_DIR = "/sys/kernel/mm/hugepages"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
NODE_DIR = "/sys/devices/system/node"
_POOL_ATTRS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages")
PATHS = (
    *(f"{HUGE_DIR}/hugepages-*/{a}" for a in _POOL_ATTRS),
    *(f"{NODE_DIR}/node*/hugepages/hugepages-*/{a}" for a in ("nr_hugepages", "free_hugepages")),
    f"{THP_DIR}/enabled",
    f"{THP_DIR}/defrag",
    f"{THP_DIR}/khugepaged/defrag",
    "/proc/meminfo",
)


@dataclass(frozen=True)
class HugePagePool:
    size_kb: int
    total: int | None
    free: int | None
    reserved: int | None
    surplus: int | None
    per_node: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)  # node -> (total, free)


@dataclass(frozen=True)
class Memory:
    total_mib: int | None
    available_mib: int | None
    pools: list[HugePagePool]
    thp_enabled: str | None  # "always", "madvise" or "never"
    thp_defrag: str | None
    thp_enabled_raw: str | None  # the file as read ("always [madvise] never"): tells corrupt from absent
    thp_defrag_raw: str | None
    problems: list[str]


def _size_kb(name: str) -> int | None:
    m = re.fullmatch(r"hugepages-(\d{1,20})kB", name)
    return int(m.group(1)) if m else None


def collect(host: Host) -> Memory:
    return host.memo("facts.memory", lambda: _collect(host))


def _collect(host: Host) -> Memory:
    r = Reader(host)
    info = parse.meminfo(r.text("/proc/meminfo") or "")
    nodes = sorted(
        int(m.group(1)) for e in host.listdir(NODE_DIR) or [] if (m := re.fullmatch(r"node(\d{1,6})", e))
    )
    pools: list[HugePagePool] = []
    for name in host.listdir(HUGE_DIR) or []:
        size = _size_kb(name)
        if size is None:
            continue
        base = f"{HUGE_DIR}/{name}"
        per_node = {
            n: (
                r.int(f"{NODE_DIR}/node{n}/hugepages/{name}/nr_hugepages"),
                r.int(f"{NODE_DIR}/node{n}/hugepages/{name}/free_hugepages"),
            )
            for n in nodes
            if host.is_dir(f"{NODE_DIR}/node{n}/hugepages/{name}")
        }
        pools.append(
            HugePagePool(
                size_kb=size,
                total=r.int(f"{base}/nr_hugepages"),
                free=r.int(f"{base}/free_hugepages"),
                reserved=r.int(f"{base}/resv_hugepages"),
                surplus=r.int(f"{base}/surplus_hugepages"),
                per_node=per_node,
            )
        )
    pools.sort(key=lambda p: p.size_kb)
    thp = r.value(f"{THP_DIR}/enabled")
    defrag = r.value(f"{THP_DIR}/defrag")
    total = info.get("MemTotal")
    avail = info.get("MemAvailable")
    return Memory(
        total_mib=None if total is None else round(total / 1024),
        available_mib=None if avail is None else round(avail / 1024),
        pools=pools,
        thp_enabled=parse.selected(thp) if thp else None,
        thp_defrag=parse.selected(defrag) if defrag else None,
        thp_enabled_raw=thp,
        thp_defrag_raw=defrag,
        problems=r.problems,
    )
