"""Driving the TUI in pilot tests: run steps in a sized app, wait for workers, read widgets as text."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from nodeagent.tui.app import NodeAgentApp


def drive(
    app: NodeAgentApp,
    steps: Callable[[Pilot[None]], Awaitable[None]],
    size: tuple[int, int] = (80, 24),
    settle_first: bool = False,
) -> None:
    """`steps` on `app` at `size`; workers are waited for at the end (nothing may still post to the
    app while it shuts down), and first too with `settle_first`."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            if settle_first:
                await settle(pilot)
            await steps(pilot)
            await settle(pilot)

    asyncio.run(main())


async def settle(pilot: Pilot[None]) -> None:
    """Workers done and the messages they posted handled (a modal pushed, a table filled)."""
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


def plain(renderable: Any, width: int = 200) -> str:
    """A rich renderable as plain text, as a wide terminal without colour would show it."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def text_of(app: NodeAgentApp, selector: str) -> str:
    """A Static's content as plain text (rich tables and groups included)."""
    return plain(app.screen.query_one(selector, Static).content)


def notifications(app: NodeAgentApp) -> list[str]:
    return [n.message for n in app._notifications]


def notifications_by_severity(app: NodeAgentApp) -> list[tuple[str, str]]:
    return [(n.severity, n.message) for n in app._notifications]
