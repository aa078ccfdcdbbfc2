"""`nodeagent ARGV` in a process of its own, its standard output a pipe, with the stand-ins the
tests use for what they cannot reach: `python -m tests.support.piped_driver CONFIG ARGV...`, run from the
repository (tests/integration/test_piped_output.py). CONFIG is JSON:

- "fleet": {"machines": {host: recording}, "trees": DIR, "inventory": PATH}: the hosts of the
  inventory answer over a fake SSH transport with their recordings (tests/support/fakefleet.py); with
  "agents": true, a host's `nodeagent ARGV` (tune, check --remote-agent) is this nodeagent run on
  its recording; with "gbits": [...], the bandwidth measured between the hosts is these figures,
  one per planned link in the plan's order (a number, or null for a link that gave none), and
  nodeagent's own evaluation judges them;
- "fake_worker": DIR: the benchmark's worker is tests/support/fake_bench.py's (no TensorFlow), its state
  in DIR;
- "quiet": true: the CPU time of other processes does not make A/B trials run again (on a busy
  machine they would, and the test would only take longer).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import fakefleet

LATENCY_MS = 0.05


def _answer_agents(mp: pytest.MonkeyPatch, machines: dict[str, str], trees: Path) -> None:
    from nodeagent.cluster import ssh

    def run(conn: Any, command: str, timeout: float, stdin: bytes | None = None) -> ssh.Output:
        argv = shlex.split(command)[1:]  # `nodeagent tune --profile default ... --format json`
        root = fakefleet.recorded_root(machines[conn.name], trees)
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent", *argv, "--root", root],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return ssh.Output(done.stdout, done.stderr, done.returncode)

    mp.setattr(ssh, "run", run)


def _measured_links(mp: pytest.MonkeyPatch, gbits: Sequence[float | None]) -> None:
    from nodeagent.cluster.bandwidth import measure

    def links(inventory: Any, keys: Any, params: Any, parallel: int = 64) -> measure.BandwidthReport:
        pairs = measure.plan_links([h.name for h in inventory.hosts], params.mode)
        measured = [
            measure.Link(
                src,
                dst,
                "iperf3",
                g,
                LATENCY_MS if g is not None else None,
                None if g is not None else "no answer",
            )
            for (src, dst), g in zip(pairs, gbits, strict=True)
        ]
        return measure.BandwidthReport(measured, measure.evaluate(measured, params))

    mp.setattr(measure, "measure", links)


def prepare(config: dict[str, Any], mp: pytest.MonkeyPatch) -> None:
    fleet = config.get("fleet")
    if fleet is not None:
        trees = Path(fleet["trees"])
        fakefleet.install(mp, fleet["machines"], trees, Path(fleet["inventory"]))
        if fleet.get("agents"):
            _answer_agents(mp, fleet["machines"], trees)
        if "gbits" in fleet:
            _measured_links(mp, fleet["gbits"])
    if "fake_worker" in config:
        from tests.support.fake_bench import use_fake_worker

        use_fake_worker(Path(config["fake_worker"]), mp)
    if config.get("quiet"):
        from nodeagent.bench import run

        mp.setattr(run, "BUSY_SHARE", 2.0)


def main(args: list[str]) -> Any:
    from nodeagent.cli.main import main as nodeagent

    prepare(json.loads(args[0]), pytest.MonkeyPatch())
    return nodeagent(args[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
