"""The run as plain text: what `check` and `preflight` print when their output is piped (a log, a
CI job, `| grep`), and `--output text:PATH` (what the Slurm scripts log).

One line per finding at FAIL, UNKNOWN or WARN, worst first: `STATUS  check/subject: summary`, and
the fix (the remediation) on the next line, indented; then one line of counts per status (and, for
a pre-flight, the verdict). With `every` (-v) every finding, OK and SKIPPED too, each one needing
attention with what the terminal's table shows under it (seen, expected, fix, tuner). Lines are
never wrapped: a URL cut in two no longer opens, and a log line split in two no longer greps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from nodeagent.api.report import CheckReport, Document, FleetDocument, Verdict, validate
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import one_line
from nodeagent.render.runs import ATTENTION, HostRun, attention, document, finite, host_runs, label

WIDTH = len(max((s.value for s in Status), key=len))  # "UNKNOWN": the status column's width
INDENT = " " * (WIDTH + 1)  # the fix line starts under the check's name
MAX_EVIDENCE = 6  # as the terminal's table: the JSON has every value


def problems(doc: Mapping[str, Any] | Document, every: bool = False, durations: bool = False) -> str:
    """The findings needing attention with their fixes (`every`: all findings), then the counts
    (module docstring); for a fleet, each line starts with the host's name. `durations`: each
    check's time too, before the counts (pre-flight's budget)."""
    report = document(doc)
    fleet = isinstance(report, FleetDocument)
    lines: list[str] = []
    for run in host_runs(report):
        lines += _run_lines(run, f"{one_line(run.host)}: " if fleet else "", every)
        if durations and run.checks:
            lines.append(f"{one_line(run.host)}: {durations_line(run)}" if fleet else durations_line(run))
    lines.append(counts_line(report))
    if isinstance(report, CheckReport) and report.verdict is not None:
        lines.append(verdict_line(report, report.verdict))
    return "".join(f"{line}\n" for line in lines)


def _run_lines(run: HostRun, prefix: str, every: bool) -> list[str]:
    if run.error is not None:
        kind = one_line(run.error.kind)
        return [f"{prefix}{'FAIL':<{WIDTH}} no result ({kind}): {one_line(run.error.message)}"]
    chosen = sorted(run.findings, key=lambda f: -f.status.rank) if every else attention(run.findings)
    out: list[str] = []
    for f in chosen:
        # What to do, and with -v what was seen, for what needs attention: as the terminal's table.
        needs = f.status in ATTENTION
        out += finding_lines(
            f.status.value,
            label(f),
            f.summary,
            f.remediation if needs else "",
            prefix,
            (f.evidence, f.expected, f.fix) if every and needs else None,
        )
    return out


def finding_lines(
    status: str,
    name: str,
    summary: str,
    remediation: str,
    prefix: str = "",
    details: tuple[Mapping[str, str], str, str | None] | None = None,
) -> list[str]:
    """One finding: `STATUS  check/subject: summary`, then, indented, what was seen and expected
    when `details` (evidence, expected, tuner) are given, and the fix."""
    out = [f"{prefix}{status:<{WIDTH}} {one_line(name) or '-'}: {one_line(summary)}"]
    evidence, expected, tuner = details or ({}, "", None)
    items = list(evidence.items())
    out += [
        f"{prefix}{INDENT}seen: {one_line(f'{where} = {value}')}" for where, value in items[:MAX_EVIDENCE]
    ]
    if len(items) > MAX_EVIDENCE:
        out.append(f"{prefix}{INDENT}seen: ... {len(items) - MAX_EVIDENCE} more (see --format json)")
    if expected.strip():
        out.append(f"{prefix}{INDENT}expected: {one_line(expected)}")
    out += _fix_lines(remediation, prefix)
    if tuner:
        out.append(f"{prefix}{INDENT}tuner: {one_line(tuner)}")
    return out


def _fix_lines(remediation: str, prefix: str) -> list[str]:
    """A remediation of several lines (a command, then its explanation) keeps them, indented."""
    steps = [one_line(step) for step in remediation.strip().splitlines() if step.strip()]
    if not steps:
        return []
    return [f"{prefix}{INDENT}fix: {steps[0]}", *(f"{prefix}{INDENT}     {step}" for step in steps[1:])]


def durations_line(run: HostRun) -> str:
    """`check durations: gpu 0.42s, numa 0.01s (cut)`: slowest first, those cut at a time limit."""

    def seconds(c: Any) -> float:
        return finite(c.duration_s) or 0.0

    times = [
        f"{one_line(c.id)} {seconds(c):.2f}s{' (cut)' if c.timed_out or c.id in run.timed_out else ''}"
        for c in sorted(run.checks, key=lambda c: -seconds(c))
    ]
    return "check durations: " + ", ".join(times)


def counts_line(doc: Mapping[str, Any] | Document) -> str:
    """`2 FAIL, 1 WARN, 14 OK in 0.42s; worst: FAIL`: every finding counted by status."""
    report = document(doc)
    runs = host_runs(report)
    counts = Counter(f.status for run in runs for f in run.findings)
    text = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "no findings"
    failed = sum(1 for run in runs if run.error is not None)
    if failed:
        text += f"; {failed} host(s) without a result"
    # A fleet's own time is in its summary: the line gives the run's time for one node only.
    duration = finite(report.duration_s) if isinstance(report, CheckReport) else None
    if duration is not None:
        text += f" in {duration:.2f}s"
    return f"{text}; worst: {report.status.value}"


def verdict_line(doc: Mapping[str, Any] | CheckReport, verdict: Mapping[str, Any] | Verdict) -> str:
    """A pre-flight's decision, as its table ends: `preflight REFUSED (preflight, fail on fail,
    budget 1s): 1 FAIL, 1 UNKNOWN; first: ...`."""
    report = document(doc)
    decided = verdict if isinstance(verdict, Verdict) else validate(Verdict, verdict, "verdict")
    word = "ALLOWED" if decided.allowed else "REFUSED"
    playbook = report.playbook if isinstance(report, CheckReport) else None
    how = [one_line(playbook or ""), f"fail on {one_line(decided.fail_on)}"]
    budget = finite(report.budget_s) if isinstance(report, CheckReport) else None
    if budget is not None:
        how.append(f"budget {budget:g}s")
    context = ", ".join(part for part in how if part)
    return f"preflight {word} ({context}): {one_line(decided.reason)}"
