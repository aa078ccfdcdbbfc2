"""The registry of checks: an explicit list, plus third-party checks from the `nodeagent.checks`
entry-point group (nodeagent.api.registry). Modules are imported when the registry is first asked
for, not on import of this package, so that importing one check never imports them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.api.check import Check
from nodeagent.api.registry import Registry

# Order is the order of reports: the node's foundations first, then devices, then the job's view.
BUILTIN = (
    "cstates",
    "numa",
    "hugepages",
    "kernel",
    "threads",
    "cpu_isa",
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

REGISTRY: Registry[Check[Any, Any]] = Registry(
    Check, "check", "nodeagent.checks", "CHECK", BUILTIN, ON_DEMAND
)


def all_checks() -> tuple[Check[Any, Any], ...]:
    """Every check: the built-in ones, the on-demand ones, then the plug-ins."""
    return REGISTRY.all()


def on_demand_ids() -> frozenset[str]:
    """The ids of the ON_DEMAND checks: run only when named."""
    return REGISTRY.on_demand_ids()


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Check[Any, Any]]:
    """The checks to run: `only` (in registry order) or all but the ON_DEMAND ones, less `skip`.
    Unknown ids are a UsageError."""
    # Chosen among this module's all_checks, so that a check added there (a test's) is selectable.
    return REGISTRY.select(only, skip, all_checks())
