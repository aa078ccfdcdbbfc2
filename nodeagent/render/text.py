"""The run as plain text, problems only: what `check` and `preflight` print when their output is
piped (a log, a CI job, `| grep`), and `--output text:PATH` (what the Slurm scripts log).

One line per finding at FAIL, UNKNOWN or WARN, worst first: `STATUS  check/subject: summary`, and
the fix (the remediation) on the next line, indented; then one line of counts per status (and, for
a pre-flight, the verdict). Lines are never wrapped (click.echo, not a rich console 80 columns
wide): a URL cut in two no longer opens, and a log line split in two no longer greps. `-v` prints
the full table instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from nodeagent.api.report import CheckReport, Document, FleetDocument, Verdict, validate
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import shown
from nodeagent.render.runs import HostRun, attention, document, finite, host_runs, label

WIDTH = len(max((s.value for s in Status), key=len))  # "UNKNOWN": the status column's width
INDENT = " " * (WIDTH + 1)  # the fix line starts under the check's name


def problems(doc: Mapping[str, Any] | Document) -> str:
    """The findings needing attention with their fixes, then the counts (module docstring); for a
    fleet, each line starts with the host's name."""
    report = document(doc)
    fleet = isinstance(report, FleetDocument)
    lines: list[str] = []
    for run in host_runs(report):
        lines += _run_lines(run, f"{one_line(run.host)}: " if fleet else "")
    lines.append(counts_line(report))
    if isinstance(report, CheckReport) and report.verdict is not None:
        lines.append(verdict_line(report, report.verdict))
    return "".join(f"{line}\n" for line in lines)


def _run_lines(run: HostRun, prefix: str) -> list[str]:
    if run.error is not None:
        kind = one_line(run.error.kind)
        return [f"{prefix}{'FAIL':<{WIDTH}} no result ({kind}): {one_line(run.error.message)}"]
    out: list[str] = []
    for f in attention(run.findings):
        out.append(f"{prefix}{f.status.value:<{WIDTH}} {one_line(label(f)) or '-'}: {one_line(f.summary)}")
        fix = f.remediation.strip()
        if fix:
            # A remediation of several lines (a command, then its explanation) keeps them, indented.
            steps = [one_line(step) for step in fix.splitlines() if step.strip()]
            out.append(f"{prefix}{INDENT}fix: {steps[0]}")
            out += [f"{prefix}{INDENT}     {step}" for step in steps[1:]]
    return out


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


def one_line(text: str) -> str:
    """`text` on one line, with control characters (a terminal escape in a value read from the node)
    shown as `\\xNN` rather than sent to the reader's terminal."""
    return shown(" ".join(text.split("\n")).replace("\r", " ").replace("\t", " ")).strip()
