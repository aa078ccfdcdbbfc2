"""One host of the fleet as a small focusable tile (name, worst status as a word, what went wrong),
and a host's findings needing attention as a renderable for the drill-down.

Works on the fleet runner's HostOutcome documents (findings as dicts): a host that sent odd or
partial JSON is shown as far as it can be, never raised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import Static

from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import lit, shown
from nodeagent.render.table import STYLE

if TYPE_CHECKING:
    from nodeagent.cluster.runner import HostOutcome

ATTENTION = (Status.FAIL, Status.UNKNOWN, Status.WARN)
PENDING = "..."


def outcome_status(outcome: HostOutcome) -> Status:
    """The host's worst status, an unreachable host counting as FAIL (nodeagent.cluster.report)."""
    from nodeagent.cluster.report import host_status  # loads paramiko: only once a host is in

    return host_status(outcome)


def _status(f: Mapping[str, Any]) -> Status:
    try:
        return Status(f.get("status"))
    except ValueError:
        return Status.UNKNOWN


def findings_of(outcome: HostOutcome) -> list[Mapping[str, Any]]:
    findings = (outcome.doc or {}).get("findings")
    if not isinstance(findings, list):
        return []
    return [f for f in findings if isinstance(f, Mapping)]


def attention(findings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """FAIL, UNKNOWN, WARN findings, worst first."""
    return sorted(
        (f for f in findings if _status(f) in ATTENTION),
        key=lambda f: (WORST_FIRST.index(_status(f)), str(f.get("check_id", "")), str(f.get("subject", ""))),
    )


def tile_text(name: str, outcome: HostOutcome | None) -> Text:
    """Three lines: the name, the status word, then the error kind or how many findings need a look."""
    if outcome is None:
        return Text.assemble(shown(name), "\n", (PENDING, "dim"))
    status = outcome_status(outcome)
    if outcome.error is not None:
        detail = outcome.error.kind
    else:
        n = len(attention(findings_of(outcome)))
        detail = f"{n} to look at" if n else "all OK"
    return Text.assemble((shown(name), "bold"), "\n", (status.value, STYLE[status]), "\n", shown(detail))


def host_detail(outcome: HostOutcome) -> Group:
    """The host's status, then its error (kind and message) or its findings needing attention with
    what was seen, what was expected and what to do."""
    status = outcome_status(outcome)
    head = Text.assemble(
        (shown(outcome.name), "bold"), shown(f" ({outcome.address}): "), (status.value, STYLE[status])
    )
    head.append(f" in {outcome.duration_s:.1f} s", style="dim")
    lines: list[Text] = [head]
    if outcome.error is not None:
        lines.append(Text.assemble((outcome.error.kind, "bold"), f": {outcome.error.message}"))
        return Group(*lines)
    findings = findings_of(outcome)
    needing = attention(findings)
    for f in needing:
        s = _status(f)
        subject = f"/{f['subject']}" if f.get("subject") else ""
        lines.append(
            Text.assemble(
                (s.value, STYLE[s]), shown(f" {f.get('check_id', '?')}{subject}: {f.get('summary', '')}")
            )
        )
        evidence = f.get("evidence")
        if isinstance(evidence, Mapping):
            lines += [lit(f"    seen {where}: {value}", style="dim") for where, value in evidence.items()]
        if f.get("expected"):
            lines.append(lit(f"    expected: {f['expected']}"))
        if f.get("remediation"):
            lines.append(lit(f"    to do: {f['remediation']}"))
    rest = len(findings) - len(needing)
    if not needing:
        n = len(findings)
        lines.append(lit(f"nothing needs attention: {n} finding{'' if n == 1 else 's'}, all OK or skipped"))
    elif rest:
        lines.append(lit(f"and {rest} finding(s) OK or skipped", style="dim"))
    return Group(*lines)


class HostTile(Static, can_focus=True):
    """A host: pending ("...") until its outcome arrives, then coloured by its worst status."""

    BINDING_GROUP_TITLE = "The selected host"  # the heading of these keys in the help (tui/keys.py)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "screen.open_host", "Host", tooltip="This host's findings"),
        Binding("left", "screen.move_tile(-1, 0)", "Previous host", show=False),
        Binding("right", "screen.move_tile(1, 0)", "Next host", show=False),
        Binding("up", "screen.move_tile(0, -1)", "Host above", show=False),
        Binding("down", "screen.move_tile(0, 1)", "Host below", show=False),
    ]

    def __init__(self, host: str) -> None:
        super().__init__(tile_text(host, None), classes="-pending")
        self.host = host
        self.outcome: HostOutcome | None = None

    def show(self, outcome: HostOutcome) -> None:
        self.outcome = outcome
        self.set_classes(f"-{outcome_status(outcome).value.lower()}")
        self.update(tile_text(self.host, outcome))
