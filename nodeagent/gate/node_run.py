"""One node's run: the engine's checks on a host, then the playbook's thresholds and the baseline
on the node's values. `nodeagent check` makes it on this node (or a recording), and a fleet makes
it on each node's pulled recording, so a node is judged alike however it was reached; and the
`nodeagent check` a node runs itself for a fleet (its own agent, a Slurm step)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeagent import engine
from nodeagent.gate import judge

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook
    from nodeagent.host import Host


@dataclass
class NodeRun:
    """The results as they finish; `report` holds them in the checks' order once exhausted.
    `facts`: the node's facts when they were collected already (a fleet collects them from the
    pulled recording), whose values the thresholds and the baseline judge; else the values come
    from facts collected without commands (nodeagent.gate.judge.values_of)."""

    host: Host
    checks: Sequence[Check[Any, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = engine.DEFAULT_TIMEOUT_S
    playbook: Playbook | None = None
    baseline: Baseline | None = None
    budget_s: float | None = None  # the whole run's limit (preflight); None: each check's own
    workers: int = engine.DEFAULT_WORKERS
    facts: Mapping[str, Any] | None = None
    report: engine.Report | None = None

    @property
    def judging(self) -> bool:
        return (self.playbook is not None and bool(self.playbook.thresholds)) or self.baseline is not None

    def __iter__(self) -> Iterator[engine.CheckResult]:
        """Each check's result as it finishes; then, when the playbook's thresholds or the baseline
        judge, each result they re-judged again (the same check id: it replaces the first) and
        the results of the rules themselves."""
        start = time.perf_counter()
        by_id: dict[str, engine.CheckResult] = {}
        ran = engine.run(self.host, self.checks, self.params, self.timeout_s, self.workers, self.budget_s)
        for result in ran:
            by_id[result.check_id] = result
            yield result
        report = engine.Report(self.host.name)
        report.results = [by_id[c.id] for c in self.checks if c.id in by_id]
        if self.judging:
            before = set(map(id, report.results))
            report.results = self._judged(report)
            # Re-judged results again (the screens replace a check's result by its id), then the rules'.
            yield from (r for r in report.results if id(r) not in before)
        report.duration_s = time.perf_counter() - start
        self.report = report

    def finish(self) -> engine.Report:
        """The whole run's report."""
        for _ in self:
            pass
        assert self.report is not None
        return self.report

    def _judged(self, report: engine.Report) -> list[engine.CheckResult]:
        values = judge.values_of(self.host, report, self.facts)
        return judge.judged(report.results, values, self.playbook, self.baseline, self.host.name)


def agent_check_argv(check_ids: Sequence[str], timeout_s: float, root: str | None = None) -> list[str]:
    """`nodeagent check` as a node runs it for the fleet (over SSH or as a Slurm step): its report
    and facts as JSON, the fleet's checks and time limit, and `root` (a path on the node) when given."""
    argv = [
        "check",
        "--format",
        "json",
        "--facts",
        "--only",
        ",".join(check_ids),
        "--timeout",
        f"{timeout_s:g}",
    ]
    return argv + (["--root", root] if root else [])
