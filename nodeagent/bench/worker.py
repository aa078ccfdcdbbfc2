"""One benchmark configuration in this (fresh) process; prints one JSON line on stdout.

    python -m nodeagent.bench.worker --config {naive,autotune,tuned,input_only,compute_only} \\
        --data DIR --batch B --image-size S --warmup-steps W --steps N --repeats R [--progress]

Each configuration needs its own process: TensorFlow sizes its intra-op and inter-op thread pools
once, at start-up (https://www.tensorflow.org/api_docs/python/tf/config/threading), and `tuned` is
launched by `nodeagent exec`, whose environment, CPU binding and tf.data hook apply from the start.

The warm-up steps are not timed: the first step compiles the XLA program, and the pipeline fills
its buffers and lets tf.data's autotuner settle. Then R repeats of N steps are timed, each ending
by fetching the loss (a GPU step returns before it finishes). For the training configurations the
time spent inside next(iterator), blocked on input, is summed: input_wait_fraction is that over
the loop time (the 20-30% threshold of the diagnosis is TF's own: https://www.tensorflow.org/guide/data_performance_analysis).

`--progress` prints `progress <done> <total>` on stderr after each step (warm-up included). The last
stdout line is the JSON result; errors go to stderr with a non-zero exit status, never into it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from nodeagent.bench import CONFIGS, DEFAULT, TRAINING_CONFIGS, data, model, pipeline
from nodeagent.hooks import sitecustomize as tf_data_hook

PROG = "python -m nodeagent.bench.worker"


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Run one configuration of the tf.data/XLA benchmark.")
    p.add_argument("--config", choices=CONFIGS, required=True)
    p.add_argument("--data", type=Path, required=True, help="a folder made by nodeagent.bench.data")
    p.add_argument("--batch", type=positive, default=DEFAULT.batch)
    p.add_argument("--image-size", type=positive, default=DEFAULT.size, help="training crop (px)")
    p.add_argument("--warmup-steps", type=non_negative, default=DEFAULT.warmup_steps)
    p.add_argument("--steps", type=positive, default=DEFAULT.steps, help="steps per repeat")
    p.add_argument("--repeats", type=positive, default=DEFAULT.repeats)
    p.add_argument("--progress", action="store_true", help="print `progress DONE TOTAL` on stderr")
    p.add_argument(
        "--serve",
        action="store_true",
        help="after the warm-up, run one timed repeat per `run` line on stdin (A/B trials)",
    )
    return p.parse_args(argv)


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.done = 0
        self.total = total
        self.enabled = enabled

    def step(self) -> None:
        self.done += 1
        if self.enabled:
            sys.stderr.write(f"progress {self.done} {self.total}\n")
            sys.stderr.flush()


@dataclass
class Timings:
    images_per_s: list[float] = field(default_factory=list)
    waited_s: float = 0.0
    loop_s: float = 0.0
    cpu_s: float = 0.0
    images: int = 0


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads, in nanoseconds' resolution
    (CLOCK_PROCESS_CPUTIME_ID): os.times counts clock ticks, 10 ms here, so a short timed loop
    read as 0 CPU seconds."""
    return time.process_time()


def timed_loop(
    one_step: Callable[[], float], finish: Callable[[], None], steps: int, repeats: int, batch: int
) -> Timings:
    """Run `repeats` x `steps` of `one_step` (which returns the seconds it waited on input)."""
    out = Timings()
    cpu0 = cpu_seconds()
    for _ in range(repeats):
        waited = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            waited += one_step()
        finish()
        elapsed = time.perf_counter() - start
        out.images_per_s.append(steps * batch / elapsed)
        out.waited_s += waited
        out.loop_s += elapsed
    out.cpu_s = cpu_seconds() - cpu0
    out.images = steps * batch * repeats
    return out


def effective_threads(tf: Any) -> tuple[int, int]:
    """The intra-op and inter-op pool sizes TensorFlow uses: the tf.config value when the program set
    one, else TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, else the CPUs this process may run on
    (tensorflow/core/common_runtime/process_util.cc: NumIntraOpThreadsFromEnvironment,
    DefaultNumInterOpThreads, port::MaxParallelism() = schedulable CPUs)."""
    cpus = len(os.sched_getaffinity(0))

    def pick(configured: int, var: str) -> int:
        if configured > 0:
            return configured
        try:
            from_env = int(os.environ.get(var, "0"))
        except ValueError:
            from_env = 0
        return from_env if from_env > 0 else cpus

    return (
        pick(tf.config.threading.get_intra_op_parallelism_threads(), "TF_NUM_INTRAOP_THREADS"),
        pick(tf.config.threading.get_inter_op_parallelism_threads(), "TF_NUM_INTEROP_THREADS"),
    )


def iterated_options(tf: Any, ds: Any) -> dict[str, Any]:
    """The options of the dataset really iterated: under `nodeagent exec` the tf.data hook iterates
    a copy carrying the profile's defaults, which it keeps on the dataset (the hook's _CACHE)."""
    iterated = getattr(ds, tf_data_hook._CACHE, None) or ds
    return pipeline.options_dict(iterated.options())


class LastStep:
    """The loss of the last training step: fetching it waits for the step to complete (a GPU step
    returns before it finishes)."""

    def __init__(self) -> None:
        self.loss: Any = None

    def finish(self) -> None:
        if self.loss is not None:
            self.loss.numpy()


@dataclass
class Steps:
    one_step: Callable[[], float]  # one step; returns the seconds it waited on input
    finish: Callable[[], None]  # waits for the last step to complete
    options: dict[str, Any]  # the tf.data options of the dataset iterated ({} when none is)


def input_only_step(it: Any, progress: Progress) -> Callable[[], float]:
    def one_step() -> float:
        next(it)  # the trivial consumer: take the batch, drop it
        progress.step()
        return 0.0

    return one_step


def compute_only_step(
    train: Callable[[Any, Any], Any], images: Any, labels: Any, last: LastStep, progress: Progress
) -> Callable[[], float]:
    def one_step() -> float:
        last.loss = train(images, labels)
        progress.step()
        return 0.0

    return one_step


def training_step(
    it: Any, train: Callable[[Any, Any], Any], last: LastStep, progress: Progress
) -> Callable[[], float]:
    def one_step() -> float:
        start = time.perf_counter()
        images, labels = next(it)
        waited = time.perf_counter() - start
        last.loss = train(images, labels)
        progress.step()
        return waited

    return one_step


def build_steps(
    tf: Any, keras: Any, args: argparse.Namespace, manifest: data.Manifest, gpu: bool, progress: Progress
) -> Steps:
    """The pipeline, the model and the step of the configuration."""
    config: str = args.config
    ds = pipeline.build(tf, config, manifest.files, args.image_size, args.batch)
    if gpu and config == "autotune":
        # The guide's GPU recipe: batches are copied to the GPU ahead of the step.
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
    it = iter(ds)
    options = iterated_options(tf, ds)
    last = LastStep()
    if config == "input_only":
        return Steps(input_only_step(it, progress), last.finish, options)

    net = model.build_model(keras, args.image_size, manifest.classes)
    train = model.make_train_step(tf, keras, net)
    if config != "compute_only":
        return Steps(training_step(it, train, last, progress), last.finish, options)
    images, labels = next(it)
    if gpu:
        with tf.device("/gpu:0"):
            images, labels = tf.identity(images), tf.identity(labels)
    # Stop the pipeline's background threads: only the step may use the CPUs now.
    del it, ds
    gc.collect()
    return Steps(compute_only_step(train, images, labels, last, progress), last.finish, {})


def warm_up(steps: Steps, count: int) -> tuple[float, float]:
    """Run the untimed warm-up steps: (the first step's seconds, XLA compilation mostly; all of them)."""
    start = time.perf_counter()
    first_step_s = 0.0
    for i in range(count):
        steps.one_step()
        if i == 0:
            steps.finish()
            first_step_s = time.perf_counter() - start
    steps.finish()
    return first_step_s, time.perf_counter() - start


@dataclass(frozen=True)
class RunDetails:
    warmup_steps: int
    device: str
    # Where a run's wall time goes besides the timed loop (interpreter start-up excluded).
    import_seconds: float
    setup_seconds: float
    first_step_seconds: float
    warmup_seconds: float


def result(
    tf: Any,
    args: argparse.Namespace,
    manifest: data.Manifest,
    details: RunDetails,
    options: dict[str, Any],
    timings: Timings,
) -> dict[str, Any]:
    """The JSON line the worker prints."""
    config: str = args.config
    intra, inter = effective_threads(tf)
    return {
        "config": config,
        "images_per_s": timings.images_per_s,
        "input_wait_fraction": timings.waited_s / timings.loop_s if config in TRAINING_CONFIGS else None,
        "cpu_seconds_per_image": timings.cpu_s / timings.images,
        "batch": args.batch,
        "steps": args.steps,
        "repeats": args.repeats,
        "intra_op_threads": intra,
        "inter_op_threads": inter,
        "tf_version": tf.__version__,
        "tf_data_options": options,
        "details": {
            "image_size": args.image_size,
            "stored_image_size": manifest.stored_size,
            "warmup_steps": details.warmup_steps,
            "device": details.device,
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "loop_seconds": timings.loop_s,
            "import_seconds": details.import_seconds,
            "setup_seconds": details.setup_seconds,
            "first_step_seconds": details.first_step_seconds,
            "warmup_seconds": details.warmup_seconds,
        },
    }


def run(
    tf: Any, keras: Any, args: argparse.Namespace, manifest: data.Manifest, import_s: float = 0.0
) -> dict[str, Any]:
    """Set up, warm up (untimed), then the timed repeats; the result as `result` gives it."""
    setup_start = time.perf_counter()
    gpu = bool(tf.config.list_physical_devices("GPU"))
    training = args.config != "input_only"
    # The first step compiles the XLA program: never inside the timed repeats.
    warmup = max(args.warmup_steps, 1) if training else args.warmup_steps
    progress = Progress(warmup + args.steps * args.repeats, args.progress)
    steps = build_steps(tf, keras, args, manifest, gpu, progress)
    setup_s = time.perf_counter() - setup_start
    first_step_s, warmup_s = warm_up(steps, warmup)
    if args.serve:
        serve(tf, args, steps)
    timings = timed_loop(steps.one_step, steps.finish, args.steps, args.repeats, args.batch)
    details = RunDetails(warmup, "GPU:0" if gpu else "CPU", import_s, setup_s, first_step_s, warmup_s)
    return result(tf, args, manifest, details, steps.options, timings)


def serve(tf: Any, args: argparse.Namespace, steps: Steps) -> NoReturn:
    """A/B trials: one timed repeat of `--steps` steps per `run` line on stdin, its figures as one
    JSON line on stdout; end of input ends the process at once. The process is started and warmed
    up once and then measured many times, interleaved with the other side's process, so a trial
    costs a fraction of a second instead of a start-up and an XLA compilation."""
    intra, inter = effective_threads(tf)
    ready: dict[str, Any] = {"ready": True, "intra_op_threads": intra, "inter_op_threads": inter}
    ready |= {"tf_version": tf.__version__, "tf_data_options": steps.options}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if line.strip() != "run":
            print(f"{PROG}: --serve reads `run` lines, not {line.strip()[:40]!r}", file=sys.stderr)
            continue
        t = timed_loop(steps.one_step, steps.finish, args.steps, 1, args.batch)
        wait = t.waited_s / t.loop_s if args.config in TRAINING_CONFIGS else None
        figures = {"images_per_s": t.images_per_s[0], "input_wait_fraction": wait, "cpu_s": t.cpu_s}
        sys.stdout.write(json.dumps(figures) + "\n")
        sys.stdout.flush()
    # Every figure is out. Releasing the pipeline's iterator waits for its tf.data threads: about 9
    # s here, every other process, while the next block's start-up waits for this one to end.
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        manifest = data.read_manifest(args.data)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if args.image_size > manifest.stored_size:
        print(
            f"{PROG}: --image-size {args.image_size} is larger than the stored images "
            f"({manifest.stored_size} px) of {args.data}",
            file=sys.stderr,
        )
        return 2
    # TensorFlow's C++ INFO and WARNING lines (oneDNN notices, CPU feature guards) would bury the
    # progress lines; ERROR and FATAL still print. Set before the import, which reads it.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    try:
        tf = importlib.import_module("tensorflow")
        keras = importlib.import_module("keras")
    except ModuleNotFoundError as e:
        print(f"{PROG}: {e}: install TensorFlow with: {data.INSTALL_HINT}", file=sys.stderr)
        return 1
    tf.get_logger().setLevel("ERROR")  # Python-side warnings (retracing notices); errors still raise
    result = run(tf, keras, args, manifest, time.perf_counter() - start)  # --serve: never returns
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
