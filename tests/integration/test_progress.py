"""Progress of the long commands on stderr: a bar on a terminal, one plain line per step when piped,
nothing with --quiet; standard output the same in all three.

Each command runs as a process of its own (tests/support/progress_driver.py: nodeagent, where a busy
neighbour never makes a benchmark process or an A/B block run again) with its stderr a pipe or a
pseudo-terminal, on small inputs: the fake benchmark worker (tests/support/fake_bench.py), the A/B job of
tests/integration/test_ab_trials.py (its rate from its own arithmetic), local fleet hosts and Slurm's recorded
answers (tests/support/slurm_replay.py). What each line must say comes from those sources.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from tests.support import slurm_replay
from tests.support.fake_bench import FAKE_WORKER
from tests.support.paths import FIXTURES, REPO

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
ELAPSED = re.compile(r"(.*) \((\d+) s\)")
METRIC = r"rate: ([0-9.]+)"
# The A/B job: `rate: 100` as it is, x1.3 with HELPFUL=1 in its environment (which the profile
# "fast" sets), x0.7 with HARMFUL=1; it appends a line per run to JOB_LOG.
JOB = r"""
import os
rate = 100.0
if os.environ.get("HELPFUL") == "1":
    rate *= 1.3
if os.environ.get("HARMFUL") == "1":
    rate *= 0.7
with open(os.environ["JOB_LOG"], "a") as log:
    log.write("ran\n")
print(f"rate: {rate:.4f} items/s")
"""
# The fake worker's figures per config (images/s), steady: no per-process jitter.
SPEEDS = {"naive": 100, "autotune": 140, "input_only": 200, "compute_only": 180}


def driven(*args: str, fake_worker: Path | None = None) -> list[str]:
    """nodeagent ARGS through tests/support/progress_driver.py (with the fake benchmark worker when given)."""
    worker = ["--fake-worker", str(fake_worker)] if fake_worker is not None else []
    return [sys.executable, "-m", "tests.support.progress_driver", *worker, *args]


def piped(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)


def on_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`argv` with stderr a pseudo-terminal of 120 x 40 and stdout a pipe: its exit code, stdout,
    and what it drew on the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=REPO
    ) as proc:
        os.close(slave)
        drawn = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                break
            if not chunk:
                break
            drawn += chunk
        os.close(master)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        code = proc.wait(timeout=60)
    return code, out, drawn.decode(errors="replace")


def lines_of(stderr: str) -> list[tuple[str, int]]:
    """Each progress line as (text, seconds since the start); every line of stderr must be one."""
    found = []
    for line in stderr.splitlines():
        match = ELAPSED.fullmatch(line)
        assert match is not None, f"not a progress line: {line!r}\n{stderr}"
        found.append((match[1], int(match[2])))
    seconds = [s for _, s in found]
    assert seconds == sorted(seconds), stderr  # the clock never goes back
    return found


def texts(stderr: str, prefix: str = "") -> list[str]:
    return [t for t, _ in lines_of(stderr) if t.startswith(prefix)]


def counts(found: list[str], pattern: str) -> list[int]:
    """The first number of `pattern` in each line that has it (e.g. the n of `pair n/N`)."""
    return [int(m[1]) for t in found if (m := re.search(pattern, t))]


# Standard output must not change with progress. What differs from run to run is the time each
# run measured itself (and a journal's id, made of the time): those are put aside before comparing.
TIMES = re.compile(r"\b\d+(\.\d+)? ?s\b|journal [0-9TZ]+-[0-9a-f]+|\b\d{8}T\d{6}Z-[0-9a-f]+")


def same_stdout(a: str, b: str) -> None:
    assert a.strip(), "no standard output to compare"
    assert TIMES.sub("<time>", a) == TIMES.sub("<time>", b)


def without_durations(doc: Any) -> Any:
    """A JSON document without the times it measured or was made at."""
    if isinstance(doc, dict):
        return {
            k: without_durations(v) for k, v in doc.items() if k not in ("duration_s", "wall_s", "started")
        }
    if isinstance(doc, list):
        return [without_durations(v) for v in doc]
    return doc


# -- fleets -----------------------------------------------------------------------------------------


def fleet_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    return dict(os.environ, HOME=str(home))


def local_inventory(tmp_path: Path) -> Path:
    """Two hosts run here, and one whose nodeagent is not installed (its error: nodeagent missing)."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        f"defaults: {{connection: local, nodeagent: {NODEAGENT}}}\n"
        f"hosts: [local1, local2, {{name: bare, nodeagent: {tmp_path / 'not-installed' / 'nodeagent'}}}]\n"
    )
    return inv


@pytest.mark.slow
def test_a_fleet_piped_tells_each_host_as_it_ends(tmp_path: Path) -> None:
    env = fleet_env(tmp_path)
    args = ("check", "--cluster", str(local_inventory(tmp_path)), "--remote-agent", "--only", "kernel")
    shown = piped([NODEAGENT, *args, "--format", "json"], env)
    found = texts(shown.stderr)
    assert found[0] == "fleet: 3 hosts, started"
    assert counts(found[1:], r"^fleet: (\d+)/3 hosts done") == [1, 2, 3]
    ended = {re.search(r"; (\S+) (done|failed)", t)[1]: t for t in found[1:]}  # type: ignore[index]
    assert set(ended) == {"local1", "local2", "bare"}
    assert ended["bare"].endswith("; bare failed: nodeagent missing")
    assert found[-1].startswith("fleet: 3/3 hosts done, 1 error; ")
    quiet = piped([NODEAGENT, *args, "--format", "json", "--quiet"], env)
    assert quiet.stderr == ""
    assert shown.returncode == quiet.returncode == 2
    assert without_durations(json.loads(shown.stdout)) == without_durations(json.loads(quiet.stdout))
    table, quiet_table = piped([NODEAGENT, *args], env), piped([NODEAGENT, *args, "-q"], env)
    same_stdout(table.stdout, quiet_table.stdout)
    assert quiet_table.stderr == "" and texts(table.stderr)[-1].startswith("fleet: 3/3 hosts done")


def test_a_slurm_fleet_tells_each_node_when_slurm_answers_for_it(tmp_path: Path) -> None:
    """n4 is drained (sinfo): not run, known first; n2's task did not start (the probe's recorded
    error); then the nodes as their tasks' exit lines come in the recorded step's output."""
    env = dict(os.environ, FAKE_SLURM_LOG=str(tmp_path / "calls.log"))
    env["PATH"] = f"{slurm_replay.install(tmp_path / 'bin')}{os.pathsep}{env['PATH']}"
    recorded = (FIXTURES / "slurm" / "fanout" / "srun-check.stdout").read_text()
    step_nodes = ("n1", "n3")  # the run step's --nodelist: task i on the i-th
    exits = re.findall(r"^\s*(\d+): nodeagent-slurm-exit ", recorded, re.MULTILINE)
    in_order = [step_nodes[int(label)] for label in exits]
    shown = piped([NODEAGENT, "check", "--slurm", "test", "--format", "json"], env)
    found = texts(shown.stderr)
    assert found == [
        "fleet: 4 hosts, started",
        "fleet: 1/4 hosts done, 0 errors; n4 done",
        "fleet: 2/4 hosts done, 1 error; n2 failed: unreachable",
        f"fleet: 3/4 hosts done, 1 error; {in_order[0]} done",
        f"fleet: 4/4 hosts done, 1 error; {in_order[1]} done",
    ]
    quiet = piped([NODEAGENT, "check", "--slurm", "test", "--format", "json", "--quiet"], env)
    assert quiet.stderr == "" and shown.returncode == quiet.returncode == 2
    assert without_durations(json.loads(shown.stdout)) == without_durations(json.loads(quiet.stdout))


def test_a_fleet_on_a_terminal_draws_a_bar(tmp_path: Path) -> None:
    env = fleet_env(tmp_path)
    args = ["check", "--cluster", str(local_inventory(tmp_path)), "--remote-agent", "--only", "kernel"]
    code, out, drawn = on_terminal([NODEAGENT, *args, "--format", "json"], env)
    assert code == 2 and json.loads(out)["summary"]["hosts"] == 3
    assert "\x1b[?25l" in drawn and "━" in drawn  # rich's live display: cursor hidden, the bar
    assert "3/3 hosts, 1 error" in drawn
    assert "hosts done" not in drawn  # no plain lines on a terminal
    code, _, drawn = on_terminal([NODEAGENT, *args, "--format", "json", "--quiet"], env)
    assert code == 2 and drawn == ""


# -- the benchmark ----------------------------------------------------------------------------------


@pytest.fixture
def fake_worker(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    worker = tmp_path / "fake_worker.py"
    worker.write_text(FAKE_WORKER)
    env = dict(os.environ, NODEAGENT_STATE_DIR=str(tmp_path / "state"), FAKE_STEADY="1")
    env |= {f"FAKE_SPEED_{name.upper()}": str(speed) for name, speed in SPEEDS.items()}
    return worker, env


def test_bench_piped_tells_each_config_its_warm_up_and_its_figure(
    fake_worker: tuple[Path, dict[str, str]],
) -> None:
    from nodeagent.bench import run

    worker, env = fake_worker
    shown = piped(driven("bench", "--quick", fake_worker=worker), env)
    assert shown.returncode == 0, shown.stderr
    found = texts(shown.stderr)
    assert found[0] == f"bench: preparing the data set ({run.QUICK.images} images)"
    # Without a profile tuned is skipped: the other four run, in the benchmark's order.
    order = [c for c in run.CONFIGS if c != "tuned"]
    timed = run.QUICK.steps * run.QUICK.repeats
    want = []
    for n, config in enumerate(order, 1):
        head = f"bench: config {n}/{len(order)} {config}"
        want += [
            f"{head}: started; warm-up first (not timed)",
            f"{head}: warm-up done ({run.QUICK.warmup_steps} steps); timing {timed} steps",
            f"{head}: {SPEEDS[config]:.1f} images/s (median of {run.QUICK.repeats} repeats)",
        ]
    assert found[1:] == want
    quiet = piped(driven("bench", "--quick", "--quiet", fake_worker=worker), env)
    assert quiet.stderr == ""
    same_stdout(shown.stdout, quiet.stdout)


def test_bench_json_is_the_same_with_progress(fake_worker: tuple[Path, dict[str, str]]) -> None:
    worker, env = fake_worker
    shown = piped(driven("bench", "--quick", "--format", "json", fake_worker=worker), env)
    quiet = piped(driven("bench", "--quick", "--format", "json", "-q", fake_worker=worker), env)
    assert texts(shown.stderr, "bench: config 4/4 compute_only: ")
    assert quiet.stderr == ""
    a, b = (without_durations(json.loads(p.stdout)) for p in (shown, quiet))
    for doc in (a, b):  # the share of the CPUs a neighbour took: the machine's, not the output's
        for config in doc["configs"].values():
            config.pop("interference", None)
    assert a == b


def test_bench_on_a_terminal_draws_a_bar(fake_worker: tuple[Path, dict[str, str]]) -> None:
    worker, env = fake_worker
    code, out, drawn = on_terminal(driven("bench", "--quick", "--format", "json", fake_worker=worker), env)
    assert code == 0 and json.loads(out)["quick"] is True
    assert "\x1b[?25l" in drawn and "━" in drawn
    # Its first frame is the first event's, never an empty bar; its last, the last config's.
    assert drawn.split("\r")[0].startswith("\x1b[?25lbench: preparing the data set")
    assert "bench: compute_only: done" in drawn and "config 4/4" in drawn
    assert "warm-up first" not in drawn  # no plain lines on a terminal


def test_a_failed_config_is_one_line(fake_worker: tuple[Path, dict[str, str]]) -> None:
    worker, env = fake_worker
    env["FAKE_FAIL_AUTOTUNE"] = "boom"
    shown = piped(driven("bench", "--quick", fake_worker=worker), env)
    assert shown.returncode == 1
    found = texts(shown.stderr, "bench: config 2/")
    assert found[-1] == "bench: config 2/4 autotune: failed: exited with status 3: RuntimeError: boom"


# -- A/B trials -------------------------------------------------------------------------------------


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The job, and an environment whose state folder holds the profile "fast" (HELPFUL=1)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    profiles = tmp_path / "state" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "fast.json").write_text(json.dumps({"env": {"HELPFUL": "1"}}))
    env = dict(os.environ, NODEAGENT_STATE_DIR=str(tmp_path / "state"), JOB_LOG=str(tmp_path / "job.log"))
    return script, env


@pytest.mark.slow
def test_verify_piped_tells_each_pair_and_the_decision(job: tuple[Path, dict[str, str]]) -> None:
    script, env = job
    args = ("verify", "--profile", "fast", "--pairs", "6", "--metric", METRIC)
    command = ("--", sys.executable, str(script))
    shown = piped(driven(*args, *command), env)
    assert shown.returncode == 0, shown.stderr  # B is faster
    found = texts(shown.stderr)
    assert found[0] == f"verify: A/B trials of {sys.executable} {script}: at most 6 pairs"
    pairs = found[1:]
    assert counts(pairs, r"^verify: pair (\d+)/6 ") == [1, 2, 3, 4, 5, 6]
    # The job's arithmetic: 100 as it is, 130 with the profile.
    assert all(" A 100 B 130, B/A 1.300" in p for p in pairs), pairs
    # Six pairs are the one planned look: the decision comes with the last pair, not before.
    assert not any("decided" in p for p in pairs[:-1])
    assert pairs[-1].endswith("; decided: faster, B/A 1.300, 95% interval [1.300, 1.300]")
    quiet = piped(driven(*args, "--quiet", *command), env)
    assert quiet.stderr == "" and quiet.returncode == 0
    same_stdout(shown.stdout, quiet.stdout)


@pytest.mark.slow
def test_verify_on_a_terminal_draws_a_bar(job: tuple[Path, dict[str, str]]) -> None:
    script, env = job
    args = ("verify", "--profile", "fast", "--pairs", "6", "--metric", METRIC, "--format", "json")
    code, out, drawn = on_terminal(driven(*args, "--", sys.executable, str(script)), env)
    assert code == 0 and json.loads(out)["verdict"] == "faster"
    assert "\x1b[?25l" in drawn and "━" in drawn
    assert "6/6 pairs" in drawn


@pytest.mark.slow
def test_tune_verify_piped_tells_the_change_and_its_pairs(job: tuple[Path, dict[str, str]]) -> None:
    """tf-threads plans thread-pool settings for the profile; the job's rate does not depend on
    them, so the change shows no difference and is reverted after its six pairs."""
    script, env = job
    args = ("tune", "--apply", "--verify", "--only", "tf-threads", "--pairs", "6", "--metric", METRIC)
    shown = piped(driven(*args, "--", sys.executable, str(script)), env)
    assert shown.returncode == 1, shown.stderr  # nothing kept
    found = texts(shown.stderr)
    assert found[:2] == [
        f"tune --verify: A/B trials of {sys.executable} {script}: at most 6 pairs per change",
        "tune --verify: change 1/1 tf-threads: applied alone, judged by A/B trials",
    ]
    pairs = found[2:]
    assert counts(pairs, r"^tune --verify: tf-threads: pair (\d+)/6 A 100 B 100, B/A 1\.000") == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert pairs[-1].endswith("; decided: no significant difference, B/A 1.000, 95% interval [1.000, 1.000]")
    quiet = piped(driven(*args, "-q", "--", sys.executable, str(script)), env)
    assert quiet.stderr == "" and quiet.returncode == 1
    same_stdout(shown.stdout, quiet.stdout)


def test_bad_input_is_one_line_before_any_progress(job: tuple[Path, dict[str, str]]) -> None:
    script, env = job
    args = ("tune", "--apply", "--verify", "--only", "no-such-tuner", "--metric", METRIC)
    refused = piped(driven(*args, "--", sys.executable, str(script)), env)
    assert refused.returncode == 64
    assert refused.stderr.count("\n") == 1 and "unknown tuner id 'no-such-tuner'" in refused.stderr
    assert not (Path(env["JOB_LOG"])).exists()  # no trial ran


# -- the facility itself ----------------------------------------------------------------------------

SHOW = (
    "import sys\n"
    "from nodeagent.app.progress import Hosts\n"
    "from nodeagent.render.progress import shown\n"
    "with shown() as emit:\n"
    "    emit(Hosts(0, 2, 0)); emit(Hosts(1, 2, 0, 'a')); emit(Hosts(2, 2, 1, 'b', 'unreachable'))\n"
    "print('rich' in sys.modules)\n"
)


@pytest.mark.parametrize(
    ("env", "rich_loaded"),
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"TTY_COMPATIBLE": "1"}, True)],
    ids=["pipe", "FORCE_COLOR", "TTY_COMPATIBLE"],
)
def test_rich_draws_the_bar_only_where_a_terminal_may_be(env: dict[str, str], rich_loaded: bool) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.run(
        [sys.executable, "-c", SHOW], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == str(rich_loaded)
    assert ("2/2 hosts, 1 error" in proc.stderr) is rich_loaded  # the bar's own text, on stderr
    assert ("fleet: 2/2 hosts done, 1 error; b failed: unreachable (0 s)" in proc.stderr) is not rich_loaded


class Gone(io.StringIO):
    """A stream whose reader went away."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stream_that_fails_ends_the_lines_not_the_flow() -> None:
    from nodeagent.app.progress import Hosts
    from nodeagent.render.progress import Lines

    lines = Lines(Gone())
    lines(Hosts(0, 2, 0))
    lines(Hosts(1, 2, 0, "a"))
    assert lines.broken


def test_control_characters_from_a_host_name_are_shown_not_sent() -> None:
    from nodeagent.app.progress import Hosts
    from nodeagent.render.progress import Lines

    out = io.StringIO()
    Lines(out)(Hosts(1, 1, 1, "evil\x1b]0;owned\x07\nhost", "remote error"))
    assert out.getvalue().startswith("fleet: 1/1 hosts done, 1 error; evil\\x1b]0;owned\\x07 host failed: ")
    assert out.getvalue().count("\n") == 1


def test_a_process_run_again_says_why() -> None:
    from nodeagent.app.progress import BenchSteps, Event
    from nodeagent.bench import run
    from nodeagent.render.progress_text import line

    seen: list[Event] = []
    worker = run.WorkerRun(0, {"images_per_s": [90.0, 110.0, 100.0]}, None, "", 1.0, 0.3)
    worker.discarded = "other processes used 30% of the CPU time while it ran: run again"
    BenchSteps(seen.append)(run.WorkerEnded("naive", 1, 2, 1, 11, worker, 0.1))
    assert [line(e) for e in seen] == [
        "bench: config 1/11 naive (process 1/2): 100.0 images/s (median of 3 repeats); other processes "
        "used 30% of the CPU time while it ran: run again"
    ]
