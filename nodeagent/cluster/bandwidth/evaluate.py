"""What measured links say: slow links and slow hosts, as findings (`evaluate`, pure).

Slow links are found against the fleet (median and MAD, nodeagent.compare.fleet.outliers_in, per
tool: an RDMA link and a TCP link are not comparable) and against the playbook's thresholds. A host
whose measured in- and out-links are all slow is named as the cause, not its links: one bad cable
slows one direction of one link, a bad host (NIC at a lower speed, a rate limit, a saturated CPU)
slows every link it is on. MAD needs the slow links to be fewer than half: one slow host stands out
from 5 hosts on (a ring of 4 has 2 slow links out of 4); below that, only the thresholds
(`min_gbits_per_s`, `max_latency_ms`) can fail a link.

Apart from the measuring (nodeagent.cluster.bandwidth.measure) so that it is tested on hand-made links.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.cluster.bandwidth.plan import Params
from nodeagent.cluster.bandwidth.report import Link, format_number, link_label
from nodeagent.compare import fleet
from nodeagent.core.finding import Finding, Status, worst

__all__ = ["CHECK_ID", "WHOLE_HOST", "attribute", "evaluate"]

CHECK_ID = "network"

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
        return f"{format_number(value)} {self.unit}"


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
        "median Gbit/s": format_number(median),
        "slowest link": f"{slowest}: {format_number(bandwidth[slowest])} Gbit/s",
    }
    parts = [f"median {format_number(median)} Gbit/s (slowest {format_number(bandwidth[slowest])})"]
    if latency:
        highest = max(latency, key=lambda k: latency[k])
        evidence["median latency ms"] = format_number(statistics.median(latency.values()))
        evidence["highest latency"] = f"{highest}: {format_number(latency[highest])} ms"
        parts.append(f"latency median {format_number(statistics.median(latency.values()))} ms")
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
    numbers = f"{format_number(link.gbits_per_s)} Gbit/s, {format_number(link.latency_ms)} ms"
    return f"{numbers}: {link.error or 'measured'}"
