"""What every screen of the app is: told when the shared check results change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen

from nodeagent.tui import messages
from nodeagent.tui.screen_table import SCREENS


class NodeAgentScreen(Screen[None]):
    """A screen of the app's modes. The app keeps the check results every screen shares
    (NodeAgentApp.results) and tells the screen on show of each change; a screen that is not on
    show refreshes when it is shown again.

    The help's heading for its keys is its title in the screen table ("Bench screen"), unless the
    class names one itself."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "BINDING_GROUP_TITLE" not in vars(cls):
            where = f"{cls.__module__.rpartition('.')[2]}:{cls.__name__}"
            titles = [s.title for s in SCREENS if s.where == where]
            if titles:
                cls.BINDING_GROUP_TITLE = f"{titles[0]} screen"

    def results_changed(self, message: messages.ResultsChanged) -> None:
        """`message` changed NodeAgentApp.results or .running; by default, nothing on this screen
        shows them."""
