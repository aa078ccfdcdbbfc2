"""A yes/no question over the current screen, answering No unless the user says Yes.

Used before anything that changes the node (apply, revert): `y` or the Yes button confirms; `n`,
Escape, or Enter on the No button (focused first) cancel. Dismissed with True for Yes.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from nodeagent.render.literal import lit
from nodeagent.tui import keys


class ConfirmScreen(ModalScreen[bool]):
    BINDING_GROUP_TITLE = "Confirmation"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
        keys.HELP,
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(lit(self.question, style="bold"), id="confirm-question")
            if self.detail:
                yield Static(lit(self.detail), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", id="confirm-yes")
                yield Button("No (n)", id="confirm-no", variant="primary")

    def on_mount(self) -> None:
        # The safe answer has the focus: Enter alone never changes the node.
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
