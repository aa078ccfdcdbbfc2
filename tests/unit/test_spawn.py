"""Commands run on this machine (nodeagent.host.spawn, under LocalHost.run and the recorder): what
subprocess.run would report, in the shell's and timeout(1)'s exit codes, with no process left."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nodeagent.host import LocalHost
from nodeagent.host.spawn import Spawned, start


@pytest.fixture
def host() -> LocalHost:
    return LocalHost()


def test_output_error_and_exit_code_are_captured(host: LocalHost) -> None:
    r = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exited, r.ok) == ("out\n", "err\n", 3, False)


def test_a_missing_tool_exits_127_without_starting(host: LocalHost) -> None:
    r = host.run(["nodeagent-no-such-tool", "-q"])
    assert (r.exited, r.stderr) == (127, "nodeagent-no-such-tool: command not found")
    assert host.run(["/nonexistent/tool"]).exited == 127


def test_a_file_that_cannot_be_executed_exits_126(host: LocalHost, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    r = host.run([str(plain)])
    assert r.exited == 126 and r.stderr.startswith(f"{plain}: ")


def test_a_command_killed_by_a_signal_exits_minus_its_number(host: LocalHost) -> None:
    assert host.run(["sh", "-c", "kill -9 $$"]).exited == -9


def test_outputs_larger_than_a_pipe_are_read_whole(host: LocalHost) -> None:
    r = host.run(["sh", "-c", "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2"])
    assert (len(r.stdout), len(r.stderr), r.exited) == (300_000, 200_000, 0)


def test_the_locale_is_fixed_and_stdin_is_empty(host: LocalHost) -> None:
    r = host.run(["sh", "-c", 'echo "$LC_ALL $LANG"; cat'])
    assert (r.stdout, r.exited) == ("C C\n", 0)


@pytest.mark.parametrize(
    "script",
    ["sleep 5", "exec >&- 2>&-; sleep 5"],  # still writing; output closed but running on
    ids=["running", "output-closed"],
)
def test_past_its_timeout_a_command_is_killed_and_exits_124(host: LocalHost, script: str) -> None:
    began = time.monotonic()
    r = host.run(["sh", "-c", script], timeout=0.3)
    assert time.monotonic() - began < 3
    assert (r.exited, r.stderr) == (124, "sh: timed out after 0.3s")


def test_started_commands_run_at_the_same_time(host: LocalHost) -> None:
    began = time.monotonic()
    running = [host.start(["sleep", "0.5"]) for _ in range(4)]
    assert all(r.result().exited == 0 for r in running)
    assert time.monotonic() - began < 1.5  # not 4 x 0.5 s


def test_a_finished_command_leaves_no_process_or_descriptor() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    started = start(["sh", "-c", "echo hi"], 5, dict(os.environ))
    assert isinstance(started, Spawned)
    assert started.result().stdout == "hi\n"
    assert started.result().stdout == "hi\n"  # asked twice, read once
    with pytest.raises(ChildProcessError):
        os.waitpid(started.pid, os.WNOHANG)  # reaped: no zombie is left
    assert set(os.listdir("/proc/self/fd")) == fds


def test_a_command_gets_sigpipe_back_as_subprocess_gives_it(host: LocalHost) -> None:
    # Python ignores SIGPIPE; a pipeline's writer must die of it again when its reader is gone.
    r = host.run(["sh", "-c", "yes | head -c 4 >/dev/null; echo $?"])
    assert r.stdout == "0\n" and r.exited == 0
    ignored = int(host.run(["sh", "-c", "sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status"]).stdout, 16)
    assert not ignored & (1 << (13 - 1)) and not ignored & (1 << (25 - 1))  # SIGPIPE, SIGXFSZ (signal(7))
