"""The fleet as tables: findings on every host once, one row per host, the comparison's drift (each
differing value with its hosts) and outliers, and the summary line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.cluster.report import FleetReport, host_status
from nodeagent.cluster.runner import HostOutcome
from nodeagent.compare.fleet import Drift, FleetComparison, Outlier, abbreviate, same_value
from nodeagent.compare.values import Value
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import lit, one_line
from nodeagent.render.runs import ATTENTION
from nodeagent.render.sheet import Abridged, Both, Cell, Column, Part, Sheet, lines, renderable, sheet
from nodeagent.render.table import STYLE
from nodeagent.render.text import WIDTH, finding_lines

VALUE_WIDTH = 40  # a terminal cuts longer values (CPU lists, boot lines); piped and JSON have them whole


def render_table(cmp: FleetComparison) -> RenderableType:
    """A 'drift' table (one row per differing value, with its hosts) and an 'outliers' table, or one
    line when the fleet agrees. Plain text in the cells, so it reads the same without colour."""
    return Group(*(renderable(part) for part in comparison_parts(cmp)))


def comparison_parts(cmp: FleetComparison) -> list[Part]:
    """The fleet comparison as sheets (nodeagent.render.sheet): drift, then outliers."""
    if not cmp.drift and not cmp.outliers:
        return [f"fleet: no drift, no outliers across {cmp.hosts} hosts"]
    parts: list[Part] = [
        f"fleet: {len(cmp.drift)} key(s) drift, {len(cmp.outliers)} outlier(s) across {cmp.hosts} hosts"
    ]
    if cmp.drift:
        parts.append(_drift_table(cmp.drift))
    if cmp.outliers:
        parts.append(_outlier_table(cmp.outliers))
    return parts


def _drift_table(drift: Sequence[Drift]) -> Sheet:
    """Per key: the majority's value and how many hosts have it, then each differing value with
    its hosts (largest group first). Three columns leave room for long keys at 80 columns; piped,
    each line names its key."""
    table = Sheet(
        "drift",
        (
            Column("key", ratio=5),
            Column("value", ratio=3),
            Column("hosts", ratio=4),
        ),
        expand=True,
        simple=True,
        group_first=True,
    )
    for d in drift:
        groups: dict[tuple[str, Any], list[str]] = {}
        for host, value in d.hosts.items():
            groups.setdefault(same_value(value), []).append(host)
        rows: list[tuple[Cell, Cell]]
        if d.majority_hosts:
            rows = [(_cut(_show(d.majority)), f"{d.majority_hosts} hosts (majority)")]
        else:
            rows = [("(no majority)", f"{len(d.hosts)} hosts, {len(groups)} values")]
        for hosts in sorted(groups.values(), key=lambda hs: (-len(hs), hs[0])):
            rows.append((_cut(_show(d.hosts[hosts[0]])), Abridged(", ".join(hosts), abbreviate(hosts))))
        for i, (shown_value, hosts_text) in enumerate(rows):
            table.add(d.key, shown_value, hosts_text, end_section=i == len(rows) - 1)
    return table


def _outlier_table(outliers: Sequence[Outlier]) -> Sheet:
    table = Sheet(
        "outliers",
        (
            Column("key", ratio=3),
            Column("host", ratio=1),
            Column("value", justify="right"),
            Column("median", justify="right"),
            Column("score", justify="right"),
            Column("direction"),
        ),
        expand=True,
        simple=True,
    )
    for o in outliers:
        table.add(o.key, o.host, _cut(_show(o.value)), _cut(_show(o.median)), f"{o.score:+.1f}", o.direction)
    return table


def _cut(text: str) -> Cell:
    """A value a terminal's cell shows up to VALUE_WIDTH characters."""
    return text if len(text) <= VALUE_WIDTH else Abridged(text, text[: VALUE_WIDTH - 1] + "…")


def _show(v: Value) -> str:
    if v is None:
        return "(missing)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"
    text = str(v)
    return '""' if text == "" else text


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


def summary_line(r: FleetReport) -> Text:
    s = r.summary()
    counts = ", ".join(f"{n} {k.value}" for k, n in s.by_status.items())
    line = Text(f"{s.hosts} hosts ({counts}; {s.unreachable} without a result) ")
    line.append(f"in {s.duration_s:.1f}s; worst: ")
    line.append(r.status.value, style=STYLE[r.status])
    return line


def render(r: FleetReport, sections: list[RenderableType] | None = None) -> Group:
    return Group(
        hosts_table(r), Text(), render_table(r.comparison), *(sections or []), Text(), summary_line(r)
    )


def fleet_parts(r: FleetReport, sections: Sequence[Part] = (), every: bool = False) -> list[Part]:
    """The fleet for nodeagent.render.sheet.show: on a terminal the hosts table; piped, each host's
    findings needing attention (`every`: all its findings) a line each, host first, as
    nodeagent.render.text writes a fleet, then a line per host. Then the comparison, `sections` and
    the summary line."""
    hosts = Both(hosts_table(r), [*hosts_lines(r, every), *lines(hosts_sheet(r))])
    return [hosts, "", *comparison_parts(r.comparison), *sections, "", summary_line(r)]


def hosts_sheet(r: FleetReport) -> Sheet:
    """One row per host, worst first: its status, time and findings counted by status (piped, under
    the lines of its findings and of why a host gave none)."""
    t = sheet(f"nodeagent fleet: {len(r.outcomes)} hosts", "host", "status", "time", "findings")
    for o in sorted(r.outcomes.values(), key=lambda o: (-host_status(o).rank, o.name)):
        found = [f for f in (o.doc or {}).get("findings", []) if isinstance(f, dict)]
        counts = Counter(f.get("status") for f in found)
        counted = ", ".join(f"{counts[s.value]} {s.value}" for s in WORST_FIRST if counts[s.value])
        t.add(o.name, host_status(o).value, f"{o.duration_s:.1f}s", counted)
    return t


def _rank(f: dict[str, Any]) -> int:
    try:
        return Status(f.get("status")).rank
    except ValueError:
        return Status.UNKNOWN.rank


def hosts_lines(r: FleetReport, every: bool = False) -> list[str]:
    """Each host, worst first: why it gave no result, or its findings at FAIL, UNKNOWN or WARN (all
    of them with `every`) with their fixes, each line starting with the host's name."""
    out: list[str] = []
    for o in sorted(r.outcomes.values(), key=lambda o: (-host_status(o).rank, o.name)):
        prefix = f"{one_line(o.name)}: "
        if o.error is not None:
            kind, message = one_line(o.error.kind), one_line(o.error.message)
            out.append(f"{prefix}{host_status(o).value:<{WIDTH}} no result ({kind}): {message}")
            continue
        findings = [f for f in (o.doc or {}).get("findings", []) if isinstance(f, dict)]
        keep = {s.value for s in ATTENTION}
        chosen = findings if every else [f for f in findings if f.get("status") in keep]
        for f in sorted(chosen, key=lambda f: -_rank(f)):
            subject = str(f.get("subject") or "").strip()
            name = f"{f.get('check_id', '')}/{subject}" if subject else str(f.get("check_id", ""))
            needs = f.get("status") in keep
            details = (f.get("evidence") or {}, str(f.get("expected") or ""), f.get("fix"))
            out += finding_lines(
                str(f.get("status")),
                name,
                str(f.get("summary", "")),
                str(f.get("remediation") or "") if needs else "",
                prefix,
                details if every and needs else None,
            )
    return out
