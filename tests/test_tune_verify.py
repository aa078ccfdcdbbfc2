"""`nodeagent tune --apply --verify`: benchmark, apply, benchmark again, keep only a proven gain.

First on fake workers (tests/fake_bench.py's FAKE_WORKER: synthetic throughputs that depend on
the thread variables a profile sets), so every branch of the decision is checked in seconds; then
for real, with TensorFlow in quick mode: a helpful profile is kept, a harmful one (one intra-op
thread) is reverted and the profile file is restored byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import stats
from nodeagent.bench import verify as bench_verify
from nodeagent.core.errors import UsageError
from nodeagent.host import LocalHost
from nodeagent.tuners import tf_threads
from nodeagent.tuning import journal, profile
from tests.fake_bench import logged, make_profile

# Real sshd, TensorFlow or many subprocesses: left out of `make test-fast`.
pytestmark = pytest.mark.slow

HARMFUL = "tf-threads.intra_op=1"
HARMFUL_ARGS = (
    "--only",
    "numa-pinning,tf-threads",
    "--set",
    HARMFUL,
    "--set",
    "numa-pinning.ranks=2",
    "--set",
    "numa-pinning.split_shared_nodes=true",
)
HELPFUL = "numa-pinning,tf-threads,tf-data"
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="tensorflow is not installed in this environment (pip install 'nodeagent[tf]')",
)


# -- the tf-threads parameter that makes the harmful profile ---------------------------------------


def test_intra_op_forces_the_pool_size() -> None:
    params = tf_threads.TUNER.make_params({"intra_op": 1})
    plan = tf_threads.TUNER.run_plan(LocalHost(), params)
    values = {c.profile_key: c.value for c in plan.changes}
    assert values["env.TF_NUM_INTRAOP_THREADS"] == "1"
    assert values["env.OMP_NUM_THREADS"] == "1"
    assert any("forced to 1" in n for n in plan.notes)
    derived = tf_threads.TUNER.run_plan(LocalHost(), tf_threads.TUNER.make_params({}))
    assert not any("forced" in n for n in derived.notes)  # 0: sized from the cores, as before
    assert "physical core" in next(c.why for c in derived.changes if "INTRAOP" in c.target)
    with pytest.raises(UsageError, match="intra_op=-1"):
        tf_threads.Params(intra_op=-1)


# -- the decision, on fake workers ---------------------------------------------------------------


def verify_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["tune", "--apply", "--verify", "--quick", "--format", "json", *args])
    out = capsys.readouterr().out
    code = e.value.code
    assert isinstance(code, int)
    return code, json.loads(out)


def assert_reason_shows_both(v: dict[str, Any]) -> None:
    """The reason names both medians and intervals, and the ratio's interval."""
    for run in ("tuned", "baseline"):
        s = v[run]["images_per_s"]
        lo, hi = s["ci95"]
        assert f"{run} {s['median']:.1f} images/s (95% CI {lo:.1f}-{hi:.1f})" in v["reason"]
    lo, hi = v["comparison"]["ratio_ci95"]
    assert f"95% CI [{lo:.3f}, {hi:.3f}]" in v["reason"]


def test_a_faster_profile_is_kept(
    fake_worker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = verify_cli(capsys, "--only", "tf-threads,tf-data")
    v = doc["bench_verify"]
    assert code == bench_verify.EXIT_KEPT == 0
    assert v["decision"] == bench_verify.KEPT
    assert v["comparison"]["verdict"] == stats.FASTER
    assert v["comparison"]["ratio"] == pytest.approx(1.5, rel=0.03)
    assert v["tuned_through_exec"] is True
    assert v["reason"].startswith("kept: tuned ")
    assert_reason_shows_both(v)
    j = journal.find(v["journal"])
    assert j.state == journal.APPLIED
    assert profile.load("default")["env"]["TF_NUM_INTRAOP_THREADS"] == "2"
    runs = logged(fake_worker)
    # baseline: plain python, the user's pipeline (config tuned), no profile
    assert "nodeagent" not in runs[0]["argv"][0] and runs[0]["env"]["TF_NUM_INTRAOP_THREADS"] is None
    assert all(r["argv"][r["argv"].index("--config") + 1] == "tuned" for r in runs)
    assert runs[-1]["env"]["TF_NUM_INTRAOP_THREADS"] == "2"


def test_the_baseline_runs_in_the_callers_environment_without_the_hook(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As-is: the job's own thread variables stay (what tf-threads corrects: here 1 intra-op
    thread, which the fake halves the speed for); a parent `nodeagent exec`'s hook does not."""
    from nodeagent.tuning.launcher import HOOKS_DIR

    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("NODEAGENT_TF_DATA_OPTIONS", '{"deterministic": false}')
    monkeypatch.setenv("PYTHONPATH", str(HOOKS_DIR))
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    runs = logged(fake_worker)
    assert len(runs) == 2 * bench_verify.QUICK_PROCESSES
    baseline, tuned = runs[: bench_verify.QUICK_PROCESSES], runs[bench_verify.QUICK_PROCESSES :]
    assert all(r["env"]["TF_NUM_INTRAOP_THREADS"] == "2" for r in tuned)  # the profile's
    for r in baseline:
        assert r["env"]["TF_NUM_INTRAOP_THREADS"] == "1"
        assert r["env"]["NODEAGENT_TF_DATA_OPTIONS"] is None and r["env"]["PYTHONPATH"] is None
    assert code == 0 and doc["bench_verify"]["comparison"]["ratio"] == pytest.approx(3.0, rel=0.03)


def test_a_harmful_profile_is_reverted_and_the_profile_restored(
    fake_worker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_profile(tmp_path / "state", "--only", "tf-data")
    path = profile.profile_path("default")
    before = path.read_text()
    code, doc = verify_cli(capsys, "--only", "tf-threads", "--set", "tf-threads.intra_op=1")
    v = doc["bench_verify"]
    assert code == bench_verify.EXIT_REVERTED == 1
    assert v["decision"] == bench_verify.REVERTED
    assert v["comparison"]["verdict"] == stats.SLOWER
    assert v["reason"].startswith("reverted: tuned is not significantly faster")
    assert v["tuned"]["images_per_s"]["median"] == pytest.approx(50, rel=0.03)
    assert_reason_shows_both(v)
    assert path.read_text() == before
    assert journal.find(v["journal"]).state == journal.REVERTED
    assert [f["status"] for f in v["revert"]] == ["OK"]


def test_no_difference_is_reverted(
    fake_worker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # tf-data alone does not move the fake's throughput: a change that shows no gain goes.
    code, doc = verify_cli(capsys, "--only", "tf-data")
    v = doc["bench_verify"]
    assert code == 1 and v["decision"] == bench_verify.REVERTED
    assert v["comparison"]["verdict"] == stats.SAME
    assert "includes 1" in v["reason"]
    assert not profile.profile_path("default").exists()  # there was none before


def test_table_output_says_why(fake_worker: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(
            [
                "tune",
                "--apply",
                "--verify",
                "--quick",
                "--only",
                "tf-threads",
                "--set",
                "tf-threads.intra_op=1",
            ]
        )
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert "reverted: tuned is not significantly faster" in out
    assert re.search(r"^measured: tuned [\d.]+ images/s .* vs baseline [\d.]+ images/s", out, re.MULTILINE)
    assert "profile default removed (there was none before)" in out
    # The profile is gone: nothing tells to run jobs with it (tests/test_tune_story.py has the rest).
    assert "use:" not in out and "exec --profile default -- CMD" not in out


def test_a_failed_baseline_applies_nothing(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_FAIL_TUNED", "cannot decode")
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    assert code == bench_verify.EXIT_BENCH_FAILED == 2
    assert doc["bench_verify"]["decision"] == bench_verify.NOT_APPLIED
    assert "cannot decode" in doc["bench_verify"]["reason"]
    assert doc["applied"] is False
    assert journal.all_journals() == []
    assert not profile.profile_path("default").exists()


def test_a_failed_tuned_run_is_reverted(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_FAIL_WHEN_TUNED", "crashed under the profile")
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    v = doc["bench_verify"]
    assert code == 2 and v["decision"] == bench_verify.REVERTED
    assert "crashed under the profile" in v["reason"]
    assert journal.find(v["journal"]).state == journal.REVERTED
    assert not profile.profile_path("default").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "--verify"], "give --apply too"),
        (["tune", "--apply", "--verify", "--root", "/tmp"], "cannot be used with --root"),
        (["tune", "--quick"], "give --apply --verify too"),
    ],
)
def test_verify_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 64
    assert message in capsys.readouterr().err


# -- for real, with TensorFlow ---------------------------------------------------------------------


def nodeagent(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NODEAGENT_STATE_DIR": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )


@needs_tf
@pytest.mark.slow
def test_real_helpful_profile_is_kept(tmp_path: Path) -> None:
    """The helpful profile is kept when the benchmark shows it faster than the job as it is.

    On the 2-CPU VM this was written on it is not: TensorFlow 2.21 already runs the plain
    pipeline's map in parallel and prefetches it (tf.data's default map_parallelization and
    inject_prefetch), and its default pools (2 threads: the CPUs) are what tf-threads plans, so
    the profile has nothing left to gain there. Then the loop must revert and say so, which is
    checked before the test is marked as an expected failure with the figures."""
    state = tmp_path / "state"
    proc = nodeagent(state, "tune", "--apply", "--verify", "--quick", "--only", HELPFUL, "--format", "json")
    doc = json.loads(proc.stdout)
    v = doc["bench_verify"]
    profile_file = state / "profiles" / "default.json"
    if v["decision"] == bench_verify.KEPT:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert v["comparison"]["verdict"] == stats.FASTER
        assert v["comparison"]["ratio_ci95"][0] > 1
        assert profile_file.exists()
        assert v["tuned"]["tf_data_options"], "the tuned run went through the tf.data hook"
        return
    assert proc.returncode == 1, v["reason"] + proc.stderr[-2000:]
    assert v["decision"] == bench_verify.REVERTED
    assert v["comparison"]["verdict"] != stats.FASTER
    assert not profile_file.exists()  # there was none before
    pytest.xfail(f"no significant gain over the job as it is on this machine: {v['reason']}")


@needs_tf
@pytest.mark.slow
def test_real_harmful_profile_is_reverted(tmp_path: Path) -> None:
    """One intra-op thread, and the job pinned to one of the two CPUs (numa-pinning planning two
    ranks with disjoint cores, while one job runs): measured here at about 0.6x the baseline."""
    state = tmp_path / "state"
    make_profile(state, "--only", "tf-data")
    path = state / "profiles" / "default.json"
    before = path.read_text()
    proc = nodeagent(state, "tune", "--apply", "--verify", "--quick", *HARMFUL_ARGS, "--format", "json")
    doc = json.loads(proc.stdout)
    v = doc["bench_verify"]
    assert proc.returncode == 1, v["reason"] + proc.stderr[-2000:]
    assert v["decision"] == bench_verify.REVERTED
    assert v["comparison"]["verdict"] in (stats.SLOWER, stats.SAME)
    assert v["tuned"]["threads"]["intra_op"] == 1
    assert path.read_text() == before
    assert [f["status"] for f in v["revert"]] == ["OK"]
