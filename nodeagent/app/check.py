"""Checking one node (this machine or a recording): its checks with a playbook's parameters, then
the playbook's thresholds and the baseline's comparison, as one stream of results and one report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodeagent import engine
from nodeagent.facts import node
from nodeagent.gate import judge
from nodeagent.gate.node_run import NodeRun, agent_check_argv
from nodeagent.host import open_host

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
        return judge.selected_checks(self.playbook, list(self.only), list(self.skip))

    def argv(self) -> list[str]:
        """The request as `nodeagent check` arguments for a node of a fleet, which reports as JSON
        (the playbook's selection made here; its rules and the baseline judge here, not there)."""
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


def node_run(request: CheckRequest, host: Host) -> NodeRun:
    """The request's run on `host` (nodeagent.gate.node_run): iterated, the results as each check
    finishes, then what the playbook's thresholds and the baseline re-judged."""
    selected = request.checks()
    params = judge.check_params(request.playbook, selected)
    return NodeRun(
        host, selected, params, request.timeout_s, request.playbook, request.baseline, request.budget_s
    )


def stream(request: CheckRequest, host: Host) -> Iterator[CheckResult]:
    """The results on `host` as each check finishes; then, with a playbook's thresholds or a
    baseline, each check result they re-judged again (the same check id: it replaces the first)
    and the results of the rules themselves."""
    yield from node_run(request, host)


def run_on(request: CheckRequest, host: Host, with_facts: bool = False) -> CheckRun:
    """The whole run on an open host, and its JSON document (the gate's fields when a playbook)."""
    report = node_run(request, host).finish()
    doc = judge.document(report, request.playbook, request.budget_s, None)
    facts = None
    if with_facts:
        facts = node.collect(host)
    return CheckRun(report, doc, facts)


def run(request: CheckRequest, with_facts: bool = False) -> CheckRun:
    """`run_on` the request's node."""
    with open_host(request.root, name=request.hostname) as host:
        return run_on(request, host, with_facts)


def facts(root: str | None, timeout_s: float | None = None, hostname: str | None = None) -> FactsResult:
    """The node's facts document, collected within `timeout_s` (the engine's limit by default),
    naming the node `hostname` when given."""
    with open_host(root, name=hostname) as host:
        return engine.collect_facts(host, timeout_s=timeout_s or engine.FACTS_TIMEOUT_S)


def node_name(root: str | None) -> str:
    with open_host(root) as host:
        return str(host.name)
