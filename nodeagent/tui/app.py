"""The Textual app: one mode per screen (keys 1-6), the check results every screen shares, the
worker that runs the checks, and the actions of the command palette (commands.py). Built by
`make_app(backend)`, so the CLI, the tests and the snapshot tests build the same app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import work
from textual.app import App, ScreenStackError
from textual.binding import Binding, BindingType
from textual.screen import Screen

from nodeagent.render.literal import shown
from nodeagent.tui import keys, messages
from nodeagent.tui.commands import NodeAgentCommands
from nodeagent.tui.screen_table import FIRST, SCREENS, described
from nodeagent.tui.screen_table import MODES as SCREEN_MODES
from nodeagent.tui.screens.base import NodeAgentScreen

if TYPE_CHECKING:
    from nodeagent.engine import CheckResult
    from nodeagent.tui.backend import Backend
    from nodeagent.tui.screens.bench import BenchScreen
    from nodeagent.tui.screens.tune import TuneScreen

# The screens' keys show in the footer as one group ("123456 Screens"), so that a screen's own keys
# and the app's fit an 80-column footer; the help (?) lists each with its name and what it shows.
GROUP = Binding.Group("Screens", compact=True)


def _mode(name: str) -> Any:
    """The screen class of a mode, imported when the mode is first shown (fast first paint)."""

    def build() -> Any:
        from nodeagent.tui import screens

        return screens.SCREEN_CLASSES[name]()

    return build


class NodeAgentApp(App[None]):
    CSS_PATH = "nodeagent.tcss"
    TITLE = "nodeagent"
    MODES: ClassVar[dict[str, Any]] = {name: _mode(name) for name in SCREEN_MODES}
    COMMANDS = App.COMMANDS | {NodeAgentCommands}  # Textual's own (theme, keys, quit) stay
    BINDINGS: ClassVar[list[BindingType]] = [
        *(
            Binding(
                s.key,
                f"switch_mode('{s.mode}')",
                s.short,
                tooltip=described(s),
                group=GROUP,
            )
            for s in SCREENS
        ),
        keys.HELP,
        Binding("q", "quit", "Quit"),
    ]
    BINDING_GROUP_TITLE = "Every screen"  # the help's heading for these keys

    def __init__(self, backend: Backend, start: str = FIRST) -> None:
        super().__init__()
        self.backend = backend
        self.start_mode = start if start in SCREEN_MODES else FIRST
        # Shared by every screen: the latest result of each check, and which are running.
        self.results: dict[str, CheckResult] = {}
        self.running: set[str] = set()

    def on_mount(self) -> None:
        self.sub_title = "loading..."
        self.switch_mode(self.start_mode)
        self.load_title()
        self.run_checks()

    @work(thread=True, group="title")
    def load_title(self) -> None:
        try:
            name = self.backend.name
        except Exception as e:  # a broken root must not take the app down: say it
            self.post_message(messages.Failed("opening the node", str(e)))
            name = "?"
        self.call_from_thread(setattr, self, "sub_title", shown(name))

    @work(thread=True, group="checks", exclusive=True)
    def run_checks(self, only: list[str] | None = None) -> None:
        """Run the checks (all, or `only`), posting each finding as its check finishes."""
        try:
            ids = list(only) if only else [c.id for c in self.backend.checks()]
            self.post_message(messages.ChecksStarted(ids))
            for result in self.backend.run_checks(ids if only else ()):
                self.post_message(messages.CheckFinished(result))
            self.post_message(messages.ChecksDone(ids))
        except Exception as e:  # the engine isolates checks; this is the backend itself failing
            self.post_message(messages.Failed("running the checks", str(e)))

    def on_checks_started(self, message: messages.ChecksStarted) -> None:
        self.running |= set(message.check_ids)
        self._forward(message)

    def on_check_finished(self, message: messages.CheckFinished) -> None:
        self.results[message.result.check_id] = message.result
        self.running.discard(message.result.check_id)
        self._forward(message)

    def on_checks_done(self, message: messages.ChecksDone) -> None:
        self.running -= set(message.check_ids)
        self._forward(message)

    def on_failed(self, message: messages.Failed) -> None:
        self.notify(
            f"{message.what}: {message.error}", title="error", severity="error", timeout=10, markup=False
        )

    def action_help(self) -> None:
        """The keys of the screen on show (a dialog's, over a dialog), read as it is now: the focused
        widget decides some of them."""
        screen = self.screen
        self.push_screen(keys.HelpScreen(keys.sections(screen), keys.title(screen, screen)))

    # -- the command palette's actions (commands.py): the screens' own actions and workers -------
    def action_run_checks(self) -> None:
        self.run_checks()

    async def action_plan(self) -> None:
        tune = await self._show("tune")
        if tune is not None:
            cast("TuneScreen", tune).plan()

    async def action_bench(self, quick: bool) -> None:
        bench = cast("BenchScreen | None", await self._show("bench"))
        if bench is None:
            return
        if quick:
            bench.action_start(True)
        else:
            bench.action_confirm_full()  # minutes of every CPU: asked first, as with B

    async def action_verify(self) -> None:
        """A/B trials of the profile (quick, built-in workload), on the Bench screen as with v."""
        bench = cast("BenchScreen | None", await self._show("bench"))
        if bench is not None:
            bench.action_verify()

    async def action_revert(self, which: str) -> None:
        """`which`: "last" or "all" (TuneScreen.revert); confirmed on the Tune screen."""
        tune = cast("TuneScreen | None", await self._show("tune"))
        if tune is not None:
            tune.when_loaded(lambda: tune.revert(which))

    async def _show(self, mode: str) -> Screen[Any] | None:
        """Switch to `mode` and return its screen, mounted; None, said, while a dialog is open over
        it (a confirmation waits for an answer: a command must not stack another on top)."""
        await self.switch_mode(mode)
        if len(self.screen_stack) > 1:
            self.notify("answer the open dialog first", severity="warning", markup=False)
            return None
        return self.screen_stack[0]

    def _forward(self, message: messages.ResultsChanged) -> None:
        """Screens render from `results`; the one on show is told at once (others refresh when shown;
        a dialog on top is not a screen of results)."""
        try:
            screen = self.screen
        except ScreenStackError:  # a check finished while the app was closing: nobody to tell
            return
        if isinstance(screen, NodeAgentScreen):
            screen.results_changed(message)


def make_app(backend: Backend, start: str = FIRST) -> NodeAgentApp:
    return NodeAgentApp(backend, start)
