"""A job that prints its rate repeatedly (`--metric` matching several lines): its warm-up windows are
found from its own figures and left out, and the trial's rate is the median of the rest. The
windows below are written as a job would print them: a warm-up climbing to a steady rate, then the
steady rate with the odd window a neighbour slowed down."""

from __future__ import annotations

import pytest

from nodeagent.bench import metric

# Three warm-up windows (compilation, caches: 20, 60, 85 items/s), then about 100 items/s, one window
# slowed to 80 by a neighbour. Sorted, the nine steady windows' middle one is 100.0.
WARMING = [20.0, 60.0, 85.0]
STEADY = [100.0, 101.0, 99.0, 100.5, 102.0, 98.0, 100.0, 80.0, 101.0]


def test_the_warm_up_is_the_leading_windows_away_from_the_steady_rate() -> None:
    assert metric.warmup([*WARMING, *STEADY]) == len(WARMING)
    assert metric.warmup(STEADY) == 0  # no warm-up: nothing is cut
    assert metric.warmup([5.0] * 6) == 0


def test_the_warm_up_cut_is_at_most_half_the_windows() -> None:
    """A job whose rate climbs all along has no steady part to find: at most half is cut."""
    climbing = [float(10 * i) for i in range(1, 11)]
    assert metric.warmup(climbing) <= 5


def test_the_rate_of_several_windows_is_the_median_after_the_warm_up() -> None:
    assert metric.window_rate([*WARMING, *STEADY]) == 100.0
    assert metric.window_rate([42.0]) == 42.0
    assert metric.window_rate([10.0, 42.0]) == 42.0  # two figures: the last, as with one


def test_the_job_output_is_read_window_by_window() -> None:
    """Through the matcher: every matching line is a window, other lines are ignored; a single
    matching line is read as it always was."""
    lines = ["starting"]
    lines += [f"epoch {i}: {r} items/s, loss 0.{i}" for i, r in enumerate([*WARMING, *STEADY])]
    lines.append("done")
    assert metric.rate(r": ([0-9.]+) items/s", lines) == 100.0
    assert metric.rate(r"rate: ([0-9.]+)", ["warming up", "rate: 123.5 items/s"]) == 123.5


def test_a_last_window_that_is_not_a_rate_gives_none() -> None:
    """The job's last word is what it measured: a final figure of 0 is no rate, whatever came before."""
    assert metric.rate(r"rate: ([0-9.]+)", ["rate: 100", "rate: 101", "rate: 0"]) is None


def test_no_windows_is_an_error() -> None:
    with pytest.raises(ValueError):
        metric.window_rate([])
