"""What one agentless pull costs the node it records, without SSH: the pull's own command line
(`python3 -I -S -c BOOTSTRAP`, the payload on standard input, exactly as nodeagent.cluster.pull sends
it for every check) run --runs times on this machine, beside `python3 -I -S -c pass`, the
interpreter's own start. Prints the mean CPU (user + system, from the finished children) per run of each,
and the difference: what the recorder itself costs a node.

Run: `.venv/bin/python tests/perf/node_pull.py [--runs 40] [--user ACCOUNT] [--netns NAME]`.
--user runs both as that account (through runuser; root reads every process's environment, a
service account does not), --netns inside that network namespace (a tests/support/sshcluster.py host, whose
/sys/class/net holds its own interfaces only). The nodeagent imported is the interpreter's own
(installed, or this checkout through the editable install), so an older version installed in
another venv is measured by running this script with that venv's python.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import nodeagent  # noqa: F401  # the interpreter's own, when it has one
except ImportError:
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from nodeagent import checks
from nodeagent.cluster import pull
from nodeagent.cluster.runner import CheckJob

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3") or "python3"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_per_run(argv: list[str], stdin_path: Path, runs: int, prefix: list[str]) -> float:
    """Mean CPU seconds of `runs` runs of `argv` after `prefix` (the kernel accounts a child's time in
    ticks, so one run's figure is too coarse: the total over all of them is not)."""
    before = children_cpu()
    for _ in range(runs):
        with stdin_path.open("rb") as stdin:
            subprocess.run([*prefix, *argv], stdin=stdin, stdout=subprocess.DEVNULL, check=True)
    return (children_cpu() - before) / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--user", help="run as this account (runuser)")
    ap.add_argument("--netns", help="run inside this network namespace (ip netns exec)")
    args = ap.parse_args()
    prefix = (["ip", "netns", "exec", args.netns] if args.netns else []) + (
        ["runuser", "-u", args.user, "--"] if args.user else []
    )
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "payload"
        payload.write_bytes(CheckJob(checks.select()).pull_payload)
        os.chmod(tmp, 0o755)
        payload.chmod(0o644)
        env_clean = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"]  # as sshd gives a session
        # What the prefix, env and the process's own start cost, taken off the two below.
        shell = cpu_per_run([*env_clean, "true"], payload, args.runs, prefix)
        python = [*env_clean, PYTHON, "-I", "-S", "-c"]
        bare = cpu_per_run([*python, "pass"], payload, args.runs, prefix)
        pulls = cpu_per_run([*python, pull.BOOTSTRAP], payload, args.runs, prefix)
    interpreter = (bare - shell) * 1000
    recording = (pulls - shell) * 1000
    who = f"user {args.user or os.getuid()}, netns {args.netns or '-'}"
    print(f"{PYTHON}, {args.runs} runs each (means), {who}")
    print(f"python3 -I -S -c pass:  {interpreter:.1f} ms of CPU")
    recorder = recording - interpreter
    print(f"the pull's node side:   {recording:.1f} ms of CPU (the recorder: {recorder:.1f} ms)")


if __name__ == "__main__":
    main()
