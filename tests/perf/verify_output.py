"""What a chatty job costs `nodeagent verify`: its peak memory and the temporary space its trials
leave, for a job that prints MiB of output per trial and leaves a process running after each.

Run: `.venv/bin/python tests/perf/verify_output.py [--mib 256] [--pairs 6]`; prints nodeagent's
peak RSS, the largest size of its temporary folder seen while it ran, the processes left alive
afterwards, and the wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = r"""
import subprocess, sys
subprocess.Popen(["sleep", "300"])  # left behind by every trial
line = b"x" * 1023 + b"\n"
for _ in range({mib} * 1024):
    sys.stdout.buffer.write(line)
print("rate: 100")
"""


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                continue
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="output of each trial, MiB")
    ap.add_argument("--pairs", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="verify-output-") as work:
        script = Path(work) / "job.py"
        script.write_text(JOB.format(mib=args.mib))
        tmp = Path(work) / "tmp"
        tmp.mkdir()
        env = {**os.environ, "TMPDIR": str(tmp), "NODEAGENT_STATE_DIR": str(Path(work) / "state")}
        (Path(work) / "state" / "profiles").mkdir(parents=True)
        (Path(work) / "state" / "profiles" / "same.json").write_text("{}\n")
        argv = [str(Path(sys.executable).with_name("nodeagent")), "verify", "--profile", "same"]
        argv += ["--pairs", str(args.pairs), "--metric", r"rate: (\d+)", "--", sys.executable, str(script)]
        start = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        largest = 0
        while proc.poll() is None:
            largest = max(largest, _size(tmp))
            time.sleep(0.2)
        wall = time.monotonic() - start
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        left = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True, check=False)
    print(f"trials: {args.pairs} pairs, {args.mib} MiB of output each; exit {proc.returncode}; {wall:.0f} s")
    print(f"nodeagent peak RSS: {peak_mib:.0f} MiB")
    print(f"temporary folder, largest seen: {largest / 2**20:.1f} MiB")
    print(f"'sleep 300' processes alive afterwards: {len(left.stdout.split())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
