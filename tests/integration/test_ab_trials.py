"""A/B trials on the user's command: the ABBA order, the runtime values switched per side through
the journal (on a fake sysfs root), the verdicts, `tune --apply --verify` judging one change at a
time (a helpful one kept, a harmful one reverted), the history, and the usage errors.

The job is a small Python script whose rate depends on what B is given (a profile variable, a
runtime value it reads from the fake root): the expected verdicts come from the script's own
arithmetic, not from nodeagent.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Change, Plan, Scope, runtime_write
from nodeagent.bench import ab, run, stats
from nodeagent.bench import verify as judged
from nodeagent.core.errors import UsageError
from nodeagent.host import LocalHost
from nodeagent.tuning import apply, history, journal, profile, toggle
from tests.support.cli import RunCli

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
METRIC = r"rate: ([0-9.]+)"
# The job: 100 items/s, x1.3 with HELPFUL=1 in its environment, x0.7 with HARMFUL=1, x1.3 when the
# THP file of the fake root (JOB_ROOT) holds "never"; SPREAD=x adds a deterministic +-x jitter
# from a per-trial counter. Each run appends "<HELPFUL> <HARMFUL> <thp>" to JOB_LOG.
JOB = r"""
import os, sys
root = os.environ.get("JOB_ROOT", "")
thp = open(root + "/sys/kernel/mm/transparent_hugepage/enabled").read().strip() if root else "-"
seen = f"{os.environ.get('HELPFUL', '-')} {os.environ.get('HARMFUL', '-')} {thp}"
log = os.environ.get("JOB_LOG")
count = 0
if log:
    with open(log, "a") as f:
        f.write(seen + "\n")
    count = sum(1 for _ in open(log))
rate = 100.0
if os.environ.get("HELPFUL") == "1":
    rate *= 1.3
if os.environ.get("HARMFUL") == "1":
    rate *= 0.7
if thp.startswith("never") or "[never]" in thp:
    rate *= 1.3
spread = float(os.environ.get("SPREAD", "0"))
rate *= 1 + spread * ((count * 7919) % 11 - 5) / 5
if os.environ.get("JOB_FAIL"):
    print("boom", file=sys.stderr)
    sys.exit(3)
print("warming up")
print(f"rate: {rate:.4f} items/s")
"""


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The job script, a state folder of the test's own, the job's log and fake root."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("JOB_LOG", str(tmp_path / "job.log"))
    knob = tmp_path / "root" / THP.lstrip("/")
    knob.parent.mkdir(parents=True)
    knob.write_text("always [madvise] never\n")
    root = tmp_path / "root"
    monkeypatch.setenv("JOB_ROOT", str(root))
    # A neighbour's CPU use must not make these tests rerun blocks (that has its own test).
    monkeypatch.setattr(run, "BUSY_SHARE", 2.0)
    return script


def seen(tmp_path: Path) -> list[str]:
    return (tmp_path / "job.log").read_text().splitlines()


def command(script: Path) -> tuple[str, ...]:
    return (sys.executable, str(script))


def thp_journal(tmp_path: Path) -> journal.Journal:
    host = LocalHost(root=str(tmp_path / "root"))
    plan = Plan("thp", [runtime_write("thp", "THP", "why", {THP: host.read(THP)}, "never")])
    j = apply.apply(host, [plan], "default").journal
    assert j is not None
    return j


def setting(tuner: str, key: str) -> Plan:
    return Plan(tuner, [Change(tuner, key, "(unset)", "1", Scope.PROCESS, "why", profile_key=key, value="1")])


# -- the runtime switch --------------------------------------------------------------------------


def test_switch_writes_each_sides_values_and_reads_them_back(job: Path, tmp_path: Path) -> None:
    j = thp_journal(tmp_path)
    path = tmp_path / "root" / THP.lstrip("/")
    assert path.read_text().strip() == "never"
    switch = toggle.RuntimeSwitch([j])
    switch.to(toggle.A)
    assert path.read_text().strip() == "madvise"  # the journal's before, as a selector file takes it
    switch.to(toggle.B)
    assert path.read_text().strip() == "never"
    # A revert from the A state restores too (the value already holds `before`).
    switch.to(toggle.A)
    assert [f.status.value for f in apply.revert(j)] == ["OK"]
    assert journal.find(j.id).state == journal.REVERTED


def test_switch_refuses_a_value_someone_else_changed(job: Path, tmp_path: Path) -> None:
    j = thp_journal(tmp_path)
    path = tmp_path / "root" / THP.lstrip("/")
    path.write_text("always\n")
    with pytest.raises(toggle.ToggleError, match="someone else changed it"):
        toggle.RuntimeSwitch([j]).to(toggle.A)
    assert path.read_text() == "always\n"  # left as it is


def test_switch_refuses_a_journal_naming_a_path_no_tuner_writes(job: Path, tmp_path: Path) -> None:
    j = thp_journal(tmp_path)
    j.writes[0].path = "/etc/passwd"
    with pytest.raises(UsageError, match="/etc/passwd"):
        toggle.RuntimeSwitch([j])


# -- trials --------------------------------------------------------------------------------------


def plain(script: Path, side: str, **env: str) -> ab.Side:
    return ab.Side(side, [sys.executable, str(script)], {**os.environ, **env})


def test_trials_run_abba_and_switch_the_runtime_value_per_side(job: Path, tmp_path: Path) -> None:
    j = thp_journal(tmp_path)
    switch = toggle.RuntimeSwitch([j])
    work = ab.CommandWorkload(plain(job, ab.A), plain(job, ab.B), "job", None)
    result = ab.run_trials(work, judged.Job(("x",), pairs=12).limits(), switch.to)
    order = [t.side for b in result.blocks for t in b.trials]
    assert order[:8] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    # Each trial saw its side's value: A the old one, B the one the apply wrote.
    thp = [line.split(maxsplit=2)[2] for line in seen(tmp_path)]
    assert thp == ["madvise" if s == "A" else "never" for s in order]
    assert result.metric == ab.WALL  # no --metric, not a TensorFlow job: 1 / wall time


def test_a_faster_b_is_called_faster(job: Path, tmp_path: Path) -> None:
    work = ab.CommandWorkload(plain(job, ab.A), plain(job, ab.B, HELPFUL="1", SPREAD="0.02"), "job", None)
    work.pattern = judged.Job(metric=METRIC).pattern()
    work.metric = f"--metric {METRIC}"
    result = ab.run_trials(work, judged.Job(("x",), pairs=20).limits(), lambda side: None)
    assert result.verdict == stats.FASTER and result.exit_code == ab.EXIT_FASTER
    assert result.estimate is not None
    assert result.estimate.ci[0] > 1.2  # the job is 1.3x with HELPFUL=1 (+-2% jitter)
    assert result.pairs < 20  # decided before the limit


# A stand-in for a TensorFlow job: it writes what nodeagent's measuring hook writes at exit
# (nodeagent/hooks/_nodeagent_measure.py), 10 steps/s, or 13 with HELPFUL=1.
HOOKED_JOB = r"""
import json, os
rate = 13.0 if os.environ.get("HELPFUL") == "1" else 10.0
folder = os.environ["NODEAGENT_MEASURE_DIR"]
os.makedirs(folder, exist_ok=True)
doc = {"source": "tf-data-loop", "steps": 105, "warmup_steps": 5, "measured_steps": 100,
       "seconds": 100 / rate, "steps_per_s": rate, "input_wait_s": 0.3 * 100 / rate,
       "input_wait_unknown": None}
with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
    json.dump(doc, f)
"""


def test_a_tensorflow_job_is_compared_by_its_steps_per_second(tmp_path: Path, job: Path) -> None:
    hooked = tmp_path / "hooked.py"
    hooked.write_text(HOOKED_JOB)
    work = ab.CommandWorkload(plain(hooked, ab.A), plain(hooked, ab.B, HELPFUL="1"), "job", None)
    result = ab.run_trials(work, judged.Job(("x",), pairs=12).limits(), lambda side: None)
    assert result.metric == ab.STEPS
    trials = [t for b in result.blocks for t in b.trials]
    assert {(t.side, t.rate) for t in trials} == {("A", 10.0), ("B", 13.0)}
    assert all(t.input_wait == pytest.approx(0.3) for t in trials)
    assert result.verdict == stats.FASTER
    assert result.estimate is not None and result.estimate.ratio == pytest.approx(1.3)


def test_identical_sides_are_no_significant_difference(job: Path, tmp_path: Path) -> None:
    pattern = judged.Job(metric=METRIC).pattern()
    work = ab.CommandWorkload(plain(job, ab.A), plain(job, ab.B), "job", pattern)
    result = ab.run_trials(work, judged.Job(("x",), pairs=20).limits(), lambda side: None)
    assert result.verdict == stats.SAME and result.exit_code == ab.EXIT_NOT_FASTER
    assert result.estimate is not None and result.estimate.ci == (1.0, 1.0)


def test_a_disturbed_block_is_left_out_and_run_again(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other processes took half the CPUs during the first two blocks' trials: those blocks are
    reported, not counted, and run again; the verdict rests on the quiet ones."""
    shares = iter([0.5, 0.5, 0.5, 0.5])
    monkeypatch.setattr(run, "BUSY_SHARE", 0.05)
    monkeypatch.setattr(run, "interference", lambda *a: next(shares, 0.0))
    work = ab.CommandWorkload(
        plain(job, ab.A), plain(job, ab.B, HELPFUL="1"), "job", judged.Job(metric=METRIC).pattern()
    )
    result = ab.run_trials(work, judged.Job(("x",), pairs=12).limits(), lambda side: None)
    assert [b.counted for b in result.blocks[:3]] == [False, False, True]
    assert result.blocks[0].disturbed == "other processes used 50% of the CPU time during the pair"
    assert result.disturbed == 2 and result.pairs == len(result.blocks) - 2
    assert "2 block(s) disturbed by other processes" in result.notes[0]
    assert result.verdict == stats.FASTER


class FixedWorkload:
    """Blocks whose log(B/A) are `values` in turn, each from an A and a B trial of those rates."""

    label = "fixed"
    metric = ab.WALL

    def __init__(self, values: list[float]) -> None:
        self.values = iter(values)

    def block(self, number: int, order: tuple[str, str], switch: ab.Switch, on_trial: ab.TrialFn) -> ab.Block:
        value = next(self.values)
        rates = {ab.A: 100.0, ab.B: 100.0 * math.exp(value)}
        out = ab.Block(
            number, order, [ab.Trial(2 * number + i, number, s, rates[s], 1.0) for i, s in enumerate(order)]
        )
        out.value = value
        return out

    def close(self) -> None:
        return None


def test_trials_that_run_to_the_pair_limit_say_so() -> None:
    """B and A by turns 20% apart either way: never significant, never precise, so the trials run
    until the limit, which is why they stopped (the last look decides, but the limit stopped them)."""
    limits = judged.Job(("x",), pairs=12).limits()
    result = ab.run_trials(FixedWorkload([0.2, -0.2] * 6), limits, lambda side: None)
    assert result.pairs == limits.design.limit == 12
    assert result.stopped == "the pair limit (12) was reached"
    assert result.verdict == stats.SAME


def test_trials_decided_before_the_limit_say_after_how_many_pairs() -> None:
    limits = judged.Job(("x",), pairs=40).limits()
    result = ab.run_trials(FixedWorkload([0.3] * 40), limits, lambda side: None)
    assert result.verdict == stats.FASTER and result.pairs < 40
    assert result.stopped == f"decided after {result.pairs} pairs"


class Clock:
    """A clock that only moves when a block runs: its blocks take `block_s` seconds each (or in turn
    from a list), with `head_s` of preparation before the trials."""

    def __init__(self, block_s: float | list[float], head_s: float = 0.0) -> None:
        self.now = 1000.0
        self.started = self.now
        self.now += head_s
        self.durations = iter(block_s) if isinstance(block_s, list) else None
        self.block_s = block_s if isinstance(block_s, float) else 0.0

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += next(self.durations) if self.durations is not None else self.block_s


class TimedWorkload(FixedWorkload):
    def __init__(self, values: list[float], clock: Clock) -> None:
        super().__init__(values)
        self.clock = clock

    def block(self, number: int, order: tuple[str, str], switch: ab.Switch, on_trial: ab.TrialFn) -> ab.Block:
        self.clock.tick()
        return super().block(number, order, switch, on_trial)


def budgeted(job: judged.Job, clock: Clock) -> ab.Limits:
    return replace(job.limits(clock.started), clock=clock)


def test_a_budget_holds_with_the_preparation_and_ends_with_a_final_look() -> None:
    """--quick on a command: 165 s from the start of the preparation (20 s of it here), blocks of
    7 s: 20 of them fit (20 + 20 x 7 = 160 s, a 21st would end at 167 s). B and A 20% apart by
    turns: no answer, so the final look at 20 pairs says the budget could not decide."""
    clock = Clock(7.0, head_s=20.0)
    limits = budgeted(judged.Job(("x",), quick=True), clock)
    result = ab.run_trials(TimedWorkload([0.2, -0.2] * 100, clock), limits, lambda side: None)
    assert result.pairs == 20
    assert clock.now - clock.started <= judged.QUICK_BUDGET_S
    assert result.stopped == "the time budget (165 s, start-up included) was reached after 20 pairs"
    assert result.verdict == stats.UNDECIDED and result.estimate is not None
    assert result.estimate.n == 20 and result.estimate.decided
    assert result.exit_code == ab.EXIT_NOT_FASTER


def test_a_budget_predicts_the_next_block_from_the_longest_recent_one() -> None:
    """Blocks of 5 s, then the machine gets busy and they take 30 s: the trials stop when the
    longest of the last three would pass the budget, not after it."""
    clock = Clock([5.0] * 20 + [30.0] * 20)
    limits = budgeted(judged.Job(("x",), quick=True), clock)
    result = ab.run_trials(TimedWorkload([0.2, -0.2] * 100, clock), limits, lambda side: None)
    # 20 x 5 = 100 s, then 30 s blocks: 130 and 160 s; a third would end at 190 s.
    assert result.pairs == 22
    assert clock.now - clock.started == 160.0


def test_a_budget_too_short_for_any_verdict_says_so_after_the_second_pair() -> None:
    """A first pair of 60 s (cold caches), then pairs of 40 s: 3 fit in 165 s, and at least 6 all of
    one sign are needed to show a difference at 95%: the trials stop after the second pair (the
    first alone would overstate the time a pair takes) and say why."""
    clock = Clock([60.0] + [40.0] * 10)
    limits = budgeted(judged.Job(("x",), quick=True), clock)
    result = ab.run_trials(TimedWorkload([0.3] * 10, clock), limits, lambda side: None)
    assert result.pairs == 2
    assert result.stopped.startswith("a pair takes 40.0 s, so only 3 pair(s) fit in the time budget of 165 s")
    assert "at least 6 are needed" in result.stopped
    assert result.verdict == stats.UNDECIDED


def test_a_budget_spent_on_disturbed_pairs_cannot_decide() -> None:
    """Every pair disturbed by a neighbour: each is left out and run again until the budget is
    spent, and the verdict is that the budget could not decide (not a failed trial: exit 1)."""
    clock = Clock(7.0)
    limits = budgeted(judged.Job(("x",), quick=True), clock)
    workload = TimedWorkload([0.1] * 100, clock)
    original = workload.block

    def disturbed(number: int, order: tuple[str, str], switch: ab.Switch, on_trial: ab.TrialFn) -> ab.Block:
        out = original(number, order, switch, on_trial)
        out.disturbed = "other processes used 60% of the CPU time during the pair"
        return out

    workload.block = disturbed  # type: ignore[method-assign]
    result = ab.run_trials(workload, limits, lambda side: None)
    assert result.pairs == 0 and result.failed is None
    assert result.verdict == stats.UNDECIDED and result.exit_code == ab.EXIT_NOT_FASTER
    assert result.undecided == (
        "could not decide within the budget: every pair was disturbed by other processes"
    )


def test_a_clear_change_is_decided_before_the_budget() -> None:
    clock = Clock(7.0)
    limits = budgeted(judged.Job(("x",), quick=True), clock)
    result = ab.run_trials(TimedWorkload([0.1] * 100, clock), limits, lambda side: None)
    assert result.verdict == stats.FASTER
    assert result.stopped == "decided after 11 pairs"


# -- nodeagent verify ------------------------------------------------------------------------------


def write_profile(tmp_path: Path, name: str, env: dict[str, str]) -> None:
    path = profile.profile_path(name, tmp_path / "state")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"env": env}))


def verify_cli(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli("verify", *args)
    try:
        return code, json.loads(out)
    except ValueError:
        raise AssertionError(f"exit {code}, not JSON: {out}{err}") from None


def test_verify_calls_a_faster_profile_faster_and_records_it(
    job: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    write_profile(tmp_path, "fast", {"HELPFUL": "1"})
    code, doc = verify_cli(
        run_cli, "--profile", "fast", "--metric", METRIC, "--format", "json", "--", *command(job)
    )
    assert code == 0, doc
    assert doc["verdict"] == stats.FASTER
    assert doc["settings"] == {"env.HELPFUL": "1"}
    # Both sides ran through `nodeagent exec`: A with an empty profile, B with "fast".
    helpful = [line.split()[0] for line in seen(tmp_path)]
    assert helpful.count("1") == helpful.count("-") == len(doc["blocks"])
    records = history.read(tmp_path / "state")
    assert [(r.change, r.verdict, r.decision, r.profile) for r in records] == [
        ("profile", stats.FASTER, judged.MEASURED, "fast")
    ]
    assert records[0].command == list(command(job))


def test_verify_reports_a_failing_job_in_one_line(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    write_profile(tmp_path, "fast", {"HELPFUL": "1"})
    monkeypatch.setenv("JOB_FAIL", "1")
    code, doc = verify_cli(run_cli, "--profile", "fast", "--format", "json", "--", *command(job))
    assert code == 2
    assert "exited with status 3: boom" in doc["failed"]


def test_verify_says_when_the_metric_is_not_in_the_output(job: Path, tmp_path: Path, run_cli: RunCli) -> None:
    write_profile(tmp_path, "fast", {"HELPFUL": "1"})
    loss = r"loss: ([0-9.]+)"
    code, doc = verify_cli(
        run_cli, "--profile", "fast", "--metric", loss, "--format", "json", "--", *command(job)
    )
    assert code == 2
    assert "matched --metric" in doc["failed"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "absent", "--", "true"], "no profile 'absent'"),
        (["--profile", "fast", "--metric", "rate: ([", "--", "true"], "not a regular expression"),
        (["--profile", "fast", "--metric", "rate: (.*)"], "give the command after `--`"),
        (["--profile", "fast", "--pairs", "3", "--", "true"], "--pairs 3"),
    ],
)
def test_verify_usage_errors(
    job: Path, tmp_path: Path, args: list[str], message: str, run_cli: RunCli
) -> None:
    write_profile(tmp_path, "fast", {"HELPFUL": "1"})
    code, out, err = run_cli("verify", *args)
    assert code == 64, out + err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert not seen_any(tmp_path)  # refused before any trial


def seen_any(tmp_path: Path) -> bool:
    return (tmp_path / "job.log").exists()


# -- tune --apply --verify: one change at a time ---------------------------------------------------


def test_one_change_at_a_time_keeps_the_helpful_and_reverts_the_harmful(job: Path, tmp_path: Path) -> None:
    host = LocalHost(root=str(tmp_path / "root"))
    plans = [
        setting("tf-threads", "env.HARMFUL"),
        Plan("thp", [runtime_write("thp", "THP", "why", {THP: host.read(THP)}, "never")]),
        setting("tf-data", "env.HELPFUL"),
    ]
    result = judged.one_at_a_time(host, plans, "default", judged.Job(command(job), METRIC))
    assert [(c.tuner, c.decision) for c in result.changes] == [
        ("tf-threads", judged.REVERTED),
        ("thp", judged.KEPT),
        ("tf-data", judged.KEPT),
    ]
    verdicts = [c.result.verdict for c in result.changes if c.result is not None]
    assert verdicts == [stats.SLOWER, stats.FASTER, stats.FASTER]
    assert result.exit_code == judged.EXIT_KEPT
    # The profile holds only what was kept; the runtime value stays as the kept change wrote it.
    saved = profile.load("default")
    assert saved["env"] == {"HELPFUL": "1"}
    assert host.read(THP) is not None and host.read(THP).strip() == "never"  # type: ignore[union-attr]
    states = [journal.find(c.journal.id).state for c in result.changes if c.journal is not None]
    assert states == [journal.REVERTED, journal.APPLIED, journal.APPLIED]
    # The third change was judged against the node with the second one kept: A saw THP "never" too.
    last = seen(tmp_path)[-4:]
    assert {line.split(maxsplit=2)[2] for line in last} == {"never"}
    records = history.read()
    assert [(r.change, r.decision) for r in records] == [
        ("tf-threads", judged.REVERTED),
        ("thp", judged.KEPT),
        ("tf-data", judged.KEPT),
    ]
    assert records[1].runtime[0].after == "never"
    assert records[2].settings == {"env.HELPFUL": "1"}
    story = judged.stepwise_story(result, "default")
    assert any(line.startswith("reverted: tf-threads: not significantly faster") for line in story)
    assert any(line.startswith("use: run jobs with `nodeagent exec --profile default") for line in story)


def test_a_failed_trial_reverts_that_change_and_tries_no_more(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_FAIL", "1")
    plans = [setting("tf-threads", "env.HARMFUL"), setting("tf-data", "env.HELPFUL")]
    result = judged.one_at_a_time(LocalHost(), plans, "default", judged.Job(command(job), METRIC))
    assert [c.decision for c in result.changes] == [judged.REVERTED, judged.NOT_RUN]
    assert result.exit_code == judged.EXIT_FAILED
    assert not profile.profile_path("default").exists()


# -- history -------------------------------------------------------------------------------------


def test_history_shows_the_records_and_names_a_bad_line(
    job: Path, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per record: the words are not wrapped
    write_profile(tmp_path, "fast", {"HELPFUL": "1"})
    assert run_cli("verify", "--profile", "fast", "--metric", METRIC, "--", *command(job))[0] == 0
    code, out, _ = run_cli("history", "--format", "json")
    assert code == 0
    assert [r["verdict"] for r in json.loads(out)["records"]] == [stats.FASTER]
    code, out, _ = run_cli("history")
    assert "faster" in out and "measured" in out
    with history.path().open("a") as f:
        f.write('{"time": 3}\n')
    code, out, err = run_cli("history")
    assert code == 64
    assert f"{history.path()}:2:" in err
    assert "Traceback" not in err


def test_each_side_of_the_builtin_workload_keeps_its_own_xla_cache() -> None:
    """A side's later workers reuse what its first one compiled, never the other side's program
    (a profile may change XLA's flags); flags the side already had are kept."""
    argv = [sys.executable, "-c", "pass"]
    work = ab.BuiltinWorkload(
        ab.Side(ab.A, argv, {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}), ab.Side(ab.B, argv, {}), 1, 1.0
    )
    try:
        a, b = (work.sides[s].env["TF_XLA_FLAGS"].split() for s in (ab.A, ab.B))
        assert a[0] == "--tf_xla_auto_jit=2"
        cache_a, cache_b = (f[-1].partition("=")[2] for f in (a, b))
        assert a[-1].startswith("--tf_xla_persistent_cache_directory=") and b[-1].startswith(
            "--tf_xla_persistent_cache_directory="
        )
        assert cache_a != cache_b and Path(cache_a).parent == Path(cache_b).parent == work.folder
    finally:
        work.close()


def test_the_quick_trials_say_their_budget_when_they_start() -> None:
    from nodeagent.app.progress import Trials

    said: list[Any] = []
    Trials(said.append, judged.Job(("train.py",), quick=True)).start()
    Trials(said.append, judged.Job(("train.py",))).start()
    assert [e.what for e in said] == [
        "A/B trials of train.py: at most 200 pairs within 165 s (start-up included)",
        "A/B trials of train.py: at most 40 pairs",
    ]
