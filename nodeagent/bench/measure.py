"""A TensorFlow job's own training speed and input wait, measured from outside, with no change to it.

The job runs with nodeagent/hooks first on PYTHONPATH and NODEAGENT_MEASURE_DIR set (`hook_env`):
its Python then loads the measuring hook (nodeagent/hooks/_nodeagent_measure.py; its docstring
says what is timed and which steps are warm-up) once it imports TensorFlow, and each of its
processes writes `<pid>.json` into that folder at exit. `read` combines those files, `diagnosis`
says what they mean, and `run_measured` runs a command as a child, forwarding signals, and gathers
all of it with the wall time and CPU use (`nodeagent exec --measure`, the A/B engine).

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Count = Annotated[StrictInt, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


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
    return JobFigures(
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


def diagnosis(figures: JobFigures) -> str:
    """What the figures say about the job, and what to do about it."""
    wait = figures.input_wait_fraction
    if figures.steps_per_s is None:
        return f"not measured: {figures.input_wait_unknown or 'no step after the warm-up'}"
    if wait is None:
        return f"input wait unknown: {figures.input_wait_unknown or 'not measured'}"
    if wait > INPUT_BOUND:
        return (
            f"input-bound: waits on input {wait:.0%} of the step time (> {INPUT_BOUND:.0%}): tune the "
            f"input pipeline: `nodeagent tune --only {TF_DATA_TUNER}` (parallel map, prefetch: {GUIDE})"
        )
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "cpus": self.cpus,
            "cpu_utilisation": self.cpu_utilisation,
            "figures": None if self.figures is None else self.figures.to_dict(),
            "diagnosis": None if self.figures is None else diagnosis(self.figures),
        }


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
