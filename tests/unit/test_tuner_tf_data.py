"""tf-data: options sized from the rank layout (process scope) plus the equivalent snippet (code scope)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.tune import Plan, Scope
from nodeagent.core.errors import UsageError
from nodeagent.facts.ranks import GpuPlace
from nodeagent.tuners import tf_data
from nodeagent.tuners.tf_data import GUIDE, PROFILE_KEY, SNIPPET_KEY, Params
from nodeagent.tuning import apply, launcher
from tests.support.cli import RunCli
from tests.support.helpers import fixture_host, make_tree
from tests.support.rank_nodes import A100, hand_facts, smi_host

POOL = "threading.private_threadpool_size"
ALL_ON = {
    "autotune.enabled": True,
    "experimental_optimization.map_parallelization": True,
    "experimental_optimization.inject_prefetch": True,
    "experimental_optimization.parallel_batch": True,
    "deterministic": False,
    "threading.max_intra_op_parallelism": 1,
}


def plan_of(host: Any, **params: Any) -> Plan:
    return tf_data.TUNER.run_plan(host, tf_data.TUNER.make_params(params))


def options(plan: Plan) -> dict[str, Any]:
    process = [c for c in plan.changes if c.scope is Scope.PROCESS]
    assert len(process) == 1 and process[0].profile_key == PROFILE_KEY
    value: dict[str, Any] = process[0].value
    return value


def code(plan: Plan) -> str:
    snippets = [c for c in plan.changes if c.scope is Scope.CODE]
    assert len(snippets) == 1 and snippets[0].profile_key == SNIPPET_KEY
    text: str = snippets[0].value
    return text


def test_cpu_only_tree_sizes_the_pool_to_one_numa_nodes_cores() -> None:
    # 64amd64-4s2n4ca2co: 8 NUMA nodes of 8 cores, no GPU: 8 ranks of 8 physical cores.
    plan = plan_of(fixture_host("64amd64-4s2n4ca2co"))
    assert options(plan) == {**ALL_ON, POOL: 8}
    per_rank = plan.details["tf_data"]["ranks"]
    assert [r["cpus"] for r in per_rank][5] == "40-47"
    assert {r["private_threadpool_size"] for r in per_rank} == {8}


def test_smt_counts_physical_cores_not_threads() -> None:
    # 40intel64: 4 nodes of 10 cores, 2 threads each: 10, not 20.
    plan = plan_of(fixture_host("40intel64-2g2n4c+pcilocality"))
    assert options(plan)[POOL] == 10


def test_dgx_a100_two_ranks_share_each_node(tmp_path: Path) -> None:
    # nvidia-smi only: 32 CPUs per GPU's node (SMT unknown, so threads are counted), 2 GPUs per node.
    plan = plan_of(smi_host(tmp_path, A100))
    assert options(plan)[POOL] == 16
    ranks = plan.details["tf_data"]["ranks"]
    assert ranks[0]["cpus"] == "48-63,176-191" and ranks[2]["cpus"] == "16-31,144-159"
    assert any("share CPUs" in n for n in plan.notes)
    assert any("SMT siblings is unknown" in n for n in plan.notes)


def test_split_shared_nodes_gives_each_rank_its_own_cores() -> None:
    spec = {0: "0-7", 1: "8-15"}
    gpus = [GpuPlace(f"GPU{i}", None, i // 2, None) for i in range(4)]
    facts = hand_facts(spec, gpus=gpus)
    shared = tf_data.plan(facts, Params())
    split = tf_data.plan(facts, Params(split_shared_nodes=True))
    assert options(shared)[POOL] == 4  # 8 cores, two ranks on them: 4 each, never 8
    assert options(split)[POOL] == 4
    assert not any("share CPUs" in n for n in split.notes)


def test_uneven_ranks_take_the_smallest_and_say_so() -> None:
    facts = hand_facts({0: "0-11", 1: "12-15"})
    plan = tf_data.plan(facts, Params())
    assert options(plan)[POOL] == 4
    assert any("different core counts (rank 0: 12, rank 1: 4)" in n for n in plan.notes)


def test_cfs_quota_caps_each_ranks_pool() -> None:
    plan = tf_data.plan(hand_facts({0: "0-15"}, quota=6.0), Params())
    assert options(plan)[POOL] == 6
    assert any("CFS quota 6 CPUs" in n and "sched-bwc" in n for n in plan.notes)


def test_fixed_and_unset_pool_sizes() -> None:
    facts = hand_facts({0: "0-15"})
    assert options(tf_data.plan(facts, Params(private_threadpool_size=3)))[POOL] == 3
    assert POOL not in options(tf_data.plan(facts, Params(private_threadpool_size=-1)))
    none = options(tf_data.plan(facts, Params(allow_nondeterminism=False, max_intra_op_parallelism=0)))
    assert "deterministic" not in none and "threading.max_intra_op_parallelism" not in none


@pytest.mark.parametrize(
    ("param", "value"), [("private_threadpool_size", -2), ("max_intra_op_parallelism", -1)]
)
def test_bad_parameters_are_usage_errors(param: str, value: int, run_cli: RunCli) -> None:
    with pytest.raises(UsageError, match=f"tuner tf-data: {param}={value}"):
        tf_data.TUNER.make_params({param: value})
    proc = run_cli("tune", "--only", "tf-data", "--set", f"tf-data.{param}={value}")
    assert proc.returncode == 64 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_everything_off_plans_nothing_and_says_why() -> None:
    off = Params(
        autotune=False,
        map_parallelization=False,
        inject_prefetch=False,
        parallel_batch=False,
        allow_nondeterminism=False,
        private_threadpool_size=-1,
        max_intra_op_parallelism=0,
    )
    plan = tf_data.plan(hand_facts({0: "0-3"}), off)
    assert plan.changes == []
    assert plan.notes[0].startswith("nothing planned: every option is turned off")


def test_unknown_cpus_still_plans_the_options_without_a_pool(tmp_path: Path) -> None:
    plan = plan_of(make_tree(tmp_path, {}))  # no /sys/devices/system, no /proc/self/status
    assert options(plan) == ALL_ON
    assert any("threading.private_threadpool_size is left to TensorFlow" in n for n in plan.notes)
    assert "left to TensorFlow" in code(plan)


def test_no_layout_falls_back_to_the_allowed_cpus() -> None:
    facts = hand_facts({0: "0-7"})
    empty = replace(facts, topology=replace(facts.topology, numa_nodes=[]))
    plan = tf_data.plan(empty, Params())
    assert options(plan)[POOL] == 8
    assert any("no rank layout could be made here" in n for n in plan.notes)


def test_changes_carry_scope_key_and_a_linked_reason() -> None:
    plan = tf_data.plan(hand_facts({0: "0-3"}), Params())
    assert [c.scope for c in plan.changes] == [Scope.PROCESS, Scope.CODE]
    for c in plan.changes:
        assert c.tuner == "tf-data" and c.before and c.after and GUIDE in c.why
    assert "private_threadpool_size=4" in plan.changes[0].after
    assert any("sitecustomize" in n for n in plan.notes)


def test_snippet_is_python_with_autotune_stages_and_the_same_options() -> None:
    plan = tf_data.plan(hand_facts({0: "0-5"}), Params())
    text = code(plan)
    ast.parse(text)  # valid Python
    assert GUIDE in text
    assert "num_parallel_calls=tf.data.AUTOTUNE, deterministic=False" in text
    assert "ds = ds.prefetch(tf.data.AUTOTUNE)" in text
    assert ".interleave(" in text and "ds.with_options(options)" in text
    for path, value in options(plan).items():
        assert f"options.{path} = {value!r}" in text
    strict = code(tf_data.plan(hand_facts({0: "0-5"}), Params(allow_nondeterminism=False)))
    assert "deterministic" not in strict


def test_apply_writes_the_profile_that_exec_passes_to_the_hook(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {})
    plan = tf_data.plan(hand_facts({0: "0-3"}), Params())
    state = tmp_path / "state"
    result = apply.apply(host, [plan], "p", state)
    assert result.journal is not None and result.profile_path is not None
    doc = json.loads(result.profile_path.read_text())
    assert doc["tf_data"] == options(plan) and doc["snippets"]["tf-data"] == code(plan)

    env = {k: v for k, v in os.environ.items() if k not in launcher.RANK_VARS}
    env.update(NODEAGENT_STATE_DIR=str(state))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", "exec", "--profile", "p", "--dry-run", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)["env"]["set"]
    assert json.loads(shown[launcher.TF_DATA_ENV]) == options(plan)
    assert shown["PYTHONPATH"] == str(launcher.HOOKS_DIR)


@pytest.mark.parametrize("name", ["2arm-2c", "nvidiagpunumanodes", "offline-cpu0-node0"])
def test_odd_trees_never_raise(name: str) -> None:
    plan = plan_of(fixture_host(name))
    assert plan.changes and options(plan).get(POOL, 1) >= 1
