"""The benchmark's result: the configs table with the bound and the verdicts (its progress is
nodeagent.render.progress's)."""

from __future__ import annotations

from rich.text import Text

from nodeagent.bench import TRAINING_CONFIGS, run, stats
from nodeagent.bench.run import BenchResult, shown_number
from nodeagent.render.literal import lit, one_line
from nodeagent.render.sheet import Column, Part, Sheet, show


def print_table(result: BenchResult) -> None:
    """The configs table, the bound, the verdicts, what failed and the notes (by the one rule of
    nodeagent.render.sheet: a table on a terminal, a line per config when piped)."""
    show(bench_parts(result))


def bench_parts(result: BenchResult) -> list[Part]:
    mode = "quick" if result.quick else "full"
    s = result.sizes
    t = Sheet(
        f"nodeagent bench ({mode}): images/s, {s.processes} process(es) x {s.repeats} repeats x "
        f"{s.steps} steps of {s.batch} images {s.image_size}x{s.image_size}",
        tuple(Column(col, justify=justify) for col, justify in run.CONFIG_COLUMNS),  # type: ignore[arg-type]
    )
    for row in run.config_rows(result.configs):
        style = {run.OK: "", run.FAILED: "bold red", run.SKIPPED: "dim"}[row[1]]
        t.add(*row, style=style)
    parts: list[Part] = [t]
    b = result.bound
    if b.value is None:
        parts.append("bound: unknown (input_only and compute_only must both run)")
    else:
        parts.append(
            f"bound: stage {shown_number(b.stage)} images/s (min of input_only, compute_only); CPU budget "
            f"{shown_number(b.cpu_budget)} images/s ({b.cpus or '?'} CPUs / CPU-s per image of input + "
            "compute); "
            f"the fractions of {', '.join(TRAINING_CONFIGS)} are of the smaller, {shown_number(b.value)}"
        )
    for key, v in result.verdicts.items():
        a, _, ref = key.partition("_vs_")
        style = {stats.FASTER: "green", stats.SLOWER: "red"}.get(v["verdict"], "yellow")
        line = Text(f"{a} vs {ref}: ", style="bold")
        line.append(v["verdict"], style=style)
        line.append(f" ({one_line(v['reason'])})")
        parts.append(line)
    for name in result.failed:
        c = result.configs[name]
        tail = next((r.stderr_tail for r in c.runs if r.error), "")
        parts.append(lit(f"{name} failed: {c.reason}", style="bold red"))
        if tail:
            parts.append(lit(tail, style="dim"))  # a worker's traceback: its lines as they were
    for note in result.notes:
        parts.append(lit(f"note: {note}", style="dim"))
    parts.append(Text(f"{result.duration_s:.0f} s", style="dim"))
    return parts
