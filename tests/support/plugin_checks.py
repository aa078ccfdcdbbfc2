"""Checks registered at run time, as a third-party package's would be through the `nodeagent.checks`
entry-point group: what lists checks (the TUI, `nodeagent checks`) must list them too, which is how
the tests show that those lists are derived from the registry rather than written out."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent import checks
from nodeagent.api.check import Area, Check, NoParams
from nodeagent.core.finding import Finding
from nodeagent.host import Host


def plugin_check(
    check_id: str, findings: tuple[Finding, ...] = (), area: Area | None = None
) -> Check[None, NoParams]:
    """A check whose evaluate gives `findings`; without `area` it declares none, as a plug-in written
    before areas does."""

    def collect(host: Host) -> None:
        return None

    def evaluate(facts: None, params: NoParams) -> list[Finding]:
        return list(findings)

    declared: dict[str, Any] = {} if area is None else {"area": area}
    return Check(check_id, f"plug-in {check_id}", ("plugin",), collect, evaluate, NoParams, **declared)


def register(monkeypatch: pytest.MonkeyPatch, *extra: Check[Any, Any]) -> None:
    """Add `extra` to the registry for one test (after the built-in ones, where plug-ins go)."""
    real = checks.all_checks
    monkeypatch.setattr(checks, "all_checks", lambda: (*real(), *extra))
