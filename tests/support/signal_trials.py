"""Interrupting verify's A/B trials: SIGINT, SIGTERM or SIGHUP while a trial of side A or side B
runs, and what must hold afterwards (tests/unit/test_signals.py runs each case once,
tests/perf/verify_signals.py twenty times).

The job reads the THP selector (of a fake root, or of this machine) to know its side (B runs with
"never"), starts a `sleep` it leaves behind, records both PIDs, and on the chosen side's second
trial says so and sleeps: the signal lands while that trial runs, with the runtime values in that
side's state.

Afterwards:
- nodeagent exited 128 + the signal's number, with one line "interrupted by SIG...";
- no process any trial started is alive;
- every runtime value is what the journals say: an applied journal's `after` (verify: the profile's
  values stay), a reverted one's `before` (tune --verify: the change being judged is undone);
- the journals load, and each is applied or reverted as expected;
- the temporary A profile and the trials' temporary folder are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from nodeagent.api.tune import Plan, runtime_write
from nodeagent.host import LocalHost
from nodeagent.tuning import apply, journal
from tests.support.paths import REPO

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
METRIC = r"rate: ([0-9.]+)"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MODES = ("verify", "tune")  # `nodeagent verify`, `nodeagent tune --apply --verify`
WAIT_S = 90.0  # for the hanging trial to start, and for nodeagent to exit once signalled

JOB = r"""
import os, subprocess, sys, time
d = os.environ["JOB_DIR"]
thp = open(os.environ.get("JOB_ROOT", "") + "/sys/kernel/mm/transparent_hugepage/enabled").read()
side = "B" if "[never]" in thp or thp.strip() == "never" else "A"
with open(os.path.join(d, "runs-" + side), "a") as f:
    f.write("x\n")
nth = sum(1 for _ in open(os.path.join(d, "runs-" + side)))
child = subprocess.Popen(["sleep", "300"])  # left running: the trial's leftover
with open(os.path.join(d, "pids"), "a") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
if side == os.environ["HANG_SIDE"] and nth == 2:
    with open(os.path.join(d, "hanging"), "w") as f:
        f.write(side)
    time.sleep(300)
print(f"rate: {100 + nth % 3}")
"""


@dataclass(frozen=True)
class Case:
    mode: str  # verify or tune
    side: str  # the side whose trial is interrupted
    sig: signal.Signals
    live: bool  # this machine's THP (the CLI itself), else a fake root (tests/support/verify_driver.py)

    @property
    def name(self) -> str:
        return f"{self.mode}-{self.side}-{self.sig.name}-{'live' if self.live else 'fake'}"


def cases(live: bool) -> list[Case]:
    return [Case(m, s, sig, live) for m in MODES for s in ("A", "B") for sig in SIGNALS]


@contextmanager
def live_thp() -> Iterator[str]:
    """This machine's THP selector set to "madvise" for the run (the trials tell side B by "never",
    so side A needs any other value, whatever the machine booted with), put back afterwards."""
    path = Path(THP)
    before = next(w.strip("[]") for w in path.read_text().split() if w.startswith("["))
    try:
        path.write_text("madvise")
        yield before
    finally:
        path.write_text(before)


def _thp_plan(host: LocalHost) -> Plan:
    now = host.read(THP) or ""
    current = next(w.strip("[]") for w in now.split() if w.startswith("["))
    return Plan("thp", [runtime_write("thp", "THP", "why", {THP: current}, "never")])


def _setup(case: Case, work: Path) -> tuple[list[str], dict[str, str]]:
    """The command to interrupt and its environment; for verify, the profile's journal applied."""
    state, tmp, jobdir = work / "state", work / "tmp", work / "job"
    for d in (tmp, jobdir):
        d.mkdir(parents=True)
    script = work / "job.py"
    script.write_text(JOB)
    env = {
        **os.environ,
        "NODEAGENT_STATE_DIR": str(state),
        "TMPDIR": str(tmp),
        "JOB_DIR": str(jobdir),
        "HANG_SIDE": case.side,
        "PYTHONPATH": str(REPO),
    }
    root = "" if case.live else str(work / "root")
    env["JOB_ROOT"] = root
    if not case.live:
        knob = work / "root" / THP.lstrip("/")
        knob.parent.mkdir(parents=True)
        knob.write_text("always [madvise] never\n")
    job = [sys.executable, str(script)]
    trials = ["--pairs", "6", "--metric", METRIC, "--", *job]
    if case.mode == "verify":
        saved = os.environ.get("NODEAGENT_STATE_DIR")
        os.environ["NODEAGENT_STATE_DIR"] = str(state)
        try:  # as `nodeagent tune --apply --only thp --profile fast` would
            host = LocalHost(root=root) if root else LocalHost()
            assert apply.apply(host, [_thp_plan(host)], "fast").journal is not None
        finally:
            os.environ.pop("NODEAGENT_STATE_DIR")
            if saved is not None:
                os.environ["NODEAGENT_STATE_DIR"] = saved
    nodeagent = [sys.executable, "-m", "nodeagent"]
    if not case.live:
        driver = [sys.executable, "-m", "tests.support.verify_driver", case.mode, root]
        return [*driver, *trials], env
    if case.mode == "verify":
        return [*nodeagent, "verify", "--profile", "fast", *trials], env
    only = ["--only", "thp", "--set", "thp.enabled=never", "--set", f"thp.defrag={_defrag()}"]
    return [*nodeagent, "tune", "--apply", "--verify", *only, *trials], env


def _defrag() -> str:
    """This machine's THP defrag choice, kept: the change judged is `enabled` alone."""
    raw = Path(THP).with_name("defrag").read_text()
    return next(w.strip("[]") for w in raw.split() if w.startswith("["))


# A test run started in the background (`&`, nohup, some CI runners) ignores SIGINT or SIGHUP, and
# an ignored signal stays ignored across exec, which nodeagent respects: the runs under test are
# started with every signal at its default, as from a terminal or by slurmd.
_DEFAULTS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def with_default_signals(argv: list[str]) -> list[str]:
    """`argv` started with SIGINT, SIGTERM and SIGHUP at their defaults (`argv[0]` a path)."""
    return [sys.executable, "-c", _DEFAULTS, *argv]


def run_once(case: Case, work: Path) -> list[str]:
    """Interrupt one run as `case` says; what went wrong (empty: everything held)."""
    argv, env = _setup(case, work)
    proc = subprocess.Popen(
        with_default_signals(argv),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        marker = work / "job" / "hanging"
        deadline = time.monotonic() + WAIT_S
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                said = proc.communicate()[1].decode(errors="replace")[-2000:]
                return [f"the side {case.side} trial never hung (exit {proc.returncode}): {said}"]
            time.sleep(0.02)
        proc.send_signal(case.sig)
        err = proc.communicate(timeout=WAIT_S)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return _problems(case, work, proc.returncode, err.decode(errors="replace"))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _problems(case: Case, work: Path, code: int, err: str) -> list[str]:
    out = []
    if code != 128 + case.sig:
        out.append(f"exit {code}, not {128 + case.sig}: {err[-2000:]}")
    if f"interrupted by {case.sig.name}" not in err:
        out.append(f"stderr does not say 'interrupted by {case.sig.name}': {err[-2000:]}")
    pids = [int(p) for line in (work / "job" / "pids").read_text().splitlines() for p in line.split()]
    alive = [p for p in pids if _alive(p)]
    if alive:
        out.append(f"trial processes still alive: {alive}")
        for p in alive:
            os.kill(p, signal.SIGKILL)
    journals = journal.all_journals(work / "state")
    if len(journals) != 1:
        return [*out, f"{len(journals)} journals, not 1"]
    j = journals[0]
    want_state = journal.APPLIED if case.mode == "verify" else journal.REVERTED
    if j.state != want_state:
        out.append(f"journal {j.id} is {j.state}, not {want_state}")
    host = LocalHost(root=str(work / "root")) if not case.live else LocalHost()
    for w in j.writes:
        now = (host.read(w.path) or "").strip()
        want = w.after if j.state == journal.APPLIED else w.before
        if now != want and f"[{want}]" not in now.split():
            out.append(f"{w.path} holds {now!r}; journal {j.id} ({j.state}) says {want!r}")
    profiles = work / "state" / "profiles"
    left = sorted(p.name for p in profiles.glob("nodeagent-verify-a-*")) if profiles.is_dir() else []
    if left:
        out.append(f"temporary A profile left: {left}")
    temp = sorted(p.name for p in (work / "tmp").glob("nodeagent-verify-*"))
    if temp:
        out.append(f"temporary trial folders left: {temp}")
    return out
