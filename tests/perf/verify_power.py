#!/usr/bin/env python3
"""How honest and how strong `nodeagent verify` is on this machine: per kind of job, the share of
right verdicts, the width of the 95% interval of B/A, the wall time, and where the power goes (the
trials' start-up share, the spread of adjacent pairs, the looks reached, the blocks left out as
disturbed). Prints figures; asserts nothing.

Kinds (`--kinds`, comma-separated; each runs `--runs` times, A/A kinds twice as often):
- py-aa, py-slower, py-faster: a CPU-bound Python loop of about 0.25 s that prints its own rate
  (work units over its own wall time, read with --metric). B's profile sets AB_WORK: the job's
  work grows by exactly 5% (1.05: slower), shrinks to 1/1.05 (faster: the rate is exactly 1.05
  times A's), or the profile sets a variable the job ignores (A/A: B is A).
- pyw-aa, pyw-slower, pyw-faster: the same loop, twice the work, as a job that prints its rate
  for each of 10 windows (verify reads them as 10 measured windows of one process).
- tf-aa, tf-slower, tf-faster: a small TensorFlow job (a compiled matmul step on one intra-op
  thread) that prints its steps/s for each of 10 windows after a warm-up that is not timed;
  TensorFlow's import is start-up.
- tfmt-aa, tfmt-slower: a 256 x 256 step on TensorFlow's default threads, whose rate varies too much
  between processes on a 2-vCPU machine for a 165 s budget (see TF_JOB).
- builtin-aa: the built-in tf.data + XLA workload with a profile that changes nothing.

Targets (on a quiet 2-CPU machine, `--quick`): 5% slower called slower and 5% faster called
faster in at least 9 of 10 runs, each within 180 s; A/A "no significant difference" in at least 19
of 20, its 95% interval within +-3%.

Each run is a fresh `nodeagent verify --format json` in its own state folder; nothing else should
run meanwhile. Before each kind it prints the load average, and before each run the CPU noise (the
spread of a fixed loop's time, which a busy virtual machine host raises while the load here is 0): a
trial disturbed by other processes is run again, and the figures then describe a busy machine.
`--save DIR` keeps each run's verify document with its noise reading (DIR/KIND-NN.json).

Usage: python tests/perf/verify_power.py [--runs 10] [--kinds py-aa,py-slower,...] [--pairs N] [--save DIR]
  (without --pairs: `verify --quick`, its 165 s budget; with it: `verify --pairs N`, no budget)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAME, SLOWER, FASTER = "no significant difference", "slower", "faster"

# The Python job: a fixed amount of work times AB_WORK; it prints the rate of the base work over
# its own wall time, so AB_WORK=1.05 makes it exactly 5% slower and 1/1.05 exactly 5% faster.
PY_JOB = r"""
import os, time
units = 40
per_unit = int(50_000 * float(os.environ.get("AB_WORK", "1")))
start = time.perf_counter()
total = 0
for _ in range(units):
    for i in range(per_unit):
        total += i
print(f"rate: {units / (time.perf_counter() - start):.6f} units/s")
"""
PY_UNITS = 40

# The same loop as a job that logs its rate as it goes: 10 windows of 8 units (about 0.05 s each
# here), each printing its own rate, read by verify as 10 measured windows of one process.
PYW_JOB = r"""
import os, time
per_unit = int(50_000 * float(os.environ.get("AB_WORK", "1")))
for window in range(10):
    start = time.perf_counter()
    total = 0
    for _ in range(8):
        for i in range(per_unit):
            total += i
    print(f"window {window}: rate: {8 / (time.perf_counter() - start):.6f} units/s", flush=True)
"""
PYW_UNITS = 80

# The TensorFlow job: a compiled step (a 512 x 512 matmul) on one intra-op thread, its first calls
# (tracing, compiling) untimed, then 10 windows of 30 x AB_WORK steps, each printing the rate of its
# 30 base steps (a training job logging its throughput as it goes; it counts the steps it ran over
# AB_WORK, so B/A is exactly 1 / AB_WORK although the step count is rounded). TensorFlow's import
# is start-up.
# Why this shape: on this 2-vCPU machine the rate of most small steps varies too much from one
# process to the next for any 165 s budget to resolve 5% (coefficient of variation of the median
# window rate over 5-8 processes: 256 x 256 on TensorFlow's two default threads 10.8%, on one
# 8.6%, 512 on two 14.0%, 1024 on two 15.4%; 512 on one thread 1.4-1.5%). The default-thread job
# is kept as tfmt-*: there verify must say it could not decide.
TF_JOB = r"""
import os, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(THREADS)
tf.config.threading.set_inter_op_parallelism_threads(THREADS)
steps = STEPS
work = float(os.environ.get("AB_WORK", "1"))
x = tf.random.stateless_normal((SIZE, SIZE), seed=(1, 2))

@tf.function(jit_compile=True)
def step(x):
    return tf.tanh(tf.linalg.matmul(x, x) / SIZE.0)

for _ in range(3):
    y = step(x)
y.numpy()
done = round(steps * work)
for window in range(10):
    start = time.perf_counter()
    for _ in range(done):
        y = step(x)
    y.numpy()
    rate = done / work / (time.perf_counter() - start)
    print(f"window {window}: rate: {rate:.6f} steps/s", flush=True)
"""


def tf_job(size: int, steps: int, threads: int) -> str:
    """The TensorFlow job for one matrix size, steps per window and thread count (0: TF's default)."""
    return TF_JOB.replace("SIZE", str(size)).replace("STEPS", str(steps)).replace("THREADS", str(threads))


TF_ONE_THREAD = tf_job(512, 30, 1)
TF_STEPS = 300
TF_DEFAULT_THREADS = tf_job(256, 150, 0)
TFMT_STEPS = 1500
METRIC = r"rate: ([0-9.]+)"


@dataclass(frozen=True)
class Kind:
    name: str
    job: str | None  # None: the built-in workload
    units: int  # work units the job reports its rate of (its timed work is units x work / rate)
    env: dict[str, str]  # B's profile environment
    work: float  # B's work relative to A's
    want: str


FIVE = 1.05
KINDS = {
    "py-aa": Kind("py-aa", PY_JOB, PY_UNITS, {"AB_UNUSED": "1"}, 1.0, SAME),
    "py-slower": Kind("py-slower", PY_JOB, PY_UNITS, {"AB_WORK": repr(FIVE)}, FIVE, SLOWER),
    "py-faster": Kind("py-faster", PY_JOB, PY_UNITS, {"AB_WORK": repr(1 / FIVE)}, 1 / FIVE, FASTER),
    "pyw-aa": Kind("pyw-aa", PYW_JOB, PYW_UNITS, {"AB_UNUSED": "1"}, 1.0, SAME),
    "pyw-slower": Kind("pyw-slower", PYW_JOB, PYW_UNITS, {"AB_WORK": repr(FIVE)}, FIVE, SLOWER),
    "pyw-faster": Kind("pyw-faster", PYW_JOB, PYW_UNITS, {"AB_WORK": repr(1 / FIVE)}, 1 / FIVE, FASTER),
    "tf-aa": Kind("tf-aa", TF_ONE_THREAD, TF_STEPS, {"AB_UNUSED": "1"}, 1.0, SAME),
    "tf-slower": Kind("tf-slower", TF_ONE_THREAD, TF_STEPS, {"AB_WORK": repr(FIVE)}, FIVE, SLOWER),
    "tf-faster": Kind("tf-faster", TF_ONE_THREAD, TF_STEPS, {"AB_WORK": repr(1 / FIVE)}, 1 / FIVE, FASTER),
    "tfmt-aa": Kind("tfmt-aa", TF_DEFAULT_THREADS, TFMT_STEPS, {"AB_UNUSED": "1"}, 1.0, SAME),
    "tfmt-slower": Kind("tfmt-slower", TF_DEFAULT_THREADS, TFMT_STEPS, {"AB_WORK": repr(FIVE)}, FIVE, SLOWER),
    "builtin-aa": Kind("builtin-aa", None, 0, {"AB_UNUSED": "1"}, 1.0, SAME),
}


def verify(state: Path, profile_env: dict[str, str], args: list[str]) -> tuple[dict[str, Any], float]:
    """One `nodeagent verify` run: its JSON and its wall time as the user waits for it (start-up,
    trials, the report)."""
    profiles = state / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "b.json").write_text(json.dumps({"env": profile_env}))
    env = {**os.environ, "NODEAGENT_STATE_DIR": str(state)}
    argv = [sys.executable, "-m", "nodeagent", "verify", "--profile", "b", "--format", "json", *args]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"verify failed (exit {proc.returncode}): {proc.stderr[-2000:]}") from None
    return doc, wall


def half_width_95(doc: dict[str, Any]) -> float:
    """Half the 95% interval's width on the log scale, in percent (as verify's half_width_pct)."""
    est = doc.get("estimate") or {}
    lo, hi = est.get("ci95") or [None, None]
    if not lo or not hi:
        return math.inf
    return math.expm1(math.log(hi / lo) / 2) * 100


def counted_values(doc: dict[str, Any]) -> list[float]:
    return [math.log(b["ratio"]) for b in doc["blocks"] if b["counted"] and b["ratio"]]


def pair_spread(doc: dict[str, Any]) -> float | None:
    """The spread of adjacent pairs: a robust sd of log(B/A) (1.4826 x the median absolute
    deviation), in percent."""
    d = counted_values(doc)
    if len(d) < 3:
        return None
    centre = statistics.median(d)
    return 1.4826 * statistics.median(abs(v - centre) for v in d) * 100


def startup_share(doc: dict[str, Any], kind: Kind) -> float | None:
    """The share of the trials' wall time not spent in the job's timed work (start-up, warm-up,
    nodeagent's launcher and its reading of the output): the timed work is units x work / rate."""
    if kind.job is None:
        return None
    wall = work = 0.0
    for b in doc["blocks"]:
        for t in b["trials"]:
            if t["rate"] and t["wall_s"]:
                wall += t["wall_s"]
                work += kind.units * (kind.work if t["side"] == "B" else 1.0) / t["rate"]
    return 1 - work / wall if wall else None


def shown(doc: dict[str, Any], wall: float) -> str:
    est = doc.get("estimate") or {}
    ci95 = est.get("ci95") or [0, 0]
    spread = pair_spread(doc)
    return (
        f"{doc['verdict']:<33} B/A {est.get('ratio', 0):.3f} 95% [{ci95[0] or 0:.3f}, {ci95[1] or 0:.3f}] "
        f"{doc['pairs']:>4} pairs {doc['disturbed_blocks']:>2} disturbed "
        f"spread {spread if spread is not None else math.nan:4.1f}% {wall:6.1f} s; {doc['stopped']}"
    )


def median_or_nan(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def summary(kind: Kind, docs: list[tuple[dict[str, Any], float]]) -> str:
    runs = len(docs)
    right = sum(1 for d, _ in docs if d["verdict"] == kind.want)
    widths = [half_width_95(d) for d, _ in docs]
    walls = [w for _, w in docs]
    spreads = [pair_spread(d) for d, _ in docs]
    shares = [startup_share(d, kind) for d, _ in docs]
    looks = [float(n) for d, _ in docs if (n := (d.get("estimate") or {}).get("n"))]
    left_out = sum(sum(1 for b in d["blocks"] if not b["counted"]) for d, _ in docs)
    blocks = sum(len(d["blocks"]) for d, _ in docs)
    stops = {
        "decided": sum(1 for d, _ in docs if d["stopped"].startswith("decided")),
        "budget": sum(1 for d, _ in docs if "budget" in d["stopped"]),
        "limit": sum(1 for d, _ in docs if "limit" in d["stopped"]),
    }
    finite = [w for w in widths if math.isfinite(w)]
    return (
        f"{kind.name}: {right}/{runs} {kind.want}; 95% half-width median {median_or_nan(widths):.1f}% "
        f"max {max(finite) if finite else math.nan:.1f}%; wall median {statistics.median(walls):.0f} s "
        f"max {max(walls):.0f} s; pairs at the verdict median {median_or_nan(looks):.0f}; "
        f"spread of adjacent pairs median {median_or_nan([s for s in spreads if s is not None]):.1f}%; "
        f"start-up share median {median_or_nan([s for s in shares if s is not None]) * 100:.0f}%; "
        f"left out as disturbed {left_out} of {blocks} blocks; stopped: {stops}"
    )


def cpu_noise_pct(repeats: int = 30, loop: int = 1_000_000) -> float:
    """The coefficient of variation (%) of the time of one fixed CPU-bound loop (about 0.1 s),
    repeated: how steady this machine's CPU is right now. A virtual machine whose host is busy with
    other guests shows it here while its own load average is 0 (seen here: 15%, when verify's adjacent
    pairs of the TensorFlow job spread by 6-20% against 2-3% on a quiet day)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(loop):
            total += i
        times.append(time.perf_counter() - start)
    return statistics.stdev(times) / statistics.mean(times) * 100


def series(kind: Kind, runs: int, args: list[str], job_dir: Path, save: Path | None) -> str:
    load = os.getloadavg()[0]
    print(f"\n{kind.name}: {runs} runs, wanted verdict: {kind.want}; load {load:.2f}", flush=True)
    argv = list(args)
    if kind.job is not None:
        script = job_dir / f"{kind.name.split('-')[0]}_job.py"
        script.write_text(kind.job)
        argv += ["--metric", METRIC, "--", sys.executable, str(script)]
    docs = []
    noise = []
    for i in range(runs):
        # Read before each run, not once a kind: the host's noise changes within minutes, and a run
        # on a noisy minute is told from a weak verify by this figure.
        noise.append(cpu_noise_pct())
        with tempfile.TemporaryDirectory() as tmp:
            doc, wall = verify(Path(tmp), kind.env, argv)
        docs.append((doc, wall))
        print(f"  {i + 1:>2}: CPU noise {noise[-1]:4.1f}%; {shown(doc, wall)}", flush=True)
        if save is not None:
            record = {
                "kind": kind.name,
                "run": i + 1,
                "cpu_noise_pct": noise[-1],
                "wall_s": wall,
                "verify": doc,
            }
            (save / f"{kind.name}-{i + 1:02d}.json").write_text(json.dumps(record, indent=1) + "\n")
    steadiness = f"CPU noise before the runs median {statistics.median(noise):.1f}% max {max(noise):.1f}%"
    return f"{summary(kind, docs)}; {steadiness}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="runs per kind (A/A kinds: twice as many)")
    parser.add_argument("--kinds", default="py-aa,py-slower,py-faster,tf-aa,tf-slower,tf-faster")
    parser.add_argument("--pairs", type=int, help="verify --pairs N instead of --quick (no time budget)")
    parser.add_argument("--save", type=Path, help="keep each run's verify document and CPU noise in DIR")
    a = parser.parse_args()
    names = [k.strip() for k in a.kinds.split(",") if k.strip()]
    unknown = [k for k in names if k not in KINDS]
    if unknown:
        raise SystemExit(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    args = ["--quick"] if a.pairs is None else ["--pairs", str(a.pairs)]
    if a.save is not None:
        a.save.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            kind = KINDS[name]
            runs = a.runs * 2 if kind.want == SAME else a.runs
            lines.append(series(kind, runs, args, Path(tmp), a.save))
    print(f"\nverify {' '.join(args)}, {os.cpu_count()} CPUs:")
    for line in lines:
        print(line)
    print(f"total {time.monotonic() - start:.0f} s; CPU noise at the end {cpu_noise_pct():.1f}%")


if __name__ == "__main__":
    main()
