#!/usr/bin/env python3
"""Wall time and peak RSS of `nodeagent check` and `nodeagent --help` on this machine.

Targets: check <= 1.0 s median, RSS <= 80 MB, --help <= 0.3 s. Prints figures; asserts
nothing (performance is measured here, not in tests). Usage: python tests/perf/check_speed.py [-n 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "nodeagent"


def measure(argv: list[str], runs: int) -> tuple[list[float], list[float], int]:
    walls: list[float] = []
    rss_mb: list[float] = []
    code = 0
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - start)
        rss_mb.append(usage.ru_maxrss / 1024)  # Linux reports kilobytes
        code = os.waitstatus_to_exitcode(status)
    return walls, rss_mb, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--runs", type=int, default=5)
    args = parser.parse_args()
    rows = [
        ("nodeagent check", [str(BIN), "check"], 1.0, 80.0),
        ("nodeagent check --format json", [str(BIN), "check", "--format", "json"], 1.0, 80.0),
        ("nodeagent --help", [str(BIN), "--help"], 0.3, None),
    ]
    print(f"{'command':32} {'median s':>9} {'min s':>7} {'max s':>7} {'peak RSS MB':>12}  target")
    for name, argv, wall_target, rss_target in rows:
        measure(argv, 1)  # warm the page cache and .pyc files
        walls, rss, code = measure(argv, args.runs)
        median = statistics.median(walls)
        target = f"<= {wall_target} s" + (f", <= {rss_target:.0f} MB" if rss_target else "")
        verdict = (
            "met" if median <= wall_target and (rss_target is None or max(rss) <= rss_target) else "MISSED"
        )
        print(
            f"{name:32} {median:9.3f} {min(walls):7.3f} {max(walls):7.3f} {max(rss):12.1f}  "
            f"{target} ({verdict}; exit {code}; {args.runs} runs)"
        )


if __name__ == "__main__":
    main()
