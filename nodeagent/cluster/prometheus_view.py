"""The fleet view from Prometheus: every node's last nodeagent run as node_exporter's textfile
collector exposes it (the families of nodeagent.render.prometheus), read from the Prometheus that
scrapes the nodes, without contacting them: `nodeagent fleet --prometheus URL`.

Which nodes: every `host` (nodeagent's own name for its node; `exported_host` when a target label
`host` took the name) whose nodeagent metrics Prometheus holds now or held within `lookback_s`;
with a selector, also every scrape target it matches (`up{SELECTOR}`), named by its `instance`
when it reported no nodeagent metrics within the lookback.

Each node's verdict keeps to nodeagent's rule that FAIL needs positive evidence of a fault:

- a fresh run (started at most `stale_after_s` before Prometheus's now): that run's status, each
  check's status and the count of its findings;
- an older run: UNKNOWN naming its age, not the old status (the default, 900 s, is three times the
  DaemonSet's 300 s interval: two runs missed). A node that stopped running nodeagent is unseen,
  not healthy, and an old FAIL may have been repaired;
- a scrape target that is down: UNKNOWN naming the target and Prometheus's scrape error. An
  exporter that does not answer (stopped, or the path from Prometheus to it broken) is no evidence
  about the node's hardware or settings, which is what nodeagent judges; it only means nodeagent
  cannot see the node, which is UNKNOWN, and UNKNOWN still fails a gate (exit 3);
- metrics gone while the target answers (the .prom file removed, a fleet file that stopped
  listing the host), a run the metrics do not date, a host a fleet run could not reach: UNKNOWN,
  each with its reason.

The comparison (nodeagent.compare.fleet) takes the nodes with a fresh run: nodeagent's version and
playbook and each check's status (drift), and benchmark throughput (outliers).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeagent.cluster.prometheus import Client, selector, selector_matchers, status_of
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import HostOutcome
from nodeagent.compare import fleet
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, documents, worst

if TYPE_CHECKING:
    from nodeagent.cluster.prometheus import Sample, Target
    from nodeagent.compare.values import Value

# Three times the interval of the shipped DaemonSet (k8s-daemonset.yaml, 300 s): a node is stale
# once it missed two runs, so one slow or skipped run does not make it UNKNOWN.
DEFAULT_STALE_AFTER_S = 900.0
# How far back a node that reported and then went quiet is still listed (as UNKNOWN). A day covers
# a night without anyone looking; Prometheus keeps 15 days by default.
DEFAULT_LOOKBACK_S = 86400.0
DEFAULT_TIMEOUT_S = 10.0

SOURCE_CHECK_ID = "prometheus"  # findings about what Prometheus shows (stale, down, gone)
ATTENTION = (Status.FAIL, Status.UNKNOWN, Status.WARN)

# The families read now (nodeagent_findings is read apart, only its non-zero counts).
CURRENT_FAMILIES = (
    "nodeagent_info",
    "nodeagent_run_status",
    "nodeagent_run_duration_seconds",
    "nodeagent_run_timestamp_seconds",
    "nodeagent_check_status",
    "nodeagent_check_duration_seconds",
    "nodeagent_check_timed_out",
    "nodeagent_host_error",
    "nodeagent_bench_images_per_second",
)

# How each node was seen (a host document's "seen", counted in the "prometheus" section).
FRESH = "fresh"
STALE = "stale"
TARGET_DOWN = "target down"
GONE = "metrics gone"
UNDATED = "undated"
NO_RESULT = "no result"
NEVER = "never reported"
CLOCK = "clock ahead"

TargetKey = tuple[str, str]  # (job, instance): the labels Prometheus puts on every scraped series


@dataclass(frozen=True)
class PrometheusFleetRequest:
    """Which Prometheus, which series, and when a node's last run is too old to stand."""

    url: str
    selector: str | None = None
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    lookback_s: float = DEFAULT_LOOKBACK_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    def matchers(self) -> str:
        """The selector's label matchers; UsageError for a bad selector or a bad number."""
        for option, value in (
            ("--stale-after", self.stale_after_s),
            ("--lookback", self.lookback_s),
            ("--timeout", self.timeout_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"{option} {value!r}: give a positive number of seconds")
        if self.lookback_s < self.stale_after_s:
            raise UsageError(
                f"--lookback {self.lookback_s:g} is shorter than --stale-after {self.stale_after_s:g}: "
                "a node that went quiet would drop out of the view before it counts as stale"
            )
        return selector_matchers(self.selector)


# --- what Prometheus holds --------------------------------------------------------------------


@dataclass
class NodeRun:
    """One host's nodeagent series from one scrape target, at the evaluation time."""

    host: str
    target: TargetKey
    status: float | None = None
    started: float | None = None
    duration_s: float | None = None
    version: str | None = None
    playbook: str | None = None
    checks: dict[str, float] = field(default_factory=dict)
    check_durations: dict[str, float] = field(default_factory=dict)
    timed_out: set[str] = field(default_factory=set)
    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # check -> status -> count
    host_error: str | None = None  # the kind, for a host a fleet run could not reach
    bench: dict[str, float] = field(default_factory=dict)  # config -> median images/s


@dataclass(frozen=True)
class LastSeen:
    """The last values of a host's run within the lookback (it may have no series now)."""

    host: str
    target: TargetKey
    status: float | None
    started: float | None


@dataclass
class Observed:
    """Everything the view is made of, read at one evaluation time of Prometheus's clock."""

    url: str
    matchers: str
    at: float
    runs: list[NodeRun]
    last_seen: list[LastSeen]
    targets: dict[TargetKey, Target]
    selected: list[TargetKey] | None  # the targets of up{SELECTOR}, when a selector was given
    warnings: list[str] = field(default_factory=list)


def observe(client: Client, request: PrometheusFleetRequest) -> Observed:
    """Query Prometheus for the view: its now, the nodeagent series then, what each host last
    showed within the lookback, and the targets' health."""
    matchers = request.matchers()
    at = client.now()
    names = "|".join(CURRENT_FAMILIES)
    current = client.query(selector("", matchers, f'__name__=~"{names}"'), at)
    findings = client.query(f"{selector('nodeagent_findings', matchers)} > 0", at)
    window = f"[{math.ceil(request.lookback_s)}s]"
    last_status = client.query(f"last_over_time({selector('nodeagent_run_status', matchers)}{window})", at)
    last_started = client.query(
        f"last_over_time({selector('nodeagent_run_timestamp_seconds', matchers)}{window})", at
    )
    selected = (
        [_target_key(s.labels) for s in client.query(selector("up", matchers), at)] if matchers else None
    )
    targets = {t.key: t for t in client.targets()}
    return Observed(
        client.url,
        matchers,
        at.seconds,
        runs=node_runs(current, findings),
        last_seen=last_seen(last_status, last_started),
        targets=targets,
        selected=selected,
        warnings=client.warnings(),
    )


def host_of(labels: Mapping[str, str]) -> str | None:
    """The node a series is about: nodeagent's `host` label, renamed `exported_host` by Prometheus
    when the target has a `host` label of its own (honor_labels: false, the default)."""
    return labels.get("exported_host") or labels.get("host") or None


def _target_key(labels: Mapping[str, str]) -> TargetKey:
    return (labels.get("job", ""), labels.get("instance", ""))


def node_runs(current: Iterable[Sample], findings: Iterable[Sample] = ()) -> list[NodeRun]:
    """The series of the nodeagent families, one NodeRun per (host, target); series without a
    host label are not nodeagent's and are left out."""
    runs: dict[tuple[str, TargetKey], NodeRun] = {}

    def run_of(labels: Mapping[str, str]) -> NodeRun | None:
        host = host_of(labels)
        if host is None:
            return None
        key = (host, _target_key(labels))
        return runs.setdefault(key, NodeRun(host, key[1]))

    for sample in current:
        run = run_of(sample.labels)
        if run is not None:
            _add_sample(run, sample.labels.get("__name__", ""), sample.labels, sample.value)
    for sample in findings:
        run = run_of(sample.labels)
        check, status = sample.labels.get("check"), sample.labels.get("status")
        if run is not None and check and status and math.isfinite(sample.value):
            run.findings.setdefault(check, {})[status] = int(sample.value)
    return list(runs.values())


def _add_sample(run: NodeRun, name: str, labels: Mapping[str, str], value: float) -> None:
    check = labels.get("check", "")
    if name == "nodeagent_run_status":
        run.status = value
    elif name == "nodeagent_run_timestamp_seconds":
        run.started = value if math.isfinite(value) else None
    elif name == "nodeagent_run_duration_seconds":
        run.duration_s = value if math.isfinite(value) and value >= 0 else None
    elif name == "nodeagent_info":
        run.version = labels.get("version") or None
        run.playbook = labels.get("playbook") or None
    elif name == "nodeagent_check_status" and check:
        run.checks[check] = value
    elif name == "nodeagent_check_duration_seconds" and check and math.isfinite(value) and value >= 0:
        run.check_durations[check] = value
    elif name == "nodeagent_check_timed_out" and check and value == 1:
        run.timed_out.add(check)
    elif name == "nodeagent_host_error" and value == 1:
        run.host_error = labels.get("kind") or "error"
    elif name == "nodeagent_bench_images_per_second" and labels.get("stat") == "median":
        config = labels.get("config")
        if config and math.isfinite(value):
            run.bench[config] = value


def last_seen(statuses: Iterable[Sample], started: Iterable[Sample]) -> list[LastSeen]:
    """Each (host, target)'s last run status and start time within the lookback."""
    status: dict[tuple[str, TargetKey], float] = {}
    when: dict[tuple[str, TargetKey], float] = {}
    for samples, into in ((statuses, status), (started, when)):
        for s in samples:
            host = host_of(s.labels)
            if host is not None and math.isfinite(s.value):
                into[(host, _target_key(s.labels))] = s.value
    return [LastSeen(h, t, status.get((h, t)), when.get((h, t))) for h, t in sorted({*status, *when})]


# --- the view ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One node's verdict from the metrics, as the fleet report holds it."""

    outcome: HostOutcome
    seen: str
    values: dict[str, Value] | None  # what the comparison takes (fresh runs only)


def fleet_report(observed: Observed, request: PrometheusFleetRequest, duration_s: float = 0.0) -> FleetReport:
    """The fleet report of what Prometheus holds (see the module docstring); pure."""
    judged: dict[str, Judged] = {}
    notes = [f"Prometheus warned: {w}" for w in observed.warnings]
    for host, (target, run, seen) in _nodes(observed, notes).items():
        judged[host] = judge_node(host, target, run, seen, observed.targets.get(target), observed.at, request)
    values = {name: j.values for name, j in judged.items() if j.values is not None}
    report = FleetReport({n: j.outcome for n, j in sorted(judged.items())}, fleet.compare(values), duration_s)
    counts: dict[str, int] = {}
    for j in judged.values():
        counts[j.seen] = counts.get(j.seen, 0) + 1
    source: dict[str, Any] = {
        "url": observed.url,
        "selector": "{" + observed.matchers + "}" if observed.matchers else None,
        "evaluated_at": observed.at,
        "stale_after_s": request.stale_after_s,
        "lookback_s": request.lookback_s,
        "nodes": dict(sorted(counts.items())),
    }
    report.extra = {"prometheus": {k: v for k, v in source.items() if v is not None}}
    if notes:
        report.extra["notes"] = notes
    return report


def _nodes(
    observed: Observed, notes: list[str]
) -> dict[str, tuple[TargetKey, NodeRun | None, LastSeen | None]]:
    """Each node once: the target it reports through now (the newest run when several do), else
    the one it last reported through; then the selector's targets that never reported."""
    found: dict[str, tuple[TargetKey, NodeRun | None, LastSeen | None]] = {}
    seen_by_key = {(s.host, s.target): s for s in observed.last_seen}
    for run in sorted(observed.runs, key=lambda r: -(r.started or -math.inf)):
        if run.host in found:
            notes.append(
                f"{run.host} reports through {_show_target(run.target)} too; the newest run is shown"
            )
            continue
        found[run.host] = (run.target, run, seen_by_key.get((run.host, run.target)))
    for seen in sorted(observed.last_seen, key=lambda s: -(s.started or -math.inf)):
        if seen.host not in found:
            found[seen.host] = (seen.target, None, seen)
    reporting = {target for target, _run, _seen in found.values()}
    for target in observed.selected or ():
        if target not in reporting:
            found.setdefault(target[1] or target[0], (target, None, None))
    return found


def judge_node(
    host: str,
    target: TargetKey,
    run: NodeRun | None,
    seen: LastSeen | None,
    scrape: Target | None,
    at: float,
    request: PrometheusFleetRequest,
) -> Judged:
    """One node's verdict (module docstring): down, gone, unreachable, undated or stale is
    UNKNOWN with its reason; a fresh run stands as it reported."""
    started = run.started if run is not None else (seen.started if seen is not None else None)
    last = _status_word(run.status if run is not None else (seen.status if seen is not None else None))
    age = at - started if started is not None else None
    context = _context(target, scrape, age, last)
    ran_then = _ran_then(age, last)
    if scrape is not None and scrape.health == "down":
        why = scrape.last_error or "no error given"
        return _unknown(host, TARGET_DOWN, context, _target_down(host, target, why, ran_then))
    if run is None:
        return _unknown(host, NEVER if seen is None else GONE, context, _gone(host, target, ran_then, seen))
    if run.host_error is not None:
        return _unknown(host, NO_RESULT, context, _no_result(host, run.host_error))
    if age is None:
        return _unknown(host, UNDATED, context, _undated(host, last))
    if age > request.stale_after_s:
        return _unknown(host, STALE, context, _stale(host, age, request.stale_after_s, last))
    if -age > request.stale_after_s:
        return _unknown(host, CLOCK, context, _clock_ahead(host, -age))
    return _fresh(host, run, context)


def _context(target: TargetKey, scrape: Target | None, age: float | None, last: str | None) -> dict[str, Any]:
    """What the host's document says about where its metrics came from."""
    job, instance = target
    where: dict[str, Any] = {"job": job, "instance": instance}
    if scrape is not None:
        where |= {"health": scrape.health, "scrape_url": scrape.scrape_url}
        if scrape.last_error:
            where["last_error"] = scrape.last_error
    doc: dict[str, Any] = {"target": where}
    if age is not None:
        doc["age_s"] = round(age, 3)
    if last is not None:
        doc["last_status"] = last
    return doc


def _unknown(host: str, seen: str, context: dict[str, Any], finding: Finding) -> Judged:
    doc = {
        "host": host,
        "status": Status.UNKNOWN.value,
        "seen": seen,
        **context,
        "checks": [],
        "findings": documents([finding]),
    }
    return Judged(HostOutcome(host, context["target"]["instance"], doc), seen, None)


def _fresh(host: str, run: NodeRun, context: dict[str, Any]) -> Judged:
    checks = []
    findings: list[Finding] = []
    for check_id, value in sorted(run.checks.items()):
        status = _status(value)
        checks.append(
            {
                "id": check_id,
                "title": check_id,  # the metrics do not carry titles
                "status": status.value,
                "duration_s": run.check_durations.get(check_id, 0.0),
                "timed_out": check_id in run.timed_out,
            }
        )
        if status in ATTENTION:
            findings.append(_check_finding(host, check_id, value, status, run))
    status = worst([_status(run.status), *(Status(c["status"]) for c in checks)])
    doc: dict[str, Any] = {"host": host, "status": status.value, "seen": FRESH}
    if run.version:
        doc["nodeagent"] = run.version
    if run.playbook:
        doc["playbook"] = run.playbook
    context = {k: v for k, v in context.items() if k != "last_status"}  # it is "status" here
    doc |= {"started": run.started, **context, "checks": checks, "findings": documents(findings)}
    doc["timed_out"] = sorted(run.timed_out)
    outcome = HostOutcome(host, context["target"]["instance"], doc, duration_s=run.duration_s or 0.0)
    return Judged(outcome, FRESH, _values(run, checks))


def _values(run: NodeRun, checks: Sequence[Mapping[str, Any]]) -> dict[str, Value]:
    """The node's comparable values: what the metrics say that nodes of one fleet should share."""
    values: dict[str, Value] = {f"check.{c['id']}.status": c["status"] for c in checks}
    if run.version:
        values["nodeagent.version"] = run.version
    if run.playbook:
        values["nodeagent.playbook"] = run.playbook
    for config, rate in run.bench.items():
        values[f"bench.{config}.images_per_s"] = rate
    return values


def _status(value: float | None) -> Status:
    """The status a gauge stands for; UNKNOWN for a missing value or one nodeagent never writes."""
    status = status_of(value) if value is not None else None
    return status if status is not None else Status.UNKNOWN


def _status_word(value: float | None) -> str | None:
    status = status_of(value) if value is not None else None
    return status.value if status is not None else None


# --- the findings -----------------------------------------------------------------------------


def _check_finding(host: str, check_id: str, value: float, status: Status, run: NodeRun) -> Finding:
    counts = run.findings.get(check_id, {})
    shown = [f"{counts[s.value]} {s.value}" for s in ATTENTION if counts.get(s.value)]
    total = sum(counts.get(s.value, 0) for s in ATTENTION)
    what = f"{', '.join(shown)} finding{'' if total == 1 else 's'}" if shown else f"status {status.value}"
    if check_id in run.timed_out:
        what += ", cut at its time limit"
    evidence = {f'nodeagent_check_status{{check="{check_id}"}}': f"{value:g}"}
    for s in ATTENTION:
        if counts.get(s.value):
            evidence[f'nodeagent_findings{{check="{check_id}",status="{s.value}"}}'] = str(counts[s.value])
    return Finding(
        check_id,
        status,
        what,
        evidence,
        expected="0 (OK) or -1 (SKIPPED)",
        remediation=(
            f"The findings themselves (what was read, what to do) are in the node's report: run "
            f"`nodeagent check --only {check_id}` on {host}."
        ),
        subject="metrics",
        host=host,
    )


def _ran_then(age: float | None, last: str | None) -> str:
    if age is None:
        return "no nodeagent run seen within the lookback"
    return f"its last run seen started {age_text(age)} ago and reported {last or 'no status'}"


def _cannot_tell(
    summary: str, evidence: dict[str, str], *, expected: str, remediation: str, subject: str, host: str
) -> Finding:
    """What the metrics cannot tell about a node now: UNKNOWN, never a fault of the node."""
    return Finding(
        SOURCE_CHECK_ID,
        Status.UNKNOWN,
        summary,
        evidence,
        expected=expected,
        remediation=remediation,
        subject=subject,
        host=host,
    )


def _target_down(host: str, target: TargetKey, why: str, ran_then: str) -> Finding:
    job, instance = target
    return _cannot_tell(
        f"Prometheus cannot scrape {instance} (job {job}): {why}; {ran_then}",
        {f'up{{job="{job}",instance="{instance}"}}': "0"},
        expected="1: the exporter answers Prometheus",
        remediation=(
            "Start node_exporter on the node or mend the path from Prometheus to it. An exporter that "
            "does not answer says nothing about the node itself, so its status is unknown until it does."
        ),
        subject="scrape target",
        host=host,
    )


def _gone(host: str, target: TargetKey, ran_then: str, seen: LastSeen | None) -> Finding:
    job, instance = target
    if seen is None:
        summary = f"{instance} (job {job}) has shown no nodeagent metrics within the lookback"
    else:
        summary = f"no nodeagent metrics from {instance} (job {job}) now; {ran_then}"
    return _cannot_tell(
        summary,
        {f'nodeagent_run_status{{host="{host}"}}': "(no series)"},
        expected="nodeagent's metrics, rewritten every run",
        remediation=(
            "Check that nodeagent still runs on the node (the DaemonSet, a timer) and writes its .prom "
            "file into node_exporter's textfile folder (`node_textfile_mtime_seconds` shows the files)."
        ),
        subject="metrics",
        host=host,
    )


def _no_result(host: str, kind: str) -> Finding:
    return _cannot_tell(
        f"the fleet run that wrote these metrics got no result from it ({kind}); "
        "the metrics do not say when that was",
        {f'nodeagent_host_error{{host="{host}",kind="{kind}"}}': "1"},
        expected="a result from the node",
        remediation=f"Run `nodeagent check --cluster ...` again, or `nodeagent check` on {host} itself.",
        subject="fleet run",
        host=host,
    )


def _undated(host: str, last: str | None) -> Finding:
    return _cannot_tell(
        f"its metrics carry no nodeagent_run_timestamp_seconds, so its status ({last or 'none'}) "
        "cannot be dated",
        {f'nodeagent_run_timestamp_seconds{{host="{host}"}}': "(no series)"},
        expected="the run's start time",
        remediation="Write the metrics with `nodeagent check --output prometheus:PATH` (it dates each run).",
        subject="last run",
        host=host,
    )


def _stale(host: str, age: float, stale_after_s: float, last: str | None) -> Finding:
    return _cannot_tell(
        f"its last nodeagent run started {age_text(age)} ago, longer than {age_text(stale_after_s)} "
        f"(--stale-after); it reported {last or 'no status'} then",
        {f'time() - nodeagent_run_timestamp_seconds{{host="{host}"}}': f"{age:.0f}"},
        expected=f"at most {stale_after_s:g} s",
        remediation=(
            "nodeagent stopped running on the node (a DaemonSet pod or timer that stopped, a run that "
            f"hangs) or the node's clock is behind: look there; `nodeagent check` on {host} gives its "
            "status now."
        ),
        subject="last run",
        host=host,
    )


def _clock_ahead(host: str, ahead: float) -> Finding:
    return _cannot_tell(
        f"its last run is dated {age_text(ahead)} after Prometheus's now: its clock is wrong, so its "
        "metrics cannot be dated",
        {f'time() - nodeagent_run_timestamp_seconds{{host="{host}"}}': f"{-ahead:.0f}"},
        expected="a run in the past",
        remediation="Set the node's clock (chrony, systemd-timesyncd); the next run then counts.",
        subject="last run",
        host=host,
    )


def age_text(seconds: float) -> str:
    """A duration for people: "42s", "15m 3s", "2h 5m", "3d 4h"."""
    s = max(0, round(seconds))
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            rest = (s % size) // sub_size
            return f"{s // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{s}s"


def _show_target(target: TargetKey) -> str:
    return f"{target[1]} (job {target[0]})"


# --- the flow ---------------------------------------------------------------------------------


def run(request: PrometheusFleetRequest, client: Client | None = None) -> FleetReport:
    """The fleet view of what the Prometheus at `request.url` holds; its exit code is the worst
    status over the nodes, as for `check --cluster`."""
    request.matchers()  # a bad option fails before any request
    start = time.monotonic()
    observed = observe(client or Client(request.url, request.timeout_s), request)
    report = fleet_report(observed, request, time.monotonic() - start)
    if not report.outcomes:  # "all OK" over no nodes would pass a gate that saw nothing
        matched = f" matching {{{observed.matchers}}}" if observed.matchers else ""
        raise UsageError(
            f"Prometheus at {observed.url} holds no nodeagent metrics{matched} within the last "
            f"{age_text(request.lookback_s)} (--lookback) and no scrape target{matched}: check --selector, "
            "and that node_exporter's textfile collector exposes the file nodeagent writes"
        )
    return report


__all__ = [
    "DEFAULT_LOOKBACK_S",
    "DEFAULT_STALE_AFTER_S",
    "DEFAULT_TIMEOUT_S",
    "LastSeen",
    "NodeRun",
    "Observed",
    "PrometheusFleetRequest",
    "age_text",
    "fleet_report",
    "judge_node",
    "last_seen",
    "node_runs",
    "observe",
    "run",
]
