"""Does `nodeagent check --cluster --bandwidth` find one slowed link every time, alone and with the
CPUs busy? Builds six namespace hosts (tests/support/sshcluster.py), limits what h3 sends to h4 to
20 Mbit/s (tests/support/straggler.py: one direction of one pair, so the link is the one to name, not a
host), runs the check --runs times without --min-gbits (the fleet's median is the only reference)
and prints, per run: every link's measured Gbit/s, whether h3 -> h4 was flagged and at which
status, and anything else flagged. No verdict on timings: the figures are for a person to read.

--load starts one busy loop per CPU (`python3 -c "while True: pass"`) before the first run and
kills them after the last: the hosts, iperf3 and nodeagent then share the CPUs with them, as on a
node whose data loaders are busy.

Run as root: `.venv/bin/python tests/perf/bandwidth_straggler.py [--runs 5] [--load]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support import straggler  # noqa: E402
from tests.support.sshcluster import SSHCluster, cluster_available  # noqa: E402

BUSY = "while True: pass"


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


@contextmanager
def busy_cpus(count: int) -> Iterator[list[int]]:
    """`count` busy loops for the block's duration; their pids. Each is killed by its own pid."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def gbits(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g}"


def print_run(i: int, run: straggler.Run) -> None:
    rates = ", ".join(f"{label} {gbits(rate)}" for label, rate in run.rates.items())
    measured = [rate for rate in run.rates.values() if rate is not None]
    median = statistics.median(measured) if measured else None
    slow = run.rates.get(straggler.SLOW_LINK)
    ratio = f"{slow / median:.4f} x the median" if slow is not None and median else "not measured"
    status = run.flagged.get(straggler.SLOW_LINK, "not flagged")
    others = ", ".join(f"{subject} {status}" for subject, status in run.others().items()) or "nothing"
    print(f"run {i}: exit {run.returncode}; Gbit/s: {rates}; median {gbits(median)}")
    print(f"  {straggler.SLOW_LINK}: {gbits(slow)} Gbit/s ({ratio}), {status}; also flagged: {others}")
    for label, error in run.errors.items():
        print(f"  {label} not measured: {error}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--load", action="store_true", help="one busy loop per CPU during the runs")
    args = ap.parse_args()
    reason = cluster_available()
    if reason is not None or shutil.which("iperf3") is None:
        print(f"cannot run here: {reason or 'no iperf3 (Debian iperf3)'}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="nodeagent-straggler-"))
    cpus = os.cpu_count() or 1
    print(
        f"{straggler.HOSTS} namespace hosts in a ring, {straggler.SLOW_LINK} limited to "
        f"{straggler.SLOW_RATE}; "
        f"{cpus} CPUs, {'one busy loop per CPU' if args.load else 'no other load'}; "
        f"load average {load()} at the start"
    )
    found = clean = 0
    with SSHCluster(straggler.HOSTS, work, loopback=False) as cluster:
        straggler.slow_one_link(cluster)
        inventory = cluster.write_inventory(work / "hosts.yml")
        with busy_cpus(cpus if args.load else 0):
            for i in range(1, args.runs + 1):
                run = straggler.check_bandwidth(inventory)
                print_run(i, run)
                found += straggler.SLOW_LINK in run.flagged
                clean += not run.others()
    print(
        f"{straggler.SLOW_LINK} flagged in {found} of {args.runs} runs, nothing else flagged in {clean} of "
        f"{args.runs}; load average {load()} at the end"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
