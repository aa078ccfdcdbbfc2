"""Fixtures shared by several test modules. Shared data and builders that are not fixtures live in
helper modules beside this one (helpers.py, gpu_samples.py, sysfs_node.py, rank_nodes.py,
fake_bench.py, random_trees.py, ...): no test module imports another test module.

`make test` runs the tests on several pytest-xdist workers, each its own process. What a test
changes is its own: state folders, profiles and journals in its tmp_path (NODEAGENT_STATE_DIR, set
per test), environment variables through monkeypatch, and what lives outside the process named by
its pid (tmux sessions, the SSH and Slurm clusters' namespaces, veths, bridges and subnets,
tests/sshcluster.py and tests/slurmcluster.py).
Tests that must share something by a fixed name, or a module whose module-scoped fixtures are
expensive (each worker would build its own: test_bench_worker.py's TensorFlow runs), carry
`@pytest.mark.xdist_group(name=...)`, which `--dist loadgroup` keeps on one worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_bench import use_fake_worker
from tests.slurmcluster import slurm_cluster_factory
from tests.sshcluster import ssh_cluster_factory

__all__ = ["fake_worker", "slurm_cluster_factory", "ssh_cluster_factory"]


@pytest.fixture
def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The benchmark runs tests/fake_bench.py's worker (no TensorFlow), with its state in tmp_path;
    returns the log where each worker writes its argv and environment."""
    return use_fake_worker(tmp_path, monkeypatch)
