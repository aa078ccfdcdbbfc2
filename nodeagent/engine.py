"""The engine: runs checks against one host, each isolated and time-limited, and streams results.

CLI, TUI, cluster runner and pre-flight all consume `run` (or `run_report`); none has its own
way of running checks.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.api.check import Check
from nodeagent.core import pool
from nodeagent.core.finding import Finding, Status, documents, worst
from nodeagent.facts import node
from nodeagent.host import Host

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_WORKERS = 4


@dataclass(frozen=True)
class CheckResult:
    check_id: str
    title: str
    findings: list[Finding]
    duration_s: float
    timed_out: bool = False  # cut at its time limit or at the run's budget

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)


@dataclass
class Report:
    host: str
    results: list[CheckResult] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    duration_s: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.value,
            "started": self.started,
            "duration_s": round(self.duration_s, 4),
            "checks": [
                {
                    "id": r.check_id,
                    "title": r.title,
                    "status": r.status.value,
                    "duration_s": round(r.duration_s, 4),
                    "timed_out": r.timed_out,
                }
                for r in self.results
            ],
            "findings": documents(self.findings),
        }


def _crash_finding(check: Check[Any, Any], exc: BaseException) -> Finding:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" if frame else "?"
    return Finding(
        check.id,
        Status.UNKNOWN,
        f"{check.title}: the check failed ({type(exc).__name__}: {exc})",
        evidence={"exception": f"{type(exc).__name__}: {exc}", "raised at": where},
        remediation="This is a bug in nodeagent or an input it does not understand: please report it "
        "with a snapshot (`nodeagent snapshot -o node.tar.gz`).",
    )


def _run_one(check: Check[Any, Any], host: Host, params: Any) -> tuple[list[Finding], float]:
    start = time.perf_counter()
    try:
        findings = check.run(host, params)
    except Exception as exc:  # any bug or bad input in one check becomes its UNKNOWN, never a crash
        findings = [_crash_finding(check, exc)]
    return [_stamp(f, host.name) for f in findings], time.perf_counter() - start


def _stamp(finding: Finding, host_name: str) -> Finding:
    return replace(finding, host=host_name)


def _timeout_result(check: Check[Any, Any], host: Host, overdue: pool.Overdue, ran_s: float) -> CheckResult:
    if overdue.budget:
        summary = f"{check.title}: cut at the run's budget of {overdue.limit_s:g}s"
        evidence = {"budget_s": f"{overdue.limit_s:g}", "ran_s": f"{ran_s:.2f}"}
        remediation = (
            "The gate's time budget ran out before this check finished (or started): give a larger "
            "--budget, or leave the check out of the playbook if it is slow on this node."
        )
    else:
        summary = f"{check.title}: did not finish within {overdue.limit_s:g}s"
        evidence = {"timeout_s": f"{overdue.limit_s:g}"}
        remediation = (
            "A read or command hung (an unresponsive driver, mount or tool?); "
            "look at the paths and commands this check uses."
        )
    finding = Finding(
        check.id, Status.UNKNOWN, summary, evidence=evidence, remediation=remediation, host=host.name
    )
    return CheckResult(check.id, check.title, [finding], ran_s, timed_out=True)


def run(
    host: Host,
    checks: Sequence[Check[Any, Any]],
    params: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int = DEFAULT_WORKERS,
    budget_s: float | None = None,
) -> Iterator[CheckResult]:
    """Run `checks` on `host`, yielding each result as it completes.

    `params` maps a check id to its parameter object (see Check.make_params); missing ids get
    defaults. A check that raises yields one UNKNOWN finding with the error. A check still running
    `timeout_s` after it started yields UNKNOWN and is abandoned (nodeagent.core.pool: daemon workers,
    a fresh one replacing the stuck one). Facts shared by several checks are collected once
    (Host.memo).
    """
    host.refresh()
    resolved = {c.id: (params or {}).get(c.id) or c.make_params() for c in checks}

    def one(check: Check[Any, Any]) -> tuple[list[Finding], float]:
        return _run_one(check, host, resolved[check.id])

    for done in pool.bounded(checks, one, workers, lambda _: timeout_s, "nodeagent-check", budget_s):
        check = done.item
        if isinstance(done.outcome, pool.Overdue):
            yield _timeout_result(check, host, done.outcome, done.duration_s)
        else:
            findings, duration = done.outcome
            yield CheckResult(check.id, check.title, findings, duration)


def run_report(
    host: Host,
    checks: Sequence[Check[Any, Any]],
    params: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int = DEFAULT_WORKERS,
    budget_s: float | None = None,
) -> Report:
    """All results of `run`, in the order the checks were given."""
    report = Report(host.name)
    start = time.perf_counter()
    by_id = {r.check_id: r for r in run(host, checks, params, timeout_s, workers, budget_s)}
    report.results = [by_id[c.id] for c in checks if c.id in by_id]
    report.duration_s = time.perf_counter() - start
    return report


# `nodeagent facts` reads what every check reads, and more (the whole PCI tree, `nvidia-smi`): a
# minute is many times what a large node takes (seconds), and bounds a hung read or a hostile tree.
FACTS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class FactsResult:
    """The node's facts document, or None when collecting them did not finish within `timeout_s`
    (abandoned like an overdue check), with the reason."""

    doc: dict[str, Any] | None
    duration_s: float
    reason: str | None = None


def collect_facts(host: Host, timeout_s: float = FACTS_TIMEOUT_S, commands: bool = True) -> FactsResult:
    """facts.node.collect under the engine's time limit (the same pool as the checks: a daemon
    worker, abandoned when overdue). An exception is a reason, never a crash."""

    def one(_: int) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return node.collect(host, commands=commands), None
        except Exception as exc:  # as a check's crash: the reason, with where it was raised
            frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" at {frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" if frame else ""
            return None, f"the facts could not be collected ({type(exc).__name__}: {exc}{where})"

    for done in pool.bounded([0], one, 1, lambda _: timeout_s, "nodeagent-facts"):
        if isinstance(done.outcome, pool.Overdue):
            overdue = (
                f"not collected: did not finish within {timeout_s:g}s (a read or command hung, or the "
                "tree is too large to read in that time)"
            )
            return FactsResult(None, done.duration_s, overdue)
        doc, reason = done.outcome
        return FactsResult(doc, done.duration_s, reason)
    return FactsResult(None, 0.0, "not collected")
