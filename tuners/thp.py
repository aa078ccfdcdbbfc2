"""thp: transparent huge pages for the regions that ask for them, without compaction stalls.

`enabled=madvise` gives huge pages to the regions that ask with madvise(MADV_HUGEPAGE) (the large
allocations of TensorFlow's and PyTorch's allocators, for example) without bloating every small
process; `defrag=defer+madvise` makes those regions compact directly and lets everyone else wake
kcompactd instead of stalling in the page fault.

What is changed is what the `hugepages` check flags (its `thp` and `thp-defrag` subjects), to the
check's own remedy, so an apply turns those findings OK; a value the check accepts (enabled=always,
defrag=madvise) is left alone unless `enabled` or `defrag` is set explicitly, and then the change
says that the parameter asked for it. One judgement, the check's (checks/hugepages.py).

Both files are selectors: they read "always [madvise] never", the choice in brackets, and accept
one bare word on write (mm/huge_memory.c, enabled_store/defrag_store). So the value recorded as
`before`, which revert writes back, is the bracketed choice, never the whole line: writing the
line back would be refused with EINVAL.

Source: Documentation/admin-guide/mm/transhuge.rst (Global THP controls).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Tuner, asked_why, finding_key, runtime_write
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
# The hugepages check's findings these files answer.
ENABLED_FINDING = finding_key(hugepages_check.ID, "thp")
DEFRAG_FINDING = finding_key(hugepages_check.ID, "thp-defrag")


@dataclass(frozen=True)
class Params:
    enabled: str | None = param(
        None,
        "THP mode to write. Unset: a mode the hugepages check accepts (always or madvise) is left "
        "alone, any other becomes madvise (huge pages for regions that ask with MADV_HUGEPAGE, such as "
        "large tensor allocators, and no memory bloat elsewhere); set: written even over a mode the "
        f"check accepts ({DOC}#global-thp-controls).",
    )
    defrag: str | None = param(
        None,
        "THP defrag setting to write. Unset: a setting the hugepages check accepts is left alone, and "
        "'always' (which stalls faults in direct compaction) becomes defer+madvise, or madvise where "
        "the kernel lacks it (madvised regions compact directly, other faults wake kcompactd); set: "
        f"written even over a setting the check accepts ({DOC}#global-thp-controls).",
    )

    def __post_init__(self) -> None:
        if self.enabled is not None and self.enabled not in ENABLED_MODES:
            raise UsageError(
                f"tuner {ID}: enabled must be one of {', '.join(ENABLED_MODES)}, got {self.enabled!r}"
            )
        if self.defrag is not None and self.defrag not in DEFRAG_MODES:
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


@dataclass(frozen=True)
class _File:
    """One selector file and how the hugepages check judges it."""

    name: str  # "enabled", "defrag"
    path: str
    raw: str | None
    explicit: str | None  # the tuner parameter, when set
    accepted: Callable[[str], bool]  # the check's judgement of a value
    remedies: tuple[str, ...]  # what a flagged value becomes: the first the kernel offers
    finding: str  # the check finding a change of this file answers
    why: str


@dataclass
class _Outcome:
    notes: list[str] = field(default_factory=list)
    declined: dict[str, str] = field(default_factory=dict)


def _plan_file(f: _File, out: _Outcome, answers: str | None = None) -> Change | None:
    """The change of one file, or None with a note (and the finding it leaves in `declined`).
    `answers` replaces the file's own finding where the check judges the value under another one
    (defrag, while THP is off and this plan turns it on: the check's `thp` finding)."""
    key = answers or f.finding
    if f.raw is None:
        out.notes.append(
            f"{f.path} is absent: this kernel has no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE)"
        )
        return None
    current = parse.selected(f.raw)
    if current is None:
        why = f"{f.path} holds {f.raw!r}, no [selected] choice: corrupt or not a THP selector, left as is"
        out.notes.append(why)
        out.declined[key] = why
        return None
    flagged = not f.accepted(current)
    if f.explicit is None and not flagged:
        out.notes.append(
            f"transparent_hugepage/{f.name} is {current}, which the {hugepages_check.ID} check accepts: "
            "left as is"
        )
        return None
    offered = _options(f.raw)
    wants = (f.explicit,) if f.explicit is not None else f.remedies
    want = next((w for w in wants if w in offered), None)
    if want is None:
        why = (
            f"{f.path} does not offer {' or '.join(map(repr, wants))} on this kernel "
            f"(offers: {', '.join(offered)}): left as is"
        )
        out.notes.append(why)
        if flagged:
            out.declined[key] = why
        return None
    if current == want:
        out.notes.append(f"transparent_hugepage/{f.name} is already {want}")
        return None
    change = runtime_write(ID, f"transparent_hugepage/{f.name}", f.why, {f.path: current}, want)
    if flagged:
        return _with(change, answers=(key,))
    param_name = f"{ID}.{f.name}"
    why = f"{asked_why(param_name, want, hugepages_check.ID, current)}; {f.why}"
    return _with(change, asked=param_name, why=why)


def _with(change: Change, **fields: Any) -> Change:
    return dataclasses.replace(change, **fields)


def plan(f: Facts, p: Params) -> Plan:
    if f.enabled is None and f.defrag is None:
        return Plan(
            ID, notes=[f"{THP_DIR} is absent: this kernel has no transparent huge pages; nothing to plan"]
        )
    # The check's own parameters: what `nodeagent check` judges with.
    judged = hugepages_check.Params()
    out = _Outcome()
    enabled = _plan_file(
        _File(
            "enabled",
            ENABLED,
            f.enabled,
            p.enabled,
            lambda mode: hugepages_check.thp_enabled_accepted(mode, judged),
            (hugepages_check.thp_enabled_remedy(judged),),
            ENABLED_FINDING,
            "huge pages where a region asks for them (MADV_HUGEPAGE), fewer TLB misses on large tensors "
            f"({DOC}#global-thp-controls)",
        ),
        out,
    )
    defrag = _plan_defrag(f, p, judged, enabled, out)
    return Plan(ID, [c for c in (enabled, defrag) if c], out.notes, declined=out.declined)


def _plan_defrag(
    f: Facts, p: Params, judged: hugepages_check.Params, enabled: Change | None, out: _Outcome
) -> Change | None:
    """defrag matters only while THP is on, so the check judges it only then: with THP off and
    staying off, a defrag setting is left alone (unless set explicitly); when this plan turns THP
    on, a setting the check would then flag is changed with it."""
    mode = parse.selected(f.enabled) if f.enabled is not None else None
    turned_on = enabled is not None and enabled.after != "never"
    if p.defrag is None and mode in (None, "never") and not turned_on:
        if f.defrag is not None:
            out.notes.append(
                f"transparent_hugepage/defrag left as is: THP is {mode or 'unreadable'}, so defrag "
                "does not matter"
            )
        return None
    return _plan_file(
        _File(
            "defrag",
            DEFRAG,
            f.defrag,
            p.defrag,
            lambda setting: hugepages_check.thp_defrag_accepted(setting, judged),
            hugepages_check.THP_DEFRAG_REMEDIES,
            DEFRAG_FINDING,
            f"no page-fault stalls in direct compaction outside madvised regions ({DOC}#global-thp-controls)",
        ),
        out,
        answers=ENABLED_FINDING if turned_on and mode in (None, "never") else None,
    )


TUNER = Tuner(
    id=ID,
    title="Transparent huge pages: enabled and defrag",
    collect=collect,
    plan=plan,
    params=Params,
    paths=memory.PATHS,
    writes=(ENABLED, DEFRAG),
)
