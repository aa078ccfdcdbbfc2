"""How long `nodeagent preflight --playbook preflight` takes on this machine, as a Slurm prolog or
a Kubernetes init container would run it: a fresh process each time, wall clock from start to exit.

Run: `.venv/bin/python tests/perf/preflight_speed.py [--runs 15] [--root PATH] [--playbook NAME]
[--baseline FILE]`; prints the median, the spread and the slowest checks of the last run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--root", help="a recorded node instead of this machine")
    ap.add_argument("--playbook", default="preflight")
    ap.add_argument("--baseline", help="a baseline file the node is compared with")
    args = ap.parse_args()
    argv = [str(Path(sys.executable).with_name("nodeagent")), "preflight", "--playbook", args.playbook]
    argv += ["--root", args.root] if args.root else []
    argv += ["--baseline", args.baseline] if args.baseline else []
    argv += ["--format", "json"]
    times: list[float] = []
    doc: dict[str, object] = {}
    codes: set[int] = set()
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        codes.add(proc.returncode)
        doc = json.loads(proc.stdout)
    checks = sorted(doc["checks"], key=lambda c: -c["duration_s"])  # type: ignore[call-overload]
    slowest = ", ".join(f"{c['id']} {c['duration_s']:.3f}s" for c in checks[:4])
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else times
    print(
        f"nodeagent preflight --playbook {args.playbook}: median {statistics.median(times):.3f} s "
        f"over {args.runs} runs "
        f"(p10 {q[0]:.3f}, p90 {q[-1]:.3f}, max {max(times):.3f}); exit codes {sorted(codes)}; "
        f"inside: {doc['duration_s']:.3f} s, slowest checks: {slowest}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
