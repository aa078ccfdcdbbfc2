"""The registry of tuners: an explicit list, plus third-party tuners from the `nodeagent.tuners`
entry-point group. Modules load when the registry is first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from nodeagent.api.tune import Tuner
from nodeagent.core.errors import UsageError

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


@lru_cache(maxsize=1)
def all_tuners() -> tuple[Tuner[Any, Any], ...]:
    tuners: list[Tuner[Any, Any]] = [
        importlib.import_module(f"nodeagent.tuners.{name}").TUNER for name in BUILTIN
    ]
    for ep in entry_points(group="nodeagent.tuners"):
        extra = ep.load()
        if not isinstance(extra, Tuner):
            raise UsageError(f"entry point {ep.name} ({ep.value}) is not a nodeagent Tuner")
        tuners.append(extra)
    ids = [t.id for t in tuners]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UsageError(f"two tuners share the id {dupes[0]!r}; uninstall one of the plug-ins")
    return tuple(tuners)


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Tuner[Any, Any]]:
    """The tuners to plan: `only` (in registry order) or all, less `skip`. Unknown ids are a UsageError."""
    tuners = all_tuners()
    known = {t.id for t in tuners}
    unknown = [i for i in (*only, *skip) if i not in known]
    if unknown:
        raise UsageError(f"unknown tuner id {unknown[0]!r}; known: {', '.join(t.id for t in tuners)}")
    wanted = set(only) or known
    return [t for t in tuners if t.id in wanted and t.id not in set(skip)]
