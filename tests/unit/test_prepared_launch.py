"""A launch resolved once (nodeagent.tuning.prepared, as verify's trials start their job) does to the
job exactly what `nodeagent exec --profile P` does: the same CPUs and memory policy, the same
environment (the trial's own variables passing through), the same notes; only faster to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.tuning import launcher, prepared
from tests.support.launch_child import CHILD, needs_two_cpus, write_profile

PROFILE = {
    "name": "default",
    "env": {"OMP_NUM_THREADS": 2, "LAYER": "profile", "DROP_ME": None},
    "rank_env": {"0": {"TF_NUM_INTRAOP_THREADS": "1", "LAYER": "rank_env"}},
    "ranks": [{"local_rank": 0, "cpus": [1], "numa_node": 0}],
    "tf_data": {"threading.private_threadpool_size": 1},
}


def _environment(state: Path, measure_dir: Path) -> dict[str, str]:
    """A trial's environment: the caller's, a variable the profile removes, its measuring folder."""
    env = {
        k: v for k, v in os.environ.items() if k not in launcher.RANK_VARS and not k.startswith("NODEAGENT_")
    }
    env.update({"NODEAGENT_STATE_DIR": str(state), "DROP_ME": "x", "KEEP": "mine"})
    env["NODEAGENT_MEASURE_DIR"] = str(measure_dir)
    return env


def _child_report(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, proc.stderr


@needs_two_cpus
def test_a_prepared_launch_does_what_nodeagent_exec_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    (state / "profiles").mkdir(parents=True)
    write_profile(state, PROFILE)
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    command = [sys.executable, str(child)]
    trial_env = _environment(state, tmp_path / "trial-7" / "measure")

    by_exec, exec_err = _child_report(
        [sys.executable, "-m", "nodeagent", "exec", "--profile", "default", "--", *command], trial_env
    )

    # Resolved once against another trial's folder; started with this trial's environment.
    monkeypatch.setenv("NODEAGENT_STATE_DIR", str(state))
    planning = _environment(state, tmp_path / "resolved" / "measure")
    launch, machine = launcher.plan("default", None, command, pytest.fail, named=True, environ=planning)
    kept = tmp_path / "side-B.json"
    prepared.write(kept, launch, machine)
    by_prepared, prepared_err = _child_report(prepared.argv(kept), trial_env)

    for key in ("affinity", "mempolicy", "mems_allowed", "env"):
        assert by_prepared[key] == by_exec[key], key
    assert by_exec["affinity"] == [1] and by_exec["mempolicy"]["nodes"] == [0]  # the profile's rank
    env = by_exec["env"]
    assert env["NODEAGENT_MEASURE_DIR"] == trial_env["NODEAGENT_MEASURE_DIR"]  # the trial's own
    assert "DROP_ME" not in env and env["KEEP"] == "mine" and env["LAYER"] == "rank_env"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(launcher.HOOKS_DIR)
    assert prepared_err == exec_err  # the same notes (the rank taken by default)


def test_a_prepared_launch_of_a_command_that_cannot_run_exits_as_exec_does(tmp_path: Path) -> None:
    """The command vanished after it was resolved: 127, one line, as `nodeagent exec` would."""
    kept = tmp_path / "launch.json"
    entry = {
        "rank": 0,
        "binding": "none",
        "cpus": None,
        "mems": None,
        "arch": "x86_64",
        "cpuset_source": None,
        "memlock_soft": None,
        "dma_latency_us": None,
    }
    missing = str(tmp_path / "gone")
    kept.write_text(
        json.dumps({"argv": [missing], "env": {"set": {}, "unset": []}, "entry": entry, "notes": []})
    )
    proc = subprocess.run(prepared.argv(kept), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 127
    assert proc.stderr.splitlines() == [
        f"nodeagent: error: {missing}: cannot execute (No such file or directory)"
    ]
