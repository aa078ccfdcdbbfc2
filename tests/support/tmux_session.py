"""A program run in a real terminal: a detached tmux session, keys sent, the screen read back with
capture-pane. Used by the TUI's end-to-end test and its start-up benchmark."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence


def tmux_missing() -> str | None:
    return (
        None
        if shutil.which("tmux")
        else "tmux is not installed (Debian package tmux; `make test` installs it as root)"
    )


class TmuxSession:
    """`argv` in a detached `width`x`height` tmux session named `name`, on a tmux server of its own
    (its socket in a temporary folder; server and folder removed on exit). One server per session:
    the default server is shared, and one that exits as another test kills its last session refuses
    the next `new-session` meanwhile."""

    def __init__(self, name: str, argv: Sequence[str], width: int = 100, height: int = 30) -> None:
        self.name = name
        self.folder = tempfile.mkdtemp(prefix="nodeagent-tmux-")
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("TMUX", None)  # started from inside tmux: still a server of its own
        size = ["-x", str(width), "-y", str(height)]
        started = subprocess.run(
            [*self._tmux, "new-session", "-d", "-s", name, *size, shlex.join(argv)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if started.returncode != 0:
            self.close()
            said = started.stderr.strip()
            raise RuntimeError(f"tmux new-session {name} exited {started.returncode}: {said}")

    @property
    def _tmux(self) -> list[str]:
        return ["tmux", "-S", os.path.join(self.folder, "socket")]

    def screen(self) -> str:
        proc = subprocess.run(
            [*self._tmux, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True, check=False
        )
        return proc.stdout

    def alive(self) -> bool:
        return (
            subprocess.run(
                [*self._tmux, "has-session", "-t", self.name], capture_output=True, check=False
            ).returncode
            == 0
        )

    def pane_pid(self) -> int:
        """The PID of the process tmux started in the pane."""
        proc = subprocess.run(
            [*self._tmux, "display-message", "-p", "-t", self.name, "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(proc.stdout.strip())

    def keys(self, *keys: str) -> None:
        subprocess.run([*self._tmux, "send-keys", "-t", self.name, *keys], check=True)

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
        subprocess.run([*self._tmux, "kill-server"], capture_output=True, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
