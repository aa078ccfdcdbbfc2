"""The test suite's own layout (tests/conftest.py): test modules in tests/unit or tests/integration,
what they share in tests/support, and no test module importing another (an import runs the other
module's collection-time code, and its tests then depend on a file that reads as a test, not as a
library). Tests of real parts (sshd, Slurm, Prometheus, tmux, pex, dpkg, podman) are integration
tests: `make test-fast` must not start them."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import TESTS

SUITES = ("unit", "integration")
# The helpers that start real parts; a unit test that imports one is an integration test.
REAL_PARTS = ("sshcluster", "slurmcluster", "promstack", "tmux_session", "pyzbuild", "deb_root")


def _imports(path: Path) -> list[str]:
    """Every module the module at `path` imports, as written (`from a import b` gives a.b as well,
    since b may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return found


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (tests.*.test_*) that the module at `path` imports."""
    return [m for m in _imports(path) if m.startswith("tests.") and m.rsplit(".", 1)[-1].startswith("test_")]


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def test_no_test_module_imports_another() -> None:
    offenders = {
        p.name: imported_test_modules(p)
        for suite in SUITES
        for p in _modules(TESTS / suite)
        if imported_test_modules(p)
    }
    assert offenders == {}, "move what they share into tests/support or tests/conftest.py"


def test_each_module_is_in_its_folder() -> None:
    assert [p.name for p in _modules(TESTS) if p.name != "conftest.py"] == [], (
        "tests/unit, integration or support"
    )
    misplaced = [
        p.relative_to(TESTS).as_posix()
        for suite in SUITES
        for p in _modules(TESTS / suite)
        if not p.name.startswith("test_")
    ]
    misplaced += [
        p.relative_to(TESTS).as_posix() for p in _modules(TESTS / "support") if p.name.startswith("test_")
    ]
    assert misplaced == []


def test_unit_tests_start_no_real_parts() -> None:
    starting = {
        p.name: hits
        for p in _modules(TESTS / "unit")
        if (hits := sorted({m for m in _imports(p) for part in REAL_PARTS if m == f"tests.support.{part}"}))
    }
    assert starting == {}, "move them to tests/integration"


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "test_probe.py"
    module.write_text(
        "import tests.unit.test_a\nfrom tests.integration.test_b import X\n"
        "from tests.unit import test_c, helpers\nfrom tests.support.helpers import make_tree\n"
    )
    assert imported_test_modules(module) == [
        "tests.unit.test_a",
        "tests.integration.test_b",
        "tests.unit.test_c",
    ]
