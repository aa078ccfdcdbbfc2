"""The generic registry (nodeagent.api.registry) and its two instances, checks and tuners: order,
on-demand entries, selection, plug-ins from an entry-point group, and the errors users see."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent import checks, tuners
from nodeagent.api import registry
from nodeagent.api.registry import Registry
from nodeagent.core.errors import UsageError

PACKAGE = "registry_fixture_plugins"


@dataclass(frozen=True)
class Thing:
    id: str


@dataclass(frozen=True)
class FakeEntryPoint:
    name: str
    value: str
    loaded: object

    def load(self) -> object:
        return self.loaded


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package of three modules, each with a THING: "alpha", "beta" and the on-demand "slow"."""
    root = tmp_path / PACKAGE
    root.mkdir()
    (root / "__init__.py").write_text("")
    for module, thing_id in (("alpha", "alpha"), ("beta", "beta"), ("slow", "slow-diag")):
        (root / f"{module}.py").write_text(
            f"from tests.unit.test_registry import Thing\nTHING = Thing({thing_id!r})\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield PACKAGE
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def _registry(package: str) -> Registry[Thing]:
    return Registry(Thing, "thing", package, "THING", ("beta", "alpha"), ("slow",))


def _plugins(monkeypatch: pytest.MonkeyPatch, *found: FakeEntryPoint) -> list[str]:
    """Entry points of the group the registry asks for; returns the groups asked for."""
    asked: list[str] = []

    def entry_points(group: str) -> list[FakeEntryPoint]:
        asked.append(group)
        return list(found)

    monkeypatch.setattr(registry, "entry_points", entry_points)
    return asked


def test_order_is_built_in_then_on_demand_then_plug_ins(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _plugins(monkeypatch, FakeEntryPoint("extra", "site.extra:THING", Thing("extra")))
    reg = _registry(package)
    assert [t.id for t in reg.all()] == ["beta", "alpha", "slow-diag", "extra"]
    assert asked == [package]
    assert reg.all() is reg.all()  # loaded once
    assert asked == [package]


def test_select_leaves_on_demand_out_unless_named(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _plugins(monkeypatch)
    reg = _registry(package)
    assert [t.id for t in reg.select()] == ["beta", "alpha"]
    assert reg.on_demand_ids() == frozenset({"slow-diag"})
    # `only` keeps the registry's order, whatever order it is given in.
    assert [t.id for t in reg.select(["slow-diag", "beta"])] == ["beta", "slow-diag"]
    assert [t.id for t in reg.select([], ["beta"])] == ["alpha"]
    assert [t.id for t in reg.select(["alpha", "beta"], ["alpha"])] == ["beta"]


def test_select_among_a_given_pool(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _plugins(monkeypatch)
    reg = _registry(package)
    pool = (*reg.all(), Thing("added"))
    assert [t.id for t in reg.select([], [], pool)] == ["beta", "alpha", "added"]
    with pytest.raises(UsageError, match="unknown thing id 'added'"):
        reg.select(["added"])


def test_unknown_ids_name_the_first_and_every_known_one(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plugins(monkeypatch)
    reg = _registry(package)
    with pytest.raises(UsageError) as only:
        reg.select(["alpha", "gamma", "delta"])
    assert str(only.value) == "unknown thing id 'gamma'; known: beta, alpha, slow-diag"
    with pytest.raises(UsageError) as skip:
        reg.select([], ["omega"])
    assert str(skip.value) == "unknown thing id 'omega'; known: beta, alpha, slow-diag"


def test_a_plug_in_of_the_wrong_kind(package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _plugins(monkeypatch, FakeEntryPoint("bad", "site.bad:make", object()))
    with pytest.raises(UsageError) as err:
        _registry(package).all()
    assert str(err.value) == "entry point bad (site.bad:make) is not a nodeagent Thing"


def test_a_plug_in_that_reuses_an_id_is_refused_and_not_remembered(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plugins(monkeypatch, FakeEntryPoint("dup", "site.dup:THING", Thing("alpha")))
    reg = _registry(package)
    with pytest.raises(UsageError) as err:
        reg.all()
    assert str(err.value) == "two things share the id 'alpha'; uninstall one of the plug-ins"
    _plugins(monkeypatch)  # the plug-in uninstalled: the next call loads again
    assert [t.id for t in reg.all()] == ["beta", "alpha", "slow-diag"]


# -- the two instances -----------------------------------------------------------------------------


def test_checks_and_tuners_are_registries_of_their_packages() -> None:
    assert checks.REGISTRY.package == "nodeagent.checks" and checks.REGISTRY.attr == "CHECK"
    assert tuners.REGISTRY.package == "nodeagent.tuners" and tuners.REGISTRY.attr == "TUNER"
    assert checks.all_checks() == checks.REGISTRY.all()
    assert tuners.all_tuners() == tuners.REGISTRY.all()
    # Every built-in module is listed once and loads; module names are the ids with "_" for "-".
    assert [c.id.replace("-", "_") for c in checks.all_checks()][: len(checks.BUILTIN) + 1] == [
        *checks.BUILTIN,
        *checks.ON_DEMAND,
    ]
    assert [t.id.replace("-", "_") for t in tuners.all_tuners()][: len(tuners.BUILTIN)] == list(
        tuners.BUILTIN
    )


def test_check_and_tuner_errors_read_as_before() -> None:
    with pytest.raises(UsageError) as check_err:
        checks.select(["nosuchcheck"])
    ids = ", ".join(c.id for c in checks.all_checks())
    assert str(check_err.value) == f"unknown check id 'nosuchcheck'; known: {ids}"
    with pytest.raises(UsageError) as tuner_err:
        tuners.select([], ["nope"])
    ids = ", ".join(t.id for t in tuners.all_tuners())
    assert str(tuner_err.value) == f"unknown tuner id 'nope'; known: {ids}"


def test_plain_selection_leaves_the_on_demand_checks_out() -> None:
    plain = [c.id for c in checks.select()]
    assert "dcgm-diag" not in plain and "cpu-isa" in plain
    assert [c.id for c in tuners.select()] == [t.id for t in tuners.all_tuners()]


def test_select_chooses_among_what_all_checks_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check added to the module's all_checks (as a test registers one) can be selected."""
    extra: Any = Thing("added-for-a-test")
    real = checks.all_checks()
    monkeypatch.setattr(checks, "all_checks", lambda: (*real, extra))
    assert checks.select(["added-for-a-test"]) == [extra]
