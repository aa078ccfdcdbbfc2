"""Recording a baseline: a known-good node's (or fleet's) comparable values, saved to a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent import checks, engine
from nodeagent.app.fleet import FleetRequest, OnDone, SshSource, baseline_values
from nodeagent.core import safe_write
from nodeagent.core.errors import UsageError
from nodeagent.gate import baseline, judge
from nodeagent.host import open_host


@dataclass(frozen=True)
class Saved:
    path: Path
    hosts: int
    values: int
    source: str


def save(
    path: Path, root: str | None = None, fleet: FleetRequest | None = None, on_done: OnDone | None = None
) -> Saved:
    """Every check's values on this node (or the recording `root`, or every host of `fleet`) in `path`."""
    # A link or a device at `path` is refused before a fleet is read, not after (checked again
    # when writing).
    safe_write.check_target(path)
    inv = fleet.inventory() if fleet is not None else None
    values: dict[str, Any]
    if inv is not None:
        if root is not None:
            raise UsageError("--root reads one recorded node; it cannot be used with --cluster")

        assert fleet is not None
        values = baseline_values(SshSource(inv, fleet.workers, fleet.accept_new_host_keys), on_done)
        source = fleet.cluster or fleet.hostlist or "the fleet"
    else:
        values = _node_values(root)
        source = root or "this machine"
    baseline.save(values, path, source)
    return Saved(path, len(values), sum(len(v) for v in values.values()), source)


def _node_values(root: str | None) -> dict[str, Any]:
    with open_host(root) as host:
        rep = engine.run_report(host, checks.select())
        return {host.name: judge.values_of(host, rep)}
