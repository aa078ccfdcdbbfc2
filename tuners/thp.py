"""thp: transparent huge pages for the regions that ask for them, without compaction stalls.

`enabled=madvise` gives huge pages to the regions that ask with madvise(MADV_HUGEPAGE) (the large
allocations of TensorFlow's and PyTorch's allocators, for example) without bloating every small
process; `defrag=defer+madvise` makes those regions compact directly and lets everyone else wake
kcompactd instead of stalling in the page fault. These are the values the `hugepages` check
accepts (its `thp` and `thp-defrag` subjects), so an apply turns those findings OK.

Both files are selectors: they read "always [madvise] never", the choice in brackets, and accept
one bare word on write (mm/huge_memory.c, enabled_store/defrag_store). So the value recorded as
`before`, which revert writes back, is the bracketed choice, never the whole line: writing the
line back would be refused with EINVAL.

Source: Documentation/admin-guide/mm/transhuge.rst (Global THP controls).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Tuner, runtime_write
from nodeagent.checks import hugepages as hugepages_check
from nodeagent.core import parse
from nodeagent.core.errors import UsageError
from nodeagent.facts import memory
from nodeagent.facts.memory import THP_DIR
from nodeagent.host import Host

ID = "thp"
DOC = "https://docs.kernel.org/admin-guide/mm/transhuge.html"
ENABLED = f"{THP_DIR}/enabled"
DEFRAG = f"{THP_DIR}/defrag"
# The words transhuge.rst documents for each file; what a given kernel offers is read from the file.
ENABLED_MODES = ("always", "madvise", "never")
DEFRAG_MODES = ("always", "defer", "defer+madvise", "madvise", "never")


@dataclass(frozen=True)
class Params:
    enabled: str = param(
        # The check accepts always or madvise and remedies with the last: madvise.
        hugepages_check.Params.thp_enabled[-1],
        "madvise: huge pages for regions that ask with MADV_HUGEPAGE (large tensor allocators), no "
        f"memory bloat elsewhere; the hugepages check accepts always or madvise ({DOC}#global-thp-controls).",
    )
    defrag: str = param(
        "defer+madvise",
        "defer+madvise: madvised regions compact directly, other faults wake kcompactd instead of "
        "stalling; 'always' (which the hugepages check flags) stalls faults in direct compaction "
        f"({DOC}#global-thp-controls).",
    )

    def __post_init__(self) -> None:
        if self.enabled not in ENABLED_MODES:
            raise UsageError(
                f"tuner {ID}: enabled must be one of {', '.join(ENABLED_MODES)}, got {self.enabled!r}"
            )
        if self.defrag not in DEFRAG_MODES:
            raise UsageError(
                f"tuner {ID}: defrag must be one of {', '.join(DEFRAG_MODES)}, got {self.defrag!r}"
            )


@dataclass(frozen=True)
class Facts:
    enabled: str | None  # the file as read ("always [madvise] never"); None when absent
    defrag: str | None


def collect(host: Host) -> Facts:
    m = memory.collect(host)
    return Facts(m.thp_enabled_raw, m.thp_defrag_raw)


def _options(raw: str) -> list[str]:
    return [w.strip("[]") for w in raw.split()]


def _change(name: str, path: str, raw: str | None, want: str, why: str, notes: list[str]) -> Change | None:
    if raw is None:
        notes.append(
            f"{path} is absent: this kernel has no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE)"
        )
        return None
    current = parse.selected(raw)
    if current is None:
        notes.append(f"{path} holds {raw!r}, no [selected] choice: corrupt or not a THP selector, left as is")
        return None
    if want not in _options(raw):
        notes.append(
            f"{path} does not offer {want!r} on this kernel (offers: {', '.join(_options(raw))}): left as is"
        )
        return None
    if current == want:
        notes.append(f"transparent_hugepage/{name} is already {want}")
        return None
    # before = the bracketed choice: the only form the kernel accepts back on revert.
    return runtime_write(ID, f"transparent_hugepage/{name}", why, {path: current}, want)


def plan(f: Facts, p: Params) -> Plan:
    notes: list[str] = []
    if f.enabled is None and f.defrag is None:
        return Plan(
            ID, notes=[f"{THP_DIR} is absent: this kernel has no transparent huge pages; nothing to plan"]
        )
    enabled = _change(
        "enabled",
        ENABLED,
        f.enabled,
        p.enabled,
        f"huge pages where a region asks for them (MADV_HUGEPAGE), fewer TLB misses on large tensors "
        f"({DOC}#global-thp-controls)",
        notes,
    )
    defrag = _change(
        "defrag",
        DEFRAG,
        f.defrag,
        p.defrag,
        f"no page-fault stalls in direct compaction outside madvised regions ({DOC}#global-thp-controls)",
        notes,
    )
    return Plan(ID, [c for c in (enabled, defrag) if c], notes)


TUNER = Tuner(
    id=ID,
    title="Transparent huge pages: enabled and defrag",
    collect=collect,
    plan=plan,
    params=Params,
    paths=memory.PATHS,
    writes=(ENABLED, DEFRAG),
)
