"""Apply plans with a journal, verify them, and revert journals. One implementation for every tuner."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent import journal, persist, profile
from nodeagent.errors import UsageError
from nodeagent.finding import Finding, Status
from nodeagent.host import Host, LocalHost, SnapshotHost
from nodeagent.state import write_atomic
from nodeagent.tune import Change, Plan, Scope, _same, verify_writes

# Fault injection for the crash tests: SIGKILL this process right after the Nth file write.
FAULT_KILL_ENV = "NODEAGENT_FAULT_KILL_AFTER_WRITES"


@dataclass
class ApplyResult:
    journal: journal.Journal | None
    profile_path: Path | None
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Change] = field(default_factory=list)  # boot advice and no-ops: nothing to write
    persist: persist.PersistPlan | None = None  # --persist: the files written, what was not persisted
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
    changes = [c for p in plans for c in p.changes]
    runtime = [c for c in changes if c.scope is Scope.RUNTIME and not c.is_noop]
    settings = [
        (c.profile_key, c.value) for c in changes if c.scope in (Scope.PROCESS, Scope.CODE) and c.profile_key
    ]
    skipped = [c for c in changes if c.scope is Scope.BOOT or (c.scope is Scope.RUNTIME and c.is_noop)]
    if runtime and _needs_root(host):
        tuners = ", ".join(sorted({c.tuner for c in runtime}))
        raise UsageError(
            f"applying {tuners} writes /sys and /proc/sys and needs root; nothing was changed "
            "(run as root, or leave them out with --only)"
        )
    writes = [
        journal.JournalWrite(w.path, w.before, w.after, c.tuner)
        for c in runtime
        for w in c.writes
        if w.before is not None and not _same(w.before, w.after)
    ]
    files: list[journal.JournalFile] = []
    profile_file: Path | None = None
    new_profile: dict[str, Any] | None = None
    if settings:
        profile_file = profile.profile_path(profile_name, state)
        old_text = profile_file.read_text() if profile_file.exists() else None
        try:
            old_doc = json.loads(old_text) if old_text else {}
        except ValueError:
            old_doc = {}
        new_profile = profile.merged(
            old_doc if isinstance(old_doc, dict) else {}, settings, profile_name, host.name
        )
        files.append(journal.JournalFile(str(profile_file), old_text))
    if persisting is not None and persisting.refused:
        raise UsageError(
            f"{persisting.refused[0]}: cannot be read, so its content cannot be saved in the journal for "
            "revert; nothing was changed (fix its permissions, or leave out --persist)"
        )
    host_files = [journal.JournalFile(f.path, f.before) for f in persisting.files] if persisting else []
    host_dirs = list(persisting.dirs) if persisting else []
    if not writes and not files and not host_files:
        return ApplyResult(None, None, _verify(host, runtime, verifiers), skipped, persisting)

    j = journal.create(
        host_ref(host), writes, files, profile_name if settings else None, state, host_files, host_dirs
    )
    kill_after = int(os.environ.get(FAULT_KILL_ENV) or 0)
    for done, w in enumerate(writes):
        try:
            host.write(w.path, w.after)
        except OSError as e:
            _undo(host, writes[:done])
            j.state = journal.ROLLED_BACK
            j.save()
            raise UsageError(
                f"{w.path}: writing {w.after!r} failed ({e.strerror or e}); the {done} earlier write(s) "
                f"were undone (journal {j.id})"
            ) from None
        if kill_after == done + 1:
            os.kill(os.getpid(), signal.SIGKILL)
    for done, f in enumerate(persisting.files if persisting else []):
        try:
            host.put_file(f.path, f.after)
        except OSError as e:
            _undo(host, writes)
            _restore_files(host, host_files[:done], host_dirs)
            j.state = journal.ROLLED_BACK
            j.save()
            raise UsageError(
                f"{f.path}: writing the {f.what} file failed ({e.strerror or e}); the runtime writes and "
                f"the {done} earlier file(s) were undone (journal {j.id})"
            ) from None
    if profile_file is not None and new_profile is not None:
        profile.save(profile_file, new_profile)
    j.state = journal.APPLIED
    j.save()
    findings = _verify(host, runtime, verifiers) + _verify_files(host, persisting)
    return ApplyResult(j, profile_file, findings, skipped, persisting, len(settings))


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


def revert(j: journal.Journal) -> list[Finding]:
    """Restore every old value of a journal and report what is back. Safe to run again."""
    host = reopen(j.host)
    failed = _undo(host, j.writes)
    failed += _restore_files(host, j.host_files, j.host_dirs)
    for f in j.files:
        if f.before is None:
            Path(f.path).unlink(missing_ok=True)
        else:
            write_atomic(Path(f.path), f.before)
    findings = []
    wrong = {}
    for w in j.writes:
        now = host.read(w.path)
        if now is None or not _same(now, w.before):
            wrong[w.path] = f"{(now or '(unreadable)').strip()} (wanted {w.before})"
    for hf in j.host_files:
        now = host.read(hf.path)
        if now != hf.before:
            wrong[hf.path] = "still there" if hf.before is None else "not restored to its old content"
    for problem in failed:
        path, _, err = problem.partition(": ")
        wrong.setdefault(path, err)
    if wrong:
        findings.append(
            Finding(
                "revert",
                Status.FAIL,
                f"journal {j.id}: {len(wrong)} of {len(j.writes) + len(j.host_files)} value(s) and "
                "file(s) not restored",
                wrong,
                expected="every old value back",
                remediation="Restore these by hand (the old values are in the journal), or reboot: "
                "runtime settings do not survive a reboot.",
                subject=j.id,
            )
        )
    else:
        findings.append(
            Finding(
                "revert",
                Status.OK,
                f"journal {j.id}: {len(j.writes)} value(s) and {len(j.files) + len(j.host_files)} "
                "file(s) restored",
                {w.path: w.before for w in j.writes[:6]},
                subject=j.id,
            )
        )
    j.state = journal.REVERTED
    j.save()
    return findings
