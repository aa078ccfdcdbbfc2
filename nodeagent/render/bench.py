"""The benchmark on the terminal: a progress bar on stderr, the configs table with the bound and the
verdicts."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from nodeagent.bench import run, stats
from nodeagent.bench.run import BenchResult, Progress, shown_number
from nodeagent.render.table import console


class ProgressBar:
    """A rich progress bar on stderr fed by the workers' `progress` lines (stdout stays for JSON).
    Refreshed twice a second: on a 2-CPU node a busy renderer would slow the workers it measures."""

    def __init__(self, title: str = "bench") -> None:
        self.title = title
        self.progress = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            refresh_per_second=2,
        )
        self.task = self.progress.add_task(f"{title}: preparing the data set", total=1.0)

    def __call__(self, p: Progress) -> None:
        of = f" {p.process}/{p.processes}" if p.processes > 1 else ""
        self.progress.update(
            self.task,
            description=f"{self.title}: {p.config}{of} step {p.done}/{p.total}",
            completed=p.fraction,
        )

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def print_table(result: BenchResult) -> None:
    out = console()
    mode = "quick" if result.quick else "full"
    s = result.sizes
    t = Table(
        title=(
            f"nodeagent bench ({mode}): images/s, {s.processes} process(es) x {s.repeats} repeats x "
            f"{s.steps} steps of {s.batch} images {s.image_size}x{s.image_size}"
        ),
        title_justify="left",
    )
    for col, justify in run.CONFIG_COLUMNS:
        t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in run.config_rows(result.configs):
        style = {run.OK: "", run.FAILED: "bold red", run.SKIPPED: "dim"}[row[1]]
        t.add_row(*row, style=style)
    out.print(t)
    b = result.bound
    if b.value is None:
        out.print("bound: unknown (input_only and compute_only must both run)")
    else:
        out.print(
            f"bound: stage {shown_number(b.stage)} images/s (min of input_only, compute_only); CPU budget "
            f"{shown_number(b.cpu_budget)} images/s ({b.cpus or '?'} CPUs / CPU-s per image of input + "
            "compute); "
            f"fractions are of the smaller, {shown_number(b.value)}"
        )
    for key, v in result.verdicts.items():
        a, _, ref = key.partition("_vs_")
        style = {stats.FASTER: "green", stats.SLOWER: "red"}.get(v["verdict"], "yellow")
        line = Text(f"{a} vs {ref}: ", style="bold")
        line.append(v["verdict"], style=style)
        line.append(f" ({v['reason']})")
        out.print(line)
    for name in result.failed:
        c = result.configs[name]
        tail = next((r.stderr_tail for r in c.runs if r.error), "")
        out.print(Text(f"{name} failed: {c.reason}", style="bold red"))
        if tail:
            out.print(Text(tail, style="dim"))
    for note in result.notes:
        out.print(Text(f"note: {note}", style="dim"))
    out.print(Text(f"{result.duration_s:.0f} s", style="dim"))
