"""The inter-node bandwidth measurement as a table of links and its findings."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.cluster.bandwidth.report import BandwidthReport, format_number, link_statuses
from nodeagent.core.finding import Status
from nodeagent.render.literal import lits, shown
from nodeagent.render.table import STYLE


def render_bandwidth(report: BandwidthReport) -> RenderableType:
    """A table of links (status in words, so it reads the same without colour), then each finding
    that needs attention on its own lines."""
    statuses = link_statuses(report.links, report.findings)
    table = Table(title=f"inter-node bandwidth: {len(report.links)} links", title_justify="left")
    table.add_column("link", overflow="fold", ratio=1)
    table.add_column("tool", no_wrap=True)
    table.add_column("Gbit/s", justify="right", no_wrap=True)
    table.add_column("latency ms", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for link in report.links:
        status = statuses[link.label]
        table.add_row(
            *lits(link.label, link.tool, format_number(link.gbits_per_s), format_number(link.latency_ms)),
            Text(status.value, style=STYLE[status]),
        )
    parts: list[RenderableType] = [table]
    for f in sorted(report.findings, key=lambda f: -f.status.rank):
        line = Text()
        line.append(f"{f.status.value} ", style=STYLE[f.status])
        line.append(shown(f"{f.check_id}/{f.subject}: "), style="bold")
        line.append(shown(f.summary))
        if f.status not in (Status.OK, Status.SKIPPED) and f.remediation:
            line.append("\n  fix  ", style="bold")
            line.append(shown(f.remediation))
        parts.append(line)
    return Group(*parts)
