"""The progress bar on a terminal's stderr (nodeagent.render.progress chooses it): the stage, the bar,
n/total and the elapsed time, removed when the flow ends so that only the result stays on screen.
Redrawn twice a second: on a 2-CPU node a busy renderer would slow down the workers it measures."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from nodeagent.app.progress import Event
from nodeagent.render.literal import shown
from nodeagent.render.progress_text import bar_state


def terminal() -> Console | None:
    """The console on stderr when rich takes it for a terminal, else None (plain lines then)."""
    console = Console(stderr=True)
    return console if console.is_terminal else None


class Bar:
    """One bar, updated by each event (nodeagent.render.progress.bar_state says how)."""

    def __init__(self, console: Console) -> None:
        # Descriptions hold host and tuner names and error messages: never parsed as markup, and
        # control characters shown, not sent to the terminal.
        self.progress = RichProgress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[count]}", markup=False),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            refresh_per_second=2,
        )
        self.task = self.progress.add_task("", total=1.0, count="")
        self.started = False  # drawn from the first event on: it never shows an empty bar

    def __call__(self, event: Event) -> None:
        state = bar_state(event)
        if state is None:
            return
        self.progress.update(
            self.task,
            description=shown(state.description),
            completed=state.completed,
            total=state.total,
            count=shown(state.count),
        )
        if not self.started:
            self.progress.start()
            self.started = True

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()
