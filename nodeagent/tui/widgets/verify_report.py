"""What the Bench screen shows of `nodeagent verify`, as plain functions of verify's own types: one
row per block of A/B trials, the running estimate's line, the verdict (the CLI's words,
nodeagent.render.verify.verdict_lines) and one row per recorded decision of the history. Pure: no
widget, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from nodeagent.bench import ab, stats
from nodeagent.bench.paired import Estimate
from nodeagent.render.literal import lit
from nodeagent.render.verify import (
    SIDE_A,
    SIDE_B,
    block_note,
    block_ratio,
    rate_text,
    ratio_text,
    side_rate,
    verdict_lines,
)
from nodeagent.tuning.history import Record

TRIAL_COLUMNS = ("pair", "order", SIDE_A, SIDE_B, "B/A", "note")
# The command last: a long command line is what runs off the right edge, not the verdict.
HISTORY_COLUMNS = ("time (UTC)", "change", "B/A", "interval", "pairs", "verdict", "decision", "command")
BUILTIN = "built-in"
COMMAND_WIDTH = 40  # a command line is cut here: the rest of the row matters more
RECORDED_TIME = "%Y-%m-%dT%H:%M:%SZ"  # how nodeagent.bench.verify.record writes the time
SHOWN_TIME = "%Y-%m-%d %H:%M"
VERDICT_STYLE = {
    stats.FASTER: "bold green",
    stats.SLOWER: "bold red",
    stats.SAME: "bold yellow",
    ab.FAILED: "bold red",
}
LEFT_OUT_STYLE = "dim"  # a disturbed block run again: shown, not counted
DISTURBED_STYLE = "yellow"  # a disturbed block counted all the same (no rerun left)


def _block_style(block: ab.Block) -> str:
    if block.error:
        return "red"
    if not block.counted:
        return LEFT_OUT_STYLE
    return DISTURBED_STYLE if block.disturbed else ""


def block_row(block: ab.Block) -> tuple[Text, ...]:
    """The cells of TRIAL_COLUMNS for one block."""
    style = _block_style(block)
    cells = (
        str(block.number),
        "".join(block.order),
        rate_text(side_rate(block, ab.A)),
        rate_text(side_rate(block, ab.B)),
        ratio_text(block_ratio(block)),
        block_note(block),
    )
    return tuple(lit(c, style=style) for c in cells)


def block_status(block: ab.Block, estimate: Estimate | None) -> Text:
    """The line under way: the block that just ended and the estimate so far (its reason says
    whether it is decided and when the next look comes)."""
    line = lit("verify: ", style="bold")
    line.append(f"pair {block.number} ({''.join(block.order)}): B/A {ratio_text(block_ratio(block))}")
    note = block_note(block)
    if note:
        line.append(f" [{note}]", style=_block_style(block))
    if estimate is None:
        line.append("\nso far: no estimate before the first planned look", style="dim")
    else:
        line.append("\nso far: ")
        line.append(
            estimate.reason, style=VERDICT_STYLE.get(estimate.verdict, "") if estimate.decided else ""
        )
    return line


def verdict_view(result: ab.ABResult) -> Text:
    """The CLI's verdict lines; the first (the verdict or the failure) styled by the verdict."""
    lines = verdict_lines(result)
    out = lit(lines[0], style=VERDICT_STYLE.get(result.verdict, ""))
    for line in lines[1:]:
        out.append("\n").append(lit(line, style="dim"))
    return out


def done_line(result: ab.ABResult, profile: str) -> Text:
    line = lit(f"verify of profile {profile} done: ", style="bold")
    line.append(lit(result.verdict, style=VERDICT_STYLE.get(result.verdict, "")))
    line.append(f" ({result.pairs} pair(s), {result.wall_s:.0f} s; {result.workload}, {result.metric})")
    return line


def time_text(record: Record) -> str:
    """The record's time to the minute; as written when it is not in the form verify writes."""
    try:
        return datetime.strptime(record.time, RECORDED_TIME).strftime(SHOWN_TIME)
    except ValueError:
        return record.time


def command_text(record: Record) -> str:
    if record.command is None:
        return BUILTIN
    text = " ".join(record.command)
    return text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 3] + "..."


def history_row(record: Record) -> tuple[Text, ...]:
    """The cells of HISTORY_COLUMNS for one recorded decision."""
    interval = "-" if record.interval is None else f"[{record.interval[0]:.3f}, {record.interval[1]:.3f}]"
    return (
        lit(time_text(record)),
        lit(record.change),
        lit(ratio_text(record.ratio)),
        lit(interval),
        lit(str(record.pairs)),
        lit(record.verdict, style=VERDICT_STYLE.get(record.verdict, "")),
        lit(record.decision),
        lit(command_text(record)),
    )


def history_title(records: Sequence[Record]) -> Text:
    if not records:
        return lit(
            "verify history: no decisions recorded yet (v here, `nodeagent verify` or "
            "`nodeagent tune --apply --verify` add them)",
            style="dim",
        )
    return lit(f"verify history: {len(records)} decision(s), newest last", style="bold")
