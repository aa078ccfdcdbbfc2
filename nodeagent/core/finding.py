"""Findings: what a check reports, and the order of their statuses."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass


class Status(enum.Enum):
    """A finding's status.

    Severity order, lowest first: SKIPPED < OK < WARN < UNKNOWN < FAIL. UNKNOWN (the check could
    not decide) ranks above WARN, because a gate that cannot see must not pass silently, but below
    FAIL, so that a real failure is never masked by a check that crashed next to it.
    """

    SKIPPED = "SKIPPED"
    OK = "OK"
    WARN = "WARN"
    UNKNOWN = "UNKNOWN"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def exit_code(self) -> int:
        """The process exit code when this is the worst status: 0 OK/SKIPPED, 1 WARN, 2 FAIL, 3 UNKNOWN."""
        return _EXIT[self]


_RANK = {Status.SKIPPED: 0, Status.OK: 1, Status.WARN: 2, Status.UNKNOWN: 3, Status.FAIL: 4}
_EXIT = {Status.SKIPPED: 0, Status.OK: 0, Status.WARN: 1, Status.UNKNOWN: 3, Status.FAIL: 2}
# The order of every report: the worst first.
WORST_FIRST = tuple(sorted(Status, key=lambda s: -_RANK[s]))


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status, SKIPPED when there is none."""
    return max(statuses, key=lambda s: s.rank, default=Status.SKIPPED)


# Open, like every object of a report (nodeagent.api.report): a reader keeps to the fields it knows.
# The fields are declared in the order a report writes them; `host` and `subject` are keyword
# arguments, so that a check writes `Finding(id, status, summary, evidence, ...)`.
@dataclass(frozen=True, config=ConfigDict(extra="allow"))
class Finding:
    """One observation of one check on one host, as the check makes it and a report holds it.

    `evidence` maps where a value was read (a path or a command) to the value seen there.
    `subject` names what the finding is about (a device, an interface, "cpu") so findings of one
    check can be told apart and compared across hosts. `fix` names the tuner that addresses it.
    """

    check_id: Annotated[str, Field(min_length=1, description="The check that made it.")]
    host: str = Field(default="", kw_only=True)
    status: Status
    subject: str = Field(
        default="", kw_only=True, description='What the finding is about: a device, an interface, "cpu".'
    )
    summary: str
    evidence: Mapping[str, str] = Field(
        default_factory=dict,
        description="Where a value was read (a path or a command) -> the value seen there.",
    )
    expected: str = ""
    remediation: str = ""
    fix: str | None = Field(default=None, description="The tuner that addresses it, if any.")


_FINDINGS = TypeAdapter(list[Finding])


def documents(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """The findings as a report holds them: every field, in order, a status as its word."""
    dumped: list[dict[str, Any]] = _FINDINGS.dump_python(list(findings), mode="json")
    return dumped


NOT_RECORDED = "not recorded"


def not_recorded(check_id: str, path: str, subject: str, what: str) -> Finding:
    """SKIPPED because a recording does not hold `path` (Host.recorded): that says nothing about the
    machine, so `what` is not judged, and nothing is claimed absent."""
    return Finding(
        check_id,
        Status.SKIPPED,
        f"{NOT_RECORDED}: {path} ({what} not judged)",
        {path: NOT_RECORDED},
        expected=f"{path} in the recording",
        remediation="Record the node again with `nodeagent snapshot` (it records what every check reads), "
        "or mount the node's /sys and /proc whole.",
        subject=subject,
    )


def skipped(check_id: str, reason: str, evidence: Mapping[str, str] | None = None) -> Finding:
    return Finding(check_id, Status.SKIPPED, reason, evidence=dict(evidence or {}))


def unparsable(
    check_id: str, problems: Iterable[str], what: str, compare_with: str, subject: str = "consistency"
) -> list[Finding]:
    """One WARN listing values that were present but could not be parsed ("path: what was wrong").

    `what` names the files ("huge page file(s)"), `compare_with` the tool to cross-check with.
    """
    items = list(problems)
    if not items:
        return []
    return [
        Finding(
            check_id,
            Status.WARN,
            f"{len(items)} {what} could not be parsed",
            {q.split(": ", 1)[0]: q.split(": ", 1)[-1] for q in items},
            expected="well-formed values",
            remediation="A corrupt or truncated recording, or a kernel or driver bug: record the snapshot "
            f"again, or compare with {compare_with}.",
            subject=subject,
        )
    ]
