"""Tuning a node: the selected tuners' plans (a playbook's tuners and parameters, overrides, one
rank layout for all), applying them (journal first, read back, optionally kept only when the
benchmark proves them faster), and reverting journals."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from nodeagent import tuners
from nodeagent.api.tune import plan_documents, share_layout
from nodeagent.app.bench import need_tensorflow
from nodeagent.bench import verify as judged
from nodeagent.bench.verify import stepwise_story
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import documents, worst
from nodeagent.host import open_host
from nodeagent.tuning import apply, journal, persist, story
from nodeagent.tuning.state import lock

if TYPE_CHECKING:
    from nodeagent.api.tune import Plan, Tuner
    from nodeagent.app.verify import BlockFn
    from nodeagent.bench.ab import TrialFn
    from nodeagent.bench.verify import Job, Progress, StepwiseResult
    from nodeagent.core.finding import Finding
    from nodeagent.gate.playbook import Playbook
    from nodeagent.host import Host
    from nodeagent.tuning.apply import ApplyResult
    from nodeagent.tuning.journal import Journal
    from nodeagent.tuning.persist import PersistPlan

ChangeFn = Callable[["Progress"], None]


@dataclass(frozen=True)
class TuneRequest:
    """Which tuners (--only/--skip, else the playbook's), with which parameters, for which node."""

    root: str | None = None
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # --set, over the playbook's
    ranks: int | None = None
    playbook: Playbook | None = None
    profile: str = "default"
    persist: bool = False

    def tuners(self) -> list[Tuner[Any, Any]]:
        return tuners.select(
            list(self.only) or (list(self.playbook.tuners) if self.playbook else []), self.skip
        )

    def params(self, selected: Sequence[Tuner[Any, Any]]) -> dict[str, Any]:
        """Each tuner's parameters: its defaults, the playbook's, then the overrides; the layout
        parameters (ranks, cpu_only, split_shared_nodes) made one for all (api.tune.share_layout)."""
        unknown = sorted(set(self.overrides) - {t.id for t in selected})
        if unknown:
            raise UsageError(f"--set names tuner {unknown[0]!r}, which is not selected or does not exist")
        from_playbook = self.playbook.tuner_params if self.playbook else {}
        requested = {t.id: {**from_playbook.get(t.id, {}), **self.overrides.get(t.id, {})} for t in selected}
        shared = share_layout(selected, requested, self.ranks)
        return {t.id: t.make_params(shared[t.id]) for t in selected}

    def argv(self, apply: bool = False, verify: Job | None = None, playbook: str | None = None) -> list[str]:
        """The same run as `nodeagent tune` arguments for the nodes of a fleet. `playbook` is the
        playbook as the user named it: each node loads its own (a shipped name, or a path there)."""
        argv = ["tune", "--profile", self.profile]
        argv += [f"--only={','.join(self.only)}"] if self.only else []
        argv += [f"--skip={','.join(self.skip)}"] if self.skip else []
        for tuner, values in self.overrides.items():
            argv += [f"--set={tuner}.{name}={_setting_text(value)}" for name, value in values.items()]
        argv += [f"--ranks={self.ranks}"] if self.ranks else []
        argv += ["--apply"] if apply else []
        argv += ["--persist"] if self.persist else []
        argv += verify.argv() if verify is not None else []
        argv += [f"--playbook={playbook}"] if playbook else []
        argv += [f"--root={self.root}"] if self.root else []  # with --slurm: what each node reads
        argv += ["--", *verify.command] if verify is not None and verify.command else []
        return argv


def _setting_text(value: Any) -> str:
    """A --set value as YAML that reads back as the same value (a string such as 'true' quoted)."""
    text: str = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return text.removesuffix("\n...\n").strip()


def plans_on(request: TuneRequest, host: Host) -> list[Plan]:
    selected = request.tuners()
    params = request.params(selected)
    return [t.run_plan(host, params[t.id]) for t in selected]


def plans(request: TuneRequest) -> list[Plan]:
    """The plans for the request's node (a dry run: nothing is written)."""
    with open_host(request.root) as host:
        return plans_on(request, host)


@dataclass
class TuneRun:
    """What a tune run planned, applied and measured, and the lines that tell it."""

    host: str
    plans: list[Plan]
    applied: ApplyResult | None = None
    checked: StepwiseResult | None = None
    persisting: PersistPlan | None = None
    story: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.checked is not None:
            return self.checked.exit_code
        if self.applied is not None:
            return worst(f.status for f in self.applied.findings).exit_code
        return 0

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "host": self.host,
            "plans": plan_documents(self.plans),
            "applied": self.applied is not None,
        }
        if self.applied is not None:
            doc["journal"] = self.applied.journal.id if self.applied.journal else None
            doc["profile"] = str(self.applied.profile_path) if self.applied.profile_path else None
            doc["verify"] = documents(self.applied.findings)
        if self.checked is not None:
            doc["verify"] = document.dump(self.checked)
        if self.persisting is not None:
            doc["persist"] = document.dump(self.persisting)
        doc["story"] = self.story
        return doc


def validate(request: TuneRequest, do_apply: bool, verify: Job | None, quick: bool = False) -> None:
    """The usage errors of a run, found before anything starts (a progress display, a lock)."""
    if verify is None:
        if quick:
            raise UsageError("--quick sizes the trials of --verify: give --apply --verify too")
        return
    if not do_apply:
        raise UsageError("--verify applies each change and measures it: give --apply too")
    if request.root is not None:
        raise UsageError("--verify measures a job on this machine: it cannot be used with --root")
    if request.persist:
        raise UsageError(
            "--persist with --verify: verify first, then persist what was kept "
            "(`nodeagent tune --apply --persist --only KEPT`)"
        )
    verify.validate()
    if verify.builtin:
        need_tensorflow()


def run(
    request: TuneRequest,
    do_apply: bool = False,
    verify: Job | None = None,
    on_change: ChangeFn | None = None,
    on_trial: TrialFn | None = None,
    on_block: BlockFn | None = None,
) -> TuneRun:
    """Plan; with `do_apply`, apply (and with `verify`, keep each change only when A/B trials of
    the job show it faster: nodeagent.bench.verify)."""
    validate(request, do_apply, verify)
    selected = request.tuners()
    params = request.params(selected)
    # --persist reads the persistent files' old content while planning: hold the state lock from
    # then on, so a concurrent apply cannot change them between that read and the journal.
    held = lock() if do_apply and request.persist else contextlib.nullcontext()
    with held, open_host(request.root, writable=do_apply and request.root is not None) as host:
        out = TuneRun(host.name, [t.run_plan(host, params[t.id]) for t in selected])
        if request.persist:
            runtime = [c for p in out.plans for c in p.changes]
            out.persisting = persist.plan(persist.collect(host), runtime)
        if do_apply and verify is not None:
            verifiers = {t.id: t.verify for t in selected if t.verify}
            out.checked = judged.one_at_a_time(
                host, out.plans, request.profile, verify, verifiers, on_change, on_trial, on_block
            )
        elif do_apply:
            _apply(request, host, selected, out)
    out.story = _story(out, do_apply, request.profile)
    return out


def _story(out: TuneRun, do_apply: bool, profile_name: str) -> list[str]:
    if out.checked is not None:
        return [
            story.planned(out.plans),
            *stepwise_story(out.checked, profile_name),
            *story.advice(out.plans),
        ]
    return story.tune_story(
        out.plans, out.applied, do_apply=do_apply, profile_name=profile_name, persisting=out.persisting
    )


def _apply(request: TuneRequest, host: Host, selected: Sequence[Tuner[Any, Any]], out: TuneRun) -> None:
    verifiers = {t.id: t.verify for t in selected if t.verify}
    out.applied = apply.apply(
        host, out.plans, request.profile, verifiers=verifiers, persisting=out.persisting
    )


def apply_plans(request: TuneRequest, chosen: list[Plan]) -> ApplyResult:
    """Apply plans already shown (the TUI's selection) on this machine, each tuner's own read-back."""
    wanted = {p.tuner for p in chosen}
    verifiers = {t.id: t.verify for t in tuners.select([], []) if t.id in wanted and t.verify}
    with open_host(request.root) as host:
        return apply.apply(host, chosen, request.profile, verifiers=verifiers)


def journals() -> list[Journal]:
    return journal.all_journals()


@dataclass
class RevertRun:
    """Each journal reverted: the journal, its state before, the findings of restoring it; and how
    many journals are left unreverted."""

    done: list[tuple[Journal, str, list[Finding]]]
    left: int

    @property
    def exit_code(self) -> int:
        return worst(f.status for _, _, findings in self.done for f in findings).exit_code


def revert(journal_id: str | None, revert_all: bool = False) -> RevertRun:
    """Restore what the journal `journal_id` (or every journal not yet reverted, newest first) changed."""
    if revert_all == bool(journal_id):
        raise UsageError("give one journal id, or --all (see `nodeagent revert --list`)")
    with lock():  # no apply or other revert in between (a second one waits, then exit 75)
        targets = (
            [j for j in reversed(journal.all_journals()) if j.state != journal.REVERTED]
            if revert_all
            else [journal.find(journal_id or "")]
        )
        for j in targets:  # a journal naming a path nodeagent does not write: refused before any write
            apply.check_owned(j)
        done = [(j, j.state, apply.revert(j)) for j in targets]
        left = sum(1 for j in journal.all_journals() if j.state != journal.REVERTED)
    return RevertRun(done, left)
