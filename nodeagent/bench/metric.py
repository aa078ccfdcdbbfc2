"""`--metric REGEX`: the job's figure, read from the last lines of a trial's output in bounded time.

Python's `re` backtracks: a pattern such as `(a+)+$` takes longer than any trial on a line of 40
characters, cannot be interrupted, and holds the GIL while it runs. So the match runs in a Python
interpreter of its own (started without site: about 30 ms, after the trial's timing has ended),
stopped at NODEAGENT_METRIC_TIMEOUT_S. The syntax is exactly the `re` the pattern was checked with
before the first trial.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence

from nodeagent.core import limits

# The child: the first group (else the whole match) of the last line matching, as JSON (null: none).
_MATCHER = """
import json, re, sys
doc = json.loads(sys.stdin.buffer.read())
pattern = re.compile(doc["pattern"])
found = None
for line in reversed(doc["lines"]):
    m = pattern.search(line)
    if m is not None:
        found = m.group(1) if m.groups() else m.group(0)
        break
sys.stdout.write(json.dumps(found))
"""


class MetricError(Exception):
    """The pattern could not be matched in time (or the matcher failed): the trial fails."""


def last_match(pattern: str, lines: Sequence[str]) -> str | None:
    """The first group (else the whole match) of the last of `lines` that `pattern` matches."""
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
    return found if isinstance(found, str) else None


def rate(pattern: str, lines: Sequence[str]) -> float | None:
    """The figure of the last matching line as a positive number (None: no match, or not one)."""
    found = last_match(pattern, lines)
    if found is None:
        return None
    try:
        value = float(found.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None
