"""The results of a bandwidth measurement: each measured direction (Link: the fleet document's
BandwidthLink), and the report of links and findings of `nodeagent check --cluster --bandwidth`
(BandwidthReport: the fleet document's Bandwidth; its table is nodeagent.render.bandwidth).

Apart from the measuring and the evaluation because both produce these and the CLI only reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.api.report import Bandwidth as BandwidthReport
from nodeagent.api.report import BandwidthLink as Link
from nodeagent.api.report import link_label
from nodeagent.core.finding import Finding, Status, worst

__all__ = ["BandwidthReport", "Link", "format_number", "link_label", "link_statuses"]


def link_statuses(links: Sequence[Link], findings: Sequence[Finding]) -> dict[str, Status]:
    """Each link's status: the worst finding about it (named as subject or in the evidence), else OK
    when it has its numbers and UNKNOWN when not."""
    out: dict[str, Status] = {}
    for link in links:
        measured = link.error is None and link.gbits_per_s is not None
        status = Status.OK if measured else Status.UNKNOWN
        about = [f.status for f in findings if f.subject == link.label or link.label in f.evidence]
        out[link.label] = worst([status, *about])
    return out


def format_number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
