"""The help (`?` or F1): a dialog listing every key that works where it was opened, read from the
bindings themselves (Textual's Screen.active_bindings), so a key added to a screen, a widget or the
app is listed, with its footer text and tooltip, without a second list to keep in step.

Keys are grouped by where they are bound: the screen, the app (the keys of every screen), and the
focused widget (a table's cursor keys). A key that a nearer binding shadows is not listed under the
one it shadows: what is listed is what the key does now. Textual's system bindings (ctrl+c, which
only says how to quit) are left out, as its own keys panel leaves them out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

if TYPE_CHECKING:
    from textual.dom import DOMNode

# On the app for every screen, and on each dialog (a dialog shuts the app's keys off while it is up).
HELP = Binding("question_mark,f1", "app.help", "Help", tooltip="Every key that works here")


@dataclass(frozen=True)
class KeyRow:
    """One action and the keys bound to it, as the footer shows keys ("?", "esc", "ctrl+p")."""

    keys: str
    description: str
    tooltip: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[KeyRow, ...]


def title(node: DOMNode, screen: Screen[Any]) -> str:
    """A namespace's heading: its BINDING_GROUP_TITLE (Textual's own keys panel heads its groups
    with it), else what the node is, so a widget without one is still named."""
    if node.BINDING_GROUP_TITLE:
        return node.BINDING_GROUP_TITLE
    what = type(node).__name__ + (f" #{node.id}" if node.id else "")
    if node is screen:
        return what
    return f"Focused: {what}" if node is screen.focused else f"Around the focus: {what}"


def _rank(node: DOMNode, screen: Screen[Any]) -> int:
    """The screen's own keys first, then the app's, then the focused widget's (a table's cursor keys
    are the ones a user knows already)."""
    if node is screen:
        return 0
    return 1 if node is screen.app else 2


def sections(screen: Screen[Any]) -> list[Section]:
    """The keys active on `screen`, one section per namespace that binds any (the screen, the app,
    the focused widget and its containers), each action once with all its keys ("n esc")."""
    grouped: dict[DOMNode, dict[str, list[tuple[Binding, str]]]] = {}
    for node, binding, _enabled, tooltip in screen.active_bindings.values():
        if binding.system:
            continue
        grouped.setdefault(node, {}).setdefault(binding.action, []).append((binding, tooltip))
    display = screen.app.get_key_display
    out = []
    for node in sorted(grouped, key=lambda n: _rank(n, screen)):  # stable: the chain's order in a rank
        # The keys the footer shows first, then the others (Textual's tab, copy, a table's cursor).
        bound = sorted(grouped[node].values(), key=lambda b: not b[0][0].show)  # stable
        rows = tuple(_row(b, display) for b in bound)
        out.append(Section(title(node, screen), rows))
    return out


def _row(bound: Sequence[tuple[Binding, str]], display: Callable[[Binding], str]) -> KeyRow:
    binding, tooltip = bound[0]
    keys = " ".join(dict.fromkeys(display(b) for b, _ in bound))  # "? f1"; a key named twice once
    # A binding without a description (none of nodeagent's) still says what it runs.
    return KeyRow(keys, binding.description or binding.action, tooltip or "")


def keys_view(found: Sequence[Section]) -> Group:
    """Each section as its heading and a table of its keys and what they do; the key columns of all
    the sections as wide as the widest keys, so the descriptions line up down the whole list."""
    width = 1 + max((cell_len(row.keys) for section in found for row in section.rows), default=1)
    parts: list[RenderableType] = []
    for i, section in enumerate(found):
        heading = Text(section.title, style="bold underline")
        parts.append(heading if i == 0 else Text.assemble("\n", heading))
        table = Table(show_header=False, box=None, expand=True, padding=(0, 1), pad_edge=False)
        table.add_column("keys", style="bold", no_wrap=True, width=width)
        table.add_column("does", ratio=1, overflow="fold")
        for row in section.rows:
            does = Text(row.description)
            if row.tooltip and row.tooltip != row.description:
                does.append(f": {row.tooltip}", style="dim")
            table.add_row(Text(row.keys), does)
        parts.append(table)
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below (given when opened), scrolling when they outgrow the terminal."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1", "dismiss", "Close"),
    ]

    def __init__(self, found: Sequence[Section], of: str) -> None:
        super().__init__()
        self.found = list(found)
        self.of = of

    def compose(self) -> ComposeResult:
        # The box is the scroll: it grows with the keys up to the room there is, then scrolls.
        with VerticalScroll(id="help-keys") as box:
            box.border_title = f"Keys: {self.of}"
            box.border_subtitle = "esc, q or ? closes"
            yield Static(keys_view(self.found), id="help-table")
        yield Footer(compact=True, show_command_palette=False)
