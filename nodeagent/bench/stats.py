"""Statistics of the benchmark: the median of a throughput, its 95% confidence interval, and whether
one configuration is faster than another. Pure: no I/O, no clock, deterministic.

Method (and why):
- The figure of a configuration is the **median** images/s of its repeats: a background task or a
  page-cache miss slows one repeat down a lot, and the median ignores it where the mean does not
  (Google Benchmark's aggregates report the median for this reason, next to mean and stddev:
  https://github.com/google/benchmark/blob/main/docs/user_guide.md#statistics-reporting;
  pyperf reports median +- MAD: https://pyperf.readthedocs.io/en/latest/analyze.html).
- Its 95% confidence interval is a **percentile bootstrap** (Efron & Tibshirani, "An Introduction
  to the Bootstrap", 1993, ch. 13): no normality assumption, which a t interval would need and
  which throughputs (skewed by interference, bounded by the hardware) do not satisfy, and it works
  for the median, for which a t interval has no standard form.
- Repeats are **grouped by process**: the repeats of one process share its thread placement, memory
  layout and XLA compilation, so they vary less between themselves than between processes. The
  bootstrap resamples processes first, then the repeats of each chosen process (the two-stage
  bootstrap of Davison & Hinkley, "Bootstrap Methods and their Application", 1997, sec. 3.8, which
  Kalibera & Jones recommend for benchmarks with several levels of repetition: "Rigorous
  Benchmarking in Reasonable Time", ISMM 2013, https://doi.org/10.1145/2464157.2466397). With one
  group it is the ordinary bootstrap.
- A comparison bootstraps the **ratio of the medians** A/B (Kalibera & Jones again: report a
  speed-up with a confidence interval of the ratio). A is "faster" when the whole interval is above
  1.0, "slower" when it is below, otherwise "no significant difference". The interval is computed
  on log(median A*) - log(median B*), so that swapping A and B negates every bootstrap value exactly
  and the verdict is exactly symmetric (a float ratio and its reciprocal can round differently).
- Determinism and symmetry: each sample's resampling stream is seeded from its own values (sorted),
  not from its position in a call, so a sample gets the same bootstrap distribution whether it is A
  or B, and two identical samples get identical ones (their ratio interval is exactly [1, 1]).
- Fewer than MIN_SAMPLES values on either side never gives a significant verdict: with 3 against 3
  not even a perfect separation is significant at 5% under a rank test (2 / C(6,3) = 0.1), and the
  bootstrap of so few values is known to be too narrow (Efron & Tibshirani, sec. 13.3).
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.core.document import LATE, InKeyOrder

FASTER = "faster"
SLOWER = "slower"
SAME = "no significant difference"
# A/B verify under a time budget only: the budget ended the trials with an interval that neither
# excludes 1 nor is within the precision asked for (nodeagent.bench.paired).
UNDECIDED = "could not decide within the budget"
VERDICTS = (FASTER, SLOWER, SAME)

LEVEL = 0.95
RESAMPLES = 4000  # Efron & Tibshirani (sec. 19.3): 1000-2000 already suffice for percentile intervals
SEED = 20130620  # any fixed number: results must be reproducible from the same measurements
MIN_SAMPLES = 4  # 4 vs 4 perfectly separated: p = 2 / C(8,4) = 0.029 < 0.05 (rank test)

Groups = Sequence[Sequence[float]]


def _groups(samples: Groups) -> list[list[float]]:
    """Validate: at least one value, each finite and positive (a throughput); empty groups dropped."""
    out = [[float(v) for v in g] for g in samples if len(g)]
    if not out:
        raise ValueError("no measurements")
    for g in out:
        for v in g:
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"a throughput must be a positive finite number, not {v!r}")
    return out


def _rng(groups: list[list[float]], seed: int) -> random.Random:
    """A generator seeded from the sample's own values (order-free), see the module docstring."""
    h = hashlib.sha256(struct.pack("<q", seed))
    for g in sorted(sorted(g) for g in groups):
        h.update(struct.pack("<I", len(g)))
        h.update(struct.pack(f"<{len(g)}d", *sorted(g)))
    return random.Random(h.digest())


def _canonical(groups: list[list[float]]) -> list[list[float]]:
    return sorted(sorted(g) for g in groups)


def _boot_medians(groups: list[list[float]], resamples: int, seed: int) -> list[float]:
    """Medians of `resamples` two-stage bootstrap resamples (groups, then values within each)."""
    rng = _rng(groups, seed)
    canon = _canonical(groups)
    k = len(canon)
    out = []
    for _ in range(resamples):
        pooled: list[float] = []
        for gi in rng.choices(range(k), k=k) if k > 1 else [0]:
            g = canon[gi]
            pooled.extend(rng.choices(g, k=len(g)))
        out.append(statistics.median(pooled))
    return out


def _bounds(sorted_values: list[float], level: float) -> tuple[float, float]:
    """Percentile interval by order statistics: the k-th smallest and the k-th largest, the same k
    at both ends so that negating the values mirrors the interval exactly."""
    n = len(sorted_values)
    k = min(n - 1, max(0, math.floor((1 - level) / 2 * n)))
    return sorted_values[k], sorted_values[n - 1 - k]


@pydantic_dataclass(frozen=True, config=LATE)
class Summary(InKeyOrder):
    """The median of a throughput and its confidence interval."""

    document_keys = ("median", "ci95", "half_width_pct", "n", "processes")

    median: float
    ci95: tuple[float, float]
    n: int  # values
    groups: Annotated[int, Field(serialization_alias="processes")]  # processes they came from

    @computed_field  # type: ignore[prop-decorator]
    @property
    def half_width_pct(self) -> float:
        """Half the interval's width as a percentage of the median (3% is the target: a gain smaller
        than the interval cannot be shown)."""
        return (self.ci95[1] - self.ci95[0]) / 2 / self.median * 100


def summarize(samples: Groups, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> Summary:
    """Median and bootstrap CI of grouped throughputs ([[repeats of process 1], [...], ...])."""
    groups = _groups(samples)
    flat = [v for g in groups for v in g]
    mid = statistics.median(flat)
    if len(flat) == 1:
        return Summary(mid, (mid, mid), 1, 1)
    ci = _bounds(sorted(_boot_medians(groups, resamples, seed)), level)
    return Summary(mid, ci, len(flat), len(groups))


@dataclass(frozen=True)
class Comparison:
    """A against B: the ratio of medians (A/B, > 1 = A faster) with its bootstrap CI, and the verdict."""

    verdict: str
    ratio: float
    ratio_ci95: tuple[float, float]
    a: Summary
    b: Summary
    reason: str = ""  # why the verdict is what it is, in words


def compare(
    a: Groups,
    b: Groups,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
    names: tuple[str, str] = ("A", "B"),
) -> Comparison:
    """Is A faster than B? Verdict from the bootstrap CI of median(A)/median(B) against 1.0."""
    ga, gb = _groups(a), _groups(b)
    sa, sb = summarize(ga, resamples, seed, level), summarize(gb, resamples, seed, level)
    ratio = sa.median / sb.median
    na, nb = names
    if min(sa.n, sb.n) < MIN_SAMPLES:
        return Comparison(
            SAME,
            ratio,
            (ratio, ratio),
            sa,
            sb,
            f"too few measurements to decide ({sa.n} for {na}, {sb.n} for {nb}; at least {MIN_SAMPLES} each)",
        )
    ma = _boot_medians(ga, resamples, seed)
    mb = _boot_medians(gb, resamples, seed)
    diffs = sorted(math.log(x) - math.log(y) for x, y in zip(ma, mb, strict=True))
    lo, hi = _bounds(diffs, level)
    ci = (math.exp(lo), math.exp(hi))
    shown = f"{na}/{nb} = {ratio:.3f}, 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]"
    if lo > 0:
        return Comparison(FASTER, ratio, ci, sa, sb, f"{na} is faster than {nb}: {shown}, above 1")
    if hi < 0:
        return Comparison(SLOWER, ratio, ci, sa, sb, f"{na} is slower than {nb}: {shown}, below 1")
    return Comparison(SAME, ratio, ci, sa, sb, f"no significant difference: {shown} includes 1")
