"""What the Bench screen shows, as plain functions of the benchmark's own types: the live progress line
(with a step rate measured from the progress timing), the keep/no-proof verdict, the per-config table
and the chart. Pure (no widget, no clock): the screen passes the times in."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from nodeagent.bench import TRAINING_CONFIGS, run, stats
from nodeagent.render.literal import lit, lits

if TYPE_CHECKING:
    from textual_plotext.plot import Plot

# The comparison the keep/revert decision rests on, as in `nodeagent tune --verify`
# (nodeagent/bench/verify.py): a change is kept only when tuned is significantly faster than the
# untuned baseline; anything else is "no proof of a gain".
DECISION = "tuned_vs_naive"
CHARTED = ("naive", "autotune", "tuned")
# The step rate is measured over the last few seconds of the current process, so it follows the
# process as it leaves warm-up (XLA compiles on the first step) instead of averaging it in forever.
RATE_WINDOW_S = 5.0
VERDICT_STYLE = {stats.FASTER: "bold green", stats.SLOWER: "bold red", stats.SAME: "bold yellow"}
STATUS_STYLE = {run.OK: "", run.FAILED: "bold red", run.SKIPPED: "dim"}


class StepRate:
    """Steps per second of the current worker process, from the times its progress lines arrived.

    The images/s would need the batch size, which Progress does not carry: this is steps/s, and the
    warm-up steps count (the worker reports them like the timed ones)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.process: tuple[str, int] | None = None
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, p: run.Progress, now: float) -> None:
        key = (p.config, p.process)
        if key != self.process or (self.samples and p.done < self.samples[-1][1]):
            self.process = key  # a new process (or a rerun of one): its rate starts afresh
            self.samples.clear()
        self.samples.append((now, p.done))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def per_s(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None


@dataclass(frozen=True)
class LiveProgress:
    """The latest progress, with the step rate and the run's elapsed time when it arrived."""

    progress: run.Progress
    steps_per_s: float | None
    elapsed_s: float


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def progress_text(live: LiveProgress, quick: bool) -> Text:
    p = live.progress
    t = lit(f"{'quick' if quick else 'full'} benchmark: ", style="bold")
    t.append(f"{p.config}, process {p.process}/{p.processes}, step {p.done}/{p.total}")
    if live.steps_per_s is not None:
        t.append(f"; {live.steps_per_s:.1f} steps/s (this process, last {RATE_WINDOW_S:.0f} s)")
    t.append(f"; {_clock(live.elapsed_s)} elapsed", style="dim")
    return t


def _ratio(a: str, b: str, v: Mapping[str, Any]) -> str:
    """The ratio of medians and its interval, worded as nodeagent.bench.stats.compare words it."""
    ratio, ci = v.get("ratio"), v.get("ratio_ci95")
    if ratio is None:
        return ""
    shown = f"{a}/{b} = {ratio:.3f}"
    if ci:
        shown += f", 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]"
    return shown


def _why(v: Mapping[str, Any]) -> str:
    """The reason, when the verdict word and the interval do not already say it all: a comparison
    that was not made (skipped), or one with too few measurements (its interval is a single point)."""
    ci = v.get("ratio_ci95")
    if v.get("verdict") not in stats.VERDICTS or not ci or ci[0] == ci[1]:
        return str(v.get("reason") or "")
    return ""


def comparison_line(key: str, v: Mapping[str, Any]) -> Text:
    """ "tuned vs autotune: no significant difference, tuned/autotune = 1.030, 95% CI [...]"."""
    a, _, b = key.partition("_vs_")
    word = str(v.get("verdict") or "?")
    line = lit(f"{a} vs {b}: ", style="bold")
    line.append(word, style=VERDICT_STYLE.get(word, "dim"))
    ratio, why = _ratio(a, b, v), _why(v)
    if ratio:
        line.append(f", {ratio}")
    if why:
        line.append(f" ({why})")
    return line


def decision_line(verdicts: Mapping[str, Mapping[str, Any]]) -> Text:
    """Keep only on a significant gain of tuned over naive; otherwise say there is no proof of one."""
    v = verdicts.get(DECISION)
    if v is not None and v.get("verdict") == stats.FASTER:
        ratio = _ratio("tuned", "naive", v)
        return lit(f"keep: tuned is significantly faster than naive ({ratio})", style="bold green")
    line = Text("no proof of a gain: tuned is not significantly faster than naive", style="bold yellow")
    if v is None:
        return line.append(" (not compared)")
    word = str(v.get("verdict"))
    details = [word if word in stats.VERDICTS else "not measured", _ratio("tuned", "naive", v), _why(v)]
    return line.append(f" ({'; '.join(d for d in details if d)})")


def verdict_view(result: run.BenchResult) -> Group:
    lines = [decision_line(result.verdicts)]
    lines += [comparison_line(k, v) for k, v in result.verdicts.items() if k != DECISION]
    return Group(*lines)


def results_table(result: run.BenchResult) -> Table:
    """One row per config, the CLI's figures (run.config_rows) without its long diagnosis column."""
    mode = "quick" if result.quick else "full"
    table = Table(
        title=f"images/s ({mode}, {result.duration_s:.0f} s)",
        title_justify="left",
        caption="wait: the share of the training loop spent waiting for input",
        caption_justify="left",
        box=box.SIMPLE_HEAD,  # no vertical rules: the six columns fit in 80 characters
        pad_edge=False,
    )
    # The CLI's columns, less the diagnosis, and "input wait" as "wait" (the caption says what it is).
    for name, justify in run.CONFIG_COLUMNS[:6]:
        # Nothing wraps (a CI split over two lines reads as two numbers): about 70 columns in all.
        table.add_column("wait" if name == "input wait" else name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in run.config_rows(result.configs):
        table.add_row(*lits(*row[:6]), style=STATUS_STYLE.get(row[1], ""))
    return table


def results_notes(result: run.BenchResult) -> Group:
    """Below the table: the bound, why a config failed or was skipped, input-bound configs, notes."""
    lines: list[Text] = []
    b = result.bound
    if b.value is None:
        lines.append(Text("bound: unknown (input_only and compute_only must both run)", style="dim"))
    else:
        # Named for what it bounds: the stages are what it is made of, and have no share of it.
        lines.append(
            Text(
                f"bound on {', '.join(TRAINING_CONFIGS)}: {b.value:.1f} images/s, the smaller of the "
                f"slower stage run alone ({_num(b.stage)}) and the CPU budget ({_num(b.cpu_budget)}, "
                f"{b.cpus or '?'} CPUs)"
            )
        )
    for c in result.configs.values():
        if c.status != run.OK:
            why = (c.reason or "no reason given").splitlines()[0]
            lines.append(lit(f"{c.name} {c.status}: {why}", style=STATUS_STYLE[c.status] or "bold"))
        elif c.input_wait_fraction is not None and c.input_wait_fraction > run.INPUT_BOUND:
            lines.append(lit(f"{c.name}: {c.diagnosis or 'input-bound'} (see {run.GUIDE})", style="yellow"))
    lines += [lit(f"note: {n}", style="dim") for n in result.notes]
    return Group(*lines)


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def draw_chart(plt: Plot, result: run.BenchResult) -> bool:
    """Bars of the charted configs' medians with their 95% CI as error bars (and as lo-hi written
    above each bar, since an error bar can be under one character tall), and the bound as its own
    bar and a horizontal line. False when no charted config has a figure.

    The ticks carry the names alone and the intervals are text over the bars: plotext drops a tick
    label that would overlap its neighbour, and "name lo-hi" ticks of four bars overlap below about
    78 columns (an 80-column terminal with a scrollbar)."""
    shown = [c for n in CHARTED if (c := result.configs.get(n)) is not None and c.summary is not None]
    plt.clear_figure()
    if not shown:
        return False
    xs = [float(x) for x in range(1, len(shown) + 1)]
    medians = [c.summary.median for c in shown if c.summary]
    cis = [c.summary.ci95 for c in shown if c.summary]
    labels = [c.name for c in shown]
    plt.title("images/s: median, 95% CI; the bound")
    plt.bar(xs, medians, color="blue")
    # plotext draws an error bar of length `yerr` centred on y: centre it on the (asymmetric) interval.
    plt.error(xs, [(lo + hi) / 2 for lo, hi in cis], yerr=[hi - lo for lo, hi in cis], color="red")
    bound = result.bound.value
    top = max([hi for _, hi in cis] + ([bound] if bound is not None else []))
    # The text sits a tenth of the axis above what it labels, so that it stays clear of its bar's
    # top row on a chart as short as a dozen rows.
    for x, (lo, hi) in zip(xs, cis, strict=True):
        plt.text(f"{lo:.0f}-{hi:.0f}", x, hi + top * 0.1, alignment="center")
    if bound is not None:
        xs.append(len(xs) + 1.0)
        labels.append("bound")
        plt.bar([xs[-1]], [bound], color="gray")
        plt.hline(bound, "gray")
        plt.text(f"{bound:.0f}", xs[-1], bound + top * 0.1, alignment="center")
    plt.xticks(xs, labels)
    plt.ylim(0, top * 1.25)
    return True
