"""Cluster: the fleet of the inventory given with `nodeagent tui --cluster hosts.yml`, one tile per
host coloured by its worst status as hosts finish, the focused host's findings (Enter: full screen),
and the fleet's drift and outliers (`d`) once every host has answered.

The run is backend.run_cluster in a thread worker; its per-host callback runs on the runner's
threads and only posts a message, so a dead or slow host costs its own time limit and no more."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from nodeagent.render.literal import lit, shown
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets.host_tile import HostTile, host_detail

if TYPE_CHECKING:
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome

NO_INVENTORY = "no inventory: start with nodeagent tui --cluster hosts.yml"
TILE_WIDTH = 15  # a tile of 14 columns (names up to 12 characters shown whole) and the gutter


@dataclass
class HostsKnown(Message):
    """The inventory's hosts, before any answers: shown pending."""

    names: list[str]


@dataclass
class HostArrived(Message):
    outcome: HostOutcome


@dataclass
class ClusterDone(Message):
    report: FleetReport


@dataclass
class ClusterFailed(Message):
    error: str


def natural_key(name: str) -> list[Any]:
    """node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class HostScreen(Screen[None]):
    """One host's findings needing attention (or its error), the whole screen for long lists."""

    BINDING_GROUP_TITLE = "Host screen"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back to the fleet")]

    def __init__(self, outcome: HostOutcome) -> None:
        super().__init__()
        self.outcome = outcome

    def on_mount(self) -> None:
        self.sub_title = shown(f"host {self.outcome.name}")

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="host-findings"):
            yield Static(host_detail(self.outcome), id="host-findings-body")
        yield Footer(compact=True, show_command_palette=False)


class ClusterScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "run", "Run", tooltip="Check every host of the inventory"),
        Binding("d", "toggle_drift", "Drift", tooltip="Show the drift and outliers across hosts"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.running = False
        self.expected: int | None = None  # hosts in the inventory, when it could be read upfront
        self.report: FleetReport | None = None
        self.show_drift = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="cluster-state")
        yield ScrollableContainer(id="hosts", can_focus=False)
        with VerticalScroll(id="cluster-detail"):
            yield Static(id="cluster-detail-body")
        yield Footer(compact=True, show_command_palette=False)

    @property
    def source(self) -> str | None:
        app: Any = self.app
        source: str | None = app.backend.cluster_source
        return source

    async def on_mount(self) -> None:
        self._fit_columns()
        if self.source is None:
            self.query_one("#cluster-state", Static).update(lit(NO_INVENTORY))
            self.query_one("#hosts").display = False
            self.query_one("#cluster-detail").display = False
            return
        await self.action_run()

    def on_resize(self, event: events.Resize) -> None:
        self._fit_columns()

    def _fit_columns(self) -> None:
        self.query_one("#hosts").styles.grid_size_columns = self._columns()

    def _columns(self) -> int:
        return max(1, (self.size.width - 2) // TILE_WIDTH)

    # -- running ----------------------------------------------------------------------------------

    async def action_run(self) -> None:
        if self.source is None:
            self.app.notify(NO_INVENTORY, severity="warning", markup=False)
            return
        if self.running:
            self.app.notify("the fleet is already being checked", severity="warning", markup=False)
            return
        self.running, self.report, self.expected = True, None, None
        # Awaited: the last run's tiles must be gone before this run's hosts look for theirs.
        await self.query_one("#hosts").remove_children()
        self._render_state()
        self._render_detail()
        self.run_fleet()

    @work(thread=True, exclusive=True, group="cluster")
    def run_fleet(self) -> None:
        app: Any = self.app
        backend = app.backend
        # The Backend protocol has no inventory; LocalBackend has one, and reading it first lets the
        # hosts show as pending. Without it (or when it fails: run_cluster then says why), hosts
        # appear as they answer.
        inventory = getattr(backend, "inventory", None)
        if callable(inventory):
            with contextlib.suppress(Exception):
                self.post_message(HostsKnown([h.name for h in inventory().hosts]))
        try:
            report = backend.run_cluster(lambda outcome: self.post_message(HostArrived(outcome)))
        except Exception as e:  # a bad inventory (UsageError), an SSH library missing, ...
            self.post_message(ClusterFailed(str(e) or type(e).__name__))
            return
        self.post_message(ClusterDone(report))

    def _tiles(self) -> dict[str, HostTile]:
        return {t.host: t for t in self.query(HostTile)}

    def on_hosts_known(self, message: HostsKnown) -> None:
        self.expected = len(message.names)
        have = self._tiles()
        self.query_one("#hosts").mount_all(HostTile(n) for n in message.names if n not in have)
        self._focus_first()
        self._render_state()

    def _focus_first(self) -> None:
        """The first host takes the focus when the first tiles appear, so arrows and Enter work at
        once (a later tile never steals it)."""
        tiles = list(self.query(HostTile))
        if tiles and not isinstance(self.focused, HostTile):
            self.call_after_refresh(tiles[0].focus)

    def on_host_arrived(self, message: HostArrived) -> None:
        self._show_outcome(message.outcome)
        self._render_state()

    def _show_outcome(self, outcome: HostOutcome) -> None:
        tiles = self._tiles()
        first = not tiles
        tile = tiles.get(outcome.name)
        if tile is None:  # not announced: placed in name order among those already in
            tile = HostTile(outcome.name)
            later = [t for n, t in tiles.items() if natural_key(n) > natural_key(outcome.name)]
            container = self.query_one("#hosts")
            if later:
                container.mount(tile, before=min(later, key=lambda t: natural_key(t.host)))
            else:
                container.mount(tile)
            if first:
                self._focus_first()
        tile.show(outcome)
        focused = self.focused
        if isinstance(focused, HostTile) and focused.host == outcome.name:
            self._render_detail()

    def on_cluster_done(self, message: ClusterDone) -> None:
        self.running = False
        self.report = message.report
        for outcome in message.report.outcomes.values():  # the final word, whatever came before
            self._show_outcome(outcome)
        self._render_state()
        self._render_detail()

    def on_cluster_failed(self, message: ClusterFailed) -> None:
        self.running = False
        self.query_one("#cluster-state", Static).update(
            lit(f"{self.source}: the fleet run failed: {message.error}", style="bold red")
        )
        self.app.notify(message.error, title="cluster", severity="error", timeout=10, markup=False)

    # -- showing ----------------------------------------------------------------------------------

    def _render_state(self) -> None:
        outcomes = [t.outcome for t in self._tiles().values() if t.outcome is not None]
        line = lit(f"{self.source}: ")
        if self.report is not None:
            s = self.report.summary()
            counts = ", ".join(f"{n} {k.value}" for k, n in s.by_status.items())
            line.append(f"{s.hosts} hosts in {s.duration_s:.1f} s ({counts}); worst ")
            line.append(self.report.status.value, style="bold")
        else:
            of = f" of {self.expected}" if self.expected is not None else ""
            line.append(f"{len(outcomes)}{of} hosts answered")
            line.append("; running..." if self.running else "", style="dim")
        self.query_one("#cluster-state", Static).update(line)

    def _render_detail(self) -> None:
        self.query_one("#cluster-detail-body", Static).update(self._detail())

    def _detail(self) -> RenderableType:
        if self.show_drift:
            if self.report is None:
                return Text("drift and outliers: shown once every host has answered", style="dim")
            from nodeagent.render.fleet import render_table

            return render_table(self.report.comparison)
        focused = self.focused
        if isinstance(focused, HostTile) and focused.outcome is not None:
            return host_detail(focused.outcome)
        if isinstance(focused, HostTile):
            return lit(f"{focused.host}: no answer yet", style="dim")
        return Text("select a host (arrows) to see its findings; Enter for the full list", style="dim")

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, HostTile):
            self._render_detail()

    def action_toggle_drift(self) -> None:
        self.show_drift = not self.show_drift
        self._render_detail()

    def action_open_host(self) -> None:
        focused = self.focused
        if not isinstance(focused, HostTile):
            return
        if focused.outcome is None:
            self.app.notify(f"{focused.host} has not answered yet", severity="information", markup=False)
            return
        self.app.push_screen(HostScreen(focused.outcome))

    def action_move_tile(self, dx: int, dy: int) -> None:
        tiles = list(self.query(HostTile))
        focused = self.focused
        if not tiles:
            return
        at = tiles.index(focused) if isinstance(focused, HostTile) and focused in tiles else 0
        to = at + dx + dy * self._columns()
        if 0 <= to < len(tiles):
            tiles[to].focus()
