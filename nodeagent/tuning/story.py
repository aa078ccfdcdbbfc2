"""What `nodeagent tune` and `nodeagent revert` tell the user, as one story in order: what was
planned, what was applied (the journal), what was read back and measured, what was kept or
reverted, and what remains (the profile to run jobs with, the revert command, what is persisted,
the advice that is never applied). No line claims what a later line undoes: a reverted run never
tells to use the profile the revert removed, a dry run never says "applied".

Pure: the plans and the results of apply, verify and revert in, lines of text out (the CLI styles
and prints them, the JSON document carries them, `tune --cluster` shows each host's). Each line
starts with its part of the story ("planned:", "dry run:", "applied:", "read back:", "measured:",
"kept:", "reverted:", "not reverted:", "use:", "undo:", "persisted:", "not persisted:", "remains:",
"advice"), so the tests and the fleet view can find them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodeagent.api.tune import Change, Plan, Scope
from nodeagent.core.finding import Finding, Status
from nodeagent.tuning.journal import REVERTED as REVERTED_STATE

if TYPE_CHECKING:
    from nodeagent.tuning.apply import ApplyResult
    from nodeagent.tuning.journal import Journal
    from nodeagent.tuning.persist import PersistPlan

SCOPE_ORDER = (Scope.RUNTIME, Scope.PROCESS, Scope.CODE, Scope.BOOT)
MAX_EVIDENCE = 4
CONFLICT = "revert-conflict"  # nodeagent.tuning.apply.CONFLICT (not imported: apply loads the tuners)


def _changes(plans: Sequence[Plan]) -> list[Change]:
    return [c for p in plans for c in p.changes if not c.is_noop]


def _boot(plans: Sequence[Plan]) -> list[Change]:
    return [c for c in _changes(plans) if c.scope is Scope.BOOT]


def planned(plans: Sequence[Plan]) -> str:
    changes = _changes(plans)
    noops = [c for p in plans for c in p.changes if c.is_noop]
    already = f"; {len(noops)} runtime value(s) already as planned" if noops else ""
    if not changes:
        return f"planned: no change (the tuners' notes say why){already}"
    counts = [
        f"{n} {scope.value}" + (" (advice, never applied)" if scope is Scope.BOOT else "")
        for scope in SCOPE_ORDER
        if (n := sum(1 for c in changes if c.scope is scope))
    ]
    tuners = len({c.tuner for c in changes})
    return f"planned: {len(changes)} change(s) from {tuners} tuner(s): {', '.join(counts)}{already}"


def advice(plans: Sequence[Plan]) -> list[str]:
    return [f"advice (never applied): {c.tuner}: {c.target}: {c.after}" for c in _boot(plans)]


def _persist_lines(p: PersistPlan, would: bool) -> list[str]:
    """Where --persist keeps each runtime change, and which it cannot keep (and why). `would`: a
    dry run's conditional form."""
    head, verb, not_head = (
        ("with --persist:", "would be kept in", "with --persist, not persisted:")
        if would
        else ("persisted:", "kept in", "not persisted:")
    )
    if not p.kept:
        return [
            f"{head} nothing: no runtime value is written by this run (values found already as planned "
            "are not persisted: revert the apply that set them, then apply again with --persist)"
        ]
    where: dict[str, list[str]] = {}
    for k in p.persisted:
        where.setdefault(k.where or "", []).append(f"{k.change.tuner} {k.change.target}")
    lines = [f"{head} {', '.join(targets)} {verb} {place}" for place, targets in where.items()]
    lines += [f"{not_head} {k.change.tuner} {k.change.target}: {k.why}" for k in p.not_persisted]
    return lines + [f"{head} {note}" for note in p.notes]


def _dry_run(plans: Sequence[Plan], persisting: PersistPlan | None) -> list[str]:
    applicable = [c for c in _changes(plans) if c.scope is not Scope.BOOT]
    lines = [
        "dry run: nothing was changed; add --apply to apply the plan"
        if applicable
        else "dry run: nothing was changed, and --apply would change nothing"
    ]
    if persisting is not None:
        lines += _persist_lines(persisting, would=True)
    return lines + advice(plans)


def _applied(a: ApplyResult | None, plans: Sequence[Plan], profile_name: str) -> str:
    if a is None or a.journal is None:
        if not [c for c in _changes(plans) if c.scope is not Scope.BOOT]:
            return "applied: nothing: no change to apply was planned"
        return "applied: nothing: every runtime value is already as planned, and no setting to save"
    j = a.journal
    parts = []
    if j.writes:
        parts.append(f"{len(j.writes)} runtime value(s) written")
    if a.profile_path is not None:
        parts.append(f"{a.settings} setting(s) saved in profile {profile_name} ({a.profile_path})")
    if j.host_files:
        parts.append(f"{len(j.host_files)} persistent file(s) written")
    return f"applied: journal {j.id} ({j.path}): {', '.join(parts) or 'nothing written'}"


def _details(f: Finding) -> list[str]:
    lines = [f"  - {f.summary}"]
    lines += [f"      {where}: {value}" for where, value in list(f.evidence.items())[:MAX_EVIDENCE]]
    return lines


def _read_back(a: ApplyResult | None) -> list[str]:
    if a is None or not a.findings:
        return []
    written = {w.path for w in a.persist.files} if a.persist else set()
    files = [f for f in a.findings if f.subject in written]
    runtime = [f for f in a.findings if f.subject not in written]
    lines = []
    for group, what, good in (
        (runtime, "runtime change(s)", "hold their new values"),
        (files, "persistent file(s)", "hold what was written"),
    ):
        if not group:
            continue
        bad = [f for f in group if f.status not in (Status.OK, Status.SKIPPED)]
        if not bad:
            lines.append(f"read back: {len(group)} {what} {good}")
            continue
        lines.append(f"read back: {len(bad)} of {len(group)} {what} did not take as planned:")
        for f in bad:
            lines += _details(f)
    return lines


def _bad(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.status not in (Status.OK, Status.SKIPPED)]


def restored(j: Journal) -> str:
    """What a revert put back, file by file."""
    parts = [f"{len(j.writes)} runtime value(s) restored"] if j.writes else []
    for f in j.files:
        name = f"profile {j.profile}" if j.profile else f.path
        parts.append(f"{name} removed (there was none before)" if f.before is None else f"{name} restored")
    for f in j.host_files:
        parts.append(
            f"{f.path} removed (it did not exist before)" if f.before is None else f"{f.path} restored"
        )
    return ", ".join(parts) or "nothing to restore"


def _decision(a: ApplyResult | None) -> list[str]:
    if a is None or a.journal is None:
        return []
    j = a.journal
    if _bad(a.findings):
        return [
            f"kept: journal {j.id} stays applied, the changes that did not take included (they hold "
            "what the kernel or another tool left); revert it to put every old value back"
        ]
    return [f"kept: journal {j.id}: every change stays applied"]


def _remains(a: ApplyResult | None, plans: Sequence[Plan], profile_name: str) -> list[str]:
    if a is None or a.journal is None:
        return ["remains: the node is as it was; nothing was changed by this run", *advice(plans)]
    j = a.journal
    lines = []
    if a.profile_path is not None:
        lines.append(f"use: run jobs with `nodeagent exec --profile {profile_name} -- CMD`")
    if a.persist is not None:
        lines += _persist_lines(a.persist, would=False)
    elif j.writes:
        lines.append(
            f"remains: {len(j.writes)} runtime value(s) last until the next reboot (add --persist to keep "
            "them across reboots)"
        )
    lines.append(f"undo: `nodeagent revert {j.id}`")
    return lines + advice(plans)


def tune_story(
    plans: Sequence[Plan],
    applied: ApplyResult | None = None,
    *,
    do_apply: bool = False,
    profile_name: str = "default",
    persisting: PersistPlan | None = None,
) -> list[str]:
    """The story of one `nodeagent tune` run, in order (`tune --apply --verify` tells its own:
    nodeagent.bench.verify.stepwise_story)."""
    lines = [planned(plans)]
    if not do_apply:
        return lines + _dry_run(plans, persisting)
    lines.append(_applied(applied, plans, profile_name))
    lines += _read_back(applied)
    lines += _decision(applied)
    return lines + _remains(applied, plans, profile_name)


def revert_story(done: Sequence[tuple[Journal, str, list[Finding]]], left: int = 0) -> list[str]:
    """The story of `nodeagent revert`: (journal, its state before, the revert's findings) each,
    newest first; `left` journals are still not reverted."""
    if not done:
        return ["nothing to revert: every journal is already reverted"]
    lines = []
    for j, before, findings in done:
        again = (
            " (it was reverted already: its old values were written again)"
            if before == REVERTED_STATE
            else ""
        )
        bad = _bad(findings)
        if not bad:
            lines.append(f"reverted: journal {j.id}{again}: {restored(j)}")
            continue
        conflicts = [f for f in bad if f.check_id == CONFLICT]
        others = [f for f in bad if f.check_id != CONFLICT]
        if conflicts:
            lines.append(
                f"not reverted: journal {j.id}: values changed since the apply were left as they are:"
            )
            for f in conflicts:
                lines += _details(f)
        if others:
            lines.append(f"reverted: journal {j.id}{again}, but not everything is back:")
            for f in others:
                lines += _details(f)
    if any(f.check_id == CONFLICT for _, _, fs in done for f in fs):
        lines.append(
            "remains: the values listed as changed since hold what someone else wrote, and their "
            "journals stay as they were; restore by hand if the old values are wanted"
        )
    if any(f.check_id != CONFLICT for _, _, fs in done for f in _bad(fs)):
        lines.append(
            "remains: what is listed above as not back; restore it by hand (the old values are in the "
            "journal) or reboot (runtime values do not survive one)"
        )
    elif not any(_bad(f) for _, _, f in done):
        ids = ", ".join(j.id for j, _, _ in done)
        lines.append(f"remains: nothing of journal(s) {ids}: the values they changed are back")
    if left:
        lines.append(f"remains: {left} other journal(s) not reverted (see `nodeagent revert --list`)")
    return lines


# -- the fleet: each host's planned changes, as Ansible's --diff shows them -----------------------


def change_line(c: Mapping[str, Any]) -> str:
    return f"{c['tuner']} [{c['scope']}] {c['target']}: {c['before']} -> {c['after']}"


def fleet_changes(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each host's planned changes (target, before -> after, scope) from the tune documents the
    hosts returned, hosts with the same changes together; then what each host's story says past
    its plan (applied, kept, reverted...), once when the group's hosts say the same."""
    groups: dict[tuple[str, ...], list[str]] = {}
    failed: list[str] = []
    for name, doc in hosts.items():
        plans = doc.get("plans")
        if not isinstance(plans, list):
            if "error" not in doc:  # unreachable hosts are in the hosts table already
                failed.append(f"{name}: no plan returned (exit code {doc.get('exit_code', '?')})")
            continue
        key = tuple(change_line(c) for p in plans for c in p.get("changes", []))
        groups.setdefault(key, []).append(name)
    lines: list[str] = []
    for key, names in groups.items():
        who = ", ".join(names) + (f" ({len(names)} hosts)" if len(names) > 1 else "")
        lines.append(f"{who}: {len(key)} change(s)" if key else f"{who}: no change")
        lines += [f"  {line}" for line in key]
        stories = {n: [s for s in hosts[n].get("story", []) if not s.startswith("planned:")] for n in names}
        if len({tuple(s) for s in stories.values()}) == 1:
            lines += [f"  = {s}" for s in stories[names[0]]]
        else:
            lines += [f"  = {n}: {s}" for n in names for s in stories[n]]
    return lines + failed
