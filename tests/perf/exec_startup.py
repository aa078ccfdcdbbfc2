"""How long a trial's launcher takes to start the job: `nodeagent exec --profile P -- true` against
the launch resolved once and started by nodeagent.tuning.prepared (what verify's trials do), with
`python -c pass` as the floor. Prints the median and range of each over --runs starts, interleaved
so that a change of the machine's load hits all three alike.

    .venv/bin/python tests/perf/exec_startup.py [--runs 20]
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

from nodeagent.tuning import launcher, prepared

PROFILE = {"name": "perf", "env": {"OMP_NUM_THREADS": 2}, "tf_data": {"threading.private_threadpool_size": 2}}


def _seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        (state / "profiles").mkdir()
        (state / "profiles" / "perf.json").write_text(json.dumps(PROFILE))
        env = {**os.environ, "NODEAGENT_STATE_DIR": str(state)}
        os.environ["NODEAGENT_STATE_DIR"] = str(state)
        true = ["/bin/true"]
        launch, machine = launcher.plan("perf", None, true, print, named=True, environ=env)
        kept = state / "launch.json"
        prepared.write(kept, launch, machine)
        ways = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "nodeagent exec --profile perf": [
                sys.executable,
                "-m",
                "nodeagent",
                "exec",
                "--profile",
                "perf",
                "--",
                *true,
            ],
            "prepared launch": prepared.argv(kept),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.runs):
            for name, argv in ways.items():
                times[name].append(_seconds(argv, env))
    load = os.getloadavg()[0]
    print(f"exec start-up over {args.runs} starts each (load {load:.1f}, {os.cpu_count()} CPUs):")
    for name, values in times.items():
        print(
            f"  {name:32s} median {statistics.median(values):.3f} s  [{min(values):.3f}, {max(values):.3f}]"
        )


if __name__ == "__main__":
    main()
