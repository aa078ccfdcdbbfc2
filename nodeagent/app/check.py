"""Checking one node (this machine or a recording): its checks with a playbook's parameters, then
the playbook's thresholds and the baseline's comparison, as one stream of results and one report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.engine import CheckResult, FactsResult, Report
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook
    from nodeagent.host import Host

DEFAULT_TIMEOUT_S = 20.0  # seconds one check may take


@dataclass(frozen=True)
class CheckRequest:
    """Which node, which checks (--only/--skip within the playbook's), and what judges them."""

    root: str | None = None  # None: this machine; else a recorded tree or archive
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    playbook: Playbook | None = None
    baseline: Baseline | None = None
    budget_s: float | None = None  # the whole run's limit (preflight); None: each check's own
    hostname: str | None = None  # names the node in the report (a pod's node); None: its own name

    def checks(self) -> list[Check[Any, Any]]:
        from nodeagent.gate import judge

        return judge.selected_checks(self.playbook, list(self.only), list(self.skip))

    def argv(self) -> list[str]:
        """The request as `nodeagent check` arguments for a node of a fleet, which reports as JSON
        (the playbook's selection made here; its rules and the baseline judge here, not there)."""
        from nodeagent.cluster.runner import agent_check_argv

        return agent_check_argv([c.id for c in self.checks()], self.timeout_s, self.root)


@dataclass
class CheckRun:
    """A finished run: the report (results in the checks' order, extras last) and its document."""

    report: Report
    document: dict[str, Any]
    facts: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


@dataclass
class _Stream:
    """The results as they finish; `report` holds them in the checks' order once exhausted."""

    request: CheckRequest
    host: Host
    report: Report | None = None
    selected: list[Check[Any, Any]] = field(default_factory=list)

    def __iter__(self) -> Iterator[CheckResult]:
        import time

        from nodeagent import engine
        from nodeagent.gate import judge

        req = self.request
        self.selected = req.checks()
        params = judge.check_params(req.playbook, self.selected)
        start = time.perf_counter()
        by_id: dict[str, CheckResult] = {}
        for result in engine.run(self.host, self.selected, params, req.timeout_s, budget_s=req.budget_s):
            by_id[result.check_id] = result
            yield result
        report = engine.Report(self.host.name)
        report.results = [by_id[c.id] for c in self.selected if c.id in by_id]
        report.duration_s = time.perf_counter() - start
        if (req.playbook is not None and req.playbook.thresholds) or req.baseline is not None:
            extra_start = time.perf_counter()
            values = judge.values_of(self.host, report)
            before = set(map(id, report.results))
            report.results = judge.judged(report.results, values, req.playbook, req.baseline, self.host.name)
            report.duration_s += time.perf_counter() - extra_start
            # Re-judged results again (the screens replace a check's result by its id), then the rules'.
            yield from (r for r in report.results if id(r) not in before)
        self.report = report


def stream(request: CheckRequest, host: Host) -> Iterator[CheckResult]:
    """The results on `host` as each check finishes; then, with a playbook's thresholds or a
    baseline, each check result they re-judged again (the same check id: it replaces the first)
    and the results of the rules themselves."""
    yield from _Stream(request, host)


def run_on(request: CheckRequest, host: Host, with_facts: bool = False) -> CheckRun:
    """The whole run on an open host, and its JSON document (the gate's fields when a playbook)."""
    from nodeagent.gate import judge

    results = _Stream(request, host)
    for _ in results:
        pass
    assert results.report is not None
    doc = judge.document(results.report, request.playbook, request.budget_s, None)
    facts = None
    if with_facts:
        from nodeagent.facts import node

        facts = node.collect(host)
    return CheckRun(results.report, doc, facts)


def run(request: CheckRequest, with_facts: bool = False) -> CheckRun:
    """`run_on` the request's node."""
    from nodeagent.host import open_host

    with open_host(request.root, name=request.hostname) as host:
        return run_on(request, host, with_facts)


def facts(root: str | None, timeout_s: float | None = None, hostname: str | None = None) -> FactsResult:
    """The node's facts document, collected within `timeout_s` (the engine's limit by default),
    naming the node `hostname` when given."""
    from nodeagent import engine
    from nodeagent.host import open_host

    with open_host(root, name=hostname) as host:
        return engine.collect_facts(host, timeout_s=timeout_s or engine.FACTS_TIMEOUT_S)


def node_name(root: str | None) -> str:
    from nodeagent.host import open_host

    with open_host(root) as host:
        return str(host.name)
