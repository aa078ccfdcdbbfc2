"""SIGINT, SIGTERM and SIGHUP during an A trial and during a B trial of `nodeagent verify` and of
`nodeagent tune --apply --verify`, on a fake root and on this machine's THP: each leaves the runtime
values as the journal says, no process of the trial alive, the journal consistent, and exits 128 +
the signal's number (tests/support/signal_trials.py says what is checked; tests/perf/verify_signals.py runs
each case twenty times).

A fleet run stops at once on each signal too (exit 128 + the signal). And the parts on their own:
the interrupt module (a second signal does not cut the clean-up, a critical section delays the
first), a trial's time limit, its leftovers, its output kept as its last lines, and a backtracking
--metric stopped at its limit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.bench import ab, job_process, metric
from nodeagent.core import interrupt
from tests.support import signal_trials

pytestmark = pytest.mark.slow
WAIT_S = 30.0
needs_root_thp = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(signal_trials.THP, os.W_OK),
    reason="this machine's THP selector is not writable here (root on a kernel with THP)",
)


@pytest.mark.parametrize("case", signal_trials.cases(live=False), ids=lambda c: c.name)
def test_a_signal_during_a_trial_on_a_fake_root(case: signal_trials.Case, tmp_path: Path) -> None:
    assert signal_trials.run_once(case, tmp_path) == []


@needs_root_thp
@pytest.mark.solo  # switches this machine's THP: a live check beside it would see "never"
@pytest.mark.parametrize("case", signal_trials.cases(live=True), ids=lambda c: c.name)
def test_a_signal_during_a_trial_on_this_machine(case: signal_trials.Case, tmp_path: Path) -> None:
    with signal_trials.live_thp():
        assert signal_trials.run_once(case, tmp_path) == []


# -- a fleet run -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_fleet_run_stops_at_once_on_each_signal(tmp_path: Path, sig: signal.Signals) -> None:
    """Two hosts whose SSH server accepts and never answers (a hung sshd): the run would wait for
    its 60 s connect timeout; each signal stops it at once, exit 128 + the signal."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"defaults: {{user: root, port: {port}, connect_timeout: 60, command_timeout: 120}}\n"
        "hosts: [{name: n1, host: 127.0.0.1}, {name: n2, host: 127.0.0.1}]\n"
    )
    proc = subprocess.Popen(
        signal_trials.with_default_signals(
            [sys.executable, "-m", "nodeagent", "check", "--cluster", str(inventory)]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        accepted: list[socket.socket] = []
        server.settimeout(WAIT_S)
        while len(accepted) < 2:  # both hosts are being connected to: the run is under way
            accepted.append(server.accept()[0])
        proc.send_signal(sig)
        err = proc.communicate(timeout=WAIT_S)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == f"nodeagent: interrupted by {sig.name}"


# -- the interrupt module --------------------------------------------------------------------------


@pytest.fixture
def default_dispositions() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP as a terminal gives them (a test run under nohup or `&` ignores
    some, and nodeagent leaves an ignored signal ignored)."""
    saved = {sig: signal.getsignal(sig) for sig in interrupt.HANDLED}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_signal_ignored_when_nodeagent_started_stays_ignored(default_dispositions: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    with interrupt.handled():
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.01)
    assert interrupt.received() is None


@pytest.mark.usefixtures("default_dispositions")
def test_sigterm_and_sighup_raise_like_sigint_and_a_second_signal_is_held() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        cleaned = False
        with pytest.raises(interrupt.Interrupted) as e, interrupt.handled():
            try:
                os.kill(os.getpid(), sig)
                time.sleep(5)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # the scheduler again: the clean-up goes on
                time.sleep(0.01)
                cleaned = True
        assert e.value.signum == sig and cleaned
        assert interrupt.exit_code(e.value) == 128 + sig


@pytest.mark.usefixtures("default_dispositions")
def test_a_signal_inside_a_critical_section_waits_for_its_end() -> None:
    done = []
    with pytest.raises(interrupt.Interrupted), interrupt.handled():
        with interrupt.critical():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            done.append("second write")  # not cut off between the two writes
        done.append("after")  # never reached: the interrupt is raised as the section ends
    assert done == ["second write"]


@pytest.mark.usefixtures("default_dispositions")
def test_an_event_loop_takes_the_signal_as_an_event_and_raises_only_without_one() -> None:
    taken: list[int] = []

    def take(signum: int) -> bool:
        taken.append(signum)
        return True

    with interrupt.handled(), interrupt.delivered_to(take):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.01)  # no exception: the loop quits on its own terms
    assert taken == [signal.SIGHUP] and interrupt.received() == signal.SIGHUP
    no_loop_yet = interrupt.delivered_to(lambda _signum: False)
    with pytest.raises(interrupt.Interrupted) as e, interrupt.handled(), no_loop_yet:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert e.value.signum == signal.SIGTERM


# -- a trial's process -----------------------------------------------------------------------------


def test_a_trial_past_its_limit_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pids}; echo started; sleep 300"
    ended = job_process.run(["sh", "-c", script], os.environ, 1.0, 10)
    assert ended.timed_out and ended.stdout == ["started"]
    assert not signal_trials._alive(int(pids.read_text()))


def test_what_a_trial_leaves_running_is_stopped_and_named(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    ended = job_process.run(["sh", "-c", f"sleep 300 & echo $! > {pids}; echo done"], os.environ, 60, 10)
    assert ended.code == 0 and ended.stdout == ["done"]
    left = int(pids.read_text())
    # Named as it was when stopped: "sleep", or "sh" when stopped before its exec.
    assert ended.leftovers in ([f"sleep (pid {left})"], [f"sh (pid {left})"])
    assert not signal_trials._alive(left)


def test_only_the_last_lines_of_a_trials_output_are_kept_each_cut() -> None:
    # 200,000 lines, one of 1 MiB without a newline before the last few.
    code = (
        "import sys\n"
        "for i in range(200000): print(f'line {i}')\n"
        "sys.stdout.write('x' * (1 << 20) + '\\n')\n"
        "print('rate: 42.5')\n"
    )
    ended = job_process.run([sys.executable, "-c", code], os.environ, 120, 5)
    assert ended.code == 0
    assert ended.stdout[:3] == ["line 199997", "line 199998", "line 199999"]
    assert ended.stdout[3] == "x" * job_process.LINE_BYTES and ended.stdout[4] == "rate: 42.5"


def test_a_backtracking_metric_is_stopped_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_METRIC_TIMEOUT_S", "1")
    with pytest.raises(metric.MetricError, match="NODEAGENT_METRIC_TIMEOUT_S"):
        metric.rate(r"^(a+)+$", ["a" * 40 + "!"])
    assert metric.rate(r"rate: ([0-9.,]+)", ["rate: 1", "rate: 2,500.5 img/s", "done"]) == 2500.5
    assert metric.rate(r"rate: ([0-9.]+)", ["rate: 0"]) is None  # not a positive figure


def test_a_stuck_trial_fails_verify_at_the_limit(tmp_path: Path) -> None:
    side = ab.Side(ab.A, ["sleep", "300"], dict(os.environ))
    work = ab.CommandWorkload(side, ab.Side(ab.B, ["sleep", "300"], dict(os.environ)), "job", None, 1.0)
    try:
        block = work.block(1, ("A", "B"), lambda _side: None, lambda _t: None)
    finally:
        work.close()
    assert block.error is not None and "still running after 1 s (--trial-timeout)" in block.error
