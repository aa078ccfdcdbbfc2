"""Messages that workers post to the app (thread-safe: Textual's post_message may be called from a
worker thread). Dataclasses: Textual's Message initialises through __post_init__."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from nodeagent.core.finding import Finding
    from nodeagent.engine import CheckResult


@dataclass
class FindingArrived(Message):
    """One finding of a check that just finished (a check's findings arrive one message each)."""

    finding: Finding


@dataclass
class CheckFinished(Message):
    """A check finished: all its findings have been posted."""

    result: CheckResult


@dataclass
class ChecksStarted(Message):
    """A run of `check_ids` began (their old findings are replaced as they finish)."""

    check_ids: list[str]


@dataclass
class ChecksDone(Message):
    """The run that began with ChecksStarted is over."""

    check_ids: list[str]


@dataclass
class FactsLoaded(Message):
    facts: dict[str, Any]


@dataclass
class Failed(Message):
    """A worker's operation failed: shown as an error notification, the app goes on."""

    what: str
    error: str
