"""`nodeagent fleet --prometheus URL`: the fleet view from the metrics Prometheus holds."""

from __future__ import annotations

import sys

import click

from nodeagent.cli.options import emit_fleet, format_option, verbose_option

# The defaults live with the view (nodeagent.cluster.prometheus_view); they are repeated
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
    from nodeagent.app import fleet as fleets
    from nodeagent.app.check import CheckRequest
    from nodeagent.cluster.prometheus_view import PrometheusFleetRequest

    request = PrometheusFleetRequest(url, selector, stale_after_s, lookback_s, timeout_s)
    source = fleets.PrometheusSource(request)
    report = fleets.check(source, fleets.FleetCheck(CheckRequest())).report
    emit_fleet(report, fmt, source.source_lines(report) if fmt != "json" else (), verbose)
    sys.exit(report.exit_code)
