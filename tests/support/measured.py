"""A command run to its end with its own peak memory, for the tests and perf scripts that hold
nodeagent to a memory bound (a flood from Prometheus, from Slurm, hostile inputs).

The peak is the child's own maximum resident set size from wait4(2), in MB (Linux reports KiB):
not a grandchild's, and not this process's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Measured:
    code: int
    stdout: str
    stderr: str
    seconds: float
    peak_mb: float


def run_measured(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    stop: signal.Signals = signal.SIGTERM,
    group: bool = False,
    cwd: Path | None = None,
) -> Measured:
    """`argv` with stdin /dev/null, its output read whole; past `timeout_s` it gets `stop` (with
    `group`: its whole session, started anew for it). Waited for with wait4."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=group,
    )
    out: dict[int, bytes] = {}

    def drain(key: int, stream: IO[bytes]) -> None:
        out[key] = stream.read()

    assert proc.stdout is not None and proc.stderr is not None
    readers = [threading.Thread(target=drain, args=(i, s)) for i, s in enumerate((proc.stdout, proc.stderr))]
    for r in readers:
        r.start()

    def halt() -> None:
        if group:
            os.killpg(proc.pid, stop)
        else:
            proc.send_signal(stop)

    timer = threading.Timer(timeout_s, halt) if timeout_s is not None else None
    start = time.monotonic()
    if timer is not None:
        timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if timer is not None:
            timer.cancel()
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    text = {k: v.decode(errors="replace") for k, v in out.items()}
    return Measured(proc.returncode, text[0], text[1], seconds, usage.ru_maxrss / 1024)
