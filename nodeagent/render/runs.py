"""The report document as the renderers read it: validated once where a renderer takes it
(nodeagent.api.report), then one view per host.

Every renderer (JUnit, Prometheus, Markdown/HTML, Slurm, text) takes the run's JSON document, never
the engine's objects, so a document read back from a file, pulled from a remote agent or gathered
over a fleet renders the same way. A fleet document renders as one section (JUnit suite,
Prometheus `host` label, Slurm line) per host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.api.report import (
    Bench,
    CheckReport,
    CheckRun,
    Document,
    Finding,
    FleetDocument,
    HostError,
    HostFailure,
    HostResult,
    RunResult,
    Verdict,
    parse_document,
)
from nodeagent.core.finding import Status

# Statuses someone has to act on, worst first (the order of nodeagent.core.finding.Status's ranks).
ATTENTION = (Status.FAIL, Status.UNKNOWN, Status.WARN)
SOURCE = "report document"  # how an error names a document given to a renderer


def document(doc: Mapping[str, Any] | Document) -> Document:
    """The document validated (once: a model is taken as it is); UsageError naming the field."""
    if isinstance(doc, CheckReport | FleetDocument):
        return doc
    return parse_document(doc, SOURCE)


@dataclass(frozen=True)
class HostRun:
    """One host's part of a document: its checks and findings, or the error that kept it out."""

    host: str
    status: Status
    started: float | None  # None: not known (a fleet host without a result, a merged report)
    duration_s: float | None  # None: not a finite number
    checks: Sequence[CheckRun]
    findings: Sequence[Finding]
    timed_out: frozenset[str]  # ids of the checks cut at a time limit or the run's budget
    error: HostError | None  # a fleet host that gave no result
    address: str | None
    nodeagent: str | None  # the version that wrote the host's own document, when it says
    playbook: str | None
    budget_s: float | None
    verdict: Verdict | None
    bench: Bench | None

    def findings_of(self, check_id: str) -> list[Finding]:
        return [f for f in self.findings if f.check_id == check_id]


def host_runs(doc: Document) -> list[HostRun]:
    """The document as one view per host: itself for a run, each host's entry for a fleet."""
    if isinstance(doc, FleetDocument):
        return [
            _failed(name, entry) if isinstance(entry, HostFailure) else _ran(name, entry)
            for name, entry in doc.hosts.items()
        ]
    return [_ran(doc.host, doc)]


def _ran(name: str, run: RunResult) -> HostRun:
    cut = {*run.timed_out, *(c.id for c in run.checks if c.timed_out)}
    return HostRun(
        host=name,
        status=run.status,
        started=finite(run.started),
        duration_s=finite(run.duration_s),
        checks=run.checks,
        findings=run.findings,
        timed_out=frozenset(cut),
        error=None,
        address=run.address if isinstance(run, HostResult) else None,
        nodeagent=run.nodeagent,
        playbook=run.playbook,
        budget_s=run.budget_s,
        verdict=run.verdict,
        bench=run.bench,
    )


def _failed(name: str, entry: HostFailure) -> HostRun:
    return HostRun(
        host=name,
        status=Status.FAIL,
        started=None,
        duration_s=finite(entry.duration_s),
        checks=(),
        findings=(),
        timed_out=frozenset(),
        error=entry.error,
        address=entry.address,
        nodeagent=None,
        playbook=None,
        budget_s=None,
        verdict=None,
        bench=None,
    )


def finite(value: float | None) -> float | None:
    """`value` when it is a finite number (JSON from Python may carry NaN or Infinity), else None."""
    return value if value is not None and math.isfinite(value) else None


def attention(findings: Sequence[Finding]) -> list[Finding]:
    """The findings at FAIL, UNKNOWN or WARN, worst first (stable within a status)."""
    keep = [f for f in findings if f.status in ATTENTION]
    return sorted(keep, key=lambda f: -f.status.rank)


def label(finding: Finding) -> str:
    """`check/subject` (or the check alone), as the terminal table names a finding."""
    subject = finding.subject.strip()  # a blank subject is none
    return f"{finding.check_id}/{subject}" if subject else finding.check_id
