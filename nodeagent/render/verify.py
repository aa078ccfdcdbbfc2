"""A/B verify's result: the trials table, the verdict in words, tune --apply --verify's table of
changes, and the history table (the pairs as they end are nodeagent.render.progress's)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from nodeagent.bench import ab, paired
from nodeagent.bench.verify import ChangeVerdict, StepwiseResult
from nodeagent.render.sheet import Abridged, Column, Sheet, sheet
from nodeagent.tuning.history import Record

SIDE_A = "A: as it is"
SIDE_B = "B: tuned"


def rate_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def ratio_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def side_rate(block: ab.Block, side: str) -> float | None:
    """The side's rate in the block: the median of its trials (the built-in workload runs many)."""
    rates = [t.rate for t in block.trials if t.side == side and t.rate is not None]
    return statistics.median(rates) if rates else None


def block_ratio(block: ab.Block) -> float | None:
    return None if block.value is None else math.exp(block.value)


def block_note(block: ab.Block) -> str:
    """Why a block is not an ordinary pair: its failed trial, or the other processes that disturbed
    it (and whether it was left out and run again)."""
    if block.error:
        return block.error
    if block.disturbed:
        return block.disturbed + ("" if block.counted else ": left out, run again")
    return ""


def trials_table(result: ab.ABResult) -> Sheet:
    """One row per block: its order, each side's rate (the median of the block's trials), B/A."""
    t = Sheet(
        f"trials: {result.workload} ({result.metric}, higher is better)",
        (
            Column("pair", justify="right"),
            Column("order"),
            Column(SIDE_A, justify="right"),
            Column(SIDE_B, justify="right"),
            Column("B/A", justify="right"),
            Column("note"),
        ),
    )
    for b in result.blocks:
        t.add(
            str(b.number),
            "".join(b.order),
            rate_text(side_rate(b, ab.A)),
            rate_text(side_rate(b, ab.B)),
            ratio_text(block_ratio(b)),
            block_note(b),
        )
    return t


def verdict_lines(result: ab.ABResult) -> list[str]:
    """The verdict in words, the interval, why the trials stopped, the wall time and the notes."""
    lines = []
    est = result.estimate
    if result.failed is not None:
        lines.append(f"failed: {result.failed}")
    elif result.undecided is not None:
        lines.append(f"verdict: {result.undecided}")
    elif est is not None:
        lines.append(f"verdict: {est.reason}")
        lines.append(
            f"95% interval of B/A: [{est.ci95[0]:.3f}, {est.ci95[1]:.3f}] (for reading; the verdict "
            f"uses the {paired.percent(est.level)} interval [{est.ci[0]:.3f}, {est.ci[1]:.3f}], which "
            f"keeps the error rate at {result.design.alpha:.0%} over the {len(result.design.looks)} "
            "planned looks)"
        )
    lines.append(f"stopped: {result.stopped}; {result.pairs} pair(s), {result.wall_s:.0f} s")
    if result.disturbed:
        lines.append(f"disturbed: {result.disturbed} block(s) ran while other processes took CPU time")
    lines += [f"note: {n}" for n in result.notes]
    return lines


def _change_row(c: ChangeVerdict) -> list[str]:
    r = c.result
    est = None if r is None else r.estimate
    if est is None:
        return [
            c.tuner,
            c.decision,
            "-",
            "-",
            "-" if r is None else str(r.pairs),
            (r.failed or "") if r else "",
        ]
    return [
        c.tuner,
        c.decision,
        ratio_text(est.ratio),
        f"[{est.ci[0]:.3f}, {est.ci[1]:.3f}]",
        str(r.pairs if r else 0),
        est.verdict,
    ]


def changes_table(result: StepwiseResult) -> Sheet:
    """tune --apply --verify: every planned change with its own ratio, interval and decision."""
    t = sheet(
        "tune --verify: each change judged alone (B/A > 1: faster)",
        "change",
        "decision",
        "B/A",
        "interval",
        "pairs",
        "verdict",
    )
    for c in result.changes:
        t.add(*_change_row(c))
    return t


COMMAND_WIDTH = 60  # a terminal's history shows this much of a command; piped and JSON, all of it


def history_table(records: Sequence[Record]) -> Sheet:
    t = sheet(
        "nodeagent verify history (oldest first)",
        "time",
        "node",
        "command",
        "change",
        "B/A",
        "interval",
        "pairs",
        "verdict",
        "decision",
    )
    for r in records:
        command = " ".join(r.command) if r.command is not None else "built-in benchmark"
        t.add(
            r.time,
            r.node,
            Abridged(command, command[:COMMAND_WIDTH]),
            r.change,
            ratio_text(r.ratio),
            "-" if r.interval is None else f"[{r.interval[0]:.3f}, {r.interval[1]:.3f}]",
            str(r.pairs),
            r.verdict,
            r.decision,
        )
    return t
