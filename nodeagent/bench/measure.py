"""A TensorFlow job's own training speed and input wait, measured from outside, with no change to it.

The job runs with nodeagent/hooks first on PYTHONPATH and NODEAGENT_MEASURE_DIR set (`hook_env`):
its Python then loads the measuring hook (nodeagent/hooks/_nodeagent_measure.py; its docstring
says what is timed and which steps are warm-up) once it imports TensorFlow, and each of its
processes writes `<pid>.json` into that folder at exit. `read` combines those files, `diagnosis`
says what they mean, `advice` what can speed up each stage of the job's input pipeline (and
whether the tf-data tuner's options can), and `run_measured` runs a command as a child, forwarding
signals, and gathers all of it with the wall time and CPU use (`nodeagent exec --measure`, the A/B
engine).

TensorFlow is never imported here.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from nodeagent.bench import run
from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.tuning import launcher

MEASURE_DIR_ENV = launcher.MEASURE_DIR_ENV  # "NODEAGENT_MEASURE_DIR"
MEASURE_EVERY_ENV = "NODEAGENT_MEASURE_EVERY"
INPUT_BOUND = run.INPUT_BOUND  # the TF profiler's input-bound line, with its reference
GUIDE = run.GUIDE
TF_DATA_TUNER = "tf-data"  # tuners/tf_data.py: parallel map, prefetch, private thread pool
Source = Literal["keras-fit", "tf-data-loop"]  # the hook's KERAS_FIT and TF_DATA_LOOP
SOURCES = get_args(Source)
# The kinds of input stage the hook tells apart by the ops of the pipeline's graph (its `classify`).
StageKind = Literal[
    "python-generator", "python-function", "file-read", "decode", "map", "batch", "prefetch", "cache"
]
STAGE_KINDS = get_args(StageKind)
SEQUENTIAL_MAPS = ("MapDataset",)  # the hook's SEQUENTIAL_MAPS: what map_parallelization can parallelise
TUNE_COMMAND = f"nodeagent tune --only {TF_DATA_TUNER}"
VERIFY_COMMAND = f"nodeagent tune --apply --verify --only {TF_DATA_TUNER}"
# Signals a job's launcher (a shell, Slurm, a terminal) sends to stop or interrupt it.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def hook_env(environ: Mapping[str, str], folder: Path, every_s: float | None = None) -> dict[str, str]:
    """`environ` with the measuring hook on: nodeagent/hooks first on PYTHONPATH (once), the folder
    the job's processes write to, and the period of the progress line (none without `every_s`)."""
    env = dict(environ)
    launcher.add_hooks_dir(env)
    env[MEASURE_DIR_ENV] = str(folder)
    env.pop(MEASURE_EVERY_ENV, None)
    if every_s is not None:
        env[MEASURE_EVERY_ENV] = repr(float(every_s))
    return env


# -- the figures ---------------------------------------------------------------------------------


@dataclass
class JobFigures:
    """One job's figures, combined over its processes (`read`). steps_per_s is None when no
    process measured a step after its warm-up; input_wait_fraction is None when any measured
    process could not see its input wait, and input_wait_unknown then says why."""

    steps_per_s: float | None
    input_wait_fraction: float | None
    input_wait_unknown: str | None
    processes: int
    measured_steps: int
    warmup_steps: int
    source: str
    steps: int = 0
    seconds: float = 0.0  # the longest process's measured span
    skipped: list[str] = field(default_factory=list)  # files that could not be read, and why
    stages: list[Stage] = field(default_factory=list)  # the input pipeline, source first
    options_off: list[str] = field(default_factory=list)  # tf-data tuner options the job turned off
    pipeline_unknown: str | None = "not described"  # why there are no stages
    # The share of the measured time spent in Python functions tf.data called (a generator,
    # tf.py_function), over all threads; None where a process did not time it.
    python_fraction: float | None = None

    @property
    def advice(self) -> list[StageAdvice]:
        """One piece of advice per stage of the input pipeline, the problems first."""
        found = [stage_advice(s, self.options_off) for s in self.stages]
        return [a for a in found if a.problem] + [a for a in found if not a.problem]


Count = Annotated[StrictInt, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


Text = Annotated[StrictStr, Field(max_length=500)]


class Stage(BaseModel):
    """One stage of the job's input pipeline, as the hook read it from the pipeline's graph (its
    `classify`, in a <pid>.json's "pipeline"): its kind, the TensorFlow op that makes it that kind,
    the dataset op that runs it (`where`), how it runs, whether in parallel (None where that does
    not apply), and whether a stateful op keeps tf.data from parallelising it. A prefetch stage
    with op "" is a missing prefetch."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    kind: StageKind
    op: Text
    where: Text = ""
    detail: Text = ""
    parallel: StrictBool | None = None
    stateful: StrictBool = False


class _Pipeline(BaseModel):
    """A <pid>.json's "pipeline": the stages, or why there are none."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    stages: list[Stage] = Field(default_factory=list, max_length=1000)
    options_off: list[Text] = Field(default_factory=list, max_length=20)
    unknown: Text | None = None


class _Process(BaseModel):
    """One <pid>.json the measuring hook wrote (nodeagent/hooks/_nodeagent_measure.py)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    source: Source
    steps: Count
    warmup_steps: Count
    measured_steps: Count
    seconds: Seconds = 0.0
    steps_per_s: Seconds | None = None
    input_wait_s: Seconds | None = None
    input_wait_unknown: StrictStr | None = None
    python_s: Seconds | None = None
    pipeline: _Pipeline | None = None

    @model_validator(mode="after")
    def _wait_or_why(self) -> _Process:
        if self.measured_steps and self.input_wait_s is None and self.input_wait_unknown is None:
            raise ValueError("input_wait_s is missing and input_wait_unknown gives no reason")
        return self


def _process(text: str) -> _Process:
    """One file's figures; ValueError names the first field that is wrong."""
    try:
        return _Process.model_validate_json(text)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        got = f" (got {first['input']!r})" if where else ""
        raise ValueError(f"{where + ': ' if where else ''}{first['msg']}{got}") from None


def read(folder: Path) -> JobFigures | None:
    """The job's figures from the files its processes wrote; None when there is none (the job
    never ran a TensorFlow training step, or the folder does not exist).

    Several processes (the ranks of one job on this node) run side by side, so their rates add up:
    steps_per_s is the sum of the processes' steps per second (the node's throughput, in steps of a
    rank: for synchronous data parallelism, that is the ranks times the global step rate). The input
    wait share is weighted by measured time: the sum of the processes' waits over the sum of their
    measured spans, so a rank that ran longer counts for more. It is unknown as soon as one measured
    process could not see its wait. A file that cannot be read is skipped, its reason kept in
    `skipped`: the job writes this folder, so what is there is outside input, read only as a regular
    file up to NODEAGENT_MAX_INPUT_MIB (a FIFO the job left there hung the read once the job had
    exited).
    """
    try:
        paths = sorted(p for p in folder.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return None
    processes: list[_Process] = []
    skipped: list[str] = []
    for path in paths:
        try:
            data = limits.read_input_file(path, "measurement")
            processes.append(_process(data.decode("utf-8")))
        except (OSError, UsageError, UnicodeDecodeError, ValueError) as e:  # JSONDecodeError: a ValueError
            skipped.append(f"{path}: {e}")
    if not processes and not skipped:
        return None
    return _combined(processes, skipped)


def _combined(processes: list[_Process], skipped: list[str]) -> JobFigures:
    measured = [p for p in processes if p.measured_steps and p.steps_per_s is not None]
    rates = [p.steps_per_s for p in measured if p.steps_per_s is not None]
    unknown = [p.input_wait_unknown or "not measured" for p in measured if p.input_wait_s is None]
    if not measured:
        unknown = [p.input_wait_unknown for p in processes if p.input_wait_unknown] or [
            "no process measured a step" + (" (the measurement files could not be read)" if skipped else "")
        ]
    span = sum(p.seconds for p in measured)
    fraction = None
    if not unknown and span > 0:
        fraction = sum(p.input_wait_s or 0.0 for p in measured) / span
    stages, options_off, pipeline_unknown = _pipeline(processes)
    python = None
    if measured and span > 0 and all(p.python_s is not None for p in measured):
        python = sum(p.python_s or 0.0 for p in measured) / span
    return JobFigures(
        python_fraction=python,
        stages=stages,
        options_off=options_off,
        pipeline_unknown=pipeline_unknown,
        steps_per_s=sum(rates) if rates else None,
        input_wait_fraction=fraction,
        input_wait_unknown="; ".join(dict.fromkeys(unknown)) if unknown else None,
        processes=len(processes),
        measured_steps=sum(p.measured_steps for p in processes),
        warmup_steps=sum(p.warmup_steps for p in processes),
        source="+".join(sorted({p.source for p in processes})) or "none",
        steps=sum(p.steps for p in processes),
        seconds=max((p.seconds for p in measured), default=0.0),
        skipped=skipped,
    )


def _pipeline(processes: list[_Process]) -> tuple[list[Stage], list[str], str | None]:
    """The job's input pipeline: the first process's that could be read (the ranks of a job run the
    same one); else why none could."""
    for p in processes:
        if p.pipeline is not None and p.pipeline.unknown is None:
            stages = list(p.pipeline.stages)
            return stages, list(p.pipeline.options_off), None
    reasons = [p.pipeline.unknown for p in processes if p.pipeline is not None and p.pipeline.unknown]
    return [], [], "; ".join(dict.fromkeys(reasons)) if reasons else "not described"


# -- what can help each stage --------------------------------------------------------------------


@dataclass(frozen=True)
class StageAdvice:
    """What can speed one stage up: `problem` when it can hold the input back as written (Python,
    a sequential read or map), `tunable` when the tf-data tuner's options can speed it up."""

    stage: Stage
    problem: bool
    tunable: bool
    text: str


_PYTHON_API = {
    "EagerPyFunc": "tf.py_function",
    "PyFunc": "tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
}
_LABELS = {"decode": "decoding", "map": "map", "file-read": "file reads"}
_PARALLEL_CODE = "num_parallel_calls=tf.data.AUTOTUNE in the map"


def _python_advice(stage: Stage) -> StageAdvice:
    if stage.kind == "python-generator":
        return StageAdvice(
            stage,
            True,
            False,
            f"Python generator ({stage.op} in {stage.where}: Dataset.from_generator): tf.data's options "
            f"cannot run Python in parallel (one interpreter lock), so `{TUNE_COMMAND}` cannot speed it "
            "up: move the work into TensorFlow ops, write the data once to TFRecord files, interleave "
            "several from_generator datasets with num_parallel_calls (it helps where the generator "
            "waits on I/O or NumPy), or feed the job from more processes",
        )
    api = _PYTHON_API.get(stage.op, "Python")
    return StageAdvice(
        stage,
        True,
        False,
        f"Python in the pipeline ({stage.op}: {api}, {stage.detail}): tf.data's options cannot run it "
        f"in parallel (one interpreter lock; map_parallelization leaves stateful functions alone), so "
        f"`{TUNE_COMMAND}` cannot speed it up: replace it with TensorFlow ops (tf.image, tf.strings, "
        "tf.io), or write its output once to TFRecord files",
    )


def _map_advice(stage: Stage, label: str, options_off: list[str]) -> StageAdvice:
    """A stage run by a map: parallel already, or what parallelises it."""
    head = f"{label} ({stage.op}, {stage.detail})"
    if stage.parallel:
        return StageAdvice(stage, False, False, f"{head}: already parallel")
    if stage.where not in SEQUENTIAL_MAPS:
        return StageAdvice(
            stage,
            True,
            False,
            f"{head}: tf.data's options cannot parallelise {stage.where or 'it'}: do this work in a map "
            f"with {_PARALLEL_CODE.removesuffix(' in the map')}",
        )
    if stage.stateful:
        return StageAdvice(
            stage,
            True,
            False,
            f"{head}: a stateful op (tf.random.uniform, ...) keeps map_parallelization from running it in "
            f"parallel: {_PARALLEL_CODE}, or stateless random ops (tf.random.stateless_*)",
        )
    if "map_parallelization" in options_off:
        return StageAdvice(
            stage,
            True,
            False,
            f"{head}: the program turned map_parallelization off (tf.data.Options), and the tf-data "
            f"profile keeps a program's own options: {_PARALLEL_CODE}",
        )
    return StageAdvice(
        stage,
        True,
        True,
        f"{head}: `{TUNE_COMMAND}` runs it in parallel (map_parallelization, a private thread pool, "
        f"unordered output), or {_PARALLEL_CODE}",
    )


def stage_advice(stage: Stage, options_off: list[str]) -> StageAdvice:
    """What can speed `stage` up, and whether the tf-data tuner's options can (only a sequential,
    stateless map: they parallelise maps and prefetch, never Python nor an interleave's reads)."""
    if stage.kind in ("python-generator", "python-function"):
        return _python_advice(stage)
    label = _LABELS.get(stage.kind, stage.kind)
    if stage.where in SEQUENTIAL_MAPS or (stage.kind in ("decode", "map") and stage.parallel is not None):
        return _map_advice(stage, label, options_off)
    if stage.kind == "file-read":
        if stage.parallel:
            return StageAdvice(
                stage,
                False,
                False,
                f"file reads ({stage.op}, {stage.detail}): already parallel; if storage is the limit: "
                "cache() data that fits in memory, faster or local storage",
            )
        return StageAdvice(
            stage,
            True,
            False,
            f"file reads ({stage.op}, {stage.detail}): tf.data's options cannot parallelise them: read "
            "several files at once (interleave(..., num_parallel_calls=tf.data.AUTOTUNE), or "
            "TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)); cache() data that fits in "
            "memory; faster or local storage",
        )
    if stage.kind == "prefetch" and not stage.op:
        if "inject_prefetch" in options_off:
            return StageAdvice(
                stage,
                True,
                False,
                f"{stage.detail}, and the program turned inject_prefetch off: add "
                ".prefetch(tf.data.AUTOTUNE) at the end of the pipeline",
            )
        return StageAdvice(
            stage,
            False,
            False,
            f"{stage.detail}: tf.data adds one itself (inject_prefetch, on by default in recent TensorFlow)",
        )
    return StageAdvice(stage, False, False, f"{label} ({stage.op})")


# Above this share of the measured time in Python (under one interpreter lock), Python sets the
# pace of the input: parallelising the other stages cannot make it faster than Python runs.
PYTHON_PACES = 0.5


def _python_paces(figures: JobFigures) -> bool | None:
    """Whether the Python stages found set the input's pace; None when that was not measured."""
    if not any(s.kind.startswith("python-") for s in figures.stages):
        return False
    if figures.python_fraction is None:
        return None
    return figures.python_fraction >= PYTHON_PACES


def _input_bound(figures: JobFigures, wait: float) -> str:
    """The input-bound diagnosis: the tf-data tuner only when a stage found is one it can help, and
    no Python stage (which its options cannot help) is what the input waits for."""
    head = f"input-bound: waits on input {wait:.0%} of the step time (> {INPUT_BOUND:.0%})"
    if figures.python_fraction is not None and any(s.kind.startswith("python-") for s in figures.stages):
        head += f"; Python functions tf.data called ran {figures.python_fraction:.0%} of the measured time"
    if figures.pipeline_unknown is not None:
        return (
            f"{head}; the input pipeline could not be read ({figures.pipeline_unknown}): "
            f"`{TUNE_COMMAND}` speeds up a sequential map, not Python (Dataset.from_generator, "
            f"tf.py_function) nor file reads one file at a time ({GUIDE})"
        )
    found = figures.advice
    python = _python_paces(figures)
    if python:
        return (
            f"{head}: Python sets the pace of the input (more than {PYTHON_PACES:.0%} of the time), and "
            f"tf.data's options cannot run Python in parallel, so `{TUNE_COMMAND}` would not help: "
            f"change the Python stage as its line says ({GUIDE})"
        )
    if python is None and any(a.tunable for a in found):
        return (
            f"{head}: `{TUNE_COMMAND}` can speed up a sequential map below, not the Python stage, and "
            f"the time spent in Python was not measured: change the Python stage first ({GUIDE})"
        )
    if any(a.tunable for a in found):
        return (
            f"{head}: tune the input pipeline: `{TUNE_COMMAND}`, then `{VERIFY_COMMAND}` to keep it only "
            f"if the job gets faster (the stages below; {GUIDE})"
        )
    if any(a.problem for a in found):
        return (
            f"{head}: tf.data's options cannot speed up the stages holding it back (below), so "
            f"`{TUNE_COMMAND}` would not help: change the pipeline ({GUIDE})"
        )
    return (
        f"{head}: every stage found already runs in parallel, so `{TUNE_COMMAND}` would not help: "
        f"the stages below ({GUIDE})"
    )


def diagnosis(figures: JobFigures) -> str:
    """What the figures say about the job, and what to do about it."""
    wait = figures.input_wait_fraction
    if figures.steps_per_s is None:
        return f"not measured: {figures.input_wait_unknown or 'no step after the warm-up'}"
    if wait is None:
        return f"input wait unknown: {figures.input_wait_unknown or 'not measured'}"
    if wait > INPUT_BOUND:
        return _input_bound(figures, wait)
    return (
        f"compute-bound: waits on input {wait:.0%} of the step time (<= {INPUT_BOUND:.0%}): the "
        "training step itself sets the pace; a faster input pipeline would not help"
    )


# -- running a job -------------------------------------------------------------------------------


@dataclass
class MeasuredRun:
    """A job run as a child of nodeagent: its exit code (128+N for a death by signal N, as a
    shell reports it), wall time, the CPU time of it and its descendants over the CPUs it could
    use, and its TensorFlow figures (None when it never ran a training step)."""

    exit_code: int
    wall_s: float
    cpu_s: float
    cpus: int
    figures: JobFigures | None

    @property
    def cpu_utilisation(self) -> float | None:
        """The share of the usable CPUs the job kept busy (1.0: all of them, all the time)."""
        if self.wall_s <= 0 or self.cpus <= 0:
            return None
        return self.cpu_s / self.wall_s / self.cpus


def shell_exit_code(returncode: int) -> int:
    """Popen's returncode (-N for a death by signal N) as a shell reports it (128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _usable_cpus(bound: int | None) -> int:
    """The CPUs the job can keep busy: this process's affinity (which the job inherits), the
    cgroup's cpuset and CPU quota, and the CPUs it is bound to (numactl binds the job, not us)."""
    affinity = len(os.sched_getaffinity(0))
    return min(affinity, run.usable_cpus() or affinity, bound or affinity)


def _caught() -> list[signal.Signals]:
    """The forwarded signals this process does not ignore: an ignored one stays ignored, and the job
    inherits that (a handler would be reset to the default in the job by execve)."""
    return [sig for sig in FORWARDED if signal.getsignal(sig) is not signal.SIG_IGN]


def _terminal_delivers_sigint(child: subprocess.Popen[bytes]) -> bool:
    """True when a Ctrl-C on the terminal reaches the job by itself: it is in the foreground process
    group of the terminal on our standard streams (the terminal driver signals that whole group,
    termios(3)/credentials(7)); forwarding it again would interrupt the job twice. uv's `run` makes the
    same distinction (astral-sh/uv, "Use TTY detection to determine if SIGINT forwarding is enabled")."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgid(child.pid):
                return True
        except OSError:
            continue
    return False


@contextmanager
def _forwarding(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """Pass SIGINT, SIGTERM and SIGHUP on to the job while it runs (nodeagent itself stays to
    report), then restore the handlers."""
    tty_sigint = _terminal_delivers_sigint(child)

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and tty_sigint:
            return
        try:  # noqa: SIM105
            child.send_signal(signum)
        except OSError:  # already gone: its exit status says the rest
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _caught()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_measured(
    command: list[str], every_s: float | None, environ: Mapping[str, str], bound_cpus: int | None = None
) -> MeasuredRun:
    """Run `command` as a child with the measuring hook on, wait for it, and gather its figures.

    The child gets this process's standard streams, and its environment is `environ` plus the hook's
    variables; the caller binds this process first when the job must be bound (the binding is
    inherited: see launcher.spawn), or binds it in `command` (numactl), then gives the number of
    CPUs it is bound to. Signals are forwarded so that the job, not nodeagent, decides how to stop."""
    folder = Path(tempfile.mkdtemp(prefix="nodeagent-measure-"))
    try:
        env = hook_env(environ, folder, every_s)
        cpu0 = _children_cpu_s()
        began = time.monotonic()
        # The handlers go in before the child starts: a SIGTERM in between would otherwise kill
        # nodeagent and leave the job running without its parent.
        with _pending_signals() as pending:
            child = launcher.spawn(command, env)
            with _forwarding(child):
                for sig in pending:
                    child.send_signal(sig)
                returncode = child.wait()
        wall = time.monotonic() - began
        cpu = _children_cpu_s() - cpu0
        return MeasuredRun(shell_exit_code(returncode), wall, cpu, _usable_cpus(bound_cpus), read(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _pending_signals() -> Iterator[list[int]]:
    """Signals that arrive before the job exists, kept to be passed on once it does."""
    pending: list[int] = []

    def keep(signum: int, _frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, keep) for sig in _caught()}
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
