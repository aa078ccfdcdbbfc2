"""Verify on the user's job: A/B trials of a profile (`nodeagent verify`), and `nodeagent tune
--apply --verify`, which judges each planned change alone and keeps only a proven gain.

The sides:
- A is the job as it is: the command through `nodeagent exec` with the profile as it was before the
  change (an empty profile for `nodeagent verify`: no environment, binding or hook), so both sides
  pay the same launcher start-up (about 0.3 s of Python) and only the change differs;
- B is the same command through `nodeagent exec --profile NAME`;
- runtime-scope changes (sysfs, /proc/sys) are switched to each side's values before each trial
  through their journals (nodeagent.tuning.toggle);
- without a command, both sides run the built-in tf.data + XLA workload (the user's plain pipeline
  of the benchmark, `worker --config tuned --serve`).

One change at a time (tune --apply --verify): the plans are taken in the planner's order; each is
applied alone (its own journal), judged by A/B trials against the node with the changes kept so
far, kept only when B is significantly faster, else reverted through its journal (runtime values
and profile as they were). A change helping one job and hurting another is judged on this job
only: that is the point of verifying on the job that matters.

Exit codes: `nodeagent verify`: 0 B is significantly faster, 1 it is not (no significant difference
or slower: the verdict says which), 2 a trial failed (nothing judged). `tune --apply --verify`: 0 at
least one change kept and none failed (or nothing to apply), 1 none kept, 2 a trial failed (that
change is reverted, the later ones are not applied).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.bench import ab, measure, paired, run, stats
from nodeagent.core import document, interrupt
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.tuning import apply, history, journal, launcher, prepared, profile, toggle
from nodeagent.tuning.state import StateDiskError, write_atomic
from nodeagent.tuning.story import restored

if TYPE_CHECKING:
    from nodeagent.api.tune import Plan
    from nodeagent.host import Host
    from nodeagent.tuning.apply import ApplyResult, Verifier
    from nodeagent.tuning.journal import Journal

KEPT, REVERTED, NOTHING, NOT_RUN, MEASURED = "kept", "reverted", "nothing to apply", "not run", "measured"
EXIT_KEPT, EXIT_NONE_KEPT, EXIT_FAILED = 0, 1, 2

# The built-in workload's trial: one repeat of this many steps (quick sizes: about 0.15 s here;
# default sizes: about 0.4 s). Short trials: on the 2-CPU VM this was measured on, the log ratio of
# two adjacent trials varies by 11-17% (sd) whether a trial lasts 0.1 s or 1 s (the host slows our
# vCPUs down for seconds at a time), so many short pairs beat few long ones.
TRIAL_STEPS = {True: 8, False: 4}
# Pairs of trials per pair of processes (x quick), whose start-up (7-10 s for both here, XLA's
# compilation cached after the first block) is paid once per block. Measured on the quick sizes
# here, the blocks' spread came from the trials, not from the processes: a median of 8 pairs varied
# by 5% (sd, from the difference between a block's two halves), which predicts 3.6% for 16 pairs,
# and blocks of 16 varied by 3.1%. So --quick spends its budget on longer blocks, as few as its
# first look needs (7) and a few more.
PAIRS_PER_BLOCK = {True: 48, False: 16}
# --quick: the whole run (nodeagent's start-up, every trial's and worker's start-up included) ends
# within this budget, with the verdict of a final look at the pairs done; or earlier, when the
# interval is within +-3%. 165 s leaves room for the history record and the report within 3 minutes.
QUICK_BUDGET_S = 165.0
QUICK_PRECISION_PCT = 3.0
BLOCKS = {  # the block limit: (built-in, command) x quick; under --quick the budget ends them sooner
    (True, True): 10,
    (True, False): 40,
    (False, True): 200,
    (False, False): 40,
}
PRECISION_PCT = 1.0  # otherwise: stop when the ratio is known within +-1%
WORKER_TIMEOUT_S = 300.0
A_PROFILE = "nodeagent-verify-a-{pid}"
B_PROFILE = "nodeagent-verify-b-{pid}"
_META = ("name", "host", "updated")


@dataclass(frozen=True)
class Job:
    """What is measured: the user's command (None: the built-in workload) and how."""

    command: tuple[str, ...] | None = None
    metric: str | None = None  # a regular expression: its first group is the rate
    quick: bool = False
    pairs: int | None = None  # the block limit (pairs of trials, or of processes for the built-in)
    trial_timeout: float | None = None  # seconds a trial of a command may take (None: from the first A trial)

    @property
    def builtin(self) -> bool:
        return self.command is None

    @property
    def document_command(self) -> list[str] | None:
        """The command as reports write it (None: the built-in workload)."""
        return None if self.command is None else list(self.command)

    def argv(self) -> list[str]:
        """The options of `tune --verify` that ask for this job (its command goes after `--`)."""
        argv = ["--verify"]
        argv += ["--quick"] if self.quick else []
        argv += [f"--pairs={self.pairs}"] if self.pairs else []
        argv += [f"--metric={self.metric}"] if self.metric else []
        argv += [f"--trial-timeout={self.trial_timeout}"] if self.trial_timeout else []
        return argv

    def pattern(self) -> re.Pattern[str] | None:
        if self.metric is None:
            return None
        try:
            return re.compile(self.metric)
        except re.error as e:
            raise UsageError(f"--metric {self.metric!r}: not a regular expression ({e})") from None

    def validate(self) -> None:
        """The usage errors, before anything runs."""
        if self.builtin and self.metric is not None:
            raise UsageError("--metric reads the output of your command: give the command after `--`")
        if self.builtin and self.trial_timeout is not None:
            raise UsageError(
                "--trial-timeout limits each trial of your command: give the command after `--` (the "
                f"built-in workload's workers have their own limit, {WORKER_TIMEOUT_S:.0f} s per answer)"
            )
        if self.trial_timeout is not None and not (0 < self.trial_timeout < float("inf")):
            raise UsageError(f"--trial-timeout {self.trial_timeout}: a positive number of seconds")
        self.pattern()
        self.design()

    @property
    def budget_s(self) -> float | None:
        return QUICK_BUDGET_S if self.quick else None

    def design(self) -> paired.Design:
        limit = self.pairs if self.pairs is not None else BLOCKS[(self.builtin, self.quick)]
        precision = QUICK_PRECISION_PCT if self.quick else PRECISION_PCT
        # Haybittle-Peto: the interim looks spend 0.1% each, so the last look (the limit, or the
        # final look wherever the time budget ends the trials) judges a small change at nearly 95%.
        # The built-in workload's quick limit (10 blocks) is too few for an interim look at 0.1%
        # (11 blocks at least), so its looks (7 and 10 blocks) share alpha evenly: a clear change
        # still stops at 7, and a final look at the budget gets what the look at 7 left.
        interim = None if self.quick and self.builtin else paired.INTERIM_ALPHA
        try:
            return paired.design(limit, precision_pct=precision, interim_alpha=interim)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def limits(self, started: float | None = None) -> ab.Limits:
        """The trials' design and budget; `started` (time.monotonic()) is when the budget began."""
        return ab.Limits(self.design(), self.budget_s, started=started)

    @property
    def label(self) -> str:
        return "built-in tf.data + XLA benchmark" if self.command is None else shlex.join(self.command)


# -- the sides -----------------------------------------------------------------------------------


def _side(name: str, profile_name: str, command: Sequence[str], env: dict[str, str], folder: Path) -> ab.Side:
    """One side: `command` as `nodeagent exec --profile PROFILE_NAME` runs it, resolved once here and
    started by nodeagent.tuning.prepared for every trial (exec's start-up, paid on every trial,
    would otherwise be most of a short job's and add its noise to every pair)."""
    # Resolved against the environment a trial starts with: its measuring folder's variable is
    # there (each trial's own folder passes through), and so the hook's folder on PYTHONPATH.
    planning = measure.hook_env(env, folder / "measure")
    notes: list[str] = []
    try:
        launch, machine = launcher.plan(
            profile_name, None, list(command), notes.append, named=True, environ=planning
        )
    except UsageError as e:
        raise UsageError(f"side {name} cannot be started: {e}") from None
    launch.notes.extend(notes)
    path = folder / f"side-{name}.json"
    prepared.write(path, launch, machine)
    return ab.Side(name, prepared.argv(path), env)


def workload(job: Job, a_profile: str, b_profile: str, folder: Path) -> ab.Workload:
    """The trials' two sides, their launches kept in `folder`."""
    env = run.without_hook(os.environ)
    if job.command is not None:
        a = _side(ab.A, a_profile, job.command, env, folder)
        b = _side(ab.B, b_profile, job.command, env, folder)
        return ab.CommandWorkload(a, b, job.label, job.pattern(), job.trial_timeout)
    sizes = run.sizes_for(job.quick)
    data = run.ensure_data(sizes)
    worker = [*run.worker_argv("tuned", data, sizes), "--serve"]
    worker[worker.index("--steps") + 1] = str(TRIAL_STEPS[job.quick])
    worker.remove("--progress")
    a = _side(ab.A, a_profile, worker, env, folder)
    b = _side(ab.B, b_profile, worker, env, folder)
    return ab.BuiltinWorkload(a, b, PAIRS_PER_BLOCK[job.quick], WORKER_TIMEOUT_S)


@contextlib.contextmanager
def side_a_profile(text: str | None, base: Path | None = None) -> Iterator[str]:
    """A's profile for the trials: `text` (the profile before the change), or an empty one; removed
    afterwards. A file of its own, so B's profile is never touched by the trials."""
    with _trial_profile(A_PROFILE, text, base) as name:
        yield name


@contextlib.contextmanager
def side_b_profile(name: str, base: Path | None = None) -> Iterator[str]:
    """B's profile for the trials: `name` when its file is there. A profile of runtime values alone
    (`tune --apply --only thp` writes journals, no file) has none, and `nodeagent exec --profile`
    refuses a named profile that is not there: B then runs through an empty one of its own,
    removed afterwards, as exec without a profile would run it."""
    if profile.profile_path(name, base).exists():
        yield name
        return
    with _trial_profile(B_PROFILE, None, base) as empty:
        yield empty


@contextlib.contextmanager
def _trial_profile(pattern: str, text: str | None, base: Path | None) -> Iterator[str]:
    """A profile file for the trials only, holding `text` (or nothing); removed afterwards."""
    name = pattern.format(pid=os.getpid())
    path = profile.profile_path(name, base)
    try:
        with interrupt.critical():  # an interrupt waits for the write, then `finally` removes it
            write_atomic(path, text if text is not None else "{}\n")
        yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _live(journals: Sequence[Journal]) -> list[Journal]:
    """The journals that changed a live host (this machine, or a tree under --root), not a recording."""
    return [j for j in journals if j.host.get("kind") != "snapshot"]


def trials(
    job: Job,
    b_profile: str,
    journals: Sequence[Journal],
    a_text: str | None,
    on_trial: ab.TrialFn | None = None,
    on_block: Callable[[ab.Block, paired.Estimate | None], None] | None = None,
    started: float | None = None,
) -> ab.ABResult:
    """A/B trials of the job: B through `b_profile` with the journals' runtime values, A through
    `a_text` with their old values. The runtime values are left as B has them. A time budget counts
    from `started` (time.monotonic()), or from now."""
    limits = job.limits(started)
    switch = toggle.RuntimeSwitch(_live(journals))
    with (
        side_a_profile(a_text) as a_name,
        side_b_profile(b_profile) as b_name,
        tempfile.TemporaryDirectory(prefix="nodeagent-launch-") as launches,
    ):
        try:
            sides = workload(job, a_name, b_name, Path(launches))
            return ab.run_trials(sides, limits, switch.to, on_trial, on_block)
        finally:
            switch.to(ab.B)


# -- what B has that A has not -------------------------------------------------------------------


def _flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {prefix.rstrip("."): doc} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if not prefix and k in _META:
            continue
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def settings_diff(a_text: str | None, b_text: str | None) -> dict[str, Any]:
    """The profile settings B has and A has not (dotted keys; a setting B dropped is None)."""
    a = _flat(json.loads(a_text)) if a_text else {}
    b = _flat(json.loads(b_text)) if b_text else {}
    out = {k: v for k, v in b.items() if a.get(k, object()) != v}
    out |= {k: None for k in a if k not in b}
    return out


def _runtime(journals: Sequence[Journal]) -> list[dict[str, str]]:
    return [{"path": w.path, "before": w.before, "after": w.after} for j in journals for w in j.writes]


def _profile_text(name: str) -> str | None:
    try:
        return profile.profile_path(name).read_text()
    except FileNotFoundError:
        return None


# -- history -------------------------------------------------------------------------------------


def record(
    job: Job,
    node: str,
    profile_name: str,
    change: str,
    result: ab.ABResult,
    decision: str,
    settings: dict[str, Any],
    runtime: list[dict[str, str]],
) -> Any:
    """The history record of one judged change (nodeagent.tuning.history.Record)."""
    est = result.estimate
    return history.Record(
        time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        node=node,
        command=list(job.command) if job.command is not None else None,
        profile=profile_name,
        change=change,
        settings=settings,
        runtime=[history.RuntimeValue(**r) for r in runtime],
        metric=result.metric,
        pairs=result.pairs,
        ratio=None if est is None else est.ratio,
        interval=None if est is None or not _bounded(est.ci) else est.ci,
        level=None if est is None else est.level,
        verdict=result.verdict,
        decision=decision,
        reason=result.failed or (est.reason if est else result.undecided or result.stopped),
        wall_s=result.wall_s,
    )


def _bounded(ci: tuple[float, float]) -> bool:
    """Whether both ends are finite ratios: a final look at too few pairs has an unbounded interval,
    which a history line holds as none (JSON has no infinity)."""
    return all(math.isfinite(v) and v > 0 for v in ci)


# -- nodeagent verify ----------------------------------------------------------------------------


@pydantic_dataclass(config=document.LATE)
class ProfileVerdict(document.InKeyOrder):
    """`nodeagent verify`: the trials of one profile, what was switched, and the history record."""

    document_keys = ("profile", "command", "settings", "runtime", "history", "result")
    document_inlined = "result"

    profile: str
    job: Annotated[Job, Field(exclude=True)]  # its command is in the document
    result: ab.ABResult
    settings: dict[str, Any]
    runtime: list[dict[str, str]]
    history_file: Annotated[Path | None, Field(serialization_alias="history")] = None

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @computed_field  # type: ignore[prop-decorator]
    @property
    def command(self) -> list[str] | None:
        return self.job.document_command


def profile_journals(profile_name: str) -> list[Journal]:
    """The applied journals made under `profile_name` on this machine: their runtime values are
    part of what the profile is on this node."""
    return [
        j
        for j in journal.all_journals()
        if j.state == journal.APPLIED and j.profile == profile_name and j.host.get("kind") == "local"
    ]


def check_profile(profile_name: str) -> list[Journal]:
    """The profile's applied journals; a profile that is neither a settings file nor runtime values
    (`tune --apply --only thp --profile P` writes journals and no file), or an unreadable file, is
    one UsageError line, before anything runs."""
    journals = profile_journals(profile_name)
    if journals:
        profile.load_if_present(profile_name)
    else:
        profile.load(profile_name)
    return journals


def verify_profile(
    job: Job,
    profile_name: str,
    node: str,
    on_trial: ab.TrialFn | None = None,
    on_block: Callable[[ab.Block, paired.Estimate | None], None] | None = None,
) -> ProfileVerdict:
    """A/B trials of the job without (A) and with (B) the profile and its runtime values."""
    started = time.monotonic()  # the budget counts the preparation (data, profiles) too
    job.validate()
    journals = check_profile(profile_name)
    result = trials(job, profile_name, journals, None, on_trial, on_block, started)
    out = ProfileVerdict(
        profile_name, job, result, settings_diff(None, _profile_text(profile_name)), _runtime(journals)
    )
    entry = record(job, node, profile_name, "profile", result, MEASURED, out.settings, out.runtime)
    try:
        out.history_file = history.append(entry)
    except StateDiskError as e:  # the verdict stands; the missing record is said
        result.notes.append(str(e))
    return out


# -- tune --apply --verify: one change at a time ---------------------------------------------------


@pydantic_dataclass(config=document.LATE)
class ChangeVerdict(document.InKeyOrder):
    """One planned change (one tuner's plan) judged alone."""

    document_keys = ("tuner", "decision", "journal", "settings", "runtime", "trials", "read_back", "revert")

    tuner: str
    decision: str  # kept, reverted, nothing to apply, not run
    result: Annotated[ab.ABResult | None, Field(serialization_alias="trials")] = None
    applied: Annotated[apply.ApplyResult | None, Field(exclude=True)] = None  # its findings are read_back
    reverted: Annotated[list[Finding], Field(serialization_alias="revert")] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict)
    runtime: list[dict[str, str]] = Field(default_factory=list)

    @property
    def journal(self) -> Journal | None:
        return None if self.applied is None else self.applied.journal

    @computed_field(alias="journal")  # type: ignore[prop-decorator]
    @property
    def journal_id(self) -> str | None:
        return None if self.journal is None else self.journal.id

    @computed_field  # type: ignore[prop-decorator]
    @property
    def read_back(self) -> list[Finding]:
        """The findings that read the change back after it was applied."""
        return [] if self.applied is None else self.applied.findings


@pydantic_dataclass(config=document.LATE)
class StepwiseResult(document.InKeyOrder):
    document_keys = ("command", "exit_code", "kept", "changes", "wall_s", "history", "notes")

    job: Annotated[Job, Field(exclude=True)]  # its command is in the document
    changes: list[ChangeVerdict]
    wall_s: float = 0.0
    history_file: Annotated[Path | None, Field(serialization_alias="history")] = None
    notes: list[str] = Field(default_factory=list)

    @property
    def kept(self) -> list[ChangeVerdict]:
        return [c for c in self.changes if c.decision == KEPT]

    @computed_field(alias="kept")  # type: ignore[prop-decorator]
    @property
    def kept_tuners(self) -> list[str]:
        return [c.tuner for c in self.kept]

    @property
    def failed(self) -> ChangeVerdict | None:
        return next((c for c in self.changes if c.result is not None and c.result.verdict == ab.FAILED), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        if self.failed is not None:
            return EXIT_FAILED
        judged = [c for c in self.changes if c.result is not None]
        return EXIT_KEPT if self.kept or not judged else EXIT_NONE_KEPT

    @computed_field  # type: ignore[prop-decorator]
    @property
    def command(self) -> list[str] | None:
        return self.job.document_command


@dataclass(frozen=True)
class Progress:
    """Which change is being judged (1-based of `of`), for the faces' progress lines."""

    tuner: str
    number: int
    of: int


def one_at_a_time(
    host: Host,
    plans: Sequence[Plan],
    profile_name: str,
    job: Job,
    verifiers: dict[str, Verifier] | None = None,
    on_change: Callable[[Progress], None] | None = None,
    on_trial: ab.TrialFn | None = None,
    on_block: Callable[[ab.Block, paired.Estimate | None], None] | None = None,
) -> StepwiseResult:
    """Apply, judge and keep or revert each plan in turn (see the module docstring)."""
    start = time.monotonic()
    job.validate()
    out = StepwiseResult(job, [])
    failed = False
    for number, plan in enumerate(plans, 1):
        if failed:
            out.changes.append(ChangeVerdict(plan.tuner, NOT_RUN))
            continue
        if on_change is not None:
            on_change(Progress(plan.tuner, number, len(plans)))
        # Each change has a budget of its own, from its apply on.
        verdict = _judge(host, plan, profile_name, job, verifiers, on_trial, on_block, time.monotonic())
        out.changes.append(verdict)
        if verdict.result is not None:
            _remember(out, host.name, profile_name, verdict)
            failed = verdict.result.verdict == ab.FAILED
    out.wall_s = time.monotonic() - start
    return out


def _judge(
    host: Host,
    plan: Plan,
    profile_name: str,
    job: Job,
    verifiers: dict[str, Verifier] | None,
    on_trial: ab.TrialFn | None,
    on_block: Callable[[ab.Block, paired.Estimate | None], None] | None,
    started: float,
) -> ChangeVerdict:
    a_text = _profile_text(profile_name)
    applied: ApplyResult | None = None
    try:
        with interrupt.critical():  # an interrupt during the apply waits until its journal is known here
            applied = apply.apply(host, [plan], profile_name, verifiers=verifiers)
        if applied.journal is None:
            return ChangeVerdict(plan.tuner, NOTHING, applied=applied)
        j = applied.journal
        out = ChangeVerdict(plan.tuner, KEPT, applied=applied, runtime=_runtime([j]))
        out.settings = settings_diff(a_text, _profile_text(profile_name))
        out.result = trials(job, profile_name, [j], a_text, on_trial, on_block, started)
        if out.result.verdict != stats.FASTER:
            out.decision = REVERTED
            out.reverted = apply.revert(j)
        return out
    except BaseException:
        # Interrupted or refused between apply and decision: the node is left as it was.
        if applied is not None and applied.journal is not None and applied.journal.state == journal.APPLIED:
            apply.revert(applied.journal)
        raise


def _remember(out: StepwiseResult, node: str, profile_name: str, c: ChangeVerdict) -> None:
    """Append the change's record; a state disk that refuses it is a note: the decision stands."""
    assert c.result is not None
    entry = record(out.job, node, profile_name, c.tuner, c.result, c.decision, c.settings, c.runtime)
    try:
        out.history_file = history.append(entry)
    except StateDiskError as e:
        out.notes.append(str(e))


# -- the story of tune --apply --verify ----------------------------------------------------------


def _measured(tuner: str, r: ab.ABResult) -> str:
    if r.failed is not None:
        return f"measured: {tuner}: the trials failed: {r.failed}"
    assert r.estimate is not None
    return f"measured: {tuner}: {r.estimate.reason}; {r.metric}, {r.stopped}, {r.wall_s:.0f} s"


def _change_lines(c: ChangeVerdict) -> list[str]:
    if c.decision == NOTHING:
        return [f"applied: {c.tuner}: nothing: every value is already as planned, and no setting to save"]
    if c.decision == NOT_RUN:
        return [f"applied: {c.tuner}: nothing: the trials of an earlier change failed, so it was not tried"]
    j = c.journal
    assert j is not None and c.result is not None
    lines = [
        f"applied: {c.tuner}: journal {j.id} ({len(j.writes)} runtime value(s), {len(c.settings)} setting(s))"
    ]
    lines.append(_measured(c.tuner, c.result))
    if c.decision == KEPT:
        return [*lines, f"kept: {c.tuner}: significantly faster, so journal {j.id} stays applied"]
    why = "its trials failed, so no gain is shown" if c.result.failed else "not significantly faster"
    bad = [f for f in c.reverted if f.status not in (Status.OK, Status.SKIPPED)]
    if not bad:
        return [*lines, f"reverted: {c.tuner}: {why}: journal {j.id} undone: {restored(j)}"]
    lines.append(f"reverted: {c.tuner}: {why}: journal {j.id} undone, but not everything is back:")
    return lines + [f"  - {f.summary}" for f in bad]


def stepwise_story(result: StepwiseResult, profile_name: str) -> list[str]:
    """What `tune --apply --verify` did, change by change, then what remains (nodeagent.tuning.story's
    line prefixes)."""
    lines = [line for c in result.changes for line in _change_lines(c)]
    kept = result.kept
    if not kept:
        lines.append("remains: nothing of this run: the node is as it was before it")
        return lines + [f"note: {n}" for n in result.notes]
    if any(c.settings for c in kept):
        lines.append(f"use: run jobs with `nodeagent exec --profile {profile_name} -- CMD`")
    lines += [f"undo: `nodeagent revert {c.journal.id}` ({c.tuner})" for c in kept if c.journal is not None]
    return lines + [f"note: {n}" for n in result.notes]
