"""Overview: the node at a glance (CPU, sockets, NUMA nodes and memory, GPUs, NICs and RDMA ports,
kernel, BIOS) and the worst status of each area as the checks finish."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static

from nodeagent.core.parse import format_cpulist
from nodeagent.render.literal import lit, lits
from nodeagent.tui import messages
from nodeagent.tui.screens import areas
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets.status import status_text

if TYPE_CHECKING:
    from nodeagent.api.check import Check


def node_table(facts: dict[str, Any]) -> Table:
    t = facts["topology"]
    table = Table(show_header=False, box=None, expand=True, padding=(0, 1))
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value", ratio=1, overflow="fold")
    _row(table, "CPU", str(t.get("cpu_model") or "?"))
    _row(
        table,
        "layout",
        f"{t['packages']} socket(s), {t['cores']} cores, {len(t['cpus_online'])} CPUs "
        f"({t['threads_per_core']} thread(s)/core)",
    )
    for n in t["numa_nodes"]:
        _row(table, f"NUMA {n['id']}", f"CPUs {format_cpulist(n['cpus'])}, {n['memory_mib']} MiB")
    gpus = facts.get("gpus") or []
    _row(
        table,
        "GPUs",
        ", ".join(
            f"GPU{g.get('index') if g.get('index') is not None else '?'} {g.get('pci_address') or ''} "
            f"(NUMA {g.get('numa_node')})"
            for g in gpus
        )
        or "none",
    )
    # Loopback and virtual interfaces without a device say nothing about the node's network.
    nics = [n for n in facts.get("nics") or [] if n.get("pci_address") or n.get("name") not in ("lo",)]
    _row(
        table,
        "NICs",
        ", ".join(f"{n.get('name')} {n.get('speed_mbps') or '?'} Mb/s" for n in nics) or "none",
    )
    rdma = facts.get("rdma") or []
    _row(
        table,
        "RDMA",
        ", ".join(f"{p.get('device')}/{p.get('port')} {p.get('state') or '?'}" for p in rdma) or "none",
    )
    kernel = facts.get("kernel") or {}
    _row(table, "kernel", str(kernel.get("release") or "?"))
    dmi = facts.get("dmi") or {}
    bios = " ".join(str(dmi.get(k) or "") for k in ("bios_vendor", "bios_version", "bios_date")).strip()
    _row(table, "BIOS", bios or "?")
    return table


def _row(table: Table, *cells: Any) -> None:
    """A row of values read from the node: literal text (render.literal), never markup."""
    table.add_row(*lits(*cells))


class OverviewScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.listed: tuple[Check[Any, Any], ...] | None = None  # the registry's checks, once loaded
        self.unloadable: str | None = None  # why the registry could not be loaded

    def compose(self) -> ComposeResult:
        yield Header()
        # In a scroll of its own, focused, so that a node with many NUMA nodes, GPUs or areas
        # scrolls with the keys between the header and the footer instead of pushing past them.
        with VerticalScroll(id="overview"):
            yield Static(Text("reading the node...", style="dim"), id="node")
            yield Static(id="areas")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.load_facts()
        self.load_checks()
        self.render_areas()

    def on_screen_resume(self) -> None:
        self.render_areas()

    def action_reload(self) -> None:
        self.load_facts()
        self.app.run_checks()  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="facts")
    def load_facts(self) -> None:
        app: Any = self.app
        try:
            facts = app.backend.facts()
        except Exception as e:
            self.post_message(messages.Failed("reading the node's facts", str(e)))
            return
        self.post_message(messages.FactsLoaded(facts))

    @work(thread=True, exclusive=True, group="registry")
    def load_checks(self) -> None:
        """The registered checks, whose areas are the table's rows: loading them imports every check
        module, off the event loop so that the node's facts paint meanwhile."""
        try:
            listed = areas.registered()
        except Exception as e:  # a broken plug-in; the run of the checks fails on it too, and says so
            self.app.call_from_thread(self._checks_unloadable, str(e))
            return
        self.app.call_from_thread(self._checks_loaded, listed)

    def _checks_loaded(self, listed: tuple[Check[Any, Any], ...]) -> None:
        self.listed = listed
        self.render_areas()

    def _checks_unloadable(self, error: str) -> None:
        self.unloadable = error
        self.render_areas()

    def on_facts_loaded(self, message: messages.FactsLoaded) -> None:
        try:
            table = node_table(message.facts)
        except (KeyError, TypeError) as e:  # an odd facts document shows as text, not a crash
            self.query_one("#node", Static).update(lit(f"facts unreadable: {e}"))
            return
        self.query_one("#node", Static).update(table)

    def on_failed(self, message: messages.Failed) -> None:
        self.query_one("#node", Static).update(lit(f"{message.what}: {message.error}", style="red"))
        self.app.post_message(messages.Failed(message.what, message.error))

    def results_changed(self, message: messages.ResultsChanged) -> None:
        self.render_areas()

    def render_areas(self) -> None:
        """A row per area of the registered checks (and Other for results of no registered check)."""
        if self.listed is None:
            waiting = Text("reading the checks...", style="dim")
            failed = self.unloadable and lit(f"loading the checks: {self.unloadable}", style="red")
            self.query_one("#areas", Static).update(failed or waiting)
            return
        app: Any = self.app
        table = Table(title="status by area", title_justify="left", expand=True, box=None)
        table.add_column("area", no_wrap=True)
        table.add_column("status", no_wrap=True, min_width=7)
        table.add_column("checks", ratio=1)
        for area, ids in areas.by_area(self.listed, app.results).items():
            status = areas.area_status(app.results, app.running, ids)
            table.add_row(lit(area), status_text(status), lit(", ".join(ids)))
        self.query_one("#areas", Static).update(table)
