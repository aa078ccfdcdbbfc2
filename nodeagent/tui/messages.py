"""Messages that workers post to the app (thread-safe: Textual's post_message may be called from a
worker thread). Dataclasses: Textual's Message initialises through __post_init__."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from nodeagent.engine import CheckResult


@dataclass
class CheckFinished(Message):
    """A check finished, with all its findings: screens redraw once per check, not per finding."""

    result: CheckResult


@dataclass
class ChecksStarted(Message):
    """A run of `check_ids` began (their old findings are replaced as they finish)."""

    check_ids: list[str]


@dataclass
class ChecksDone(Message):
    """The run that began with ChecksStarted is over."""

    check_ids: list[str]


# What the app tells the screen on show (NodeAgentScreen.results_changed).
ResultsChanged = ChecksStarted | CheckFinished | ChecksDone


@dataclass
class FactsLoaded(Message):
    facts: dict[str, Any]


@dataclass
class Failed(Message):
    """A worker's operation failed: shown as an error notification, the app goes on."""

    what: str
    error: str
