"""`nodeagent tui` headless from an installed nodeagent, for `make dist-check`: the app starts on a
recorded node, the Overview paints the node and a status for every area once the checks have run,
and `q` quits. Run as a script by the python of the venv the wheel went into, so it imports only the
installed package (and Textual), never this source tree.

Usage: python tests/support/tui_smoke.py ROOT   (ROOT: a snapshot, e.g. an hwloc fixture tree)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import nodeagent
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.backend import LocalBackend
from nodeagent.tui.screens.areas import by_area, registered

# What the Overview shows once it has painted: the status table's heading and the footer's keys.
PAINTED = ("status by area", "123456 Screens", "q Quit")
STATUSES = ("OK", "WARN", "FAIL", "UNKNOWN", "SKIPPED")


def installed_outside_this_tree() -> str | None:
    """Why the nodeagent imported here is not the installed one, or None when it is."""
    module = Path(nodeagent.__file__).resolve()
    prefix = Path(sys.prefix).resolve()
    if not module.is_relative_to(prefix):
        return f"nodeagent was imported from {module}, not from the venv at {prefix}"
    return None


def screen_text(app: NodeAgentApp) -> str:
    """Every character on the screen, as a terminal would show it."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def run(root: str) -> str:
    """The screen once the checks have run, after checking what it shows; `q` then quits."""
    app = make_app(LocalBackend(root=root), "overview")
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(3):  # the workers (title, facts, checks) and the messages they posted
            await app.workers.wait_for_complete()
            await pilot.pause()
        text = screen_text(app)
        missing = [t for t in PAINTED if t not in text]
        if missing:
            raise AssertionError(f"the Overview does not show {missing}:\n{text}")
        rows = {line.strip().split("  ")[0]: line for line in text.splitlines() if line.strip()}
        for area in by_area(registered()):  # every area of the installed checks
            if area not in rows or not any(s in rows[area].split() for s in STATUSES):
                raise AssertionError(
                    f"the Overview shows no status for {area!r} after the checks ran:\n{text}"
                )
        await pilot.press("q")
        await pilot.pause()
        if app.is_running:
            raise AssertionError("`q` did not quit the TUI")
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    problem = installed_outside_this_tree()
    if problem:
        print(f"tui_smoke: {problem}", file=sys.stderr)
        return 1
    text = asyncio.run(run(argv[1]))
    lines = len(text.splitlines())
    print(f"nodeagent {nodeagent.__version__} tui: the Overview painted ({lines} lines), q quit it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
