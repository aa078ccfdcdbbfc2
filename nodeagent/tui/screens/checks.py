"""Checks: findings streaming in as checks finish, filtered by status or area, and the selected
finding's evidence, expected value, remediation and the tuner that fixes it; re-run one or all."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Static

from nodeagent.core.finding import WORST_FIRST, Status
from nodeagent.render.literal import lit, lits
from nodeagent.tui import messages
from nodeagent.tui.screens import areas
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets.status import status_text

if TYPE_CHECKING:
    from nodeagent.core.finding import Finding

# Status filters, in the order "f" cycles through them.
FILTERS: dict[str, tuple[Status, ...]] = {
    "all": tuple(WORST_FIRST),
    "needs attention": (Status.FAIL, Status.UNKNOWN, Status.WARN),
    "FAIL": (Status.FAIL,),
    "UNKNOWN": (Status.UNKNOWN,),
    "WARN": (Status.WARN,),
    "OK": (Status.OK,),
    "SKIPPED": (Status.SKIPPED,),
}
ALL_AREAS = "all areas"


def details(f: Finding) -> Table:
    t = Table(show_header=False, box=None, expand=True, padding=(0, 1))
    t.add_column("what", style="bold", no_wrap=True)
    t.add_column("value", ratio=1, overflow="fold")
    t.add_row("status", status_text(f.status))
    t.add_row("check", lit(f"{f.check_id} ({f.subject})" if f.subject else f.check_id))
    t.add_row("finding", lit(f.summary))
    for where, value in f.evidence.items():
        t.add_row("seen", lit(f"{where}: {value}"))
    if f.expected:
        t.add_row("expected", lit(f.expected))
    if f.remediation:
        t.add_row("to do", lit(f.remediation))
    if f.fix:
        t.add_row("fixed by", lit(f"tuner {f.fix} (screen 4, Tune)"))
    return t


class ChecksScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "cycle_filter", "Status", tooltip="Filter by status"),
        Binding("a", "cycle_area", "Area", tooltip="Filter by area"),
        Binding("r", "rerun_one", "Rerun", tooltip="Re-run the selected finding's check"),
        Binding("R", "rerun_all", "All", tooltip="Re-run every check"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = "all"
        self.area = ALL_AREAS
        self.rows: dict[str, Finding] = {}  # row key -> finding

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="checks-state")
        table: DataTable[Any] = DataTable(id="findings", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(Text("select a finding to see its evidence", style="dim"), id="detail")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#findings", DataTable)
        table.add_column("status", key="status", width=9)
        table.add_column("check", key="check", width=10)
        table.add_column("subject", key="subject", width=16)
        table.add_column("finding", key="finding")
        self.rebuild()

    def on_screen_resume(self) -> None:
        self.rebuild()

    def results_changed(self, message: messages.ResultsChanged) -> None:
        self.rebuild()

    def _areas(self) -> dict[str, tuple[str, ...]]:
        """Area name -> check ids, of the registered checks and of the results of unregistered ones."""
        app: Any = self.app
        try:
            listed = areas.registered()
        except Exception:  # a broken plug-in, which the run of the checks has reported: all is Other
            listed = ()
        return areas.by_area(listed, app.results)

    def _visible(self, f: Finding, in_area: Collection[str] | None) -> bool:
        """Whether `f` passes the status filter and is of a check in `in_area` (None: any area)."""
        return (in_area is None or f.check_id in in_area) and f.status in FILTERS[self.filter]

    def rebuild(self) -> None:
        """Rows from the app's results, worst first; the cursor stays on the finding it was on."""
        app: Any = self.app
        table = self.query_one("#findings", DataTable)
        current = self._selected()
        table.clear()
        self.rows = {}
        findings = [f for r in app.results.values() for f in r.findings]
        findings.sort(key=lambda f: (WORST_FIRST.index(f.status), f.check_id, f.subject))
        # The registry is asked only once an area is chosen, so the screen paints before it loads.
        in_area = None if self.area == ALL_AREAS else self._areas().get(self.area, ())
        for i, f in enumerate(x for x in findings if self._visible(x, in_area)):
            key = f"{i}:{f.check_id}:{f.subject}"
            self.rows[key] = f
            table.add_row(status_text(f.status), *lits(f.check_id, f.subject, f.summary), key=key)
            if current is not None and (f.check_id, f.subject, f.summary) == current:
                table.move_cursor(row=i)
        running = sorted(app.running)
        state = lit(f"filter: {self.filter}, {self.area}; {len(self.rows)} of {len(findings)} findings")
        if running:
            state.append(lit(f"; running: {', '.join(running)}", style="dim"))
        self.query_one("#checks-state", Static).update(state)
        self._show_detail()

    def _cursor_finding(self) -> Finding | None:
        table = self.query_one("#findings", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.rows.get(str(key))

    def _selected(self) -> tuple[str, str, str] | None:
        f = self._cursor_finding()
        return None if f is None else (f.check_id, f.subject, f.summary)

    def _show_detail(self) -> None:
        """The detail pane follows the cursor: after a move, and after rows change under it."""
        f = self._cursor_finding()
        detail = self.query_one("#detail", Static)
        if f is not None:
            detail.update(details(f))
        elif not self.rows:
            detail.update(Text("no finding matches the filter", style="dim"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def action_cycle_filter(self) -> None:
        names = list(FILTERS)
        self.filter = names[(names.index(self.filter) + 1) % len(names)]
        self.rebuild()

    def action_cycle_area(self) -> None:
        """The next area of the registered checks (Other too, when a result is of no registered check)."""
        names = [ALL_AREAS, *self._areas()]
        self.area = names[(names.index(self.area) + 1) % len(names)]
        self.rebuild()

    def action_rerun_one(self) -> None:
        selected = self._selected()
        if selected is None:
            self.app.notify("no finding selected", severity="warning", markup=False)
            return
        self.app.run_checks([selected[0]])  # type: ignore[attr-defined]

    def action_rerun_all(self) -> None:
        self.app.run_checks()  # type: ignore[attr-defined]
