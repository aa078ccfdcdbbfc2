"""`nodeagent tune --apply --verify`: measure, apply, measure again, keep only a proven gain.

1. baseline: the user's plain pipeline (the worker's `tuned` config: no explicit tf.data options)
   run as plain `python`, not through `nodeagent exec`, in the caller's environment as it is
   (thread variables included: they are part of how the user's jobs run today, and what a
   tf-threads profile corrects), minus what a parent `nodeagent exec` may have left there (its
   tf.data hook), so the baseline is never tuned by stealth;
2. apply the plans (nodeagent.tuning.apply: journal first, runtime writes, profile);
3. tuned: the same program through `nodeagent exec --profile P` (plain `python` when the apply
   wrote no profile: runtime changes reach every process anyway);
4. keep the changes only when tuned is significantly faster than baseline (the bootstrap CI of the
   ratio of medians above 1: nodeagent.bench.stats); otherwise revert the journal, which restores
   the runtime values and the profile file as they were, and say why with both medians, their
   intervals and the verdict.

Exit codes: 0 kept (or nothing was applied, so nothing to judge), 1 reverted because tuned was not
significantly faster, 2 a benchmark failed (before the apply: nothing changed; after it: reverted,
since a gain that cannot be measured is not shown).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeagent.bench import run, stats

if TYPE_CHECKING:
    from nodeagent.core.finding import Finding
    from nodeagent.tuning.apply import ApplyResult

KEPT = "kept"
REVERTED = "reverted"
NOTHING = "nothing applied"
NOT_APPLIED = "not applied"
EXIT_KEPT, EXIT_REVERTED, EXIT_BENCH_FAILED = 0, 1, 2
# Processes per side in quick mode. Quick runs are short (a repeat is about 0.1 s) and measured
# here to differ by 15-35% from one process to the next (CPU contention of the VM, tf.data's
# autotuner still ramping), against 5-15% between the repeats of one process: with one process a
# side the interval would only hold the within-process part and call chance shifts significant.
# Three a side let the two-stage bootstrap see the spread between processes (nodeagent.bench.stats).
QUICK_PROCESSES = 3


@dataclass
class VerifyResult:
    decision: str  # kept, reverted, nothing applied, not applied
    reason: str
    exit_code: int
    baseline: run.ConfigResult
    tuned: run.ConfigResult | None = None
    comparison: stats.Comparison | None = None
    applied: ApplyResult | None = None
    reverted: list[Finding] = field(default_factory=list)
    tuned_through_exec: bool = False
    sizes: run.Sizes | None = None
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # What the benchmark showed, without the decision: both medians and intervals and the verdict
    # of their ratio, or which benchmark failed (the tune story prints it before kept/reverted).
    measured: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reason": self.reason,
            "measured": self.measured,
            "exit_code": self.exit_code,
            "baseline": self.baseline.to_dict(),
            "tuned": None if self.tuned is None else self.tuned.to_dict(),
            "tuned_through_exec": self.tuned_through_exec,
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
            "journal": None
            if self.applied is None or self.applied.journal is None
            else self.applied.journal.id,
            "revert": [f.to_dict() for f in self.reverted],
            "duration_s": self.duration_s,
            "notes": self.notes,
        }


def _measure(
    name: str, argv: list[str], env: dict[str, str], sizes: run.Sizes, on_progress: run.ProgressFn | None
) -> run.ConfigResult:
    runs = run.run_specs([run.Spec(name, argv, env)], sizes.processes, sizes.timeout_s, on_progress)
    return run.config_result(name, runs[name])


def _shown(c: run.ConfigResult) -> str:
    if c.summary is None:
        return f"{c.name}: {c.status} ({c.reason})"
    s = c.summary
    return f"{c.name} {s.median:.1f} images/s (95% CI {s.ci95[0]:.1f}-{s.ci95[1]:.1f})"


def verify(
    apply_fn: Callable[[], ApplyResult],
    profile_name: str,
    quick: bool,
    repeats: int | None = None,
    processes: int | None = None,
    on_progress: run.ProgressFn | None = None,
    on_phase: Callable[[str, float, float], None] | None = None,
) -> VerifyResult:
    """Baseline, apply (through `apply_fn`), tuned, decide; reverts the journal unless kept."""
    import time

    from nodeagent.tuning import apply, profile

    start = time.monotonic()
    sizes = run.sizes_for(quick, repeats, processes or (QUICK_PROCESSES if quick else None))
    data = run.ensure_data(sizes)
    env = run.without_hook(os.environ)
    plain = run.worker_argv("tuned", data, sizes)

    def phase(label: str, offset: float) -> None:
        if on_phase is not None:
            on_phase(label, offset, 0.5)

    phase("baseline (before applying)", 0.0)
    baseline = _measure("baseline", plain, env, sizes, on_progress)
    if baseline.status != run.OK:
        return VerifyResult(
            NOT_APPLIED,
            f"the baseline benchmark failed, so nothing was applied: {baseline.reason}",
            EXIT_BENCH_FAILED,
            baseline,
            sizes=sizes,
            duration_s=time.monotonic() - start,
            measured=f"the baseline benchmark failed ({baseline.reason})",
        )
    result = apply_fn()
    if result.journal is None:
        return VerifyResult(
            NOTHING,
            "nothing was applied (every value is already as planned): nothing to verify",
            EXIT_KEPT,
            baseline,
            applied=result,
            sizes=sizes,
            duration_s=time.monotonic() - start,
            measured=f"{_shown(baseline)} only: nothing was applied, so there is nothing to compare",
        )
    journal = result.journal
    through_exec = profile.profile_path(profile_name).exists()
    argv = run.exec_argv(profile_name, plain) if through_exec else plain
    try:
        phase("tuned (after applying)", 0.5)
        tuned = _measure("tuned", argv, env, sizes, on_progress)
    except BaseException:
        apply.revert(journal)  # interrupted between apply and decision: leave the node as it was
        raise
    out = VerifyResult(
        KEPT,
        "",
        EXIT_KEPT,
        baseline,
        tuned,
        applied=result,
        tuned_through_exec=through_exec,
        sizes=sizes,
    )
    if tuned.status != run.OK:
        out.decision, out.exit_code = REVERTED, EXIT_BENCH_FAILED
        out.reason = f"the tuned benchmark failed ({tuned.reason}): no gain shown, changes reverted"
        out.measured = f"the tuned benchmark failed ({tuned.reason}), after {_shown(baseline)}"
    else:
        cmp = stats.compare(tuned.groups, baseline.groups, names=("tuned", "baseline"))
        out.comparison = cmp
        both = f"{_shown(tuned)} vs {_shown(baseline)}"
        out.measured = f"{both}; {cmp.reason}"
        if cmp.verdict == stats.FASTER:
            out.reason = f"kept: {both}; {cmp.reason}"
        else:
            out.decision, out.exit_code = REVERTED, EXIT_REVERTED
            out.reason = f"reverted: tuned is not significantly faster: {both}; {cmp.reason}"
    if out.decision == REVERTED:
        out.reverted = apply.revert(journal)
    out.notes = run.busy_notes([baseline, tuned])
    out.duration_s = time.monotonic() - start
    return out
