"""`--metric REGEX`: the job's figure, read from the last lines of a trial's output in bounded time.

A job that prints its rate once gives that figure. A job that prints it repeatedly (a rate per
epoch or per logging window) gives several measured windows from one process: its figure is the
median of the windows after its warm-up (`window_rate`), which is steadier than any one window and
costs no extra start-up.

Python's `re` backtracks: a pattern such as `(a+)+$` takes longer than any trial on a line of 40
characters, cannot be interrupted, and holds the GIL while it runs. So the match runs in a Python
interpreter of its own (started without site: about 30 ms, after the trial's timing has ended),
stopped at NODEAGENT_METRIC_TIMEOUT_S. The syntax is exactly the `re` the pattern was checked with
before the first trial.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence

from nodeagent.core import limits

# The child: the first group (else the whole match) of every line matching, in order, as JSON.
_MATCHER = """
import json, re, sys
doc = json.loads(sys.stdin.buffer.read())
pattern = re.compile(doc["pattern"])
found = []
for line in doc["lines"]:
    m = pattern.search(line)
    if m is not None:
        found.append(m.group(1) if m.groups() else m.group(0))
sys.stdout.write(json.dumps(found))
"""


class MetricError(Exception):
    """The pattern could not be matched in time (or the matcher failed): the trial fails."""


def matches(pattern: str, lines: Sequence[str]) -> list[str]:
    """The first group (else the whole match) of each of `lines` that `pattern` matches, in order."""
    limit_s = limits.limit("NODEAGENT_METRIC_TIMEOUT_S")
    doc = json.dumps({"pattern": pattern, "lines": list(lines)}).encode()
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MATCHER],
            input=doc,
            capture_output=True,
            timeout=limit_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise MetricError(
            f"matching --metric {pattern!r} took longer than {limit_s} s on {len(lines)} line(s) of output "
            "(limit NODEAGENT_METRIC_TIMEOUT_S): the pattern backtracks; anchor it or drop nested repeats"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise MetricError(f"matching --metric {pattern!r} failed: {last[:300]}")
    found = json.loads(done.stdout)
    return [f for f in found if isinstance(f, str)] if isinstance(found, list) else []


def last_match(pattern: str, lines: Sequence[str]) -> str | None:
    """The first group (else the whole match) of the last of `lines` that `pattern` matches."""
    found = matches(pattern, lines)
    return found[-1] if found else None


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def rate(pattern: str, lines: Sequence[str]) -> float | None:
    """The job's figure: the one matching line's number, or with several the median of the windows
    after the warm-up (window_rate). None: no match, or the last match is not a positive number
    (a job whose last word is not a rate has not measured one)."""
    found = matches(pattern, lines)
    if not found or _number(found[-1]) is None:
        return None
    values = [v for v in (_number(f) for f in found) if v is not None]
    return window_rate(values)


def warmup(values: Sequence[float]) -> int:
    """How many leading windows are warm-up, by the Marginal Standard Error Rule (White, "An
    effective truncation heuristic for bias reduction in simulation output", Simulation 69(6),
    1997): the cut d, at most half the windows, that minimises the squared standard error of the
    mean of the rest, sum((x - mean)^2) / (n - d)^2. A warm-up's windows (compilation, caches,
    autotuning) sit away from the steady rate and raise that error; once they are cut, cutting more
    only loses windows. Equal windows: no cut."""
    n = len(values)
    best, best_cost = 0, math.inf
    for d in range(n // 2 + 1):
        rest = values[d:]
        mean = sum(rest) / len(rest)
        cost = sum((x - mean) ** 2 for x in rest) / len(rest) ** 2
        if cost < best_cost * (1 - 1e-12):  # a tie keeps the shorter cut
            best, best_cost = d, cost
    return best


def window_rate(values: Sequence[float]) -> float:
    """The job's rate from its windows, in the order printed: one or two windows, the last (as a
    single figure was read before); more, the median of those after the warm-up (robust to a window
    that a neighbour or the host slowed down)."""
    if not values:
        raise ValueError("no windows")
    if len(values) <= 2:
        return values[-1]
    return statistics.median(values[warmup(values) :])
