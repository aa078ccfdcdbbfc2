"""The fleet's progress bar on stderr, shown only on a terminal: a script, a batch job or a pipe
never imports rich for it (38 ms of CPU on the development VM, a sixteenth of a fleet run's
start-up)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodeagent.cluster.runner import HostOutcome


def _maybe_terminal() -> bool:
    """stderr may be a terminal as rich.console.Console decides it: a TTY, or one forced by
    FORCE_COLOR or TTY_COMPATIBLE=1 (https://rich.readthedocs.io/en/latest/console.html#environment-variables)."""
    forced = os.environ.get("FORCE_COLOR") is not None or os.environ.get("TTY_COMPATIBLE") == "1"
    return forced or (sys.stderr is not None and sys.stderr.isatty())


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[HostOutcome], None]]:
    """A progress bar counting hosts that answered and hosts that failed as they finish."""
    if not _maybe_terminal():
        yield lambda outcome: None
        return
    from nodeagent.render.fleet import progress_bar

    with progress_bar(total, label) as done:
        yield done
