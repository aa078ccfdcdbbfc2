"""A program run in a real terminal: a detached tmux session, keys sent, the screen read back with
capture-pane. Used by the TUI's end-to-end test and its start-up benchmark."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence


def tmux_missing() -> str | None:
    return (
        None
        if shutil.which("tmux")
        else "tmux is not installed (Debian package tmux; `make test` installs it as root)"
    )


class TmuxSession:
    """`argv` in a detached `width`x`height` tmux session named `name` (killed on exit)."""

    def __init__(self, name: str, argv: Sequence[str], width: int = 100, height: int = 30) -> None:
        self.name = name
        env = {**os.environ, "TERM": "xterm-256color"}
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), shlex.join(argv)],
            check=True,
            env=env,
        )

    def screen(self) -> str:
        proc = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True, check=False
        )
        return proc.stdout

    def alive(self) -> bool:
        return (
            subprocess.run(
                ["tmux", "has-session", "-t", self.name], capture_output=True, check=False
            ).returncode
            == 0
        )

    def pane_pid(self) -> int:
        """The PID of the process tmux started in the pane."""
        proc = subprocess.run(
            ["tmux", "display-message", "-p", "-t", self.name, "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(proc.stdout.strip())

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, *texts: str, timeout: float = 20.0, poll: float = 0.005) -> str:
        """The screen once it shows every one of `texts`; TimeoutError with the screen otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise TimeoutError(f"{texts} not on screen after {timeout}s:\n{screen}")
            time.sleep(poll)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, check=False)

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
