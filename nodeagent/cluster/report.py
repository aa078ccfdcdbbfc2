"""The fleet's report: each host's outcome, the fleet comparison, the exit code; its JSON document
(the tables are nodeagent.render.fleet).

JSON: `{hosts: {NAME: {status, address, duration_s, findings[], checks[]} | {status: FAIL, error:
{kind, message}}}, drift[], outliers[], bandwidth, summary}`. The exit code is the worst status over
the fleet, an unreachable host counting as FAIL: a gate must not pass a node it could not see.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.api.report import FleetSummary
from nodeagent.cluster.runner import HostOutcome
from nodeagent.compare import fleet
from nodeagent.compare.values import Value
from nodeagent.core.finding import Finding, Status, documents, worst


def host_status(outcome: HostOutcome) -> Status:
    if outcome.error is not None:
        return Status.FAIL
    doc = outcome.doc or {}
    try:
        return Status(doc.get("status", "UNKNOWN"))
    except ValueError:
        return Status.UNKNOWN


@dataclass
class FleetReport:
    outcomes: dict[str, HostOutcome]
    comparison: fleet.FleetComparison
    duration_s: float
    extra: dict[str, Any] | None = None  # further sections (inter-node bandwidth)
    extra_status: Status = Status.SKIPPED

    @classmethod
    def build(
        cls,
        outcomes: Mapping[str, HostOutcome],
        duration_s: float,
        compare: bool = True,
        lost_hardware: Status = Status.FAIL,
    ) -> FleetReport:
        """The report; with `compare`, a host whose hardware counts are below the fleet majority's
        gets a finding at `lost_hardware` (fleet.below_majority) in its own document."""
        values = {name: _values_of(o) for name, o in outcomes.items() if o.ok}
        comparison = fleet.compare(values) if compare else fleet.FleetComparison(len(values), [], [])
        short = fleet.below_majority(comparison, lost_hardware)
        return cls(
            {name: _with(o, short.get(name, [])) for name, o in outcomes.items()}, comparison, duration_s
        )

    @property
    def status(self) -> Status:
        return worst([*(host_status(o) for o in self.outcomes.values()), self.extra_status])

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def summary(self) -> FleetSummary:
        counts = Counter(host_status(o) for o in self.outcomes.values())
        return FleetSummary(
            hosts=len(self.outcomes),
            unreachable=sum(1 for o in self.outcomes.values() if not o.ok),
            by_status=dict(sorted(counts.items(), key=lambda item: item[0].value)),
            status=self.status,
            duration_s=round(self.duration_s, 3),
        )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "status": self.status.value,
            "summary": self.summary().model_dump(mode="json"),
            "hosts": {name: o.to_dict() for name, o in self.outcomes.items()},
            "drift": [d.model_dump() for d in self.comparison.drift],
            "outliers": [o.model_dump() for o in self.comparison.outliers],
        }
        if self.extra:
            doc |= self.extra
        return doc


def _values_of(outcome: HostOutcome) -> dict[str, Value]:
    """The host's comparable values: computed by the job where it ran (the runner's worker
    processes), else here."""
    if outcome.values is not None:
        return outcome.values
    return fleet.host_values(outcome.facts, (outcome.doc or {}).get("findings", []))


def _with(outcome: HostOutcome, found: list[Finding]) -> HostOutcome:
    """The outcome with the fleet's findings about its host added (and its status raised to them)."""
    if not found or outcome.doc is None:
        return outcome
    doc = dict(outcome.doc)
    doc["findings"] = [*doc.get("findings", []), *documents(found)]
    doc["status"] = worst([host_status(outcome), *(f.status for f in found)]).value
    return dataclasses.replace(outcome, doc=doc)
