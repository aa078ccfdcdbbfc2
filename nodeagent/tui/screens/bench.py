"""Bench: run the benchmark (quick with `b`, full with `B` after a confirmation) with a live progress
bar, then its chart, table and the verdict a keep/revert decision rests on.

The benchmark runs in a thread worker (backend.bench); its progress callback only records the latest
progress, and a timer draws it twice a second, as the CLI's bar does: on a 2-CPU node a busy
renderer would slow down the workers it measures (nodeagent.render.bench.ProgressBar)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, ProgressBar, Static

from nodeagent.render.literal import lit
from nodeagent.tui.widgets import bench_report

if TYPE_CHECKING:
    from textual.timer import Timer

    from nodeagent.bench.run import BenchResult, Progress

REFRESH_S = 0.5  # the CLI's bar refreshes twice a second too (refresh_per_second=2 in bench.run)
HINT = "b: quick benchmark (about a minute)   B: full benchmark (several minutes)"
# What is measured (nodeagent/bench/__init__.py, run.py), shown until the first result.
INTRO = Text(
    "A small Keras CNN trained on a tf.data pipeline of JPEG images, each configuration in fresh "
    "processes: naive (sequential, unprefetched input), autotune (tf.data AUTOTUNE), tuned (your "
    "pipeline under `nodeagent exec --profile`), and input_only / compute_only, which bound what "
    "any can reach. The verdict keeps a tuning only when tuned is significantly faster than naive.",
    style="dim",
)


@dataclass
class BenchDone(Message):
    quick: bool
    result: BenchResult


@dataclass
class BenchFailed(Message):
    quick: bool
    error: str


class ConfirmFull(ModalScreen[bool]):
    """The full run takes minutes and loads every CPU: asked once more before it starts."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "dismiss(True)", "Start the full benchmark"),
        Binding("n,escape", "dismiss(False)", "Cancel"),
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


class BenchScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "start(True)", "Quick", tooltip="Run the quick benchmark (about a minute)"),
        Binding("B", "confirm_full", "Full", tooltip="Run the full benchmark (minutes; asks first)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.running = False
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
            yield Static(INTRO, id="bench-verdict")
            yield Static(id="bench-table")
            yield Static(id="bench-notes")  # the chart goes after these (show_chart)
        yield Footer(compact=True, show_command_palette=False)

    def action_confirm_full(self) -> None:
        if self._busy():
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.action_start(False)

        self.app.push_screen(ConfirmFull(), answered)

    def _busy(self) -> bool:
        if self.running:
            self.app.notify("a benchmark is already running", severity="warning", markup=False)
        return self.running

    def action_start(self, quick: bool) -> None:
        if self._busy():
            return
        self.running, self.quick = True, quick
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
        self.query_one("#bench-table", Static).update(bench_report.results_table(r))
        self.query_one("#bench-notes", Static).update(bench_report.results_notes(r))
        self.show_chart(r)

    def show_chart(self, result: BenchResult) -> None:
        # Imported here, not at the top: plotext is only needed once a result is in (startup time).
        from textual_plotext import PlotextPlot

        found = self.query("#bench-chart")
        plot = found.first(PlotextPlot) if found else PlotextPlot(id="bench-chart")
        if not found:
            self.query_one("#bench-results").mount(plot)
        plot.display = bench_report.draw_chart(plot.plt, result)
        plot.refresh()
