"""A namespace cluster with one slowed link, and what `nodeagent check --cluster --bandwidth` says
of it: shared by tests/integration/test_cluster_bandwidth.py (one run, asserted) and
tests/perf/bandwidth_straggler.py (N runs, alone and with the CPUs loaded, printed).

Six hosts h1..h6 in a ring measure h1 -> h2, ..., h6 -> h1 at once. A token bucket in h3's
namespace limits only what h3 sends to h4's address (SSHCluster.slow_path), so one link, h3 -> h4,
is slowed: h3's in-link h2 -> h3 (whose ACKs leave h3 for h2) and h4's out-link h4 -> h5 are not,
and the right verdict names that link, not a host (a host is named when all its links are slow).
Limiting all that leaves h3 would not do: the ACKs of h2 -> h3 then queue behind the bucket too,
and that link loses half its rate or more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.sshcluster import SSHCluster

HOSTS = 6
SLOW_HOST = "h3"
SLOW_DST = "h4"
SLOW_LINK = "h3 -> h4"
SLOW_RATE = "20mbit"
NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))


def slow_one_link(cluster: SSHCluster) -> None:
    """h3 -> h4 limited to 20 Mbit/s (the veths carry Gbit/s), the queue bounded at 400 ms."""
    cluster.slow_path(SLOW_HOST, SLOW_DST, SLOW_RATE, latency="400ms")


@dataclass(frozen=True)
class Run:
    """One `check --cluster --bandwidth`: its exit code, each link's measured Gbit/s (None: not
    measured, with its error), and the subject and status of each WARN or FAIL bandwidth finding."""

    returncode: int
    rates: dict[str, float | None]
    errors: dict[str, str]
    flagged: dict[str, str]
    stderr: str

    def others(self) -> dict[str, str]:
        """What was flagged besides the slowed link."""
        return {subject: status for subject, status in self.flagged.items() if subject != SLOW_LINK}


def check_bandwidth(inventory: Path, *extra: str, timeout: float = 300) -> Run:
    """`nodeagent check --cluster INVENTORY --only kernel --bandwidth --format json` (the kernel
    check only: the hosts' checks are not what is measured here)."""
    argv = [NODEAGENT, "check", "--cluster", str(inventory), "--only", "kernel", "--bandwidth"]
    proc = subprocess.run(
        [*argv, "--format", "json", *extra], capture_output=True, text=True, timeout=timeout, check=False
    )
    if not proc.stdout:
        raise RuntimeError(f"{' '.join(argv)} printed nothing (exit {proc.returncode}): {proc.stderr}")
    bandwidth = json.loads(proc.stdout)["bandwidth"]
    rates = {f"{link['src']} -> {link['dst']}": link["gbits_per_s"] for link in bandwidth["links"]}
    errors = {
        f"{link['src']} -> {link['dst']}": link["error"] for link in bandwidth["links"] if link["error"]
    }
    flagged = {f["subject"]: f["status"] for f in bandwidth["findings"] if f["status"] in ("WARN", "FAIL")}
    return Run(proc.returncode, rates, errors, flagged, proc.stderr)
