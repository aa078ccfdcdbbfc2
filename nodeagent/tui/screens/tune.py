"""Tune: the tuners' plan as before -> after rows, a choice of which changes to apply, the apply
(confirmed, journaled, verified by the backend) and the revert of an earlier apply's journal.

Only process-scope changes start selected: they go to the profile that `nodeagent exec` applies to
one job, while a runtime change rewrites a system-wide setting as root, which a person chooses.
Boot-scope changes (the kernel command line) are advice: shown, never selectable, as `nodeagent
tune --apply` never writes them either. A change applied here shows as applied and cannot be
selected again until its journal is reverted: the plan made after an apply still lists what a
tuner computes from the node (a profile setting is not a node value), and applying it twice would
journal nothing new. Likewise a process-scope change whose value the profile already holds (saved
by `nodeagent tune --apply` or an apply before this TUI started; read with each plan) shows as
applied, "in profile <path>": runtime changes need no such check, as a tuner plans one only where
the live value differs. Where the backend can only plan (a snapshot, not root) the reason is on
screen and apply/revert refuse, saying it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, OptionList, Static
from textual.widgets.option_list import Option

from nodeagent.api.tune import Change, Plan, Scope
from nodeagent.render.literal import lit, shown
from nodeagent.render.table import SCOPE_STYLE, findings_lines
from nodeagent.tui import keys
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets.confirm import ConfirmScreen
from nodeagent.tuning.journal import REVERTED

if TYPE_CHECKING:
    from nodeagent.core.finding import Finding
    from nodeagent.tui.backend import SavedProfile
    from nodeagent.tuning.apply import ApplyResult
    from nodeagent.tuning.journal import Journal

BOOT_ADVICE = "boot-scope changes (kernel command line) are advice: shown, not selectable"
APPLIED_MARK = "ok"  # an applied change (here, or saved in the profile): not selectable
NO_JOURNAL = ""  # what `applied` records for changes an apply found already in place (no journal)
MARK_WIDTH = 3
SCOPE_WIDTH = 7  # "runtime", "process"
_CONFIRM_LINES = 8  # changes listed in the confirmation before "... and N more"


ChangeKey = tuple[str, str, str, str]


def change_key(c: Change) -> ChangeKey:
    """A change as it is across plans: a plan made after an apply holds new Change objects, and
    `before` differs once the value is in place, so neither identity nor equality would do."""
    return (c.tuner, c.scope.value, c.target, c.after)


@dataclass(frozen=True)
class Row:
    """One row of the plan: a change, or the note of a tuner with nothing to change. `applied` is
    the journal of the apply that made the change here (NO_JOURNAL: it was already in place);
    `saved`, the profile that already holds a process change's value (its path)."""

    plan: Plan
    change: Change | None = None
    note: str | None = None
    applied: str | None = None
    saved: str | None = None

    @property
    def done(self) -> bool:
        """Applied here, or in the profile already: shown `ok`, never selected."""
        return self.applied is not None or self.saved is not None

    @property
    def selectable(self) -> bool:
        return self.change is not None and self.change.scope is not Scope.BOOT and not self.done

    @property
    def preselected(self) -> bool:
        return self.selectable and self.change is not None and self.change.scope is Scope.PROCESS


def rows_of(
    plans: list[Plan], applied: dict[ChangeKey, str] | None = None, saved: SavedProfile | None = None
) -> dict[str, Row]:
    """Row key -> row, in plan order: every change (marked when `applied` holds it, or when it is
    process-scope and the `saved` profile holds its value), and one note row for each tuner with
    none."""
    rows: dict[str, Row] = {}
    for pi, p in enumerate(plans):
        for ci, c in enumerate(p.changes):
            in_profile = saved is not None and c.scope is Scope.PROCESS and saved.holds(c)
            rows[f"c{pi}.{ci}"] = Row(
                p,
                change=c,
                applied=(applied or {}).get(change_key(c)),
                saved=str(saved.path) if saved is not None and in_profile else None,
            )
        if not p.changes:
            rows[f"n{pi}"] = Row(p, note=p.notes[0] if p.notes else "nothing to change")
    return rows


def preselection(rows: dict[str, Row]) -> set[str]:
    """The rows selected when a plan arrives: process-scope changes not applied yet (here, or
    saved in the profile)."""
    return {k for k, r in rows.items() if r.preselected}


def pending_journals(journals: list[Journal], which: str) -> list[str]:
    """The journals a palette revert undoes, newest first: the `last` apply not yet reverted, or
    `all` of them (as `nodeagent revert --all`). Journals come oldest first."""
    ids = [j.id for j in reversed(journals) if j.state != REVERTED]
    return ids[:1] if which == "last" else ids


def selected_plans(plans: list[Plan], rows: dict[str, Row], selected: set[str]) -> list[Plan]:
    """Plans holding only the selected changes (same tuner, notes and details), in plan order."""
    chosen = {id(rows[k].change) for k in selected if k in rows and rows[k].selectable}
    out = []
    for p in plans:
        changes = [c for c in p.changes if id(c) in chosen]
        if changes:
            out.append(dataclasses.replace(p, changes=changes))
    return out


def mark(row: Row, selected: bool, read_only: bool = False) -> Text:
    """Readable without colour: [x] selected, [ ] not, ok applied (here or in the profile), -
    advice (boot), blank for a note and when nothing can be applied here (read-only)."""
    if row.change is None or read_only:
        return Text("")
    if row.done:
        return Text(APPLIED_MARK, style="bold green")
    if not row.selectable:
        return Text(" - ", style="dim")
    return Text("[x]" if selected else "[ ]", style="bold" if selected else "")


def change_detail(row: Row) -> Table:
    t = Table(show_header=False, box=None, expand=True, padding=(0, 1))
    t.add_column("what", style="bold", no_wrap=True)
    t.add_column("value", ratio=1, overflow="fold")
    c = row.change
    if c is None:
        t.add_row("tuner", lit(f"{row.plan.tuner}: nothing to change"))
    else:
        scope = lit(c.scope.value, style=SCOPE_STYLE.get(c.scope.value, ""))
        if c.scope is Scope.BOOT:
            scope.append(" (advice: not applied here; edit the boot loader and reboot)", style="")
        t.add_row("change", Text.assemble(shown(f"{c.tuner}: "), shown(c.target), " [", scope, "]"))
        if row.applied is not None:
            t.add_row("state", Text(applied_text(row.applied), style="green"))
        if row.saved is not None:
            t.add_row("profile", Text(saved_text(row.saved), style="green"))
        t.add_row("before", lit(c.before))
        t.add_row("after", lit(c.after, style="green"))
        t.add_row("why", lit(c.why))
    for note in row.plan.notes:
        t.add_row("note", lit(note, style="dim"))
    return t


def applied_text(journal_id: str) -> str:
    if journal_id == NO_JOURNAL:
        return "already in place when applied here: not selected again"
    return f"applied here, journal {journal_id}: not selected again until it is reverted (v)"


def saved_text(path: str) -> str:
    return f"in profile {path} (`nodeagent exec` applies it): not selected again"


def done_text(row: Row) -> str:
    """Why a row is `ok`: applied here (its journal) first, else the profile holding it."""
    if row.applied is not None:
        return applied_text(row.applied)
    return saved_text(row.saved or "")


def apply_report(result: ApplyResult) -> Group:
    parts: list[RenderableType] = []
    if result.journal is None:
        parts.append(Text("applied: nothing written at runtime (every value already as planned)"))
    else:
        parts.append(
            Text(
                f"applied; journal {result.journal.id}: undo with v "
                f"(or `nodeagent revert {result.journal.id}`)",
                style="bold",
            )
        )
    if result.profile_path is not None:
        parts.append(lit(f"process settings saved in {result.profile_path} (used by `nodeagent exec`)"))
    for c in result.skipped:
        if c.scope is Scope.BOOT:
            parts.append(lit(f"advice (not applied): {c.target}: {c.after}", style="yellow"))
    parts.append(findings_lines(result.findings))
    return Group(*parts)


@dataclass
class PlansLoaded(Message):
    plans: list[Plan]
    read_only: str | None
    error: str | None = None
    saved: SavedProfile | None = None  # the profile as read with the plan (None: there is none)
    profile_error: str | None = None  # it could not be read: the plan is shown, nothing marked so


@dataclass
class Applied(Message):
    plans: list[Plan]  # what was sent to the backend: the changes now applied, on success
    result: ApplyResult | None
    error: str | None = None


@dataclass
class JournalsLoaded(Message):
    journals: list[Journal]
    which: str  # "pick" (v: the picker), "last" or "all" (the command palette)
    error: str | None = None


@dataclass
class Reverted(Message):
    journal_ids: list[str]  # reverted, in order (those before the failing one, on error)
    findings: list[Finding]
    error: str | None = None


class JournalPicker(ModalScreen[str | None]):
    """Which journal to revert, newest first; Enter chooses, Escape cancels."""

    BINDING_GROUP_TITLE = "Journal picker"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel"), keys.HELP]

    def __init__(self, journals: list[Journal]) -> None:
        super().__init__()
        self.journals = journals

    def compose(self) -> ComposeResult:
        with Vertical(id="journal-box"):
            yield Static(Text("Revert which journal? Enter chooses, Escape cancels", style="bold"))
            options = [
                Option(
                    lit(
                        f"{j.id}  {j.state:<11} {len(j.writes)} write(s), {len(j.files)} file(s)  "
                        f"{j.host.get('name', j.host.get('kind', ''))}"
                    ),
                    id=j.id,
                )
                for j in reversed(self.journals)
            ]
            yield OptionList(*options, id="journal-list")

    def on_mount(self) -> None:
        options = self.query_one("#journal-list", OptionList)
        options.highlighted = 0  # the newest: Enter alone picks the last apply
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TuneScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_change", "Toggle"),
        Binding("a", "toggle_all_changes", "All", tooltip="Select all changes, or none"),
        Binding("p", "apply", "Apply"),
        Binding("v", "revert", "Revert"),
        Binding("r", "reload", "Plan", tooltip="Plan again"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[Plan] = []
        self.rows: dict[str, Row] = {}
        self.selected: set[str] = set()
        self.read_only: str | None = None
        self.loaded = False
        self.planning = False  # a plan worker is running
        self.busy: str | None = None  # "applying" / "reverting" while a worker changes the node
        # Changes applied from this screen -> their journal; forgotten when it is reverted.
        self.applied: dict[ChangeKey, str] = {}
        self.saved: SavedProfile | None = None  # the profile, read again with each plan
        self.pending: Callable[[], None] | None = None  # a palette command waiting for the plan

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("planning...", style="dim"), id="tune-state")
        table: DataTable[Any] = DataTable(id="plan", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="tune-result")
        yield Static(Text("select a change to see why", style="dim"), id="tune-detail")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#tune-result").display = False
        self.plan()

    def action_reload(self) -> None:
        self.plan()

    def when_loaded(self, then: Callable[[], None]) -> None:
        """Run `then` now if the plan is in, else once it is: the command palette (app.py) may open
        this screen to revert, and whether this node can be changed comes with the plan."""
        if self.loaded:
            then()
        else:
            self.pending = then
            self.plan()  # waits for a plan being made; asks again after one that failed

    # -- the plan ---------------------------------------------------------------------------------
    def plan(self, again: bool = False) -> None:
        """Ask for the plan. A plan being made is the answer (`r`, or the palette, on a screen that
        has just opened) unless `again`: after an apply or a revert, only a new plan says what is
        left."""
        if self.planning and not again:
            return
        self.planning = True
        if self.loaded:
            self.render_state()
        self.load_plans()

    @work(thread=True, exclusive=True, group="tune-plan")
    def load_plans(self) -> None:
        app: Any = self.app
        try:
            read_only = app.backend.tune_read_only
            plans = app.backend.plans()
        except Exception as e:
            self.post_message(PlansLoaded([], None, error=f"planning: {e}"))
            return
        # Read with the plan, so the rows it already holds are never preselected, not even briefly.
        try:
            saved = app.backend.saved_profile()
        except Exception as e:  # an unreadable profile file (UsageError): said, the plan still shown
            self.post_message(PlansLoaded(plans, read_only, profile_error=f"reading the profile: {e}"))
            return
        self.post_message(PlansLoaded(plans, read_only, saved=saved))

    def on_plans_loaded(self, message: PlansLoaded) -> None:
        self.planning = False
        if message.error is not None:
            self.pending = None  # the error says why the command cannot run
            self.query_one("#tune-state", Static).update(lit(message.error, style="red"))
            self.app.notify(message.error, title="error", severity="error", markup=False)
            return
        self.plans = message.plans
        self.read_only = message.read_only
        self.saved = message.saved
        if message.profile_error is not None:
            self.app.notify(message.profile_error, title="profile", severity="warning", markup=False)
        self.rows = rows_of(self.plans, self.applied, self.saved)
        # Not the whole plan, as `nodeagent tune --apply` would: a runtime change rewrites a
        # system-wide setting as root, and a person opts into it (module docstring).
        self.selected = set() if self.read_only else preselection(self.rows)
        self.loaded = True
        self.build_table()
        self.render_state()
        if self.pending is not None:
            then, self.pending = self.pending, None
            then()

    def _widths(self) -> tuple[int, int, int]:
        """Tuner, target and before -> after widths that fill the screen (no horizontal scroll)."""
        tuner = min(max([len("tuner"), *(len(p.tuner) for p in self.plans)]), 16)
        # 5 columns with 1 cell of padding each side, and room for the vertical scrollbar.
        free = max(self.size.width - 2 * 5 - 2 - MARK_WIDTH - tuner - SCOPE_WIDTH, 20)
        target = free * 9 // 20
        return tuner, target, free - target

    def build_table(self) -> None:
        table = self.query_one("#plan", DataTable)
        at = table.cursor_row if table.row_count else 0
        table.clear(columns=True)
        tuner_w, target_w, change_w = self._widths()
        table.add_column("", key="mark", width=MARK_WIDTH)
        table.add_column("tuner", key="tuner", width=tuner_w)
        table.add_column("target", key="target", width=target_w)
        table.add_column("before -> after", key="change", width=change_w)
        table.add_column("scope", key="scope", width=SCOPE_WIDTH)

        def cell(text: str, style: str = "") -> Text:
            return lit(text, style=style, no_wrap=True, overflow="ellipsis")

        for key, row in self.rows.items():
            c = row.change
            if c is None:
                cells = [cell(row.note or "", "dim"), cell(""), cell("-", "dim")]
            else:
                cells = [
                    cell(c.target),
                    cell(f"{c.before or '-'} -> {c.after}"),
                    cell(c.scope.value, SCOPE_STYLE.get(c.scope.value, "")),
                ]
            table.add_row(
                mark(row, key in self.selected, bool(self.read_only)),
                cell(row.plan.tuner, "bold"),
                *cells,
                key=key,
            )
        if table.row_count:
            table.move_cursor(row=min(at, table.row_count - 1))
        else:
            self.query_one("#tune-detail", Static).update(Text("no tuner planned anything", style="dim"))

    def on_resize(self, event: events.Resize) -> None:
        if self.loaded:
            self.build_table()

    def render_state(self) -> None:
        changes = [r for r in self.rows.values() if r.change is not None]
        selectable = [k for k, r in self.rows.items() if r.selectable]
        line = Text()
        if self.read_only:
            line.append("READ-ONLY: ", style="bold yellow")
            line.append(shown(f"{self.read_only}\n"))
        line.append(f"{len(changes)} change(s) from {len({r.plan.tuner for r in changes})} tuner(s)")
        applied = sum(r.done for r in changes)
        if applied:
            line.append(f"; {applied} applied ({APPLIED_MARK})")
        if not self.read_only:
            line.append(f"; {len(self.selected)} of {len(selectable)} selected (space, a; p applies)")
        if any(r.change.scope is Scope.BOOT for r in changes if r.change is not None):
            line.append(f"; {BOOT_ADVICE}", style="dim")
        if self.busy or self.planning:
            line.append(shown(f"; {self.busy or 'planning'}..."), style="bold")
        self.query_one("#tune-state", Static).update(line)

    def _current(self) -> tuple[str, Row] | None:
        table = self.query_one("#plan", DataTable)
        if not table.row_count:
            return None
        key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        row = self.rows.get(key)
        return None if row is None else (key, row)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        row = self.rows.get(str(event.row_key.value))
        if row is not None:
            self.query_one("#tune-detail", Static).update(change_detail(row))

    # -- selection --------------------------------------------------------------------------------
    def _refuse_if_read_only(self, what: str) -> bool:
        if self.read_only:
            self.app.notify(
                f"cannot {what}: {self.read_only}", title="read-only", severity="warning", markup=False
            )
            return True
        return False

    def _set_mark(self, key: str) -> None:
        self.query_one("#plan", DataTable).update_cell(
            key, "mark", mark(self.rows[key], key in self.selected)
        )

    def action_toggle_change(self) -> None:
        current = self._current()
        if current is None or self._refuse_if_read_only("select changes"):
            return
        key, row = current
        if row.change is None:
            self.app.notify(f"{row.plan.tuner} has nothing to change", markup=False)
            return
        if row.done:
            what = f"{row.plan.tuner}: {row.change.target}"
            self.app.notify(f"{what}: {done_text(row)}", markup=False)
            return
        if not row.selectable:
            self.app.notify(f"{row.plan.tuner}: {BOOT_ADVICE}", severity="warning", markup=False)
            return
        self.selected ^= {key}
        self._set_mark(key)
        self.render_state()

    def action_toggle_all_changes(self) -> None:
        if not self.loaded or self._refuse_if_read_only("select changes"):
            return
        selectable = {k for k, r in self.rows.items() if r.selectable}
        self.selected = set() if selectable <= self.selected else selectable
        for key in self.rows:
            self._set_mark(key)
        self.render_state()

    # -- apply ------------------------------------------------------------------------------------
    def _can_change(self, what: str) -> bool:
        if not self.loaded:
            self.app.notify(f"cannot {what} yet: the plan is not in", severity="warning", markup=False)
            return False
        if self._refuse_if_read_only(what):
            return False
        if self.busy:
            self.app.notify(f"wait: {self.busy}", severity="warning", markup=False)
            return False
        return True

    def action_apply(self) -> None:
        if not self._can_change("apply"):
            return
        plans = selected_plans(self.plans, self.rows, self.selected)
        if not plans:
            self.app.notify(
                "nothing selected: space selects a change, a selects all", severity="warning", markup=False
            )
            return
        changes = [c for p in plans for c in p.changes]
        lines = [f"{c.scope.value:8} {c.tuner}: {c.target}: {c.before} -> {c.after}" for c in changes]
        if len(lines) > _CONFIRM_LINES:
            lines = [*lines[:_CONFIRM_LINES], f"... and {len(lines) - _CONFIRM_LINES} more"]
        lines.append(
            "Runtime values are journaled first (revert with v); process settings go to the profile."
        )
        question = f"Apply {len(changes)} change(s) of {', '.join(p.tuner for p in plans)}?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = "applying"
                self.render_state()
                self.run_apply(plans)

        self.app.push_screen(ConfirmScreen(question, "\n".join(lines)), answered)

    @work(thread=True, exclusive=True, group="tune-change")
    def run_apply(self, plans: list[Plan]) -> None:
        app: Any = self.app
        try:
            result = app.backend.apply(plans)
        except Exception as e:  # UsageError (not root, a write refused) included: said, not raised
            self.post_message(Applied(plans, None, error=f"applying the plan: {e}"))
            return
        self.post_message(Applied(plans, result))

    def on_applied(self, message: Applied) -> None:
        self.busy = None
        if message.error is not None or message.result is None:
            # A failed apply undid its writes (apply.apply): nothing is marked applied.
            self._show_result(lit(message.error or "apply failed", style="red"))
            self.app.notify(message.error or "apply failed", title="error", severity="error", markup=False)
        else:
            self._mark_applied(message.plans, message.result)
            self._show_result(apply_report(message.result))
            self.app.notify("applied: see the verification under the plan", markup=False)
        self.render_state()
        self.plan(again=True)  # what is left to do, now

    def _mark_applied(self, plans: list[Plan], result: ApplyResult) -> None:
        """Record the changes sent as applied (no-ops included: their value is in place) and show
        them so at once, unselected, rather than after the new plan."""
        journal_id = result.journal.id if result.journal is not None else NO_JOURNAL
        for c in (c for p in plans for c in p.changes if c.scope is not Scope.BOOT):
            self.applied[change_key(c)] = journal_id
        self.rows = rows_of(self.plans, self.applied, self.saved)
        self.selected = {k for k in self.selected if k in self.rows and self.rows[k].selectable}
        self.build_table()

    def _show_result(self, renderable: RenderableType) -> None:
        result = self.query_one("#tune-result", Static)
        result.update(renderable)
        result.display = True

    # -- revert -----------------------------------------------------------------------------------
    def action_revert(self) -> None:
        self.revert("pick")

    def revert(self, which: str) -> None:
        """Revert a journal chosen in the picker (`pick`, the v key), the `last` apply or `all` of
        them (the command palette); always behind a confirmation."""
        if self._can_change("revert"):
            self.load_journals(which)

    @work(thread=True, exclusive=True, group="tune-journals")
    def load_journals(self, which: str) -> None:
        app: Any = self.app
        try:
            journals = app.backend.journals()
        except Exception as e:
            self.post_message(JournalsLoaded([], which, error=f"reading the journals: {e}"))
            return
        self.post_message(JournalsLoaded(journals, which))

    def on_journals_loaded(self, message: JournalsLoaded) -> None:
        if message.error is not None:
            self.app.notify(message.error, title="error", severity="error", markup=False)
            return
        if not message.journals:
            self.app.notify(
                "no journal to revert: nothing has been applied here", severity="warning", markup=False
            )
            return
        if message.which == "pick":
            self.app.push_screen(JournalPicker(message.journals), self._journal_chosen)
            return
        ids = pending_journals(message.journals, message.which)
        if not ids:
            self.app.notify(
                "nothing to revert: every journal is already reverted", severity="warning", markup=False
            )
            return
        self._confirm_revert(ids)

    def _journal_chosen(self, journal_id: str | None) -> None:
        if journal_id is not None:
            self._confirm_revert([journal_id])

    def _confirm_revert(self, journal_ids: list[str]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = "reverting"
                self.render_state()
                self.run_revert(journal_ids)

        what = "Writes back every value it saved and restores the profile file it changed."
        if len(journal_ids) == 1:
            question = f"Revert journal {journal_ids[0]}?"
        else:
            question = f"Revert {len(journal_ids)} journals, newest first?"
            what = "\n".join([*journal_ids, "Each writes back every value it saved and its profile file."])
        self.app.push_screen(ConfirmScreen(question, what), answered)

    @work(thread=True, exclusive=True, group="tune-change")
    def run_revert(self, journal_ids: list[str]) -> None:
        """One journal after another, newest first; a failure stops there, saying which reverted."""
        app: Any = self.app
        done: list[str] = []
        findings: list[Finding] = []
        for journal_id in journal_ids:
            try:
                findings += app.backend.revert(journal_id)
            except Exception as e:
                self.post_message(Reverted(done, findings, error=f"reverting {journal_id}: {e}"))
                return
            done.append(journal_id)
        self.post_message(Reverted(done, findings))

    def on_reverted(self, message: Reverted) -> None:
        self.busy = None
        # The changes of a reverted journal are no longer applied: the new plan may select them.
        reverted = set(message.journal_ids)
        self.applied = {k: j for k, j in self.applied.items() if j not in reverted}
        parts: list[RenderableType] = []
        if message.journal_ids:
            plural = "s" if len(message.journal_ids) > 1 else ""
            parts.append(lit(f"reverted journal{plural} {', '.join(message.journal_ids)}", style="bold"))
        if message.error is not None:
            parts.append(lit(message.error, style="red"))
            self.app.notify(message.error, title="error", severity="error", markup=False)
        parts.append(findings_lines(message.findings))
        self._show_result(Group(*parts))
        self.render_state()
        self.plan(again=True)
