"""How long `nodeagent tui` takes from the command to its first paint, in a real terminal.

Starts `nodeagent tui --root tests/data/firecracker-vm-2cpu.tar.gz` in a detached tmux session
(Debian tmux) and polls the pane every 5 ms until the title and the footer are drawn; prints the
median and every run. The first paint needs no check result (statuses show "..." until they
arrive), and nothing heavy loads before it (TensorFlow, NVML and paramiko load when a screen asks).

Run: `.venv/bin/python tests/perf/tui_startup.py [--runs 10] [--live]` (--live: this machine
instead of the recorded snapshot).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.tmux_session import TmuxSession, tmux_missing  # noqa: E402

VM = REPO / "tests" / "data" / "firecracker-vm-2cpu.tar.gz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--live", action="store_true")
    args = ap.parse_args()
    missing = tmux_missing()
    if missing:
        print(missing)
        return 2
    argv = [str(Path(sys.executable).with_name("nodeagent")), "tui"] + (
        [] if args.live else ["--root", str(VM)]
    )
    times: list[float] = []
    for i in range(args.runs):
        start = time.perf_counter()
        with TmuxSession(f"nodeagent-perf-{os.getpid()}-{i}", argv) as term:
            term.wait_for("nodeagent", "Node", "Quit", poll=0.005)
            times.append(time.perf_counter() - start)
            term.keys("q")
    shown = ", ".join(f"{t:.2f}" for t in times)
    print(f"nodeagent tui, command to first paint: median {statistics.median(times):.2f} s (runs: {shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
