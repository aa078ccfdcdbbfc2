"""Apply plans with a journal, verify them, and revert journals. One implementation for every tuner.

Both hold the state folder's lock (nodeagent/tuning/state.py: one apply or revert at a time; a second
waits, then exit 75), and under it an apply reads each value again, so its journal holds what is
there now, not what its plan saw before another apply ran.

Exit codes of the failures here: 64 (UsageError) bad input or a refused journal; 74 (EX_IOERR,
state.StateDiskError) the state disk is full or failing: either before the first write (less than
1 MiB free, or the journal cannot be written: nothing was changed), or when the profile or the
final journal save fails (ENOSPC, EIO): then every live value, persistent file and the profile are
put back from the journal, which is marked rolled-back (or stays "applying" when even that cannot
be written, so that `nodeagent revert` finishes it), and the one line says "state disk full
(ENOSPC) at PATH: every value restored; free space and apply again". Never exit 70.

Revert:
- writes only what a registered tuner owns (`Tuner.writes` patterns), the files --persist writes
  (`persist.owned_files`) and the profiles of the journal's own state folder; a journal naming
  anything else is refused whole, in one line naming the journal and the path, before any write;
- restores a value only while it still holds what the journal wrote (`after`); one changed since
  (by someone else) is a conflict: left as it is, reported as a FAIL finding with the path, the
  journal's after and the value now (exit 2), and the journal is not marked reverted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nodeagent import tuners
from nodeagent.api.tune import Change, Plan, Scope, _restorable, _same, verify_writes
from nodeagent.core import interrupt
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.host import Host, LocalHost, SnapshotHost
from nodeagent.tuning import journal, persist, profile
from nodeagent.tuning.persist import PersistPlan
from nodeagent.tuning.state import StateDiskError, check_free, lock, state_dir, write_atomic

CONFLICT = "revert-conflict"  # the check id of a revert's conflict finding

# Fault injection for the crash tests: SIGKILL this process right after the Nth file write.
FAULT_KILL_ENV = "NODEAGENT_FAULT_KILL_AFTER_WRITES"


@dataclass
class ApplyResult:
    journal: journal.Journal | None
    profile_path: Path | None
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Change] = field(default_factory=list)  # boot advice and no-ops: nothing to write
    persist: PersistPlan | None = None  # --persist: the files written, what was not persisted
    settings: int = 0  # process and code settings saved into the profile


def host_ref(host: Host) -> dict[str, str]:
    """How a journal reopens the host it changed."""
    if isinstance(host, SnapshotHost):
        return {"kind": "snapshot", "source": str(host.source.resolve()), "name": host.name}
    if isinstance(host, LocalHost) and host.root != "/":
        return {"kind": "local-root", "source": str(Path(host.root).resolve()), "name": host.name}
    return {"kind": "local", "name": host.name}


def reopen(ref: dict[str, str]) -> Host:
    if ref.get("kind") == "snapshot":
        return SnapshotHost(ref["source"], writable=True)
    if ref.get("kind") == "local-root":
        return LocalHost(root=ref["source"], name=ref.get("name"))
    return LocalHost()


def _needs_root(host: Host) -> bool:
    return isinstance(host, LocalHost) and host.root == "/" and os.geteuid() != 0


Verifier = Callable[[Host, list[Change]], list[Finding]]


def _verify(host: Host, runtime: list[Change], verifiers: Mapping[str, Verifier] | None) -> list[Finding]:
    return [f for c in runtime for f in (verifiers or {}).get(c.tuner, verify_writes)(host, [c])]


@dataclass
class _Work:
    """What one apply is to write, decided from its plans before the state folder's lock is taken."""

    runtime: list[Change]  # the runtime changes that are not no-ops: written, then verified
    writes: list[journal.JournalWrite]
    settings: list[tuple[str, Any]]  # (profile key, value) of the process and code changes
    skipped: list[Change]
    persisting: persist.PersistPlan | None
    host_files: list[journal.JournalFile]
    host_dirs: list[str]


def _work(plans: list[Plan], persisting: persist.PersistPlan | None) -> _Work:
    changes = [c for p in plans for c in p.changes]
    runtime = [c for c in changes if c.scope is Scope.RUNTIME and not c.is_noop]
    return _Work(
        runtime=runtime,
        writes=[
            journal.JournalWrite(w.path, w.before, w.after, c.tuner)
            for c in runtime
            for w in c.writes
            if w.before is not None and not _same(w.before, w.after)
        ],
        settings=[
            (c.profile_key, c.value)
            for c in changes
            if c.scope in (Scope.PROCESS, Scope.CODE) and c.profile_key
        ],
        skipped=[c for c in changes if c.scope is Scope.BOOT or (c.scope is Scope.RUNTIME and c.is_noop)],
        persisting=persisting,
        host_files=(
            [journal.JournalFile(f.path, f.before, f.after) for f in persisting.files] if persisting else []
        ),
        host_dirs=list(persisting.dirs) if persisting else [],
    )


def _refuse_before_any_write(host: Host, work: _Work) -> None:
    if work.runtime and _needs_root(host):
        tuners = ", ".join(sorted({c.tuner for c in work.runtime}))
        raise UsageError(
            f"applying {tuners} writes /sys and /proc/sys and needs root; nothing was changed "
            "(run as root, or leave them out with --only)"
        )
    if work.persisting is not None and work.persisting.refused:
        raise UsageError(
            f"{work.persisting.refused[0]}: cannot be read, so its content cannot be saved in the journal "
            "for revert; nothing was changed (fix its permissions, or leave out --persist)"
        )


def apply(
    host: Host,
    plans: list[Plan],
    profile_name: str,
    state: Path | None = None,
    verifiers: Mapping[str, Verifier] | None = None,
    persisting: persist.PersistPlan | None = None,
) -> ApplyResult:
    """Journal, write runtime changes, write the persistent files of --persist (`persisting`), save
    the profile, verify (with a tuner's own verifier where it has one). Nothing is half-applied: a
    write that fails undoes the writes before it and raises UsageError."""
    work = _work(plans, persisting)
    _refuse_before_any_write(host, work)
    if not work.writes and not work.settings and not work.host_files:
        return ApplyResult(None, None, _verify(host, work.runtime, verifiers), work.skipped, persisting)
    base = state or state_dir()
    # From the journal's creation to the profile's save, a signal waits: a SIGTERM between two
    # writes would leave a journal describing values that are only half written.
    with lock(base), interrupt.critical():
        return _apply_locked(host, work, profile_name, base, verifiers)


def _fresh(host: Host, writes: list[journal.JournalWrite]) -> list[journal.JournalWrite]:
    """The writes with `before` read again (under the lock): what another apply left since the plan
    read it is what this journal must restore. A value that already holds `after` is not written."""
    out = []
    for w in writes:
        now = host.read(w.path)
        before = _restorable(now)
        if now is None or before is None:
            out.append(w)
        elif not _same(now, w.after):
            out.append(w if before == w.before else replace(w, before=before))
    return out


def _mark(j: journal.Journal, state: str) -> bool:
    """Save the journal in `state`; False (and "applying" kept) when even that cannot be written."""
    j.state = state
    try:
        j.save()
    except OSError:
        j.state = journal.APPLYING
        return False
    return True


def _left(marked: bool, j: journal.Journal) -> str:
    return "" if marked else f" (journal {j.id} is left applying: `nodeagent revert {j.id}` finishes it)"


@dataclass(frozen=True)
class _ProfileUpdate:
    path: Path
    doc: dict[str, Any]  # the profile with this apply's settings
    file: journal.JournalFile  # its old and new text, for the journal


def _profile_update(
    host: Host, settings: Sequence[tuple[str, Any]], profile_name: str, base: Path
) -> _ProfileUpdate | None:
    """The profile with `settings` merged in; read, merged and saved under the lock, so that a
    concurrent apply's settings are never lost."""
    if not settings:
        return None
    path = profile.profile_path(profile_name, base)
    old_text = path.read_text() if path.exists() else None
    try:
        old_doc = json.loads(old_text) if old_text else {}
    except ValueError:
        old_doc = {}
    doc = profile.merged(
        old_doc if isinstance(old_doc, dict) else {},
        [(k, v) for k, v in settings if k],
        profile_name,
        host.name,
    )
    return _ProfileUpdate(path, doc, journal.JournalFile(str(path), old_text, profile.text(doc)))


def _write_runtime(host: Host, j: journal.Journal, writes: list[journal.JournalWrite]) -> None:
    """Each write in turn; one that fails undoes those before it."""
    kill_after = int(os.environ.get(FAULT_KILL_ENV) or 0)
    for done, w in enumerate(writes):
        try:
            host.write(w.path, w.after)
        except OSError as e:
            _undo(host, writes[:done])
            marked = _mark(j, journal.ROLLED_BACK)
            raise UsageError(
                f"{w.path}: writing {w.after!r} failed ({e.strerror or e}); the {done} earlier write(s) "
                f"were undone (journal {j.id}){_left(marked, j)}"
            ) from None
        if kill_after == done + 1:
            os.kill(os.getpid(), signal.SIGKILL)


def _write_persistent(
    host: Host, j: journal.Journal, work: _Work, writes: list[journal.JournalWrite]
) -> None:
    """Each file of --persist in turn; one that fails undoes the runtime writes and the files before it."""
    for done, f in enumerate(work.persisting.files if work.persisting else []):
        try:
            host.put_file(f.path, f.after)
        except OSError as e:
            _undo(host, writes)
            _restore_files(host, work.host_files[:done], work.host_dirs)
            marked = _mark(j, journal.ROLLED_BACK)
            raise UsageError(
                f"{f.path}: writing the {f.what} file failed ({e.strerror or e}); the runtime writes and "
                f"the {done} earlier file(s) were undone (journal {j.id}){_left(marked, j)}"
            ) from None


def _note_kept(host: Host, writes: list[journal.JournalWrite]) -> None:
    """What the kernel kept, where it is not what was written (see JournalWrite.got)."""
    for w in writes:
        now = host.read(w.path)
        if now is not None and not _same(now, w.after):
            w.got = _restorable(now)


def _save_or_roll_back(
    host: Host,
    j: journal.Journal,
    work: _Work,
    writes: list[journal.JournalWrite],
    update: _ProfileUpdate | None,
) -> None:
    """Save the profile, then the journal as applied; when the state disk fails, everything after
    the journal is undone: the live values, the persistent files, the profile."""
    where: Path = j.path
    saved_profile = False
    try:
        if update is not None:
            where = update.path
            profile.save(update.path, update.doc)
            saved_profile = True
        where = j.path
        j.state = journal.APPLIED
        j.save()
    except OSError as e:
        j.state = journal.APPLYING
        failed = _undo(host, writes) + _restore_files(host, work.host_files, work.host_dirs)
        if saved_profile and update is not None:
            failed += _restore_state_files([update.file])
        marked = not failed and _mark(j, journal.ROLLED_BACK)
        raise StateDiskError(_disk_message(e, where, failed, j, marked)) from None


def _apply_locked(
    host: Host, work: _Work, profile_name: str, base: Path, verifiers: Mapping[str, Verifier] | None
) -> ApplyResult:
    writes = _fresh(host, work.writes)
    update = _profile_update(host, work.settings, profile_name, base)
    files = [update.file] if update else []
    if not writes and not files and not work.host_files:
        return ApplyResult(None, None, _verify(host, work.runtime, verifiers), work.skipped, work.persisting)
    check_free(base)

    j = journal.create(
        host_ref(host),
        writes,
        files,
        # Runtime values belong to the profile they were applied under as much as its settings do:
        # `nodeagent verify --profile P` switches them between its sides.
        profile_name,
        base,
        work.host_files,
        work.host_dirs,
    )
    _write_runtime(host, j, writes)
    _write_persistent(host, j, work, writes)
    _note_kept(host, writes)
    _save_or_roll_back(host, j, work, writes, update)
    findings = _verify(host, work.runtime, verifiers) + _verify_files(host, work.persisting)
    return ApplyResult(
        j, update.path if update else None, findings, work.skipped, work.persisting, len(work.settings)
    )


def _disk_message(e: OSError, where: Path, failed: list[str], j: journal.Journal, marked: bool) -> str:
    name = errno.errorcode.get(e.errno or 0, type(e).__name__)
    full = e.errno in (errno.ENOSPC, errno.EDQUOT)
    head = f"state disk {'full' if full else 'error'} ({name}) at {where}"
    if not failed:
        return f"{head}: every value restored; {'free space' if full else 'fix the disk'} and apply again"
    return (
        f"{head}: {len(failed)} value(s) could not be restored ({failed[0]}); journal {j.id} is left "
        f"applying: {'free space' if full else 'fix the disk'}, then run `nodeagent revert {j.id}`"
    )


def _restore_state_files(files: list[journal.JournalFile]) -> list[str]:
    """Put files of the state folder (profiles) back as they were; the paths that failed, with why."""
    failed = []
    for f in reversed(files):
        try:
            if f.before is None:
                Path(f.path).unlink(missing_ok=True)
            else:
                write_atomic(Path(f.path), f.before)
        except OSError as e:
            failed.append(f"{f.path}: {e.strerror or e}")
    return failed


def _verify_files(host: Host, persisting: persist.PersistPlan | None) -> list[Finding]:
    """Read back each persistent file: one Finding per file."""
    findings = []
    for f in persisting.files if persisting else []:
        now = host.read(f.path)
        if now == f.after:
            findings.append(Finding("tune", Status.OK, f"persisted: {f.path} ({f.what})", subject=f.path))
        else:
            findings.append(
                Finding(
                    "tune",
                    Status.FAIL,
                    f"persisted: {f.path} does not hold what was written",
                    {f.path: "(unreadable or absent)" if now is None else f"{len(now)} characters"},
                    expected=f"the {f.what} content nodeagent wrote",
                    remediation="Something rewrote it; look at it, or revert with `nodeagent revert`.",
                    subject=f.path,
                )
            )
    return findings


def _restore_files(host: Host, files: list[journal.JournalFile], dirs: list[str]) -> list[str]:
    """Put host files back as they were (newest first): the old content, or no file when there was
    none; then remove the folders created for them, when empty. The paths that failed, with why."""
    failed = []
    for f in reversed(files):
        try:
            if f.before is None:
                with contextlib.suppress(FileNotFoundError):  # gone already: what revert wants
                    host.remove_file(f.path)
            else:
                host.put_file(f.path, f.before)
        except OSError as e:
            failed.append(f"{f.path}: {e.strerror or e}")
    for d in reversed(dirs):
        # Absent, or holding files someone else put there since: then it is left alone.
        with contextlib.suppress(OSError):
            host.remove_dir(d)
    return failed


def _undo(host: Host, writes: list[journal.JournalWrite]) -> list[str]:
    """Write the old values back, newest first; the paths that could not be restored."""
    failed = []
    for w in reversed(writes):
        try:
            host.write(w.path, w.before)
        except OSError as e:
            failed.append(f"{w.path}: {e.strerror or e}")
    return failed


def _refuse(j: journal.Journal, path: str, why: str) -> UsageError:
    return UsageError(
        f"{j.path}: names {path}, {why}; refused, nothing was written (an edited or foreign journal: "
        "look at it, move it aside)"
    )


def check_owned(j: journal.Journal) -> None:
    """Refuse (UsageError) a journal that names a path nodeagent never writes: a runtime write
    outside its tuner's `writes` patterns, a host file --persist does not write (or a folder not on
    the way to one), a profile outside the journal's own state folder."""
    registry = {t.id: t for t in tuners.all_tuners()}
    for w in j.writes:
        t = registry.get(w.tuner)
        if t is None:
            raise _refuse(j, w.path, f"written by tuner {w.tuner!r}, which is not installed")
        if not t.owns(w.path):
            raise _refuse(j, w.path, f"which tuner {w.tuner} does not write")
    if j.host_files or j.host_dirs:
        host = reopen(j.host)
        allowed = persist.owned_files(host)
        for f in j.host_files:
            if f.path not in allowed:
                raise _refuse(j, f.path, "which --persist does not write")
        for d in j.host_dirs:
            if posixpath.normpath(d) != d or not any(a.startswith(d.rstrip("/") + "/") for a in allowed):
                raise _refuse(j, d, "a folder --persist does not create")
    profiles = os.path.abspath(j.path.parent.parent / "profiles")
    for f in j.files:
        p = Path(f.path)
        in_folder = os.path.abspath(p.parent) == profiles and os.path.normpath(f.path) == f.path
        if not (in_folder and p.suffix == ".json" and profile.valid_name(p.stem)):
            raise _refuse(j, f.path, f"which is not a profile of {j.path.parent.parent}")


def _read_state_file(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "\0unreadable"


def _file_now(now: str | None) -> str:
    return "absent" if now is None else f"{len(now)} characters"


def revert(j: journal.Journal) -> list[Finding]:
    """Restore every old value of a journal that still holds what the apply wrote, and report what
    is back; a value changed since is a conflict, left alone. Safe to run again."""
    with lock(j.path.parent.parent), interrupt.critical():  # every value back, or none touched
        check_owned(j)
        return _revert_locked(j)


def _writes_to_restore(
    host: Host, j: journal.Journal, conflicts: dict[str, str]
) -> list[journal.JournalWrite]:
    """The runtime writes that still hold what the apply wrote; the others changed since are conflicts."""
    writes = []
    for w in j.writes:
        now = host.read(w.path)
        if now is None or _same(now, w.after) or (w.got is not None and _same(now, w.got)):
            writes.append(w)  # ours (or unreadable: restoring is all revert can try)
        elif not _same(now, w.before):
            conflicts[w.path] = f"journal's after {w.after!r}, now {now.strip()!r}"
    return writes


def _host_files_to_restore(
    host: Host, j: journal.Journal, conflicts: dict[str, str]
) -> list[journal.JournalFile]:
    host_files = []
    for hf in j.host_files:
        now = host.read(hf.path)
        if hf.after is None or now == hf.after:
            host_files.append(hf)
        elif now != hf.before:
            conflicts[hf.path] = f"journal's after {_file_now(hf.after)}, now {_file_now(now)}"
    return host_files


def _state_files_to_restore(j: journal.Journal, conflicts: dict[str, str]) -> list[journal.JournalFile]:
    files = []
    for f in j.files:
        now = _read_state_file(f.path)
        if f.after is None or now == f.after:
            files.append(f)
        elif now != f.before:
            conflicts[f.path] = f"journal's after {_file_now(f.after)}, now {_file_now(now)}"
    return files


def _not_restored(
    host: Host,
    writes: list[journal.JournalWrite],
    host_files: list[journal.JournalFile],
    failed: list[str],
) -> dict[str, str]:
    """What does not hold its old value after the restore, read back: path -> what it holds."""
    wrong = {}
    for w in writes:
        now = host.read(w.path)
        if now is None or not _same(now, w.before):
            wrong[w.path] = f"{(now or '(unreadable)').strip()} (wanted {w.before})"
    for hf in host_files:
        now = host.read(hf.path)
        if now != hf.before:
            wrong[hf.path] = "still there" if hf.before is None else "not restored to its old content"
    for problem in failed:
        path, _, err = problem.partition(": ")
        wrong.setdefault(path, err)
    return wrong


def _conflict_finding(j: journal.Journal, conflicts: dict[str, str]) -> Finding:
    return Finding(
        CONFLICT,
        Status.FAIL,
        f"journal {j.id}: {len(conflicts)} value(s) changed since this apply (by someone else) "
        "were left as they are, not overwritten",
        conflicts,
        expected="each value as this apply left it (its after)",
        remediation="Find out who changed them; restore by hand if the journal's old values are "
        f"still wanted ({j.path}), or keep the new ones.",
        subject=j.id,
    )


def _not_restored_finding(j: journal.Journal, wrong: dict[str, str]) -> Finding:
    total = len(j.writes) + len(j.host_files)
    return Finding(
        "revert",
        Status.FAIL,
        f"journal {j.id}: {len(wrong)} of {total} value(s) and file(s) not restored",
        wrong,
        expected="every old value back",
        remediation="Restore these by hand (the old values are in the journal), or reboot: "
        "runtime settings do not survive a reboot.",
        subject=j.id,
    )


def _restored_finding(j: journal.Journal) -> Finding:
    return Finding(
        "revert",
        Status.OK,
        f"journal {j.id}: {len(j.writes)} value(s) and {len(j.files) + len(j.host_files)} file(s) restored",
        {w.path: w.before for w in j.writes[:6]},
        subject=j.id,
    )


def _mark_reverted(j: journal.Journal) -> None:
    j.state = journal.REVERTED
    try:
        j.save()
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0, type(e).__name__)
        raise StateDiskError(
            f"state disk {'full' if e.errno in (errno.ENOSPC, errno.EDQUOT) else 'error'} ({name}) at "
            f"{j.path}: the values are restored, the journal cannot be marked reverted; free space and "
            f"run `nodeagent revert {j.id}` again"
        ) from None


def _revert_locked(j: journal.Journal) -> list[Finding]:
    host = reopen(j.host)
    conflicts: dict[str, str] = {}
    writes = _writes_to_restore(host, j, conflicts)
    host_files = _host_files_to_restore(host, j, conflicts)
    files = _state_files_to_restore(j, conflicts)
    failed = _undo(host, writes)
    failed += _restore_files(host, host_files, j.host_dirs)
    failed += _restore_state_files(files)
    wrong = _not_restored(host, writes, host_files, failed)
    findings = [_conflict_finding(j, conflicts)] if conflicts else []
    if wrong:
        findings.append(_not_restored_finding(j, wrong))
    elif not conflicts:
        findings.append(_restored_finding(j))
    if conflicts:
        return findings  # not reverted: the journal keeps its state, and its values
    _mark_reverted(j)
    return findings
