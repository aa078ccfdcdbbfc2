"""A/B trials: a job as it is (A) against the same job tuned (B), interleaved, paired, sequential.

Design (the statistics are nodeagent.bench.paired's; this module runs the trials):
- Trials come in **blocks**. Block i runs its sides in the order AB when i is even and BA when it
  is odd, so the sequence is A B B A A B B A ...: a drift of the machine (another tenant, the page
  cache warming, a vCPU slowing down) affects both sides alike instead of favouring the side that
  ran first (the ABBA counterbalancing of crossover trials; Kalibera & Jones, "Rigorous
  Benchmarking in Reasonable Time", ISMM 2013: never run all of one configuration, then all of the
  other).
- Each block gives one value, log(rate B / rate A): the two sides of a block ran seconds apart, so
  the machine's slow changes cancel in the ratio. The verdict and interval come from these paired
  values, never from the two sides' separate spreads.
- A **user command** runs as a fresh process per trial (A: the command as it is; B: through
  `nodeagent exec --profile P`): a block is one A trial and one B trial.
- The **built-in workload** starts one worker process per side per block (concurrently), warms
  both up once, and then measures them alternately, many short repeats each (`worker --serve`);
  the block's value is the median of its pairs' log ratios. Processes may differ from each other
  (thread placement, memory layout, tf.data's autotuning), so a block is a pair of processes and
  the analysis counts blocks, not repeats: repeats of the same two processes would make a
  process's luck look like an effect.
- Runtime-scope changes (sysfs, /proc/sys) are switched before every trial to the side's state
  (nodeagent.tuning.toggle), through the journal that applied them.
- A trial during which other processes took more than run.BUSY_SHARE of the CPUs (psutil's
  /proc/stat reading: steal included) is **disturbed**: its block is reported and run again (at
  most `max_reruns` times), since its figures say more about the neighbour than about the change.
- The trials stop at a planned look when the interval is decided (nodeagent.bench.paired:
  significant either way, or within the precision asked for), at the block limit, or before a block
  that would end past the time budget (start-up included): the verdict is then a final look at the
  blocks done, at nearly the full 95%, or "could not decide within the budget".

Rates are "higher is better": steps/s from nodeagent's measuring hook (TensorFlow jobs, no code
change), a figure read from the job's output with --metric REGEX (the first group of the last
matching line), or 1 / the job's wall time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Protocol

from pydantic import Field, computed_field, field_serializer
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.bench import job_process, measure, metric, paired, run, stats
from nodeagent.core import document, limits

A, B = "A", "B"
EXIT_FASTER, EXIT_NOT_FASTER, EXIT_FAILED = 0, 1, 2
FAILED = "failed"
STEPS = "steps/s"
WALL = "1 / wall time"
IMAGES = "images/s"
TAIL_LINES = 8
# A trial's time limit, unless --trial-timeout gives one: the first trial may take up to an hour;
# once the first A trial has run, LIMIT_FACTOR times its wall time (at least LIMIT_MIN_S). A job's
# runs vary by tens of percent, never by a factor of five; one that does is stuck.
FIRST_TRIAL_LIMIT_S = 3600.0
LIMIT_FACTOR = 5.0
LIMIT_MIN_S = 60.0


@dataclass(frozen=True)
class Side:
    """How one side runs: its command line and environment."""

    name: str  # A or B
    argv: list[str]
    env: dict[str, str]


# A trial is its own document (the verify report's "trials"): a pydantic dataclass, its fields in the
# order the report writes them.
@pydantic_dataclass(config=document.LATE)
class Trial:
    number: Annotated[int, Field(serialization_alias="trial")]  # 1, 2, ... in the order run
    block: int
    side: str
    rate: float | None
    wall_s: float
    interference: float | None = None  # share of the CPUs other processes took (None: unknown)
    input_wait: Annotated[float | None, Field(serialization_alias="input_wait_fraction")] = None
    error: str | None = None
    # The worker's own CPU seconds (built-in workload), told apart from other processes' CPU time;
    # not in the report.
    cpu_s: Annotated[float | None, Field(exclude=True)] = None
    leftovers: list[str] = Field(default_factory=list)  # processes it left running, stopped


@pydantic_dataclass(config=document.LATE)
class Block(document.InKeyOrder):
    document_keys = ("block", "order", "ratio", "disturbed", "counted", "trials")

    number: Annotated[int, Field(serialization_alias="block")]
    order: tuple[str, str]
    trials: list[Trial] = Field(default_factory=list)
    value: Annotated[float | None, Field(exclude=True)] = None  # log(B/A); the median over the block's pairs
    disturbed: str | None = None
    counted: bool = True

    @property
    def error(self) -> str | None:
        return next((t.error for t in self.trials if t.error), None)

    @field_serializer("order")
    def _sides(self, order: tuple[str, str]) -> str:
        return "".join(order)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float | None:
        """Rate B / rate A."""
        return None if self.value is None else math.exp(self.value)


TrialFn = Callable[[Trial], None]
Switch = Callable[[str], None]


class Workload(Protocol):
    """Runs one block of trials; `metric` names what its rates are."""

    metric: str
    label: str

    def block(self, number: int, order: tuple[str, str], switch: Switch, on_trial: TrialFn) -> Block: ...

    def close(self) -> None: ...


@pydantic_dataclass(config=document.LATE)
class ABResult(document.InKeyOrder):
    document_keys = (
        "workload",
        "metric",
        "verdict",
        "exit_code",
        "estimate",
        "pairs",
        "disturbed_blocks",
        "stopped",
        "failed",
        "undecided",
        "wall_s",
        "design",
        "blocks",
        "notes",
    )

    workload: str  # the command as typed, or "built-in tf.data + XLA benchmark"
    metric: str
    design: paired.Design
    blocks: list[Block]
    estimate: paired.Estimate | None
    stopped: str  # why the trials stopped
    failed: str | None
    wall_s: float
    notes: list[str] = Field(default_factory=list)
    undecided: str | None = None  # the budget ended the trials before any pair counted: why

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> str:
        if self.failed is None and self.estimate is None and self.undecided is not None:
            return stats.UNDECIDED
        if self.failed is not None or self.estimate is None:
            return FAILED
        return self.estimate.verdict

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        if self.verdict == FAILED:
            return EXIT_FAILED
        return EXIT_FASTER if self.verdict == stats.FASTER else EXIT_NOT_FASTER

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pairs(self) -> int:
        return sum(1 for b in self.blocks if b.counted and b.value is not None)

    @computed_field(alias="disturbed_blocks")  # type: ignore[prop-decorator]
    @property
    def disturbed(self) -> int:
        return sum(1 for b in self.blocks if b.disturbed)


# -- the sequential loop -------------------------------------------------------------------------


def order_of(block: int) -> tuple[str, str]:
    """ABBA counterbalancing: AB for even blocks, BA for odd ones."""
    return (A, B) if block % 2 == 0 else (B, A)


@dataclass(frozen=True)
class Limits:
    design: paired.Design
    budget_s: float | None = None  # the whole run's wall time, start-up included (see run_trials)
    max_reruns: int | None = None  # disturbed blocks run again at most this often (None: limit // 4)
    started: float | None = None  # clock() when the budget began (None: when the trials start)
    clock: Callable[[], float] = time.monotonic


# How many of the latest blocks predict the next one's duration (their longest): a machine that
# became busier shows in the last blocks first.
RECENT_BLOCKS = 3


def run_trials(
    workload: Workload,
    limits: Limits,
    switch: Switch,
    on_trial: TrialFn | None = None,
    on_block: Callable[[Block, paired.Estimate | None], None] | None = None,
) -> ABResult:
    """Blocks until the design decides, the block limit, or the time budget; the workload is closed.

    Under a budget, a block is started only when the longest of the latest blocks would still end
    within it, so the budget holds (start-up included) on a loaded machine too; the trials then end
    with the design's final look at the blocks done (paired.analyse(final=True)). When the first
    blocks show that too few fit to ever show a difference, the trials stop there and say so.
    """
    clock = limits.clock
    start = clock()
    since = limits.started if limits.started is not None else start
    design = limits.design
    reruns_left = design.limit // 4 if limits.max_reruns is None else limits.max_reruns
    blocks: list[Block] = []
    durations: list[float] = []
    values: list[float] = []
    estimate: paired.Estimate | None = None
    stopped = f"the pair limit ({design.limit}) was reached"
    failed = None
    out_of_time: str | None = None
    try:
        while len(values) < design.limit:
            out_of_time = _no_time_for_more(limits, clock() - since, durations, len(values))
            if out_of_time is not None:
                break
            began = clock()
            block = workload.block(len(blocks) + 1, order_of(len(blocks)), switch, on_trial or _ignore)
            durations.append(clock() - began)
            blocks.append(block)
            if block.error is not None or block.value is None:
                failed = block.error or f"block {block.number} gave no figure"
                stopped = "a trial failed"
                break
            if block.disturbed and reruns_left > 0:
                reruns_left -= 1
                block.counted = False
                _tell(on_block, block, estimate)
                continue
            values.append(block.value)
            if len(values) in design.looks:
                estimate = paired.analyse(values, design)
            _tell(on_block, block, estimate)
            if estimate is not None and estimate.decided:
                # The last look always decides: there the limit, not the answer, stopped the trials.
                if len(values) < design.limit:
                    stopped = f"decided after {len(values)} pairs"
                break
    finally:
        workload.close()
    undecided = None
    if out_of_time is not None and failed is None:
        stopped = out_of_time
        estimate, undecided = _final_look(values, design)
    if failed is None and estimate is None and undecided is None:
        failed = f"too few pairs to judge: {len(values)}, at least {design.looks[0]} are needed"
    notes = _notes(blocks, reruns_left)
    wall = clock() - start
    return ABResult(
        workload.label, workload.metric, design, blocks, estimate, stopped, failed, wall, notes, undecided
    )


def _final_look(values: Sequence[float], design: paired.Design) -> tuple[paired.Estimate | None, str | None]:
    """The budget's final look, or why there is none: every pair was left out as disturbed (the
    machine was too busy to judge)."""
    if values:
        return paired.analyse(values, design, final=True), None
    return None, f"{stats.UNDECIDED}: every pair was disturbed by other processes"


def _ignore(_: Trial) -> None:
    return None


def _tell(
    on_block: Callable[[Block, paired.Estimate | None], None] | None,
    block: Block,
    est: paired.Estimate | None,
) -> None:
    if on_block is not None:
        on_block(block, est)


def _no_time_for_more(limits: Limits, elapsed: float, durations: Sequence[float], pairs: int) -> str | None:
    """Why no further block may start under the budget (None: it may, or there is no budget). The
    next block is predicted to take as long as the longest of the latest ones, the first block left
    out once there are others (it pays for cold caches and compilation); before the first block
    nothing is known, and it runs. After the second block, when too few blocks fit to ever show a
    difference, the trials stop and say so."""
    budget = limits.budget_s
    if budget is None or not durations:
        return None
    left = budget - elapsed
    recent = durations[1:] or durations
    block_s = max(recent[-RECENT_BLOCKS:])
    fits = pairs + max(0, math.floor(left / block_s)) if block_s > 0 else limits.design.limit
    # The final look's interval can exclude 1 only from this many pairs on.
    needed = paired.min_blocks(limits.design.final_level(limits.design.limit))
    if len(durations) == 2 and fits < needed:
        return (
            f"a pair takes {block_s:.1f} s, so only {fits} pair(s) fit in the time budget of {budget:.0f} s "
            f"(start-up included), and at least {needed} are needed to ever show a difference: give the "
            "trials more time (without --quick) or a shorter job"
        )
    if left >= block_s:
        return None
    return f"the time budget ({budget:.0f} s, start-up included) was reached after {pairs} pairs"


def _notes(blocks: Sequence[Block], reruns_left: int) -> list[str]:
    out = _leftover_notes(blocks)
    dropped = [b for b in blocks if not b.counted]
    if dropped:
        out.append(
            f"{len(dropped)} block(s) disturbed by other processes (more than {run.BUSY_SHARE:.0%} of the "
            "CPUs) were left out and run again"
        )
    kept_disturbed = [b for b in blocks if b.disturbed and b.counted]
    if kept_disturbed and reruns_left == 0:
        out.append(
            f"{len(kept_disturbed)} disturbed block(s) are counted: the reruns allowed were used up; "
            "rerun on a quiet machine"
        )
    return out


def _leftover_notes(blocks: Sequence[Block]) -> list[str]:
    left = [t for b in blocks for t in b.trials if t.leftovers]
    if not left:
        return []
    first = left[0]
    return [
        f"{len(left)} trial(s) left processes running after the job ended, stopped at the trial's end "
        f"({sum(len(t.leftovers) for t in left)} in all; trial {first.number} (side {first.side}): "
        f"{', '.join(first.leftovers[:5])})"
    ]


# -- a user's command ----------------------------------------------------------------------------


def _tail(path: Path) -> str:
    """The last TAIL_LINES lines of a worker's error output file (its last 16 KiB read)."""
    return "\n".join(_read_capped(path, 16384).splitlines()[-TAIL_LINES:])


def _read_capped(path: Path, cap: int) -> str:
    """The last `cap` bytes of a file as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - cap))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class CommandWorkload:
    """A user's command, one fresh process per trial (B through `nodeagent exec --profile P`)."""

    def __init__(
        self,
        a: Side,
        b: Side,
        label: str,
        metric: re.Pattern[str] | None = None,
        trial_limit_s: float | None = None,
    ) -> None:
        self.sides = {A: a, B: b}
        self.label = label
        self.pattern = metric
        self.metric = f"--metric {metric.pattern}" if metric is not None else ""
        self.trials = 0
        self.folder = Path(tempfile.mkdtemp(prefix="nodeagent-verify-"))
        self.trial_limit_s = trial_limit_s  # --trial-timeout; None: from the first A trial
        self.first_a_s: float | None = None
        self.keep = limits.limit("NODEAGENT_TRIAL_TAIL_LINES")

    def limit(self) -> tuple[float, str]:
        """The time limit of the next trial, and where it comes from."""
        if self.trial_limit_s is not None:
            return self.trial_limit_s, "--trial-timeout"
        if self.first_a_s is None:
            return FIRST_TRIAL_LIMIT_S, "the limit of a first trial; give --trial-timeout SECONDS"
        limit_s = max(LIMIT_FACTOR * self.first_a_s, LIMIT_MIN_S)
        first = f"{self.first_a_s:.1f} s"
        return limit_s, f"{LIMIT_FACTOR:g} x the first A trial's {first}, at least {LIMIT_MIN_S:g} s"

    def block(self, number: int, order: tuple[str, str], switch: Switch, on_trial: TrialFn) -> Block:
        out = Block(number, order)
        found: dict[str, tuple[float | None, measure.JobFigures | None, Trial]] = {}
        for side in order:
            switch(side)
            trial, figures = self._trial(number, side)
            found[side] = (trial.rate, figures, trial)
            out.trials.append(trial)
            if trial.error is None:
                self._rate(trial, figures, found)
            on_trial(trial)
            if trial.error is not None:
                return out
        ra, rb = found[A][2].rate, found[B][2].rate
        if ra is None or rb is None:
            return out
        out.value = math.log(rb / ra)
        share = _block_share(out.trials)
        if share is not None and share > run.BUSY_SHARE:
            out.disturbed = f"other processes used {share:.0%} of the CPU time during the pair"
        return out

    def _rate(
        self,
        trial: Trial,
        figures: measure.JobFigures | None,
        found: dict[str, tuple[float | None, measure.JobFigures | None, Trial]],
    ) -> None:
        """Fill the trial's rate by the workload's metric, chosen on the first trial: steps/s when
        nodeagent's hook measured the job, else 1 / wall time (--metric: always the job's figure)."""
        if self.pattern is not None:
            return  # read in _trial from the output
        if not self.metric:
            self.metric = STEPS if figures is not None and figures.steps_per_s else WALL
        if self.metric == STEPS:
            if figures is None or not figures.steps_per_s:
                trial.error = (
                    f"trial {trial.number} (side {trial.side}): nodeagent's hook saw no TensorFlow training "
                    "steps this time, though it did before; give --metric REGEX to read the job's own figure"
                )
                return
            trial.rate = figures.steps_per_s
            trial.input_wait = figures.input_wait_fraction
        else:
            trial.rate = 1.0 / trial.wall_s if trial.wall_s > 0 else None

    def _trial(self, block: int, side: str) -> tuple[Trial, measure.JobFigures | None]:
        self.trials += 1
        n = self.trials
        spec = self.sides[side]
        where = self.folder / f"trial-{n}"
        where.mkdir()
        env = measure.hook_env(spec.env, where / "measure")
        limit_s, why = self.limit()
        busy0, own0 = run.busy_cpu_s(), run.own_cpu_s()
        try:
            ended = job_process.run(spec.argv, env, limit_s, self.keep)
        except OSError as e:
            t = Trial(n, block, side, None, 0.0, error=f"cannot start {spec.argv[0]}: {e.strerror or e}")
            return t, None
        busy1 = run.busy_cpu_s()
        share = None
        if busy0 is not None and busy1 is not None:
            share = run.interference(busy1 - busy0, run.own_cpu_s() - own0, ended.wall_s, os.cpu_count() or 1)
        trial = Trial(n, block, side, None, ended.wall_s, share, leftovers=ended.leftovers)
        figures = measure.read(where / "measure")
        shutil.rmtree(where, ignore_errors=True)  # nothing of a trial is kept past it
        trial.error = _failure(n, side, ended, limit_s, why)
        if trial.error is not None:
            return trial, None
        if side == A and self.first_a_s is None:
            self.first_a_s = ended.wall_s
        if self.pattern is not None:
            trial.error = self._read_metric(trial, ended)
        return trial, figures

    def _read_metric(self, trial: Trial, ended: job_process.Ended) -> str | None:
        """Fill the trial's rate from the job's output; the error when it cannot."""
        assert self.pattern is not None
        try:
            trial.rate = metric.rate(self.pattern.pattern, ended.stdout + ended.stderr)
        except metric.MetricError as e:
            return f"trial {trial.number} (side {trial.side}): {e}"
        if trial.rate is not None:
            return None
        return (
            f"trial {trial.number} (side {trial.side}): no line of the job's output (its last {self.keep} "
            f"lines on each stream) matched --metric {self.pattern.pattern!r} with a positive number in "
            "its first group"
        )

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _block_share(trials: Sequence[Trial]) -> float | None:
    """The share of the CPUs other processes took over the block's trials (their wall-weighted
    mean). Over the whole block, not trial by trial: /proc/stat counts in ticks of 10 ms, about 5%
    of two CPUs over a trial of 0.4 s, too coarse to judge one short trial alone."""
    known = [t for t in trials if t.interference is not None and t.wall_s > 0]
    wall = sum(t.wall_s for t in known)
    if not known or wall <= 0:
        return None
    return sum((t.interference or 0.0) * t.wall_s for t in known) / wall


def _failure(n: int, side: str, ended: job_process.Ended, limit_s: float, why: str) -> str | None:
    """Why the trial failed (past its limit, or a non-zero exit), None when it did not."""
    if ended.timed_out:
        return (
            f"trial {n} (side {side}): still running after {limit_s:.0f} s ({why}): its processes were "
            "stopped"
        )
    if ended.code == 0:
        return None
    last = [line for line in ended.stderr if line.strip()][-1:] or ["no message"]
    return f"trial {n} (side {side}): the job exited with status {ended.code}: {last[-1].strip()[:300]}"


# -- the built-in workload -----------------------------------------------------------------------


class _Worker:
    """One `worker --serve` process: started, warmed up, then one repeat per `run` line."""

    def __init__(self, side: Side, stderr: IO[bytes]) -> None:
        self.side = side
        # A session of its own, as a trial of a user's job: stopped whole when the trials are.
        self.proc = subprocess.Popen(
            side.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=side.env,
            start_new_session=True,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def reply(self, timeout_s: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"no answer in {timeout_s:.0f} s") from None
        if not line:
            raise RuntimeError(f"exited with status {self.proc.wait()}")
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise RuntimeError("answered something that is not a JSON object")
        return doc

    def run(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"run\n")
        self.proc.stdin.flush()
        return self.reply(timeout_s)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class BuiltinWorkload:
    """The benchmark's own pipeline, one pair of warmed-up `worker --serve` processes per block."""

    label = "built-in tf.data + XLA benchmark"
    metric = IMAGES

    def __init__(self, a: Side, b: Side, pairs_per_block: int, timeout_s: float) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="nodeagent-verify-"))
        self.sides = {s.name: _xla_cached(s, self.folder / f"xla-{s.name}") for s in (a, b)}
        self.pairs_per_block = pairs_per_block
        self.timeout_s = timeout_s
        self.trials = 0
        self.ready: dict[str, dict[str, Any]] = {}

    def block(self, number: int, order: tuple[str, str], switch: Switch, on_trial: TrialFn) -> Block:
        out = Block(number, order)
        with self._workers(number) as (workers, problem):
            if problem is not None:
                out.trials.append(Trial(self.trials + 1, number, A, None, 0.0, error=problem))
                return out
            ratios: list[float] = []
            busy0, own0, start = run.busy_cpu_s(), run.own_cpu_s(), time.monotonic()
            worker_cpu = 0.0
            for k in range(self.pairs_per_block):
                rates: dict[str, float] = {}
                for side in order if k % 2 == 0 else order[::-1]:
                    switch(side)
                    trial = self._trial(workers[side], number, side)
                    out.trials.append(trial)
                    on_trial(trial)
                    if trial.error is not None or trial.rate is None:
                        return out
                    rates[side] = trial.rate
                    worker_cpu += trial.cpu_s or 0.0
                ratios.append(math.log(rates[B] / rates[A]))
            out.value = statistics.median(ratios)
            out.disturbed = _disturbed(busy0, own0, worker_cpu, time.monotonic() - start)
        return out

    @contextlib.contextmanager
    def _workers(self, number: int) -> Iterator[tuple[dict[str, _Worker], str | None]]:
        workers: dict[str, _Worker] = {}
        errs = {s: (self.folder / f"block-{number}-{s}.stderr").open("wb") for s in (A, B)}
        try:
            for s in (A, B):  # both start at once: their start-ups overlap
                workers[s] = _Worker(self.sides[s], errs[s])
            problem = None
            for s in (A, B):
                try:
                    self.ready[s] = workers[s].reply(self.timeout_s)
                except (RuntimeError, ValueError) as e:
                    last = _tail(Path(errs[s].name)).strip().splitlines() or ["no message"]
                    problem = f"block {number}: the side {s} worker did not start: {e}: {last[-1][:300]}"
                    break
            yield workers, problem
        except BaseException:  # interrupted: the workers are stopped now, not after their repeat
            for w in workers.values():
                job_process.stop_session(w.proc)
            raise
        finally:
            for w in workers.values():
                w.stop()
            for f in errs.values():
                f.close()

    def _trial(self, worker: _Worker, block: int, side: str) -> Trial:
        self.trials += 1
        start = time.monotonic()
        try:
            doc = worker.run(self.timeout_s)
        except (RuntimeError, ValueError, OSError) as e:
            return Trial(
                self.trials, block, side, None, time.monotonic() - start, error=f"side {side} worker: {e}"
            )
        rate = doc.get("images_per_s")
        if (
            isinstance(rate, bool)
            or not isinstance(rate, (int, float))
            or not math.isfinite(rate)
            or rate <= 0
        ):
            return Trial(self.trials, block, side, None, 0.0, error=f"side {side} worker reported {rate!r}")
        cpu = doc.get("cpu_s")
        wait = doc.get("input_wait_fraction")
        trial = Trial(self.trials, block, side, float(rate), time.monotonic() - start)
        trial.cpu_s = float(cpu) if isinstance(cpu, (int, float)) else None
        trial.input_wait = float(wait) if isinstance(wait, (int, float)) else None
        return trial

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _xla_cached(side: Side, folder: Path) -> Side:
    """`side` with its own persistent XLA compilation cache: a side's workers after the first load
    the program its first worker compiled (about 2.5 s of CPU each here) instead of compiling it
    again. One cache per side, so that each side runs what its own settings compile (a profile may
    change XLA's flags). TF_XLA_FLAGS is read by TensorFlow's XLA bridge
    (tensorflow/compiler/jit/flags.cc); a later flag overrides an earlier one."""
    flags = f"{side.env.get('TF_XLA_FLAGS', '')} --tf_xla_persistent_cache_directory={folder}".strip()
    return Side(side.name, side.argv, {**side.env, "TF_XLA_FLAGS": flags})


def _disturbed(busy0: float | None, own0: float, worker_cpu: float, wall: float) -> str | None:
    """Why the block's trials are disturbed (other processes above BUSY_SHARE of the CPUs), or None.
    Measured over the whole block: /proc/stat counts in ticks (10 ms), too coarse for one repeat."""
    busy1 = run.busy_cpu_s()
    if busy0 is None or busy1 is None:
        return None
    ours = run.own_cpu_s() - own0 + worker_cpu
    share = run.interference(busy1 - busy0, ours, wall, os.cpu_count() or 1)
    if share <= run.BUSY_SHARE:
        return None
    return f"other processes used {share:.0%} of the CPU time while the block ran"
