"""Playbook thresholds judged on a node's values (nodeagent.gate.thresholds): pure, on hand-built values.

The shipped playbooks' thresholds on real recorded trees are in test_playbook.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.compare.values import Value
from nodeagent.core.finding import Status
from nodeagent.gate.thresholds import (
    Threshold,
    as_number,
    evaluate,
    is_absent,
    matching_keys,
    same,
    show,
)

THP = "hugepages.thp_enabled"
BACKLOG = "check.kernel.net.core./proc/sys/net/core/netdev_max_backlog"


def one(t: Threshold, values: dict[str, Value], host: str = "n1") -> tuple[Status, str, dict[str, str]]:
    (f,) = evaluate([t], values, host)
    assert f.check_id == "playbook" and f.host == host
    return f.status, f.summary, dict(f.evidence)


def test_expected_text() -> None:
    assert Threshold(BACKLOG, min=250000).expected == ">= 250000"
    assert Threshold(BACKLOG, min=1, max=2.5).expected == ">= 1 and <= 2.5"
    assert Threshold(THP, one_of=("madvise", "always")).expected == "one of madvise, always"
    assert Threshold("x", equals=True).expected == "true"
    assert Threshold("kernel.release", one_of=("5.15.0-91-generic", "5.15.0-94-generic")).expected == (
        "one of 5.15.0-91-generic, 5.15.0-94-generic"
    )


def test_met_and_failed_by_severity() -> None:
    t = Threshold(THP, one_of=("madvise", "always"), severity="warn", why="see the THP doc")
    status, summary, evidence = one(t, {THP: "madvise"})
    assert (status, summary, evidence) == (Status.OK, f"{THP} = madvise", {THP: "madvise"})
    (f,) = evaluate([t], {THP: "never"}, "n1")
    assert f.status is Status.WARN
    assert f.summary == f"{THP} = never, expected one of madvise, always"
    assert f.subject == THP and f.expected == "one of madvise, always"
    assert f.remediation == "see the THP doc"
    assert evaluate([Threshold(THP, equals="madvise")], {THP: "never"})[0].status is Status.FAIL


def test_ranges() -> None:
    t = Threshold(BACKLOG, min=250000, max=1e6)
    assert one(t, {BACKLOG: 1000.0})[0] is Status.FAIL
    assert one(t, {BACKLOG: 250000})[0] is Status.OK
    assert one(t, {BACKLOG: 1e6})[0] is Status.OK
    assert one(t, {BACKLOG: 1e6 + 1})[0] is Status.FAIL
    # Text that is only a number is read as one (facts strings); with a unit it is not.
    assert one(t, {BACKLOG: "300000"})[0] is Status.OK
    status, summary, _ = one(t, {BACKLOG: "300000 packets"})
    assert status is Status.UNKNOWN and "not a number" in summary


ABSENT_FORMS: tuple[dict[str, Value], ...] = (
    {},
    {BACKLOG: None},
    {BACKLOG: "(absent)"},
    {BACKLOG: "absent"},
    {BACKLOG: "(unset)"},
)
RAN = {"check.kernel.status": "OK"}  # the kernel check ran, and reported something else


def test_absent_with_missing_skip_is_skipped() -> None:
    for t in (Threshold(BACKLOG, min=250000, missing="skip"), Threshold(BACKLOG, min=1, severity="warn")):
        for values in ABSENT_FORMS:
            status, summary, evidence = one(t, {**values, **RAN})
            assert status is Status.SKIPPED
            assert summary == f"{BACKLOG}: not present on this node"
            assert evidence == {BACKLOG: "(absent)"}


def test_absent_evidence_of_a_check_that_ran_is_unknown_not_fail() -> None:
    # The check could not read it: no evidence of a fault, and no pass either.
    for values in ABSENT_FORMS:
        status, summary, _ = one(Threshold(BACKLOG, min=250000), {**values, **RAN})
        assert status is Status.UNKNOWN
        assert summary.startswith(f"{BACKLOG}: not reported by check kernel")


def test_absent_evidence_of_a_check_that_did_not_run_is_skipped() -> None:
    status, summary, _ = one(Threshold(BACKLOG, min=250000), {"check.numa.status": "OK"})
    assert (status, summary) == (Status.SKIPPED, f"{BACKLOG}: check kernel did not run")


def test_absent_fact_fails_at_the_threshold_level() -> None:
    # A node whose HCAs are gone has no rdma[*] keys at all: the rule about their ports must not pass.
    t = Threshold("rdma[*].state", one_of=("ACTIVE",))
    status, summary, _ = one(t, {"hardware.rdma_ports": 0})
    assert status is Status.FAIL
    assert summary == "rdma[*].state: not present on this node, and the playbook expects one of ACTIVE"
    assert one(Threshold("rdma[*].state", one_of=("ACTIVE",), missing="warn"), {})[0] is Status.WARN
    assert one(Threshold("rdma[*].state", one_of=("ACTIVE",), missing="skip"), {})[0] is Status.SKIPPED


def test_hardware_count_not_read_is_unknown_and_a_short_count_fails() -> None:
    t = Threshold("hardware.gpus", min=8)
    assert one(t, {})[0] is Status.UNKNOWN  # the PCI tree was not read: not "0 GPUs"
    status, summary, _ = one(t, {"hardware.gpus": 7})
    assert (status, summary) == (Status.FAIL, "hardware.gpus = 7, expected >= 8")


def test_booleans_are_not_numbers() -> None:
    assert not same(True, 1) and not same(1, True) and same(False, False)
    assert same(0, 0.0) and same("0", 0) and same(4194304.0, "4194304")
    assert not same("madvise", "Madvise")
    assert as_number(True) is None and as_number(float("nan")) is None and as_number("inf") is None
    assert one(Threshold("nics[eth0].carrier", min=1), {"nics[eth0].carrier": True})[0] is Status.UNKNOWN
    assert one(Threshold("nics[eth0].carrier", equals=1), {"nics[eth0].carrier": True})[0] is Status.FAIL
    assert one(Threshold("nics[eth0].carrier", equals=True), {"nics[eth0].carrier": True})[0] is Status.OK


def test_show() -> None:
    assert show(4194304.0) == "4194304" and show(0.5) == "0.5" and show(False) == "false"
    assert show(1e300) == "1e+300"


VALUES: dict[str, Value] = {
    "nics[eth0].speed_mbps": 100000,
    "nics[eth1].speed_mbps": 10000,
    "nics[lo].speed_mbps": None,
    "nics[eth0].mtu": 9000,
    "nicsX.speed_mbps": 1,
}


def test_glob_brackets_are_literal() -> None:
    assert matching_keys("nics[*].speed_mbps", VALUES) == [
        "nics[eth0].speed_mbps",
        "nics[eth1].speed_mbps",
        "nics[lo].speed_mbps",
    ]
    assert matching_keys("nics[eth?].*", VALUES) == [
        "nics[eth0].mtu",
        "nics[eth0].speed_mbps",
        "nics[eth1].speed_mbps",
    ]
    assert matching_keys("nics[e].speed_mbps", VALUES) == []  # not a character class


def test_glob_reports_each_failure_and_one_ok() -> None:
    t = Threshold("nics[*].speed_mbps", min=25000, severity="warn", why="NCCL wants fast NICs")
    found = evaluate([t], VALUES, "n1")
    assert [(f.status, f.subject) for f in found] == [
        (Status.OK, "nics[*].speed_mbps"),
        (Status.WARN, "nics[eth1].speed_mbps"),
    ]
    ok, warn = found
    assert ok.evidence == {"nics[eth0].speed_mbps": "100000"}  # lo (None) is not present
    assert ok.summary == "1 of 2 value(s) matching nics[*].speed_mbps are >= 25000"
    assert warn.evidence == {"nics[eth1].speed_mbps": "10000"} and warn.remediation == "NCCL wants fast NICs"


def test_glob_without_match_is_one_finding() -> None:
    (f,) = evaluate([Threshold("rdma[*].state", one_of=("ACTIVE",), missing="skip")], VALUES)
    assert f.status is Status.SKIPPED and f.subject == "rdma[*].state"
    (f,) = evaluate([Threshold("rdma[*].state", one_of=("ACTIVE",))], VALUES)
    assert f.status is Status.FAIL and f.subject == "rdma[*].state"


def test_one_finding_group_per_threshold_in_order() -> None:
    ts = [Threshold("nics[eth0].mtu", min=9000), Threshold(THP, equals="madvise")]
    assert [f.subject for f in evaluate(ts, VALUES)] == ["nics[eth0].mtu", THP]


# --- Properties --------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
keys = st.text(alphabet="abc.[]*?_/ 0", min_size=1, max_size=10)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
thresholds = st.builds(
    Threshold,
    value=keys,
    min=st.none() | finite,
    max=st.none() | finite,
    equals=scalars,
    one_of=st.none() | st.lists(scalars, max_size=4).map(tuple),
    severity=st.sampled_from(["warn", "fail", "bogus"]),
)


@given(st.lists(thresholds, max_size=4), st.dictionaries(keys, scalars, max_size=8))
def test_evaluate_never_raises(ts: list[Threshold], values: dict[str, Value]) -> None:
    found = evaluate(ts, values, "h")
    assert len(found) >= len(ts)
    assert all(f.check_id == "playbook" and isinstance(f.status, Status) for f in found)


present = st.text(min_size=1, max_size=12).filter(lambda s: not is_absent(s))


@given(st.one_of(st.booleans(), st.integers(-(10**12), 10**12), finite, present), st.data())
def test_a_met_threshold_is_ok(value: Value, data: st.DataObject) -> None:
    key = "check.x.y./proc/z"
    number = as_number(value)
    kinds = ["equals", "one_of"] + (["range"] if number is not None else [])
    kind = data.draw(st.sampled_from(kinds))
    if kind == "equals":
        t = Threshold(key, equals=value)
    elif kind == "one_of":
        others = data.draw(st.lists(scalars, max_size=3))
        t = Threshold(key, one_of=(*others, value))
    else:
        assert number is not None and math.isfinite(number)
        below = data.draw(st.floats(max_value=float(number), allow_nan=False) | st.none())
        above = data.draw(st.floats(min_value=float(number), allow_nan=False) | st.none())
        t = Threshold(key, min=below, max=above, equals=None)
        if below is None and above is None:
            t = Threshold(key, min=float(number) - 1)
    assert [f.status for f in evaluate([t], {key: value})] == [Status.OK]


@pytest.mark.parametrize("severity", ["warn", "fail"])
def test_a_missed_threshold_has_its_severity(severity: str) -> None:
    t = Threshold("k", max=1, severity=severity)
    assert one(t, {"k": 2})[0] is {"warn": Status.WARN, "fail": Status.FAIL}[severity]
