"""The engine isolates checks: an exception or a hang in one is that check's UNKNOWN, never the run's end."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from nodeagent import engine
from nodeagent.api.check import Check, NoParams
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, worst
from nodeagent.host import Host, LocalHost


def _check(cid: str, collect: object, status: Status = Status.OK) -> Check[object, NoParams]:
    def evaluate(facts: object, params: NoParams) -> list[Finding]:
        return [Finding(cid, status, f"{cid} saw {facts}")]

    return Check(cid, cid.title(), (), collect, evaluate, NoParams)  # type: ignore[arg-type]


def _boom(host: Host) -> object:
    raise ValueError("corrupt /sys/x")


def test_results_stream_and_keep_order_in_report() -> None:
    checks = [_check("a", lambda h: 1), _check("b", lambda h: 2, Status.WARN), _check("c", lambda h: 3)]
    report = engine.run_report(LocalHost(name="n1"), checks)
    assert [r.check_id for r in report.results] == ["a", "b", "c"]
    assert all(f.host == "n1" for f in report.findings)
    assert report.status is Status.WARN and report.exit_code == 1


def test_exception_becomes_unknown_with_evidence() -> None:
    report = engine.run_report(LocalHost(), [_check("bad", _boom), _check("good", lambda h: 1)])
    bad = report.results[0].findings[0]
    assert bad.status is Status.UNKNOWN
    assert "ValueError: corrupt /sys/x" in bad.evidence["exception"]
    assert report.results[1].findings[0].status is Status.OK
    assert report.exit_code == 3


def test_hung_check_is_cut_at_the_timeout_and_the_rest_complete() -> None:
    release = threading.Event()

    def hang(host: Host) -> object:
        release.wait(30)
        return None

    checks = [_check("hang", hang), *(_check(f"c{i}", lambda h: 1) for i in range(6))]
    start = time.monotonic()
    report = engine.run_report(LocalHost(), checks, timeout_s=0.3, workers=2)
    elapsed = time.monotonic() - start
    release.set()
    hung = report.results[0]
    assert hung.check_id == "hang" and hung.status is Status.UNKNOWN
    assert "did not finish within 0.3s" in hung.findings[0].summary
    assert [r.status for r in report.results[1:]] == [Status.OK] * 6
    assert elapsed < 10  # bounded: not waiting for the hung thread (30 s)


def test_facts_shared_between_checks_are_collected_once() -> None:
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        return "facts"

    def shared(host: Host) -> object:
        return host.memo("shared", compute)

    engine.run_report(LocalHost(), [_check(f"s{i}", shared) for i in range(5)], workers=4)
    assert calls == [1]


def test_worst_ranks_fail_over_unknown_and_exit_codes() -> None:
    assert worst([Status.OK, Status.UNKNOWN, Status.FAIL]) is Status.FAIL
    assert worst([Status.WARN, Status.UNKNOWN]) is Status.UNKNOWN
    assert worst([]) is Status.SKIPPED
    assert [s.exit_code for s in (Status.SKIPPED, Status.OK, Status.WARN, Status.FAIL, Status.UNKNOWN)] == [
        0,
        0,
        1,
        2,
        3,
    ]


@dataclass(frozen=True)
class _P:
    limit: int = 5
    name: str = "x"


def test_params_validation() -> None:
    c = Check("p", "P", (), lambda h: None, lambda f, p: [], _P)
    assert c.make_params({"limit": 7}) == _P(limit=7)
    with pytest.raises(UsageError, match="unknown parameter 'limt'"):
        c.make_params({"limt": 7})
    with pytest.raises(UsageError, match="wants int"):
        c.make_params({"limit": "many"})


def test_the_budget_cuts_running_and_waiting_checks_and_names_them() -> None:
    """One worker, a check that hangs: at the budget it is cut, and the checks still queued
    behind it are reported as cut too (never started), so a gate always answers."""
    release = threading.Event()

    def hang(host: Host) -> object:
        release.wait(60)
        return None

    checks = [
        _check("quick", lambda h: 1),
        _check("hang", hang),
        _check("after1", lambda h: 1),
        _check("after2", lambda h: 1),
    ]
    try:
        report = engine.run_report(LocalHost(), checks, timeout_s=60, workers=1, budget_s=0.5)
    finally:
        release.set()
    by_id = {r.check_id: r for r in report.results}
    assert by_id["quick"].status is Status.OK and not by_id["quick"].timed_out
    for cid in ("hang", "after1", "after2"):
        r = by_id[cid]
        assert r.timed_out and r.status is Status.UNKNOWN
        assert "cut at the run's budget of 0.5s" in r.findings[0].summary
    assert report.duration_s < 30  # answered at the budget, not after the hung check's 60 s
    assert [c["timed_out"] for c in report.to_dict()["checks"]] == [False, True, True, True]
