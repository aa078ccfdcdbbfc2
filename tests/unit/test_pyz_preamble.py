"""build-aux/pyz_preamble.py, the start of build/nodeagent.pyz, without building the file.

tests/integration/test_pyz.py runs the built file on full, read-only and noexec mounts and old interpreters;
here are the failures it cannot make happen on this machine (a disk quota, an error inside pex) and
where PEX_ROOT is taken from, each with docs/deployment.md's exit code for a start that fails.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import platform
from types import ModuleType

import pytest

from tests.support.paths import REPO

PREAMBLE = REPO / "build-aux" / "pyz_preamble.py"
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_IOERR = 74
ROOT = "/scratch/pex"


@pytest.fixture(scope="module")
def preamble() -> ModuleType:
    """The preamble as a module: its start-up runs only as a __main__, so importing it does nothing."""
    spec = importlib.util.spec_from_file_location("nodeagent_pyz_preamble", PREAMBLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("code", "said"), [(errno.ENOSPC, "no space left"), (errno.EDQUOT, "over the disk quota")]
)
def test_a_full_or_over_quota_pex_root_is_exit_74_naming_it(
    preamble: ModuleType, code: int, said: str
) -> None:
    status, line = preamble._nodeagent_failure(OSError(code, os.strerror(code)), ROOT)
    assert status == EX_IOERR
    assert line.startswith(f"nodeagent: error: {said} in PEX_ROOT {ROOT},") and "set PEX_ROOT" in line
    assert "\n" not in line


def test_any_other_os_error_in_pex_root_is_exit_74_with_the_error(preamble: ModuleType) -> None:
    error = OSError(errno.EIO, os.strerror(errno.EIO), f"{ROOT}/venvs")
    status, line = preamble._nodeagent_failure(error, ROOT)
    assert status == EX_IOERR
    assert f"cannot unpack into PEX_ROOT {ROOT}: " in line and os.strerror(errno.EIO) in line


def test_pex_exiting_by_itself_is_exit_69_naming_what_the_file_serves(preamble: ModuleType) -> None:
    """pex exits by itself (1) when no interpreter on PATH fits; 1 would read as check's WARN."""
    status, line = preamble._nodeagent_failure(SystemExit(1), ROOT)
    assert status == EX_UNAVAILABLE
    assert "CPython 3.10 to 3.14" in line and f"this python is {platform.python_version()} " in line


def test_an_unexpected_error_is_exit_70_as_nodeagents_internal_errors(preamble: ModuleType) -> None:
    status, line = preamble._nodeagent_failure(RuntimeError("boom"), ROOT)
    assert status == EX_SOFTWARE
    assert line.startswith("nodeagent: internal error: ") and "RuntimeError: boom" in line


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"PEX_ROOT": "/data/pex", "XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/data/pex"),
        ({"XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/pex"),
        ({"HOME": "/home/u"}, "/home/u/.cache/pex"),
    ],
)
def test_pex_root_is_pexs_own_choice(
    preamble: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], want: str
) -> None:
    """pex's PEX_ROOT: the variable, else appdirs' user cache folder ($XDG_CACHE_HOME, ~/.cache)."""
    for name in ("PEX_ROOT", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert preamble._nodeagent_pex_root() == want
