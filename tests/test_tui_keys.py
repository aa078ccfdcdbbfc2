"""The TUI's keys at 80x24, driven by Textual's pilot on the fake backend: every screen keeps its
header and the whole of its footer in view (content scrolls instead), and the help (`?`, F1) lists
the keys that work where it is opened, as the bindings declare them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Footer, Header

from nodeagent.tui.app import SCREENS, NodeAgentApp, make_app
from tests import tui_fakes
from tests.tui_driver import drive, settle
from tests.tui_fakes import FakeBackend

SIZE = (80, 24)
# The six screens of the keys 1-6, and a host's findings, opened with Enter on the Cluster screen.
EVERY_SCREEN = (*SCREENS, "host")


def start(name: str, backend: FakeBackend | None = None) -> NodeAgentApp:
    return make_app(backend or FakeBackend(delay_s=0), start="cluster" if name == "host" else name)


async def open_screen(pilot: Pilot[None], name: str) -> None:
    await settle(pilot)
    if name == "host":
        await pilot.press("enter")  # the first host, focused when the tiles appear
        await settle(pilot)


def in_view(widget: Widget, within: Widget) -> bool:
    """Whether `widget` is displayed and wholly inside `within`'s region on the screen."""
    return widget.display and widget.region.area > 0 and within.region.contains_region(widget.region)


def footer_items(footer: Footer) -> dict[str, Widget]:
    """What the footer shows, by its text: each key ("q Quit", a grouped key alone: "1") and the
    label of each group of keys ("Screens")."""
    return {str(item.render()): item for item in footer.query("FooterKey, FooterLabel")}


@pytest.mark.parametrize("name", EVERY_SCREEN)
def test_the_header_and_the_whole_footer_stay_in_view_at_80x24(name: str) -> None:
    app = start(name)

    async def steps(pilot: Pilot[None]) -> None:
        await open_screen(pilot, name)
        screen = app.screen
        assert screen.region.size == SIZE
        header, footer = screen.query_one(Header), screen.query_one(Footer)
        assert in_view(header, screen) and header.region.y == 0
        assert in_view(footer, screen) and footer.region.bottom == SIZE[1]
        items = footer_items(footer)
        keys = {text.split()[0] for text in items}
        assert set("q123456") <= keys, items  # quitting, and the keys of the screens
        cut = sorted(what for what, item in items.items() if not in_view(item, footer))
        assert cut == [], f"{name}: footer items off the screen at 80 columns: {cut}"

    drive(app, steps, size=SIZE)


def many_numa_nodes() -> dict[str, Any]:
    """The fake node with eight NUMA nodes: the Overview's content is taller than 24 lines."""
    facts = copy.deepcopy(tui_fakes.FACTS)
    facts["topology"]["numa_nodes"] = [
        {"id": i, "cpus": list(range(32 * i, 32 * i + 32)), "memory_mib": 128000, "distances": {}}
        for i in range(8)
    ]
    return facts


class LargeNode(FakeBackend):
    def facts(self) -> dict[str, Any]:
        return many_numa_nodes()


def test_a_tall_overview_scrolls_between_the_header_and_the_footer() -> None:
    app = start("overview", LargeNode(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        screen = app.screen
        footer, areas = screen.query_one(Footer), screen.query_one("#areas")
        assert areas.region.bottom > footer.region.y  # the table of areas runs under the footer
        await pilot.press("end")
        await settle(pilot)
        assert in_view(screen.query_one(Header), screen) and in_view(footer, screen)
        assert areas.region.bottom <= footer.region.y, "the end of the areas did not scroll into view"

    drive(app, steps, size=SIZE)
