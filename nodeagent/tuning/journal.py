"""The journal: every old value, on disk before the first write, so `nodeagent revert` restores a
node after a crash at any point of an apply.

One JSON file per apply under <state>/journal/. Its `state` moves applying -> applied (or
rolled-back when a write failed and was undone) -> reverted. Reverting writes the old values back
in reverse order; doing it twice writes the same values twice, so it is idempotent, and a revert
that was itself interrupted is simply run again.

Journals are ordered by `seq`, a counter kept in <state>/sequence and taken under the state
folder's lock (nodeagent/tuning/state.py), never by the clock: two applies within one second (or with the
clock set back between them) are still undone newest first by `revert --all`. Journals written
before `seq` existed have 0 and sort first, by their time.
"""

from __future__ import annotations

import errno
import json
import secrets
import time
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter
from pydantic.dataclasses import dataclass

from nodeagent.core import jsondoc, limits
from nodeagent.core.errors import UsageError
from nodeagent.tuning.state import StateDiskError, lock, state_dir, write_atomic

APPLYING, APPLIED, ROLLED_BACK, REVERTED = "applying", "applied", "rolled-back", "reverted"
STATES = (APPLYING, APPLIED, ROLLED_BACK, REVERTED)

# The journal's model: pydantic dataclasses, so code builds them as before (positionally) and the
# file is checked against the same types. Their fields are strict one by one (StrictStr: a number
# is not text) rather than through the config: a strict dataclass accepts only instances of
# itself, never the JSON object it is read from. Unknown fields are refused: a journal is what
# revert restores, and a field this nodeagent does not know is something it would not restore.
_CONFIG = ConfigDict(extra="forbid")


def _known_state(state: str) -> str:
    if state not in STATES:
        raise ValueError(f"{json.dumps(state)} is not a journal state; one of {', '.join(STATES)}")
    return state


State = Annotated[StrictStr, AfterValidator(_known_state)]


@dataclass(config=_CONFIG)
class JournalWrite:
    path: StrictStr
    before: StrictStr
    after: StrictStr
    tuner: StrictStr
    # What the file held right after the write when that is not `after` (the kernel gave fewer huge
    # pages than asked): revert takes that value as the apply's own too, not as someone else's.
    got: StrictStr | None = None


@dataclass(config=_CONFIG)
class JournalFile:
    """A whole file nodeagent replaced: its previous content, None when it was absent (revert then
    removes it). In `files`, a file of this machine's state folder (a profile); in `host_files`, a
    file of the tuned host, written and restored through the Host (--persist: /etc/sysctl.d, TuneD)."""

    path: StrictStr
    before: StrictStr | None
    # What nodeagent wrote, so that revert leaves alone a file someone changed since; None in older
    # journals (then it is not checked).
    after: StrictStr | None = None


@dataclass(config=_CONFIG)
class Journal:
    id: StrictStr
    # How to reopen the host on revert: {"kind": "local"} or {"kind": "snapshot", "source": ...}.
    host: dict[StrictStr, StrictStr]
    created: StrictStr
    state: State
    writes: list[JournalWrite] = field(default_factory=list)
    files: list[JournalFile] = field(default_factory=list)
    profile: StrictStr | None = None
    host_files: list[JournalFile] = field(default_factory=list)
    # Folders of the host an apply created for its host_files; revert removes them when empty.
    host_dirs: list[StrictStr] = field(default_factory=list)
    # Nanoseconds since the epoch: orders journals of the same second (ids and `created` have whole
    # seconds), so `revert --all` undoes two quick applies newest first. 0 in older journals.
    created_ns: StrictInt = 0
    # The order of applies on this machine (1, 2, ...: <state>/sequence, taken under the state
    # lock): what `revert --all` goes by, newest first. 0 in journals older than it.
    seq: StrictInt = 0
    # Where the journal is kept: not part of the document (`load` refuses a "path" field in it).
    path: Path = Field(default=Path(), repr=False, exclude=True)

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.document(), indent=2) + "\n")

    def document(self) -> dict[str, Any]:
        """What the journal file holds."""
        dumped: dict[str, Any] = _DOCUMENT.dump_python(self, mode="json")
        return dumped


_DOCUMENT = TypeAdapter(Journal)
# The defaults of `writes` and `files` serve code that builds a journal; every journal file has
# held both lists, and one without them is damaged (reverting it would restore nothing).
_REQUIRED_IN_FILE = ("writes", "files")
_WORDING = jsondoc.Wording("nodeagent journal", "move it aside")


def journal_dir(base: Path | None = None) -> Path:
    return (base or state_dir()) / "journal"


def create(
    host: dict[str, str],
    writes: list[JournalWrite],
    files: list[JournalFile],
    profile: str | None,
    base: Path | None = None,
    host_files: list[JournalFile] | None = None,
    host_dirs: list[str] | None = None,
) -> Journal:
    """Write a new journal (state "applying") to disk, durably, and return it. Takes the state lock
    (re-entrant: apply holds it already) for its sequence number."""
    folder = base or state_dir()
    with lock(folder):
        return _create(host, writes, files, profile, folder, host_files, host_dirs)


SEQUENCE = "sequence"


def _next_seq(base: Path) -> int:
    """The next sequence number: one past the counter file and past every journal's (so a lost or
    damaged counter still orders after what is there). Call under the lock."""
    counter = base / SEQUENCE
    try:
        last = int(counter.read_text().strip() or 0)
    except (OSError, ValueError):
        last = 0
    folder = journal_dir(base)
    for p in folder.glob("*.json") if folder.is_dir() else []:
        try:
            last = max(last, int(limits.loads_json(p.read_text()).get("seq", 0)))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    write_atomic(counter, f"{last + 1}\n")
    return last + 1


def _create(
    host: dict[str, str],
    writes: list[JournalWrite],
    files: list[JournalFile],
    profile: str | None,
    base: Path,
    host_files: list[JournalFile] | None,
    host_dirs: list[str] | None,
) -> Journal:
    now_ns = time.time_ns()
    now = time.gmtime(now_ns // 1_000_000_000)
    jid = time.strftime("%Y%m%dT%H%M%SZ", now) + "-" + secrets.token_hex(3)
    j = Journal(
        id=jid,
        host=host,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
        created_ns=now_ns,
        state=APPLYING,
        writes=writes,
        files=files,
        profile=profile,
        host_files=list(host_files or []),
        host_dirs=list(host_dirs or []),
        path=journal_dir(base) / f"{jid}.json",
    )
    try:
        j.seq = _next_seq(base)
        j.save()
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            name = errno.errorcode.get(e.errno or 0, "?")
            raise StateDiskError(
                f"state disk {'error' if e.errno == errno.EIO else 'full'} ({name}) at {j.path.parent}: "
                "cannot write the journal; nothing was changed; free space and apply again"
            ) from None
        raise UsageError(
            f"{j.path.parent}: cannot write the journal ({e.strerror or e}); nothing was changed"
        ) from None
    return j


def load(path: Path) -> Journal:
    """The journal at `path`, checked against Journal; every problem is one UsageError line naming
    the file, the line and the field. Not capped in size: a journal holds the old contents of the
    files an apply replaced, and refusing a large one would leave them unrestorable."""
    try:
        doc = jsondoc.read_json(path, _WORDING, capped=False)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such journal (removed meanwhile?); list them with `nodeagent revert --list`"
        ) from None
    for key in _REQUIRED_IN_FILE:
        if key not in doc.data:
            doc.fail((key,), "is required")
    if "path" in doc.data:
        doc.fail(("path",), "unknown field (a journal's place is its file's)")
    journal = doc.validate(_DOCUMENT)
    journal.path = path
    return journal


def all_journals(base: Path | None = None) -> list[Journal]:
    """Every journal, oldest first: by sequence number (journals without one first, by time)."""
    folder = journal_dir(base)
    journals = [load(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return sorted(journals, key=lambda j: (j.seq, j.created, j.created_ns, j.id))


def find(jid: str, base: Path | None = None) -> Journal:
    matches = [j for j in all_journals(base) if j.id == jid or j.id.startswith(jid)]
    if len(matches) != 1:
        known = ", ".join(j.id for j in all_journals(base)[-5:]) or "none"
        what = "no journal" if not matches else "more than one journal"
        raise UsageError(f"{what} matches {jid!r} in {journal_dir(base)} (latest: {known})")
    return matches[0]
