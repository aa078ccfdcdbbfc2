"""A playbook's thresholds, judged on a node's values: pure, no I/O.

A threshold names one of the node's comparable values (the keys of
nodeagent.compare.values.host_values: facts such as "hugepages.thp_enabled" and check evidence such
as "check.kernel.vm.swappiness./proc/sys/vm/swappiness") and the condition it must meet: a range
(min, max) for numbers, or equals / one_of for any value. `evaluate` gives findings of the check id
"playbook", so they are reported, gated (nodeagent.gate.judge) and compared across a fleet like any
other check's.

A key may be a glob: `*` stands for any run of characters, `?` for one; everything else, square
brackets included, is literal, because brackets are part of the keys ("nics[eth0].mtu"), so
"nics[*].mtu" means every interface. Each matched key that fails is a finding of its own (subject:
that key); those that pass are gathered in one OK finding (subject: the pattern), so a healthy node
with 128 cpufreq policies reports one line, not 128.

A value the node does not have (no such key, None, or evidence a check wrote as "(absent)",
"absent" or "(unset)": no THP on this kernel, the numa check saying nothing on one NUMA node) is
judged by the threshold's `missing`:
- "skip": SKIPPED with "not present on this node" (a playbook written for a fleet applies to its
  odd nodes too). The default of warn-level thresholds.
- "fail" (the default of fail-level thresholds) or "warn": a fact the node does not have (a device,
  a count of hardware) is a finding at that level: the playbook expects it, and a node that lost
  its HCA must not pass a gate because the rule about its ports found nothing to judge (NHC's
  check_hw_ib, https://github.com/mej/nhc). Check evidence that is absent while its check ran is
  UNKNOWN instead (the check could not read it: not evidence of a fault, and still not a pass),
  and so is a hardware count whose source was not read; evidence of a check that did not run this
  time is SKIPPED.
A range on a value that is not a number is UNKNOWN (the threshold cannot be judged, and a gate must
not pass it silently).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.compare import hardware
from nodeagent.compare.values import Value, unrecorded_place
from nodeagent.core.document import LATE, is_empty, is_none
from nodeagent.core.finding import Finding, Status

CHECK_ID = "playbook"
# How checks write "nothing there" in their evidence (a sysctl the kernel lacks, an unset variable):
# judged like a missing key.
ABSENT_TEXTS = frozenset({"(absent)", "absent", "(unset)"})
SEVERITIES = {"warn": Status.WARN, "fail": Status.FAIL}
MISSING = ("fail", "warn", "skip")
COUNTS_PREFIX = f"{hardware.SECTION}."
_PLAIN_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", re.ASCII)
_SUMMARY_VALUE_CHARS = 80


# A threshold is its part of the resolved playbook (`playbooks show`): a pydantic dataclass, its
# conditions in the order the file writes them, those not asked for left out.
@pydantic_dataclass(frozen=True, config=LATE)
class Threshold:
    """`value` must be >= min, <= max, equal `equals`, be one of `one_of` (those given; at least
    one is). None means "no such condition": a threshold cannot ask for a value to be null, since
    a null value is one the node does not have (SKIPPED)."""

    value: str
    min: float | None = Field(default=None, exclude_if=is_none)
    max: float | None = Field(default=None, exclude_if=is_none)
    equals: Value = Field(default=None, exclude_if=is_none)
    one_of: tuple[Value, ...] | None = Field(default=None, exclude_if=is_none)
    severity: str = "fail"  # "warn" | "fail"
    # "fail" | "warn" | "skip"; None: as the severity, "skip" for warn
    missing: str | None = Field(default=None, exclude_if=is_none)
    why: str = Field(default="", exclude_if=is_empty)

    @property
    def when_missing(self) -> str:
        """What an absent value gives: `missing`, else "fail" for fail-level thresholds, "skip" for warn."""
        if self.missing is not None:
            return self.missing
        return "fail" if self.severity == "fail" else "skip"

    @property
    def expected(self) -> str:
        """The condition as findings show it: ">= 500000", "one of madvise, always"."""
        parts = []
        if self.min is not None:
            parts.append(f">= {show(self.min)}")
        if self.max is not None:
            parts.append(f"<= {show(self.max)}")
        if self.equals is not None:
            parts.append(show(self.equals))
        if self.one_of is not None:
            parts.append("one of " + ", ".join(show(v) for v in self.one_of))
        return " and ".join(parts)

    def judge(self, value: Value) -> bool | None:
        """Whether `value` meets every condition; None when a range is asked of a value that is not
        a number (it cannot be judged)."""
        if self.min is not None or self.max is not None:
            number = as_number(value)
            if number is None:
                return None
            if self.min is not None and number < self.min:
                return False
            if self.max is not None and number > self.max:
                return False
        if self.equals is not None and not same(value, self.equals):
            return False
        return self.one_of is None or any(same(value, v) for v in self.one_of)


def as_number(value: Value) -> int | float | None:
    """A value as a number: ints and finite floats, and text that is only a number ("4194304");
    None for booleans, NaN and anything else. Units are not read here: host_values has already
    turned check evidence such as "2048 kB" into numbers."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if not math.isnan(value) else None
    text = value.strip()
    if _PLAIN_NUMBER.fullmatch(text) is None:
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def same(value: Value, wanted: Value) -> bool:
    """Equality as a playbook means it: booleans only equal booleans (true is not 1), numbers compare
    by value (0 equals 0.0), and a number equals text holding that number ("0" from a file)."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    if value is None or wanted is None:
        return value is None and wanted is None
    if isinstance(value, str) and isinstance(wanted, str):
        return value == wanted
    a, b = as_number(value), as_number(wanted)
    return a is not None and b is not None and a == b


def show(value: Value) -> str:
    """A value as findings show it: YAML spellings, whole floats without ".0"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def is_glob(key: str) -> bool:
    return "*" in key or "?" in key


@functools.lru_cache(maxsize=256)
def _pattern(glob: str) -> re.Pattern[str]:
    # re.escape escapes * and ? too; turn exactly those back into wildcards.
    return re.compile(re.escape(glob).replace(r"\*", ".*").replace(r"\?", "."), re.DOTALL)


def matching_keys(glob: str, keys: Sequence[str] | Mapping[str, Any]) -> list[str]:
    """The keys a glob matches (`*` any run, `?` one character, brackets literal), sorted."""
    pattern = _pattern(glob)
    return sorted(k for k in keys if pattern.fullmatch(k))


def evaluate(thresholds: Sequence[Threshold], values: Mapping[str, Value], host: str = "") -> list[Finding]:
    """Findings of `thresholds` on one node's `values` (see the module docstring), in order."""
    out: list[Finding] = []
    for t in thresholds:
        if is_glob(t.value):
            out += _judge_glob(t, values, host)
        else:
            out.append(_judge_key(t, t.value, values.get(t.value), host, values))
    return out


def _judge_glob(t: Threshold, values: Mapping[str, Value], host: str) -> list[Finding]:
    present = [(k, values[k]) for k in matching_keys(t.value, values) if not is_absent(values[k])]
    if not present:
        return [_absent(t, t.value, values, host)]
    out: list[Finding] = []
    met: dict[str, str] = {}
    for key, value in present:
        if t.judge(value):
            met[key] = show(value)
        else:
            out.append(_judge_key(t, key, value, host, values))
    if met:
        summary = f"{len(met)} of {len(present)} value(s) matching {t.value} are {t.expected}"
        out.insert(0, _finding(t, Status.OK, summary, met, t.value, host))
    return out


def is_absent(value: Value) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ABSENT_TEXTS)


def _judge_key(t: Threshold, key: str, value: Value, host: str, values: Mapping[str, Value]) -> Finding:
    if is_absent(value):
        zero = hardware.zero_when_counted(key, values)
        if zero is None:
            return _absent(t, key, values, host)
        value = zero
    shown = show(value)
    evidence = {key: shown}
    brief = shown if len(shown) <= _SUMMARY_VALUE_CHARS else shown[: _SUMMARY_VALUE_CHARS - 3] + "..."
    verdict = t.judge(value)
    if verdict is None:
        summary = f"{key} = {brief}: not a number, so it cannot be compared with {t.expected}"
        return _finding(t, Status.UNKNOWN, summary, evidence, key, host)
    if verdict:
        return _finding(t, Status.OK, f"{key} = {brief}", evidence, key, host)
    status = SEVERITIES.get(t.severity, Status.FAIL)
    return _finding(t, status, f"{key} = {brief}, expected {t.expected}", evidence, key, host)


def _absent(t: Threshold, key: str, values: Mapping[str, Value], host: str) -> Finding:
    evidence = {key: "(absent)"}
    check_id = _check_of(key)
    ran = check_id is None or _ran(check_id, values)
    place = unrecorded_place(key, values) if ran else None
    if place is not None:
        # A recording that did not hold the place says nothing of the node: never "not present".
        evidence = {key: f"not recorded: {place}"}
        if t.when_missing == "skip":
            return _finding(t, Status.SKIPPED, f"{key}: not recorded: {place}", evidence, key, host)
        summary = f"{key}: not recorded: {place}, so {t.expected} cannot be judged"
        return _finding(t, Status.UNKNOWN, summary, evidence, key, host)
    if t.when_missing == "skip" or not ran:
        why = "not present on this node" if ran else f"check {check_id} did not run"
        return _finding(t, Status.SKIPPED, f"{key}: {why}", evidence, key, host)
    if check_id is not None:
        summary = f"{key}: not reported by check {check_id}, so {t.expected} cannot be judged"
        return _finding(t, Status.UNKNOWN, summary, evidence, key, host)
    if key.startswith(COUNTS_PREFIX) and not is_glob(key):
        # A count is absent only where its source was not read (nodeagent.compare.hardware): not zero.
        summary = f"{key}: not counted (its source was not read), so {t.expected} cannot be judged"
        return _finding(t, Status.UNKNOWN, summary, evidence, key, host)
    status = SEVERITIES[t.when_missing]
    summary = f"{key}: not present on this node, and the playbook expects {t.expected}"
    return _finding(t, status, summary, evidence, key, host)


def _check_of(key: str) -> str | None:
    """The check whose evidence `key` names ("check.<id>...."), None for a fact."""
    if not key.startswith("check."):
        return None
    check_id = key.split(".")[1]
    return None if is_glob(check_id) else check_id


def _ran(check_id: str, values: Mapping[str, Value]) -> bool:
    prefix = f"check.{check_id}."
    return any(k.startswith(prefix) for k in values)


def _finding(
    t: Threshold, status: Status, summary: str, evidence: dict[str, str], subject: str, host: str
) -> Finding:
    judged = status not in (Status.OK, Status.SKIPPED)
    return Finding(
        CHECK_ID,
        status,
        summary,
        evidence,
        expected=t.expected,
        remediation=t.why if judged else "",
        subject=subject,
        host=host,
    )
