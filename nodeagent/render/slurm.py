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

Format: `nodeagent: SUBJECT,SUBJECT (+N more) STATUS: DETAIL / DETAIL (playbook NAME)`.
- Only the items at the reason's status, the worst one: a FAIL reason names the FAILs, never a WARN
  beside them. An item is a finding (`check/subject`), `CHECK` for a check cut at the time limit
  (detail `timed out`), `bench/CONFIG` for a benchmark configuration that failed, `no result
  (KIND)` for a fleet host that gave none.
- Each subject once: a check's two findings on one subject, or a playbook threshold (or baseline
  difference) on a value of a check's evidence (`check.kernel.memlock./proc/self/limits`) and that
  check's own finding, are one problem, named as the check names it (`kernel/memlock`). A threshold
  on a fact is named by the fact's object: `rdma[mlx5_0/1].state` is `rdma/mlx5_0/1`.
- Subjects are never cut (unless the first alone does not fit): those that do not fit are counted.
  Then the status, then each subject's detail (the first clause of its summary) in the same order,
  as many as fit, then the playbook when there is room.
- `nodeagent: OK` when nothing needs attention.
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
MAX_CLAUSE = 48  # a summary's first clause is cut here, so one finding cannot crowd out the others
HEAD = "nodeagent: "
DETAILS_SEP = " / "
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
    return " ".join(kept.split())


def slurm_reason(doc: Mapping[str, Any] | Document, max_len: int = DEFAULT_MAX_LEN) -> str:
    """One host's document as a one-line reason of at most `max_len` characters (module docstring).

    A fleet document has one reason per host: use `slurm_lines`.
    """
    if max_len < MIN_LEN:
        raise ValueError(f"max_len {max_len}: a reason needs at least {MIN_LEN} characters")
    report = document(doc)
    if isinstance(report, FleetDocument):
        raise ValueError("a fleet document has one reason per host: use slurm_lines")
    return _reason(host_runs(report)[0], max_len)


def slurm_lines(doc: Mapping[str, Any] | Document, max_len: int = DEFAULT_MAX_LEN) -> str:
    """The reason, newline-terminated; for a fleet, one `HOST REASON` line per host, for
    `while read -r node reason; do scontrol update nodename="$node" ... reason="$reason"; done`."""
    report = document(doc)
    if not isinstance(report, FleetDocument):
        return slurm_reason(report, max_len) + "\n"
    return "".join(f"{clean(run.host) or '-'} {_reason(run, max_len)}\n" for run in host_runs(report))


def _reason(run: HostRun, max_len: int) -> str:
    playbook = clean(run.playbook or "")
    tail = f" (playbook {playbook})" if playbook else ""
    items = _items(run)
    # The document's status, unless what needs attention is worse (a check cut at the budget).
    status = max([run.status, *(s for s, _, _ in items)], key=lambda s: s.rank)
    if status not in ATTENTION:
        return _cut(_with_tail(f"{HEAD}OK", tail, max_len), max_len)
    # A comma separates the subjects: one inside a subject ("nic/eth0,eth1") would split it in two.
    named = _once(
        [
            (" ".join(name.replace(",", " ").split()) or "-", detail)
            for s, name, detail in items
            if s == status
        ]
    )
    if not named:  # a FAIL whose findings do not say why: the bare status
        return _cut(_with_tail(f"{HEAD}{status.value}", tail, max_len), max_len)
    return _fit(named, status, tail, max_len)


def _items(run: HostRun) -> list[tuple[Status, str, str]]:
    """(status, name, detail) for each thing that needs attention, worst first: within a status,
    the checks cut at a time limit (one item each, instead of their UNKNOWN findings), then the
    findings in the document's order (a check's own before the playbook's), then the benchmark."""
    if run.error is not None:
        kind = clean(run.error.kind) or "error"
        return [(Status.FAIL, f"no result ({kind})", _clause(run.error.message))]
    titles = {c.id: c.title for c in run.checks}
    found: list[tuple[Status, int, str, str]] = []
    for f in attention(run.findings):
        if f.check_id in run.timed_out:
            continue
        name, summary = _named(f, run.findings)
        clause = _clause(_without_title(summary, titles.get(f.check_id, "")), f.subject)
        found.append((f.status, 1, name, clause))
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


def _clause(summary: str, subject: str = "") -> str:
    """The summary up to its first ': ' or '; ' outside parentheses (the headline before the
    explanation), cut at MAX_CLAUSE on a word boundary. A headline that only names the subject
    again ("GPU0 (0000:34:00.0): 1 uncorrectable ECC error") gives way to the clause after it."""
    depth = 0
    end = len(summary)
    for i, c in enumerate(summary):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth <= 0 and c in ":;" and summary[i + 1 : i + 2] == " ":
            end = i
            break
    rest = summary[end + 2 :]
    if subject and subject in summary[:end] and len(summary[:end]) <= 2 * len(subject) + 8 and rest.strip():
        return _clause(rest)
    text = clean(summary[:end])
    if len(text) <= MAX_CLAUSE:
        return text
    return text[:MAX_CLAUSE].rsplit(" ", 1)[0].rstrip(",:") + ".."


def _fit(named: list[tuple[str, str]], status: Status, tail: str, max_len: int) -> str:
    """The subjects (whole, as many as fit with the count of the rest and the status), then the
    details in the same order while they fit, then the playbook."""
    names = [name for name, _ in named]
    total = len(names)

    def head(shown: list[str]) -> str:
        more = f" (+{total - len(shown)} more)" if len(shown) < total else ""
        return f"{HEAD}{','.join(shown)}{more} {status.value}"

    shown = 0
    while shown < total and len(head(names[: shown + 1])) <= max_len:
        shown += 1
    if shown == 0:  # not even the first name fits whole: cut it; the count says the rest
        room = max_len - len(head([""]))
        line = head([names[0][: max(1, room)]])
        return _cut(line, max_len)
    line = head(names[:shown])
    details: list[str] = []
    for _, detail in named[:shown]:
        candidate = line + ": " + DETAILS_SEP.join([*details, detail or "-"])
        if len(candidate) > max_len:
            break
        details.append(detail or "-")
    if details:
        line += ": " + DETAILS_SEP.join(details)
    return _with_tail(line, tail, max_len)


def _with_tail(line: str, tail: str, max_len: int) -> str:
    """`line` and the playbook, when both fit."""
    return line + tail if len(line + tail) <= max_len else line


def _cut(text: str, max_len: int) -> str:
    return text[:max_len].rstrip()
