"""The run as a report for people: Markdown (a ticket, a wiki, a CI summary) or one HTML page.

Both are written from the same blocks (`blocks`): a summary, the verdict and budget of a
pre-flight, a table of the checks with their durations, every finding that needs attention with
what was seen, the expected value and what to do, and the benchmark's throughputs when the
document has them. A fleet document gives one such section per host.

Text from the node (evidence is whatever a file or command said) is escaped for each format:
Markdown's punctuation is backslash-escaped and evidence goes in code spans; HTML goes through
`html.escape`; characters XML cannot carry are shown as `\\xNN` (outputs.xml_safe). The HTML page
is self-contained (a small inline style, no script, no external resource).
"""

from __future__ import annotations

import html as htmllib
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent import __version__
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.outputs import (
    HostRun,
    attention,
    evidence,
    host_runs,
    is_fleet,
    label,
    number,
    status_of,
    xml_safe,
)

# -- the structure both formats are written from ----------------------------------------------------


@dataclass(frozen=True)
class Span:
    text: str
    style: str = ""  # "" plain, "code", "strong", or "status" (a status word, coloured in HTML)


Inline = tuple[Span, ...]


@dataclass(frozen=True)
class Heading:
    level: int
    content: Inline


@dataclass(frozen=True)
class Paragraph:
    content: Inline


@dataclass(frozen=True)
class Bullets:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]
    numeric: frozenset[int] = frozenset()  # columns aligned right


Block = Heading | Paragraph | Bullets | Table


def plain(text: str) -> Inline:
    return (Span(text),)


def blocks(doc: Mapping[str, Any]) -> list[Block]:
    """The report's content, whatever it is rendered as."""
    runs = host_runs(doc)
    out: list[Block] = []
    if is_fleet(doc):
        out.append(Heading(1, plain(f"nodeagent: {len(runs)} hosts")))
        out.append(Paragraph(_fleet_summary(doc)))
        differences = _fleet_differences(doc)
        if differences:
            out.append(Bullets(differences))
    for run in runs:
        out += _run_blocks(run, level=2 if is_fleet(doc) else 1)
    return out


def _fleet_summary(doc: Mapping[str, Any]) -> Inline:
    status = status_of(doc.get("status"))
    drift = doc.get("drift") or []
    outliers = doc.get("outliers") or []
    return (
        Span(status.value, "status"),
        Span(f": {len(drift)} values drift from the fleet's majority, {len(outliers)} outliers"),
    )


def _fleet_differences(doc: Mapping[str, Any]) -> tuple[Inline, ...]:
    """Each drifting value (the hosts that differ from the majority) and each outlier."""
    items: list[Inline] = []
    for d in doc.get("drift") or []:
        if isinstance(d, Mapping) and isinstance(d.get("hosts"), Mapping):
            differ = ", ".join(f"{h} {v}" for h, v in d["hosts"].items())
            items.append(
                (
                    Span("drift "),
                    Span(str(d.get("key")), "code"),
                    Span(f": majority {d.get('majority')}; {differ}"),
                )
            )
    for o in doc.get("outliers") or []:
        if isinstance(o, Mapping):
            items.append(
                (
                    Span("outlier "),
                    Span(str(o.get("key")), "code"),
                    Span(
                        f": {o.get('host')} {o.get('value')} ({o.get('direction')}; median {o.get('median')})"
                    ),
                )
            )
    return tuple(items)


def _run_blocks(run: HostRun, level: int) -> list[Block]:
    doc = run.doc
    kind = f"preflight ({doc['playbook']})" if doc.get("playbook") else "check"
    out: list[Block] = [Heading(level, plain(f"nodeagent {kind}: {run.host}"))]
    if run.error is not None:
        out.append(
            Paragraph(
                (
                    Span(Status.FAIL.value, "status"),
                    Span(f": no result ({run.error.get('kind', 'error')}): {run.error.get('message', '')}"),
                )
            )
        )
        return out
    out.append(Paragraph(_summary(run)))
    verdict = doc.get("verdict")
    if isinstance(verdict, Mapping):
        word = "ALLOWED" if verdict.get("allowed") else "REFUSED"
        out.append(
            Paragraph(
                (
                    Span("Verdict: "),
                    Span(word, "strong"),
                    Span(f" (fail on {verdict.get('fail_on', '?')}): {verdict.get('reason', '')}"),
                )
            )
        )
    if doc.get("budget_s") is not None or run.timed_out:
        budget = f"Budget {doc['budget_s']} s" if doc.get("budget_s") is not None else "No budget"
        cut = f"; cut at the time limit: {', '.join(sorted(run.timed_out))}" if run.timed_out else ""
        out.append(Paragraph(plain(budget + cut)))
    if run.checks:
        out.append(Heading(level + 1, plain("Checks")))
        out.append(_checks_table(run))
    needing = attention(run.findings)
    if needing:
        out.append(Heading(level + 1, plain("Needs attention")))
        for f in needing:
            out += _finding_blocks(f, level + 2)
    bench = doc.get("bench")
    if isinstance(bench, Mapping) and isinstance(bench.get("configs"), Mapping):
        out.append(Heading(level + 1, plain("Benchmark")))
        out += _bench_blocks(bench)
    return out


def _summary(run: HostRun) -> Inline:
    counts = Counter(status_of(f.get("status")) for f in run.findings)
    found = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "no findings"
    took = f" in {run.duration_s:.2f} s" if run.duration_s is not None else ""
    when = ""
    if run.started is not None:
        when = time.strftime("; started %Y-%m-%d %H:%M:%S UTC", time.gmtime(run.started))
    version = run.doc.get("nodeagent") or __version__
    return (Span(run.status.value, "status"), Span(f": {found}{took}{when}; nodeagent {version}"))


def _checks_table(run: HostRun) -> Table:
    rows = []
    for check in run.checks:
        cid = str(check.get("id", ""))
        counts = Counter(status_of(f.get("status")) for f in run.findings_of(cid))
        found = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "-"
        duration = number(check.get("duration_s"))
        took = f"{duration:.3f}" if duration is not None else "-"
        if cid in run.timed_out:
            took += " (cut)"
        rows.append(
            (
                plain(cid),
                plain(str(check.get("title", ""))),
                (Span(status_of(check.get("status")).value, "status"),),
                plain(took),
                plain(found),
            )
        )
    return Table(("check", "title", "status", "seconds", "findings"), tuple(rows), frozenset({3}))


def _finding_blocks(f: Mapping[str, Any], level: int) -> list[Block]:
    heading = Heading(
        level,
        (Span(status_of(f.get("status")).value, "status"), Span(f" {label(f)}: {f.get('summary', '')}")),
    )
    items: list[Inline] = [
        (Span("seen: "), Span(where, "code"), Span(" = "), Span(value, "code"))
        for where, value in evidence(f)
    ]
    if f.get("expected"):
        items.append((Span("expected: "), Span(str(f["expected"]))))
    if f.get("remediation"):
        items.append((Span("what to do:", "strong"), Span(f" {f['remediation']}")))
    if f.get("fix"):
        items.append((Span("tuner: "), Span(str(f["fix"]), "code")))
    return [heading, Bullets(tuple(items))] if items else [heading]


def _bench_blocks(bench: Mapping[str, Any]) -> list[Block]:
    rows = []
    for name, config in bench["configs"].items():
        if not isinstance(config, Mapping):
            continue
        rate = config.get("images_per_s")
        median = ci = "-"
        if isinstance(rate, Mapping) and number(rate.get("median")) is not None:
            median = f"{rate['median']:.1f}"
            bounds = rate.get("ci95")
            if (
                isinstance(bounds, Sequence)
                and len(bounds) == 2
                and all(number(b) is not None for b in bounds)
            ):
                ci = f"{bounds[0]:.1f} - {bounds[1]:.1f}"
        share = number(config.get("fraction_of_bound"))
        note = str(config.get("reason") or config.get("diagnosis") or "")
        rows.append(
            (
                plain(str(name)),
                plain(str(config.get("status", ""))),
                plain(median),
                plain(ci),
                plain(f"{share:.2f}" if share is not None else "-"),
                plain(note),
            )
        )
    out: list[Block] = [
        Table(
            ("config", "status", "images/s (median)", "95% interval", "of bound", "note"),
            tuple(rows),
            frozenset({2, 3, 4}),
        )
    ]
    verdicts = bench.get("verdict")
    if isinstance(verdicts, Mapping):
        items = []
        for key, v in verdicts.items():
            if isinstance(v, Mapping):
                text = f"{key.replace('_', ' ')}: {v.get('verdict', '?')}"
                if number(v.get("ratio")) is not None:
                    text += f" (ratio {v['ratio']:.2f})"
                items.append(plain(text))
        if items:
            out.append(Bullets(tuple(items)))
    return out


# -- Markdown -------------------------------------------------------------------------------------

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that can start
# emphasis, code, links, HTML, entities or table cells inside a line.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&#!~])")
_WHITESPACE = re.compile(r"\s+")


def markdown(doc: Mapping[str, Any]) -> str:
    """The report as GitHub-flavoured Markdown (tables are GFM's)."""
    return "\n\n".join(_md_block(b) for b in blocks(doc)) + "\n"


def _md_block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * min(block.level, 6) + " " + _md_inline(block.content)
    if isinstance(block, Paragraph):
        return _md_inline(block.content)
    if isinstance(block, Bullets):
        return "\n".join("- " + _md_inline(item) for item in block.items)
    header = "| " + " | ".join(_md_text(h) for h in block.header) + " |"
    rule = "|" + "|".join("---:" if i in block.numeric else "---" for i in range(len(block.header))) + "|"
    rows = ["| " + " | ".join(_md_inline(cell, in_table=True) for cell in row) + " |" for row in block.rows]
    return "\n".join([header, rule, *rows])


def _md_inline(content: Inline, in_table: bool = False) -> str:
    return "".join(_md_span(s, in_table) for s in content)


def _md_span(span: Span, in_table: bool) -> str:
    if span.style == "code":
        return _md_code(span.text, in_table)
    text = _md_text(span.text)
    core = text.strip()
    if span.style not in ("strong", "status") or not core:
        return text
    # CommonMark: `**` right after or before a space does not open or close emphasis.
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
    return f"{lead}**{core}**{trail}"


def _md_text(text: str) -> str:
    """Literal text on one line: each whitespace run (newlines too) becomes one space."""
    return _MD_SPECIAL.sub(r"\\\1", _WHITESPACE.sub(" ", xml_safe(text)))


def _md_code(text: str, in_table: bool) -> str:
    """A code span fenced with more backticks than the text holds in a row. Backslashes are literal
    in code spans, except before `|` in a table, where GFM splits cells first: there it needs one."""
    one_line = _WHITESPACE.sub(" ", xml_safe(text))
    if in_table:
        one_line = one_line.replace("|", "\\|")
    if not one_line:
        return "` `"
    longest = max((len(run) for run in re.findall("`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


# -- HTML -----------------------------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 13px ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; overflow-wrap: anywhere; }
.FAIL { color: #b00020; font-weight: bold; } .UNKNOWN { color: #8a2be2; font-weight: bold; }
.WARN { color: #9a6700; font-weight: bold; } .OK { color: #1a7f37; } .SKIPPED { color: #666; }
"""


def html(doc: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    runs = host_runs(doc)
    title = f"nodeagent: {runs[0].host}" if len(runs) == 1 else f"nodeagent: {len(runs)} hosts"
    body = "\n".join(_html_block(b) for b in blocks(doc))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def _html_block(block: Block) -> str:
    if isinstance(block, Heading):
        level = min(block.level, 6)
        return f"<h{level}>{_html_inline(block.content)}</h{level}>"
    if isinstance(block, Paragraph):
        return f"<p>{_html_inline(block.content)}</p>"
    if isinstance(block, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{_html_inline(i)}</li>" for i in block.items) + "\n</ul>"
    header = "".join(f"<th>{_esc(h)}</th>" for h in block.header)
    rows = [
        "<tr>" + "".join(_html_cell(cell, i in block.numeric) for i, cell in enumerate(row)) + "</tr>"
        for row in block.rows
    ]
    return (
        "<table>\n<thead><tr>"
        + header
        + "</tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody>\n</table>"
    )


def _html_cell(cell: Inline, numeric: bool) -> str:
    opening = '<td class="num">' if numeric else "<td>"
    return f"{opening}{_html_inline(cell)}</td>"


def _html_inline(content: Inline) -> str:
    return "".join(_html_span(s) for s in content)


def _html_span(span: Span) -> str:
    text = _esc(span.text)
    if span.style == "code":
        return f"<code>{text}</code>"
    if span.style == "strong":
        return f"<strong>{text}</strong>"
    if span.style == "status":
        return f'<span class="{_esc(span.text)}">{text}</span>'
    return text


def _esc(text: str) -> str:
    return htmllib.escape(xml_safe(text), quote=True)
