"""The TUI's keys at 80x24, driven by Textual's pilot on the fake backend: every screen keeps its
header and the whole of its footer in view (content scrolls instead), and the help (`?`, F1) lists
the keys that work where it is opened, as the bindings declare them."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import pytest
from textual.binding import Binding, BindingType
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Footer, Header

from nodeagent.tui import screens
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.keys import HelpScreen, Section
from nodeagent.tui.screen_table import MODES as SCREENS
from nodeagent.tui.screen_table import SCREENS as ENTRIES
from nodeagent.tui.screens.bench import ConfirmFull
from nodeagent.tui.screens.checks import ChecksScreen
from nodeagent.tui.widgets.host_tile import HostTile
from tests.support import tui_fakes
from tests.support.tui_driver import drive, settle, text_of
from tests.support.tui_fakes import FakeBackend

SIZE = (80, 24)
# The six screens of the keys 1-6, and a host's findings, opened with Enter on the Cluster screen.
EVERY_SCREEN = (*SCREENS, "host")
TITLES = {s.mode: s.title for s in ENTRIES}


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
        assert set("?q123456") <= keys, items  # the help, quitting, and the keys of the screens
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


# -- the help ----------------------------------------------------------------------------------------


def declared(bindings: list[BindingType]) -> list[Binding]:
    """A BINDINGS list as Textual reads it: "n,escape" is two bindings."""
    return list(Binding.make_bindings(bindings))


def help_sections(app: NodeAgentApp) -> list[Section]:
    """The sections of the help on show."""
    assert isinstance(app.screen, HelpScreen)
    return app.screen.found


def help_section(app: NodeAgentApp, title: str) -> dict[str, str]:
    """The help's section `title`: each key shown -> the description of what it does."""
    found = [s for s in help_sections(app) if s.title == title]
    assert len(found) == 1, [s.title for s in help_sections(app)]
    return {key: row.description for row in found[0].rows for key in row.keys.split()}


def assert_listed(app: NodeAgentApp, title: str, bindings: list[Binding]) -> None:
    """Each binding is in the help's section `title` under its key as Textual displays it, with its
    description, and the help's text shows the two on one line."""
    section = help_section(app, title)
    lines = text_of(app, "#help-table").splitlines()
    for b in bindings:
        key = app.get_key_display(b)
        assert section.get(key) == b.description, f"{title}: {key} {b.description!r} not listed: {section}"
        assert any(key in line.split() and b.description in line for line in lines), (key, b.description)


@pytest.mark.parametrize("name", EVERY_SCREEN)
def test_the_help_lists_the_keys_of_the_screen_and_of_every_screen(name: str) -> None:
    app = start(name)

    async def steps(pilot: Pilot[None]) -> None:
        await open_screen(pilot, name)
        below = app.screen
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        title = type(below).BINDING_GROUP_TITLE or ""
        if name in TITLES:  # a mode's heading is its title in the screen table
            assert title == f"{TITLES[name]} screen"
        own = declared(type(below).BINDINGS)
        if own:
            assert_listed(app, title, own)
        else:  # a screen without keys of its own has no section
            assert title not in [s.title for s in help_sections(app)]
        assert_listed(app, "Every screen", declared(NodeAgentApp.BINDINGS))
        if name == "cluster":  # the focused host's keys (Enter: its findings), under their own heading
            assert_listed(app, "The selected host", declared(HostTile.BINDINGS))

    drive(app, steps, size=SIZE)


@pytest.mark.parametrize("opened_with", ["question_mark", "f1"])
@pytest.mark.parametrize("closed_with", ["escape", "q", "question_mark"])
def test_the_help_opens_with_question_mark_or_f1_and_closes_without_quitting(
    opened_with: str, closed_with: str
) -> None:
    app = start("checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        below = app.screen
        await pilot.press(opened_with)
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press(closed_with)
        await settle(pilot)
        assert app.screen is below and app.is_running  # q closed the help, not the app
        assert app.current_mode == "checks"

    drive(app, steps, size=SIZE)


def test_a_key_added_to_a_screen_is_in_its_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """The help is read from the bindings: a screen with one more key lists it, with no list to edit."""

    class RingingChecks(ChecksScreen):
        BINDINGS: ClassVar[list[BindingType]] = [
            Binding("z", "app.bell", "Ring", tooltip="The terminal's bell")
        ]

    classes = {mode: screens.SCREEN_CLASSES[mode] for mode in SCREENS} | {"checks": RingingChecks}
    monkeypatch.setattr(screens, "SCREEN_CLASSES", classes)
    app = start("checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f1")
        await settle(pilot)
        assert_listed(app, "Checks screen", declared(RingingChecks.BINDINGS))
        assert_listed(app, "Checks screen", declared(ChecksScreen.BINDINGS))  # inherited: still there
        assert "The terminal's bell" in text_of(app, "#help-table")

    drive(app, steps, size=SIZE)


def test_the_help_of_a_dialog_lists_its_keys_not_those_it_shuts_off() -> None:
    """Over the full benchmark's confirmation, the keys are the dialog's: 1-6 and q do nothing there."""
    app = start("bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("B")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmFull)
        await pilot.press("question_mark")
        await settle(pilot)
        assert_listed(app, "Full benchmark dialog", declared(ConfirmFull.BINDINGS))
        assert "Every screen" not in [s.title for s in help_sections(app)]
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmFull)  # the dialog still waits for its answer

    drive(app, steps, size=SIZE)


def test_the_help_scrolls_between_the_header_and_the_footer_at_80x24() -> None:
    app = start("checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        header = app.screen.query_one(Header)
        await pilot.press("question_mark")
        await settle(pilot)
        help_screen = app.screen
        box, footer = help_screen.query_one("#help-keys"), help_screen.query_one(Footer)
        assert box.region.y > header.region.y and box.region.bottom <= footer.region.y
        assert in_view(footer, help_screen) and "esc Close" in footer_items(footer)
        assert box.max_scroll_y > 0  # more keys than rows: the list scrolls
        await pilot.press("end")
        await settle(pilot)
        assert box.scroll_y == box.max_scroll_y

    drive(app, steps, size=SIZE)
