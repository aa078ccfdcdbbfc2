"""A launch of `nodeagent exec` resolved once and started many times.

verify's trials run one command through one profile dozens of times. `nodeagent exec` spends most
of its start-up resolving the launch (the command line parser, the profile's schema: about 0.45 s
on a 2-CPU VM), which for a short job is most of a trial and adds its noise to every pair. So the
trials resolve each side's launch once, in nodeagent (`write`), and start every trial through this
module (`argv`), which does only what `nodeagent exec` does after resolving: print the launch's
notes, bind this process, raise its memlock limit, hold the latency request (nodeagent.tuning.
binding), and exec the command with the caller's environment changed as the profile changes it.
Both sides start the same way, so their start-up stays equal, and small.

The environment is kept as a change (what the launch sets and unsets against the environment it
was resolved with), applied to the environment each trial starts with: a trial's own variables
(its measuring folder) pass through as they would through `nodeagent exec`.

Run as `python -m nodeagent.tuning.prepared FILE`; it imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeagent.core.errors import UsageError
from nodeagent.tuning import binding

if TYPE_CHECKING:
    from nodeagent.tuning.launcher import Launch, Machine

PROG = "nodeagent exec"
MAX_BYTES = 1 << 20  # a launch is a few kilobytes; the file is nodeagent's own, in a private folder


def write(path: Path, launch: Launch, machine: Machine) -> None:
    """Keep `launch` in `path` for `argv`, its environment as a change to the one it was resolved
    against."""
    # Here, not at the top: main() starts every trial of the user's job, and needs none of it.
    from nodeagent.tuning.state import write_atomic  # noqa: PLC0415

    doc = {
        "argv": launch.argv,
        "env": launch.env_change,
        "entry": asdict(launch.entry(machine)),
        "notes": launch.notes,
    }
    write_atomic(path, json.dumps(doc))


def argv(path: Path) -> list[str]:
    """The command line that starts the launch kept in `path` (as `run.exec_argv` starts
    `nodeagent exec`: this interpreter, a module, no PATH)."""
    return [sys.executable, "-m", __name__, str(path)]


def job_env(environ: Mapping[str, str], change: Mapping[str, Any]) -> dict[str, str]:
    """`environ` with the launch's change: its variables set, then those it removes unset."""
    env = {**environ, **change["set"]}
    for name in change["unset"]:
        env.pop(name, None)
    return env


def _warn(text: str) -> None:
    print(f"{PROG}: warning: {text}", file=sys.stderr)


def main(args: Sequence[str]) -> int:
    """Enter the kept launch and exec its command; returns only when it cannot (the exit code)."""
    with open(args[0], "rb") as f:
        doc = json.loads(f.read(MAX_BYTES))
    for note in doc["notes"]:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    command: list[str] = doc["argv"]
    try:
        env = binding.enter(binding.Entry(**doc["entry"]), job_env(os.environ, doc["env"]), _warn)
    except UsageError as e:
        print(f"nodeagent: error: {e}", file=sys.stderr)
        return e.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:  # as `nodeagent exec`: 127 not found, 126 cannot be executed
        print(f"nodeagent: error: {command[0]}: cannot execute ({e.strerror})", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
