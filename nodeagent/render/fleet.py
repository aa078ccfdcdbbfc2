"""The fleet as tables: findings on every host once, one row per host, the comparison's drift (each
differing value with its hosts) and outliers, and the summary line."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from nodeagent.cluster.report import FleetReport, host_status
from nodeagent.cluster.runner import HostOutcome
from nodeagent.compare.fleet import Drift, FleetComparison, Outlier, abbreviate, same_value
from nodeagent.compare.values import Value
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import lit, lits
from nodeagent.render.table import STYLE

VALUE_WIDTH = 40  # long values (CPU lists, boot lines) are cut: the JSON output has them whole


def render_table(cmp: FleetComparison) -> RenderableType:
    """A 'drift' table (one row per differing value, with its hosts) and an 'outliers' table, or one
    line when the fleet agrees. Plain text in the cells, so it reads the same without colour."""
    if not cmp.drift and not cmp.outliers:
        return Text(f"fleet: no drift, no outliers across {cmp.hosts} hosts")
    parts: list[RenderableType] = [
        Text(f"fleet: {len(cmp.drift)} key(s) drift, {len(cmp.outliers)} outlier(s) across {cmp.hosts} hosts")
    ]
    if cmp.drift:
        parts.append(_drift_table(cmp.drift))
    if cmp.outliers:
        parts.append(_outlier_table(cmp.outliers))
    return Group(*parts)


def _drift_table(drift: Sequence[Drift]) -> Table:
    """Per key: the majority's value and how many hosts have it, then each differing value with
    its hosts (largest group first). Three columns leave room for long keys at 80 columns."""
    table = Table(title="drift", title_justify="left", expand=True, box=box.SIMPLE_HEAD)
    table.add_column("key", overflow="fold", ratio=5)
    table.add_column("value", overflow="fold", ratio=3)
    table.add_column("hosts", overflow="fold", ratio=4)
    for d in drift:
        groups: dict[tuple[str, Any], list[str]] = {}
        for host, value in d.hosts.items():
            groups.setdefault(same_value(value), []).append(host)
        if d.majority_hosts:
            rows = [(_show(d.majority), f"{d.majority_hosts} hosts (majority)")]
        else:
            rows = [("(no majority)", f"{len(d.hosts)} hosts, {len(groups)} values")]
        for hosts in sorted(groups.values(), key=lambda hs: (-len(hs), hs[0])):
            rows.append((_show(d.hosts[hosts[0]]), abbreviate(hosts)))
        for i, (value, hosts_text) in enumerate(rows):
            table.add_row(*lits(d.key if i == 0 else "", value, hosts_text), end_section=i == len(rows) - 1)
    return table


def _outlier_table(outliers: Sequence[Outlier]) -> Table:
    table = Table(title="outliers", title_justify="left", expand=True, box=box.SIMPLE_HEAD)
    table.add_column("key", overflow="fold", ratio=3)
    table.add_column("host", overflow="fold", ratio=1)
    table.add_column("value", justify="right")
    table.add_column("median", justify="right")
    table.add_column("score", justify="right")
    table.add_column("direction")
    for o in outliers:
        table.add_row(*lits(o.key, o.host, _show(o.value), _show(o.median), f"{o.score:+.1f}", o.direction))
    return table


def _show(v: Value) -> str:
    if v is None:
        return "(missing)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"
    text = str(v)
    if text == "":
        return '""'
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"


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
    return Group(hosts_table(r), Text(), render_table(r.comparison), *(sections or []), Text(), line)


def slurm_source(r: FleetReport) -> Text:
    """What --slurm ran: the partition or nodelist, the job, and on how many of its nodes nodeagent
    ran (the others are in the hosts table with Slurm's state and reason)."""
    source = (r.extra or {}).get("slurm") or {}
    ran = sum(1 for o in r.outcomes.values() if o.ok and (o.doc or {}).get("slurm", {}).get("ran", True))
    not_run = sum(1 for o in r.outcomes.values() if o.ok) - ran
    without = sum(1 for o in r.outcomes.values() if not o.ok)
    what = (
        f"partition {source.get('target')}"
        if source.get("kind") == "partition"
        else (
            f"nodes {source.get('target')}"
            + (f" in partition {source['partition']}" if source.get("partition") else "")
        )
    )
    job = f", job {source['job_id']}" if source.get("job_id") is not None else ", no job (no node to run on)"
    line = (
        f"slurm: {what}{job}: {source.get('agent', 'nodeagent')} ran on {ran} of {len(r.outcomes)} nodes; "
        f"{not_run} not run (drained, reserved, busy ...), {without} without a result"
    )
    return lit(line)


@contextmanager
def progress_bar(total: int, label: str) -> Iterator[Callable[[HostOutcome], None]]:
    """A progress bar on stderr (only on a terminal: logs and pipes stay clean), counting hosts that
    answered and hosts that failed as they finish (nodeagent.render.progress shows it)."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    failed = 0
    with bar:
        task = bar.add_task(label, total=total, failed=0)

        def done(outcome: HostOutcome) -> None:
            nonlocal failed
            failed += 0 if outcome.ok else 1
            bar.update(task, advance=1, failed=failed)

        yield done
