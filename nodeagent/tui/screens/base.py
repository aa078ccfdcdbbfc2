"""What every screen of the app is: told when the shared check results change."""

from __future__ import annotations

from textual.screen import Screen

from nodeagent.tui import messages


class NodeAgentScreen(Screen[None]):
    """A screen of the app's modes. The app keeps the check results every screen shares
    (NodeAgentApp.results) and tells the screen on show of each change; a screen that is not on
    show refreshes when it is shown again."""

    def results_changed(self, message: messages.ResultsChanged) -> None:
        """`message` changed NodeAgentApp.results or .running; by default, nothing on this screen
        shows them."""
