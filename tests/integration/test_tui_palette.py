"""The command palette (ctrl+p), driven by Textual's pilot on the fake backend: nodeagent's commands
are listed, typing filters them, and choosing one runs the same action and worker as its key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.actions import parse
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import DataTable

from nodeagent.core.finding import Finding, Status
from nodeagent.engine import CheckResult
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.commands import COMMANDS, SCREEN_COMMANDS
from nodeagent.tui.screen_table import MODES as SCREENS
from nodeagent.tui.screens.bench import BenchScreen, ConfirmFull
from nodeagent.tui.screens.topology import TopologyScreen
from nodeagent.tui.screens.tune import TuneScreen
from nodeagent.tui.widgets.confirm import ConfirmScreen
from nodeagent.tuning.journal import Journal
from tests.support.tui_driver import drive, notifications_by_severity, settle, text_of
from tests.support.tui_fakes import CHECK_IDS, FINDINGS, FakeBackend

JOURNAL = "20261123-120000-abcd"


def palette_open(pilot: Pilot[None]) -> bool:
    return isinstance(pilot.app.screen, CommandPalette)


async def palette(pilot: Pilot[None], query: str) -> list[str]:
    """Open the palette and type `query`: the commands it offers, best first."""
    await pilot.press("ctrl+p")
    await settle(pilot)
    assert palette_open(pilot)
    await pilot.press(*("space" if ch == " " else ch for ch in query))
    await settle(pilot)
    options = pilot.app.screen.query_one(CommandList)
    return [str(options.get_option_at_index(i).prompt).split("\n")[0] for i in range(options.option_count)]


async def run_command(pilot: Pilot[None], query: str) -> list[str]:
    """Type `query` in the palette and choose the best match, as Enter does; the offered commands."""
    offered = await palette(pilot, query)
    for _ in range(3):  # the first Enter highlights the best match, the next one chooses it
        await pilot.press("enter")
        await settle(pilot)
        if not palette_open(pilot):
            break
    assert not palette_open(pilot)
    await settle(pilot)
    return offered


def test_every_command_is_an_action_of_the_app_and_every_screen_has_one() -> None:
    for command in COMMANDS:
        name, _args = parse(command.action)[1:]
        assert callable(getattr(NodeAgentApp, f"action_{name}", None)), command
    assert [parse(c.action)[2] for c in SCREEN_COMMANDS] == [(s,) for s in SCREENS]


def test_every_screen_of_the_table_is_a_results_screen_and_a_choice_of_the_cli() -> None:
    """A screen added to nodeagent.tui.screen_table is a mode, a key, a palette entry and a
    `--screen` value at once; its class must take the results the app forwards."""
    from nodeagent.cli.main import tui
    from nodeagent.tui.screens import SCREEN_CLASSES
    from nodeagent.tui.screens.base import NodeAgentScreen

    choice = next(p for p in tui.params if p.name == "screen").type
    assert tuple(choice.choices) == SCREENS  # type: ignore[attr-defined]
    assert set(NodeAgentApp.MODES) == set(SCREENS) == set(SCREEN_CLASSES)
    for mode in SCREENS:
        assert issubclass(SCREEN_CLASSES[mode], NodeAgentScreen), mode


def test_the_palette_lists_nodeagents_commands_and_textuals() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        listed = await palette(pilot, "")
        assert listed[: len(COMMANDS)] == [c.name for c in COMMANDS]  # first, in their order
        assert {"Theme", "Keys", "Quit"} <= set(listed)  # Textual's own stay
        assert (await palette(pilot, "revert"))[:2] == ["Revert the last apply", "Revert every apply"]
        await pilot.press("escape")

    drive(app, steps)


@dataclass
class FixingBackend(FakeBackend):
    """The node is fixed between runs: the second run finds transparent huge pages in madvise."""

    runs: list[tuple[str, ...]] = field(default_factory=list)

    def run_checks(self, only: Any = ()) -> Any:
        self.runs.append(tuple(only))
        for result in super().run_checks(only):
            if len(self.runs) > 1 and result.check_id == "hugepages":
                fixed = Finding("hugepages", Status.OK, "transparent huge pages madvise", subject="thp")
                yield CheckResult("hugepages", "hugepages", [fixed], 0.0)
            else:
                yield result


def findings_shown(app: NodeAgentApp) -> list[tuple[str, str]]:
    table: DataTable[Any] = app.screen.query_one("#findings", DataTable)
    return [(str(r[0]), str(r[3])) for r in (table.get_row_at(i) for i in range(table.row_count))]


def test_run_the_checks_from_the_palette() -> None:
    backend = FixingBackend(delay_s=0)
    app = make_app(backend, start="checks")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert ("FAIL", "transparent huge pages never") in findings_shown(app)
        offered = await run_command(pilot, "check")
        assert offered[:2] == ["Run the checks", "Screen: Checks"]  # doing before going
        assert backend.runs == [(), ()]  # every check, through the app's worker
        assert set(app.results) == set(CHECK_IDS)
        shown = findings_shown(app)
        assert ("OK", "transparent huge pages madvise") in shown
        assert ("FAIL", "transparent huge pages never") not in shown
        assert len(shown) == sum(len(f) for f in FINDINGS.values())

    drive(app, steps)


def test_switch_screens_from_the_palette() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "topology")
        assert app.current_mode == "topology"
        assert isinstance(app.screen, TopologyScreen)
        assert "GPU0 - GPU1: SYS (bad)" in text_of(app, "#topo-cell")  # opened and filled
        await run_command(pilot, "screen tune")
        assert isinstance(app.screen, TuneScreen)

    drive(app, steps)


def test_revert_the_last_apply_from_the_palette_opens_tune_and_confirms() -> None:
    backend = FakeBackend(delay_s=0)
    app = make_app(backend)  # the Tune screen is not open yet: the revert waits for its plan

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "revert last")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"Revert journal {JOURNAL}?" in text_of(app, "#confirm-question")
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, TuneScreen)
        assert backend.reverted == [JOURNAL]
        assert f"reverted journal {JOURNAL}" in text_of(app, "#tune-result")

    drive(app, steps)


@dataclass
class ManyJournalsBackend(FakeBackend):
    """Three applies, oldest first; the middle one already reverted."""

    states: tuple[str, ...] = ("applied", "reverted", "applied")

    def journals(self) -> list[Journal]:
        return [Journal(f"j{i}", {"kind": "local"}, "", s) for i, s in enumerate(self.states)]


def test_revert_every_apply_from_the_palette_newest_first() -> None:
    backend = ManyJournalsBackend(delay_s=0)
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "revert every")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Revert 2 journals, newest first?" in text_of(app, "#confirm-question")
        await pilot.press("n")
        await settle(pilot)
        assert backend.reverted == []
        await run_command(pilot, "revert every")
        await pilot.press("y")
        await settle(pilot)
        assert backend.reverted == ["j2", "j0"]
        assert "reverted journals j2, j0" in text_of(app, "#tune-result")
        await run_command(pilot, "revert last")  # the fake's journals do not change: j2 again
        assert "Revert journal j2?" in text_of(app, "#confirm-question")
        await pilot.press("n")

    drive(app, steps)


def test_revert_from_the_palette_on_a_read_only_node_says_why() -> None:
    reason = "a recorded snapshot (/srv/n.tar.gz) is read-only: the plan is shown, nothing applies"
    backend = ManyJournalsBackend(delay_s=0, read_only=reason, states=("reverted",))
    app = make_app(backend)

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "revert last")
        assert isinstance(app.screen, TuneScreen)
        assert ("warning", f"cannot revert: {reason}") in notifications_by_severity(app)
        assert backend.reverted == []

    drive(app, steps)


def test_nothing_to_revert_is_said() -> None:
    backend = ManyJournalsBackend(delay_s=0, states=("reverted",))
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "revert last")
        assert isinstance(app.screen, TuneScreen)
        said = ("warning", "nothing to revert: every journal is already reverted")
        assert said in notifications_by_severity(app)

    drive(app, steps)


@dataclass
class FailingFirstPlan(FakeBackend):
    """The first plan fails (a node's /sys unreadable for a moment); later ones work."""

    planned: int = 0

    def plans(self) -> Any:
        self.planned += 1
        if self.planned == 1:
            raise OSError("/sys/kernel/mm: permission denied")
        return super().plans()


def test_revert_from_the_palette_after_a_failed_plan_plans_again() -> None:
    backend = FailingFirstPlan(delay_s=0)
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert "planning: /sys/kernel/mm: permission denied" in text_of(app, "#tune-state")
        await run_command(pilot, "revert last")
        assert backend.planned == 2
        assert isinstance(app.screen, ConfirmScreen)
        assert f"Revert journal {JOURNAL}?" in text_of(app, "#confirm-question")
        await pilot.press("n")

    drive(app, steps)


def test_a_command_waits_while_a_dialog_is_open_on_its_screen() -> None:
    backend = FakeBackend(delay_s=0)
    app = make_app(backend, start="tune")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("p")  # the apply's confirmation
        await settle(pilot)
        await run_command(pilot, "revert last")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Apply" in text_of(app, "#confirm-question")  # not stacked over by another
        assert ("warning", "answer the open dialog first") in notifications_by_severity(app)
        await pilot.press("n")

    drive(app, steps)


@dataclass
class CountingPlans(FakeBackend):
    planned: int = 0

    def plans(self) -> Any:
        self.planned += 1
        return super().plans()


def test_plan_from_the_palette() -> None:
    backend = CountingPlans(delay_s=0)
    app = make_app(backend)

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "tune plan")
        assert isinstance(app.screen, TuneScreen)
        assert backend.planned == 1  # the screen's first plan is the answer: not planned twice
        assert "3 change(s) from 3 tuner(s)" in text_of(app, "#tune-state")
        await run_command(pilot, "tune plan")
        assert backend.planned == 2

    drive(app, steps)


def test_benchmarks_from_the_palette() -> None:
    app = make_app(FakeBackend(delay_s=0))

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await run_command(pilot, "quick benchmark")
        assert isinstance(app.screen, BenchScreen)
        assert "quick benchmark done" in text_of(app, "#bench-state")
        await run_command(pilot, "full benchmark")
        assert isinstance(app.screen, ConfirmFull)  # minutes of every CPU: asked first, as with B
        await pilot.press("n")
        await settle(pilot)
        assert "quick benchmark done" in text_of(app, "#bench-state")

    drive(app, steps)
