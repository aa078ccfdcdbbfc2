"""The controller's central work for N hosts, without the network: recorded pulls replayed through it.

`nodeagent check --cluster` pulls each host's recording over SSH and then, here on the controller,
decodes it, runs the checks and facts on it, compares the fleet and writes the JSON report. This
feeds N recorded pull streams through that same path (nodeagent.cluster.runner.replay_fleet, on the
same worker processes as over SSH, then FleetReport.build and the JSON document as the CLI prints
it) and prints, for N = 64, 500 and 2,000 (median of --runs, each run a fresh process):

- wall time of the central path;
- controller CPU per host: user + system time of that process and of its worker processes, over
  the central path only (the interpreter's start-up and imports are left out: they are the same
  for any N), divided by N;
- peak memory: ru_maxrss of the process, and the largest of its worker processes.

The pulls are made the way a node makes them (nodeagent.host.recorder.record + encode, what the
bootstrap of nodeagent.cluster.pull runs there) from recorded machines under tests/fixtures (hwloc
trees and corpus recordings), host i getting machine i mod the number of machines; --pulls DIR adds
real pulls saved by `tests/perf/cluster_speed.py --save-pulls DIR` (namespace hosts: the whole
process table of a busy machine) to the mix.

Usage: .venv/bin/python tests/perf/cluster_replay.py [--hosts 64,500,2000] [--runs 3]
       [--processes N] [--pulls DIR]
(--processes 1 measures the single process; the default is what nodeagent picks for this machine.)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# Machines the synthesized pulls come from: every hwloc tree, and corpus recordings of GPU and CPU
# servers in several shapes (their raw data as the corpus holds it, built into trees).
CORPUS = [
    "ib-gpud-h100-roce-cx7-400-all-active",
    "nvlink-azhpc-diagnostics-73-v100-two-links-down",
    "smi-openpai-v100-sxm3-dbe-retired-pages",
    "sysfs-ghw-xeon-l5640-2socket",
    "topo-ml-engineering-h100-8gpu-nv18",
    "vm-virt-what-aws-ec2-c5-large",
]


def synthesized_pulls(work: Path) -> dict[str, bytes]:
    """machine name -> its pull stream, recorded from the fixtures as a node records itself."""
    from nodeagent import checks
    from nodeagent.cluster.runner import CheckJob
    from nodeagent.host import open_host, recorder
    from nodeagent.host.local import TreeHost
    from tests.support import fakefleet
    from tests.support.helpers import FIXTURE_TREES

    patterns, commands = CheckJob(checks.select()).declared()
    out: dict[str, bytes] = {}
    for machine in [*FIXTURE_TREES, *CORPUS]:
        with open_host(fakefleet.recorded_root(machine, work)) as host:
            assert isinstance(host, TreeHost)
            rec = recorder.record(host, patterns, commands)
            out[machine] = recorder.encode(rec, recorder.metadata(host, patterns, commands, ""))
    return out


def central_path(pulls: dict[str, bytes], hosts: int, processes: int | None) -> dict[str, Any]:
    """One measured run, in this (fresh) process: what the controller does once the pulls are in."""
    from nodeagent import checks
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import CheckJob, processes_for, replay_fleet
    from nodeagent.render import jsonout

    machines = sorted(pulls)
    streams = {f"node{i:04d}": pulls[machines[i % len(machines)]] for i in range(hosts)}
    job = CheckJob(checks.select())
    count = processes_for(job, hosts) if processes is None else processes
    start, cpu0 = time.perf_counter(), _cpu()
    outcomes = replay_fleet(streams, job, processes=count)
    report = FleetReport.build(outcomes, time.perf_counter() - start)
    text = jsonout.dumps(report.to_dict(), compact=True)  # as `check --cluster --format json` writes it
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    failed = sum(1 for o in outcomes.values() if not o.ok)
    return {
        "hosts": hosts,
        "processes": count,
        "wall_s": wall,
        "cpu_ms_per_host": cpu * 1000 / hosts,
        "peak_mib": own / 1024,
        "worker_peak_mib": workers / 1024,
        "json_mib": len(text) / 2**20,
        "failed": failed,
    }


def _cpu() -> float:
    """User + system seconds of this process and of its reaped children (the worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="64,500,2000", help="fleet sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--processes", type=int, default=None, help="worker processes (default: nodeagent's choice)"
    )
    ap.add_argument("--pulls", type=Path, help="a folder of *.pull streams to add to the fixtures'")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one measured run, in a fresh process
    args = ap.parse_args()
    if args.one:
        pulls = pickle.loads(Path(args.one).read_bytes())
        print(json.dumps(central_path(pulls, int(args.hosts), args.processes)))
        return 0

    with tempfile.TemporaryDirectory(prefix="nodeagent-replay-") as tmp:
        work = Path(tmp)
        pulls = synthesized_pulls(work)
        if args.pulls:
            pulls |= {f"pulled-{p.stem}": p.read_bytes() for p in sorted(args.pulls.glob("*.pull"))}
        saved = work / "pulls.pickle"
        saved.write_bytes(pickle.dumps(pulls))
        size = statistics.median(len(s) for s in pulls.values()) / 1024
        print(
            f"{len(pulls)} distinct recordings (median {size:.0f} KiB on the wire), {os.cpu_count()} CPUs, "
            f"load average {load()} at the start; median of {args.runs} runs, each a fresh process"
        )
        print(
            f"{'hosts':>6} {'procs':>5} {'wall s':>8} {'CPU ms/host':>12} {'peak MiB':>9} {'worker MiB':>11}"
        )
        for hosts in [int(h) for h in args.hosts.split(",")]:
            runs = [_run(saved, hosts, args.processes) for _ in range(args.runs)]
            failed = max(r["failed"] for r in runs)
            print(
                f"{hosts:>6} {runs[0]['processes']:>5} {_median(runs, 'wall_s'):>8.2f} "
                f"{_median(runs, 'cpu_ms_per_host'):>12.1f} {_median(runs, 'peak_mib'):>9.0f} "
                f"{_median(runs, 'worker_peak_mib'):>12.0f}"
                + (f"  ({failed} hosts failed!)" if failed else "")
                + f"  (walls: {_shown(runs, 'wall_s')}; CPU: {_shown(runs, 'cpu_ms_per_host')})"
            )
        print(f"load average {load()} at the end")
    return 0


def _run(saved: Path, hosts: int, processes: int | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", str(saved), "--hosts", str(hosts)]
    if processes is not None:
        argv += ["--processes", str(processes)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=1800)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _shown(runs: list[dict[str, Any]], key: str) -> str:
    return ", ".join(f"{r[key]:.2f}" for r in runs)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


if __name__ == "__main__":
    raise SystemExit(main())
