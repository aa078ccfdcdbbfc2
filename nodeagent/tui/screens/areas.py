"""The areas of the Overview and of the Checks screen's filter, derived from the registry of checks:
each check declares its area (nodeagent.api.check.Area), so every registered check, a plug-in's
included, is listed under one, and no list here can leave one out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodeagent.api.check import Area
from nodeagent.core.finding import Status, worst

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.engine import CheckResult


def registered() -> tuple[Check[Any, Any], ...]:
    """Every registered check, the on-demand ones included (they are listed even when not run)."""
    # Imported here: loading the registry imports every check module, which the first paint must not
    # wait for. Called through the module, so that a check a test adds to the registry is listed.
    from nodeagent import checks

    return checks.all_checks()


def by_area(listed: Sequence[Check[Any, Any]], result_ids: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """Area name -> the ids of its checks, areas in Area's order and checks in the registry's; only
    areas with a check. A result whose id no listed check has (a playbook's thresholds, the
    baseline's comparison) is in Other, so that its findings are shown too."""
    ids: dict[Area, list[str]] = {area: [] for area in Area}
    for check in listed:
        ids[check.area].append(check.id)
    known = {c.id for c in listed}
    ids[Area.OTHER] += sorted(set(result_ids) - known)
    return {area.value: tuple(found) for area, found in ids.items() if found}


def area_status(
    results: Mapping[str, CheckResult], running: Collection[str], ids: Iterable[str]
) -> Status | None:
    """The worst status of the checks `ids` that have a result; None while one of them is running or
    none has a result yet. A check that this run leaves out (an on-demand one, one a playbook does not
    name) is not waited for."""
    ids = tuple(ids)
    if any(i in running for i in ids):
        return None
    seen = [results[i].status for i in ids if i in results]
    return worst(seen) if seen else None
