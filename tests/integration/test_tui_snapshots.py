"""SVG snapshots of every screen, and of the help, at 80x24 and 120x40 (pytest-textual-snapshot;
Textual is pinned exactly, since its rendering changes between releases). Run `pytest
--snapshot-update` after an intended change of a screen, and look at the new SVGs in
tests/integration/__snapshots__/ before committing."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pytest_textual_snapshot", reason="pip install pytest-textual-snapshot")

from textual.pilot import Pilot
from textual.widgets import DataTable

from nodeagent.tui.app import make_app
from tests.support.tui_fakes import FakeBackend

SIZES = [(80, 24), (120, 40)]
# What to do on each screen before the picture: the bench runs (fake: instantly); others settle.
KEYS: dict[str, tuple[str, ...]] = {"bench": ("b",)}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", ["overview", "checks", "topology", "tune", "bench", "cluster"])
def test_screen(screen: str, size: tuple[int, int], snap_compare: Any) -> None:
    async def settle(pilot: Pilot[None]) -> None:
        await pilot.app.workers.wait_for_complete()
        for key in KEYS.get(screen, ()):
            await pilot.press(key)
            await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    app = make_app(FakeBackend(delay_s=0), start=screen)
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_bench_after_a_verify(size: tuple[int, int], snap_compare: Any) -> None:
    """The verify section: the trials of the fake verify (a disturbed block left out), its verdict and
    the history with the new record last."""

    async def verified(pilot: Pilot[None]) -> None:
        await pilot.app.workers.wait_for_complete()
        recorded = len(pilot.app.backend.history())  # type: ignore[attr-defined]
        await pilot.press("v")
        # The verify's blocks and verdict, then the history loaded again with the new record: each
        # a worker whose message is handled later, so wait for what they show, not a set number of
        # rounds (on a loaded machine the history's reload came after the third).
        app: Any = pilot.app
        for _ in range(200):
            await app.workers.wait_for_complete()
            await pilot.pause()
            history = app.screen.query_one("#verify-history", DataTable)
            if not app.screen.running and history.row_count == recorded + 1:
                break
        else:
            raise AssertionError("the verify's history never showed its new record")

    app = make_app(FakeBackend(delay_s=0), start="bench")
    assert snap_compare(app, terminal_size=size, run_before=verified)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help(size: tuple[int, int], snap_compare: Any) -> None:
    """The help (?) over the Checks screen: its keys, every screen's, then the findings table's."""

    async def opened(pilot: Pilot[None]) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    app = make_app(FakeBackend(delay_s=0), start="checks")
    assert snap_compare(app, terminal_size=size, run_before=opened)
