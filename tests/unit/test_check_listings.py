"""A check's area has one home, its CHECK (nodeagent.api.check): every check nodeagent ships
declares one, a plug-in that declares none is under Other, and the lists of checks outside the TUI
are held to the registry here (docs/checks.md's table of what each check looks at, `nodeagent
checks`; the TUI's are in test_tui.py), failing with the check that is missing, extra or in another
area."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from nodeagent import checks
from nodeagent.api.check import Area, Check
from tests.support.cli import RunCli
from tests.support.paths import REPO
from tests.support.plugin_checks import plugin_check, register

CHECKS_PAGE = REPO / "docs" / "checks.md"
HEADING = "\n## What each check looks at\n"


def shipped_checks() -> list[Check[Any, Any]]:
    """The registry's checks that nodeagent ships (the built-in and on-demand modules), not the
    plug-ins this environment may have installed, which docs/checks.md does not document."""
    # Module names are the ids with "_" for "-" (test_registry holds this).
    ids = {name.replace("_", "-") for name in (*checks.BUILTIN, *checks.ON_DEMAND)}
    return [c for c in checks.all_checks() if c.id in ids]


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first table under HEADING, as {column name: cell}, backticks stripped."""
    section = text.split(HEADING, 1)[1].splitlines()
    table = itertools.dropwhile(lambda line: not line.startswith("|"), section)
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), table))
    cells = [[c.strip().strip("`") for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    header, _rule, *body = cells
    return [dict(zip(header, row, strict=True)) for row in body]


def table_drift(rows: Sequence[Mapping[str, str]], registered: Sequence[Check[Any, Any]]) -> list[str]:
    """What docs/checks.md's table says that the registry does not, one line each."""
    areas = {row["id"]: row["area"] for row in rows}
    problems = [
        f"docs/checks.md lists {i!r} twice" for i in sorted(areas) if [r["id"] for r in rows].count(i) > 1
    ]
    for c in registered:
        if c.id not in areas:
            problems.append(f"docs/checks.md's table has no row for {c.id!r} (area {c.area.value!r})")
        elif areas[c.id] != c.area.value:
            problems.append(f"docs/checks.md puts {c.id!r} in {areas[c.id]!r}; its CHECK in {c.area.value!r}")
    known = {c.id for c in registered}
    problems += [
        f"docs/checks.md lists {i!r}, which no registered check has" for i in sorted(set(areas) - known)
    ]
    return problems


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


def test_the_docs_table_of_checks_is_the_registry() -> None:
    problems = table_drift(table_rows(CHECKS_PAGE.read_text()), shipped_checks())
    assert not problems, "\n".join(problems)


def test_table_drift_names_the_missing_the_extra_and_the_misplaced_check() -> None:
    rows = table_rows(CHECKS_PAGE.read_text())
    shipped = shipped_checks()
    probe = plugin_check("probe", area=Area.GPU)
    assert table_drift(rows, [*shipped, probe]) == [
        "docs/checks.md's table has no row for 'probe' (area 'GPUs and NVLink')"
    ]
    assert table_drift(rows, [c for c in shipped if c.id != "xid"]) == [
        "docs/checks.md lists 'xid', which no registered check has"
    ]
    moved = [dict(r, area="Other") if r["id"] == "xid" else r for r in rows]
    assert table_drift(moved, shipped) == [
        "docs/checks.md puts 'xid' in 'Other'; its CHECK in 'GPUs and NVLink'"
    ]
    assert table_drift([*rows, rows[0]], shipped) == [f"docs/checks.md lists {rows[0]['id']!r} twice"]


def listed_by_cli(run_cli: RunCli) -> dict[str, str]:
    """`nodeagent checks --format json` as {id: area} (its piped lines and table hold the same rows:
    tests/integration/test_piped_output.py)."""
    result = run_cli("checks", "--format", "json")
    assert result.returncode == 0, result.stderr
    return {c["id"]: c["area"] for c in result.json()["checks"]}


def test_nodeagent_checks_lists_every_registered_check_with_its_area(run_cli: RunCli) -> None:
    assert listed_by_cli(run_cli) == {c.id: c.area.value for c in checks.all_checks()}


def test_nodeagent_checks_lists_a_check_registered_at_run_time(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, plugin_check("probe"), plugin_check("gpu-probe", area=Area.GPU))
    listed = listed_by_cli(run_cli)
    assert listed["probe"] == "Other" and listed["gpu-probe"] == "GPUs and NVLink"
    assert listed == {c.id: c.area.value for c in checks.all_checks()}


# --- `nodeagent checks ID...` and `--params --format json` -------------------------------------------


def checks_json(run_cli: RunCli, *args: str) -> dict[str, Any]:
    result = run_cli("checks", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = result.json()
    return doc


def test_nodeagent_checks_with_ids_lists_those_checks(run_cli: RunCli) -> None:
    """Named checks, in the registry's order, an on-demand one too; the table and JSON alike."""
    assert [c["id"] for c in checks_json(run_cli, "kernel", "numa")["checks"]] == ["numa", "kernel"]
    assert [c["id"] for c in checks_json(run_cli, "dcgm-diag")["checks"]] == ["dcgm-diag"]
    table = run_cli("checks", "kernel", env={"COLUMNS": "300"})
    assert table.returncode == 0, table.stderr
    # Piped: a line per check, its id first.
    assert [line.split("  ")[0] for line in table.stdout.splitlines()] == ["kernel"]
    params = run_cli("checks", "hugepages", "--params", env={"COLUMNS": "300"})
    assert params.stdout.startswith("hugepages: ") and "\nnuma" not in params.stdout


def test_nodeagent_checks_with_an_unknown_id_is_one_line(run_cli: RunCli) -> None:
    code, out, err = run_cli("checks", "kernle")
    assert code == 64 and out == ""
    assert err.startswith("nodeagent: error: unknown check id 'kernle'; known: ") and err.count("\n") == 1


def test_nodeagent_checks_params_as_json_are_each_checks_params(run_cli: RunCli) -> None:
    """Every field of every check's Params, with its default, its reason and what the reason cites."""
    doc = checks_json(run_cli, "--params")
    assert [c["id"] for c in doc["checks"]] == [c.id for c in checks.all_checks()]
    for entry, check in zip(doc["checks"], checks.all_checks(), strict=True):
        assert (entry["title"], entry["area"], entry["tags"]) == (
            check.title,
            check.area.value,
            list(check.tags),
        )
        fields = dataclasses.fields(check.params)
        assert [p["name"] for p in entry["params"]] == [f.name for f in fields]
        for p, f in zip(entry["params"], fields, strict=True):
            assert p["default"] == json.loads(json.dumps(f.default)), (check.id, f.name)
            assert p["why"] == f.metadata["why"]
            assert all(source in f.metadata["why"] for source in p["source"])


def test_a_params_source_is_what_its_reason_cites(run_cli: RunCli) -> None:
    """hugepages' thp_enabled cites the kernel's THP document once; numa's allow_offline_cpus a
    kernel source path; cstates' turbo two documents, the comma after the first not part of it."""
    by_id = {c["id"]: {p["name"]: p for p in c["params"]} for c in checks_json(run_cli, "--params")["checks"]}
    thp = by_id["hugepages"]["thp_enabled"]
    assert thp["default"] == ["always", "madvise"]
    assert thp["source"] == ["https://docs.kernel.org/admin-guide/mm/transhuge.html#global-thp-controls"]
    assert by_id["numa"]["allow_offline_cpus"]["source"] == ["Documentation/core-api/cpu_hotplug.rst"]
    assert by_id["cstates"]["turbo"]["source"] == [
        "https://docs.kernel.org/admin-guide/pm/intel_pstate.html#no-turbo-attr",
        "https://docs.kernel.org/admin-guide/pm/cpufreq.html#the-boost-file-in-sysfs",
    ]
