"""Paired statistics of A/B trials: is B faster than A, slower, or not different, with an interval of
the ratio B/A, analysed at planned looks so that trials stop as soon as the answer is clear. Pure: no
I/O, no clock, deterministic.

The data: each **block** of trials gives one value d = log(rate B / rate A), rates "higher is
better". For a user command a block is one adjacent A/B pair; for the built-in benchmark it is one
pair of worker processes and d is the median of its adjacent pairs' log ratios. The blocks run in
ABBA order, so a slow drift of the machine cancels; what is left is noise of 10-17% per pair on a
small VM, heavy-tailed (single pairs off by 30%).

Method (and why):
- The centre of the d values is estimated by **Hodges-Lehmann** (the median of the Walsh averages
  (d_i + d_j) / 2, i <= j) with the **Wilcoxon signed-rank confidence interval**: the k-th smallest
  and k-th largest Walsh averages, k from the distribution of the signed-rank statistic V (Hollander,
  Wolfe & Chicken, "Nonparametric Statistical Methods", 3rd ed., sec. 3.2-3.3; Bauer, "Constructing
  confidence sets using rank statistics", JASA 67, 1972, https://doi.org/10.1080/01621459.1972.10481279).
  R's `wilcox.test(x, y, paired = TRUE, conf.int = TRUE)` gives the same interval and estimate.
- It is **distribution-free**: it needs only that d is symmetric about its centre. ABBA interleaving
  gives that under no effect (A and B are exchangeable within a block, so d and -d are equally
  likely), and an effect shifts the centre. No normality is assumed, which the heavy tails rule out.
- Its coverage is **exact for small n** (at least the level, from the exact distribution of V),
  where the percentile bootstrap of nodeagent.bench.stats is known to be too narrow (Efron &
  Tibshirani, "An Introduction to the Bootstrap", 1993, sec. 13.3).
- It is **robust**: one pair off by 30% moves the estimate and the interval by one Walsh average's
  rank, not by its size.
- The distribution of V is exact for n <= EXACT_UP_TO blocks: the number of subsets of the ranks
  {1..n} with each sum (a dynamic programme), over 2**n equally likely sign patterns. Above, the
  normal approximation with continuity correction (mean n(n+1)/4, variance n(n+1)(2n+1)/24), whose
  critical values are within one of the exact ones there (coverage within 0.03% of the level).
- **Zeros and ties.** A block where A and B measured the same (d = 0, e.g. a rate rounded by the
  job) is kept: the interval is read off the Walsh averages of all n values. Dropping zeros, as
  R's wilcox.test does (Wilcoxon's convention), would count six identical pairs and six slightly
  faster ones as six out of six faster; keeping them is Pratt's treatment (Pratt, "Remarks on zeros
  and ties in the Wilcoxon signed rank procedures", JASA 54, 1959), and the interval's ends are
  continuous in the data, so tied or zero values (only ever exact through rounding) give the limit
  of the interval for the untied values next to them. The critical k is the untied one.

The sequential design (and why it keeps the error rate):
- The data are analysed only at planned **looks** (numbers of blocks, increasing; the last one is
  the block limit). Each look k has its own share alpha_k of the false-positive rate alpha (0.05),
  the shares summing to alpha, and its interval has level 1 - alpha_k. The probability that any
  look declares a false "faster" or "slower" is then at most alpha, whatever the dependence between
  the looks (the union bound, Bonferroni). It is conservative: the looks share their early blocks,
  so the true rate is lower. Group-sequential boundaries (Pocock, O'Brien-Fleming: Jennison &
  Turnbull, "Group Sequential Methods with Applications to Clinical Trials", 2000) spend alpha more
  efficiently but rest on a normal model of the statistic that heavy-tailed blocks at small n do
  not satisfy.
- How alpha is shared:
  - **Haybittle-Peto** (when the trials run to a pair limit): every interim look gets
    INTERIM_ALPHA (0.001) and the last look the rest (0.05 - 0.001 per interim look, about 0.04).
    A large effect still stops the trials early, and a small one is judged at the limit at nearly
    the full 95%: with the even split of 9 looks the last look's level would be 99.44%, which needs
    about 1.8 times the pairs to show the same 5% change (the squared ratio of the normal quantiles,
    2.77 / 2.05). Haybittle, "Repeated assessment of results in clinical trials of cancer
    treatment", Br J Radiol 44, 1971, https://doi.org/10.1259/0007-1285-44-526-793; Peto et al.,
    Br J Cancer 34, 1976, https://doi.org/10.1038/bjc.1976.220.
  - **Evenly**: each of the K looks gets alpha/K.
- **A time budget** ends the trials with a **final look** at however many blocks fit in it
  (`analyse(..., final=True)`): it gets what the looks before it left of alpha (with Haybittle-Peto
  nearly all of it), so the budget's last look keeps nearly the full 95% whenever it comes. This
  keeps the error rate because when the budget ends the trials depends only on how long the blocks
  took, which under no effect says nothing about the signs of the d values: a block's duration is
  the same whichever of its trials is A (A and B are exchangeable), and given the durations each
  sign pattern stays equally likely, so the final look's signed-rank interval keeps its level. A
  final look that neither excludes 1 nor reaches the precision is **undecided** (stats.UNDECIDED):
  the budget, not the answer, ended the trials.
- A look **decides** when its interval excludes 1 (B is faster or slower), or when the interval's
  half-width is at most the precision asked for (no difference larger than that can be shown with
  more trials at reasonable cost, and stopping to say "not different" never adds a false
  "faster" or "slower"), or when it is the last look.
- The plain 95% interval (level 0.95, not adjusted) is reported beside the verdict's interval for
  reading the magnitude; it is not what decides.

Determinism and symmetry: no randomness. Swapping A and B negates every d, hence every Walsh average,
so the estimate and both ends of each interval negate exactly on the log scale; on the ratio scale
the ratio and the interval invert (ratio() computes exp of a negative value as 1 / exp of its
magnitude, so that one of the two is exactly the reciprocal of the other) and the verdict flips.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache
from statistics import NormalDist
from typing import Annotated

from pydantic import Field, PlainSerializer, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.bench.stats import FASTER, SAME, SLOWER, UNDECIDED
from nodeagent.core.document import LATE, InKeyOrder

ALPHA = 0.05  # the probability of any false "faster" or "slower" over a whole run
READING_LEVEL = 0.95  # the unadjusted interval reported for reading the magnitude
EXACT_UP_TO = 60  # blocks: the exact null distribution of V up to here (2**60 patterns), normal above
INTERIM_ALPHA = 0.001  # each interim look's share of alpha under Haybittle-Peto (see the docstring)
LOOK_GROWTH = Fraction(3, 2)  # each planned look has 1.5 times the blocks of the one before
LAST_GAP = Fraction(6, 5)  # a look closer than this factor to the limit is dropped (see _looks)
METHOD = "Wilcoxon signed-rank"
_EXP_MAX = 709.0  # math.exp overflows a float a little above this


# -- the signed-rank statistic ------------------------------------------------------------------


@cache
def _rank_sum_counts(n: int) -> tuple[int, ...]:
    """How many subsets of the ranks {1..n} have each sum 0..n(n+1)/2. Under no effect each of the
    2**n sign patterns is equally likely, so count / 2**n is the distribution of V, the sum of the
    ranks of the positive values. Built from n - 1: a subset of {1..n} either leaves n out or adds
    n to a subset of {1..n-1}."""
    if n == 0:
        return (1,)
    previous = _rank_sum_counts(n - 1)
    counts = [0] * (n * (n + 1) // 2 + 1)
    for total, count in enumerate(previous):
        counts[total] += count
        counts[total + n] += count
    return tuple(counts)


def _moments(n: int) -> tuple[float, float]:
    """Mean and standard deviation of V under no effect."""
    return n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)


def signed_rank_cdf(v: float, n: int, exact: bool | None = None) -> float:
    """P(V <= v) under no effect, V the signed-rank statistic of n values; exact (the default up to
    EXACT_UP_TO values) or the normal approximation with continuity correction."""
    if n < 0:
        raise ValueError(f"a number of values cannot be negative, not {n}")
    if exact is None:
        exact = n <= EXACT_UP_TO
    if not exact:
        mean, sd = _moments(n)
        return NormalDist().cdf((math.floor(v) + 0.5 - mean) / sd) if sd > 0 else float(v >= 0)
    counts = _rank_sum_counts(n)
    upto = min(math.floor(v), len(counts) - 1)
    return sum(counts[: upto + 1]) / 2**n if upto >= 0 else 0.0


def _tail(level: float) -> Fraction:
    """(1 - level) / 2, exactly for the float given: the probability left in each tail."""
    if not 0 < level < 1:
        raise ValueError(f"a confidence level is between 0 and 1, not {level!r}")
    return (1 - Fraction(level)) / 2


@lru_cache(maxsize=4096)
def critical_count(n: int, level: float) -> int:
    """The largest c with P(V <= c) <= (1 - level) / 2 for n values, or -1 when even V = 0 is more
    likely than that (too few values for this level). The interval at `level` runs from the
    (c+1)-th smallest to the (c+1)-th largest Walsh average; its coverage is 1 - 2 P(V <= c)."""
    tail = _tail(level)
    if n > EXACT_UP_TO:
        mean, sd = _moments(n)
        # P(V <= c) ~ Phi((c + 0.5 - mean) / sd) <= tail  <=>  c <= mean + z * sd - 0.5
        return max(-1, math.floor(mean + NormalDist().inv_cdf(float(tail)) * sd - 0.5))
    allowed = math.floor(tail * 2**n)  # patterns in the lower tail, at most
    c, below = -1, 0
    for total, count in enumerate(_rank_sum_counts(n)):
        below += count
        if below > allowed:
            break
        c = total
    return c


def min_blocks(level: float) -> int:
    """The fewest blocks with which an interval at `level` can exclude 1: n values all of one sign
    are the most extreme outcome, of probability 2 / 2**n (either sign), which must be at most
    1 - level."""
    room = 1 - Fraction(level)
    if not 0 < room < 1:
        raise ValueError(f"a confidence level is between 0 and 1, not {level!r}")
    n = 1
    while Fraction(2, 2**n) > room:
        n += 1
    return n


# -- the estimate and its interval --------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """The centre of the d values on the log scale: Hodges-Lehmann, with its signed-rank intervals
    (an end is -inf or +inf when the values are too few for the level)."""

    centre: float
    ci: tuple[float, float]
    level: float
    ci95: tuple[float, float]
    n: int


def _walsh_sums(values: Sequence[float]) -> list[float]:
    """All d_i + d_j, i <= j, sorted: twice the Walsh averages (halved only where read, which is the
    same float as halving first)."""
    s = sorted(values)
    sums = [a + b for i, a in enumerate(s) for b in s[i:]]
    sums.sort()
    return sums


def _interval(sums: list[float], n: int, level: float) -> tuple[float, float]:
    c = critical_count(n, level)
    if c < 0:
        return (-math.inf, math.inf)
    return (sums[c] / 2, sums[len(sums) - 1 - c] / 2)


def _median_of_sums(sums: list[float]) -> float:
    mid = len(sums) // 2
    if len(sums) % 2:
        return sums[mid] / 2
    return (sums[mid - 1] + sums[mid]) / 4


def _checked(d: Sequence[float]) -> list[float]:
    values = [float(v) for v in d]
    if not values:
        raise ValueError("no blocks to analyse")
    for v in values:
        if not math.isfinite(v):
            raise ValueError(f"a log ratio must be a finite number, not {v!r}")
    return values


def estimate(d: Sequence[float], level: float) -> Location:
    """Hodges-Lehmann estimate of the centre of `d` with its signed-rank interval at `level` and the
    unadjusted 95% interval."""
    values = _checked(d)
    _tail(level)
    sums = _walsh_sums(values)
    n = len(values)
    return Location(
        _median_of_sums(sums), _interval(sums, n, level), level, _interval(sums, n, READING_LEVEL), n
    )


def ratio(log_value: float) -> float:
    """exp(log_value), computed so that ratio(-x) is exactly 1 / ratio(x) for x >= 0 (the A/B
    symmetry); +-inf and overflow give inf and 0.0."""
    magnitude = math.exp(abs(log_value)) if abs(log_value) <= _EXP_MAX else math.inf
    return magnitude if log_value >= 0 else 1 / magnitude


def half_width_pct(log_ci: tuple[float, float]) -> float:
    """Half the interval's width on the log scale, as a percentage of the ratio: exp(width / 2) - 1.
    For a narrow interval that is its half-width relative to the estimate (3: about +-3%); unlike
    (hi - lo) / 2 / ratio it is the same for B/A and A/B."""
    lo, hi = log_ci
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.inf
    return math.expm1((hi - lo) / 2) * 100


def log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """log(b_i / a_i) for each block, as log(b_i) - log(a_i) so that swapping A and B negates them
    exactly. Rates are positive and finite (higher is better)."""
    if len(a) != len(b):
        raise ValueError(f"A has {len(a)} rates and B {len(b)}: blocks need one of each")
    return [math.log(_rate(y, "B")) - math.log(_rate(x, "A")) for x, y in zip(a, b, strict=True)]


def _rate(v: float, side: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
        raise ValueError(f"a rate of {side} must be a positive finite number, not {v!r}")
    return float(v)


# -- the sequential design ----------------------------------------------------------------------


@pydantic_dataclass(frozen=True, config=LATE)
class Design(InKeyOrder):
    """When to analyse (numbers of blocks, increasing; the last is the limit), the total false-positive
    rate, the precision at which "not different" is decided (percent, or None: only at the limit),
    and how the rate is shared by the looks: `interim_alpha` for each interim look and the rest for
    the last (Haybittle-Peto), or None: evenly."""

    document_keys = ("looks", "alpha", "levels", "sharing", "precision_pct")

    looks: tuple[int, ...]
    alpha: float = ALPHA
    precision_pct: float | None = None
    interim_alpha: Annotated[float | None, Field(exclude=True)] = None  # the document says "sharing"

    def __post_init__(self) -> None:
        if not self.looks or any(not isinstance(n, int) or n < 1 for n in self.looks):
            raise ValueError(f"looks are positive numbers of blocks, not {self.looks!r}")
        if any(b <= a for a, b in zip(self.looks, self.looks[1:], strict=False)):
            raise ValueError(f"looks must increase, not {self.looks!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha is between 0 and 1, not {self.alpha!r}")
        if self.precision_pct is not None and not (
            math.isfinite(self.precision_pct) and self.precision_pct > 0
        ):
            raise ValueError(f"the precision is a positive percentage, not {self.precision_pct!r}")
        if self.interim_alpha is not None and not (
            self.interim_alpha > 0 and self.interim_alpha * (len(self.looks) - 1) < self.alpha / 2
        ):
            raise ValueError(
                f"{len(self.looks) - 1} interim looks at {self.interim_alpha!r} each would spend half "
                f"of alpha {self.alpha!r} or more before the last look"
            )

    @property
    def alphas(self) -> tuple[float, ...]:
        """Each look's share of alpha; they sum to alpha."""
        k = len(self.looks)
        if self.interim_alpha is None:
            return (self.alpha / k,) * k
        return (self.interim_alpha,) * (k - 1) + (self.alpha - self.interim_alpha * (k - 1),)

    def final_level(self, n: int) -> float:
        """The level of a final look at n blocks (a time budget ended the trials there): 1 minus what
        the planned looks before n left of alpha (at the limit: the last look's level)."""
        spent = sum(a for look, a in zip(self.looks[:-1], self.alphas, strict=False) if look < n)
        return 1 - (self.alpha - spent)

    def level_at(self, n: int) -> float:
        """The confidence level of the look at n blocks; between looks, the next look's."""
        index = next((i for i, look in enumerate(self.looks) if look >= n), len(self.looks) - 1)
        return 1 - self.alphas[index]

    @property
    def limit(self) -> int:
        return self.looks[-1]

    def next_look(self, n: int) -> int | None:
        """The first planned look after n blocks, None at or past the limit."""
        return next((look for look in self.looks if look > n), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def levels(self) -> list[float]:
        """Each look's confidence level."""
        return [1 - a for a in self.alphas]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sharing(self) -> str:
        return "evenly" if self.interim_alpha is None else "Haybittle-Peto"


def _looks(start: int, limit: int) -> tuple[int, ...]:
    """start, 1.5 times that (rounded up), ... below the limit, then the limit. A look the limit is
    less than LAST_GAP times away from is left out: it would learn little that the limit does not,
    and cost its share of alpha."""
    looks = []
    n = start
    while n * LAST_GAP <= limit:
        looks.append(n)
        n = max(n + 1, math.ceil(n * LOOK_GROWTH))
    return (*looks, limit)


def design(
    max_blocks: int,
    min_blocks: int | None = None,
    precision_pct: float | None = None,
    alpha: float = ALPHA,
    interim_alpha: float | None = None,
) -> Design:
    """Looks growing by 1.5 up to `max_blocks`, from the fewest blocks whose exact signed-rank
    interval can exclude 1 at the first look's level (or `min_blocks`, if later). alpha is shared
    evenly, or Haybittle-Peto with `interim_alpha`. ValueError, in words for the user of `--pairs`,
    when `max_blocks` could never show a difference."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha is between 0 and 1, not {alpha!r}")
    needed = _fewest_blocks(1 - alpha)
    if max_blocks < needed:
        raise ValueError(
            f"--pairs {max_blocks} is too few: at least {needed} pairs are needed to ever show a "
            f"difference at {percent(1 - alpha)}"
        )
    first = 1 if min_blocks is None else min_blocks
    if first > max_blocks:
        raise ValueError(f"the first look ({first} pairs) would come after the limit ({max_blocks} pairs)")
    if interim_alpha is not None:
        looks = _looks(max(first, _fewest_blocks(1 - interim_alpha)), max_blocks)
        # The last look keeps at least alpha / 2 (Design checks it), which 7 blocks can reach, and
        # interim looks start at 11 (2 / 2**11 <= 0.001): the last look can always exclude 1.
        return Design(looks, alpha, precision_pct, interim_alpha)
    # The per-look level depends on the number of looks, and the first look on the level: try K
    # looks' worth of alpha until the looks that level allows are no more than K (more looks only
    # lower the level, so the first one is then still able to exclude 1).
    k = 1
    while True:
        looks = _looks(max(first, _fewest_blocks(1 - alpha / k)), max_blocks)
        if len(looks) <= k:
            return Design(looks, alpha, precision_pct)
        k += 1


_fewest_blocks = min_blocks  # design()'s argument of that name hides the function


# -- the analysis at a look ---------------------------------------------------------------------


def _json_pair(pair: tuple[float, float]) -> list[float | None]:
    """JSON has no infinity: an unbounded end is null."""
    return [v if math.isfinite(v) and v > 0 else None for v in pair]


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


Bounds = Annotated[tuple[float, float], PlainSerializer(_json_pair)]


# An estimate is its own document (verify's "estimate"): a pydantic dataclass, its fields in the
# order the document writes them.
@pydantic_dataclass(frozen=True, config=LATE)
class Estimate:
    """B against A after n blocks. `verdict` describes the interval `ci` (at the design's per-look
    level); only a `decided` estimate is the design's answer (a planned look that is significant or
    precise enough, or the last look)."""

    verdict: str  # stats.FASTER: B is faster than A; stats.SLOWER; stats.SAME
    ratio: float  # B/A: exp(Hodges-Lehmann estimate of d)
    ci: Bounds  # B/A at `level`; 0.0 or inf at an end when the blocks are too few
    level: float
    ci95: Bounds  # B/A at 0.95, not adjusted for the looks: for reading the magnitude
    n: int
    # Of `ci`, percent of the ratio (see half_width_pct()).
    half_width_pct: Annotated[float, PlainSerializer(_json_number)]
    decided: bool
    reason: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def method(self) -> str:
        return METHOD


def _verdict(log_ci: tuple[float, float]) -> str:
    if log_ci[0] > 0:
        return FASTER
    if log_ci[1] < 0:
        return SLOWER
    return SAME


def analyse(
    d: Sequence[float],
    design: Design,
    names: tuple[str, str] = ("A", "B"),
    unit: str = "pairs",
    final: bool = False,
) -> Estimate:
    """The estimate after len(d) blocks. Call it at the design's looks: at another number of blocks it
    analyses all the same, but the estimate is decided only at the last look. `final`: a time budget
    ended the trials here; this look gets the rest of alpha and always decides (undecided when it
    neither excludes 1 nor reaches the precision)."""
    n = len(d)
    if n > design.limit:
        raise ValueError(f"{n} {unit} is more than the design's limit of {design.limit}")
    loc = estimate(d, design.final_level(n) if final else design.level_at(n))
    verdict = _verdict(loc.ci)
    width = half_width_pct(loc.ci)
    precise = design.precision_pct is not None and width <= design.precision_pct
    at_look = n in design.looks
    last = n == design.limit
    decided = final or last or (at_look and (verdict != SAME or precise))
    if final and verdict == SAME and not precise and not last:
        verdict = UNDECIDED
    shown = _shown(loc, names, unit)
    if verdict in (FASTER, SLOWER):
        head = _difference(loc.centre, names, verdict)
    elif verdict == UNDECIDED:
        head = f"{UNDECIDED}: the trials were too noisy to tell {names[1]} from {names[0]} in time"
    else:
        head = f"no significant difference between {names[1]} and {names[0]}"
    if not decided:
        tail = _pending(n, at_look, design, unit)
    elif verdict in (FASTER, SLOWER):
        tail = ""
    elif precise:
        tail = f"; {_precision_text(loc.ci, width, design.precision_pct)}"
    elif verdict == UNDECIDED:
        tail = f"; the interval is wider than the +-{design.precision_pct or 0:g}% asked for"
    else:
        tail = f"; the limit of {design.limit} {unit} is reached"
    return Estimate(
        verdict,
        ratio(loc.centre),
        (ratio(loc.ci[0]), ratio(loc.ci[1])),
        loc.level,
        (ratio(loc.ci95[0]), ratio(loc.ci95[1])),
        n,
        width,
        decided,
        f"{head}: {shown}{tail}",
    )


def _difference(centre: float, names: tuple[str, str], verdict: str) -> str:
    a, b = names
    pct = abs(ratio(centre) - 1) * 100
    shown = f"{pct:.1f}" if pct >= 0.1 else f"{pct:.2g}"  # a significant 0.04% is not "0.0%"
    return f"{b} is {shown}% {verdict} than {a}"


def _shown(loc: Location, names: tuple[str, str], unit: str) -> str:
    a, b = names
    lo, hi = ratio(loc.ci[0]), ratio(loc.ci[1])
    interval = f"[{lo:.3f}, {hi:.3f}]" if math.isfinite(hi) and lo > 0 else "unbounded"
    return (
        f"{b}/{a} = {ratio(loc.centre):.3f}, {percent(loc.level)} interval {interval} "
        f"({METHOD}, {loc.n} {unit})"
    )


def _precision_text(log_ci: tuple[float, float], width: float, target: float | None) -> str:
    """What a precise interval that contains 1 rules out, in both directions alike."""
    furthest = ratio(max(-log_ci[0], log_ci[1])) - 1
    return (
        f"precise to +-{width:.1f}% (target +-{target:g}%): the interval rules out a difference of "
        f"more than {furthest * 100:.1f}%"
    )


def _pending(n: int, at_look: bool, design: Design, unit: str) -> str:
    after = design.next_look(n)
    where = "not decided yet" if at_look else "not a planned look, so not decided"
    return f"; {where}, next look at {after} {unit}"


def percent(level: float) -> str:
    """0.95 -> '95%', 0.9875 -> '98.75%', 1 - 0.05/9 -> '99.44%'."""
    return f"{level * 100:.2f}".rstrip("0").rstrip(".") + "%"
