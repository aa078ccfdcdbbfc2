"""The run as a report for people: Markdown (a ticket, a wiki, a CI summary) or one HTML page.

Both are written from the same blocks (`blocks`): a summary, the verdict and budget of a
pre-flight, a table of the checks with their durations, every finding that needs attention with
what was seen, the expected value and what to do, and the benchmark's throughputs when the
document has them. A fleet document gives one such section per host.

Text from the node (evidence is whatever a file or command said) is escaped for each format:
Markdown's punctuation is backslash-escaped and evidence goes in code spans; HTML goes through
`html.escape`; characters XML cannot carry are shown as `\\xNN` (escape.xml_safe). The HTML page
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
from nodeagent.api.report import Bench, Document, Finding, FleetDocument
from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.escape import xml_safe
from nodeagent.render.runs import HostRun, attention, document, finite, host_runs, label

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


def blocks(doc: Document) -> list[Block]:
    """The report's content, whatever it is rendered as."""
    runs = host_runs(doc)
    out: list[Block] = []
    if isinstance(doc, FleetDocument):
        out.append(Heading(1, plain(f"nodeagent: {len(runs)} hosts")))
        out.append(Paragraph(_fleet_summary(doc)))
        differences = _fleet_differences(doc)
        if differences:
            out.append(Bullets(differences))
    level = 2 if isinstance(doc, FleetDocument) else 1
    for run in runs:
        out += _run_blocks(run, level)
    return out


def _fleet_summary(doc: FleetDocument) -> Inline:
    return (
        Span(doc.status.value, "status"),
        Span(f": {len(doc.drift)} values drift from the fleet's majority, {len(doc.outliers)} outliers"),
    )


def _fleet_differences(doc: FleetDocument) -> tuple[Inline, ...]:
    """Each drifting value (the hosts that differ from the majority) and each outlier."""
    items: list[Inline] = []
    for d in doc.drift:
        differ = ", ".join(f"{h} {v}" for h, v in d.hosts.items())
        items.append((Span("drift "), Span(d.key, "code"), Span(f": majority {d.majority}; {differ}")))
    for o in doc.outliers:
        items.append(
            (
                Span("outlier "),
                Span(o.key, "code"),
                Span(f": {o.host} {o.value} ({o.direction}; median {o.median})"),
            )
        )
    return tuple(items)


def _run_blocks(run: HostRun, level: int) -> list[Block]:
    kind = f"preflight ({run.playbook})" if run.playbook else "check"
    out: list[Block] = [Heading(level, plain(f"nodeagent {kind}: {run.host}"))]
    if run.error is not None:
        out.append(
            Paragraph(
                (
                    Span(Status.FAIL.value, "status"),
                    Span(f": no result ({run.error.kind}): {run.error.message}"),
                )
            )
        )
        return out
    out.append(Paragraph(_summary(run)))
    if run.verdict is not None:
        word = "ALLOWED" if run.verdict.allowed else "REFUSED"
        out.append(
            Paragraph(
                (
                    Span("Verdict: "),
                    Span(word, "strong"),
                    Span(f" (fail on {run.verdict.fail_on}): {run.verdict.reason}"),
                )
            )
        )
    if run.budget_s is not None or run.timed_out:
        budget = f"Budget {run.budget_s} s" if run.budget_s is not None else "No budget"
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
    if run.bench is not None:
        out.append(Heading(level + 1, plain("Benchmark")))
        out += _bench_blocks(run.bench)
    return out


def _summary(run: HostRun) -> Inline:
    counts = Counter(f.status for f in run.findings)
    found = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "no findings"
    took = f" in {run.duration_s:.2f} s" if run.duration_s is not None else ""
    when = ""
    if run.started is not None:
        when = time.strftime("; started %Y-%m-%d %H:%M:%S UTC", time.gmtime(run.started))
    version = run.nodeagent or __version__
    return (Span(run.status.value, "status"), Span(f": {found}{took}{when}; nodeagent {version}"))


def _checks_table(run: HostRun) -> Table:
    rows = []
    for check in run.checks:
        counts = Counter(f.status for f in run.findings_of(check.id))
        found = ", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "-"
        duration = finite(check.duration_s)
        took = f"{duration:.3f}" if duration is not None else "-"
        if check.id in run.timed_out:
            took += " (cut)"
        rows.append(
            (
                plain(check.id),
                plain(check.title),
                (Span(check.status.value, "status"),),
                plain(took),
                plain(found),
            )
        )
    return Table(("check", "title", "status", "seconds", "findings"), tuple(rows), frozenset({3}))


def _finding_blocks(f: Finding, level: int) -> list[Block]:
    heading = Heading(level, (Span(f.status.value, "status"), Span(f" {label(f)}: {f.summary}")))
    items: list[Inline] = [
        (Span("seen: "), Span(where, "code"), Span(" = "), Span(value, "code"))
        for where, value in f.evidence.items()
    ]
    if f.expected:
        items.append((Span("expected: "), Span(f.expected)))
    if f.remediation:
        items.append((Span("what to do:", "strong"), Span(f" {f.remediation}")))
    if f.fix:
        items.append((Span("tuner: "), Span(f.fix, "code")))
    return [heading, Bullets(tuple(items))] if items else [heading]


def _bench_blocks(bench: Bench) -> list[Block]:
    rows = []
    for name, config in bench.configs.items():
        rate = config.images_per_s
        median = ci = "-"
        if rate is not None and finite(rate.median) is not None:
            median = f"{rate.median:.1f}"
            low, high = rate.ci95
            if finite(low) is not None and finite(high) is not None:
                ci = f"{low:.1f} - {high:.1f}"
        share = finite(config.fraction_of_bound)
        note = config.reason or config.diagnosis or ""
        rows.append(
            (
                plain(name),
                plain(config.status),
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
    items = []
    for key, v in (bench.verdict or {}).items():
        text = f"{key.replace('_', ' ')}: {v.verdict}"
        ratio = finite(v.ratio)
        if ratio is not None:
            text += f" (ratio {ratio:.2f})"
        items.append(plain(text))
    if items:
        out.append(Bullets(tuple(items)))
    return out


# -- Markdown -------------------------------------------------------------------------------------

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that can start
# emphasis, code, links, HTML, entities or table cells inside a line.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&#!~])")
_WHITESPACE = re.compile(r"\s+")


def markdown(doc: Mapping[str, Any] | Document) -> str:
    """The report as GitHub-flavoured Markdown (tables are GFM's)."""
    return markdown_blocks(blocks(document(doc)))


def markdown_blocks(parts: Sequence[Block]) -> str:
    """Blocks as GitHub-flavoured Markdown, a blank line between two."""
    return "\n\n".join(_md_block(b) for b in parts) + "\n"


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


def html(doc: Mapping[str, Any] | Document) -> str:
    """The report as one self-contained HTML page."""
    report = document(doc)
    runs = host_runs(report)
    title = f"nodeagent: {runs[0].host}" if len(runs) == 1 else f"nodeagent: {len(runs)} hosts"
    body = "\n".join(_html_block(b) for b in blocks(report))
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
