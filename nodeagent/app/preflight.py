"""The pre-flight gate: a playbook's checks within a time budget, its thresholds and the baseline,
and the verdict whose exit code starts or stops a job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nodeagent.app import check
from nodeagent.gate import judge

if TYPE_CHECKING:
    from nodeagent.api.report import Verdict
    from nodeagent.engine import Report

# Exit code of a refused node whose worst status has no code of its own (WARN under --fail-on warn
# uses WARN's 1): the others are the worst status's code, 2 FAIL and 3 UNKNOWN, as for `check`.
EX_REFUSED = 1


@dataclass
class GateRun:
    report: Report
    verdict: Verdict
    document: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.allowed else (self.report.status.exit_code or EX_REFUSED)


def run(request: check.CheckRequest, fail_on: str | None = None) -> GateRun:
    """The gate on the request's node; `request.playbook` is required, its budget and fail-on level
    apply where the request does not set them."""
    pb = request.playbook
    assert pb is not None, "the gate judges by a playbook"
    budget_s = request.budget_s if request.budget_s is not None else (pb.budget_s or judge.DEFAULT_BUDGET_S)
    gated = replace(request, timeout_s=budget_s, budget_s=budget_s, only=(), skip=())
    ran = check.run(gated)
    v = judge.verdict(ran.report, fail_on or pb.fail_on)
    ran.document["verdict"] = v.model_dump()
    return GateRun(ran.report, v, ran.document)
