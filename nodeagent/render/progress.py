"""Progress on stderr while a long flow runs: the benchmark's configurations, A/B trial pairs, a
fleet's hosts (the events of nodeagent.app.progress). Standard output stays the result alone.

- On a terminal (stderr is one, or one is forced as rich allows: FORCE_COLOR, TTY_COMPATIBLE=1), a
  bar (nodeagent.render.progress_bar): the stage, n/total and the elapsed time, gone when the
  flow ends.
- Piped (a log, a CI job, a batch script), one plain line per stage or step, each with the seconds
  since the start: `bench: config 3/5 autotune: warm-up done ...`, `verify: pair 5/20 A 12.3 B
  12.9, B/A 1.049 (63 s)`, `fleet: 12/40 hosts done, 1 error (8 s)`. rich is not even imported
  (38 ms of CPU on the development VM, a sixteenth of a fleet run's start-up).
- `--quiet`: nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from nodeagent.app.progress import Emit, Event
from nodeagent.render.escape import plain_line
from nodeagent.render.progress_text import line


@contextmanager
def shown(quiet: bool = False) -> Iterator[Emit]:
    """Where the flow's events go while it runs: nowhere with `quiet`, a bar on a terminal, plain
    lines on stderr otherwise."""
    if quiet:
        yield _nowhere
        return
    if _maybe_terminal():
        from nodeagent.render.progress_bar import Bar, terminal

        console = terminal()
        if console is not None:
            with Bar(console) as bar:
                yield bar
            return
    yield Lines(sys.stderr)


def _nowhere(event: Event) -> None:
    return None


def _maybe_terminal() -> bool:
    """stderr may be a terminal as rich.console.Console decides it: a TTY, or one forced by
    FORCE_COLOR or TTY_COMPATIBLE=1 (https://rich.readthedocs.io/en/latest/console.html#environment-variables).
    rich itself has the last word (progress_bar.terminal)."""
    forced = os.environ.get("FORCE_COLOR") is not None or os.environ.get("TTY_COMPATIBLE") == "1"
    return forced or (sys.stderr is not None and sys.stderr.isatty())


class Lines:
    """One line per stage or step on `stream`, with the seconds since the first. Written whole and
    flushed, under a lock (a fleet over Slurm reports from a reader thread). A stream that fails
    (the reader of a log pipe went away) ends the lines, never the flow they tell of."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.broken = False

    def __call__(self, event: Event) -> None:
        text = line(event)
        if text is None:
            return
        with self.lock:
            if self.broken:
                return
            try:
                self.stream.write(f"{plain_line(text)} ({time.monotonic() - self.start:.0f} s)\n")
                self.stream.flush()
            except (OSError, ValueError):  # EPIPE, or a stream closed under us
                self.broken = True
