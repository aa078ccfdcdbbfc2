"""`nodeagent tune --apply --verify` on the built-in workload: each planned change applied alone,
judged by A/B trials of warmed-up `worker --serve` processes, kept only when B is significantly
faster, else reverted (profile and runtime values as they were).

First on fake workers (tests/support/fake_bench.py's FAKE_WORKER: synthetic throughputs that depend on the
thread variables a profile sets), so every branch is checked in seconds; then once for real, with
TensorFlow, on a user's command: from a shell that forces one intra-op thread, a helpful and a
harmful change are planned together, and each is decided by its own trials.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import ab, stats
from nodeagent.bench import verify as bench_verify
from nodeagent.core.errors import UsageError
from nodeagent.host import LocalHost
from nodeagent.tuners import tf_threads
from nodeagent.tuning import journal, profile
from tests.support.cli import run_cli
from tests.support.fake_bench import logged, make_profile

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


def change(doc: dict[str, Any], tuner: str) -> dict[str, Any]:
    return next(c for c in doc["verify"]["changes"] if c["tuner"] == tuner)


def test_a_faster_change_is_kept_with_its_ratio_and_interval(
    fake_worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    c = change(doc, "tf-threads")
    assert code == bench_verify.EXIT_KEPT == 0
    assert c["decision"] == bench_verify.KEPT
    est = c["trials"]["estimate"]
    assert est["verdict"] == stats.FASTER
    assert est["ratio"] == pytest.approx(1.5, rel=0.02)  # the fake is 1.5x with two intra-op threads
    assert est["ci"][0] > 1.45
    assert c["settings"]["env.TF_NUM_INTRAOP_THREADS"] == "2"
    assert journal.find(c["journal"]).state == journal.APPLIED
    assert profile.load("default")["env"]["TF_NUM_INTRAOP_THREADS"] == "2"
    assert doc["verify"]["kept"] == ["tf-threads"]


def test_both_sides_run_the_users_pipeline_through_the_launcher(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A: the job as it is: the caller's thread variables stay (what tf-threads corrects: here one
    intra-op thread, which the fake halves the speed for), a parent `nodeagent exec`'s hook does
    not; B: the profile's. Both are `worker --config tuned --serve`, one pair of processes a block."""
    from nodeagent.tuning.launcher import HOOKS_DIR

    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("NODEAGENT_TF_DATA_OPTIONS", '{"deterministic": false}')
    monkeypatch.setenv("PYTHONPATH", str(HOOKS_DIR))
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    runs = logged(fake_worker)
    assert all(r["argv"][r["argv"].index("--config") + 1] == "tuned" and "--serve" in r["argv"] for r in runs)
    a = [r for r in runs if r["env"]["TF_NUM_INTRAOP_THREADS"] == "1"]
    b = [r for r in runs if r["env"]["TF_NUM_INTRAOP_THREADS"] == "2"]
    assert len(a) == len(b) == len(change(doc, "tf-threads")["trials"]["blocks"])
    for r in a:
        assert r["env"]["NODEAGENT_TF_DATA_OPTIONS"] is None
    assert code == 0
    assert change(doc, "tf-threads")["trials"]["estimate"]["ratio"] == pytest.approx(3.0, rel=0.02)


def test_a_harmful_change_is_reverted_and_the_profile_restored(
    fake_worker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_profile(tmp_path / "state", "--only", "tf-data")
    path = profile.profile_path("default")
    before = path.read_text()
    code, doc = verify_cli(capsys, "--only", "tf-threads", "--set", "tf-threads.intra_op=1")
    c = change(doc, "tf-threads")
    assert code == bench_verify.EXIT_NONE_KEPT == 1
    assert c["decision"] == bench_verify.REVERTED
    assert c["trials"]["estimate"]["verdict"] == stats.SLOWER
    assert c["trials"]["estimate"]["ratio"] == pytest.approx(0.5, rel=0.02)
    assert path.read_text() == before
    assert journal.find(c["journal"]).state == journal.REVERTED
    assert [f["status"] for f in c["revert"]] == ["OK"]


def test_no_difference_is_reverted(fake_worker: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # tf-data alone does not move the fake's throughput: a change that shows no gain goes.
    code, doc = verify_cli(capsys, "--only", "tf-data")
    c = change(doc, "tf-data")
    assert code == 1 and c["decision"] == bench_verify.REVERTED
    assert c["trials"]["estimate"]["verdict"] == stats.SAME
    assert not profile.profile_path("default").exists()  # there was none before


def test_table_output_lists_each_change(fake_worker: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["tune", "--apply", "--verify", "--quick", "--only", "tf-threads,tf-data"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    # Piped: a line per change, its cells named (nodeagent.render.sheet).
    assert re.search(r"^tf-threads  decision: kept  B/A: 1\.5\d\d  ", out, re.M), out
    assert re.search(r"^tf-data  decision: reverted  B/A: 1\.0\d\d  ", out, re.M), out
    assert "reverted: tf-data: not significantly faster" in out
    assert "use: run jobs with `nodeagent exec --profile default -- CMD`" in out


def test_a_failed_trial_is_reverted(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_FAIL_WHEN_TUNED", "crashed under the profile")
    code, doc = verify_cli(capsys, "--only", "tf-threads")
    c = change(doc, "tf-threads")
    assert code == 2 and c["decision"] == bench_verify.REVERTED
    assert c["trials"]["verdict"] == ab.FAILED
    assert "crashed under the profile" in c["trials"]["failed"]
    assert journal.find(c["journal"]).state == journal.REVERTED
    assert not profile.profile_path("default").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "--verify"], "give --apply too"),
        (["tune", "--apply", "--verify", "--root", "/tmp"], "cannot be used with --root"),
        (["tune", "--quick"], "give --apply --verify too"),
        (["tune", "--apply", "--verify", "--persist"], "verify first, then persist"),
        (["tune", "--apply", "--verify", "--metric", "x: (.*)"], "give the command after `--`"),
        (["tune", "--apply", "--", "python", "train.py"], "are for --verify"),
        (["tune", "--apply", "--verify", "--pairs", "2", "--", "true"], "--pairs 2 is too few"),
    ],
)
def test_verify_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 64
    assert message in capsys.readouterr().err


# -- for real, with TensorFlow ---------------------------------------------------------------------


# A job with two halves that the two changes move in opposite directions: matrix products on the
# intra-op pool (the shell forces one thread: tf-threads' pool of one per core makes them about
# twice as fast here) and a tf.data pipeline whose map runs in parallel (tf-data with a private
# pool of one thread makes it about 1.5x slower here). Its rate, read with --metric, is timed after
# a warm-up, so TensorFlow's start-up is not in the figure.
TWO_HALVES_JOB = """
import time

import tensorflow as tf

ELEMENTS, WIDTH, ROUNDS, PRODUCTS = 256, 4096, 40, 48


def heavy(i):
    x = tf.random.stateless_uniform([WIDTH], seed=tf.stack([i, tf.constant(0, tf.int64)]))
    for _ in range(ROUNDS):
        x = tf.sin(x) + tf.cos(x)
    return tf.reduce_sum(x)


a = tf.random.stateless_uniform([512, 512], seed=[1, 2])


@tf.function
def products():
    x = a
    for _ in range(PRODUCTS):
        x = tf.matmul(x, a) / 512.0
    return tf.reduce_sum(x)


def once():
    ds = tf.data.Dataset.range(ELEMENTS).map(heavy, num_parallel_calls=tf.data.AUTOTUNE).batch(64)
    for _ in ds:
        pass
    products().numpy()


once()
start = time.perf_counter()
for _ in range(3):
    once()
print(f"rate: {3 / (time.perf_counter() - start):.6f}")
"""


# Pairs of trials per change, judged at one look: one more than the fewest (6) whose 95% interval can
# exclude 1, so that one of the two closest pairs may point the other way (the signed-rank
# statistic's critical value at 7 pairs is 2). The changes here move the job by 25-40%, against a
# spread of adjacent pairs of a few percent; --quick's budgeted looks on a small change are measured
# by tests/perf/verify_power.py.
REAL_TF_PAIRS = 7


@needs_tf
@pytest.mark.slow
@pytest.mark.solo
# Two changes of a user's command, 7 pairs each, a trial about 6 s here.
@pytest.mark.timeout(900)
def test_real_tf_keeps_the_helpful_change_and_reverts_the_harmful_one(tmp_path: Path) -> None:
    """From a shell that forces one intra-op thread (TF_NUM_INTRAOP_THREADS=1, OMP_NUM_THREADS=1),
    tf-threads (a pool of one thread per core) and tf-data (a private pool of one thread) are
    planned for a real TensorFlow job and judged one at a time by A/B trials of the job itself.
    Timed alone here: the products 0.64 s -> 0.28 s with two threads, the pipeline 0.55 s -> 0.82 s
    with one; judged here: tf-threads B/A 1.42 (95% [1.26, 1.57]), tf-data 0.77 ([0.71, 0.85]) at
    11 pairs each. The first is kept, the second reverted, and
    the profile holds exactly the kept change."""
    state = tmp_path / "state"
    job = tmp_path / "job.py"
    job.write_text(TWO_HALVES_JOB)
    proc = run_cli(
        *("tune", "--apply", "--verify", "--pairs", str(REAL_TF_PAIRS), "--format", "json"),
        *("--only", "tf-data,tf-threads", "--set", "tf-data.private_threadpool_size=1"),
        *("--metric", r"rate: ([0-9.]+)", "--", sys.executable, str(job)),
        env={
            "NODEAGENT_STATE_DIR": str(state),
            "TF_NUM_INTRAOP_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        },
        process=True,
        timeout=900,
    )
    doc = json.loads(proc.stdout)
    changes = {c["tuner"]: c for c in doc["verify"]["changes"]}
    shown = {t: (c["decision"], c["trials"]["estimate"]) for t, c in changes.items()}
    assert sorted(changes) == ["tf-data", "tf-threads"], proc.stderr[-3000:]
    assert changes["tf-threads"]["trials"]["estimate"]["verdict"] == stats.FASTER, shown
    assert changes["tf-threads"]["decision"] == bench_verify.KEPT, shown
    assert changes["tf-data"]["trials"]["estimate"]["verdict"] == stats.SLOWER, shown
    assert changes["tf-data"]["decision"] == bench_verify.REVERTED, shown
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((state / "profiles" / "default.json").read_text())
    assert saved.get("env", {}).get("TF_NUM_INTRAOP_THREADS") not in (None, "1")
    assert "tf_data" not in saved
