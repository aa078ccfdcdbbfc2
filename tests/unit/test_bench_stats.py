"""The benchmark's statistics (nodeagent/bench/stats.py): bootstrap intervals and verdicts,
on synthetic numbers (no TensorFlow, no clock)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.bench import stats
from nodeagent.bench.stats import FASTER, SAME, SLOWER, compare, summarize
from nodeagent.core import document

# Throughputs as the benchmark sees them: positive, finite, within a few orders of magnitude.
value = st.floats(min_value=1.0, max_value=1e5, allow_nan=False, allow_infinity=False)
group = st.lists(value, min_size=1, max_size=8)
groups = st.lists(group, min_size=1, max_size=5)
FAST = 300  # resamples in property tests: the properties hold for any count


def noisy(center: float, n: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


@pytest.mark.parametrize("bad", [[0.0, 1.0], [-1.0], [math.nan], [math.inf], []])
def test_throughputs_must_be_positive_finite(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize([bad])


# -- the interval -------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(groups)
def test_ci_contains_the_median_and_lies_within_the_data(samples: list[list[float]]) -> None:
    s = summarize(samples, resamples=FAST)
    flat = [v for g in samples for v in g]
    lo, hi = s.ci95
    assert lo <= s.median <= hi
    assert min(flat) <= lo and hi <= max(flat)  # a median of resampled values never leaves the data
    assert s.median == statistics.median(flat)
    assert s.n == len(flat) and s.groups == len(samples)
    assert s.half_width_pct >= 0


def test_ci_is_deterministic_and_order_free() -> None:
    a = [noisy(100, 6, 0.05, 1), noisy(103, 6, 0.05, 2)]
    shuffled = [list(reversed(a[1])), list(reversed(a[0]))]
    assert summarize(a) == summarize(a)
    assert summarize(a).ci95 == summarize(shuffled).ci95


def test_ci_narrows_with_more_measurements() -> None:
    few = summarize([noisy(100, 8, 0.05, 3)])
    many = summarize([noisy(100, 200, 0.05, 3)])
    assert many.half_width_pct < few.half_width_pct
    assert many.ci95[0] < 100 < many.ci95[1]


def test_ci_coverage_is_close_to_95_percent() -> None:
    """The interval does its job: over many simulated runs of 15 repeats from a known
    distribution, it holds the true median about 95% of the times (a bootstrap of the median at
    this size covers a bit less; Efron & Tibshirani sec. 13.3)."""
    hits = 0
    trials = 300
    for t in range(trials):
        rng = random.Random(t)
        sample = [rng.gauss(100, 5) for _ in range(15)]  # true median 100
        lo, hi = summarize([sample], resamples=500).ci95
        hits += lo <= 100 <= hi
    assert 0.88 <= hits / trials <= 0.99


def test_processes_that_differ_widen_the_interval() -> None:
    """Repeats inside one process agree; processes differ. Treating 4 x 5 repeats as 20 independent
    values would give too narrow an interval; the two-stage bootstrap keeps the spread between
    processes."""
    procs = [[c * (1 + 0.001 * i) for i in range(5)] for c in (90.0, 97.0, 103.0, 110.0)]
    grouped = summarize(procs)
    flat = summarize([[v] for g in procs for v in g])
    assert grouped.half_width_pct > flat.half_width_pct


def test_one_value() -> None:
    s = summarize([[5.0]])
    assert s.ci95 == (5.0, 5.0) and s.half_width_pct == 0


def test_summary_document() -> None:
    doc = document.dump(summarize([[1.0, 2.0, 3.0]]))
    assert set(doc) == {"median", "ci95", "half_width_pct", "n", "processes"}
    assert doc["median"] == 2.0 and len(doc["ci95"]) == 2


# -- comparisons --------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(groups, groups)
def test_verdict_is_symmetric(a: list[list[float]], b: list[list[float]]) -> None:
    ab = compare(a, b, resamples=FAST)
    ba = compare(b, a, resamples=FAST)
    mirrored = {FASTER: SLOWER, SLOWER: FASTER, SAME: SAME}
    assert ba.verdict == mirrored[ab.verdict]
    assert ab.ratio == pytest.approx(1 / ba.ratio)
    assert ab.ratio_ci95[0] == pytest.approx(1 / ba.ratio_ci95[1])
    assert ab.ratio_ci95[1] == pytest.approx(1 / ba.ratio_ci95[0])


@settings(max_examples=100, deadline=None)
@given(groups)
def test_identical_samples_are_no_difference(a: list[list[float]]) -> None:
    c = compare(a, [list(reversed(g)) for g in reversed(a)], resamples=FAST)
    assert c.verdict == SAME
    assert c.ratio == 1.0
    assert c.ratio_ci95 == (1.0, 1.0) or min(c.a.n, c.b.n) < stats.MIN_SAMPLES


@settings(max_examples=100, deadline=None)
@given(groups, groups)
def test_verdict_agrees_with_the_ratio_interval(a: list[list[float]], b: list[list[float]]) -> None:
    c = compare(a, b, resamples=FAST)
    lo, hi = c.ratio_ci95
    assert lo <= hi
    if c.verdict == FASTER:
        assert lo > 1
    elif c.verdict == SLOWER:
        assert hi < 1
    elif min(c.a.n, c.b.n) >= stats.MIN_SAMPLES:
        assert lo <= 1 <= hi


def test_clear_gain_is_faster_and_clear_loss_slower() -> None:
    tuned = [noisy(130, 5, 0.02, 10), noisy(131, 5, 0.02, 11)]
    naive = [noisy(100, 5, 0.02, 12), noisy(99, 5, 0.02, 13)]
    up = compare(tuned, naive, names=("tuned", "naive"))
    assert up.verdict == FASTER
    assert up.ratio == pytest.approx(1.3, rel=0.03)
    assert up.ratio_ci95[0] > 1.2 and up.ratio_ci95[1] < 1.4
    assert "tuned is faster than naive" in up.reason
    assert compare(naive, tuned).verdict == SLOWER


def test_overlapping_noise_is_no_difference() -> None:
    a = [noisy(100, 8, 0.10, 20)]
    b = [noisy(101, 8, 0.10, 21)]
    c = compare(a, b)
    assert c.verdict == SAME
    assert c.ratio_ci95[0] < 1 < c.ratio_ci95[1]
    assert "includes 1" in c.reason


def test_too_few_measurements_never_significant() -> None:
    c = compare([[200.0, 201.0, 202.0]], [[100.0, 101.0, 102.0]])
    assert c.verdict == SAME
    assert "too few" in c.reason
    assert c.ratio == pytest.approx(2.0, rel=0.01)
