"""Checks run as a playbook says, and the pre-flight verdict: may this node run the job?

What `nodeagent check --playbook` and `nodeagent preflight` share (nodeagent.app runs them): the
playbook's checks with its parameters (`selected_checks`, `check_params`), then its thresholds and
the baseline's comparison on the node's values (nodeagent.compare.values.host_values), each verdict
re-judging the check's finding that carries the value (`judged`, nodeagent.gate.fold). The run's
time budget is the engine's (nodeagent.core.pool: a check still running at the budget, or not
started by then, is reported UNKNOWN and named, never waited for). `verdict` turns the worst status
into allowed or refused; `document` is the run's JSON.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from nodeagent import checks, engine
from nodeagent.api.report import Verdict
from nodeagent.compare.values import host_values
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Status, documents
from nodeagent.facts import node
from nodeagent.gate import baseline as baselines
from nodeagent.gate import fold
from nodeagent.gate import thresholds as rules_mod

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook
    from nodeagent.host import Host

# Statuses that refuse the node, per --fail-on. UNKNOWN refuses in both: a gate that could not see
# (a check that crashed, or was cut at the budget) must not pass a node silently.
REFUSING = {
    "fail": (Status.FAIL, Status.UNKNOWN),
    "warn": (Status.FAIL, Status.UNKNOWN, Status.WARN),
}
DEFAULT_BUDGET_S = 10.0  # without --budget and without one in the playbook


def selected_checks(pb: Playbook | None, only: list[str], skip: list[str]) -> list[Check[Any, Any]]:
    """The checks to run: --only/--skip, within the playbook's checks when there is one."""
    # A playbook's own list may name on-demand checks (gpu-training's dcgm-diag), which a plain
    # selection leaves out.
    chosen = checks.select(only or (list(pb.checks) if pb is not None else []), skip)
    if pb is None or not pb.checks:
        return chosen
    outside = [c.id for c in chosen if c.id not in pb.checks and only and c.id in only]
    if outside:
        raise UsageError(f"--only {outside[0]}: not a check of playbook {pb.name} ({', '.join(pb.checks)})")
    return [c for c in chosen if c.id in pb.checks]


def check_params(pb: Playbook | None, selected: list[Check[Any, Any]]) -> dict[str, Any]:
    overrides: Mapping[str, Mapping[str, Any]] = pb.check_params if pb is not None else {}
    return {c.id: c.make_params(dict(overrides.get(c.id, {}))) for c in selected}


def values_of(host: Host, report: engine.Report, facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The node's comparable values: its facts and its findings, flattened (compare.values.host_values).
    `facts` where they were collected already; else collected here, with no command run for them
    (the facts' `nvidia-smi topo -m` may take seconds): a check that needed it has run it already,
    and its findings carry what it saw."""
    if facts is None:
        facts = node.collect(host, commands=False)
    return host_values(facts, documents(report.findings))


def lost_hardware(pb: Playbook | None) -> Status:
    """The level of hardware lost against the baseline or the fleet: FAIL, under every playbook and
    without one, unless the playbook says `lost_hardware: warn` (a fleet that swaps parts on purpose)."""
    return Status.WARN if pb is not None and pb.lost_hardware == "warn" else Status.FAIL


def judged(
    results: Sequence[engine.CheckResult],
    values: Mapping[str, Any],
    pb: Playbook | None,
    baseline: Baseline | None,
    host_name: str,
) -> list[engine.CheckResult]:
    """`results` judged by the playbook's thresholds and the baseline on the node's values: each
    verdict on a value a check reported re-judges that check's finding (nodeagent.gate.fold), and
    the rest are the results "playbook" and "baseline" (left out when they hold nothing)."""
    rules: list[fold.Rule] = []
    titles: dict[str, str] = {}
    durations: dict[str, float] = {}
    if pb is not None and pb.thresholds:
        start = time.perf_counter()
        found = rules_mod.evaluate(pb.thresholds, values, host_name)
        rules.append(fold.Rule(rules_mod.CHECK_ID, f"playbook {pb.name}", found))
        titles[rules_mod.CHECK_ID] = f"thresholds of playbook {pb.name}"
        durations[rules_mod.CHECK_ID] = time.perf_counter() - start
    if baseline is not None:
        start = time.perf_counter()
        found = baselines.compare(baseline, values, host_name, lost_hardware(pb))
        rules.append(fold.Rule(baselines.CHECK_ID, f"baseline {baseline.path.name}", found))
        titles[baselines.CHECK_ID] = "differences from the baseline"
        durations[baselines.CHECK_ID] = time.perf_counter() - start
    if not rules:
        return list(results)
    folded = fold.fold([r.findings for r in results], rules, values)
    out = [
        replace(r, findings=[folded.checks.get((i, j), f) for j, f in enumerate(r.findings)])
        for i, r in enumerate(results)
    ]
    out += [
        engine.CheckResult(cid, titles[cid], kept, durations[cid])
        for cid, kept in folded.rules.items()
        if kept
    ]
    return out


def verdict(report: engine.Report, fail_on: str) -> Verdict:
    """Allowed, or refused with the counts of the refusing statuses and the worst finding: the
    document's own Verdict."""
    refusing = REFUSING[fail_on]
    level: Literal["warn", "fail"] = "warn" if fail_on == "warn" else "fail"
    bad = [f for f in report.findings if f.status in refusing]
    if not bad:
        reason = f"no finding at {'/'.join(s.value for s in refusing)}: the node may run the job"
        return Verdict(allowed=True, fail_on=level, reason=reason)
    cut = [r.check_id for r in report.results if r.timed_out]
    first = sorted(bad, key=lambda f: -f.status.rank)[0]
    counts = ", ".join(
        f"{n} {s.value}"
        for s in sorted(set(refusing), key=lambda s: -s.rank)
        if (n := sum(f.status is s for f in bad))
    )
    reason = f"{counts}; first: {first.check_id}: {first.summary}"
    if cut:
        reason += f"; cut at the time limit: {', '.join(cut)}"
    return Verdict(allowed=False, fail_on=level, reason=reason)


def document(
    report: engine.Report, pb: Playbook | None, budget_s: float | None, v: Verdict | None
) -> dict[str, Any]:
    """The run's JSON document (nodeagent/render/report.schema.json): the report, and the gate's
    playbook, budget, the checks cut at it, and the verdict when there is one."""
    doc = report.to_dict()
    if pb is not None:
        doc["playbook"] = pb.name
    if budget_s is not None:
        doc["budget_s"] = budget_s
    doc["timed_out"] = [r.check_id for r in report.results if r.timed_out]
    if v is not None:
        doc["verdict"] = v.model_dump()
    return doc
