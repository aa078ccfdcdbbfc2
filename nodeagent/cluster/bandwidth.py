"""Inter-node bandwidth and latency (`nodeagent check --cluster hosts.yml --bandwidth`).

Every planned link SRC -> DST is measured over the fleet's SSH connections, with the node's own tools:

- bandwidth: `iperf3 -c DST -t SECONDS -J` on SRC against a one-shot `iperf3 -s -1` started on DST
  (https://software.es.net/iperf/invoking.html); where both ends have perftest's `ib_write_bw` and an
  RDMA device (/sys/class/infiniband not empty), `ib_write_bw --report_gbits -D SECONDS` instead
  (https://github.com/linux-rdma/perftest), since TCP through the kernel says little about the
  fabric a training job's NCCL uses;
- latency: `ping -c 5 -i 0.2 -q DST` on SRC (iputils), the rtt average.

The destination address is the inventory's `vars.data_address` when set, else the SSH address: the
data network (InfiniBand/RoCE, a 100G VLAN) is often not the management network SSH goes over, and
measuring the SSH network would say nothing about training traffic.

Plans (`plan_links`): "ring" measures i -> i+1 for all hosts at once, as a ring all-reduce loads the
network; "pairs" measures every ordered pair, in rounds where each host is in at most one
measurement, so a server port is never shared and no host's NIC is split between two tests. In each
round the pings run first, on an idle network, then the bandwidth tests.

`evaluate` is pure. Slow links are found against the fleet (median and MAD, nodeagent.cluster.fleet
.outliers_in, per tool: an RDMA link and a TCP link are not comparable) and against the playbook's
thresholds. A host whose measured in- and out-links are all slow is named as the cause, not its
links: one bad cable slows one direction of one link, a bad host (NIC at a lower speed, a rate
limit, a saturated CPU) slows every link it is on. MAD needs the slow links to be fewer than half:
one slow host stands out from 5 hosts on (a ring of 4 has 2 slow links out of 4); below that, only
the thresholds (`min_gbits_per_s`, `max_latency_ms`) can fail a link.

Nothing raises for a host: a dead host's links carry its SSH error, and every step is time-limited
(connecting and looking for the tools: the host's connect_timeout + command_timeout; each link:
its seconds plus fixed slack, see the time limits below), so a fleet of n hosts takes about one
link's time in ring mode and 2(n-1) of them in pairs mode.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import shlex
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent import pool
from nodeagent.cluster import fleet, ssh
from nodeagent.cluster.ssh import HostError
from nodeagent.errors import UsageError
from nodeagent.finding import Finding, Status, worst

if TYPE_CHECKING:
    import paramiko
    from fabric import Connection

    from nodeagent.cluster.inventory import HostSpec, Inventory

CHECK_ID = "network"
IPERF3 = "iperf3"
IB_WRITE_BW = "ib_write_bw"
MODES = ("ring", "pairs")
DATA_ADDRESS_VAR = "data_address"

# --- How far from the fleet a link must be to matter -------------------------------------------------
# Beyond |modified z| > 3.5 (fleet.THRESHOLD, Iglewicz and Hoaglin), a slow link must also lose a
# material share of the median: on a quiet fleet the MAD is tiny, and a link 5% below the others
# would score as an outlier. Single-stream iperf3 varies by several percent from run to run (CPU
# frequency, which core takes the interrupts; https://fasterdata.es.net/performance-testing/
# network-troubleshooting-tools/iperf/), so only a shortfall of 20% or more is reported.
MIN_SHORTFALL = 0.2
# Likewise a latency outlier must be at least this far above the median: LAN ping rtts are 0.02 to
# 0.3 ms and vary by tenths of a millisecond with scheduling alone, while a step of a training job
# takes milliseconds.
MIN_LATENCY_EXCESS_MS = 0.5
MIN_LINKS = fleet.MIN_HOSTS  # with 2 values nothing can stand out (see fleet.outliers_in)
LINKS_SHOWN = 3  # links named in a summary before "+N more" (the evidence has them all)

# --- Time limits -------------------------------------------------------------------------------------
SLACK_S = 5.0  # beyond each step's own limit: paramiko's channel setup and teardown
# An exec over an open SSH connection plus a bind takes milliseconds; a node busy with a training
# job's data loaders, or a small control node driving a large fleet, can take seconds.
READY_S = 15.0  # for the server to start, and again for it to listen
RETRY_S = 0.2  # between client attempts while the server is not listening yet
CLIENT_SLACK_S = 20.0  # beyond -t/-D (or ping -w): the tools' setup and final exchange
SERVER_EXIT_S = 2.0  # a one-shot server ends by itself once its client is done
PING_COUNT = 5
PING_INTERVAL_S = 0.2  # the smallest interval iputils allows an unprivileged user
PING_DEADLINE_S = 5  # ping -w: a silent destination costs this, not forever
KILL_S = 5.0


_Pair: TypeAlias = tuple[str, str]  # (src, dst)
_Latency: TypeAlias = tuple[float | None, str | None]  # ms, error
_Bandwidth: TypeAlias = tuple[str, float | None, str | None]  # tool, Gbit/s, error
_Parsed: TypeAlias = tuple[float | None, str | None]  # a value, an error


# --- Results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One measured direction SRC -> DST (host names); a value is None when it was not measured."""

    src: str
    dst: str
    tool: str  # IPERF3 | IB_WRITE_BW
    gbits_per_s: float | None
    latency_ms: float | None  # ping rtt average from src to dst
    error: str | None = None  # one line when (part of) the measurement failed

    @property
    def label(self) -> str:
        return link_label(self.src, self.dst)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def link_label(src: str, dst: str) -> str:
    return f"{src} -> {dst}"


@dataclass
class BandwidthReport:
    links: list[Link]
    findings: list[Finding]

    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bandwidth": {
                "links": [link.to_dict() for link in self.links],
                "findings": [f.to_dict() for f in self.findings],
            }
        }

    def render(self) -> RenderableType:
        """A table of links (status in words, so it reads the same without colour), then each finding
        that needs attention on its own lines."""
        from nodeagent.render.table import STYLE

        statuses = link_statuses(self.links, self.findings)
        table = Table(title=f"inter-node bandwidth: {len(self.links)} links", title_justify="left")
        table.add_column("link", overflow="fold", ratio=1)
        table.add_column("tool", no_wrap=True)
        table.add_column("Gbit/s", justify="right", no_wrap=True)
        table.add_column("latency ms", justify="right", no_wrap=True)
        table.add_column("status", no_wrap=True)
        for link in self.links:
            status = statuses[link.label]
            table.add_row(
                Text(link.label),
                Text(link.tool),
                Text(_number(link.gbits_per_s)),
                Text(_number(link.latency_ms)),
                Text(status.value, style=STYLE[status]),
            )
        parts: list[RenderableType] = [table]
        for f in sorted(self.findings, key=lambda f: -f.status.rank):
            line = Text()
            line.append(f"{f.status.value} ", style=STYLE[f.status])
            line.append(f"{f.check_id}/{f.subject}: ", style="bold")
            line.append(f.summary)
            if f.status not in (Status.OK, Status.SKIPPED) and f.remediation:
                line.append("\n  fix  ", style="bold")
                line.append(f.remediation)
            parts.append(line)
        return Group(*parts)


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


# --- Parameters and plans ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    # iperf3 -t and ib_write_bw -D take whole seconds (rounded up here); 2 s passes TCP slow start on
    # a LAN, and a ring measures every link at once, so the whole fleet takes about this long.
    seconds: float = 2.0
    # Playbook thresholds: a link below / above fails, whatever the rest of the fleet does.
    min_gbits_per_s: float | None = None
    max_latency_ms: float | None = None
    mode: str = "ring"  # "ring" or "pairs" (see the module docstring)
    port: int = 5201  # iperf3's default port (ib_write_bw keeps perftest's default, 18515)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise UsageError(f"bandwidth: seconds {self.seconds!r} must be a positive number (default 2)")
        for name in ("min_gbits_per_s", "max_latency_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UsageError(f"bandwidth: {name} {value!r} must be a positive number, or left unset")
        if self.mode not in MODES:
            raise UsageError(f"bandwidth: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not 1 <= self.port <= 65535:
            raise UsageError(f"bandwidth: port {self.port!r} must be between 1 and 65535 (default 5201)")

    @property
    def whole_seconds(self) -> int:
        return max(1, math.ceil(self.seconds))


def plan_links(names: Sequence[str], mode: str) -> list[tuple[str, str]]:
    """The links to measure, (src, dst), in the order they run: see `schedule`."""
    return [link for links in schedule(names, mode) for link in links]


def schedule(names: Sequence[str], mode: str) -> list[list[tuple[str, str]]]:
    """Rounds of links measured together.

    ring: one round, i -> i+1 (the last to the first); a host is the source of one link and the
    destination of another, as in a ring all-reduce. pairs: every ordered pair, in 2(n-1) rounds
    (n rounded up to even) of the circle method (round-robin tournament scheduling), so that each
    host is in at most one link per round: a -> b in one half of the rounds, b -> a in the other.
    """
    if mode not in MODES:
        raise UsageError(f"bandwidth: mode {mode!r} is not one of {', '.join(MODES)}")
    hosts = list(dict.fromkeys(names))
    if len(hosts) < 2:
        return []
    if mode == "ring":
        return [[(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]]
    players: list[str | None] = [*hosts, None] if len(hosts) % 2 else list(hosts)
    m = len(players)
    forward: list[list[tuple[str, str]]] = []
    for _ in range(m - 1):
        pairs = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        forward.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]  # keep the first, rotate the rest
    backward = [[(b, a) for a, b in links] for links in forward]
    return forward + backward


# --- Evaluation (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metric:
    name: str  # "bandwidth" | "latency"
    unit: str
    worse: str  # the outlier direction that matters: "low" | "high"
    limit: float | None

    def expected(self) -> str:
        if self.limit is None:
            return "within the fleet"
        word = "at least" if self.worse == "low" else "at most"
        return f"{word} {self.show(self.limit)}, and within the fleet"

    def value(self, link: Link) -> float | None:
        return link.gbits_per_s if self.name == "bandwidth" else link.latency_ms

    def beyond_limit(self, value: float) -> bool:
        if self.limit is None:
            return False
        return value < self.limit if self.worse == "low" else value > self.limit

    def material(self, value: float, median: float) -> bool:
        if self.worse == "low":
            return value <= (1 - MIN_SHORTFALL) * median
        return value - median >= MIN_LATENCY_EXCESS_MS

    def show(self, value: float) -> str:
        return f"{_number(value)} {self.unit}"


@dataclass
class _Bad:
    status: Status
    value: float
    reasons: list[str] = field(default_factory=list)


def evaluate(links: Sequence[Link], params: Params) -> list[Finding]:
    """Findings for measured links (pure; see the module docstring):

    - UNKNOWN for links whose measurement failed (one finding for a host when one error hits all
      its links, as a dead host's does);
    - per metric (bandwidth low, latency high): WARN for outliers against the fleet, FAIL below or
      above the playbook's threshold; attributed to a host when one explains the slow links
      (`attribute`), else reported link by link;
    - one OK finding summarising the fleet when no measured link is slow.
    """
    if not links:
        return [Finding(CHECK_ID, Status.SKIPPED, "no links to measure: the fleet needs at least 2 hosts")]
    metrics = [
        _Metric("bandwidth", "Gbit/s", "low", params.min_gbits_per_s),
        _Metric("latency", "ms", "high", params.max_latency_ms),
    ]
    problems = [f for metric in metrics for f in _metric_findings(links, metric)]
    findings = _error_findings(links)
    if not problems:
        summary = _fleet_summary(links)
        findings += [summary] if summary is not None else []
    return findings + problems


def _error_findings(links: Sequence[Link]) -> list[Finding]:
    by_error: dict[str, list[Link]] = {}
    for link in links:
        if link.error:
            by_error.setdefault(link.error, []).append(link)
    out = []
    for error, failed in by_error.items():
        remediation = (
            "Install the tool on the host(s) named, then measure again."
            if "not installed" in error
            else "Fix what the error says (SSH access, the tool on the node, the data address), then "
            "measure again; the other links were measured."
        )
        common = _common_hosts([(link.src, link.dst) for link in failed])
        if len(failed) > 1 and len(common) == 1:
            what = f"{len(failed)} links of {common[0]} {_not_measured(failed)}"
            groups = [(common[0], f"{what}: {error}", failed)]
        else:
            groups = [
                (link.label, f"{link.label} {_not_measured([link])}: {error}", [link]) for link in failed
            ]
        for subject, summary, members in groups:
            out.append(
                Finding(
                    CHECK_ID,
                    Status.UNKNOWN,
                    summary,
                    evidence={link.label: _measured(link) for link in members},
                    expected="measured",
                    remediation=remediation,
                    subject=subject,
                    host=subject if subject in common else "",
                )
            )
    return out


def _not_measured(links: Sequence[Link]) -> str:
    partly = any(link.gbits_per_s is not None or link.latency_ms is not None for link in links)
    return "not fully measured" if partly else "not measured"


def _metric_findings(links: Sequence[Link], metric: _Metric) -> list[Finding]:
    measured = {link.label: link for link in links if metric.value(link) is not None}
    values = {label: float(metric.value(link) or 0.0) for label, link in measured.items()}
    medians: dict[str, float] = {}
    bad: dict[str, _Bad] = {}
    # Bandwidth is compared among the links of one tool; latency is always ping's.
    groups: dict[str, dict[str, float]] = {}
    for label, link in measured.items():
        groups.setdefault(link.tool if metric.name == "bandwidth" else "ping", {})[label] = values[label]
    for samples in groups.values():
        median = statistics.median(samples.values())
        medians |= dict.fromkeys(samples, median)
        for o in fleet.outliers_in(samples, f"{metric.name} {metric.unit}", min_hosts=MIN_LINKS):
            if o.direction == metric.worse and metric.material(o.value, o.median):
                word = "below" if metric.worse == "low" else "above"
                bad.setdefault(o.host, _Bad(Status.WARN, o.value)).reasons.append(
                    f"far {word} the fleet's median {metric.show(o.median)} (modified z-score {o.score:+.1f})"
                )
        _host_outliers(samples, measured, metric, bad)
    for label, value in values.items():
        if metric.limit is not None and metric.beyond_limit(value):
            word = "below the minimum" if metric.worse == "low" else "above the maximum"
            entry = bad.setdefault(label, _Bad(Status.FAIL, value))
            entry.status = Status.FAIL
            entry.reasons.append(f"{word} {metric.show(metric.limit)}")
    if not bad:
        return []
    culprits, rest = attribute(set(bad), [(link.src, link.dst) for link in measured.values()])
    findings = [
        _host_finding(host, role, labels, bad, medians, metric) for host, (role, labels) in culprits.items()
    ]
    for label in rest:
        src, dst, entry = measured[label].src, measured[label].dst, bad[label]
        findings.append(
            Finding(
                CHECK_ID,
                entry.status,
                f"{label}: {metric.name} {metric.show(entry.value)}, {'; '.join(entry.reasons)}; "
                f"{src}'s and {dst}'s other links are not, so look at the path between them "
                f"(cable, switch port, route) or at {src}'s sending and {dst}'s receiving side",
                evidence={label: metric.show(entry.value), "fleet median": metric.show(medians[label])},
                expected=metric.expected(),
                remediation=_remediation(metric, None),
                subject=label,
            )
        )
    return findings


WHOLE_HOST = "all its links"


def _host_outliers(
    samples: Mapping[str, float], links: Mapping[str, Link], metric: _Metric, bad: dict[str, _Bad]
) -> None:
    """Hosts whose best link is an outlier: every link through them is slow, so the host is the
    bottleneck (a NIC at the wrong speed, a bad cable). In a ring, one slow host makes 2 of the n
    links slow: with five hosts that is 40% of the links, too many for the per-link median/MAD to
    stand out; the per-host best link makes it one value in n again."""
    best: dict[str, float] = {}
    pick = max if metric.worse == "low" else min
    for label, value in samples.items():
        for host in (links[label].src, links[label].dst):
            best[host] = pick(best.get(host, value), value)
    for o in fleet.outliers_in(best, f"{metric.name} {metric.unit}", min_hosts=MIN_LINKS):
        if o.direction != metric.worse or not metric.material(o.value, o.median):
            continue
        word = "below" if metric.worse == "low" else "above"
        for label in samples:
            if o.host in (links[label].src, links[label].dst):
                bad.setdefault(label, _Bad(Status.WARN, samples[label])).reasons.append(
                    f"every link through {o.host} is far {word} the fleet's hosts (its best "
                    f"{metric.show(o.value)} against a median of {metric.show(o.median)}, "
                    f"modified z-score {o.score:+.1f})"
                )


def attribute(
    bad: set[str], measured: Sequence[tuple[str, str]]
) -> tuple[dict[str, tuple[str, list[str]]], list[str]]:
    """Which hosts explain the slow links (labels in `bad`, among the `measured` (src, dst) links).

    A host whose measured links are all slow, with at least one in-link and one out-link, is the
    cause (role WHOLE_HOST). Of the slow links left, when two or more share exactly one host, that
    host is ("out-links": its sending side, "in-links": its receiving side). Nothing is attributed
    when every measured link is slow: no host stands apart then (the network, or the threshold).
    Returns host -> (role, its slow link labels) and the slow labels left to report one by one,
    both in the order of `measured`.
    """
    labels = {link_label(s, d): (s, d) for s, d in measured}
    if not bad or bad >= set(labels):
        return {}, [label for label in labels if label in bad]
    culprits: dict[str, tuple[str, list[str]]] = {}
    for host in dict.fromkeys(h for link in measured for h in link):
        mine = [label for label, link in labels.items() if host in link]
        has_in = any(labels[label][1] == host for label in mine)
        has_out = any(labels[label][0] == host for label in mine)
        if has_in and has_out and all(label in bad for label in mine):
            culprits[host] = (WHOLE_HOST, mine)
    explained = {label for _, mine in culprits.values() for label in mine}
    rest = [label for label in labels if label in bad and label not in explained]
    if len(rest) >= 2:
        common = _common_hosts([labels[label] for label in rest])
        if len(common) == 1:
            host = common[0]
            if all(labels[label][0] == host for label in rest):
                role = "out-links"
            elif all(labels[label][1] == host for label in rest):
                role = "in-links"
            else:
                role = "in- and out-links"
            culprits[host] = (role, rest)
            rest = []
    return culprits, rest


def _host_finding(
    host: str,
    role: str,
    labels: Sequence[str],
    bad: Mapping[str, _Bad],
    medians: Mapping[str, float],
    metric: _Metric,
) -> Finding:
    shown = ", ".join(f"{label} {metric.show(bad[label].value)}" for label in labels[:LINKS_SHOWN])
    more = f" +{len(labels) - LINKS_SHOWN} more" if len(labels) > LINKS_SHOWN else ""
    reasons = "; ".join(sorted({r for label in labels for r in bad[label].reasons}))
    if role == WHOLE_HOST:
        cause = f"{host} is the host: its in- and out-links are all slow, the other hosts' links are not"
    else:
        side = {"out-links": ": look at its sending side", "in-links": ": look at its receiving side"}
        cause = f"every slow link involves {host} (its {role}){side.get(role, '')}"
    evidence = {label: metric.show(bad[label].value) for label in labels}
    evidence["fleet median"] = metric.show(medians[labels[0]])
    return Finding(
        CHECK_ID,
        worst(bad[label].status for label in labels),
        f"{cause}; {metric.name}: {shown}{more} ({reasons})",
        evidence=evidence,
        expected=metric.expected(),
        remediation=_remediation(metric, host),
        subject=host,
        host=host,
    )


def _remediation(metric: _Metric, host: str | None) -> str:
    where = f"on {host}" if host else "on both ends"
    if metric.name == "bandwidth":
        return (
            f"Look {where}: the NIC's negotiated speed and duplex (ethtool), errors and drops (ip -s link), "
            "a tc rate limit, an MTU mismatch, CPU or interrupt saturation, and that the data address "
            "routes over the fast network (ip route get)."
        )
    return (
        f"Look {where}: the route to the data address (ip route get), congestion or drops on the path, "
        "NIC interrupt coalescing and deep CPU C-states, a busy CPU."
    )


def _fleet_summary(links: Sequence[Link]) -> Finding | None:
    bandwidth = {link.label: link.gbits_per_s for link in links if link.gbits_per_s is not None}
    latency = {link.label: link.latency_ms for link in links if link.latency_ms is not None}
    if not bandwidth:
        return None  # nothing measured: the UNKNOWN findings say why
    slowest = min(bandwidth, key=lambda k: bandwidth[k])
    median = statistics.median(bandwidth.values())
    evidence = {
        "links measured": f"{len(bandwidth)} of {len(links)}",
        "median Gbit/s": _number(median),
        "slowest link": f"{slowest}: {_number(bandwidth[slowest])} Gbit/s",
    }
    parts = [f"median {_number(median)} Gbit/s (slowest {_number(bandwidth[slowest])})"]
    if latency:
        highest = max(latency, key=lambda k: latency[k])
        evidence["median latency ms"] = _number(statistics.median(latency.values()))
        evidence["highest latency"] = f"{highest}: {_number(latency[highest])} ms"
        parts.append(f"latency median {_number(statistics.median(latency.values()))} ms")
    compared = (
        "no link stands out"
        if len(bandwidth) >= MIN_LINKS
        else f"too few links ({len(bandwidth)}) to compare, thresholds only"
    )
    return Finding(
        CHECK_ID,
        Status.OK,
        f"{len(bandwidth)} links: {', '.join(parts)}; {compared}",
        evidence=evidence,
        expected="no slow link",
        subject="fleet",
    )


def _common_hosts(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The hosts every (src, dst) pair has, in the first pair's order."""
    common = set(pairs[0])
    for pair in pairs[1:]:
        common &= set(pair)
    return [h for h in pairs[0] if h in common]


def _measured(link: Link) -> str:
    return f"{_number(link.gbits_per_s)} Gbit/s, {_number(link.latency_ms)} ms: {link.error or 'measured'}"


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


# --- Parsing the tools' output (pure) ------------------------------------------------------------------


def parse_iperf3(stdout: str) -> _Parsed:
    """Gbit/s received (end.sum_received.bits_per_second of `iperf3 -J`), or the error."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        first = stdout.strip().splitlines()[0] if stdout.strip() else "no output"
        return None, f"iperf3 printed no JSON ({first[:200]})"
    if not isinstance(doc, dict):
        return None, "iperf3 printed JSON that is not an object"
    if doc.get("error"):
        return None, f"iperf3: {_one_line(str(doc['error']))}"
    received = (doc.get("end") or {}).get("sum_received") or {}
    bps = received.get("bits_per_second")
    if isinstance(bps, bool) or not isinstance(bps, int | float) or not math.isfinite(bps):
        return None, "iperf3's JSON has no end.sum_received.bits_per_second"
    return float(bps) / 1e9, None


_COLUMNS = re.compile(r"\s{2,}")


def parse_ib_write_bw(stdout: str) -> _Parsed:
    """Gbit/s from ib_write_bw's table: the "BW average[Gb/sec]" column of the first data row after
    its header (other lines, such as perftest's CPU frequency warning, may come between)."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if "BW average" not in line:
            continue
        columns = _COLUMNS.split(line.strip())
        index = next(j for j, c in enumerate(columns) if c.startswith("BW average"))
        unit = columns[index][len("BW average") :]
        if unit != "[Gb/sec]":
            return None, f"ib_write_bw reported {columns[index]!r}, not Gb/sec (is --report_gbits ignored?)"
        for row in lines[i + 1 :]:
            fields = row.split()
            if len(fields) == len(columns) and fields[0].isdigit():
                try:
                    return float(fields[index]), None
                except ValueError:
                    break
        return None, "ib_write_bw printed its header but no result row"
    return None, "ib_write_bw printed no 'BW average' table"


_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/mdev)? = ([\d.]+)/([\d.]+)/([\d.]+)")
_LOSS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def parse_ping(stdout: str) -> _Parsed:
    """The rtt average in ms of `ping -q` (iputils' "rtt min/avg/max/mdev" line, busybox's
    "round-trip min/avg/max"), and an error when packets were lost (the average is kept)."""
    rtt = _RTT.search(stdout)
    loss = _LOSS.search(stdout)
    error = None
    if loss is not None and int(loss[2]) < int(loss[1]):
        error = f"ping lost {int(loss[1]) - int(loss[2])} of {loss[1]} packets"
    if rtt is None:
        return None, error or "ping printed no rtt line"
    return float(rtt[2]), error


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --- Measuring over SSH ---------------------------------------------------------------------------------


@dataclass
class _Host:
    spec: HostSpec
    address: str  # where the data network reaches it
    conn: Connection | None = None
    tools: frozenset[str] = frozenset()
    rdma: tuple[str, ...] = ()
    error: HostError | None = None


# Looks for each tool and RDMA device; POSIX sh, whatever the login shell is.
_PROBE = (
    f"for t in {IPERF3} {IB_WRITE_BW} ping timeout; do "
    'command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done; '
    'for d in /sys/class/infiniband/*; do [ -e "$d" ] && echo "rdma ${d##*/}"; done; true'
)
_NOT_LISTENING = re.compile(r"connection refused|couldn't connect|server is busy", re.IGNORECASE)


def data_address(spec: HostSpec, source: str) -> str:
    """vars.data_address when set (checked: it reaches a remote command line), else the SSH address."""
    value = spec.vars.get(DATA_ADDRESS_VAR, "").strip()
    if not value:
        return spec.address
    if not _is_address(value):
        raise UsageError(
            f"{source}: host {spec.name}: vars.{DATA_ADDRESS_VAR} {value!r} is not a host name or IP "
            "address; give the address of its data-network interface"
        )
    return value


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        # RFC 1123 names: labels of letters, digits and '-', not all-digit at the end.
        labels = text.split(".")
        return len(text) <= 253 and all(_LABEL.fullmatch(p) for p in labels) and not labels[-1].isdigit()
    return True


def measure(inventory: Inventory, keys: ssh.HostKeys, params: Params, parallel: int = 64) -> BandwidthReport:
    """Measures the planned links over SSH (see the module docstring) and evaluates them."""
    hosts = {spec.name: _Host(spec, data_address(spec, inventory.source)) for spec in inventory.hosts}
    rounds = schedule(list(hosts), params.mode)
    if not rounds:
        return BandwidthReport([], evaluate([], params))
    session = _Session(hosts, keys, params, max(1, parallel))
    try:
        session.connect_all()
        latency: dict[_Pair, _Latency] = {}
        bandwidth: dict[_Pair, _Bandwidth] = {}
        for links in rounds:
            latency |= session.ping_all(links)
            bandwidth |= session.bandwidth_all(links)
    finally:
        session.close()
    measured = []
    for src, dst in (link for links in rounds for link in links):
        ms, ping_error = latency[(src, dst)]
        tool, gbits, bw_error = bandwidth[(src, dst)]
        errors = list(dict.fromkeys(e for e in (bw_error, ping_error) if e))
        measured.append(Link(src, dst, tool, gbits, ms, "; ".join(errors) or None))
    return BandwidthReport(measured, evaluate(measured, params))


_K = TypeVar("_K", bound=Hashable)
_R = TypeVar("_R")


class _Session:
    """The fleet's SSH connections, one per host, shared by every link of that host."""

    def __init__(self, hosts: dict[str, _Host], keys: ssh.HostKeys, params: Params, parallel: int) -> None:
        self.hosts = hosts
        self.keys = keys
        self.params = params
        self.parallel = parallel
        self._lock = threading.Lock()
        self._opened: list[Connection] = []

    # -- hosts ----------------------------------------------------------------------------------------

    def connect_all(self) -> None:
        def limit(name: str) -> float:
            spec = self.hosts[name].spec
            return spec.connect_timeout + spec.command_timeout + SLACK_S

        def overdue(name: str, limit_s: float) -> HostError:
            return HostError(ssh.TIMEOUT, f"no connection within {limit_s:g}s")

        errors = _run_all(list(self.hosts), self._connect, self.parallel, limit, overdue)
        for name, error in errors.items():
            if error is not None:
                self.hosts[name].error = error

    def _connect(self, name: str) -> HostError | None:
        host = self.hosts[name]
        try:
            conn = ssh.connection(host.spec, self.keys)
            with self._lock:
                self._opened.append(conn)
            ssh.open_connection(conn, host.spec, self.keys)
            out = ssh.run(conn, shlex.join(["sh", "-c", _PROBE]), host.spec.command_timeout)
        except HostError as e:
            return e
        except Exception as e:  # a protocol surprise on one host is that host's error
            return ssh.classify(e, host.spec, self.keys)
        words = [line.split(None, 1) for line in out.stdout.decode(errors="replace").splitlines()]
        host.tools = frozenset(w[1] for w in words if len(w) == 2 and w[0] == "tool")
        host.rdma = tuple(w[1] for w in words if len(w) == 2 and w[0] == "rdma")
        host.conn = conn  # set last: a host with a connection is a usable host
        return None

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            try:
                conn.close()
            except Exception:  # a half-dead connection may raise anything on close; it is gone either way
                continue

    def _usable(self, name: str) -> tuple[_Host | None, str | None]:
        host = self.hosts[name]
        if host.error is not None or host.conn is None:
            return None, f"{name}: {host.error or 'not connected'}"
        return host, None

    # -- latency --------------------------------------------------------------------------------------

    def ping_all(self, links: Sequence[_Pair]) -> dict[_Pair, _Latency]:
        def limit(link: _Pair) -> float:
            return PING_DEADLINE_S + CLIENT_SLACK_S + SLACK_S

        def overdue(link: _Pair, limit_s: float) -> _Latency:
            return None, f"ping from {link[0]} did not finish within {limit_s:g}s"

        return _run_all(links, self._ping, self.parallel, limit, overdue)

    def _ping(self, link: _Pair) -> _Latency:
        src_name, dst_name = link
        src, why = self._usable(src_name)
        if src is None or src.conn is None:
            return None, why
        if "ping" not in src.tools:
            return None, f"ping not installed on {src_name} (Debian: apt install iputils-ping)"
        argv = ["ping", "-c", str(PING_COUNT), "-i", f"{PING_INTERVAL_S:g}", "-q"]
        argv += ["-w", str(PING_DEADLINE_S), self.hosts[dst_name].address]
        try:
            out = ssh.run(src.conn, shlex.join(argv), PING_DEADLINE_S + CLIENT_SLACK_S)
        except HostError as e:
            return None, f"{src_name}: {e}"
        except Exception as e:
            return None, f"{src_name}: {type(e).__name__}: {_one_line(str(e))}"
        ms, error = parse_ping(out.stdout.decode(errors="replace"))
        if ms is None and out.exited not in (0, 1):  # 1: no reply; else ping itself failed
            error = f"ping on {src_name}: {_last_line(out.stderr) or f'exit {out.exited}'}"
        return ms, error and f"{error} ({src_name} to {self.hosts[dst_name].address})"

    # -- bandwidth ------------------------------------------------------------------------------------

    def bandwidth_all(self, links: Sequence[_Pair]) -> dict[_Pair, _Bandwidth]:
        seconds = self.params.whole_seconds

        def limit(link: _Pair) -> float:
            # Starting the server, waiting for it to listen, the client's run, stopping the server.
            return 2 * READY_S + seconds + CLIENT_SLACK_S + SERVER_EXIT_S + KILL_S + SLACK_S

        def overdue(link: _Pair, limit_s: float) -> _Bandwidth:
            return IPERF3, None, f"the measurement did not finish within {limit_s:g}s"

        return _run_all(links, self._bandwidth, self.parallel, limit, overdue)

    def _bandwidth(self, link: _Pair) -> _Bandwidth:
        src_name, dst_name = link
        src, why = self._usable(src_name)
        dst, why_dst = self._usable(dst_name)
        if src is None or dst is None or src.conn is None or dst.conn is None:
            return IPERF3, None, why or why_dst
        tool, missing = _choose_tool(src, dst)
        if tool is None:
            return IPERF3, None, missing
        try:
            gbits, error = self._run_pair(tool, src, dst)
        except HostError as e:
            return tool, None, f"{e}"
        except Exception as e:
            return tool, None, f"{type(e).__name__}: {_one_line(str(e))}"
        return tool, gbits, error

    def _run_pair(self, tool: str, src: _Host, dst: _Host) -> _Parsed:
        assert src.conn is not None and dst.conn is not None
        seconds = self.params.whole_seconds
        server_limit = math.ceil(READY_S + seconds + CLIENT_SLACK_S)
        if tool == IB_WRITE_BW:
            common = [IB_WRITE_BW, "--report_gbits", "-D", str(seconds)]
            server_argv, client_argv = common, [*common, dst.address]
            parse: Callable[[str], _Parsed] = parse_ib_write_bw
        else:
            port = str(self.params.port)
            server_argv = [IPERF3, "-s", "-1", "-p", port]
            client_argv = [IPERF3, "-c", dst.address, "-p", port, "-t", str(seconds), "-J"]
            parse = parse_iperf3
        if "timeout" in dst.tools:  # coreutils: the server ends even if nobody ever connects
            server_argv = ["timeout", str(server_limit), *server_argv]
        try:
            server = _Server.start(dst.conn, server_argv)
        except HostError as e:
            raise HostError(e.kind, f"{dst.spec.name}: starting the {tool} server: {e.message}") from None
        try:
            return self._client(src, dst, client_argv, parse, server, seconds)
        finally:
            server.stop(dst.conn)

    def _client(
        self,
        src: _Host,
        dst: _Host,
        argv: Sequence[str],
        parse: Callable[[str], _Parsed],
        server: _Server,
        seconds: int,
    ) -> _Parsed:
        """Runs the client until the server answers (it may not listen yet) or READY_S has passed."""
        assert src.conn is not None
        ready_by = time.monotonic() + READY_S
        while True:
            try:
                out = ssh.run(src.conn, shlex.join(argv), seconds + CLIENT_SLACK_S)
            except HostError as e:
                raise HostError(e.kind, f"{src.spec.name}: {argv[0]} client: {e.message}") from None
            value, error = parse(out.stdout.decode(errors="replace"))
            if value is not None:
                return value, None
            error = error or "no result"
            if out.exited != 0 and ("no JSON" in error or "no 'BW average'" in error):
                error = _last_line(out.stderr) or error  # the tool's own complaint says more
            if _NOT_LISTENING.search(error) and server.running() and time.monotonic() < ready_by:
                time.sleep(RETRY_S)
                continue
            if not server.running():
                complaint = server.complaint()
                if complaint:
                    error = f"{error}; server on {dst.spec.name}: {complaint}"
            return None, error


class _Server:
    """A measurement server running in the background on its own channel of the destination's
    connection. The shell prints its pid and execs the server, so that pid can be killed."""

    def __init__(self, chan: paramiko.Channel, pid: int | None) -> None:
        self.chan = chan
        self.pid = pid
        self._stderr = b""

    @classmethod
    def start(cls, conn: Connection, argv: Sequence[str]) -> _Server:
        transport = conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise HostError(ssh.UNREACHABLE, "the SSH connection closed")
        chan = transport.open_session(timeout=READY_S)
        try:
            chan.settimeout(READY_S)
            chan.exec_command(f"echo $$ && exec {shlex.join(argv)}")
            line = b""
            while b"\n" not in line:
                data = chan.recv(256)
                if not data:
                    break
                line += data
        except TimeoutError:
            chan.close()
            raise HostError(ssh.TIMEOUT, f"no answer within {READY_S:g}s") from None
        except BaseException:
            chan.close()
            raise
        first = line.split(b"\n", 1)[0].strip()
        return cls(chan, int(first) if first.isdigit() else None)

    def running(self) -> bool:
        return not self.chan.exit_status_ready()

    def complaint(self) -> str:
        """The last line the server wrote on stderr (why it exited), or ''."""
        while self.chan.recv_stderr_ready():
            self._stderr += self.chan.recv_stderr(1 << 16)
        return _last_line(self._stderr)

    def stop(self, conn: Connection) -> None:
        """Waits briefly for a one-shot server to end by itself, else kills it (its pid is still the
        server's: the channel has not reported an exit)."""
        try:
            if not self.chan.status_event.wait(SERVER_EXIT_S) and self.pid is not None:
                ssh.run(conn, shlex.join(["kill", str(self.pid)]), KILL_S)
        except (
            Exception
        ):  # the connection is gone (any paramiko error): so is the server, or `timeout` ends it
            pass
        finally:
            self.chan.close()


def _choose_tool(src: _Host, dst: _Host) -> tuple[str | None, str | None]:
    """ib_write_bw when both ends have it and an RDMA device, else iperf3; else which host lacks it."""
    if all(IB_WRITE_BW in h.tools and h.rdma for h in (src, dst)):
        return IB_WRITE_BW, None
    missing = [h.spec.name for h in (src, dst) if IPERF3 not in h.tools]
    if missing:
        return None, f"iperf3 not installed on {', '.join(missing)} (Debian: apt install iperf3)"
    return IPERF3, None


def _run_all(
    items: Sequence[_K],
    fn: Callable[[_K], _R],
    parallel: int,
    limit: Callable[[_K], float],
    overdue: Callable[[_K, float], _R],
) -> dict[_K, _R]:
    """`fn` on every item on nodeagent.pool's daemon threads; an item past its limit gets `overdue`."""
    out: dict[_K, _R] = {}
    if not items:
        return out
    for done in pool.bounded(items, fn, parallel, limit, "nodeagent-bandwidth"):
        outcome = done.outcome
        out[done.item] = overdue(done.item, outcome.limit_s) if isinstance(outcome, pool.Overdue) else outcome
    return out
