"""The inter-node bandwidth measurement as a table of links and its findings."""

from __future__ import annotations

from rich.text import Text

from nodeagent.cluster.bandwidth.report import BandwidthReport, format_number, link_statuses
from nodeagent.core.finding import Finding, Status
from nodeagent.render.literal import shown
from nodeagent.render.sheet import Both, Column, Part, Sheet
from nodeagent.render.table import STYLE
from nodeagent.render.text import finding_lines


def render_bandwidth(report: BandwidthReport) -> list[Part]:
    """A table of links (status in words, so it reads the same without colour), then each finding,
    those that need attention with their fix (nodeagent.render.sheet.show prints them)."""
    statuses = link_statuses(report.links, report.findings)
    table = Sheet(
        f"inter-node bandwidth: {len(report.links)} links",
        (
            Column("link", ratio=1),
            Column("tool", no_wrap=True),
            Column("Gbit/s", justify="right", no_wrap=True),
            Column("latency ms", justify="right", no_wrap=True),
            Column("status", no_wrap=True),
        ),
    )
    for link in report.links:
        status = statuses[link.label]
        table.add(
            link.label,
            link.tool,
            format_number(link.gbits_per_s),
            format_number(link.latency_ms),
            Text(status.value, style=STYLE[status]),
        )
    parts: list[Part] = [table]
    for f in sorted(report.findings, key=lambda f: -f.status.rank):
        fix = f.remediation if f.status not in (Status.OK, Status.SKIPPED) else ""
        parts.append(
            Both(
                _finding_text(f, fix),
                finding_lines(f.status.value, f"{f.check_id}/{f.subject}", f.summary, fix),
            )
        )
    return parts


def _finding_text(f: Finding, fix: str) -> Text:
    line = Text()
    line.append(f"{f.status.value} ", style=STYLE[f.status])
    line.append(shown(f"{f.check_id}/{f.subject}: "), style="bold")
    line.append(shown(f.summary))
    if fix:
        line.append("\n  fix  ", style="bold")
        line.append(shown(fix))
    return line
