"""The TUI's Bench and Cluster screens, driven by Textual's pilot on the fake backend (a benchmark
that reports progress, a verify whose blocks of A/B trials come one by one, the history of verify
decisions, a fleet with a dead host, drift and an outlier) and on the real backend with an
inventory of hosts that refuse connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, ProgressBar
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from nodeagent.bench import ab, run, stats
from nodeagent.bench import verify as verifying
from nodeagent.bench.paired import Estimate
from nodeagent.bench.run import BenchResult, ConfigResult, Progress
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import HostOutcome
from nodeagent.compare.fleet import FleetComparison
from nodeagent.core.errors import UsageError
from nodeagent.tui.app import NodeAgentApp, make_app
from nodeagent.tui.backend import LocalBackend
from nodeagent.tui.screens.bench import BenchScreen, ConfirmFull
from nodeagent.tui.screens.cluster import NO_INVENTORY, ClusterScreen, HostScreen
from nodeagent.tui.widgets import bench_report
from nodeagent.tui.widgets.host_tile import HostTile
from tests.support.cli import RunCli
from tests.support.paths import VM
from tests.support.tui_driver import drive, notifications, plain, settle, text_of
from tests.support.tui_fakes import FakeBackend, bench_result, fleet_report, history_records

HOSTS = [f"node{i:02d}" for i in range(1, 9)]


# -- driving the app ---------------------------------------------------------------------------------


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    """Wait (polling) for a state that a worker and a timer bring about; fails naming it."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await pilot.pause(0.05)


def tiles(app: NodeAgentApp) -> dict[str, HostTile]:
    return {t.host: t for t in app.screen.query(HostTile)}


def tile_text(tile: HostTile) -> str:
    return plain(tile.content)


def table_cells(app: NodeAgentApp, selector: str) -> list[list[str]]:
    """A DataTable's rows as plain text, top to bottom."""
    table: DataTable[Any] = app.screen.query_one(selector, DataTable)
    return [[plain(c).strip() for c in table.get_row_at(i)] for i in range(table.row_count)]


# -- fakes beyond tests/support/tui_fakes.py ------------------------------------------------------


@dataclass
class GatedBench(FakeBackend):
    """A benchmark that stops halfway (step 5 of 10) until `halfway` is set; records its modes."""

    halfway: threading.Event = field(default_factory=threading.Event)
    modes: list[bool] = field(default_factory=list)
    result: BenchResult = field(default_factory=bench_result)

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        self.modes.append(quick)
        if self.fail_bench:
            raise RuntimeError(self.fail_bench)
        for step in range(1, 11):
            time.sleep(0.01)  # progress lines come apart in time: a step rate can be measured
            on_progress(Progress("naive", 1, 1, step, 10, step / 10))
            if step == 5:
                self.halfway.wait(10)
        return self.result


@dataclass
class MeasuredBench(FakeBackend):
    """The benchmark that `nodeagent bench` runs (nodeagent.bench.run.run_bench: its workers, the
    bound and the fractions), on tests/support/fake_bench.py's workers (the `fake_worker` fixture)."""

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        return run.run_bench(quick, on_progress=on_progress)


@dataclass
class NoTensorFlow(FakeBackend):
    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        raise UsageError("the benchmark needs TensorFlow: pip install 'nodeagent[tf]'")


@dataclass
class GatedVerify(FakeBackend):
    """A verify that stops after the blocks numbered in `stops` until their events are set."""

    stops: dict[int, threading.Event] = field(
        default_factory=lambda: {3: threading.Event(), 8: threading.Event()}
    )

    def verify(
        self, quick: bool, on_block: Callable[[ab.Block, Estimate | None], None]
    ) -> verifying.ProfileVerdict:
        def gated(block: ab.Block, estimate: Estimate | None) -> None:
            on_block(block, estimate)
            if block.number in self.stops:
                self.stops[block.number].wait(10)

        return super().verify(quick, gated)


@dataclass
class GatedFleet(FakeBackend):
    """A fleet whose inventory can be read upfront (hosts pending) and whose run waits for `go`."""

    go: threading.Event = field(default_factory=threading.Event)

    def inventory(self) -> Any:
        return SimpleNamespace(hosts=[SimpleNamespace(name=n) for n in HOSTS])

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport:
        self.go.wait(10)
        return fleet_report(on_done, 0.0)


@dataclass
class OddFleet(FakeBackend):
    """Hosts that sent odd documents: an unknown status, findings that are not a list."""

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport:
        outcomes = {
            "odd1": HostOutcome("odd1", "10.0.0.1", {"status": "banana", "findings": "nope"}),
            "odd2": HostOutcome("odd2", "10.0.0.2", {"findings": [{"status": "WARN"}, "not a finding"]}),
        }
        for o in outcomes.values():
            on_done(o)
        # Not FleetReport.build: fleet.host_values expects findings that are mappings.
        return FleetReport(outcomes, FleetComparison(0, [], []), 0.1)


def skipped_tuned_result() -> BenchResult:
    """tuned skipped (no profile), autotune failed: the verdicts say why, run.verdict's own way."""
    r = bench_result()
    configs = dict(r.configs)
    configs["tuned"] = ConfigResult(
        "tuned", run.SKIPPED, "no profile 'default': run `nodeagent tune --apply`"
    )
    configs["autotune"] = ConfigResult("autotune", run.FAILED, "worker exited with 1\nTraceback ...")
    verdicts = {
        "tuned_vs_naive": run.verdict(configs, "tuned", "naive"),
        "tuned_vs_autotune": run.verdict(configs, "tuned", "autotune"),
    }
    return replace(r, configs=configs, verdicts=verdicts)


# -- Bench ---------------------------------------------------------------------------------------------


def test_bench_progress_advances_then_verdict_table_and_chart_appear() -> None:
    backend = GatedBench()
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, BenchScreen)
        bar = app.screen.query_one("#bench-progress", ProgressBar)
        assert bar.progress == 0
        await pilot.press("b")
        await until(pilot, lambda: bar.progress == 0.5, "the bar at the halfway step")
        state = text_of(app, "#bench-state")
        assert "quick benchmark: naive, process 1/1, step 5/10" in state
        assert "steps/s (this process, last 5 s)" in state
        assert not app.screen.query(PlotextPlot)  # no chart before a result
        backend.halfway.set()
        await settle(pilot)
        await until(pilot, lambda: bool(app.screen.query(PlotextPlot)), "the chart")
        assert bar.progress == 1.0
        assert backend.modes == [True]
        assert "quick benchmark done in 12 s" in text_of(app, "#bench-state")
        verdict = text_of(app, "#bench-verdict")
        keep = "keep: tuned is significantly faster than naive (tuned/naive = 1.690, 95% CI [1.500, 1.800])"
        assert keep in verdict
        assert "tuned vs autotune: no significant difference, tuned/autotune = 1.030" in verdict
        rows = {
            line.split()[0]: line.split()
            for line in text_of(app, "#bench-table").splitlines()
            if line.strip()
        }
        assert rows["naive"][:7] == ["naive", "ok", "530.0", "[508.8,", "551.2]", "±4.0%", "0.53"]
        assert rows["tuned"][2:5] == ["894.0", "[858.2,", "929.8]"]
        assert rows["compute_only"][-2:] == ["-", "-"]  # of bound, wait: a stage has neither
        assert "bound on naive, autotune, tuned: 1000.0 images/s" in text_of(app, "#bench-notes")
        plot = app.screen.query_one(PlotextPlot)
        assert plot.display
        chart = plain(plot.render())
        for label in ("naive", "autotune", "tuned", "bound", "509-551", "834-904", "858-930", "1000"):
            assert label in chart

    drive(app, steps)


# The fake workers' throughputs (images/s) and CPU-seconds per image (tests/support/fake_bench.py), with
# stages that are fast alone: the CPU budget, 2 CPUs / (0.004 + 0.006) = 200 images/s, is the bound,
# below the stage bound min(244, 360) = 244.
MEASURED = {"naive": 100.0, "autotune": 140.0, "input_only": 244.0, "compute_only": 360.0}
MEASURED_BOUND = 2 / (0.004 + 0.006)


def of_bound(row: list[str]) -> str:
    """A row's "of bound" cell: the sixth column (config, status, median, "[lo, hi] +-x%", ...)."""
    return row[6] if len(row) > 6 else row[4]  # a config that did not run: "-" in every column


def test_of_bound_is_a_share_of_a_bound_on_the_config(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stages are what the bound is made of: they have no share of it (here they would read
    244 / 200 = 1.22 and 360 / 200 = 1.80); naive and autotune are 100 / 200 and 140 / 200."""
    for name, speed in MEASURED.items():
        monkeypatch.setenv(f"FAKE_SPEED_{name.upper()}", str(speed))
    app = make_app(MeasuredBench(delay_s=0), start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("b")
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        await until(pilot, lambda: screen.result is not None, "the benchmark's result", timeout_s=60)
        await settle(pilot)
        rows = {
            line.split()[0]: line.split()
            for line in text_of(app, "#bench-table").splitlines()
            if line.strip()
        }
        for name in ("naive", "autotune"):  # the fake workers' jitter: within 1.5% of their speed
            assert float(of_bound(rows[name])) == pytest.approx(MEASURED[name] / MEASURED_BOUND, abs=0.02)
        assert of_bound(rows["input_only"]) == "-" and of_bound(rows["compute_only"]) == "-"
        assert rows["tuned"][1] == "skipped"  # no profile in the fake's state folder
        notes = text_of(app, "#bench-notes")
        assert "bound on naive, autotune, tuned: 200.0 images/s" in " ".join(notes.split())

    drive(app, steps)


def test_full_bench_asks_first_and_runs_only_on_yes() -> None:
    backend = GatedBench()
    backend.halfway.set()
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("B")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmFull)
        await pilot.press("n")
        await settle(pilot)
        assert isinstance(app.screen, BenchScreen)
        assert backend.modes == []
        await pilot.press("B", "y")
        await settle(pilot)
        await until(pilot, lambda: "benchmark done" in text_of(app, "#bench-state"), "the run's end")
        assert backend.modes == [False]

    drive(app, steps)


def test_bench_failure_is_notified_and_the_screen_stays_usable() -> None:
    backend = GatedBench(fail_bench="the worker could not start: python3 missing")
    backend.halfway.set()
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("b")
        await settle(pilot)
        assert any("python3 missing" in n for n in notifications(app))
        assert "quick benchmark failed: the worker could not start" in text_of(app, "#bench-state")
        backend.fail_bench = None  # fixed: the same screen runs it again
        await pilot.press("b")
        await settle(pilot)
        await until(pilot, lambda: "keep:" in text_of(app, "#bench-verdict"), "the verdict after a retry")
        assert backend.modes == [True, True]

    drive(app, steps)


def test_missing_tensorflow_shows_the_install_hint() -> None:
    app = make_app(NoTensorFlow(), start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("b")
        await settle(pilot)
        assert any("pip install 'nodeagent[tf]'" in n for n in notifications(app))
        assert "pip install 'nodeagent[tf]'" in text_of(app, "#bench-state")
        assert isinstance(app.screen, BenchScreen)

    drive(app, steps)


def test_skipped_and_failed_configs_show_their_reasons_and_no_proof_of_a_gain() -> None:
    backend = GatedBench(result=skipped_tuned_result())
    backend.halfway.set()
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("b")
        await settle(pilot)
        await until(pilot, lambda: "no proof" in text_of(app, "#bench-verdict"), "the verdict")
        verdict = text_of(app, "#bench-verdict")
        assert (
            "no proof of a gain: tuned is not significantly faster than naive (not measured; tuned" in verdict
        )
        notes = text_of(app, "#bench-notes")
        assert "tuned skipped: no profile 'default'" in notes
        assert "autotune failed: worker exited with 1" in notes
        assert "Traceback" not in notes  # the first line of the reason only
        table = text_of(app, "#bench-table")
        assert any(
            line.split()[:3] == ["tuned", "skipped", "-"] for line in table.splitlines() if line.strip()
        )
        chart = plain(app.screen.query_one(PlotextPlot).render())
        assert "509-551" in chart and "tuned" not in chart  # only configs with a figure

    drive(app, steps, size=(120, 40))


@pytest.mark.parametrize("columns", [50, 60, 76, 118])
def test_every_bar_keeps_its_name_and_interval_on_a_narrow_chart(columns: int) -> None:
    """plotext drops a tick label that would overlap its neighbour: all four must survive on a
    chart as narrow as a split 80-column terminal gives."""
    plot = Plot()
    assert bench_report.draw_chart(plot, bench_result())
    plot.plotsize(columns, 14)
    chart = plain(Text.from_ansi(plot.build()))
    for label in ("naive", "autotune", "tuned", "bound", "509-551", "834-904", "858-930", "1000"):
        assert label in chart, f"{label!r} missing at {columns} columns:\n{chart}"


def test_step_rate_follows_the_current_process() -> None:
    rate = bench_report.StepRate(window_s=5)
    assert rate.per_s() is None
    rate.add(Progress("naive", 1, 2, 1, 100, 0.0), now=10.0)
    assert rate.per_s() is None  # one line is no rate
    rate.add(Progress("naive", 1, 2, 5, 100, 0.0), now=12.0)
    assert rate.per_s() == 2.0
    for t in range(13, 30):  # old lines leave the window: the rate is the recent one
        rate.add(Progress("naive", 1, 2, 5 + (t - 12) * 10, 100, 0.0), now=float(t))
    assert rate.per_s() == 10.0
    rate.add(Progress("naive", 2, 2, 1, 100, 0.0), now=30.0)  # the next process starts afresh
    assert rate.per_s() is None


@pytest.mark.parametrize(
    ("verdict", "ratio", "expected"),
    [
        (
            stats.FASTER,
            (1.2, [1.1, 1.3]),
            "keep: tuned is significantly faster than naive (tuned/naive = 1.200, 95% CI [1.100, 1.300])",
        ),
        (
            stats.SAME,
            (1.0, [0.9, 1.1]),
            "no proof of a gain: tuned is not significantly faster than naive (no significant difference; "
            "tuned/naive = 1.000, 95% CI [0.900, 1.100])",
        ),
        (
            stats.SLOWER,
            (0.8, [0.7, 0.9]),
            "no proof of a gain: tuned is not significantly faster than naive (slower; tuned/naive = 0.800",
        ),
    ],
)
def test_the_decision_rests_on_tuned_against_naive(
    verdict: str, ratio: tuple[float, list[float]], expected: str
) -> None:
    v = {"verdict": verdict, "ratio": ratio[0], "ratio_ci95": ratio[1], "reason": "..."}
    assert plain(bench_report.decision_line({"tuned_vs_naive": v})).startswith(expected)


def test_too_few_measurements_say_so() -> None:
    v = {
        "verdict": stats.SAME,
        "ratio": 1.1,
        "ratio_ci95": [1.1, 1.1],
        "reason": "too few measurements to decide",
    }
    line = plain(bench_report.comparison_line("tuned_vs_autotune", v))
    assert "tuned vs autotune: no significant difference, tuned/autotune = 1.100" in line
    assert "(too few measurements to decide)" in line


# -- Bench: verify and its history --------------------------------------------------------------------

NO_PROFILE = (
    "no profile 'default' (/var/lib/nodeagent/profiles/default.json); create it with "
    "`nodeagent tune --apply --profile default`"
)
FIRST_LOOK = (
    "so far: no significant difference between B and A: B/A = 1.025, 97.5% interval [0.980, 1.062] "
    "(Wilcoxon signed-rank, 7 pairs); not decided yet, next look at 10 pairs"
)
HISTORY = [
    ["2026-11-20 09:12", "tf-threads", "1.084", "[1.052, 1.117]", "11", "faster", "kept"],
    ["2026-11-20 09:30", "thp", "0.996", "[0.981, 1.012]", "16", "no significant difference", "reverted"],
    ["2026-11-22 14:02", "profile", "1.051", "[1.030, 1.073]", "7", "faster", "measured"],
]


def test_verify_shows_each_block_as_it_ends_then_the_verdict_and_the_new_record() -> None:
    backend = GatedVerify()
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, BenchScreen)
        await settle(pilot)
        assert len(table_cells(app, "#verify-history")) == 3  # before the run
        await pilot.press("v")
        await until(pilot, lambda: len(table_cells(app, "#verify-trials")) == 3, "three blocks")
        state = text_of(app, "#verify-state")
        assert "verify: pair 3 (AB): B/A 1.041" in state
        assert "so far: no estimate before the first planned look" in state
        await pilot.press("b")  # both load every CPU: one at a time
        assert "a verify is already running" in notifications(app)
        backend.stops[3].set()
        await until(pilot, lambda: len(table_cells(app, "#verify-trials")) == 8, "the first look")
        rows = table_cells(app, "#verify-trials")
        assert [r[:2] for r in rows] == [[str(n), "AB" if n % 2 else "BA"] for n in range(1, 9)]
        assert rows[0][2:5] == ["880", "925.1", "1.051"]
        assert (
            rows[3][5] == "other processes used 40% of the CPU time while the block ran: left out, run again"
        )
        assert [r[5] for r in rows if r[5]] == [rows[3][5]]  # the others are ordinary pairs
        state = text_of(app, "#verify-state")
        assert "verify: pair 8 (BA): B/A 1.020" in state
        assert FIRST_LOOK in " ".join(state.split())
        assert not app.screen.query_one("#verify-verdict").display  # no verdict before the end
        backend.stops[8].set()
        await settle(pilot)
        await until(pilot, lambda: "done" in text_of(app, "#verify-state"), "the verdict")
        assert len(table_cells(app, "#verify-trials")) == 11
        done = " ".join(text_of(app, "#verify-state").split())
        assert done == (
            "verify of profile default done: faster "
            "(10 pair(s), 33 s; built-in tf.data + XLA benchmark, images/s)"
        )
        verdict = " ".join(text_of(app, "#verify-verdict").split())
        assert verdict.startswith(
            "verdict: B is 3.6% faster than A: B/A = 1.036, 97.5% interval [1.005, 1.051] "
            "(Wilcoxon signed-rank, 10 pairs) 95% interval of B/A: [1.010, 1.046]"
        )
        assert "stopped: the pair limit (10) was reached; 10 pair(s)" in verdict
        assert "1 block(s) disturbed by other processes" in verdict
        history = table_cells(app, "#verify-history")
        assert [r[:7] for r in history] == [
            *HISTORY,
            ["2026-11-23 12:30", "profile", "1.036", "[1.005, 1.051]", "10", "faster", "measured"],
        ]
        assert "4 decision(s), newest last" in text_of(app, "#verify-history-title")
        await pilot.press("b")  # the verify is over: the benchmark may run
        await settle(pilot)
        await until(pilot, lambda: "benchmark done" in text_of(app, "#bench-state"), "the benchmark")

    drive(app, steps)


def test_a_verify_that_cannot_run_says_why_in_one_line_and_can_run_again() -> None:
    backend = FakeBackend(delay_s=0, fail_verify=NO_PROFILE)
    app = make_app(backend, start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        state = text_of(app, "#verify-state")
        assert state.strip() == f"verify failed: {NO_PROFILE}"  # one line (text_of: 200 columns)
        assert NO_PROFILE in notifications(app)
        assert not any("Traceback" in n for n in notifications(app))
        assert table_cells(app, "#verify-trials") == []
        assert len(table_cells(app, "#verify-history")) == 3  # no record of a run that did not happen
        backend.fail_verify = None  # the profile applied: the same screen runs it
        await pilot.press("v")
        await settle(pilot)
        await until(pilot, lambda: "done: faster" in text_of(app, "#verify-state"), "the verdict")

    drive(app, steps, size=(120, 40))


def test_the_history_lists_the_recorded_decisions_oldest_first() -> None:
    app = make_app(FakeBackend(delay_s=0), start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert "3 decision(s), newest last" in text_of(app, "#verify-history-title")
        rows = table_cells(app, "#verify-history")
        assert [r[:7] for r in rows] == HISTORY
        train = "python train.py --epochs 1 --data /sc..."  # cut at 40 characters
        assert [r[7] for r in rows] == [train, train, "built-in"]
        table: DataTable[Any] = app.screen.query_one("#verify-history", DataTable)
        assert table.cursor_row == 2  # the newest

    drive(app, steps, size=(120, 40))


def test_no_history_and_an_unreadable_history_are_said() -> None:
    app = make_app(FakeBackend(delay_s=0, records=[]), start="bench")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert "no decisions recorded yet" in text_of(app, "#verify-history-title")
        assert not app.screen.query_one("#verify-history").display

    drive(app, steps)
    bad = "/var/lib/nodeagent/history.jsonl:2: pairs: Input should be a valid integer; move the file aside"
    app = make_app(FakeBackend(delay_s=0, fail_history=bad), start="bench")

    async def broken(pilot: Pilot[None]) -> None:
        await settle(pilot)
        title = " ".join(text_of(app, "#verify-history-title").split())
        assert title == f"verify history: {bad}"
        assert not app.screen.query_one("#verify-history").display

    drive(app, broken, size=(120, 40))


def test_the_palettes_verify_opens_bench_and_runs_it() -> None:
    app = make_app(FakeBackend(delay_s=0))  # on the overview: the Bench screen is not open yet

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await app.run_action("verify")  # the command palette's action (commands.py)
        await settle(pilot)
        assert isinstance(app.screen, BenchScreen)
        await until(pilot, lambda: "done: faster" in text_of(app, "#verify-state"), "the verdict")
        assert len(table_cells(app, "#verify-trials")) == 11

    drive(app, steps)


def test_the_tui_verifies_as_the_cli_does(run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    """`v` is `nodeagent verify --quick`: the same request reaches the same flow."""
    asked: list[tuple[verifying.Job, str]] = []

    def fake_verify_profile(
        job: verifying.Job, profile: str, node: str, on_trial: Any = None, on_block: Any = None
    ) -> verifying.ProfileVerdict:
        asked.append((job, profile))
        return FakeBackend(delay_s=0).verify(job.quick, on_block)

    monkeypatch.setattr(verifying, "verify_profile", fake_verify_profile)
    monkeypatch.setattr("nodeagent.app.verify.validate", lambda request: None)
    result = run_cli("verify", "--quick")
    assert result.returncode == 0, result.stderr
    blocks: list[int] = []
    verdict = LocalBackend().verify(True, lambda block, estimate: blocks.append(block.number))
    assert asked[0] == asked[1] == (verifying.Job(None, None, True, None), "default")
    assert blocks == list(range(1, 12))
    assert verdict.result.verdict == stats.FASTER


def test_the_tui_reads_the_history_the_cli_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.tuning import history

    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(tmp_path))
    assert LocalBackend().history() == []
    for record in history_records():
        history.append(record)
    assert LocalBackend().history() == history_records()


def test_verify_on_a_recording_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"not a recording .*firecracker-vm-2cpu.tar.gz.*without --root"):
        LocalBackend(root=str(VM)).verify(True, lambda block, estimate: None)


# -- Cluster -------------------------------------------------------------------------------------------


def test_hosts_stream_in_and_the_dead_host_is_fail_unreachable() -> None:
    app = make_app(FakeBackend(delay_s=0.3), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, ClusterScreen)
        await until(pilot, lambda: len(tiles(app)) >= 2, "two hosts in")
        partial = tiles(app)
        assert 2 <= len(partial) < len(HOSTS)
        assert list(partial) == HOSTS[: len(partial)]
        assert "running..." in text_of(app, "#cluster-state")
        await settle(pilot)
        await until(pilot, lambda: "8 hosts in" in text_of(app, "#cluster-state"), "the final report")
        state = text_of(app, "#cluster-state")
        assert "(1 FAIL, 6 OK, 1 WARN); worst FAIL" in state
        final = tiles(app)
        assert list(final) == HOSTS
        dead = tile_text(final["node05"]).split()
        assert dead == ["node05", "FAIL", "unreachable"]
        assert final["node05"].has_class("-fail")
        assert tile_text(final["node03"]).split()[:2] == ["node03", "WARN"]
        assert final["node03"].has_class("-warn")
        assert tile_text(final["node01"]).split() == ["node01", "OK", "all", "OK"]
        await pilot.press("c")  # again: the tiles start over and fill in the same way
        await until(pilot, lambda: "running..." in text_of(app, "#cluster-state"), "the second run")
        assert len(tiles(app)) < len(HOSTS)
        await settle(pilot)
        await until(pilot, lambda: "8 hosts in" in text_of(app, "#cluster-state"), "the second report")
        assert list(tiles(app)) == HOSTS
        assert tile_text(tiles(app)["node05"]).split() == ["node05", "FAIL", "unreachable"]

    drive(app, steps)


def test_drilling_into_node03_shows_its_warn_finding() -> None:
    app = make_app(FakeBackend(delay_s=0.0), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await until(pilot, lambda: len(tiles(app)) == 8 and app.screen.focused is not None, "the hosts")
        assert isinstance(app.screen.focused, HostTile) and app.screen.focused.host == "node01"
        await pilot.press("right", "right")
        assert isinstance(app.screen.focused, HostTile) and app.screen.focused.host == "node03"
        pane = text_of(app, "#cluster-detail-body")
        assert "node03 (10.0.0.3): WARN" in pane
        assert "WARN hugepages/thp: transparent huge pages never" in pane
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen)
        full = text_of(app, "#host-findings-body")
        assert "WARN hugepages/thp: transparent huge pages never" in full
        assert "to do: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled" in full
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        await pilot.press("right", "right")  # node05: its error, not findings
        assert "unreachable: no answer from 10.0.0.5:22 within 3s" in text_of(app, "#cluster-detail-body")

    drive(app, steps)


def test_d_toggles_drift_and_outliers() -> None:
    app = make_app(FakeBackend(delay_s=0.0), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await until(pilot, lambda: "8 hosts in" in text_of(app, "#cluster-state"), "the final report")
        await pilot.press("d")
        view = text_of(app, "#cluster-detail-body")
        drift = next(line for line in view.splitlines() if "kernel.release" in line)
        assert "5.15.0-91-generic" in drift and "6 hosts (majority)" in drift
        assert any("5.15.0-88-generic" in line and "node03" in line for line in view.splitlines())
        outlier = next(line for line in view.splitlines() if "topology.memory_total_mib" in line)
        assert outlier.split()[1:] == ["node07", "250000", "1031000", "-526.6", "low"]
        await pilot.press("d")
        assert "kernel.release" not in text_of(app, "#cluster-detail-body")

    drive(app, steps)


def test_pending_hosts_when_the_inventory_is_known_and_a_wide_grid() -> None:
    backend = GatedFleet()
    app = make_app(backend, start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(tiles(app)) == 8, "the pending hosts")
        assert all(tile_text(t).split() == [n, "..."] for n, t in tiles(app).items())
        assert "0 of 8 hosts answered; running..." in text_of(app, "#cluster-state")
        await pilot.press("d")  # before the end: says when it comes, no crash
        assert "once every host has answered" in text_of(app, "#cluster-detail-body")
        await pilot.press("d")
        backend.go.set()
        await settle(pilot)
        await until(pilot, lambda: "8 hosts in" in text_of(app, "#cluster-state"), "the final report")
        t = tiles(app)
        assert tile_text(t["node05"]).split() == ["node05", "FAIL", "unreachable"]
        # 120 columns hold 7 tiles a row; down moves a whole row.
        rows = [t[n].region.y for n in HOSTS]
        assert rows[:7] == [rows[0]] * 7 and rows[7] > rows[0]
        t["node01"].focus()
        await pilot.press("down")
        assert app.screen.focused is t["node08"]

    drive(app, steps, size=(120, 40))


def test_odd_host_documents_show_as_unknown_without_crashing() -> None:
    app = make_app(OddFleet(), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await until(pilot, lambda: "2 hosts in" in text_of(app, "#cluster-state"), "the final report")
        t = tiles(app)
        assert tile_text(t["odd1"]).split()[:2] == ["odd1", "UNKNOWN"]
        t["odd2"].focus()
        await pilot.pause()
        assert "WARN ?: " in text_of(app, "#cluster-detail-body")

    drive(app, steps)


def test_no_inventory_is_one_line() -> None:
    app = make_app(FakeBackend(cluster=None), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        assert text_of(app, "#cluster-state").strip() == NO_INVENTORY
        assert not tiles(app)
        await pilot.press("c")
        await pilot.pause()
        assert NO_INVENTORY in notifications(app)

    drive(app, steps)


def _refused_port() -> int:
    """A loopback port nothing listens on (bound then closed: the kernel refuses connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_real_fleet_of_refusing_hosts(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"defaults: {{connect_timeout: 2, command_timeout: 5, known_hosts: {tmp_path / 'known_hosts'}}}\n"
        "hosts:\n"
        f"  - {{name: dead1, host: 127.0.0.1, port: {_refused_port()}}}\n"
        f"  - {{name: dead2, host: 127.0.0.1, port: {_refused_port()}}}\n"
    )
    app = make_app(LocalBackend(root=str(VM), inventory_path=str(inventory)), start="cluster")

    async def steps(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await until(pilot, lambda: "2 hosts in" in text_of(app, "#cluster-state"), "the final report")
        t = tiles(app)
        assert [tile_text(t[n]).split() for n in ("dead1", "dead2")] == [
            ["dead1", "FAIL", "unreachable"],
            ["dead2", "FAIL", "unreachable"],
        ]
        assert "Connection refused" in text_of(app, "#cluster-detail-body")
        await pilot.press("d")
        assert "no drift, no outliers across 0 hosts" in text_of(app, "#cluster-detail-body")

    drive(app, steps)
