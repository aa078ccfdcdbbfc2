#!/usr/bin/env python3
"""How honest and how strong `nodeagent verify` is on this machine: its false-positive rate, its
power, and the width of its interval on the built-in workload. Prints figures; asserts nothing.

- A/A: B's profile sets a variable the job ignores, so B is A. Target: "no significant difference"
  in at least 19 of 20 runs (a false-positive rate of at most 5%).
- 5% slower: B's profile sets AB_WORK=1.05, and the job's work grows by exactly 5% (it reports its
  own rate: work units over its own wall time, read with --metric). Target: "slower" in at least
  9 of 10 runs.
- built-in --quick: the half-width of the paired ratio's 95% interval (target <= 3%) and the wall
  time (target <= 3 minutes), on the tf.data + XLA workload with a profile that changes nothing.

Each run is a fresh `nodeagent verify` in its own state folder. Nothing else should run meanwhile:
a trial disturbed by other processes is run again, and the figures describe a busy machine.

Usage: python tests/perf/verify_power.py [--aa 20] [--aa-pairs 60] [--slower 10] [--pairs 200] [--builtin 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The job: a fixed amount of pure-Python work (about 0.25 s here) times AB_WORK; it prints the
# rate of the base work over its own wall time, so AB_WORK=1.05 makes it exactly 5% slower.
JOB = r"""
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
METRIC = r"rate: ([0-9.]+)"


def verify(state: Path, profile_env: dict[str, str], args: list[str]) -> dict[str, Any]:
    profiles = state / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "b.json").write_text(json.dumps({"env": profile_env}))
    env = {**os.environ, "NODEAGENT_STATE_DIR": str(state)}
    argv = [sys.executable, "-m", "nodeagent", "verify", "--profile", "b", "--format", "json", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"verify failed (exit {proc.returncode}): {proc.stderr[-2000:]}") from None
    return doc


def shown(doc: dict[str, Any]) -> str:
    est = doc.get("estimate") or {}
    ci95 = est.get("ci95") or [0, 0]
    return (
        f"{doc['verdict']:<26} B/A {est.get('ratio', 0):.3f} 95% [{ci95[0]:.3f}, {ci95[1]:.3f}] "
        f"{doc['pairs']:>4} pairs {doc['disturbed_blocks']:>2} disturbed {doc['wall_s']:6.1f} s"
    )


def series(
    name: str, runs: int, profile_env: dict[str, str], args: list[str], want: str
) -> list[dict[str, Any]]:
    print(f"\n{name}: {runs} runs, wanted verdict: {want}", flush=True)
    docs = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            doc = verify(Path(tmp), profile_env, args)
        docs.append(doc)
        print(f"  {i + 1:>2}: {shown(doc)}", flush=True)
    hits = sum(1 for d in docs if d["verdict"] == want)
    walls = [d["wall_s"] for d in docs]
    print(
        f"{name}: {hits}/{runs} {want}; wall median {statistics.median(walls):.0f} s, max {max(walls):.0f} s"
    )
    return docs


def half_width_95(doc: dict[str, Any]) -> float:
    est = doc["estimate"]
    lo, hi = est["ci95"]
    return float((hi - lo) / 2 / est["ratio"] * 100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--aa", type=int, default=20, help="A/A runs")
    parser.add_argument("--slower", type=int, default=10, help="5%%-slower runs")
    parser.add_argument("--builtin", type=int, default=3, help="built-in --quick runs")
    parser.add_argument("--pairs", type=int, default=200, help="the pair limit of the 5%%-slower runs")
    parser.add_argument(
        "--aa-pairs",
        type=int,
        default=60,
        help="the pair limit of the A/A runs (they run to it; the false-positive rate is at most 5%% at any)",
    )
    a = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(JOB)
        job_argv = ["--", sys.executable, str(job)]
        if a.aa:
            aa = ["--metric", METRIC, "--pairs", str(a.aa_pairs), *job_argv]
            series("A/A", a.aa, {"AB_UNUSED": "1"}, aa, "no significant difference")
        if a.slower:
            slower = ["--metric", METRIC, "--pairs", str(a.pairs), *job_argv]
            series("B 5% slower", a.slower, {"AB_WORK": "1.05"}, slower, "slower")
    if a.builtin:
        docs = series(
            "built-in --quick, A/A", a.builtin, {"AB_UNUSED": "1"}, ["--quick"], "no significant difference"
        )
        widths = [half_width_95(d) for d in docs if d.get("estimate")]
        if widths:
            print(
                f"built-in --quick: 95% half-width median {statistics.median(widths):.2f}%, "
                f"max {max(widths):.2f}% (target <= 3%); wall max {max(d['wall_s'] for d in docs):.0f} s "
                "(target <= 180 s)"
            )
    print(f"\ntotal {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
