"""nodeagent's commands in Textual's command palette (ctrl+p), next to Textual's own (theme, keys,
quit): run the checks, plan the tuning, the benchmark, verify, revert, and one entry per screen.

A command is an action string of the app, as a key binding is, run with `App.run_action`: the
palette starts the same actions and workers as the keys (app.py, the screens) and holds no flow of
its own. Imported with the app, so it imports nothing but Textual and the screen table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from textual.command import Hit, Hits, Provider

from nodeagent.tui.screen_table import SCREENS


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    action: str  # an action of NodeAgentApp (or App), with its arguments
    # Ranks a command among hits that match the query as well: typing "check" should put "Run the
    # checks" before the Checks screen, as doing something is what a palette is mostly for.
    weight: float = 1.0


SCREEN_WEIGHT = 0.9

# The screens, in the order of their keys (nodeagent.tui.screen_table).
SCREEN_COMMANDS: tuple[Command, ...] = tuple(
    Command(f"Screen: {s.title}", f"{s.what} (key {s.key})", f"switch_mode('{s.mode}')", SCREEN_WEIGHT)
    for s in SCREENS
)

COMMANDS: tuple[Command, ...] = (
    Command("Run the checks", "run every check again; results stream into every screen", "run_checks"),
    Command("Tune: plan", "plan the tuning again, on the Tune screen", "plan"),
    Command("Bench: quick benchmark", "about a minute, on the Bench screen", "bench(True)"),
    Command("Bench: full benchmark", "several minutes with every CPU busy; asks first", "bench(False)"),
    Command(
        "Bench: verify the profile",
        "A/B trials of the profile against the job as it is (quick, built-in workload)",
        "verify",
    ),
    Command("Revert the last apply", "the newest journal not yet reverted; asks first", "revert('last')"),
    Command("Revert every apply", "every journal not reverted, newest first; asks first", "revert('all')"),
    *SCREEN_COMMANDS,
)


class NodeAgentCommands(Provider):
    """COMMANDS, listed first and in this order when the palette opens; matched by Textual's fuzzy
    matcher as the user types."""

    def _run(self, command: Command) -> Callable[[], Awaitable[bool]]:
        return partial(self.app.run_action, command.action)

    async def discover(self) -> Hits:
        # Scored Hits, not DiscoveryHits: those all score 0 and are listed in the order providers
        # answer (Textual keeps them in a set), so theme and quit could come before nodeagent's.
        for command in COMMANDS:
            yield Hit(command.weight, command.name, self._run(command), help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in COMMANDS:
            score = matcher.match(command.name)
            if score > 0:
                yield Hit(
                    score * command.weight,
                    matcher.highlight(command.name),
                    self._run(command),
                    text=command.name,
                    help=command.help,
                )
