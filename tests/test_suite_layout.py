"""The test suite's own layout: test modules share code through helper modules and tests/conftest.py,
never by importing one another (an import runs the other module's collection-time code, and its
tests then depend on a file that reads as a test, not as a library)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (tests.test_*) that the module at `path` imports, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("tests.test_")]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("tests.test_"):
                found.append(node.module)
            elif node.module == "tests":
                found += [f"tests.{a.name}" for a in node.names if a.name.startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        p.name: imported_test_modules(p) for p in sorted(TESTS.glob("test_*.py")) if imported_test_modules(p)
    }
    assert offenders == {}, "move what they share into a helper module or tests/conftest.py"


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "test_probe.py"
    module.write_text(
        "import tests.test_a\nfrom tests.test_b import X\nfrom tests import test_c, helpers\n"
        "from tests.helpers import make_tree\n"
    )
    assert imported_test_modules(module) == ["tests.test_a", "tests.test_b", "tests.test_c"]
