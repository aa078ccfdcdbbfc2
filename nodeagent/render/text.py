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

from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import shown
from nodeagent.render.outputs import (
    HostRun,
    attention,
    host_runs,
    is_fleet,
    label,
    number,
    status_of,
)

WIDTH = len(max((s.value for s in Status), key=len))  # "UNKNOWN": the status column's width
INDENT = " " * (WIDTH + 1)  # the fix line starts under the check's name


def problems(doc: Mapping[str, Any]) -> str:
    """The findings needing attention with their fixes, then the counts (module docstring); for a
    fleet, each line starts with the host's name."""
    fleet = is_fleet(doc)
    lines: list[str] = []
    for run in host_runs(doc):
        lines += _run_lines(run, f"{one_line(run.host)}: " if fleet else "")
    lines.append(counts_line(doc))
    verdict = doc.get("verdict")
    if isinstance(verdict, Mapping):
        lines.append(verdict_line(doc, verdict))
    return "".join(f"{line}\n" for line in lines)


def _run_lines(run: HostRun, prefix: str) -> list[str]:
    if run.error is not None:
        kind = one_line(str(run.error.get("kind", "error")))
        return [
            f"{prefix}{'FAIL':<{WIDTH}} no result ({kind}): {one_line(str(run.error.get('message', '')))}"
        ]
    out: list[str] = []
    for f in attention(run.findings):
        status = status_of(f.get("status")).value
        out.append(
            f"{prefix}{status:<{WIDTH}} {one_line(label(f)) or '-'}: {one_line(str(f.get('summary', '')))}"
        )
        fix = str(f.get("remediation") or "").strip()
        if fix:
            # A remediation of several lines (a command, then its explanation) keeps them, indented.
            steps = [one_line(step) for step in fix.splitlines() if step.strip()]
            out.append(f"{prefix}{INDENT}fix: {steps[0]}")
            out += [f"{prefix}{INDENT}     {step}" for step in steps[1:]]
    return out


def counts_line(doc: Mapping[str, Any]) -> str:
    """`2 FAIL, 1 WARN, 14 OK in 0.42s; worst: FAIL`: every finding counted by status."""
    runs = host_runs(doc)
    counts = Counter(status_of(f.get("status")) for run in runs for f in run.findings)
    text = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "no findings"
    failed = sum(1 for run in runs if run.error is not None)
    if failed:
        text += f"; {failed} host(s) without a result"
    duration = number(doc.get("duration_s"))
    if duration is not None:
        text += f" in {duration:.2f}s"
    return f"{text}; worst: {status_of(doc.get('status')).value}"


def verdict_line(doc: Mapping[str, Any], verdict: Mapping[str, Any]) -> str:
    """A pre-flight's decision, as its table ends: `preflight REFUSED (preflight, fail on fail,
    budget 1s): 1 FAIL, 1 UNKNOWN; first: ...`."""
    word = "ALLOWED" if verdict.get("allowed") else "REFUSED"
    how = [one_line(str(doc.get("playbook") or "")), f"fail on {one_line(str(verdict.get('fail_on', '?')))}"]
    budget = number(doc.get("budget_s"))
    if budget is not None:
        how.append(f"budget {budget:g}s")
    context = ", ".join(part for part in how if part)
    return f"preflight {word} ({context}): {one_line(str(verdict.get('reason', '')))}"


def one_line(text: str) -> str:
    """`text` on one line, with control characters (a terminal escape in a value read from the node)
    shown as `\\xNN` rather than sent to the reader's terminal."""
    return shown(" ".join(text.split("\n")).replace("\r", " ").replace("\t", " ")).strip()
