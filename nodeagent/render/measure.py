"""What `nodeagent exec --measure` prints on stderr when the job has ended (stdout is the job's)."""

from __future__ import annotations

from nodeagent.bench.measure import INPUT_BOUND, MeasuredRun, diagnosis
from nodeagent.render.literal import one_line

PREFIX = "nodeagent measure:"


def _resources(run: MeasuredRun) -> str:
    used = run.cpu_utilisation
    share = "unknown" if used is None else f"{used:.0%}"
    cpus = "1 CPU" if run.cpus == 1 else f"{run.cpus} CPUs"
    return f"wall time {run.wall_s:.1f} s, CPU utilisation {share} of {cpus}"


def lines(run: MeasuredRun) -> list[str]:
    """The summary: steps per second, the input wait share, the diagnosis, then (input-bound or
    unknown) one line per stage of the input pipeline, problems first, saying what can speed it up;
    or, for a job that ran no TensorFlow training step, its wall time and CPU use."""
    figures = run.figures
    if figures is None:
        return [f"{PREFIX} no TensorFlow training steps were seen: {_resources(run)}"]
    out: list[str] = []
    if figures.steps_per_s is not None:
        ranks = f" over {figures.processes} processes" if figures.processes > 1 else ""
        wait = figures.input_wait_fraction
        out.append(
            f"{PREFIX} {figures.steps_per_s:.1f} steps/s{ranks} ({figures.source}: {figures.measured_steps} "
            f"steps measured after {figures.warmup_steps} warm-up), input wait "
            + ("unknown" if wait is None else f"{wait:.0%} of the step time")
        )
    out.append(f"{PREFIX} {diagnosis(figures)}")
    # The stages matter when input holds the job back, or might: not for a compute-bound job.
    wait = figures.input_wait_fraction
    if figures.steps_per_s is not None and (wait is None or wait > INPUT_BOUND):
        # The op names and details come from the job's own files: one line each, whatever they hold.
        out.extend(f"{PREFIX} input stage: {one_line(a.text)}" for a in figures.advice)
    out.append(f"{PREFIX} {_resources(run)}")
    out.extend(f"{PREFIX} skipped {reason}" for reason in figures.skipped)
    return out
