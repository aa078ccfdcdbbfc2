"""What a node printing without end costs `nodeagent check --slurm`: the controller's peak memory
and time, against a real Slurm cluster (tests/support/slurmcluster.py: 2 nodes; needs root, slurm-wlm and
munge). n1 prints without end, n2 runs nodeagent on a recording; three ways of printing on n1:

- one endless line, written straight to the task's stdout (past the node script's base64): srun
  passes it on in labelled 1 KiB pieces;
- endless short lines ("AA"), the same way: the most lines, so the most per-line cost;
- endless output of the command, through the node script: base64 in 76-character lines.

Each run is `nodeagent check --slurm n[1-2]` in a child, stopped with SIGTERM after --seconds (it
then cancels its job); its peak RSS is the child's own (os.wait4). Prints one line per run and n1's
error; nothing is asserted (tests/integration/test_slurm_fanout.py and tests/unit/test_slurm_parse.py
assert the bounds).

Run as root: `.venv/bin/python tests/perf/slurm_bounds.py [--limit-mib 64] [--seconds 600]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.measured import run_measured
from tests.support.slurmcluster import SlurmCluster, slurm_available

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
MACHINE = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "hwloc" / "40intel64-2g2n4c+pcilocality.tar.bz2"
)
# What n1 runs instead of nodeagent; SLURM_TASK_PID is the node script's shell, whose stdout is the
# task's.
FLOODS = {
    "one endless line": "head -c 100000000000 /dev/zero | tr '\\0' A > \"/proc/$SLURM_TASK_PID/fd/1\"",
    "endless short lines": 'yes AA > "/proc/$SLURM_TASK_PID/fd/1"',
    "endless command output (base64)": "cat /dev/zero",
}


def agent(folder: Path, flood: str) -> Path:
    path = folder / f"agent-{len(list(folder.iterdir()))}"
    path.write_text(f'#!/bin/sh\n[ "$(hostname)" = n1 ] && {{ {flood}; exit; }}\nexec {NODEAGENT} "$@"\n')
    path.chmod(0o755)
    return path


def run(argv: list[str], env: dict[str, str], seconds: float) -> tuple[int, float, float, str]:
    """Exit code, seconds, peak RSS in MB, and its stdout (SIGTERM past `seconds`)."""
    m = run_measured(argv, env, seconds)
    return m.code, m.seconds, m.peak_mb, m.stdout


def n1_result(stdout: str) -> str:
    try:
        host = json.loads(stdout)["hosts"]["n1"]
    except (ValueError, KeyError):
        return "no report (stopped?)"
    error = host.get("error")
    if not error:
        return f"status {host.get('status')}"
    message = str(error["message"])
    return message[message.find(" on n1") + 1 :] if " on n1" in message else message


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-mib", type=int, default=64, help="NODEAGENT_MAX_STDOUT_MIB")
    ap.add_argument("--seconds", type=float, default=600.0, help="SIGTERM to nodeagent after this")
    args = ap.parse_args()
    reason = slurm_available()
    if reason is not None:
        sys.exit(f"slurm_bounds: no Slurm test cluster: {reason}")
    with tempfile.TemporaryDirectory(prefix="slurm-bounds-") as tmp, SlurmCluster(2, Path(tmp)) as cluster:
        agents = Path(tmp) / "agents"
        agents.mkdir()
        env = {**cluster.env, "NODEAGENT_MAX_STDOUT_MIB": str(args.limit_mib)}
        for name, flood in FLOODS.items():
            argv = [NODEAGENT, "check", "--slurm", "n[1-2]", "--root", MACHINE, "--format", "json"]
            argv += ["--agent", str(agent(agents, flood))]
            code, seconds, rss, stdout = run(argv, env, args.seconds)
            print(
                f"n1 {name}, NODEAGENT_MAX_STDOUT_MIB={args.limit_mib}: exit {code} in {seconds:.1f}s, "
                f"peak RSS {rss:.0f} MB",
                flush=True,
            )
            print(f"  n1: {n1_result(stdout)}", flush=True)
            subprocess.run(
                ["scancel", f"--partition={cluster.partition}"], env=cluster.env, timeout=60, check=False
            )


if __name__ == "__main__":
    main()
