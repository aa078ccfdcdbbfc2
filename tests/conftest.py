"""The suite's layout:
- tests/unit: nodeagent's code, or its CLI as a process, on recordings, fakes and temporary trees,
  with nothing else started;
- tests/integration: nodeagent against real parts, started and stopped by the tests (sshd in
  network namespaces, Slurm, Prometheus, TensorFlow, real jobs, tmux, the Textual app through its
  pilot, pex, podman, dpkg). Every test there carries the `integration` marker, which
  this file adds;
- tests/support: what tests share that is not a fixture (builders, recordings' readers, drivers of
  real parts, paths.py); no test module imports another;
- tests/perf: benchmark scripts that print figures and assert nothing.

Fixtures shared by several test modules live here.

`make test` runs the tests on several pytest-xdist workers, each its own process. What a test
changes is its own: state folders, profiles and journals in its tmp_path (NODEAGENT_STATE_DIR, set
per test), environment variables through monkeypatch, and what lives outside the process named by
its pid (tmux sessions, the SSH and Slurm clusters' namespaces, veths, bridges and subnets,
tests/support/sshcluster.py and tests/support/slurmcluster.py).
Tests that must share something by a fixed name, or a module whose module-scoped fixtures are
expensive (each worker would build its own: test_bench_worker.py's TensorFlow runs), carry
`@pytest.mark.xdist_group(name=...)`, which `--dist loadgroup` keeps on one worker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import cli
from tests.support.cli import RunCli
from tests.support.fake_bench import use_fake_worker
from tests.support.paths import TESTS
from tests.support.slurmcluster import slurm_cluster_factory
from tests.support.sshcluster import module_ssh_cluster_factory, ssh_cluster_factory

__all__ = ["module_ssh_cluster_factory", "slurm_cluster_factory", "ssh_cluster_factory"]

# pytest keeps the test modules whose asserts it rewrote as bytecode only where Python may write
# bytecode. Where PYTHONDONTWRITEBYTECODE is set (as on this project's CI machine), every pytest
# process, each xdist worker included, rewrote all ~190 test modules again: 5-8 s of CPU per process
# before the first test. (`make bytecode` writes nodeagent's own bytecode for the same reason.)
sys.dont_write_bytecode = False

INTEGRATION = TESTS / "integration"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder says what a test is: every test under tests/integration is marked integration
    (`make test-fast` leaves them out)."""
    for item in items:
        if INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The benchmark runs tests/support/fake_bench.py's worker (no TensorFlow), with its state in tmp_path;
    returns the log where each worker writes its argv and environment."""
    return use_fake_worker(tmp_path, monkeypatch)


@pytest.fixture
def run_cli() -> RunCli:
    """`run_cli(*args)`: nodeagent ARGS in this process, or as a process with process=True
    (tests/support/cli.py); returns (returncode, stdout, stderr). Module-scoped fixtures import
    tests.support.cli.run_cli itself."""
    return cli.run_cli
