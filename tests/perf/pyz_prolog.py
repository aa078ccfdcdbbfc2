"""How long the shipped Slurm prolog takes with build/nodeagent.pyz as its nodeagent: the first run of
a build against an empty cache (PEX_ROOT), which starts the unpack in the background and exits 75,
how long that unpack takes, later runs (the cache filled), and runs of the entry point that
`nodeagent.pyz install DIR` makes (with the time the install takes). scontrol is a fake that records
its calls, so every drain would show; the checks read a recording that passes, so none should.
No verdict on timings: the figures are for a person to read (docs/performance.md, "nodeagent.pyz").

Run after `make pyz`: `.venv/bin/python tests/perf/pyz_prolog.py [--runs 3]`.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support import fakefleet  # noqa: E402

PYZ = REPO / "build" / "nodeagent.pyz"
PROLOG = REPO / "nodeagent" / "integrations" / "slurm-prolog.sh"
PYTHON = "/usr/bin/python3"
RECORDING = "sysfs-ghw-xeon-l5640-2socket"


def wrapper(path: Path, command: list[str], root: str) -> Path:
    """`nodeagent` for the prolog: `command CMD --root RECORDING ARGS`."""
    path.write_text(
        f'#!/bin/sh\ncmd=$1; shift\nexec {shlex.join(command)} "$cmd" --root {shlex.quote(root)} "$@"\n'
    )
    path.chmod(0o755)
    return path


def prolog(work: Path, nodeagent: Path) -> tuple[float, int, int]:
    """(wall seconds, exit code, drains so far) of one run of the shipped prolog."""
    env = {
        "PATH": f"{work / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(work),
        "PEX_ROOT": str(work / "pex-root"),
        "FAKE_LOG": str(work / "scontrol.log"),
        "NODEAGENT": str(nodeagent),
        "NODEAGENT_CONFIG": str(work / "no-config"),
        "NODEAGENT_REPORT_DIR": "",
        "SLURMD_NODENAME": "node01",
        "SLURM_JOB_ID": "1",
    }
    started = time.monotonic()
    done = subprocess.run(["bash", str(PROLOG)], env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    log = work / "scontrol.log"
    drains = sum("state=drain" in line for line in log.read_text().splitlines()) if log.exists() else 0
    return took, done.returncode, drains


def wait_unlocked(pex_root: Path) -> float:
    """Seconds until the background unpack's lock is free (its process ended)."""
    started = time.monotonic()
    (lock,) = pex_root.glob("nodeagent-unpack.*.lock")
    with lock.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
    return time.monotonic() - started


def show(name: str, runs: list[tuple[float, int, int]]) -> None:
    times = [t for t, _, _ in runs]
    print(
        f"{name}: {', '.join(f'{t:.2f}' for t in times)} s (median {statistics.median(times):.2f});"
        f" exit codes {[rc for _, rc, _ in runs]}; drains {runs[-1][2]}"
    )


def main(argv: Mapping[str, int]) -> None:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{PYZ} ({PYZ.stat().st_size >> 20} MB), {PYTHON}, {os.cpu_count()} CPUs, load {load}")
    with tempfile.TemporaryDirectory(prefix="nodeagent-pyz-prolog.") as scratch:
        work = Path(scratch)
        (work / "bin").mkdir()
        scontrol = work / "bin" / "scontrol"
        scontrol.write_text('#!/bin/sh\necho "$*" >>"$FAKE_LOG"\n')
        scontrol.chmod(0o755)
        root = fakefleet.recorded_root(RECORDING, work / "trees")
        pyz = wrapper(work / "bin" / "nodeagent", [PYTHON, str(PYZ)], root)
        show("prolog, first run of the pyz (empty PEX_ROOT)", [prolog(work, pyz)])
        print(f"  the background unpack ended {wait_unlocked(work / 'pex-root'):.1f} s later")
        show("prolog, later runs of the pyz", [prolog(work, pyz) for _ in range(argv["runs"])])
        started = time.monotonic()
        subprocess.run(
            [PYTHON, str(PYZ), "install", str(work / "opt")], check=True, stdout=subprocess.DEVNULL
        )
        print(f"nodeagent.pyz install DIR: {time.monotonic() - started:.1f} s")
        installed = wrapper(work / "installed", [str(work / "opt" / "bin" / "nodeagent")], root)
        show("prolog, the installed entry point", [prolog(work, installed) for _ in range(argv["runs"])])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    main(vars(parser.parse_args()))
