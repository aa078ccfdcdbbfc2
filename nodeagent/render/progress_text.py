"""The words of progress (nodeagent.app.progress's events): the plain line of each event, and what
the bar shows after it. Pure: no rich, no clock (nodeagent.render.progress adds the time)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nodeagent.app import progress as events
from nodeagent.app.progress import Event


def line(event: Event) -> str | None:
    """The plain line of an event (without the time), or None for a step not worth a line."""
    if isinstance(event, events.Stage):
        return f"{event.flow}: {event.what}"
    if isinstance(event, events.ConfigStep):
        return _config_line(event)
    if isinstance(event, events.Change):
        change = f"{event.flow}: change {event.number}/{event.of} {event.tuner}"
        return f"{change}: applied alone, judged by A/B trials"
    if isinstance(event, events.Pair):
        return _pair_line(event)
    return _hosts_line(event)


def _config(e: events.ConfigStep) -> str:
    process = f" (process {e.process}/{e.processes})" if e.processes > 1 else ""
    return f"bench: config {e.number}/{e.of} {e.config}{process}"


def _config_line(e: events.ConfigStep) -> str | None:
    if e.phase == events.STARTED:
        return f"{_config(e)}: started; warm-up first (not timed)"
    if e.phase == events.TIMING:
        return f"{_config(e)}: warm-up done ({e.warmup} steps); timing {e.total - e.warmup} steps"
    if e.phase != events.ENDED:
        return None
    if e.error is not None:
        return f"{_config(e)}: failed: {e.error}"
    if e.images_per_s is None:
        return f"{_config(e)}: ended without figures"
    text = f"{_config(e)}: {e.images_per_s:.1f} images/s (median of {e.repeats} repeats)"
    return f"{text}; {e.again}" if e.again else text


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pair_head(e: events.Pair) -> str:
    change = f"{e.change}: " if e.change else ""
    return f"{e.flow}: {change}pair"


def _pair_line(e: events.Pair) -> str:
    if e.error is not None:
        return f"{_pair_head(e)} {e.counted + 1}/{e.limit} failed: {e.error}"
    sides = f"A {_rate(e.a)} B {_rate(e.b)}, B/A {_ratio(e.ratio)}"
    if e.left_out:
        return f"{_pair_head(e)} {e.counted + 1}/{e.limit} {sides}: {e.disturbed}: left out, run again"
    text = f"{_pair_head(e)} {e.counted}/{e.limit} {sides}"
    if e.disturbed:
        text += f" ({e.disturbed})"
    return text + (f"; {look(e)}" if e.estimate is not None else "")


def look(e: events.Pair) -> str:
    """The statistics' answer at a planned look: decided, or not yet, with the ratio and interval."""
    from nodeagent.bench import paired

    est = e.estimate
    assert est is not None
    lo, hi = est.ci
    interval = f"[{lo:.3f}, {hi:.3f}]" if math.isfinite(hi) and lo > 0 else "unbounded"
    state = "decided" if est.decided else "not decided yet"
    return f"{state}: {est.verdict}, B/A {est.ratio:.3f}, {paired.percent(est.level)} interval {interval}"


def _errors(n: int) -> str:
    return f"{n} error" if n == 1 else f"{n} errors"


def _hosts_line(e: events.Hosts) -> str:
    if e.host is None:
        return f"fleet: {e.total} hosts, started"
    text = f"fleet: {e.done}/{e.total} hosts done, {_errors(e.errors)}"
    return f"{text}; {e.host} failed: {e.error}" if e.error is not None else f"{text}; {e.host} done"


@dataclass(frozen=True)
class BarState:
    """What the bar shows for an event: its description, how far along (completed of total), and
    the count beside it."""

    description: str
    completed: float
    total: float
    count: str


def bar_state(event: Event) -> BarState | None:
    """The bar's state after `event` (None: the event leaves the bar as it is)."""
    if isinstance(event, events.Stage):
        return BarState(f"{event.flow}: {event.what}", 0, 1, "")
    if isinstance(event, events.ConfigStep):
        return _config_bar(event)
    if isinstance(event, events.Change):
        return BarState(
            f"{event.flow}: {event.tuner} ({event.number}/{event.of})", 0, 1, "applied, trials start"
        )
    if isinstance(event, events.Pair):
        # Short, so that the count beside it keeps its room: the last pair's B/A and the answer.
        change = f"{event.change}: " if event.change else ""
        last = f"last B/A {_ratio(event.ratio)}" if event.error is None else "a trial failed"
        est = event.estimate
        answer = "" if est is None else f", {'decided' if est.decided else 'so far'}: {est.verdict}"
        count = f"{event.counted}/{event.limit} pairs"
        return BarState(f"{event.flow}: {change}{last}{answer}", event.counted, event.limit, count)
    count = f"{event.done}/{event.total} hosts, {_errors(event.errors)}"
    return BarState("fleet", event.done, event.total, count)


def _config_bar(e: events.ConfigStep) -> BarState:
    if e.phase == events.ENDED:
        what = "failed" if e.error else "done"
    elif e.phase == events.STARTED:
        what = "starting"
    else:
        what = "warm-up" if e.done < e.warmup else "timed"
    steps = f", step {e.done}/{e.total}" if e.phase in (events.STEP, events.TIMING) else ""
    process = f" (process {e.process}/{e.processes})" if e.processes > 1 else ""
    description = f"bench: {e.config}{process}: {what}"
    return BarState(description, e.fraction, 1.0, f"config {e.number}/{e.of}{steps}")
