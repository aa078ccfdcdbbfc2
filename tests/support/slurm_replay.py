"""Slurm's commands replaying their recordings (tests/fixtures/slurm/fanout/README.md), for tests that
run `--slurm` without daemons: sinfo, salloc, squeue, srun and scancel as small Python scripts on
PATH, each logging its command line to FAKE_SLURM_LOG."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "slurm" / "fanout"
TOOLS = ("sinfo", "salloc", "squeue", "srun", "scancel")

# sinfo lists n1-n4 (n4 drained); srun's probe step fails on n2, as recorded; its run step replays
# the recorded `srun-check` (the nodes' documents), or FAKE_SRUN_RUN's recording.
FAKE = r"""#!{python}
import os, sys
from pathlib import Path
fixtures = Path({fixtures!r})
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(" ".join([tool, *args]) + "\n")

def replay(name, code):
    sys.stdout.write((fixtures / (name + ".stdout")).read_text())
    err = fixtures / (name + ".stderr")
    if err.exists():
        sys.stderr.write(err.read_text())
    sys.exit(code)

if tool == "sinfo":
    if any(a.startswith("--format=") for a in args):
        replay("sinfo-partitions", 0)
    # n1-n3 as slurmctld saw them just before n2's slurmd stopped, n4 drained
    lines = [f"n{{i}}|idle|10.0.0.{{i}}|test*|none" for i in (1, 2, 3)]
    print("\n".join([*lines, "n4|idle+drain|10.0.0.4|test*|disk"]))
elif tool == "squeue":
    print("1")
elif tool == "srun":
    script = args[args.index("-c") + 1]
    if "rc=$(" in script:
        replay(os.environ.get("FAKE_SRUN_RUN", "srun-check"), 0)
    replay("srun-probe-launch-failed" if "--nodes=3" in args else "srun-probe-alone-launch-failed", 233)
"""


def install(bin_dir: Path) -> Path:
    """The fake tools in `bin_dir` (made); put it first on PATH and set FAKE_SLURM_LOG."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = bin_dir / tool
        path.write_text(FAKE.format(python=sys.executable, fixtures=str(FIXTURES)))
        path.chmod(0o755)
    return bin_dir
