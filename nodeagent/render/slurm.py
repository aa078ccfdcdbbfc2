"""The run as a Slurm node reason: one short line for
`scontrol update nodename=NODE state=drain reason="..."`.

Slurm takes the reason as free text (https://slurm.schedmd.com/scontrol.html, `Reason=`: "Use
quotes to enclose a reason having more than one word") and shows it in `sinfo -R`, whose default
format (`%20E %9u %19H %N`, https://slurm.schedmd.com/sinfo.html) keeps its first 20 characters:
so the status comes first and the line stays short (`max_len`, 120 by default; `sinfo -R -o
'%120E %N'` shows it whole).

The line only ever holds letters, digits, space and `. , : / _ + % = ( ) @ -`: no quote,
backslash, `$`, backtick, `;`, `&`, `|`, `<`, `>`, `*`, `?`, `!`, `#` or newline. A reason is
pasted into command lines, passed through `ssh node "scontrol ... reason='$R'"` (a second shell
parses it again) and used in HealthCheckProgram scripts: without those characters it stays one
argument inside single or double quotes at every level, expands nothing and cannot end the command
or start another. Anything else in a finding becomes a space (`;` a comma; accents are dropped).

Format: `nodeagent [PLAYBOOK] STATUS: ITEM, ITEM (+N more)`, the findings needing attention worst
first, each `check/subject first-clause-of-the-summary` (just `check/subject` when room is short),
`check timed out` for a check cut at the budget and `bench/CONFIG failed` for a benchmark
configuration that failed; `nodeagent [PLAYBOOK] OK` when nothing needs attention.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Mapping
from typing import Any

from nodeagent.finding import Status
from nodeagent.render.outputs import ATTENTION, HostRun, attention, host_runs, is_fleet, label, status_of

ALLOWED = frozenset(string.ascii_letters + string.digits + " .,:/_+%=()@-")
DEFAULT_MAX_LEN = 120
MIN_LEN = 40  # room for "nodeagent UNKNOWN: " and one check id
MAX_CLAUSE = 48  # a summary's first clause is cut here, so one finding cannot crowd out the others


def clean(text: str) -> str:
    """`text` with only ALLOWED characters, on one line, spaces collapsed."""
    decomposed = unicodedata.normalize("NFKD", text.replace(";", ","))
    kept = "".join(c if c in ALLOWED else (" " if not unicodedata.combining(c) else "") for c in decomposed)
    return " ".join(kept.split())


def slurm_reason(doc: Mapping[str, Any], max_len: int = DEFAULT_MAX_LEN) -> str:
    """One host's document as a one-line reason of at most `max_len` characters (module docstring).

    A fleet document has one reason per host: use `slurm_lines`.
    """
    if max_len < MIN_LEN:
        raise ValueError(f"max_len {max_len}: a reason needs at least {MIN_LEN} characters")
    if is_fleet(doc):
        raise ValueError("a fleet document has one reason per host: use slurm_lines")
    return _reason(host_runs(doc)[0], max_len)


def slurm_lines(doc: Mapping[str, Any], max_len: int = DEFAULT_MAX_LEN) -> str:
    """The reason, newline-terminated; for a fleet, one `HOST REASON` line per host, for
    `while read -r node reason; do scontrol update nodename="$node" ... reason="$reason"; done`."""
    if not is_fleet(doc):
        return slurm_reason(doc, max_len) + "\n"
    return "".join(f"{clean(run.host) or '-'} {_reason(run, max_len)}\n" for run in host_runs(doc))


def _reason(run: HostRun, max_len: int) -> str:
    playbook = clean(str(run.doc.get("playbook") or ""))
    prefix = f"nodeagent {playbook} " if playbook else "nodeagent "
    ranked = _items(run)
    # The document's status, unless what needs attention is worse (a check cut at the budget).
    status = max([run.status, *(r for r, _ in ranked)], key=lambda s: s.rank)
    if status not in ATTENTION:
        return _cut(f"{prefix}OK", max_len)
    items = [item for _, item in ranked]
    if not items:  # a FAIL whose findings do not say why: the bare status
        return _cut(f"{prefix}{status.value}", max_len)
    head = f"{prefix}{status.value}: "
    if len(head) > max_len // 2:  # a long playbook name must leave room for what went wrong
        head = f"nodeagent {status.value}: "
    return _fit(head, items, max_len)


def _items(run: HostRun) -> list[tuple[Status, tuple[str, str]]]:
    """(status, (long, short)) for each thing that needs attention: FAIL, then the checks cut at a
    time limit (one item each, instead of their UNKNOWN findings), then UNKNOWN, then WARN."""
    if run.error is not None:
        kind = clean(str(run.error.get("kind", "error")))
        long = f"no result ({kind}): {_clause(str(run.error.get('message', '')))}"
        return [(Status.FAIL, (long, f"no result ({kind})"))]
    titles = {str(c.get("id")): str(c.get("title") or "") for c in run.checks}
    found: list[tuple[Status, int, tuple[str, str]]] = []
    for f in attention(run.findings):
        cid = str(f.get("check_id"))
        if cid in run.timed_out:
            continue
        name = clean(label(f)) or "-"
        clause = _clause(_without_title(str(f.get("summary", "")), titles.get(cid, "")))
        found.append((status_of(f.get("status")), 1, (f"{name} {clause}".strip(), name)))
    for cid in sorted(run.timed_out):
        text = f"{clean(cid) or '-'} timed out"
        found.append((Status.UNKNOWN, 0, (text, text)))
    for name in _failed_bench_configs(run.doc.get("bench")):
        text = f"bench/{clean(name) or '-'} failed"
        found.append((Status.FAIL, 2, (text, text)))
    found.sort(key=lambda item: (-item[0].rank, item[1]))
    return [(status, item) for status, _, item in found]


def _failed_bench_configs(bench: Any) -> list[str]:
    configs = bench.get("configs") if isinstance(bench, Mapping) else None
    if not isinstance(configs, Mapping):
        return []
    return [str(n) for n, c in configs.items() if isinstance(c, Mapping) and c.get("status") == "failed"]


def _without_title(summary: str, title: str) -> str:
    """A crash or timeout finding starts with the check's title ("GPU health: the check failed
    ..."): the check id already names it."""
    return summary[len(title) + 2 :] if title and summary.startswith(f"{title}: ") else summary


def _clause(summary: str) -> str:
    """The summary up to its first ': ' or '; ' outside parentheses (the headline before the
    explanation), cut at MAX_CLAUSE on a word boundary."""
    depth = 0
    end = len(summary)
    for i, c in enumerate(summary):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth <= 0 and c in ":;" and summary[i + 1 : i + 2] == " ":
            end = i
            break
    text = clean(summary[:end])
    if len(text) <= MAX_CLAUSE:
        return text
    return text[:MAX_CLAUSE].rsplit(" ", 1)[0].rstrip(",:") + ".."


def _fit(head: str, items: list[tuple[str, str]], max_len: int) -> str:
    """As many items as fit (each long if it fits, else short), then the count of those left out."""
    more_room = len(f" (+{len(items)} more)")
    parts: list[str] = []
    for long, short in items:
        room = max_len - (0 if len(parts) + 1 == len(items) else more_room)
        chosen = next((c for c in (long, short) if len(head + ", ".join([*parts, c])) <= room), None)
        if chosen is None:
            break
        parts.append(chosen)
    if not parts:  # not even one name fits: cut the first; the count says the rest
        parts.append(items[0][1][: max(1, max_len - more_room - len(head))])
    left = len(items) - len(parts)
    return _cut(head + ", ".join(parts) + (f" (+{left} more)" if left else ""), max_len)


def _cut(text: str, max_len: int) -> str:
    return text[:max_len].rstrip()
