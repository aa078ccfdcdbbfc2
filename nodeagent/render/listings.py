"""What nodeagent has and keeps: its checks, tuners, playbooks and tuning journals, as sheets (a
table on a terminal, a line each when piped: nodeagent.render.sheet) and as JSON documents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from nodeagent.api.check import Check
from nodeagent.api.tune import LAYOUT_PARAMS, ParamDoc, Tuner, param_docs
from nodeagent.core import document
from nodeagent.gate.playbook import Playbook
from nodeagent.render.literal import one_line
from nodeagent.render.sheet import Part, Sheet, sheet
from nodeagent.tuning.journal import Journal

if TYPE_CHECKING:
    from nodeagent.render.markdown import Inline


def _param(d: ParamDoc) -> dict[str, Any]:
    return {"name": d.name, "type": d.type, "default": d.default, "why": d.why, "source": d.sources}


def checks_sheet(checks: Sequence[Check[Any, Any]]) -> Sheet:
    t = sheet("", "id", "title", "area", "tags")
    for c in checks:
        t.add(c.id, c.title, c.area.value, ",".join(c.tags))
    return t


def checks_params(checks: Sequence[Check[Any, Any]]) -> list[Part]:
    """Each check, then each of its parameters with its default and the reason for it."""
    parts: list[Part] = []
    for c in checks:
        parts.append(Text(one_line(f"{c.id}: {c.title} [{','.join(c.tags)}]"), style="bold"))
        for d in param_docs(c.params):
            line = Text(f"  {one_line(f'{d.name} = {d.default!r}')}", style="cyan")
            line.append(f"\n      {one_line(d.why)}", style="default")
            parts.append(line)
        parts.append("")
    return parts


def checks_document(checks: Sequence[Check[Any, Any]]) -> dict[str, Any]:
    return {
        "checks": [
            {
                "id": c.id,
                "title": c.title,
                "area": c.area.value,
                "tags": list(c.tags),
                "params": [_param(d) for d in param_docs(c.params)],
            }
            for c in checks
        ]
    }


def checks_markdown(checks: Sequence[Check[Any, Any]], on_demand: frozenset[str]) -> str:
    """The checks as one GitHub-flavoured Markdown table, the documentation's list of checks: id, its
    one-line description, its parameters with their defaults, and whether a plain `check` runs it
    (the ids in `on_demand` run only when named)."""
    from nodeagent.render.markdown import Span, Table, markdown_blocks, plain

    rows = tuple(
        (
            (Span(c.id, "code"),),
            plain(c.title),
            _params_inline(param_docs(c.params)),
            plain(f"on demand (--only {c.id})" if c.id in on_demand else "by default"),
        )
        for c in checks
    )
    return markdown_blocks([Table(("check", "what it checks", "parameters (defaults)", "runs"), rows)])


def _params_inline(docs: Sequence[ParamDoc]) -> Inline:
    """Each parameter as `name = default` (the default as Python writes it, as `--params` shows it)."""
    from nodeagent.render.markdown import Span

    if not docs:
        return (Span("none"),)
    spans: list[Span] = []
    for i, d in enumerate(docs):
        if i:
            spans.append(Span(", "))
        spans.append(Span(f"{d.name} = {d.default!r}", "code"))
    return tuple(spans)


def tuners_sheet(tuners: Sequence[Tuner[Any, Any]]) -> Sheet:
    t = sheet("", "id", "title")
    for tuner in tuners:
        t.add(tuner.id, tuner.title)
    return t


def tuners_params(tuners: Sequence[Tuner[Any, Any]]) -> list[Part]:
    """Each tuner, then each parameter (`tune --set ID.NAME=VALUE`): type, default and why."""
    parts: list[Part] = []
    for tuner in tuners:
        parts.append(Text(one_line(f"{tuner.id}: {tuner.title}"), style="bold"))
        docs = param_docs(tuner.params)
        if not docs:
            parts.append("  (no parameters)")
        for d in docs:
            line = Text(f"  {one_line(f'{tuner.id}.{d.name}: {d.type} = {d.default!r}')}", style="cyan")
            if d.name in LAYOUT_PARAMS:
                line.append("  (shared: one rank layout for every tuner)", style="dim")
            line.append(f"\n      {one_line(d.why)}", style="default")
            parts.append(line)
        parts.append("")
    return parts


def tuners_document(tuners: Sequence[Tuner[Any, Any]]) -> dict[str, Any]:
    return {
        "tuners": [
            {
                "id": tuner.id,
                "title": tuner.title,
                "params": [_param(d) | {"shared": d.name in LAYOUT_PARAMS} for d in param_docs(tuner.params)],
            }
            for tuner in tuners
        ]
    }


def playbooks_sheet(playbooks: Sequence[Playbook]) -> Sheet:
    t = sheet("", "name", "description", "checks", "tuners", "budget")
    for pb in playbooks:
        budget = f"{pb.budget_s:g}s" if pb.budget_s else "-"
        t.add(pb.name, pb.description, ", ".join(pb.checks) or "all", ", ".join(pb.tuners) or "-", budget)
    return t


def playbooks_document(playbooks: Sequence[Playbook]) -> dict[str, Any]:
    """Each playbook resolved, as `playbooks show NAME --format json` prints it."""
    return {"playbooks": [document.dump(pb) for pb in playbooks]}


def journals_sheet(journals: Sequence[Journal]) -> Sheet:
    """`revert --list`: each journal, oldest first, with its state and what it wrote."""
    t = sheet("", "journal", "state", "writes", "host", "file")
    for j in journals:
        t.add(j.id, j.state, str(len(j.writes)), j.host.get("name", ""), str(j.path))
    return t


def journals_document(journals: Sequence[Journal]) -> dict[str, Any]:
    """`revert --list --format json`: each journal's file as it is, and where it is."""
    return {"journals": [j.document() | {"file": str(j.path)} for j in journals]}
