"""The benchmark's orchestrator: runs each configuration in fresh worker processes, gathers their
throughputs, and reports medians, intervals, stage bounds, diagnoses and verdicts.

TensorFlow is never imported here: the data set is made by `python -m nodeagent.bench.data` and
each configuration runs as `python -m nodeagent.bench.worker` (TF fixes its thread pools when it
starts, so a configuration's threads can only be set by starting a new process:
https://www.tensorflow.org/api_docs/python/tf/config/threading).

- naive / autotune / input_only / compute_only run with TensorFlow's defaults: the environment is
  cleaned of thread-pool variables and of nodeagent's tf.data hook, so a shell that already sits
  inside `nodeagent exec` (or exported OMP_NUM_THREADS) does not tune them behind our back.
- tuned runs the user's plain pipeline through the very launcher of `nodeagent exec --profile P`
  (`python -m nodeagent exec --profile P -- python -m nodeagent.bench.worker --config tuned ...`),
  so what is measured is exactly what a job gets: the profile's environment, binding and tf.data
  hook.
- Processes of different configurations are interleaved (round-robin, the order rotated each
  round), so a slow drift of the machine (another tenant, the page cache) spreads over all
  configurations instead of biasing the one that ran last (Kalibera & Jones, "Rigorous Benchmarking
  in Reasonable Time", ISMM 2013: repeat at the level where the variation is, here processes, and
  do not run all the executions of one configuration back to back).
"""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import psutil
from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent import bench
from nodeagent.bench import data, stats
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.facts import cgroup
from nodeagent.host import LocalHost
from nodeagent.tuning import profile
from nodeagent.tuning.launcher import HOOKS_DIR

CONFIGS = bench.CONFIGS  # naive, autotune, tuned, input_only, compute_only
STAGES = ("input_only", "compute_only")
OK, FAILED, SKIPPED = "ok", "failed", "skipped"
WORKER = "nodeagent.bench.worker"

# A training step that waits on its input for more than this share of the loop is input-bound. The
# TF Profiler's input-pipeline analysis calls a step "HIGHLY input-bound" above 20% of its time
# waiting for input and "MODERATELY" above 5% (kHighlyInfeedBoundThresholdInPercent in
# tensorflow/core/profiler/convert/op_stats_to_input_pipeline_analysis.cc;
# https://www.tensorflow.org/guide/profiler#input_pipeline_analyzer); the red flag is 20-30%,
# and 25% keeps a margin above the profiler's line for the noise of a host-side timer.
INPUT_BOUND = 0.25
GUIDE = "https://www.tensorflow.org/guide/data_performance"

# Variables that size thread pools or carry nodeagent's tf.data options: removed for the configs
# that must run with TensorFlow's defaults (TF_NUM_*: process_util.cc; OMP/MKL: oneDNN's OpenMP).
THREAD_PREFIXES = ("TF_NUM_", "MKL_")
THREAD_VARS = ("OMP_NUM_THREADS",)
HOOK_VARS = (
    "NODEAGENT_TF_DATA_OPTIONS",
    "NODEAGENT_CPU_DMA_LATENCY_FD",
    "NODEAGENT_MEASURE_DIR",  # a parent `exec --measure`'s: each run measures into its own folder
    "NODEAGENT_MEASURE_EVERY",
)
TAIL_LINES = 25
# Other processes taking more than this share of the machine's CPU time during a config's run make
# its figures suspect: intervals must be within 3% of the median, and a neighbour using
# 5% of the CPUs can move a CPU-bound throughput by about that much on its own.
BUSY_SHARE = 0.05


@dataclass(frozen=True)
class Sizes:
    """How much work one run does: the data set and worker arguments of nodeagent.bench's sizes,
    plus how many fresh processes per config and how long one may take."""

    images: int  # in the data set
    image_size: int  # pixels per side of the training crop (the data set stores larger JPEGs)
    shards: int
    batch: int
    warmup_steps: int  # not timed (XLA compiles on the first step, tf.data autotunes)
    steps: int  # per timed repeat
    repeats: int  # timed repeats per process
    processes: int  # fresh processes per config
    timeout_s: int  # one worker process, wall clock, in whole seconds

    @classmethod
    def of(cls, s: bench.Sizes, processes: int, timeout_s: int, repeats: int | None = None) -> Sizes:
        return cls(
            s.images,
            s.size,
            s.shards,
            s.batch,
            s.warmup_steps,
            s.steps,
            repeats or s.repeats,
            processes,
            timeout_s,
        )


# quick: CI smoke runs (<= 60 s), one process per config; at least stats.MIN_SAMPLES
# repeats, or no verdict could ever be significant.
# full: 5 processes per config. Measured on the 2-CPU VM this was written on, with nothing else
# running: the repeats of one process differ by 4-8% (CV), processes of the same config by 2-10%,
# following a drift of the vCPUs' speed over minutes (the CPU-seconds per image of the same work
# moved by up to 30%: contention on the host, invisible as steal time). The two-stage bootstrap
# interval shrinks only as 1/sqrt(processes): 3 processes gave +-3-12%, 5 gave +-5-11% (a run
# where every config slowed by 15-20% from the first round to the last), and +-3% would take
# dozens of processes (about 20 s each). 5 keeps a full run near 7 minutes.
QUICK = Sizes.of(bench.QUICK, processes=1, timeout_s=300, repeats=max(bench.QUICK.repeats, stats.MIN_SAMPLES))
FULL = Sizes.of(bench.DEFAULT, processes=5, timeout_s=1800)


@dataclass(frozen=True)
class Progress:
    """One step of progress: `config`'s process `process` of `processes` has done `done` of `total`
    steps; `fraction` is the whole run's. `run` is this worker process's number in the order they
    run, of `runs` planned so far (a process run again adds one, a config that failed drops its
    later rounds); the first `warmup` of the `total` steps are the untimed warm-up (0: none, or not
    known: the worker has not said its total yet)."""

    config: str
    process: int
    processes: int
    done: int
    total: int
    fraction: float
    run: int = 0
    runs: int = 0
    warmup: int = 0


@dataclass(frozen=True)
class Preparing:
    """The data set is being found in the cache, or made there (once: minutes on a small machine)."""

    images: int


@dataclass(frozen=True)
class WorkerEnded:
    """A worker process ended: its figures or its error (`worker`), and whether it is run again
    (`worker.discarded`: other processes took too much of the CPUs while it ran)."""

    config: str
    process: int
    processes: int
    run: int
    runs: int
    worker: WorkerRun
    fraction: float


ProgressFn = Callable[[Progress], None]
# Everything the benchmark tells as it goes, for a face that shows more than the steps.
Event = Preparing | Progress | WorkerEnded
EventFn = Callable[[Event], None]


@dataclass(frozen=True)
class Spec:
    """One configuration as run: the name it is reported under and the command line."""

    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass
class WorkerRun:
    """One worker process: its parsed result, or why there is none."""

    returncode: int
    result: dict[str, Any] | None
    error: str | None
    stderr_tail: str
    duration_s: float
    # Share of the machine's CPU time used by other processes while this worker ran (None: unknown).
    interference: float | None = None
    discarded: str | None = None  # why its figures are left out (a busy machine), or None


@pydantic_dataclass(config=document.LATE)
class ConfigResult(document.InKeyOrder):
    """One config's processes and their summary; the bench report's entry for the config."""

    document_keys = (
        "status",
        "images_per_s",
        "input_wait_fraction",
        "cpu_seconds_per_image",
        "fraction_of_bound",
        "diagnosis",
        "interference",
        "discarded",
        "threads",
        "tf_data_options",
        "tf_version",
        "reason",
        "stderr_tail",
    )

    name: Annotated[str, Field(exclude=True)]  # the report's key for this entry
    status: str  # ok, failed, skipped
    reason: Annotated[str | None, Field(exclude_if=document.is_empty)] = None
    runs: list[WorkerRun] = Field(default_factory=list, exclude=True)
    summary: Annotated[stats.Summary | None, Field(exclude=True)] = None  # in images_per_s
    input_wait_fraction: float | None = None
    cpu_seconds_per_image: float | None = None
    fraction_of_bound: float | None = None
    diagnosis: str | None = None

    @property
    def kept(self) -> list[WorkerRun]:
        return [r for r in self.runs if r.result and not r.discarded]

    @property
    def groups(self) -> list[list[float]]:
        """Throughputs per process (of the processes kept)."""
        return [list(r.result["images_per_s"]) for r in self.kept if r.result]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def images_per_s(self) -> dict[str, Any] | None:
        """The summary with the figures it summarizes, all of them and per process."""
        if self.summary is None:
            return None
        return document.dump(self.summary) | {
            "samples": [v for g in self.groups for v in g],
            "per_process": self.groups,
        }

    @computed_field  # type: ignore[prop-decorator]
    @property
    def interference(self) -> float | None:
        """The most CPU other processes took during one of this config's kept processes (a share)."""
        known = [r.interference for r in self.kept if r.interference is not None]
        return max(known) if known else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def discarded(self) -> list[dict[str, Any]]:
        """The processes left out, why, and their figures."""
        return [
            {"reason": r.discarded, "images_per_s": r.result["images_per_s"] if r.result else None}
            for r in self.runs
            if r.discarded
        ]

    # What TensorFlow ran with, as the first process that gave a result says; absent when none did.
    @property
    def _first(self) -> dict[str, Any] | None:
        return next((r.result for r in self.runs if r.result), None)

    @computed_field(exclude_if=document.is_none)  # type: ignore[prop-decorator]
    @property
    def threads(self) -> dict[str, Any] | None:
        first = self._first
        if first is None:
            return None
        return {"intra_op": first.get("intra_op_threads"), "inter_op": first.get("inter_op_threads")}

    @computed_field(exclude_if=document.is_none)  # type: ignore[prop-decorator]
    @property
    def tf_data_options(self) -> Any:
        return (self._first or {}).get("tf_data_options")

    @computed_field(exclude_if=document.is_none)  # type: ignore[prop-decorator]
    @property
    def tf_version(self) -> str | None:
        return (self._first or {}).get("tf_version")

    @computed_field(exclude_if=document.is_none)  # type: ignore[prop-decorator]
    @property
    def stderr_tail(self) -> str | None:
        """A failed config's first error output; absent for the others."""
        if self.status != FAILED:
            return None
        return next((r.stderr_tail for r in self.runs if r.error), "")


# The bound is its own document (the bench report's "bound"): a pydantic dataclass, the tighter
# value after the two it is taken from.
@pydantic_dataclass(frozen=True, config=document.LATE)
class Bound:
    """The throughput the pipeline cannot beat, two ways (images/s)."""

    stage: float | None  # min(input_only, compute_only): the slower stage alone
    cpu_budget: float | None  # usable CPUs / (CPU-s per image of input + of compute)
    cpus: int | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def value(self) -> float | None:
        """The tighter of the two: both hold at once (each stage alone has every CPU; together
        they share them), so a config can reach at most the smaller."""
        known = [b for b in (self.stage, self.cpu_budget) if b is not None]
        return min(known) if known else None


@pydantic_dataclass(config=document.LATE)
class BenchResult(document.InKeyOrder):
    document_keys = (
        "configs",
        "bound",
        "verdict",
        "quick",
        "duration_s",
        "profile",
        "sizes",
        "data",
        "input_bound_threshold",
        "notes",
    )

    configs: dict[str, ConfigResult]
    bound: Bound
    verdicts: Annotated[dict[str, dict[str, Any]], Field(serialization_alias="verdict")]
    quick: bool
    duration_s: float
    sizes: Sizes
    profile: str | None
    data: str | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        return [n for n, c in self.configs.items() if c.status == FAILED]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def input_bound_threshold(self) -> float:
        return INPUT_BOUND


# -- command lines -------------------------------------------------------------------------------


def without_hook(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without what a parent `nodeagent exec` left behind (the tf.data hook on PYTHONPATH,
    its options, the PM QoS file descriptor): a program started from it is not tuned by stealth."""
    env = {k: v for k, v in environ.items() if k not in HOOK_VARS}
    hooks = str(HOOKS_DIR)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != hooks]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


def clean_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without thread-pool sizes and without nodeagent's tf.data hook: TF's defaults."""
    return {
        k: v
        for k, v in without_hook(environ).items()
        if k not in THREAD_VARS and not any(k.startswith(p) for p in THREAD_PREFIXES)
    }


def worker_argv(config: str, data: Path, sizes: Sizes) -> list[str]:
    return [
        sys.executable,
        "-m",
        WORKER,
        "--config",
        config,
        "--data",
        str(data),
        "--batch",
        str(sizes.batch),
        "--image-size",
        str(sizes.image_size),
        "--warmup-steps",
        str(sizes.warmup_steps),
        "--steps",
        str(sizes.steps),
        "--repeats",
        str(sizes.repeats),
        "--progress",
    ]


def exec_argv(profile_name: str, command: list[str]) -> list[str]:
    """The command under `nodeagent exec --profile P` (the same launcher, as a module: no PATH)."""
    return [sys.executable, "-m", "nodeagent", "exec", "--profile", profile_name, "--", *command]


def profile_problem(profile_name: str) -> str | None:
    """Why the profile cannot be used (absent, unreadable), or None."""
    try:
        profile.load(profile_name)
    except UsageError as e:
        return str(e)
    return None


# -- running workers -----------------------------------------------------------------------------


def parse_result(stdout: str) -> dict[str, Any]:
    """The worker's last stdout line: one JSON object with positive throughputs (ValueError else)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the worker printed no result")
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        raise ValueError(f"the worker's last line is not JSON: {lines[-1][:200]!r}") from None
    if not isinstance(doc, dict):
        raise ValueError("the worker's result is not a JSON object")
    ips = doc.get("images_per_s")
    if not isinstance(ips, list) or not ips:
        raise ValueError("the worker's result has no images_per_s")
    for v in ips:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"the worker reported a throughput of {v!r}")
    return doc


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot: user, nice, system, irq, softirq and
    steal (the hypervisor gave our vCPU to another), from psutil's reading of /proc/stat (proc(5);
    guest time is already inside user). None where the platform does not report them."""
    try:
        t = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    return float(
        t.user
        + t.nice
        + t.system
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )


def own_cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the worker, once reaped)."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def interference(busy_s: float, ours_s: float, wall_s: float, cpus: int) -> float:
    """Share of the machine's CPU time (wall x CPUs) that other processes took while we measured."""
    if wall_s <= 0 or cpus <= 0:
        return 0.0
    return max(0.0, (busy_s - ours_s) / (wall_s * cpus))


def run_worker(spec: Spec, timeout_s: float, on_line: Callable[[int, int], None] | None = None) -> WorkerRun:
    """Run one worker to completion; progress lines go to `on_line(done, total)` as they come."""
    start = time.monotonic()
    busy0, own0 = busy_cpu_s(), own_cpu_s()
    try:
        proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=spec.env,
        )
    except OSError as e:
        return WorkerRun(-1, None, f"cannot start {spec.argv[0]}: {e.strerror or e}", "", 0.0)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
    reader.daemon = True
    reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "progress" and parts[1].isdigit() and parts[2].isdigit():
                if on_line is not None:
                    on_line(int(parts[1]), int(parts[2]))
                continue
            tail.append(line.rstrip("\n"))
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:  # interrupted (Ctrl-C): never leave a worker behind
            proc.kill()
            proc.wait()
    reader.join()
    duration = time.monotonic() - start
    busy1 = busy_cpu_s()
    share = None
    if busy0 is not None and busy1 is not None:
        share = interference(busy1 - busy0, own_cpu_s() - own0, duration, os.cpu_count() or 1)
    stderr_tail = "\n".join(tail)
    if timed_out.is_set():
        return WorkerRun(
            code, None, f"no result after {timeout_s:.0f} s: killed", stderr_tail, duration, share
        )
    if code != 0:
        last = next((t for t in reversed(tail) if t.strip()), "no message")
        return WorkerRun(
            code, None, f"exited with status {code}: {last.strip()}", stderr_tail, duration, share
        )
    try:
        result = parse_result("".join(out))
    except ValueError as e:
        return WorkerRun(code, None, str(e), stderr_tail, duration, share)
    return WorkerRun(code, result, None, stderr_tail, duration, share)


def run_specs(
    specs: Sequence[Spec],
    processes: int,
    timeout_s: float,
    on_progress: ProgressFn | None = None,
    rerun_disturbed: bool = True,
    on_event: EventFn | None = None,
    timed_steps: int | None = None,
) -> dict[str, list[WorkerRun]]:
    """`processes` runs of each spec, interleaved (round r starts at spec r mod n).

    With `rerun_disturbed`, a process during which other processes took more than BUSY_SHARE of
    the CPUs is marked discarded and run again at once (at most `processes` extra runs per spec):
    its figures say more about the neighbour than about the config. A spec whose process fails is
    not run again: its later rounds would fail the same way and cost minutes.

    Each step goes to `on_progress`; `on_event` gets the steps too, and each process's end. A
    worker counts its warm-up and timed steps in one total: with `timed_steps` (the timed ones),
    the rest of that total is told as the warm-up."""
    runs: dict[str, list[WorkerRun]] = {s.name: [] for s in specs}
    total = processes * len(specs)
    finished = 0
    shown = 0.0  # the fraction last reported: a rerun adds work, but the bar never moves back
    n = len(specs)

    def tell(event: Progress | WorkerEnded) -> None:
        if on_progress is not None and isinstance(event, Progress):
            on_progress(event)
        if on_event is not None:
            on_event(event)

    for r in range(processes):
        for i in range(n):
            spec = specs[(i + r) % n]
            while True:
                if any(w.error for w in runs[spec.name]):
                    total -= 1
                    break

                def on_line(
                    done: int,
                    steps: int,
                    spec: Spec = spec,
                    r: int = r,
                    before: int = finished,
                    of: int = total,
                ) -> None:
                    nonlocal shown
                    if steps <= 0 or (on_progress is None and on_event is None):
                        return
                    shown = max(shown, (before + min(1.0, done / steps)) / max(1, of))
                    warmup = steps - timed_steps if timed_steps is not None and steps >= timed_steps else 0
                    tell(Progress(spec.name, r + 1, processes, done, steps, shown, before + 1, of, warmup))

                on_line(0, 1)
                w = run_worker(spec, timeout_s, on_line)
                runs[spec.name].append(w)
                finished += 1
                reruns = sum(1 for x in runs[spec.name] if x.discarded)
                again = (
                    rerun_disturbed
                    and not w.error
                    and reruns < processes
                    and w.interference is not None
                    and w.interference > BUSY_SHARE
                )
                if again:
                    w.discarded = (
                        f"other processes used {w.interference:.0%} of the CPU time while it ran: run again"
                    )
                    total += 1
                shown = max(shown, finished / max(1, total))
                tell(WorkerEnded(spec.name, r + 1, processes, finished, total, w, shown))
                if not again:
                    break
    return runs


# -- results -------------------------------------------------------------------------------------


def _median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _number(doc: dict[str, Any], key: str) -> float | None:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def config_result(name: str, runs: list[WorkerRun]) -> ConfigResult:
    """Summarize one config's processes (failed when any of them failed)."""
    bad = next((r for r in runs if r.error), None)
    if bad is not None:
        return ConfigResult(name, FAILED, bad.error, runs)
    docs = [r.result for r in runs if r.result and not r.discarded]
    if not docs:
        return ConfigResult(name, FAILED, "no process ran", runs)
    out = ConfigResult(name, OK, None, runs)
    out.summary = stats.summarize(out.groups)
    out.input_wait_fraction = _median_of([_number(d, "input_wait_fraction") for d in docs])
    cpu = _median_of([_number(d, "cpu_seconds_per_image") for d in docs])
    out.cpu_seconds_per_image = cpu if cpu is not None and cpu > 0 else None
    return out


def diagnose(name: str, wait: float | None) -> str:
    if name == "input_only":
        return "stage bound: the input pipeline alone"
    if name == "compute_only":
        return "stage bound: the training step alone"
    if wait is None:
        return "unknown: no input wait reported"
    if wait > INPUT_BOUND:
        return f"input-bound: waits on input {wait:.0%} of the time (> {INPUT_BOUND:.0%})"
    return f"compute-bound: waits on input {wait:.0%} of the time"


def bounds(configs: Mapping[str, ConfigResult], cpus: int | None) -> Bound:
    stage_results = [configs.get(s) for s in STAGES]
    ok = [c for c in stage_results if c is not None and c.status == OK and c.summary is not None]
    stage = min(c.summary.median for c in ok if c.summary) if len(ok) == len(STAGES) else None
    budget = None
    per_image = [c.cpu_seconds_per_image for c in ok]
    if cpus and len(ok) == len(STAGES) and all(p is not None for p in per_image):
        budget = cpus / sum(p for p in per_image if p is not None)
    return Bound(stage, budget, cpus)


def finish(configs: dict[str, ConfigResult], bound: Bound) -> None:
    """Diagnoses, and each training config's fraction of the bound, in place.

    The stages (input_only, compute_only) get none: the bound is made of them, each measured alone
    with every CPU, and bounds the pipelines that run both at once, not the stages themselves. It
    is at most the slower stage, so the faster one is above 1 by construction, and when the CPU
    budget (their CPU costs added) is the smaller, the slower one is usually above 1 too."""
    for c in configs.values():
        if c.status != OK or c.summary is None:
            continue
        c.diagnosis = diagnose(c.name, c.input_wait_fraction)
        if bound.value and c.name not in STAGES:
            c.fraction_of_bound = c.summary.median / bound.value


def verdict(configs: Mapping[str, ConfigResult], a: str, b: str) -> dict[str, Any]:
    """A against B as JSON: the stats comparison, or why there is none."""
    ca, cb = configs.get(a), configs.get(b)
    for c, name in ((ca, a), (cb, b)):
        if c is None or c.status != OK:
            why = "not run" if c is None else f"{c.status}: {c.reason or ''}".rstrip(": ")
            return {"verdict": SKIPPED, "ratio": None, "ratio_ci95": None, "reason": f"{name} {why}"}
    assert ca is not None and cb is not None
    cmp = stats.compare(ca.groups, cb.groups, names=(a, b))
    return {
        "verdict": cmp.verdict,
        "ratio": cmp.ratio,
        "ratio_ci95": list(cmp.ratio_ci95),
        "reason": cmp.reason,
    }


def busy_notes(configs: Iterable[ConfigResult]) -> list[str]:
    """A note for each config measured while other processes took a noticeable share of the CPUs."""
    out = []
    for c in configs:
        dropped = [r for r in c.runs if r.discarded]
        if dropped:
            worst = max(r.interference or 0 for r in dropped)
            out.append(
                f"{c.name}: {len(dropped)} process(es) left out and run again: other processes used up to "
                f"{worst:.0%} of the CPU time while they ran"
            )
        share = c.interference
        if share is not None and share > BUSY_SHARE:
            out.append(
                f"{c.name}: other processes used {share:.0%} of the CPU time while it ran: its figures "
                "are disturbed; rerun on a quiet machine"
            )
    return out


def usable_cpus() -> int | None:
    """CPUs a job started here can keep busy: affinity, cgroup cpuset and CFS quota."""
    return cgroup.collect(LocalHost()).effective_cpus


def sizes_for(quick: bool, repeats: int | None = None, processes: int | None = None) -> Sizes:
    s = QUICK if quick else FULL
    if repeats is not None:
        s = replace(s, repeats=repeats)
    if processes is not None:
        s = replace(s, processes=processes)
    return s


def ensure_data(sizes: Sizes) -> Path:
    return data.ensure_dataset(sizes.images, sizes.image_size, sizes.shards)


def run_bench(
    quick: bool,
    profile: str | None = None,
    repeats: int | None = None,
    processes: int | None = None,
    on_progress: ProgressFn | None = None,
    configs: Sequence[str] = CONFIGS,
    on_event: EventFn | None = None,
) -> BenchResult:
    """The whole benchmark. `profile` None means "default"; without a usable profile, tuned is
    skipped (with the reason) and the rest still runs. Progress: each worker's steps to
    `on_progress`; to `on_event`, the data set being prepared, the steps and each worker's end."""
    start = time.monotonic()
    sizes = sizes_for(quick, repeats, processes)
    profile_name = profile or "default"
    if on_event is not None:
        on_event(Preparing(sizes.images))
    data = ensure_data(sizes)
    env = clean_env(os.environ)
    results: dict[str, ConfigResult] = {}
    specs: list[Spec] = []
    notes: list[str] = []
    for name in configs:
        argv = worker_argv(name, data, sizes)
        if name == "tuned":
            problem = profile_problem(profile_name)
            if problem is not None:
                results[name] = ConfigResult(name, SKIPPED, problem)
                continue
            argv = exec_argv(profile_name, argv)
        specs.append(Spec(name, argv, env))
    # Quick mode is a smoke test with a time budget (a minute): disturbed processes are
    # reported in the notes, not run again.
    runs = run_specs(
        specs,
        sizes.processes,
        sizes.timeout_s,
        on_progress,
        rerun_disturbed=not quick,
        on_event=on_event,
        timed_steps=sizes.steps * sizes.repeats,
    )
    for name in configs:
        if name in runs:
            results[name] = config_result(name, runs[name])
    ordered = {n: results[n] for n in configs if n in results}
    bound = bounds(ordered, usable_cpus())
    finish(ordered, bound)
    verdicts = {
        "tuned_vs_naive": verdict(ordered, "tuned", "naive"),
        "tuned_vs_autotune": verdict(ordered, "tuned", "autotune"),
        "autotune_vs_naive": verdict(ordered, "autotune", "naive"),
    }
    notes += busy_notes(ordered.values())
    if quick:
        notes.append("quick mode: small data, few steps, one process per config; figures are indicative")
    return BenchResult(
        ordered,
        bound,
        verdicts,
        quick,
        time.monotonic() - start,
        sizes,
        profile_name if "tuned" in configs else None,
        str(data),
        notes,
    )


# -- the configs as table rows (the CLI's table and the TUI's share them) ------------------------


def shown_number(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


# The columns of config_rows, with how each is aligned (the CLI's table and the TUI's share them).
CONFIG_COLUMNS = (
    ("config", "left"),
    ("status", "left"),
    ("median", "right"),
    ("95% CI", "right"),
    ("of bound", "right"),
    ("input wait", "right"),
    ("diagnosis", "left"),
)


def config_rows(configs: Mapping[str, ConfigResult]) -> list[list[str]]:
    """Rows of the configs table: name, status, median, 95% CI (+-%), fraction of bound, wait, diagnosis."""
    rows = []
    for c in configs.values():
        if c.status != OK or c.summary is None:
            rows.append([c.name, c.status, "-", "-", "-", "-", (c.reason or "").splitlines()[0][:160]])
            continue
        s = c.summary
        rows.append(
            [
                c.name,
                c.status,
                f"{s.median:.1f}",
                f"[{s.ci95[0]:.1f}, {s.ci95[1]:.1f}] ±{s.half_width_pct:.1f}%",
                shown_number(c.fraction_of_bound, "{:.2f}"),
                shown_number(c.input_wait_fraction, "{:.0%}"),
                c.diagnosis or "",
            ]
        )
    return rows
