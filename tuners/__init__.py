"""The registry of tuners: an explicit list, plus third-party tuners from the `nodeagent.tuners`
entry-point group (nodeagent.api.registry). Modules load when the registry is first asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.api.registry import Registry
from nodeagent.api.tune import Tuner

# Process-scope tuners first (they need no root), then the system knobs.
BUILTIN = (
    "numa_pinning",
    "tf_threads",
    "pinned_memory",
    "tf_data",
    "cpu_governor",
    "c_states",
    "hugepages",
    "thp",
    "numa_balancing",
)

REGISTRY: Registry[Tuner[Any, Any]] = Registry(Tuner, "tuner", "nodeagent.tuners", "TUNER", BUILTIN)


def all_tuners() -> tuple[Tuner[Any, Any], ...]:
    """Every tuner: the built-in ones, then the plug-ins."""
    return REGISTRY.all()


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Tuner[Any, Any]]:
    """The tuners to plan: `only` (in registry order) or all, less `skip`. Unknown ids are a UsageError."""
    # Chosen among this module's all_tuners, so that a tuner added there (a test's) is selectable.
    return REGISTRY.select(only, skip, all_tuners())
