"""Fuzzing: corrupt, truncate and delete the files the checks read; every check still returns findings.

Each check is run directly (not through the engine, which would turn an exception into UNKNOWN),
so a check that raises on bad input fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent import checks
from nodeagent.api.check import declared_paths
from nodeagent.core.finding import Finding, Status
from nodeagent.host import LocalHost, SnapshotHost, recorder
from tests.support.fuzzing import GARBAGE, FuzzHost, files_matching
from tests.support.helpers import fixture_host

pytestmark = pytest.mark.slow

BASES = ["40intel64-2g2n4c+pcilocality", "32em64t-2n8c+dax+nvme+mic+dimms", "nvidiagpunumanodes", "2arm-2c"]

_FILES_READ: dict[int, list[str]] = {}


def _files_read(host: SnapshotHost) -> list[str]:
    """Canonical paths of the files the checks' declared globs match in this tree."""
    if id(host) not in _FILES_READ:
        _FILES_READ[id(host)] = files_matching(host, declared_paths(checks.all_checks()))
    return _FILES_READ[id(host)]


@pytest.fixture(scope="module")
def local_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SnapshotHost]:
    """This machine recorded the way `nodeagent snapshot` does, as one more base to corrupt."""
    out = tmp_path_factory.mktemp("snap") / "local.tar.gz"
    selected = checks.all_checks()
    recorder.snapshot(LocalHost(), declared_paths(selected), [], out)
    yield SnapshotHost(out)


def _run_all(host: FuzzHost | SnapshotHost) -> list[Finding]:
    findings: list[Finding] = []
    for check in checks.all_checks():
        host.refresh()
        result = check.run(host, check.make_params())
        assert result, f"{check.id} returned no finding"
        for f in result:
            assert isinstance(f.status, Status) and f.summary, f"{check.id}: {f}"
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in f.evidence.items()), f
        findings += result
    return findings


def _mutations(paths: list[str]) -> st.SearchStrategy[dict[str, bytes | None]]:
    change = st.one_of(
        st.none(),  # delete
        st.sampled_from(GARBAGE),
        st.binary(max_size=64),
        st.text(max_size=40).map(str.encode),
    )
    return st.dictionaries(st.sampled_from(paths), change, min_size=1, max_size=12)


def _fuzz(base: SnapshotHost, data: Any) -> None:
    paths = _files_read(base)
    assert paths, "the checks read nothing from this tree?"
    changes = data.draw(_mutations(paths))
    # Truncation keeps a prefix of the real content: the realistic partial write.
    for path in data.draw(st.lists(st.sampled_from(paths), max_size=4)):
        original = base.tree.read_bytes(path) or b""
        changes[path] = original[: data.draw(st.integers(0, max(0, len(original) - 1)))]
    _run_all(FuzzHost(base, changes))


@pytest.mark.parametrize("name", BASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_fixture_trees_give_findings(name: str, data: Any) -> None:
    _fuzz(fixture_host(name), data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_recording_of_this_machine_gives_findings(local_snapshot: SnapshotHost, data: Any) -> None:
    _fuzz(local_snapshot, data)


def test_empty_tree_gives_findings(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    findings = _run_all(SnapshotHost(tmp_path))
    assert {f.status for f in findings} <= {Status.OK, Status.SKIPPED, Status.WARN, Status.UNKNOWN}
