"""Progress of the long flows as typed events, for the faces to show while the work goes on.

The flows report in their own types as they go: the benchmark's steps and worker ends
(nodeagent.bench.run), the A/B trials' blocks with the estimate so far (nodeagent.bench.ab), a
fleet's host outcomes as each host ends (nodeagent.cluster). The adapters here turn them into the
events below, counting what a face would otherwise count itself (hosts done and failed, pairs
counted), so every face reads one set of events and only decides how to show them
(nodeagent.render.progress: a bar on a terminal, a line per step in a log).

Nothing here prints or keeps time: an event says what happened, the face when.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeagent.bench import ab, run

if TYPE_CHECKING:
    from nodeagent.bench.ab import Block
    from nodeagent.bench.paired import Estimate
    from nodeagent.bench.run import Event as BenchEvent
    from nodeagent.bench.run import Progress as BenchProgress
    from nodeagent.bench.verify import Job
    from nodeagent.bench.verify import Progress as ChangeProgress
    from nodeagent.cluster.runner import HostOutcome

# The phases of a benchmark worker process, as ConfigStep.phase.
STARTED = "started"  # the process is starting: TensorFlow's import, the pipeline, then the warm-up
TIMING = "timing"  # the warm-up is done: the timed repeats run
STEP = "step"  # one more step, warm-up or timed
ENDED = "ended"  # the process ended: its figures, or its error


@dataclass(frozen=True)
class Stage:
    """A part of a flow that is not counted in steps has begun (the benchmark's data set)."""

    flow: str
    what: str


@dataclass(frozen=True)
class ConfigStep:
    """A benchmark worker process: `number` of `of` in the order they run, configuration `config`
    (its process `process` of `processes`), in `phase`; `done` of its `total` steps, the first
    `warmup` of them untimed; `fraction` of the whole benchmark. An ENDED process carries the median
    of its timed repeats' images/s, or its error, and why it is left out and run again, if it is."""

    phase: str
    config: str
    number: int
    of: int
    process: int
    processes: int
    done: int
    total: int
    warmup: int
    fraction: float
    images_per_s: float | None = None
    repeats: int = 0
    error: str | None = None
    again: str | None = None


@dataclass(frozen=True)
class Change:
    """tune --apply --verify: change `number` of `of` (a tuner's plan) is applied, to be judged."""

    flow: str
    tuner: str
    number: int
    of: int


@dataclass(frozen=True)
class Pair:
    """A/B trials: a block (a pair of trials, A and B) ended. `counted` pairs count so far of at
    most `limit`; `a` and `b` are the sides' rates in it (the median of a side's trials), `ratio`
    B/A. A block whose trial failed has `error`; one that other processes disturbed has
    `disturbed`, and `left_out` when it is not counted but run again. `estimate` is the
    statistics' answer when this pair was a planned look (a decided one ends the trials)."""

    flow: str
    change: str | None  # the tuner being judged (tune --verify), else None
    counted: int
    limit: int
    block: int
    order: str
    a: float | None
    b: float | None
    ratio: float | None
    error: str | None = None
    disturbed: str | None = None
    left_out: bool = False
    estimate: Estimate | None = None


@dataclass(frozen=True)
class Hosts:
    """A fleet: `host` ended (`error`: the kind of error it gave no result for, else None);
    `done` of `total` hosts have ended, `errors` of them without a result. The first event, as the
    fleet starts, has no host."""

    done: int
    total: int
    errors: int
    host: str | None = None
    error: str | None = None


Event = Stage | ConfigStep | Change | Pair | Hosts
Emit = Callable[[Event], None]


# -- the benchmark ------------------------------------------------------------------------------


class BenchSteps:
    """nodeagent.bench.run's events as ConfigSteps: a process's first report is STARTED, the first
    past its warm-up TIMING, then STEPs, and its end ENDED with its figures."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.timing: tuple[str, int] | None = None  # the process already told as timing

    def __call__(self, event: BenchEvent) -> None:
        if isinstance(event, run.Preparing):
            self.emit(Stage("bench", f"preparing the data set ({event.images} images)"))
            return
        if isinstance(event, run.WorkerEnded):
            w = event.worker
            rates = list(w.result.get("images_per_s") or []) if w.result else []
            self.emit(
                ConfigStep(
                    ENDED,
                    event.config,
                    event.run,
                    event.runs,
                    event.process,
                    event.processes,
                    0,
                    0,
                    0,
                    event.fraction,
                    statistics.median(rates) if rates and not w.error else None,
                    len(rates),
                    w.error,
                    w.discarded,
                )
            )
            return
        self.emit(self._step(event))

    def _step(self, p: BenchProgress) -> ConfigStep:
        key = (p.config, p.run)
        if p.done == 0 and p.total <= 1:  # the orchestrator's own report as it starts the process
            phase = STARTED
        elif self.timing != key and p.done >= p.warmup and p.total > p.warmup:
            phase, self.timing = TIMING, key
        else:
            phase = STEP
        return ConfigStep(
            phase, p.config, p.run, p.runs, p.process, p.processes, p.done, p.total, p.warmup, p.fraction
        )


# -- A/B trials -----------------------------------------------------------------------------------


class Trials:
    """The A/B trials' blocks (and tune --verify's changes) as Pair and Change events, after a Stage
    that says what is measured (a first pair may take as long as the job). `job` gives the pair
    limit; `flow` names the command in each event."""

    def __init__(self, emit: Emit, job: Job, flow: str = "verify") -> None:
        self.emit = emit
        self.flow = flow
        self.label = job.label
        self.limit = job.design().limit
        self.budget_s = job.budget_s
        self.counted = 0
        self.tuner: str | None = None
        self.started = False

    def start(self) -> None:
        """The Stage, once: when the trials are about to start (for verify), or with tune --verify's
        first change (its tuners and their parameters are checked before that)."""
        if not self.started:
            self.started = True
            each = " per change" if self.tuner is not None else ""
            within = "" if self.budget_s is None else f" within {self.budget_s:.0f} s (start-up included)"
            sizes = f"at most {self.limit} pairs{within}{each}"
            self.emit(Stage(self.flow, f"A/B trials of {self.label}: {sizes}"))

    def change(self, p: ChangeProgress) -> None:
        """tune --verify starts on the next change: its pairs count afresh."""
        self.tuner, self.counted = p.tuner, 0
        self.start()
        self.emit(Change(self.flow, p.tuner, p.number, p.of))

    def block(self, block: Block, estimate: Estimate | None) -> None:
        left_out = not block.counted
        if block.error is None and block.value is not None and not left_out:
            self.counted += 1
        ratio = None if block.value is None else math.exp(block.value)
        look = estimate if estimate is not None and estimate.n == self.counted and not left_out else None
        self.emit(
            Pair(
                self.flow,
                self.tuner,
                self.counted,
                self.limit,
                block.number,
                "".join(block.order),
                _side_rate(block, ab.A),
                _side_rate(block, ab.B),
                ratio,
                block.error,
                block.disturbed,
                left_out,
                look if block.error is None else None,
            )
        )


def _side_rate(block: Block, side: str) -> float | None:
    """The side's rate in the block: the median of its trials (the built-in workload runs many)."""
    rates = [t.rate for t in block.trials if t.side == side and t.rate is not None]
    return statistics.median(rates) if rates else None


# -- fleets ---------------------------------------------------------------------------------------


class HostsDone:
    """A fleet's host outcomes as Hosts events, counted. Thread-safe: a fleet over Slurm reports a
    node as its task ends, from the thread reading the step's output."""

    def __init__(self, emit: Emit, total: int) -> None:
        self.emit = emit
        self.total = total
        self.done = 0
        self.errors = 0
        self.lock = threading.Lock()
        emit(Hosts(0, total, 0))

    def __call__(self, outcome: HostOutcome) -> None:
        with self.lock:
            self.done += 1
            kind = None if outcome.error is None else outcome.error.kind
            self.errors += kind is not None
            self.emit(Hosts(self.done, self.total, self.errors, outcome.name, kind))
