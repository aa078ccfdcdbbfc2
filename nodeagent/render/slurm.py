"""The run as a Slurm node reason: one short line for
`scontrol update nodename=NODE state=drain reason="..."`.

Slurm takes the reason as free text (https://slurm.schedmd.com/scontrol.html, `Reason=`: "Use
quotes to enclose a reason having more than one word") and shows it in `sinfo -R`, whose default
format (`%20E %9u %19H %N`, https://slurm.schedmd.com/sinfo.html) keeps its first 20 characters.
So the line starts with what failed, not with a status or a playbook name: `nodeagent: ` and then
the failing subjects, so that the first 40 characters name them and the first 20 start to. It stays
short (`max_len`, 120 by default; `sinfo -R -o '%120E %N'` shows it whole); the full detail is in
the node's log (the Slurm scripts log `--output text:`, every problem with its fix) and in the JSON.

The line only ever holds letters, digits, space and `. , : / _ + % = ( ) @ -`: no quote,
backslash, `$`, backtick, `;`, `&`, `|`, `<`, `>`, `*`, `?`, `!`, `#` or newline. A reason is
pasted into command lines, passed through `ssh node "scontrol ... reason='$R'"` (a second shell
parses it again) and used in HealthCheckProgram scripts: without those characters it stays one
argument inside single or double quotes at every level, expands nothing and cannot end the command
or start another. Anything else in a finding becomes a space (`;` a comma; accents are dropped).

Format: nothing at all when the node may run the job (the gate's verdict allows it; without a
verdict, no finding at FAIL or UNKNOWN), so a script drains exactly when there is a line. Else:
`nodeagent: SUBJECT STATUS: SUMMARY +N more`, at most `max_len` characters, made of whole words.
- SUBJECT and SUMMARY are those of the first item that refuses the node, worst first, in the
  document's order: a finding (`check/subject`), `CHECK` for a check cut at the time limit
  (`timed out`), `bench/CONFIG` for a benchmark configuration that failed, `no result (KIND)` for a
  fleet host that gave none. The summary is whole words, as many as fit; a headline that only names
  the subject again is left out ("GPU0 (0000:34:00.0): ...").
- `+N more` counts the other refusing items, each subject once: a playbook threshold (or baseline
  difference) on a check's value re-judges that check's finding already (nodeagent.gate.fold); one
  left on its own (`check.kernel.memlock./proc/self/limits soft`, a check that did not report it) is
  named as the check names it (`kernel/memlock`), a threshold on a fact by the fact's object
  (`rdma[mlx5_0/1].state` is `rdma/mlx5_0/1`): never by an evidence key.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.api.report import Bench, Document, Finding, FleetDocument
from nodeagent.core.finding import Status
from nodeagent.render.runs import ATTENTION, HostRun, attention, document, host_runs, label

ALLOWED = frozenset(string.ascii_letters + string.digits + " .,:/_+%=()@-")
DEFAULT_MAX_LEN = 120
MIN_LEN = 40  # room for "nodeagent: ", one subject and " (+N more) UNKNOWN"
HEAD = "nodeagent: "
# Checks whose subjects are value keys (nodeagent.compare.values.host_values), not things on the
# node: nodeagent.gate.thresholds.CHECK_ID and nodeagent.gate.baseline.CHECK_ID (not imported: baseline pulls
# in the fleet's tables).
VALUE_CHECKS = frozenset({"playbook", "baseline"})
# A fact's key naming one object of a list: "rdma[mlx5_0/1].state" (fleet.host_values's labels).
_LISTED_FACT = re.compile(r"([^.\[\]]+)\[([^\]]*)\]\.?")
_GLOB = re.compile(r"[*?]")


def clean(text: str) -> str:
    """`text` with only ALLOWED characters, on one line, spaces collapsed."""
    decomposed = unicodedata.normalize("NFKD", text.replace(";", ","))
    kept = "".join(c if c in ALLOWED else (" " if not unicodedata.combining(c) else "") for c in decomposed)
    # A dropped character before a colon or comma ('"never" <&>: ...') leaves no space before it.
    return re.sub(r" (?=[:,])", "", " ".join(kept.split()))


def slurm_reason(doc: Mapping[str, Any] | Document, max_len: int = DEFAULT_MAX_LEN) -> str:
    """One host's document as a one-line reason of at most `max_len` characters, "" when the node
    may run the job (module docstring).

    A fleet document has one reason per host: use `slurm_lines`.
    """
    if max_len < MIN_LEN:
        raise ValueError(f"max_len {max_len}: a reason needs at least {MIN_LEN} characters")
    report = document(doc)
    if isinstance(report, FleetDocument):
        raise ValueError("a fleet document has one reason per host: use slurm_lines")
    return _reason(host_runs(report)[0], max_len)


def slurm_lines(doc: Mapping[str, Any] | Document, max_len: int = DEFAULT_MAX_LEN) -> str:
    """The reason, newline-terminated ("" when the node may run the job); for a fleet, one
    `HOST REASON` line per host that may not, for
    `while read -r node reason; do scontrol update nodename="$node" ... reason="$reason"; done`."""
    report = document(doc)
    if not isinstance(report, FleetDocument):
        reason = slurm_reason(report, max_len)
        return reason + "\n" if reason else ""
    lines = ((run.host, _reason(run, max_len)) for run in host_runs(report))
    return "".join(f"{clean(host) or '-'} {reason}\n" for host, reason in lines if reason)


def _reason(run: HostRun, max_len: int) -> str:
    """The reason for a node that may not run the job; "" for one that may."""
    refusing = _refusing(run)
    items = [(status, name, detail) for status, name, detail in _items(run) if status in refusing]
    if not items:
        return ""
    status, name, detail = items[0]
    others = len(_once([(n, d) for _, n, d in items])) - 1
    more = f" +{others} more" if others else ""
    name = " ".join(name.replace(",", " ").split()) or "-"
    room = max_len - len(f"{HEAD} {status.value}{more}")
    if len(name) > room:  # a name too long for the field: cut it, keep the status and the count
        return f"{HEAD}{name[:room].rstrip()} {status.value}{more}"
    head = f"{HEAD}{name} {status.value}"
    room = max_len - len(head + more) - len(": ")
    words = _whole_words(clean(detail), room)
    return f"{head}: {words}{more}" if words else head + more


def _refusing(run: HostRun) -> tuple[Status, ...]:
    """The statuses that keep this node from the job: the gate's (its verdict's --fail-on); without
    a verdict (`check`), FAIL and UNKNOWN, the gate's default. None when the verdict allows it."""
    if run.verdict is not None:
        if run.verdict.allowed:
            return ()
        return ATTENTION if run.verdict.fail_on == "warn" else (Status.FAIL, Status.UNKNOWN)
    return (Status.FAIL, Status.UNKNOWN)


def _whole_words(text: str, room: int) -> str:
    """As many whole words of `text` as fit in `room` characters."""
    out = ""
    for word in text.split():
        candidate = f"{out} {word}" if out else word
        if len(candidate) > room:
            break
        out = candidate
    return out


def _items(run: HostRun) -> list[tuple[Status, str, str]]:
    """(status, name, detail) for each thing that needs attention, worst first: within a status,
    the checks cut at a time limit (one item each, instead of their UNKNOWN findings), then the
    findings in the document's order (a check's own before the playbook's), then the benchmark."""
    if run.error is not None:
        kind = clean(run.error.kind) or "error"
        return [(Status.FAIL, f"no result ({kind})", _detail(run.error.message))]
    titles = {c.id: c.title for c in run.checks}
    found: list[tuple[Status, int, str, str]] = []
    for f in attention(run.findings):
        if f.check_id in run.timed_out:
            continue
        name, summary = _named(f, run.findings)
        detail = _detail(_without_title(summary, titles.get(f.check_id, "")), f.subject)
        found.append((f.status, 1, name, detail))
    for cid in sorted(run.timed_out):
        found.append((Status.UNKNOWN, 0, clean(cid) or "-", "timed out"))
    for name in _failed_bench_configs(run.bench):
        found.append((Status.FAIL, 2, f"bench/{clean(name) or '-'}", "failed"))
    found.sort(key=lambda item: (-item[0].rank, item[1]))  # stable: the document's order within
    return [(status, name, detail) for status, _, name, detail in found]


def _named(f: Finding, findings: Sequence[Finding]) -> tuple[str, str]:
    """A finding's name in the reason, and its summary with that name's part of a value key left
    out (`check.kernel.memlock./proc/self/limits = 8388608, ...` -> `/proc/self/limits = ...`)."""
    summary = f.summary
    if f.check_id not in VALUE_CHECKS:
        return clean(label(f)) or "-", summary
    key = f.subject
    name, rest = _value_name(key, findings)
    if key and summary.startswith(key):
        after = summary[len(key) :]
        # "KEY: not present ..." would make the clause KEY alone; "KEY = 8, expected ..." reads on.
        summary = f"{rest} {after[2:]}" if after.startswith(": ") else f"{rest}{after}"
    # A glob's part ("rdma[*].state", one finding for the whole pattern) names no one object.
    name = "/".join(part for part in name.split("/") if not _GLOB.search(part))
    return clean(name) or "-", summary.strip()


def _value_name(key: str, findings: Sequence[Finding]) -> tuple[str, str]:
    """`check/subject` for a value key, and the rest of the key (see the module docstring)."""
    if key.startswith("check."):
        check, _, rest = key[len("check.") :].partition(".")
        # The finding whose evidence (or status) the key is: its subject may hold dots itself.
        for g in findings:
            if g.check_id != check or check in VALUE_CHECKS:
                continue
            subject = g.subject or "-"
            keys = {"status", *g.evidence}
            if rest.startswith(f"{subject}.") and rest[len(subject) + 1 :] in keys:
                return label(g), rest[len(subject) + 1 :]
        # No such finding in the document: the evidence of a check is a path ("./proc/...") or
        # the status, after the subject.
        subject, sep, where = rest.partition("./")
        if sep:
            return f"{check}/{subject}", f"/{where}"
        return f"{check}/{rest.removesuffix('.status')}", ""
    listed = _LISTED_FACT.match(key)
    if listed:
        return f"{listed[1]}/{listed[2]}", key[listed.end() :]
    domain, _, rest = key.partition(".")
    return (f"{domain}/{rest}" if rest else domain), ""


def _once(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each name once, with the detail of its first (its check's own) finding."""
    seen: dict[str, str] = {}
    for name, detail in items:
        seen.setdefault(name, detail)
    return list(seen.items())


def _failed_bench_configs(bench: Bench | None) -> list[str]:
    configs = bench.configs if bench is not None else {}
    return [name for name, config in configs.items() if config.status == "failed"]


def _without_title(summary: str, title: str) -> str:
    """A crash or timeout finding starts with the check's title ("GPU health: the check failed
    ..."): the check id already names it."""
    return summary[len(title) + 2 :] if title and summary.startswith(f"{title}: ") else summary


def _detail(summary: str, subject: str = "") -> str:
    """The summary, less a headline that only names the subject again ("GPU0 (0000:34:00.0): 1
    uncorrectable ECC error" is "1 uncorrectable ECC error" after the name `gpu/0000:34:00.0`): up
    to its first ': ' or '; ' outside parentheses."""
    depth = 0
    for i, c in enumerate(summary):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth <= 0 and c in ":;" and summary[i + 1 : i + 2] == " ":
            head, rest = summary[:i], summary[i + 2 :]
            if subject and subject in head and len(head) <= 2 * len(subject) + 8 and rest.strip():
                return clean(rest)
            break
    return clean(summary)


def _cut(text: str, max_len: int) -> str:
    return text[:max_len].rstrip()
