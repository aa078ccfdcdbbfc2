"""The registry of checks: an explicit list, plus third-party checks from the `nodeagent.checks`
entry-point group. Modules are imported when the registry is first asked for, not on import of
this package, so that importing one check never imports them all."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from nodeagent.api.check import Check
from nodeagent.core.errors import UsageError

# Order is the order of reports: the node's foundations first, then devices, then the job's view.
BUILTIN = (
    "cstates",
    "numa",
    "hugepages",
    "kernel",
    "threads",
    "pcie",
    "topology",
    "gpu",
    "xid",
    "nvlink",
    "nic",
    "rdma",
)


# Checks that run only when asked for by id (`--only`, `snapshot --only`), listed after the others:
# active diagnostics that load every GPU for seconds or more, which neither the default `check` (on
# this machine or a cluster) nor a plain `snapshot` may start on a node that is running jobs.
ON_DEMAND = ("dcgm_diag",)


def _load(name: str) -> Check[Any, Any]:
    check: Check[Any, Any] = importlib.import_module(f"nodeagent.checks.{name}").CHECK
    return check


@lru_cache(maxsize=1)
def on_demand_ids() -> frozenset[str]:
    return frozenset(_load(name).id for name in ON_DEMAND)


@lru_cache(maxsize=1)
def all_checks() -> tuple[Check[Any, Any], ...]:
    checks: list[Check[Any, Any]] = [_load(name) for name in (*BUILTIN, *ON_DEMAND)]
    for ep in entry_points(group="nodeagent.checks"):
        extra = ep.load()
        if not isinstance(extra, Check):
            raise UsageError(f"entry point {ep.name} ({ep.value}) is not a nodeagent Check")
        checks.append(extra)
    ids = [c.id for c in checks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UsageError(f"two checks share the id {dupes[0]!r}; uninstall one of the plug-ins")
    return tuple(checks)


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Check[Any, Any]]:
    """The checks to run: `only` (in registry order) or all but the ON_DEMAND ones, less `skip`.
    Unknown ids are a UsageError."""
    checks = all_checks()
    known = {c.id for c in checks}
    unknown = [i for i in (*only, *skip) if i not in known]
    if unknown:
        raise UsageError(f"unknown check id {unknown[0]!r}; known: {', '.join(c.id for c in checks)}")
    wanted = set(only) or known - on_demand_ids()
    return [c for c in checks if c.id in wanted and c.id not in set(skip)]
