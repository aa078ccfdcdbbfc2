"""The benchmark's orchestration (nodeagent/bench/run.py) and `nodeagent bench` end to end.

Two halves:
- orchestration on synthetic numbers: a fake worker (tests/support/fake_bench.py, written to a temp file)
  speaks the worker's contract (argv, `progress` lines on stderr, one JSON line last on stdout)
  without TensorFlow, so interleaving, failures, bounds, fractions, diagnoses, verdicts and the
  environment given to each config are checked in seconds;
- the real benchmark in quick mode through `python -m nodeagent bench --quick --format json`, with
  a profile made first by `nodeagent tune --apply` in a temporary state folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import run, stats
from nodeagent.bench.run import FAILED, OK, SKIPPED
from nodeagent.core import document
from tests.support.fake_bench import SPEEDS, logged, make_profile

# Real sshd, TensorFlow or many subprocesses: left out of `make test-fast`.
pytestmark = pytest.mark.slow

needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="tensorflow is not installed in this environment (pip install 'nodeagent[tf]')",
)


def config_of(entry: dict[str, Any]) -> str:
    argv: list[str] = entry["argv"]
    return argv[argv.index("--config") + 1]


# -- command lines and environment --------------------------------------------------------------


def test_worker_argv_follows_the_contract() -> None:
    argv = run.worker_argv("naive", Path("/data"), run.QUICK)
    assert argv[:3] == [sys.executable, "-m", "nodeagent.bench.worker"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--config"] == "naive" and flags["--data"] == "/data"
    assert flags["--batch"] == str(run.QUICK.batch)
    assert flags["--image-size"] == str(run.QUICK.image_size)
    assert flags["--warmup-steps"] == str(run.QUICK.warmup_steps)
    assert flags["--steps"] == str(run.QUICK.steps)
    assert flags["--repeats"] == str(run.QUICK.repeats)
    assert argv[-1] == "--progress"


def test_tuned_goes_through_the_exec_launcher() -> None:
    inner = run.worker_argv("tuned", Path("/data"), run.QUICK)
    argv = run.exec_argv("fast", inner)
    assert argv[: argv.index("--") + 1] == [
        sys.executable,
        "-m",
        "nodeagent",
        "exec",
        "--profile",
        "fast",
        "--",
    ]
    assert argv[argv.index("--") + 1 :] == inner


def test_clean_env_gives_tensorflow_defaults() -> None:
    from nodeagent.tuning.launcher import HOOKS_DIR

    env = run.clean_env(
        {
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MKL_DYNAMIC": "false",
            "NODEAGENT_TF_DATA_OPTIONS": "{}",
            "PYTHONPATH": os.pathsep.join([str(HOOKS_DIR), "/opt/lib"]),
            "NODEAGENT_STATE_DIR": "/tmp/state",
            "PATH": "/usr/bin",
        }
    )
    assert env["PYTHONPATH"] == "/opt/lib"
    assert env["NODEAGENT_STATE_DIR"] == "/tmp/state" and env["PATH"] == "/usr/bin"
    assert not [k for k in env if k.startswith(("TF_NUM_", "OMP_", "MKL_", "NODEAGENT_TF"))]
    assert "PYTHONPATH" not in run.clean_env({"PYTHONPATH": str(HOOKS_DIR)})


# -- parsing a worker's output --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("", "printed no result"),
        ("hello\n", "not JSON"),
        ("[1, 2]\n", "not a JSON object"),
        ('{"images_per_s": []}\n', "no images_per_s"),
        ('{"images_per_s": [10.0, 0]}\n', "throughput of 0"),
        ('{"images_per_s": [10.0, NaN]}\n', "throughput of nan"),
    ],
)
def test_bad_worker_output_is_an_error(stdout: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run.parse_result(stdout)


def test_result_is_the_last_line() -> None:
    doc = run.parse_result('chatter\n{"images_per_s": [1.0]}\n\n')
    assert doc["images_per_s"] == [1.0]


def test_hung_worker_is_killed(tmp_path: Path) -> None:
    spec = run.Spec("slow", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
    w = run.run_worker(spec, timeout_s=1)
    assert w.result is None and w.error is not None and "killed" in w.error


def test_interference_counts_other_processes_only() -> None:
    assert run.interference(busy_s=3.0, ours_s=1.0, wall_s=2.0, cpus=2) == pytest.approx(0.5)
    assert run.interference(busy_s=1.0, ours_s=1.2, wall_s=2.0, cpus=2) == 0.0  # rounding of jiffies
    assert run.interference(busy_s=1.0, ours_s=0.0, wall_s=0.0, cpus=2) == 0.0


def test_a_busy_machine_is_noticed() -> None:
    """A process spinning next to the worker shows up as interference, and in the notes."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        code = "import time; time.sleep(1.5); print('{\"images_per_s\": [1.0]}')"
        spec = run.Spec("sleepy", [sys.executable, "-c", code], dict(os.environ))
        w = run.run_worker(spec, timeout_s=60)
    finally:
        burner.kill()
        burner.wait()
    cpus = os.cpu_count() or 1
    assert w.interference is not None and w.interference > 0.5 / cpus  # one busy CPU of `cpus`
    assert w.result == {"images_per_s": [1.0]}
    c = run.ConfigResult("sleepy", OK, runs=[w])
    assert c.interference == w.interference
    (note,) = run.busy_notes([c])
    assert note.startswith("sleepy: other processes used") and "quiet machine" in note


def test_disturbed_processes_are_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process run while others took > BUSY_SHARE of the CPUs is left out and run again, at most
    `processes` times per config; after that the disturbed figures are kept, with a note."""
    shares = {"calm": [0.30, 0.01, 0.02], "busy": [0.5] * 10}
    calls: dict[str, int] = {}

    def fake_run(spec: run.Spec, timeout_s: float, on_line: Any = None) -> run.WorkerRun:
        k = calls[spec.name] = calls.get(spec.name, 0) + 1
        doc = {
            "images_per_s": [100.0 + k, 101.0 + k],
            "input_wait_fraction": 0.1,
            "cpu_seconds_per_image": 0.01,
        }
        return run.WorkerRun(0, doc, None, "", 1.0, shares[spec.name][k - 1])

    monkeypatch.setattr(run, "run_worker", fake_run)
    env = dict(os.environ)
    runs = run.run_specs([run.Spec("calm", [], env), run.Spec("busy", [], env)], 2, 60)
    assert calls == {"calm": 3, "busy": 4}
    calm = run.config_result("calm", runs["calm"])
    assert [r.discarded is not None for r in calm.runs] == [True, False, False]
    assert calm.groups == [[102.0, 103.0], [103.0, 104.0]]
    assert calm.summary is not None and calm.summary.n == 4
    busy = run.config_result("busy", runs["busy"])
    assert sum(r.discarded is not None for r in busy.runs) == 2  # the cap: `processes` reruns
    assert len(busy.groups) == 2
    notes = run.busy_notes([calm, busy])
    assert notes[0].startswith("calm: 1 process(es) left out and run again")
    assert any(n.startswith("busy: other processes used 50%") for n in notes)
    doc = document.dump(calm)
    assert doc["discarded"][0]["images_per_s"] == [101.0, 102.0]
    assert doc["images_per_s"]["samples"] == [102.0, 103.0, 103.0, 104.0]

    calls.clear()  # quick mode keeps its time budget: noted, not run again
    runs = run.run_specs([run.Spec("calm", [], env)], 2, 60, rerun_disturbed=False)
    assert calls == {"calm": 2} and not any(r.discarded for r in runs["calm"])
    assert run.busy_notes([run.config_result("calm", runs["calm"])])[0].startswith(
        "calm: other processes used 30%"
    )


# -- the whole orchestration on fake workers ------------------------------------------------------


def test_run_bench_on_fake_workers(
    fake_worker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_profile(tmp_path / "state", "--only", "tf-threads,tf-data")
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")  # the caller's shell must not leak into naive
    seen: list[run.Progress] = []
    result = run.run_bench(quick=True, processes=2, on_progress=seen.append)

    assert list(result.configs) == list(run.CONFIGS)
    assert all(c.status == OK for c in result.configs.values())
    assert not result.failed
    med = {n: c.summary.median for n, c in result.configs.items() if c.summary}
    for name, speed in SPEEDS.items():
        want = speed * 1.5 if name == "tuned" else speed  # the profile's 2 intra-op threads
        assert med[name] == pytest.approx(want, rel=0.02), name
        assert result.configs[name].summary is not None
        assert result.configs[name].summary.n == 2 * run.QUICK.repeats  # type: ignore[union-attr]

    # bounds: stage = min(200, 180); CPU budget = 2 CPUs / (0.004 + 0.006) s per image = 200
    assert result.bound.stage == pytest.approx(180, rel=0.02)
    assert result.bound.cpu_budget == pytest.approx(200)
    assert result.bound.value == result.bound.stage
    tuned = result.configs["tuned"]
    assert tuned.fraction_of_bound == pytest.approx(150 / 180, rel=0.03)
    assert result.configs["naive"].fraction_of_bound == pytest.approx(100 / 180, rel=0.03)
    # The stages make the bound: no share of it (input_only would be 200 / 180).
    assert [result.configs[s].fraction_of_bound for s in run.STAGES] == [None, None]
    assert tuned.diagnosis is not None and tuned.diagnosis.startswith("input-bound")  # waits 40%
    assert result.configs["input_only"].input_wait_fraction is None
    assert result.verdicts["tuned_vs_naive"]["verdict"] == stats.FASTER
    assert result.verdicts["tuned_vs_autotune"]["verdict"] == stats.FASTER
    assert result.verdicts["tuned_vs_naive"]["ratio"] == pytest.approx(1.5, rel=0.03)

    # Interleaved: round 1 in order, round 2 rotated by one.
    entries = logged(fake_worker)
    order = [config_of(e) for e in entries]
    assert order == [*run.CONFIGS, *run.CONFIGS[1:], run.CONFIGS[0]]
    for e in entries:
        env = e["env"]
        if config_of(e) == "tuned":  # the profile, through `nodeagent exec`, with the tf.data hook
            assert env["TF_NUM_INTRAOP_THREADS"] == "2"
            assert env["NODEAGENT_TF_DATA_OPTIONS"] is not None
            assert "hooks" in (env["PYTHONPATH"] or "")
        else:  # TensorFlow's defaults
            assert env["TF_NUM_INTRAOP_THREADS"] is None and env["NODEAGENT_TF_DATA_OPTIONS"] is None

    # Progress: per config and process, monotone, ends full.
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert {p.config for p in seen} == set(run.CONFIGS)
    assert {p.process for p in seen} == {1, 2}

    doc = json.loads(json.dumps(document.dump(result)))
    assert set(doc) >= {"configs", "bound", "verdict", "quick", "duration_s"}
    naive = doc["configs"]["naive"]
    assert set(naive["images_per_s"]) >= {"median", "ci95", "samples"}
    assert len(naive["images_per_s"]["samples"]) == 2 * run.QUICK.repeats
    assert set(naive) >= {"input_wait_fraction", "fraction_of_bound", "diagnosis"}
    assert doc["configs"]["input_only"]["fraction_of_bound"] is None
    assert set(doc["bound"]) >= {"stage", "cpu_budget"}
    assert set(doc["verdict"]) >= {"tuned_vs_naive", "tuned_vs_autotune"}


def test_without_a_profile_tuned_is_skipped(fake_worker: Path) -> None:
    result = run.run_bench(quick=True, profile="absent")
    tuned = result.configs["tuned"]
    assert tuned.status == SKIPPED
    assert tuned.reason is not None and "no profile 'absent'" in tuned.reason
    assert not result.failed
    assert all(c.status == OK for n, c in result.configs.items() if n != "tuned")
    v = result.verdicts["tuned_vs_naive"]
    assert v["verdict"] == SKIPPED and "tuned skipped" in v["reason"]
    assert result.verdicts["autotune_vs_naive"]["verdict"] == stats.FASTER
    assert "tuned" not in {config_of(e) for e in logged(fake_worker)}
    assert document.dump(result)["configs"]["tuned"]["images_per_s"] is None


def test_a_failed_worker_fails_its_config_only(fake_worker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_FAIL_AUTOTUNE", "out of memory in the fake")
    result = run.run_bench(quick=True, processes=2, profile="absent")
    assert result.failed == ["autotune"]
    bad = result.configs["autotune"]
    assert bad.status == FAILED and bad.reason is not None
    assert "status 3" in bad.reason and "out of memory in the fake" in bad.reason
    assert "RuntimeError: out of memory in the fake" in document.dump(bad)["stderr_tail"]
    assert result.configs["naive"].status == OK
    # not run again in the second round: it would fail the same way
    assert [config_of(e) for e in logged(fake_worker)].count("autotune") == 1
    assert result.verdicts["tuned_vs_autotune"]["verdict"] == SKIPPED


def test_cli_bench_json_and_exit_code(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodeagent.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--profile", "absent", "--format", "json"])
    assert e.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["quick"] is True and doc["configs"]["tuned"]["status"] == SKIPPED

    monkeypatch.setenv("FAKE_FAIL_COMPUTE_ONLY", "boom")
    with pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--profile", "absent"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert "compute_only failed" in out and "RuntimeError: boom" in out
    assert "naive" in out and "bound:" in out


def test_cli_without_tensorflow_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from importlib import util

    from nodeagent.cli.main import main

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    for argv in (["bench"], ["tune", "--apply", "--verify"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 64
        err = capsys.readouterr().err
        assert err == "nodeagent: error: the benchmark needs TensorFlow: pip install 'nodeagent[tf]'\n"


def test_the_orchestrator_never_imports_tensorflow() -> None:
    code = (
        "import sys, os\n"
        "from nodeagent import cli\n"
        "from nodeagent.bench import run, stats, verify\n"
        "run.clean_env(os.environ); run.usable_cpus(); run.profile_problem('x')\n"
        "stats.compare([[1.0, 2.0, 3.0, 4.0]], [[1.0, 2.0, 3.0, 4.0]])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip() == "[]"


# -- pure parts ---------------------------------------------------------------------------------


def ok_config(name: str, values: list[float], wait: float | None, cpu: float | None) -> run.ConfigResult:
    doc = {"images_per_s": values, "input_wait_fraction": wait, "cpu_seconds_per_image": cpu}
    return run.config_result(name, [run.WorkerRun(0, doc, None, "", 1.0)])


def test_bound_is_the_smaller_of_stage_and_cpu_budget() -> None:
    configs = {
        "naive": ok_config("naive", [50, 51, 52, 53], 0.6, 0.02),
        "input_only": ok_config("input_only", [300, 301, 302, 303], None, 0.005),
        "compute_only": ok_config("compute_only", [250, 251, 252, 253], None, 0.005),
    }
    b = run.bounds(configs, cpus=2)
    assert b.stage == pytest.approx(251.5)
    assert b.cpu_budget == pytest.approx(200)  # 2 / 0.01: both stages share 2 CPUs
    assert b.value == pytest.approx(200)
    run.finish(configs, b)
    assert configs["naive"].fraction_of_bound == pytest.approx(51.5 / 200)
    # Both stages are faster alone than the budget lets them run together (301.5 and 251.5 against
    # 200): they are what the bound is made of, not configs it bounds.
    assert configs["input_only"].fraction_of_bound is None
    assert configs["compute_only"].fraction_of_bound is None
    assert configs["naive"].diagnosis == "input-bound: waits on input 60% of the time (> 25%)"
    assert configs["input_only"].diagnosis is not None and "stage bound" in configs["input_only"].diagnosis


def test_bound_unknown_without_both_stages() -> None:
    configs = {"input_only": ok_config("input_only", [300.0], None, 0.005)}
    b = run.bounds(configs, cpus=2)
    assert b.stage is None and b.cpu_budget is None and b.value is None
    assert (
        run.bounds({**configs, "compute_only": ok_config("compute_only", [9.0], None, None)}, 2).cpu_budget
        is None
    )


@pytest.mark.parametrize(
    ("wait", "start"),
    [(0.26, "input-bound"), (0.25, "compute-bound"), (0.0, "compute-bound"), (None, "unknown")],
)
def test_diagnosis_threshold(wait: float | None, start: str) -> None:
    assert run.diagnose("naive", wait).startswith(start)


# -- the real benchmark, quick mode ---------------------------------------------------------------


def positive_numbers(doc: Any, where: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON document, with its path."""
    if isinstance(doc, bool) or doc is None or isinstance(doc, str):
        return []
    if isinstance(doc, (int, float)):
        return [(where, float(doc))]
    if isinstance(doc, list):
        return [x for i, v in enumerate(doc) for x in positive_numbers(v, f"{where}[{i}]")]
    assert isinstance(doc, dict)
    return [x for k, v in doc.items() for x in positive_numbers(v, f"{where}.{k}")]


@needs_tf
@pytest.mark.slow
def test_quick_bench_end_to_end(tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_profile(state, "--only", "numa-pinning,tf-threads,tf-data")
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", "bench", "--quick", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "NODEAGENT_STATE_DIR": str(state)},
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["quick"] is True and doc["duration_s"] > 0
    assert list(doc["configs"]) == list(run.CONFIGS)
    for name, c in doc["configs"].items():
        assert c["status"] == OK, (name, c.get("reason"), c.get("stderr_tail"))
        ips = c["images_per_s"]
        lo, hi = ips["ci95"]
        assert 0 < lo <= ips["median"] <= hi
        assert len(ips["samples"]) == run.QUICK.repeats and all(v > 0 for v in ips["samples"])
        assert c["cpu_seconds_per_image"] > 0
        assert c["diagnosis"]
        wait = c["input_wait_fraction"]
        if name in run.STAGES:  # the bound is made of them: no share of it
            assert wait is None and c["fraction_of_bound"] is None
        else:
            assert (
                c["fraction_of_bound"] > 0
            )  # a share of the loop's time: 0 is possible (a perfectly fed step)
            assert 0 <= wait <= 1
            assert c["diagnosis"].startswith("input-bound" if wait > run.INPUT_BOUND else "compute-bound")
    # Its stderr, a pipe here, told each configuration as it went (one process each in quick mode):
    # started, warm-up done, then the median of its own repeats, which is the config's.
    told = [line for line in proc.stderr.splitlines() if line.startswith("bench: config ")]
    ended = [line for line in told if " images/s (median of " in line]
    assert len(told) == 3 * len(run.CONFIGS) and len(ended) == len(run.CONFIGS), proc.stderr
    for n, (name, line) in enumerate(zip(run.CONFIGS, ended, strict=True), 1):
        median = doc["configs"][name]["images_per_s"]["median"]
        assert line.startswith(f"bench: config {n}/{len(run.CONFIGS)} {name}: {median:.1f} images/s "), line
    # The tuned config ran through `nodeagent exec`: the profile's threads and tf.data options.
    tuned = doc["configs"]["tuned"]
    assert tuned["tf_data_options"], tuned
    for key in ("stage", "cpu_budget", "value", "cpus"):
        assert doc["bound"][key] > 0
    assert doc["bound"]["value"] == min(doc["bound"]["stage"], doc["bound"]["cpu_budget"])
    numbers = positive_numbers({k: v for k, v in doc.items() if k != "configs"})
    for name, c in doc["configs"].items():
        numbers += positive_numbers(
            {k: c[k] for k in ("images_per_s", "cpu_seconds_per_image", "fraction_of_bound")}, name
        )
    assert numbers and all(v > 0 for path, v in numbers if not path.endswith("schema")), [
        (p, v) for p, v in numbers if v <= 0
    ]
    for key in ("tuned_vs_naive", "tuned_vs_autotune"):
        v = doc["verdict"][key]
        lo, hi = v["ratio_ci95"]
        a, b = key.split("_vs_")
        ratio = doc["configs"][a]["images_per_s"]["median"] / doc["configs"][b]["images_per_s"]["median"]
        assert v["ratio"] == pytest.approx(ratio)
        assert 0 < lo <= hi
        if v["verdict"] == stats.FASTER:
            assert lo > 1
        elif v["verdict"] == stats.SLOWER:
            assert hi < 1
        else:
            assert v["verdict"] == stats.SAME and lo <= 1 <= hi
