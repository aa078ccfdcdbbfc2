"""A fake benchmark worker, for the tests of the benchmark's orchestration and of `tune --verify`:
the worker's contract with synthetic numbers, in seconds and without TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import run

FAKE_WORKER = r'''"""A stand-in for `python -m nodeagent.bench.worker` that speaks its contract
(argv, `progress` lines on stderr, one JSON line last on stdout) with synthetic numbers and no
TensorFlow, so the orchestration (nodeagent.bench.run, .verify) is tested in a second.

Its throughput: FAKE_SPEED_<CONFIG> (default 100) images/s, x1.5 when TF_NUM_INTRAOP_THREADS is
set above 1 (as a tuned profile sets it), x0.5 when it is 1 (the harmful profile), with a small
deterministic jitter per repeat and one per process (from its pid; FAKE_STEADY=1: none, so that two
runs give the same figures). FAKE_FAIL_<CONFIG>=message makes it fail with that message
(FAKE_FAIL_WHEN_TUNED=message: when TF_NUM_INTRAOP_THREADS is set).
FAKE_ARGS_LOG=path appends its argv and environment of interest to a file (one JSON per line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--image-size", type=int, required=True)
    p.add_argument("--warmup-steps", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--repeats", type=int, required=True)
    p.add_argument("--progress", action="store_true")
    p.add_argument("--serve", action="store_true")
    a = p.parse_args()
    key = a.config.upper()
    log = os.environ.get("FAKE_ARGS_LOG")
    if log:
        seen = {k: os.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS", "PYTHONPATH")}
        seen["NODEAGENT_TF_DATA_OPTIONS"] = os.environ.get("NODEAGENT_TF_DATA_OPTIONS")
        with open(log, "a") as f:
            f.write(json.dumps({"argv": sys.argv, "env": seen}) + "\n")
    total = a.warmup_steps + a.steps * a.repeats
    for done in range(total + 1):
        if a.progress:
            print(f"progress {done} {total}", file=sys.stderr, flush=True)
    fail = os.environ.get(f"FAKE_FAIL_{key}")
    if os.environ.get("FAKE_FAIL_WHEN_TUNED") and os.environ.get("TF_NUM_INTRAOP_THREADS"):
        fail = os.environ["FAKE_FAIL_WHEN_TUNED"]
    if fail:
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"RuntimeError: {fail}", file=sys.stderr)
        return 3
    speed = float(os.environ.get(f"FAKE_SPEED_{key}", "100"))
    intra = os.environ.get("TF_NUM_INTRAOP_THREADS")
    if intra == "1":
        speed *= 0.5
    elif intra:
        speed *= 1.5
    pid_jitter = 0.0 if os.environ.get("FAKE_STEADY") else (os.getpid() % 7 - 3) * 0.002
    values = [speed * (1 + pid_jitter + 0.004 * ((i * 3) % 5 - 2)) for i in range(a.repeats)]
    wait = None if a.config in ("input_only", "compute_only") else float(os.environ.get("FAKE_WAIT", "0.4"))
    cpu = {"input_only": 0.004, "compute_only": 0.006}.get(a.config, 0.01)
    if a.serve:
        return serve(values[0] / (1 + pid_jitter - 0.008), wait, intra)
    print("some chatter on stdout")
    doc = {
        "config": a.config,
        "images_per_s": values,
        "input_wait_fraction": wait,
        "cpu_seconds_per_image": cpu,
        "batch": a.batch,
        "steps": a.steps,
        "repeats": a.repeats,
        "intra_op_threads": int(intra or 2),
        "inter_op_threads": 2,
        "tf_version": "fake",
        "tf_data_options": {},
    }
    print(json.dumps(doc))
    return 0


def serve(speed: float, wait: float | None, intra: str | None) -> int:
    """--serve: a ready line, then one repeat's figures per `run` line (jitter +-0.8%, by count)."""
    print(json.dumps({"ready": True, "intra_op_threads": int(intra or 2), "inter_op_threads": 2}), flush=True)
    for k, line in enumerate(sys.stdin):
        if line.strip() == "run":
            rate = speed * (1 + 0.004 * ((k * 3) % 5 - 2))
            print(json.dumps({"images_per_s": rate, "input_wait_fraction": wait, "cpu_s": 0.001}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

# Every config with its own speed, so the results cannot be mixed up between configs.
SPEEDS = {"naive": 100, "autotune": 140, "tuned": 100, "input_only": 200, "compute_only": 180}


def use_fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the fake worker instead of the real one; state (profiles, journals) in tmp_path.
    Returns the log file where each worker writes its argv and environment."""
    worker = tmp_path / "fake_worker.py"
    worker.write_text(FAKE_WORKER)
    real = run.worker_argv

    def fake_argv(config: str, data: Path, sizes: run.Sizes) -> list[str]:
        argv = real(config, data, sizes)
        assert argv[:3] == [sys.executable, "-m", run.WORKER]
        return [sys.executable, str(worker), *argv[3:]]

    monkeypatch.setattr(run, "worker_argv", fake_argv)
    monkeypatch.setattr(run, "ensure_data", lambda sizes: tmp_path / "data")
    monkeypatch.setattr(run, "usable_cpus", lambda: 2)
    # A neighbour's CPU use must not make these tests rerun processes (that has its own test).
    monkeypatch.setattr(run, "BUSY_SHARE", 2.0)
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(tmp_path / "state"))
    log = tmp_path / "workers.jsonl"
    monkeypatch.setenv("FAKE_ARGS_LOG", str(log))
    for name, speed in SPEEDS.items():
        monkeypatch.setenv(f"FAKE_SPEED_{name.upper()}", str(speed))
    return log


def make_profile(state: Path, *args: str) -> None:
    """A profile made as a user makes it: `nodeagent tune --apply` (process changes only, no root)."""
    env = {**os.environ, "NODEAGENT_STATE_DIR": str(state)}
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", "tune", "--apply", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]
