"""The fleet's report: each host's outcome, the fleet comparison, the exit code; as JSON and tables.

JSON: `{hosts: {NAME: {status, address, duration_s, findings[], checks[]} | {status: FAIL, error:
{kind, message}}}, drift[], outliers[], bandwidth, summary}`. The exit code is the worst status over
the fleet, an unreachable host counting as FAIL: a gate must not pass a node it could not see.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.cluster import fleet
from nodeagent.cluster.runner import HostOutcome
from nodeagent.core.finding import WORST_FIRST, Finding, Status, worst
from nodeagent.render.literal import lit
from nodeagent.render.table import STYLE


def host_status(outcome: HostOutcome) -> Status:
    if outcome.error is not None:
        return Status.FAIL
    doc = outcome.doc or {}
    try:
        return Status(doc.get("status", "UNKNOWN"))
    except ValueError:
        return Status.UNKNOWN


@dataclass
class FleetReport:
    outcomes: dict[str, HostOutcome]
    comparison: fleet.FleetComparison
    duration_s: float
    extra: dict[str, Any] | None = None  # further sections (inter-node bandwidth)
    extra_status: Status = Status.SKIPPED

    @classmethod
    def build(
        cls,
        outcomes: Mapping[str, HostOutcome],
        duration_s: float,
        compare: bool = True,
        lost_hardware: Status = Status.WARN,
    ) -> FleetReport:
        """The report; with `compare`, a host whose hardware counts are below the fleet majority's
        gets a finding at `lost_hardware` (fleet.below_majority) in its own document."""
        values = {
            name: fleet.host_values(o.facts, (o.doc or {}).get("findings", []))
            for name, o in outcomes.items()
            if o.ok
        }
        comparison = fleet.compare(values) if compare else fleet.FleetComparison(len(values), [], [])
        short = fleet.below_majority(comparison, lost_hardware)
        return cls(
            {name: _with(o, short.get(name, [])) for name, o in outcomes.items()}, comparison, duration_s
        )

    @property
    def status(self) -> Status:
        return worst([*(host_status(o) for o in self.outcomes.values()), self.extra_status])

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def summary(self) -> dict[str, Any]:
        counts = Counter(host_status(o).value for o in self.outcomes.values())
        return {
            "hosts": len(self.outcomes),
            "unreachable": sum(1 for o in self.outcomes.values() if not o.ok),
            "by_status": dict(sorted(counts.items())),
            "status": self.status.value,
            "duration_s": round(self.duration_s, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "status": self.status.value,
            "summary": self.summary(),
            "hosts": {name: o.to_dict() for name, o in self.outcomes.items()},
            "drift": [d.to_dict() for d in self.comparison.drift],
            "outliers": [o.to_dict() for o in self.comparison.outliers],
        }
        if self.extra:
            doc |= self.extra
        return doc


def _with(outcome: HostOutcome, found: list[Finding]) -> HostOutcome:
    """The outcome with the fleet's findings about its host added (and its status raised to them)."""
    if not found or outcome.doc is None:
        return outcome
    doc = dict(outcome.doc)
    doc["findings"] = [*doc.get("findings", []), *(f.to_dict() for f in found)]
    doc["status"] = worst([host_status(outcome), *(f.status for f in found)]).value
    return dataclasses.replace(outcome, doc=doc)


def _attention(outcome: HostOutcome) -> list[dict[str, Any]]:
    findings = (outcome.doc or {}).get("findings", [])
    keep = {Status.WARN.value, Status.UNKNOWN.value, Status.FAIL.value}
    return sorted(
        (f for f in findings if f.get("status") in keep),
        key=lambda f: -WORST_FIRST.index(Status(f["status"])),
    )


def _key(f: dict[str, Any]) -> tuple[str, str, str]:
    return (f.get("check_id", ""), f.get("subject", ""), f.get("status", ""))


def _line(f: dict[str, Any]) -> str:
    return f"{f['status']} {f['check_id']}/{f.get('subject', '')}: {f['summary']}"


def common_findings(r: FleetReport) -> list[dict[str, Any]]:
    """Findings needing attention on every host that answered (two or more): a fleet-wide setting
    reads better once than on every row."""
    answered = [o for o in r.outcomes.values() if o.ok]
    if len(answered) < 2:
        return []
    keys = [{_key(f) for f in _attention(o)} for o in answered]
    shared = set.intersection(*keys)
    return [f for f in _attention(answered[0]) if _key(f) in shared]


def hosts_table(r: FleetReport) -> Group:
    """Findings on every host once, then one row per host, worst first: its own findings that need
    attention, or its error."""
    common = common_findings(r)
    shared = {_key(f) for f in common}
    t = Table(title=lit(f"nodeagent fleet: {len(r.outcomes)} hosts"), title_justify="left", expand=True)
    t.add_column("host", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("its own findings needing attention, or why it gave none", ratio=1, overflow="fold")
    t.add_column("time", justify="right", no_wrap=True)
    rows = sorted(r.outcomes.values(), key=lambda o: (-host_status(o).rank, o.name))
    for o in rows:
        status = host_status(o)
        if o.error is not None:
            what = lit(f"{o.error.kind}: {o.error.message}")
        else:
            own = [_line(f) for f in _attention(o) if _key(f) not in shared]
            what = lit("\n".join(own) if own else ("as on every host" if common else "all OK"))
        t.add_row(lit(o.name), Text(status.value, style=STYLE[status]), what, lit(f"{o.duration_s:.1f}s"))
    if not common:
        return Group(t)
    c = Table(title="on every host that answered", title_justify="left", expand=True, show_header=False)
    c.add_column("finding", ratio=1, overflow="fold")
    for f in common:
        c.add_row(lit(_line(f), style=STYLE[Status(f["status"])]))
    return Group(c, Text(), t)


def render(r: FleetReport, sections: list[RenderableType] | None = None) -> Group:
    s = r.summary()
    counts = ", ".join(f"{n} {k}" for k, n in s["by_status"].items())
    line = Text(f"{s['hosts']} hosts ({counts}; {s['unreachable']} without a result) ")
    line.append(f"in {s['duration_s']:.1f}s; worst: ")
    line.append(r.status.value, style=STYLE[r.status])
    return Group(hosts_table(r), Text(), fleet.render_table(r.comparison), *(sections or []), Text(), line)
