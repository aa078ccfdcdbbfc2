"""Bench: run the benchmark (quick with `b`, full with `B` after a confirmation) with a live progress
bar, then its chart, table and the verdict a keep/revert decision rests on; and verify the profile
(`v`: `nodeagent verify --quick` on the built-in workload), A/B trials shown block by block as they
end, then the verdict, above the history of verify decisions recorded on this machine.

The benchmark runs in a thread worker (backend.bench); its progress callback only records the latest
progress, and a timer draws it twice a second, as the CLI's bar does: on a 2-CPU node a busy
renderer would slow down the workers it measures (nodeagent.render.progress_bar). A verify
reports a block every few seconds (a pair of worker processes each), so each block is posted as a
message and drawn at once. The benchmark and a verify load every CPU: one runs at a time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, ProgressBar, Static

from nodeagent.render.literal import lit
from nodeagent.tui import keys
from nodeagent.tui.screens.base import NodeAgentScreen
from nodeagent.tui.widgets import bench_report, verify_report

if TYPE_CHECKING:
    from textual.timer import Timer
    from textual.widgets.data_table import CursorType

    from nodeagent.bench.ab import Block
    from nodeagent.bench.paired import Estimate
    from nodeagent.bench.run import BenchResult, Progress
    from nodeagent.bench.verify import ProfileVerdict
    from nodeagent.tuning.history import Record

REFRESH_S = 0.5  # the CLI's bar refreshes twice a second too (refresh_per_second=2 in bench.run)
HINT = (
    "b: quick benchmark (about a minute)   B: full benchmark (several minutes)   "
    "v: verify the profile (A/B trials, quick, built-in workload)"
)
# What is measured (nodeagent/bench/__init__.py, run.py), shown until the first result.
INTRO = Text(
    "A small Keras CNN trained on a tf.data pipeline of JPEG images, each configuration in fresh "
    "processes: naive (sequential, unprefetched input), autotune (tf.data AUTOTUNE), tuned (your "
    "pipeline under `nodeagent exec --profile`), and input_only / compute_only, which bound what "
    "any can reach. The verdict keeps a tuning only when tuned is significantly faster than naive.",
    style="dim",
)
# What `v` does (nodeagent/bench/ab.py, verify.py), shown until the first verify.
VERIFY_INTRO = Text(
    "v: is the built-in workload faster with the profile? A (as it is) and B (through the profile) "
    "run as pairs of worker processes in the order A B B A A B ..., each pair gives B/A, and the "
    "trials stop once the paired interval decides (quick: about 3 minutes at most). The verdict is "
    "added to the history below.",
    style="dim",
)
VERIFYING = "verify (quick, built-in workload): starting the first pair of workers..."


@dataclass
class BenchDone(Message):
    quick: bool
    result: BenchResult


@dataclass
class BenchFailed(Message):
    quick: bool
    error: str


@dataclass
class VerifyBlock(Message):
    """A block of A/B trials ended; `estimate` is the analysis so far (None before the first look)."""

    block: Block
    estimate: Estimate | None


@dataclass
class VerifyDone(Message):
    verdict: ProfileVerdict


@dataclass
class VerifyFailed(Message):
    """The verify could not run or stopped: no profile, no TensorFlow (a UsageError's one line), ..."""

    error: str


@dataclass
class HistoryLoaded(Message):
    records: list[Record]


@dataclass
class HistoryFailed(Message):
    """The history file could not be read (a line that is not a record: its file and line)."""

    error: str


class ConfirmFull(ModalScreen[bool]):
    """The full run takes minutes and loads every CPU: asked once more before it starts."""

    BINDING_GROUP_TITLE = "Full benchmark dialog"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "dismiss(True)", "Start the full benchmark"),
        Binding("n,escape", "dismiss(False)", "Cancel"),
        keys.HELP,
    ]

    def compose(self) -> ComposeResult:
        # nodeagent.bench.run.FULL: 5 processes per configuration, about 7 minutes on a 2-CPU VM.
        with Vertical(id="bench-confirm"):
            yield Static(
                Text.assemble(
                    ("Start the full benchmark?\n\n", "bold"),
                    "5 fresh processes per configuration: several minutes (about 7 on a 2-CPU "
                    "node), with every CPU busy. Other jobs on this node would disturb it.\n\n",
                    ("y", "bold"),
                    ": start   ",
                    ("n", "bold"),
                    ": cancel",
                )
            )
        yield Footer(compact=True, show_command_palette=False)


def hidden_table(table_id: str, columns: tuple[str, ...], cursor: CursorType) -> DataTable[Any]:
    """A DataTable with its columns, not displayed until it has rows to show."""
    table: DataTable[Any] = DataTable(id=table_id, cursor_type=cursor, zebra_stripes=True)
    table.add_columns(*columns)
    table.display = False
    return table


class BenchScreen(NodeAgentScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "start(True)", "Quick", tooltip="Run the quick benchmark (about a minute)"),
        Binding("B", "confirm_full", "Full", tooltip="Run the full benchmark (minutes; asks first)"),
        Binding("v", "verify", "Verify", tooltip="A/B trials of the profile (quick, built-in workload)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.running = False
        self.activity = "a benchmark"  # what is running, for the refusal of a second one
        self.quick = True
        self.latest: bench_report.LiveProgress | None = None  # written by the worker, read by the timer
        self.shown: bench_report.LiveProgress | None = None
        self.timer: Timer | None = None
        self.result: BenchResult | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(lit(HINT, style="dim"), id="bench-state")
        yield ProgressBar(total=1.0, show_eta=False, id="bench-progress")
        with VerticalScroll(id="bench-results"):
            with Vertical(id="bench-run"):
                yield Static(INTRO, id="bench-verdict")
                yield Static(id="bench-table", classes="-until-filled")
                yield Static(id="bench-notes", classes="-until-filled")  # then the chart (show_chart)
            with Vertical(id="verify"):
                yield Static(VERIFY_INTRO, id="verify-state")
                yield hidden_table("verify-trials", verify_report.TRIAL_COLUMNS, "none")  # until a verify
                yield Static(id="verify-verdict", classes="-until-filled")
                yield Static(id="verify-history-title")
                yield hidden_table("verify-history", verify_report.HISTORY_COLUMNS, "row")  # until read
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.load_history()

    def action_confirm_full(self) -> None:
        if self._busy():
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.action_start(False)

        self.app.push_screen(ConfirmFull(), answered)

    def _busy(self) -> bool:
        if self.running:
            self.app.notify(f"{self.activity} is already running", severity="warning", markup=False)
        return self.running

    def action_start(self, quick: bool) -> None:
        if self._busy():
            return
        self.running, self.quick, self.activity = True, quick, "a benchmark"
        self.latest = self.shown = None
        mode = "quick" if quick else "full"
        self.query_one("#bench-state", Static).update(lit(f"{mode} benchmark: preparing the data set..."))
        self.query_one("#bench-progress", ProgressBar).update(progress=0)
        self.timer = self.set_interval(REFRESH_S, self.show_progress)
        self.run_bench(quick)

    @work(thread=True, exclusive=True, group="bench")
    def run_bench(self, quick: bool) -> None:
        app: Any = self.app
        start = time.monotonic()
        rate = bench_report.StepRate()

        def on_progress(p: Progress) -> None:
            now = time.monotonic()
            rate.add(p, now)
            self.latest = bench_report.LiveProgress(p, rate.per_s(), now - start)

        try:
            result = app.backend.bench(quick, on_progress)
        except Exception as e:  # TensorFlow missing (UsageError), a worker that cannot start, ...
            self.post_message(BenchFailed(quick, str(e) or type(e).__name__))
            return
        self.post_message(BenchDone(quick, result))

    def show_progress(self) -> None:
        live = self.latest
        if not self.running or live is None or live is self.shown:  # a tick queued before the end
            return
        self.shown = live
        self.query_one("#bench-progress", ProgressBar).update(progress=live.progress.fraction)
        self.query_one("#bench-state", Static).update(bench_report.progress_text(live, self.quick))

    def _stop(self) -> None:
        self.running = False
        if self.timer is not None:
            self.timer.stop()
            self.timer = None

    def on_bench_failed(self, message: BenchFailed) -> None:
        self._stop()
        mode = "quick" if message.quick else "full"
        line = lit(f"{mode} benchmark failed: {message.error}", style="bold red")
        self.query_one("#bench-state", Static).update(line.append(f"\n{HINT}", style="dim"))
        self.app.notify(message.error, title="benchmark", severity="error", timeout=10, markup=False)

    def on_bench_done(self, message: BenchDone) -> None:
        self._stop()
        self.result = message.result
        self.query_one("#bench-progress", ProgressBar).update(progress=1.0)
        r = message.result
        state = lit(f"{'quick' if r.quick else 'full'} benchmark done in {r.duration_s:.0f} s")
        if r.profile:
            state.append(f" (tuned: profile {r.profile})")
        self.query_one("#bench-state", Static).update(state.append(f"\n{HINT}", style="dim"))
        self.query_one("#bench-verdict", Static).update(bench_report.verdict_view(r))
        self.fill("#bench-table", bench_report.results_table(r))
        self.fill("#bench-notes", bench_report.results_notes(r))
        self.show_chart(r)

    def fill(self, selector: str, content: RenderableType) -> None:
        """Show `content` in a Static that took no room while it had nothing to show."""
        static = self.query_one(selector, Static)
        static.update(content)
        static.remove_class("-until-filled")

    def show_chart(self, result: BenchResult) -> None:
        # Imported here, not at the top: plotext is only needed once a result is in (startup time).
        from textual_plotext import PlotextPlot

        found = self.query("#bench-chart")
        plot = found.first(PlotextPlot) if found else PlotextPlot(id="bench-chart")
        if not found:
            self.query_one("#bench-run").mount(plot)
        plot.display = bench_report.draw_chart(plot.plt, result)
        plot.refresh()

    # -- verify: A/B trials of the profile, and the history of decisions -----------------------------

    def action_verify(self) -> None:
        if self._busy():
            return
        self.running, self.activity = True, "a verify"
        self.query_one("#verify-state", Static).update(lit(VERIFYING, style="bold"))
        self.query_one("#verify-verdict", Static).add_class("-until-filled")
        trials = self.query_one("#verify-trials", DataTable)
        trials.clear()
        trials.display = True
        self.follow_verify()
        self.run_verify()

    @work(thread=True, exclusive=True, group="bench")
    def run_verify(self) -> None:
        app: Any = self.app

        def on_block(block: Block, estimate: Estimate | None) -> None:
            self.post_message(VerifyBlock(block, estimate))

        try:
            verdict = app.backend.verify(True, on_block)
        except Exception as e:  # no profile, no TensorFlow (UsageError), a state disk that refuses, ...
            self.post_message(VerifyFailed(str(e) or type(e).__name__))
            return
        self.post_message(VerifyDone(verdict))

    def on_verify_block(self, message: VerifyBlock) -> None:
        trials = self.query_one("#verify-trials", DataTable)
        trials.add_row(*verify_report.block_row(message.block))
        trials.scroll_end(animate=False)  # the newest block in view
        self.follow_verify()
        self.query_one("#verify-state", Static).update(
            verify_report.block_status(message.block, message.estimate)
        )

    def follow_verify(self) -> None:
        """The verify section at the top of the view as each block comes: the benchmark's results
        above it would otherwise hide the trials on a small terminal. Asked after the next refresh:
        where the section is, and how far the view can scroll, are known once the rows just added
        are laid out (Textual's own deferred scroll measures before)."""
        section = self.query_one("#verify")
        self.call_after_refresh(section.scroll_visible, top=True, animate=False)

    def on_verify_failed(self, message: VerifyFailed) -> None:
        self.running = False
        trials = self.query_one("#verify-trials", DataTable)
        trials.display = trials.row_count > 0  # the blocks that ended before it failed, if any
        self.query_one("#verify-state", Static).update(
            lit(f"verify failed: {message.error}", style="bold red")
        )
        self.app.notify(message.error, title="verify", severity="error", timeout=10, markup=False)

    def on_verify_done(self, message: VerifyDone) -> None:
        self.running = False
        result = message.verdict.result
        trials = self.query_one("#verify-trials", DataTable)
        trials.clear()  # the result's blocks: those told as they ended, and a failed last one
        for block in result.blocks:
            trials.add_row(*verify_report.block_row(block))
        self.query_one("#verify-state", Static).update(
            verify_report.done_line(result, message.verdict.profile)
        )
        self.fill("#verify-verdict", verify_report.verdict_view(result))
        self.follow_verify()  # with the verdict in: the section's final size
        self.load_history()

    @work(thread=True, exclusive=True, group="verify-history")
    def load_history(self) -> None:
        app: Any = self.app
        try:
            records = app.backend.history()
        except Exception as e:  # a history line that is not a record (UsageError: file and line)
            self.post_message(HistoryFailed(str(e) or type(e).__name__))
            return
        self.post_message(HistoryLoaded(records))

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        self.query_one("#verify-history-title", Static).update(verify_report.history_title(message.records))
        table = self.query_one("#verify-history", DataTable)
        table.clear()
        for record in message.records:
            table.add_row(*verify_report.history_row(record))
        table.display = bool(message.records)
        if message.records:
            table.move_cursor(row=table.row_count - 1)  # newest last, and in view

    def on_history_failed(self, message: HistoryFailed) -> None:
        self.query_one("#verify-history-title", Static).update(
            lit(f"verify history: {message.error}", style="bold red")
        )
        self.query_one("#verify-history", DataTable).display = False
