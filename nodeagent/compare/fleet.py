"""The fleet comparison: the odd node out, found by comparing nodes with each other.

No per-model threshold tables: nodes of one training cluster are meant to be alike, so the value
most of them have is the reference. Each host is flattened into comparable keys (`host_values`:
its facts document and its check findings), then `compare` reports

- **drift**: for every key, the hosts whose value differs from the one a strict majority shares
  (a driver, a kernel, a BIOS version, a governor, a huge page pool, a link speed). When no value
  has a strict majority (a fleet split in halves) the key is reported with every host's value,
  `majority` None and `majority_hosts` 0: a split fleet is exactly what the user must see, and
  "which half is right" is theirs to decide.
- **outliers**: for keys that are numbers on at least `min_hosts` hosts, the hosts whose modified
  z-score 0.6745 * (x - median) / MAD exceeds 3.5 in absolute value (Iglewicz and Hoaglin, "How to
  Detect and Handle Outliers", 1993; NIST/SEMATECH e-Handbook 1.3.5.17,
  https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm). The median and the median
  absolute deviation are not dragged by the outlier itself, as a mean and a standard deviation are
  (one host at 10% of the others inflates the standard deviation enough to hide itself among few
  hosts). 0.6745 is the 0.75 quantile of the standard normal, making MAD comparable to sigma.
  When MAD is 0 more than half the hosts share the median exactly, so every host that differs is
  already drift; no outlier is reported then (its score would be infinite).

The flattening (`host_values`) is nodeagent.compare.values: the same keys judge a node against a
playbook's thresholds and a baseline.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from nodeagent.api.report import Drift, Outlier
from nodeagent.compare import hardware
from nodeagent.compare.values import FLEET_CHECK_ID, HOST_PLACEHOLDER, Value, host_values, parse_number
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status

__all__ = ["FLEET_CHECK_ID", "HOST_PLACEHOLDER", "Drift", "Outlier", "Value", "host_values", "parse_number"]

# Iglewicz & Hoaglin (1993): |modified z| > 3.5 marks a potential outlier (NIST e-Handbook 1.3.5.17).
THRESHOLD = 3.5
MAD_TO_Z = 0.6745  # the standard normal's 0.75 quantile: E[MAD] = 0.6745 sigma for normal data
MIN_HOSTS = 3  # with 2 values the median sits halfway and both scores are +-0.6745: nobody stands out

HOSTS_SHOWN = 3  # host names listed per value before "+N more"


@dataclass(frozen=True)
class FleetComparison:
    """The comparison of `hosts` hosts: its drift and outliers are the fleet document's own."""

    hosts: int
    drift: list[Drift]
    outliers: list[Outlier]


def compare(
    values: Mapping[str, Mapping[str, Value]], min_hosts: int = MIN_HOSTS, threshold: float = THRESHOLD
) -> FleetComparison:
    """Drift and numeric outliers across hosts (host -> host_values(...)); see the module docstring.

    A key is compared when at least 2 hosts have it: a key only one host has is mostly that host's
    own name for something (an interface, a device path). Hosts without a key count as None.
    Results are sorted by key, then host.
    """
    _check_params(min_hosts, threshold)
    hosts = sorted(values)
    seen: dict[str, int] = {}
    for h in hosts:
        for key in values[h]:
            seen[key] = seen.get(key, 0) + 1
    drift: list[Drift] = []
    outliers: list[Outlier] = []
    for key in sorted(k for k, n in seen.items() if n >= 2):
        column = {h: values[h].get(key) for h in hosts}
        found = _drift(key, column)
        if found is not None:
            drift.append(found)
        numbers = {h: float(v) for h, v in column.items() if _is_number(v)}
        outliers.extend(outliers_in(numbers, key, threshold, min_hosts))
    outliers.sort(key=lambda o: (o.key, o.host))
    return FleetComparison(len(hosts), drift, outliers)


def outliers_in(
    samples: Mapping[str, float], key: str, threshold: float = THRESHOLD, min_hosts: int = MIN_HOSTS
) -> list[Outlier]:
    """Hosts whose |modified z-score| exceeds `threshold` for one measurement (sorted by host).

    None when fewer than `min_hosts` finite values, or when MAD is 0 (more than half the hosts
    have the median exactly: compare() reports the others as drift). For bandwidth a "low" host
    matters, for latency a "high" one; the direction says which.
    """
    _check_params(min_hosts, threshold)
    finite = {h: float(x) for h, x in samples.items() if math.isfinite(float(x))}
    if len(finite) < min_hosts:
        return []
    med = statistics.median(finite.values())
    mad = statistics.median(abs(x - med) for x in finite.values())
    if mad == 0 or not math.isfinite(mad):
        return []
    out = []
    for host in sorted(finite):
        x = finite[host]
        score = MAD_TO_Z * (x - med) / mad
        if abs(score) > threshold:
            out.append(
                Outlier(
                    key=key,
                    host=host,
                    value=x,
                    median=med,
                    mad=mad,
                    score=score,
                    direction="high" if score > 0 else "low",
                )
            )
    return out


def _check_params(min_hosts: int, threshold: float) -> None:
    if not (threshold > 0 and math.isfinite(threshold)):
        raise UsageError(
            f"fleet comparison: threshold {threshold!r} is not a positive number of MADs; "
            f"{THRESHOLD} is the usual cut-off (Iglewicz and Hoaglin)"
        )
    if min_hosts < 1:
        raise UsageError(
            f"fleet comparison: min_hosts {min_hosts!r} must be at least 1 (default {MIN_HOSTS})"
        )


def _is_number(v: Value) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def same_value(v: Value) -> tuple[str, Any]:
    """What two values must share to be equal: 1 == 1.0, but True is not 1 and "1" is not 1."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int | float):
        return ("number", "nan" if math.isnan(v) else v)  # NaN is not equal to itself
    if v is None:
        return ("none", None)
    return ("text", v)


def _drift(key: str, column: Mapping[str, Value]) -> Drift | None:
    groups: dict[tuple[str, Any], list[str]] = {}
    for host, value in column.items():
        groups.setdefault(same_value(value), []).append(host)
    if len(groups) == 1:
        return None
    largest = max(groups.values(), key=len)
    if 2 * len(largest) > len(column):
        agree = set(largest)
        differ = {h: v for h, v in column.items() if h not in agree}
        return Drift(key=key, majority=column[largest[0]], majority_hosts=len(largest), hosts=differ)
    return Drift(key=key, majority=None, majority_hosts=0, hosts=dict(column))


def below_majority(cmp: FleetComparison, status: Status = Status.FAIL) -> dict[str, list[Finding]]:
    """Per host, a finding for each hardware count (nodeagent.compare.hardware) below the one a strict
    majority of the fleet shares: the fleet's own expectation of what a node has (a node of ten
    that shows 7 GPUs where nine show 8 lost one). A host whose count was not read (None) is not
    judged here: that is no evidence of a loss."""
    out: dict[str, list[Finding]] = {}
    for d in cmp.drift:
        want = d.majority
        if not d.key.startswith(f"{hardware.SECTION}.") or not d.majority_hosts or not _is_count(want):
            continue
        for host, value in d.hosts.items():
            if _is_count(value) and value < want:
                out.setdefault(host, []).append(_short(d, host, value, want, cmp.hosts, status))
    return out


def _is_count(v: Value) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _short(d: Drift, host: str, value: float, want: float, hosts: int, status: Status) -> Finding:
    return Finding(
        FLEET_CHECK_ID,
        status,
        f"{d.key} = {value:g}, where {d.majority_hosts} of {hosts} hosts have {want:g}",
        {d.key: f"{value:g}"},
        expected=f"{want:g}, as on most of the fleet",
        remediation=(
            "A node with less hardware than its peers lost some (a GPU fallen off the bus, an HCA or "
            "port down): check `nodeagent facts` and the kernel log on it, reseat or replace the part; "
            "state the inventory in the playbook's expect: when the fleet is mixed on purpose."
        ),
        subject=d.key,
        host=host,
    )


def abbreviate(hosts: Sequence[str], shown: int = HOSTS_SHOWN) -> str:
    """ "h03, h07, h09 +12 more" (all of them when only one more would be hidden)."""
    if len(hosts) <= shown + 1:
        return ", ".join(hosts)
    return f"{', '.join(hosts[:shown])} +{len(hosts) - shown} more"
