"""`nodeagent fleet --prometheus URL`: the fleet view from the metrics Prometheus holds."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import click

from nodeagent.cli.options import emit_fleet, format_option, verbose_option

if TYPE_CHECKING:
    from nodeagent.cluster.report import FleetReport
    from nodeagent.render.sheet import Part

# The defaults live in the application layer (nodeagent.app.prometheus_fleet); they are repeated
# here so that `--help` stays fast, and a test holds the two equal.
DEFAULT_STALE_AFTER_S = 900.0
DEFAULT_LOOKBACK_S = 86400.0
DEFAULT_TIMEOUT_S = 10.0

_seconds = click.FloatRange(min=0, min_open=True)


@click.command()
@click.option(
    "--prometheus",
    "url",
    metavar="URL",
    required=True,
    help="The Prometheus that scrapes the nodes' node_exporter (e.g. http://prometheus:9090); "
    "user:password@ in the URL is sent as HTTP basic authentication.",
)
@click.option(
    "--selector",
    metavar="MATCHERS",
    help='Only series with these labels, e.g. \'{job="gpu-nodes"}\' or \'job="gpu-nodes",zone=~"a|b"\'; '
    "every scrape target it matches counts as a node, also one that never reported.",
)
@click.option(
    "--stale-after",
    "stale_after_s",
    type=_seconds,
    default=DEFAULT_STALE_AFTER_S,
    show_default=True,
    metavar="SECONDS",
    help="A node whose last run started longer ago is UNKNOWN (default: 3 runs of the DaemonSet).",
)
@click.option(
    "--lookback",
    "lookback_s",
    type=_seconds,
    default=DEFAULT_LOOKBACK_S,
    show_default=True,
    metavar="SECONDS",
    help="Nodes that showed nodeagent metrics within this time and show none now are listed as UNKNOWN.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=_seconds,
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Seconds each request to Prometheus may take, whole: connecting, the headers and the answer.",
)
@format_option
@verbose_option
def fleet(
    url: str,
    selector: str | None,
    stale_after_s: float,
    lookback_s: float,
    timeout_s: float,
    fmt: str,
    verbose: bool,
) -> None:
    """The fleet view (worst status per node, drift, outliers) from the nodeagent metrics Prometheus
    holds, without contacting the nodes.

    nodeagent fleet --prometheus URL [--selector MATCHERS] [--format table|json]

    Each node's last run, as `nodeagent check --output prometheus:PATH` wrote it for node_exporter's
    textfile collector. A node whose last run is older than --stale-after, whose scrape target is
    down, or whose metrics are gone is UNKNOWN with the reason, never its old status.

    Exit codes, as for `check --cluster`: the worst status over the nodes (0 OK, 1 WARN, 2 FAIL,
    3 UNKNOWN); 64 bad input or a query Prometheus refused; 69 Prometheus could not be read.
    """
    from nodeagent.app import prometheus_fleet

    request = prometheus_fleet.PrometheusFleetRequest(url, selector, stale_after_s, lookback_s, timeout_s)
    report = prometheus_fleet.run(request)
    emit_fleet(report, fmt, source_lines(report) if fmt != "json" else (), verbose)
    sys.exit(report.exit_code)


def source_lines(report: FleetReport) -> list[Part]:
    """Where the view came from and how each node was seen, under the tables; then Prometheus's notes."""
    source = (report.extra or {}).get("prometheus", {})
    when = datetime.fromtimestamp(source.get("evaluated_at", 0), timezone.utc).isoformat(timespec="seconds")
    seen = ", ".join(f"{n} {how}" for how, n in source.get("nodes", {}).items()) or "no nodes"
    selector = f" {source['selector']}" if source.get("selector") else ""
    notes: list[Part] = [f"note: {n}" for n in (report.extra or {}).get("notes", [])]
    return ["", f"from Prometheus {source.get('url', '?')}{selector} at {when}: {seen}", *notes]
