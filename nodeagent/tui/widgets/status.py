"""A finding's status as text that reads without colour: the word itself, coloured when colour is on."""

from __future__ import annotations

from rich.text import Text

from nodeagent.core.finding import Status
from nodeagent.render.table import STYLE  # the CLI's colours, so both faces agree


def status_text(status: Status | str | None) -> Text:
    """The status word in its colour; "..." (dim) while it is not known yet."""
    if status is None:
        return Text("...", style="dim")
    s = status if isinstance(status, Status) else Status(status)
    return Text(s.value, style=STYLE[s])
