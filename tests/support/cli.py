"""`nodeagent ARGS` as tests run it (the `run_cli` fixture of tests/conftest.py).

In this process by default: `main()` as the entry point calls it, its stdout and stderr captured,
the exit code from its SystemExit. That is the same code path as the installed command, without an
interpreter's start-up per call. `process=True` runs `python -m nodeagent` as a process of its own,
for what only a process shows: its own start-up, signals, its environment as the shell gives it,
output to a pipe, a hang that a timeout must end.

The result has the field names of subprocess.CompletedProcess (returncode, stdout, stderr), and
unpacks as (code, out, err).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from nodeagent.cli.main import main

EXE = (sys.executable, "-m", "nodeagent")
TIMEOUT_S = 120.0  # a generous ceiling: a command that hangs fails its test instead of the suite

# Variables to set for one run; None removes the variable.
Env = Mapping[str, str | None]


class CliRun(NamedTuple):
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout as a JSON document (asserting that something was written)."""
        assert self.stdout, self.stderr
        return json.loads(self.stdout)


def environment(env: Env | None) -> dict[str, str]:
    """This process's environment with `env` applied: what a process run with it sees."""
    out = dict(os.environ)
    _apply(out, env or {})
    return out


def _apply(target: MutableMapping[str, str], env: Env) -> None:
    for name, value in env.items():
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value


def as_process(
    args: tuple[str, ...],
    env: Env | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout: float = TIMEOUT_S,
) -> CliRun:
    proc = subprocess.run(
        [*EXE, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env=environment(env),
        cwd=cwd,
        check=False,
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


@contextlib.contextmanager
def _environment_applied(env: Env | None) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env or {}}
    _apply(os.environ, env or {})
    try:
        yield
    finally:
        _apply(os.environ, saved)


@contextlib.contextmanager
def _in_folder(cwd: Path | None) -> Iterator[None]:
    before = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


def in_process(
    args: tuple[str, ...], env: Env | None = None, cwd: Path | None = None, stdin: str | None = None
) -> CliRun:
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with (
            _environment_applied(env),
            _in_folder(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                main(list(args))
                code = 0
            except SystemExit as e:
                if isinstance(e.code, str):  # as the interpreter does when a process exits with it
                    print(e.code, file=sys.stderr)
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdin = saved_stdin
    return CliRun(code, out.getvalue(), err.getvalue())


def run_cli(
    *args: str,
    env: Env | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    process: bool = False,
    timeout: float = TIMEOUT_S,
) -> CliRun:
    """nodeagent ARGS: in this process, or with process=True as a process of its own (`timeout`
    applies to a process only)."""
    if process:
        return as_process(args, env, cwd, stdin, timeout)
    return in_process(args, env, cwd, stdin)


class RunCli(Protocol):
    """The type of the run_cli fixture (tests/conftest.py), which is run_cli."""

    def __call__(
        self,
        *args: str,
        env: Env | None = None,
        cwd: Path | None = None,
        stdin: str | None = None,
        process: bool = False,
        timeout: float = TIMEOUT_S,
    ) -> CliRun: ...
