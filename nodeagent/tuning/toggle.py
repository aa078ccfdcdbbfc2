"""Switching applied runtime changes off and on between A/B trials, through their journals.

An A/B trial compares a job on the machine as it was (A) with the machine as tuned (B). The
runtime-scope changes (sysfs and /proc/sys values) are machine-wide: the job cannot be given them
per process, so between trials they are written back to the journal's old values for A and to the
values the apply wrote for B. Both sides then see the same machine apart from the change.

Safety, as for revert (nodeagent.tuning.apply):
- only the journal's own paths are written, and only while each holds one of the two values the
  journal knows (before, or after / what the kernel kept of it): a value someone else changed
  since stops the trials with one line naming the path, before anything else is written;
- every write is read back; one that does not take stops the trials the same way;
- the journal stays "applied" throughout, so a crash in an A phase leaves values that `nodeagent
  revert` still restores (revert accepts a value already back at `before`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.api.tune import _same
from nodeagent.core import interrupt
from nodeagent.core.errors import UsageError
from nodeagent.host import Host
from nodeagent.tuning import journal
from nodeagent.tuning.apply import check_owned, reopen

A, B = "A", "B"


class ToggleError(UsageError):
    """A value the trials cannot switch (changed by someone else, or refused by the kernel)."""


@dataclass(frozen=True)
class _Write:
    host: Host
    write: journal.JournalWrite
    journal_id: str

    def holds_before(self, now: str) -> bool:
        return _same(now, self.write.before)

    def holds_after(self, now: str) -> bool:
        got = self.write.got
        return _same(now, self.write.after) or (got is not None and _same(now, got))


class RuntimeSwitch:
    """The runtime writes of applied journals, switched between side A (old values) and B (new)."""

    def __init__(self, journals: Sequence[journal.Journal]) -> None:
        for j in journals:
            check_owned(j)  # only paths a tuner writes, as revert (a journal file can be edited)
        hosts = {j.id: reopen(j.host) for j in journals}  # where each journal wrote (a --root tree too)
        self.writes = [_Write(hosts[j.id], w, j.id) for j in journals for w in j.writes]
        self.side: str | None = None

    @property
    def paths(self) -> list[str]:
        return [w.write.path for w in self.writes]

    def to(self, side: str) -> None:
        """Put every value in `side`'s state (A: before, B: after), each checked first and read back."""
        if side not in (A, B):
            raise ValueError(f"side {side!r}: A or B")
        if not self.writes or self.side == side:
            self.side = side
            return
        with interrupt.critical():  # a side is switched whole: never half A, half B
            self._switch(side)

    def _switch(self, side: str) -> None:
        ordered = self.writes if side == B else list(reversed(self.writes))
        pending = [w for w in ordered if self._needs_write(w, side)]
        for w in pending:
            target = w.write.after if side == B else w.write.before
            try:
                w.host.write(w.write.path, target)
            except OSError as e:
                raise ToggleError(
                    f"{w.write.path}: writing {target!r} for side {side} failed ({e.strerror or e}) "
                    f"(journal {w.journal_id}); the trials stop"
                ) from None
            now = w.host.read(w.write.path)
            if now is None or not (w.holds_after(now) if side == B else w.holds_before(now)):
                raise ToggleError(
                    f"{w.write.path}: wrote {target!r} for side {side}, read back "
                    f"{(now or '(unreadable)').strip()!r} (journal {w.journal_id}); the trials stop"
                )
        self.side = side

    def _needs_write(self, w: _Write, side: str) -> bool:
        """False when the value already holds `side`'s value; raises when it holds neither."""
        now = w.host.read(w.write.path)
        if now is None:
            raise ToggleError(
                f"{w.write.path}: cannot be read (journal {w.journal_id}); the trials stop before "
                "switching anything for this trial"
            )
        if w.holds_after(now) if side == B else w.holds_before(now):
            return False
        if w.holds_before(now) or w.holds_after(now):
            return True
        raise ToggleError(
            f"{w.write.path}: holds {now.strip()!r}, neither the journal's old value {w.write.before!r} "
            f"nor its new {w.write.after!r}: someone else changed it (journal {w.journal_id}); the "
            "trials stop and it is left as it is"
        )
