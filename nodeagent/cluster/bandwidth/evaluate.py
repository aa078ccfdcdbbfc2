"""What measured links say: slow links and slow hosts, as findings (`evaluate`, pure).

Slow links are found against the fleet, among the links of one tool (an RDMA link and a TCP link are
not comparable), by two rules, and against the playbook's thresholds:

- ratio: a link below `warn_below_median` (0.5) times the median of the measured links is WARN,
  below `fail_below_median` (0.1) FAIL (the reasons are at plan.Params). It sees one slow link among
  a few noisy ones, where MAD cannot: links of 16.1, 0.018, 8.5 and 18.2 Gbit/s have a MAD of
  4.85 Gbit/s, and the slow link's modified z-score is only -1.7;
- MAD: a modified z-score below -3.5 (nodeagent.compare.fleet.outliers_in) with a shortfall of at
  least 20% of the median, WARN: on a quiet fleet, the link 20 to 50% short that the ratio passes.

A link flagged by several rules is one finding, at the worst status, with every reason. Both rules
need 3 measured links of a tool: the median of 2 sits halfway between them and is no reference.
With fewer, only `min_gbits_per_s` (`--min-gbits`) judges them, and a finding says so: SKIPPED,
naming `--min-gbits`, when it is not given.

A host whose measured in- and out-links are all slow is named as the cause, not its links: one bad
cable slows one direction of one link, a bad host (NIC at a lower speed, a rate limit, a saturated
CPU) slows every link it is on. In a ring one slow host makes 2 of the n links slow, half of them
or more when n is 3 or 4: the links' median and MAD are then no longer the healthy links' own, so
both rules also judge each host's best link against the other hosts' best links. A host is named
only for links flagged at one status: a failing link beside one merely warned about are two links.

Apart from the measuring (nodeagent.cluster.bandwidth.measure) so that it is tested on hand-made links.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.cluster.bandwidth.plan import Params
from nodeagent.cluster.bandwidth.report import Link, format_number, link_label
from nodeagent.compare import fleet
from nodeagent.core.finding import WORST_FIRST, Finding, Status, worst

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
    option: str  # how a user gives `limit`, named when too few links leave only it to judge them
    warn_ratio: float = 0.0  # the ratio rule's fractions of the median (bandwidth); 0: no such rule
    fail_ratio: float = 0.0

    def expected(self, compared: bool = True) -> str:
        """What a link should reach: the threshold, and the fleet's rules when its links were compared."""
        if not compared:
            return "no threshold" if self.limit is None else self.expected_limit()
        parts = ["within the fleet"]
        if self.warn_ratio > 0:
            parts.insert(0, f"at least {self.warn_ratio:g} x the median of its tool's links")
        if self.limit is not None:
            parts.insert(0, self.expected_limit())
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])}, and {parts[-1]}"

    def expected_limit(self) -> str:
        word = "at least" if self.worse == "low" else "at most"
        return f"{word} {self.show(self.limit or 0.0)}"

    def value(self, link: Link) -> float | None:
        return link.gbits_per_s if self.name == "bandwidth" else link.latency_ms

    def group(self, link: Link) -> str:
        """Links compared with each other: bandwidth among one tool's, latency is always ping's."""
        return link.tool if self.name == "bandwidth" else "ping"

    def beyond_limit(self, value: float) -> bool:
        if self.limit is None:
            return False
        return value < self.limit if self.worse == "low" else value > self.limit

    def material(self, value: float, median: float) -> bool:
        if self.worse == "low":
            return value <= (1 - MIN_SHORTFALL) * median
        return value - median >= MIN_LATENCY_EXCESS_MS

    def below_median(self, value: float, median: float) -> tuple[Status, float] | None:
        """The ratio rule: (status, the fraction crossed) for a value below a fraction of the median."""
        for status, fraction in ((Status.FAIL, self.fail_ratio), (Status.WARN, self.warn_ratio)):
            if value < fraction * median:
                return status, fraction
        return None

    def below_the_median(
        self, values: Mapping[str, float]
    ) -> Iterator[tuple[str, float, Status, float, float]]:
        """(name, value, status, fraction crossed, median) for each of `values` the ratio rule flags."""
        median = statistics.median(values.values())
        for name, value in values.items():
            crossed = self.below_median(value, median)
            if crossed is not None:
                yield name, value, crossed[0], crossed[1], median

    def show(self, value: float) -> str:
        return f"{format_number(value)} {self.unit}"


@dataclass
class _Bad:
    status: Status
    value: float
    reasons: list[str] = field(default_factory=list)


def _flag(bad: dict[str, _Bad], label: str, value: float, status: Status, reason: str) -> None:
    """One entry per link whatever flags it: the worst status and every reason."""
    entry = bad.setdefault(label, _Bad(status, value))
    entry.status = worst([entry.status, status])
    if reason not in entry.reasons:
        entry.reasons.append(reason)


def evaluate(links: Sequence[Link], params: Params) -> list[Finding]:
    """Findings for measured links (pure; see the module docstring):

    - UNKNOWN for links whose measurement failed (one finding for a host when one error hits all
      its links, as a dead host's does);
    - per metric (bandwidth low, latency high): WARN for MAD outliers against the fleet, WARN or
      FAIL below fractions of the fleet's median (bandwidth), FAIL below or above the playbook's
      threshold; attributed to a host when one explains the slow links (`attribute`), else
      reported link by link;
    - for a tool with fewer than 3 measured links, which cannot be compared with each other: a
      finding saying so, SKIPPED without `min_gbits_per_s`, OK when every link reaches it;
    - one OK finding summarising the fleet when no measured link is slow.
    """
    if not links:
        return [Finding(CHECK_ID, Status.SKIPPED, "no links to measure: the fleet needs at least 2 hosts")]
    bandwidth = _Metric(
        "bandwidth",
        "Gbit/s",
        "low",
        params.min_gbits_per_s,
        "--min-gbits",
        params.warn_below_median,
        params.fail_below_median,
    )
    latency = _Metric("latency", "ms", "high", params.max_latency_ms, "max_latency_ms")
    slow = _metric_findings(links, bandwidth)
    problems = slow + _metric_findings(links, latency)
    findings = _error_findings(links)
    groups = _groups(links, bandwidth)
    if not problems:
        findings += _fleet_summary(links, {tool: s for tool, s in groups.items() if len(s) >= MIN_LINKS})
    findings += _too_few_findings(groups, bandwidth, slow)
    return findings + problems


def _groups(links: Sequence[Link], metric: _Metric) -> dict[str, dict[str, float]]:
    """The measured values of `metric`, label -> value, per group of links compared together."""
    out: dict[str, dict[str, float]] = {}
    for link in links:
        value = metric.value(link)
        if value is not None:
            out.setdefault(metric.group(link), {})[link.label] = value
    return out


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
    medians: dict[str, float] = {}
    bad: dict[str, _Bad] = {}
    too_few: dict[str, str] = {}  # label -> why only the threshold judged it
    for group, samples in _groups(links, metric).items():
        if len(samples) < MIN_LINKS:
            too_few |= dict.fromkeys(samples, _too_few_words(len(samples), group, metric))
            continue
        medians |= dict.fromkeys(samples, statistics.median(samples.values()))
        _link_outliers(samples, metric, bad)
        _host_outliers(samples, measured, metric, bad)
        if metric.warn_ratio or metric.fail_ratio:
            _links_below_median(samples, group, metric, bad)
            _hosts_below_median(samples, measured, metric, bad)
    _beyond_limit(measured, metric, too_few, bad)
    if not bad:
        return []
    pairs = [(link.src, link.dst) for link in measured.values()]
    findings: list[Finding] = []
    # A host is blamed for links flagged at one status only: a FAIL link beside a link merely
    # warned about (a busy CPU's iperf3 measures a healthy link 20% short) is two facts of two
    # strengths, and one host finding would give the weak one the strong one's status.
    for status in WORST_FIRST:
        culprits, rest = attribute({label for label, b in bad.items() if b.status is status}, pairs)
        findings += [
            _host_finding(host, role, labels, bad, medians, metric)
            for host, (role, labels) in culprits.items()
        ]
        findings += [_link_finding(measured[label], bad[label], medians.get(label), metric) for label in rest]
    return findings


def _beyond_limit(
    measured: Mapping[str, Link], metric: _Metric, too_few: Mapping[str, str], bad: dict[str, _Bad]
) -> None:
    """The playbook's threshold: FAIL below the minimum (above the maximum), whatever the fleet
    does; for links of a tool too few to compare, the reason says it was the only judge."""
    if metric.limit is None:
        return
    word = "below the minimum" if metric.worse == "low" else "above the maximum"
    for label, link in measured.items():
        value = float(metric.value(link) or 0.0)
        if metric.beyond_limit(value):
            reason = f"{word} {metric.show(metric.limit)}"
            if label in too_few:
                reason += f" ({too_few[label]}; judged against {metric.option} {format_number(metric.limit)})"
            _flag(bad, label, value, Status.FAIL, reason)


def _link_finding(link: Link, entry: _Bad, median: float | None, metric: _Metric) -> Finding:
    """A slow link; `median` None when its tool had too few links to compare."""
    src, dst = link.src, link.dst
    evidence = {link.label: metric.show(entry.value)}
    if median is not None:
        evidence["fleet median"] = metric.show(median)
    return Finding(
        CHECK_ID,
        entry.status,
        f"{link.label}: {metric.name} {metric.show(entry.value)}, {'; '.join(entry.reasons)}; "
        f"{src}'s and {dst}'s other links are not, so look at the path between them "
        f"(cable, switch port, route) or at {src}'s sending and {dst}'s receiving side",
        evidence=evidence,
        expected=metric.expected(compared=median is not None),
        remediation=_remediation(metric, None),
        subject=link.label,
    )


def _too_few_words(count: int, group: str, metric: _Metric) -> str:
    what = f"{group} link" if metric.name == "bandwidth" else "link"
    return f"{count} {what}{'' if count == 1 else 's'} measured: too few to compare with each other"


def _link_outliers(samples: Mapping[str, float], metric: _Metric, bad: dict[str, _Bad]) -> None:
    """The MAD rule: links far from the fleet's median in MADs, and by a material amount."""
    word = "below" if metric.worse == "low" else "above"
    for o in fleet.outliers_in(samples, f"{metric.name} {metric.unit}", min_hosts=MIN_LINKS):
        if o.direction == metric.worse and metric.material(o.value, o.median):
            reason = (
                f"far {word} the fleet's median {metric.show(o.median)} (modified z-score {o.score:+.1f})"
            )
            _flag(bad, o.host, o.value, Status.WARN, reason)


def _links_below_median(
    samples: Mapping[str, float], group: str, metric: _Metric, bad: dict[str, _Bad]
) -> None:
    """The ratio rule on links: below a fraction of the median of the links of their tool."""
    for label, value, status, fraction, median in metric.below_the_median(samples):
        reason = (
            f"below {fraction:g} x the median {metric.show(median)} of the {len(samples)} measured "
            f"{group} links"
        )
        _flag(bad, label, value, status, reason)


WHOLE_HOST = "all its links"


def _host_outliers(
    samples: Mapping[str, float], links: Mapping[str, Link], metric: _Metric, bad: dict[str, _Bad]
) -> None:
    """The MAD rule on hosts: a host whose best link is an outlier has every link through it slow, so
    the host is the bottleneck (a NIC at the wrong speed, a bad cable). In a ring, one slow host makes
    2 of the n links slow: with five hosts that is 40% of the links, too many for the per-link
    median/MAD to stand out; the per-host best link makes it one value in n again."""
    best = _host_bests(samples, links, metric)
    for o in fleet.outliers_in(best, f"{metric.name} {metric.unit}", min_hosts=MIN_LINKS):
        if o.direction != metric.worse or not metric.material(o.value, o.median):
            continue
        word = "below" if metric.worse == "low" else "above"
        reason = (
            f"every link through {o.host} is far {word} the fleet's hosts (its best "
            f"{metric.show(o.value)} against a median of {metric.show(o.median)}, "
            f"modified z-score {o.score:+.1f})"
        )
        _flag_host(samples, links, o.host, Status.WARN, reason, bad)


def _hosts_below_median(
    samples: Mapping[str, float], links: Mapping[str, Link], metric: _Metric, bad: dict[str, _Bad]
) -> None:
    """The ratio rule on hosts: a host whose best link is below a fraction of the median of the
    hosts' best links slows every link it is on (see the module docstring)."""
    best = _host_bests(samples, links, metric)
    if len(best) < MIN_LINKS:
        return
    for host, value, status, fraction, median in metric.below_the_median(best):
        reason = (
            f"every link through {host} is slow: its best, {metric.show(value)}, is below {fraction:g} x "
            f"the median best link of the {len(best)} hosts, {metric.show(median)}"
        )
        _flag_host(samples, links, host, status, reason, bad)


def _host_bests(samples: Mapping[str, float], links: Mapping[str, Link], metric: _Metric) -> dict[str, float]:
    """Each host's best link (fastest, or lowest latency), for the hosts with a measured in- and
    out-link among `samples`: a host next to a dead one has one link measured, and that one link
    says nothing of the host's others."""
    best: dict[str, float] = {}
    ends: dict[str, set[str]] = {}
    pick = max if metric.worse == "low" else min
    for label, value in samples.items():
        for end, host in (("out", links[label].src), ("in", links[label].dst)):
            best[host] = pick(best.get(host, value), value)
            ends.setdefault(host, set()).add(end)
    return {host: value for host, value in best.items() if len(ends[host]) == 2}


def _flag_host(
    samples: Mapping[str, float],
    links: Mapping[str, Link],
    host: str,
    status: Status,
    reason: str,
    bad: dict[str, _Bad],
) -> None:
    for label, value in samples.items():
        if host in (links[label].src, links[label].dst):
            _flag(bad, label, value, status, reason)


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
    median = medians.get(labels[0])  # None: its tool had too few links to compare
    if median is not None:
        evidence["fleet median"] = metric.show(median)
    return Finding(
        CHECK_ID,
        worst(bad[label].status for label in labels),
        f"{cause}; {metric.name}: {shown}{more} ({reasons})",
        evidence=evidence,
        expected=metric.expected(compared=median is not None),
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


def _fleet_summary(links: Sequence[Link], compared: Mapping[str, Mapping[str, float]]) -> list[Finding]:
    """The OK summary of the tools whose links were compared with each other (3 or more)."""
    if not compared:
        return []  # nothing compared: the UNKNOWN and too-few findings say why
    evidence: dict[str, str] = {}
    parts = []
    for tool, samples in compared.items():
        slowest = min(samples, key=lambda k: samples[k])
        median = statistics.median(samples.values())
        evidence |= {
            f"{tool} links measured": f"{len(samples)} of {len(links)}",
            f"{tool} median Gbit/s": format_number(median),
            f"{tool} slowest link": f"{slowest}: {format_number(samples[slowest])} Gbit/s",
        }
        parts.append(
            f"{len(samples)} {tool} links: median {format_number(median)} Gbit/s "
            f"(slowest {format_number(samples[slowest])})"
        )
    latency = {link.label: link.latency_ms for link in links if link.latency_ms is not None}
    if latency:
        highest = max(latency, key=lambda k: latency[k])
        evidence["median latency ms"] = format_number(statistics.median(latency.values()))
        evidence["highest latency"] = f"{highest}: {format_number(latency[highest])} ms"
        parts.append(f"latency median {format_number(statistics.median(latency.values()))} ms")
    return [
        Finding(
            CHECK_ID,
            Status.OK,
            f"{'; '.join(parts)}; no link stands out",
            evidence=evidence,
            expected="no slow link",
            subject="fleet",
        )
    ]


def _too_few_findings(
    groups: Mapping[str, Mapping[str, float]], metric: _Metric, slow: Sequence[Finding]
) -> list[Finding]:
    """For each tool with fewer than 3 measured links: that they were not compared with each other,
    and what judged them. SKIPPED without a minimum (nothing did), OK when every link reaches it;
    a link below it is a FAIL finding that says so itself."""
    out = []
    for tool, samples in groups.items():
        if len(samples) >= MIN_LINKS or any(label in f.evidence for f in slow for label in samples):
            continue
        words = _too_few_words(len(samples), tool, metric)
        evidence = {label: metric.show(value) for label, value in samples.items()}
        if metric.limit is None:
            out.append(
                Finding(
                    CHECK_ID,
                    Status.SKIPPED,
                    f"{words}; {metric.name} not judged: pass {metric.option} N, the rate each link "
                    "must reach",
                    evidence=evidence,
                    expected=f"{MIN_LINKS} or more measured links, or {metric.option}",
                    remediation=f"Give {metric.option} with the rate this network should carry "
                    "(e.g. 90 for 100 Gbit/s Ethernet), or measure 3 or more hosts.",
                    subject="fleet",
                )
            )
            continue
        out.append(
            Finding(
                CHECK_ID,
                Status.OK,
                f"{words}; judged against {metric.option} {format_number(metric.limit)}: every "
                f"one reaches it",
                evidence=evidence,
                expected=metric.expected(compared=False),
                subject="fleet",
            )
        )
    return out


def _common_hosts(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The hosts every (src, dst) pair has, in the first pair's order."""
    common = set(pairs[0])
    for pair in pairs[1:]:
        common &= set(pair)
    return [h for h in pairs[0] if h in common]


def _measured(link: Link) -> str:
    numbers = f"{format_number(link.gbits_per_s)} Gbit/s, {format_number(link.latency_ms)} ms"
    return f"{numbers}: {link.error or 'measured'}"
