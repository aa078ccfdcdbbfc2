"""A check's area has one home, its CHECK (nodeagent.api.check): every check nodeagent ships
declares one, and a plug-in that declares none is under Other."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent import checks
from nodeagent.api.check import Area, Check
from tests.plugin_checks import plugin_check


def shipped_checks() -> list[Check[Any, Any]]:
    """The registry's checks that nodeagent ships (the built-in and on-demand modules), not the
    plug-ins this environment may have installed, which README.md does not document."""
    # Module names are the ids with "_" for "-" (test_registry holds this).
    ids = {name.replace("_", "-") for name in (*checks.BUILTIN, *checks.ON_DEMAND)}
    return [c for c in checks.all_checks() if c.id in ids]


def test_every_shipped_check_declares_an_area() -> None:
    undeclared = [c.id for c in shipped_checks() if c.area is Area.OTHER]
    assert undeclared == [], "give each an area=Area.X in its CHECK"
    assert {c.id for c in shipped_checks()} >= {"xid", "cpu-isa", "dcgm-diag"}


def test_a_check_that_declares_no_area_is_other_and_one_named_by_its_text_is_that_area() -> None:
    assert plugin_check("probe").area is Area.OTHER
    named: Any = "GPUs and NVLink"  # as a plug-in without type hints may give it
    assert plugin_check("probe", area=named).area is Area.GPU


def test_an_area_outside_the_vocabulary_is_refused_naming_the_check() -> None:
    wrong: Any = "Storage"
    with pytest.raises(ValueError, match=r"check probe: area 'Storage' is not one of 'CPU and power', "):
        plugin_check("probe", area=wrong)
