"""`nodeagent exec --measure`: a job's steps/s and input-wait share, measured by the hook
(nodeagent/hooks/_nodeagent_measure.py) without changing the job, combined by
nodeagent.bench.measure, printed by nodeagent.render.measure; the job's exit code and signals pass
through nodeagent, which now stays as its parent.

Expected figures come from the jobs themselves: each real TensorFlow job times its own steps and
prints them, and the test compares nodeagent's figures with the job's over the steps nodeagent says
it measured."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent import tuners
from nodeagent.bench import measure, run
from nodeagent.hooks import _nodeagent_measure as hook
from nodeagent.hooks import sitecustomize
from nodeagent.render import measure as measure_text
from nodeagent.tuning import launcher
from tests.support.measure_files import write_measurement

EXE = [sys.executable, "-m", "nodeagent", "exec"]
HOOKS = str(launcher.HOOKS_DIR)
NO_NUMACTL = "numactl is not installed (Debian package `numactl`), so the numactl path cannot run here"
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None,
    reason="tensorflow and keras are not installed in this environment (pip install tensorflow-cpu)",
)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without nodeagent's variables or PYTHONPATH, with a state folder of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_") and k != "PYTHONPATH"}
    env["NODEAGENT_STATE_DIR"] = str(tmp_path / "state")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"  # TensorFlow's C++ start-up chatter
    env.update(extra)
    return env


def write_profile(tmp_path: Path, doc: dict[str, Any], name: str = "default") -> None:
    folder = tmp_path / "state" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(doc))


def measure_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("nodeagent measure:")]


# -- the pieces agree ----------------------------------------------------------------------------


def test_the_hook_and_nodeagent_use_the_same_names_and_threshold() -> None:
    assert hook.DIR_ENV == measure.MEASURE_DIR_ENV == launcher.MEASURE_DIR_ENV == sitecustomize.MEASURE_ENV
    assert hook.EVERY_ENV == measure.MEASURE_EVERY_ENV
    assert hook.INPUT_BOUND == measure.INPUT_BOUND == run.INPUT_BOUND
    assert set(sitecustomize._MEASURED_MODULES) == set(hook.HOOKS)
    assert (hook.KERAS_FIT, hook.TF_DATA_LOOP) == measure.SOURCES
    assert measure.TF_DATA_TUNER in {t.id for t in tuners.all_tuners()}


# -- the record of steps (the hook's arithmetic, on made-up clocks) ------------------------------


def _record(starts: Sequence[float], waits: Sequence[float | None], close: float | None = None) -> hook.Steps:
    steps = hook.Steps(hook.TF_DATA_LOOP, None)
    for start, wait in zip(starts, waits, strict=True):
        steps.step(start, wait, reason=None if wait is not None else "not seen")
    if close is not None:
        steps.close(close)
    return steps


def test_warm_up_is_skipped_and_the_rest_measured_from_next_to_next() -> None:
    # 5 slow warm-up steps (1 s each), then 15 steps of 0.1 s that each wait 0.03 s; the exhausting
    # next() at 6.5 s ends the last one.
    starts = [float(i) for i in range(5)] + [5.0 + 0.1 * i for i in range(15)]
    steps = _record(starts, [0.5] * 5 + [0.03] * 15, close=6.5)
    doc = steps.summary(pid=42)
    assert doc["steps"] == 20 and doc["warmup_steps"] == 5 and doc["measured_steps"] == 15
    assert doc["seconds"] == pytest.approx(1.5)
    assert doc["steps_per_s"] == pytest.approx(10.0)
    assert doc["input_wait_s"] == pytest.approx(0.45)
    assert doc["input_wait_fraction"] == pytest.approx(0.3)
    assert doc["input_wait_unknown"] is None and doc["source"] == "tf-data-loop" and doc["pid"] == 42


def test_the_last_step_without_an_end_is_not_measured() -> None:
    starts = [0.1 * i for i in range(20)]
    doc = _record(starts, [0.02] * 20).summary(pid=1)
    assert doc["measured_steps"] == 14  # steps 5..18: the 20th has no next() after it
    assert doc["seconds"] == pytest.approx(1.4)
    # An exhausted iterator of an earlier epoch does not end a step that began after it.
    doc = _record(starts, [0.02] * 20, close=0.55).summary(pid=1)
    assert doc["measured_steps"] == 14


def test_warm_up_is_five_percent_of_a_long_run() -> None:
    doc = _record([0.01 * i for i in range(400)], [0.0] * 400, close=4.0).summary(pid=1)
    assert doc["warmup_steps"] == 20 and doc["measured_steps"] == 380
    assert doc["input_wait_fraction"] == 0.0


def test_an_unknown_wait_is_unknown_with_its_reason_and_too_few_steps_say_so() -> None:
    doc = _record([0.1 * i for i in range(10)], [None] * 10, close=1.0).summary(pid=1)
    assert doc["steps_per_s"] == pytest.approx(10.0)
    assert doc["input_wait_fraction"] is None and doc["input_wait_unknown"] == "not seen"
    few = _record([0.0, 0.1, 0.2], [0.0] * 3, close=0.3).summary(pid=1)
    assert few["measured_steps"] == 0 and few["steps_per_s"] is None
    assert "no complete step after the warm-up" in few["input_wait_unknown"]


def test_the_periodic_line_covers_the_steps_since_the_last_one(capsys: pytest.CaptureFixture[str]) -> None:
    steps = hook.Steps(hook.TF_DATA_LOOP, 1.0)
    for i in range(40):  # 0.1 s steps waiting 0.04 s: 10 steps/s, 40% waiting
        steps.step(0.1 * i, 0.04)
    lines = capsys.readouterr().err.splitlines()
    # The window opens at the 5th step (0.4 s); lines at 1.4, 2.4 and 3.4 s.
    assert lines == ["nodeagent measure: 10.0 steps/s, input wait 40% (input-bound)"] * 3
    steps = hook.Steps(hook.KERAS_FIT, 0.5)
    for i in range(12):
        steps.step(0.1 * i, None, reason="steps_per_execution=4: ...")
    assert capsys.readouterr().err.splitlines() == [
        "nodeagent measure: 10.0 steps/s, input wait unknown (steps_per_execution=4: ...)"
    ]


# -- combining the processes' files --------------------------------------------------------------


def test_read_sums_the_ranks_rates_and_weights_their_waits_by_time(tmp_path: Path) -> None:
    write_measurement(tmp_path, 100)  # 10 steps/s, waits 2 s of 10 s
    write_measurement(tmp_path, 101, seconds=30.0, measured_steps=240, steps_per_s=8.0, input_wait_s=12.0)
    (tmp_path / "102.json").write_text('{"pid": 102, "source": "tf-data-loop", "steps": ')
    write_measurement(tmp_path, 103, steps="many")
    (tmp_path / ".104.json.tmp").write_text("half a file being written")
    figures = measure.read(tmp_path)
    assert figures is not None
    assert figures.steps_per_s == pytest.approx(18.0)
    assert figures.input_wait_fraction == pytest.approx((2.0 + 12.0) / (10.0 + 30.0))
    assert figures.processes == 2 and figures.measured_steps == 340 and figures.warmup_steps == 10
    assert figures.source == "tf-data-loop" and figures.input_wait_unknown is None
    assert len(figures.skipped) == 2
    assert str(tmp_path / "102.json") in figures.skipped[0]
    assert (
        str(tmp_path / "103.json") in figures.skipped[1]
        and "steps: Input should be a valid integer (got 'many')" in figures.skipped[1]
    )
    assert figures.steps_per_s == pytest.approx(18.0)


def test_one_rank_with_an_unknown_wait_makes_the_jobs_unknown(tmp_path: Path) -> None:
    write_measurement(tmp_path, 1)
    write_measurement(
        tmp_path, 2, source="keras-fit", input_wait_s=None, input_wait_fraction=None, input_wait_unknown="why"
    )
    figures = measure.read(tmp_path)
    assert figures is not None and figures.steps_per_s == pytest.approx(20.0)
    assert figures.input_wait_fraction is None and figures.input_wait_unknown == "why"
    assert figures.source == "keras-fit+tf-data-loop"
    assert measure.diagnosis(figures) == "input wait unknown: why"


def test_read_without_files_is_none_and_with_only_broken_ones_says_so(tmp_path: Path) -> None:
    assert measure.read(tmp_path / "absent") is None
    assert measure.read(tmp_path) is None
    (tmp_path / "7.json").write_text("[]")
    figures = measure.read(tmp_path)
    assert figures is not None and figures.steps_per_s is None and figures.processes == 0
    assert figures.skipped == [f"{tmp_path / '7.json'}: Input should be an object"]
    assert "could not be read" in measure.diagnosis(figures)


def test_a_fifo_or_device_the_job_left_in_the_folder_is_skipped_not_read(tmp_path: Path) -> None:
    """The job writes the measure folder: a FIFO there (which blocked the read forever once the job
    had exited, as nobody writes it) or a link to a device is skipped with its reason."""
    os.mkfifo(tmp_path / "1.json")
    (tmp_path / "2.json").symlink_to("/dev/zero")
    done: list[measure.JobFigures | None] = []
    reader = threading.Thread(target=lambda: done.append(measure.read(tmp_path)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "measure.read hung on a FIFO"
    (figures,) = done
    assert figures is not None and figures.processes == 0
    assert [s.split(": ", 1)[0] for s in figures.skipped] == [
        str(tmp_path / "1.json"),
        str(tmp_path / "2.json"),
    ]
    assert all("not a regular file" in s for s in figures.skipped), figures.skipped


def _figures(wait: float | None, unknown: str | None = None) -> measure.JobFigures:
    return measure.JobFigures(12.0, wait, unknown, 1, 100, 5, "keras-fit")


def test_diagnosis_names_the_bound_the_share_and_what_the_tuner_can_do() -> None:
    # Without the pipeline's stages (tests/integration/test_measure_pipeline.py has them), no tuner is chosen.
    assert measure.diagnosis(_figures(0.31)) == (
        "input-bound: waits on input 31% of the step time (> 25%); the input pipeline could not be "
        "read (not described): `nodeagent tune --only tf-data` speeds up a sequential map, not Python "
        "(Dataset.from_generator, tf.py_function) nor file reads one file at a time "
        "(https://www.tensorflow.org/guide/data_performance)"
    )
    assert measure.diagnosis(_figures(0.04)).startswith(
        "compute-bound: waits on input 4% of the step time (<= 25%)"
    )
    assert measure.diagnosis(_figures(None, "steps_per_execution=8: ...")) == (
        "input wait unknown: steps_per_execution=8: ..."
    )


def test_hook_env_puts_the_hooks_first_once_and_sets_the_variables(tmp_path: Path) -> None:
    base = {"PYTHONPATH": f"/a{os.pathsep}{HOOKS}", measure.MEASURE_EVERY_ENV: "9"}
    env = measure.hook_env(measure.hook_env(base, tmp_path, 2.5), tmp_path)
    assert env["PYTHONPATH"] == f"{HOOKS}{os.pathsep}/a"
    assert env[measure.MEASURE_DIR_ENV] == str(tmp_path) and measure.MEASURE_EVERY_ENV not in env
    assert measure.hook_env({}, tmp_path, 2.5)[measure.MEASURE_EVERY_ENV] == "2.5"


def test_a_caller_measuring_the_job_gets_the_hook_without_tf_data_options(tmp_path: Path) -> None:
    machine = launcher.Machine([0], None, None, [0], [0], "x86_64")
    env = {"PATH": os.defpath, measure.MEASURE_DIR_ENV: str(tmp_path)}
    launch = launcher.prepare({"env": {"A": "1"}}, "p.json", ["true"], None, env, machine)
    assert launch.env["PYTHONPATH"] == HOOKS and launcher.TF_DATA_ENV not in launch.env
    assert (
        "PYTHONPATH" not in launcher.prepare({}, "p.json", ["true"], None, {"PATH": os.defpath}, machine).env
    )


def test_the_summary_of_a_job_without_tensorflow_steps() -> None:
    done = measure.MeasuredRun(exit_code=0, wall_s=12.3, cpu_s=12.3 * 2 * 0.87, cpus=2, figures=None)
    assert measure_text.lines(done) == [
        "nodeagent measure: no TensorFlow training steps were seen: wall time 12.3 s, "
        "CPU utilisation 87% of 2 CPUs"
    ]
    assert measure.shell_exit_code(-signal.SIGTERM) == 143 and measure.shell_exit_code(3) == 3


def test_the_summary_of_a_measured_job() -> None:
    figures = measure.JobFigures(123.4, 0.31, None, 2, 950, 50, "keras-fit")
    done = measure.MeasuredRun(0, 60.0, 90.0, 2, figures)
    text = measure_text.lines(done)
    assert text[0] == (
        "nodeagent measure: 123.4 steps/s over 2 processes (keras-fit: 950 steps measured after 50 "
        "warm-up), input wait 31% of the step time"
    )
    assert text[1] == f"nodeagent measure: {measure.diagnosis(figures)}"
    assert text[2] == "nodeagent measure: wall time 60.0 s, CPU utilisation 75% of 2 CPUs"


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--every", "5"], "add --measure"), (["--measure", "--dry-run"], "--dry-run runs nothing")],
)
def test_bad_option_combinations_exit_64_with_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    proc = subprocess.run(
        [*EXE, *args, "--", "true"], capture_output=True, text=True, env=clean_env(tmp_path), check=False
    )
    assert proc.returncode == 64
    assert len(proc.stderr.splitlines()) == 1 and words in proc.stderr, proc.stderr


def _exec_measure(tmp_path: Path, code: str, **env: str) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(code)
    return subprocess.Popen(
        [*DEFAULT_SIGNALS, *EXE, "--measure", "--", sys.executable, str(script)],
        stdin=subprocess.DEVNULL,  # no terminal: every signal is nodeagent's to pass on
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(tmp_path, **env),
    )


# nodeagent leaves alone a signal it was started ignoring (nohup's SIGHUP, a background job's SIGINT),
# as shells do; the tests start it as a terminal would, every disposition the default (env execs it:
# the same process receives the signals).
DEFAULT_SIGNALS = (shutil.which("env") or "/usr/bin/env", "--default-signal=INT,HUP,TERM")


def test_the_jobs_exit_code_is_nodeagents(tmp_path: Path) -> None:
    proc = _exec_measure(tmp_path, "import sys; print('job ran'); sys.exit(3)\n")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and out == "job ran\n", err
    assert "no TensorFlow training steps were seen" in err and "Traceback" not in err


def test_a_job_killed_by_a_signal_exits_128_plus_the_signal(tmp_path: Path) -> None:
    proc = _exec_measure(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)\n")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err


WAITER = """
import signal, sys, time
def stop(signum, frame):
    print("job got", signum, flush=True)
    sys.exit(5)
if sys.argv[-1] != "default":
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, stop)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_signals_to_nodeagent_reach_the_job(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _exec_measure(tmp_path, WAITER)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert out == f"job got {int(sig)}\n", err
    assert proc.returncode == 5, err  # the job's own exit code: nodeagent waited for it
    assert "no TensorFlow training steps were seen" in err


def test_the_job_dies_of_a_forwarded_sigterm_and_nodeagent_reports_it(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(WAITER)
    proc = subprocess.Popen(
        [*EXE, "--measure", "--", sys.executable, str(script), "default"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err


BUSY = """
import json, os, time
wall0, cpu0 = time.monotonic(), time.process_time()
while time.process_time() - cpu0 < 1.5:
    pass
print(json.dumps({"wall": time.monotonic() - wall0, "cpu": time.process_time() - cpu0}))
"""


def test_a_job_without_tensorflow_gets_its_wall_time_and_cpu_use(tmp_path: Path) -> None:
    proc = _exec_measure(tmp_path, BUSY)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    job = json.loads(out)
    (line,) = measure_lines(err)
    found = re.fullmatch(
        r"nodeagent measure: no TensorFlow training steps were seen: wall time ([\d.]+) s, "
        r"CPU utilisation (\d+)% of (\d+) CPUs",
        line,
    )
    assert found, line
    wall, share, cpus = float(found[1]), int(found[2]), int(found[3])
    assert cpus == run.usable_cpus()
    # The job's own loop, plus the interpreter's start-up, which nodeagent sees and the job does not.
    assert job["wall"] <= wall + 0.05 <= job["wall"] + 2.0
    assert share == pytest.approx(100 * job["cpu"] / wall / cpus, abs=12)


BOUND_CHILD = """
import json, os, sys
print(json.dumps({"affinity": sorted(os.sched_getaffinity(0)), "env": dict(os.environ)}))
"""


@pytest.mark.parametrize(
    "numactl",
    [
        pytest.param(False, id="syscalls"),
        pytest.param(
            True, id="numactl", marks=pytest.mark.skipif(shutil.which("numactl") is None, reason=NO_NUMACTL)
        ),
    ],
)
def test_measure_runs_the_job_under_the_profiles_binding_and_environment(
    tmp_path: Path, numactl: bool
) -> None:
    cpu = min(os.sched_getaffinity(0))
    write_profile(tmp_path, {"env": {"FROM_PROFILE": "yes"}, "ranks": [{"local_rank": 0, "cpus": [cpu]}]})
    # Without numactl on PATH nodeagent binds itself and the job inherits it (the interpreter and
    # the job are given by absolute path).
    path = {} if numactl else {"PATH": str(tmp_path)}
    proc = _exec_measure(tmp_path, BOUND_CHILD, **path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    child = json.loads(out)
    assert child["affinity"] == [cpu]
    assert child["env"]["FROM_PROFILE"] == "yes"
    assert child["env"]["PYTHONPATH"].split(os.pathsep)[0] == HOOKS
    assert Path(child["env"][measure.MEASURE_DIR_ENV]).name.startswith("nodeagent-measure-")
    assert re.search(r"CPU utilisation \d+% of 1 CPU$", err), err


# -- the hook in a real interpreter, without TensorFlow --------------------------------------------

MODULES = """
import json, sys
print(json.dumps({"modules": sorted(sys.modules), "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


def _python(tmp_path: Path, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_measuring_costs_nothing_until_tensorflow_is_imported(tmp_path: Path) -> None:
    plain = json.loads(_python(tmp_path, MODULES, clean_env(tmp_path)).stdout)
    env = measure.hook_env(clean_env(tmp_path), tmp_path / "out", 1.0)
    hooked = json.loads(_python(tmp_path, MODULES, env).stdout)
    assert "_TensorFlowFinder" in hooked["finders"]
    added = set(hooked["modules"]) - set(plain["modules"])
    assert added <= {"sitecustomize", "__future__", "importlib", "importlib.machinery", "warnings"}, added
    assert not (tmp_path / "out").exists()  # no step, no file


# tf_keras is not installed here: a stand-in with its module path and Model.make_train_function's
# contract (tf_keras/src/engine/training.py) shows the steps being counted.
FAKE_TF_KERAS = """
class _Value:
    def __init__(self, value):
        self.value = value
    def numpy(self):
        return self
    def item(self):
        return self.value

class Model:
    def __init__(self, per_call):
        self._steps_per_execution = _Value(per_call)
        self.train_function = None
        self.calls = 0
    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        def train_function(iterator):
            self.calls += 1
            return {"loss": 0.0}
        self.train_function = train_function
        return self.train_function
"""

TF_KERAS_JOB = """
import json, sys
from tf_keras.src.engine import training
model = training.Model(per_call=2)
made = model.make_train_function()
assert made is model.train_function and model.make_train_function() is made
for _ in range(30):
    model.train_function(iter(()))
print(json.dumps({"calls": model.calls, "hook": "_nodeagent_measure" in sys.modules}))
"""


def _fake_tf_keras_job(tmp_path: Path) -> None:
    package = tmp_path / "site" / "tf_keras" / "src" / "engine"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "training.py").write_text(FAKE_TF_KERAS)
    (tmp_path / "job.py").write_text(TF_KERAS_JOB)


def test_plain_exec_keeps_a_callers_measurement_and_counts_tf_keras_steps(tmp_path: Path) -> None:
    _fake_tf_keras_job(tmp_path)
    write_profile(tmp_path, {"env": {"FROM_PROFILE": "yes"}})  # no tf_data: the hook comes for measuring
    out = tmp_path / "measured"
    env = clean_env(tmp_path, PYTHONPATH=str(tmp_path / "site"), NODEAGENT_MEASURE_DIR=str(out))
    proc = subprocess.run(
        [*EXE, "--", sys.executable, str(tmp_path / "job.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"calls": 30, "hook": True}
    (written,) = out.glob("*.json")
    doc = json.loads(written.read_text())
    assert doc["source"] == "keras-fit" and doc["steps"] == 60
    assert doc["warmup_steps"] == 6 and doc["measured_steps"] == 54  # whole calls of 2 steps
    assert doc["input_wait_fraction"] is None and "tf_keras" in doc["input_wait_unknown"]
    figures = measure.read(out)
    assert figures is not None and figures.steps_per_s == pytest.approx(doc["steps_per_s"])


# -- real TensorFlow jobs ------------------------------------------------------------------------

# One job, four shapes: a custom loop over a tf.data iterator or Keras fit; input-bound (a decode
# that sleeps 4 ms per element, one element at a time, no prefetch (nor tf.data's injected one), a
# tiny model: Python's share of the time must stay above half while other processes take the
# CPUs; with 2 ms it was 86-88% alone and 47% during two suite runs at once, with 4 ms 89% alone
# and 77% beside two busy loops) or compute-bound
# (cached, prefetched batches, a model of 1024-wide layers). The job times its own steps: the loop
# each next() (its start and how long it took), fit each batch through a callback.
JOB = r"""
import json, sys, time
import numpy as np
import tensorflow as tf

mode, bound, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
clock = time.perf_counter
BATCH, WIDTH = 16, 32

def slow_decode(i):
    time.sleep(0.004)
    return tf.fill([WIDTH], tf.cast(i, tf.float32) / 1000.0)

def dataset():
    if bound == "input":
        ds = tf.data.Dataset.range(batches * BATCH).map(
            lambda i: tf.py_function(slow_decode, [i], tf.float32), num_parallel_calls=1)
        ds = ds.map(lambda x: (tf.reshape(x, [WIDTH]), tf.reduce_sum(x, keepdims=True)))
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False  # no prefetch at all, not even tf.data's
        return ds.batch(BATCH).with_options(options)
    x = np.random.default_rng(0).random((8 * BATCH, WIDTH), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH).cache()
    return ds.repeat().take(batches).prefetch(4)

hidden = [16] if bound == "input" else [1024] * 4
if mode == "loop":
    sizes = [WIDTH, *hidden, 1]
    weights = [tf.Variable(tf.random.normal([a, b], stddev=0.05)) for a, b in zip(sizes, sizes[1:])]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for w in weights[:-1]:
                h = tf.nn.relu(h @ w)
            loss = tf.reduce_mean((h @ weights[-1] - y) ** 2)
        for w, g in zip(weights, tape.gradient(loss, weights)):
            w.assign_sub(1e-3 * g)
        return loss

    starts, waits = [], []
    iterator = iter(dataset())
    while True:
        began = clock()
        try:
            x, y = next(iterator)
        except StopIteration:
            starts.append(began)
            break
        waits.append(clock() - began)
        starts.append(began)
        step(x, y).numpy()
    print(json.dumps({"steps": len(waits), "starts": starts, "waits": waits}))
else:
    import keras

    begins, ends = [], []

    class Times(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            begins.append(clock())

        def on_train_batch_end(self, batch, logs=None):
            ends.append(clock())

    layers = [keras.Input((WIDTH,))] + [keras.layers.Dense(n, activation="relu") for n in hidden]
    model = keras.Sequential(layers + [keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(dataset(), epochs=2, verbose=0, callbacks=[Times()])
    print(json.dumps({"steps": len(begins), "begins": begins, "ends": ends}))
"""


def _run_job(
    tmp_path: Path, mode: str, bound: str, batches: int
) -> tuple[dict[str, Any], measure.JobFigures]:
    (tmp_path / "job.py").write_text(JOB)
    out = tmp_path / "measured"
    env = measure.hook_env(clean_env(tmp_path), out)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), mode, bound, str(batches)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nodeagent measure" not in proc.stderr and "nodeagent tf.data hook" not in proc.stderr, proc.stderr
    job: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = measure.read(out)
    assert figures is not None and figures.processes == 1 and not figures.skipped
    return job, figures


def _check_loop(job: dict[str, Any], figures: measure.JobFigures) -> float:
    """nodeagent's figures against the loop's own timing of the same steps; the job's wait share."""
    assert figures.source == "tf-data-loop" and figures.steps == job["steps"]
    first, count = figures.warmup_steps, figures.measured_steps
    assert first == max(5, math.ceil(0.05 * job["steps"])) and first + count == job["steps"]
    starts, waits = job["starts"], job["waits"]
    span = starts[first + count] - starts[first]  # the exhausting next() ends the last step
    assert figures.steps_per_s is not None and figures.input_wait_fraction is not None
    assert figures.steps_per_s == pytest.approx(count / span, rel=0.02)
    share: float = sum(waits[first : first + count]) / span
    assert figures.input_wait_fraction == pytest.approx(share, abs=0.02)
    return share


def _check_fit(job: dict[str, Any], figures: measure.JobFigures) -> None:
    """nodeagent's steps/s against the batches Keras' callbacks saw (the last one ends with fit)."""
    assert figures.source == "keras-fit" and figures.steps == job["steps"]
    first, count = figures.warmup_steps, figures.measured_steps
    assert first + count == job["steps"]
    begins, ends = job["begins"], job["ends"]
    span = ends[-1] - begins[first]
    assert figures.steps_per_s is not None and figures.steps_per_s == pytest.approx(count / span, rel=0.03)


@pytest.mark.slow
@needs_tf
def test_a_custom_loop_starved_by_its_input_is_input_bound(tmp_path: Path) -> None:
    job, figures = _run_job(tmp_path, "loop", "input", 60)
    share = _check_loop(job, figures)
    assert share > measure.INPUT_BOUND
    assert figures.input_wait_fraction is not None and figures.input_wait_fraction > measure.INPUT_BOUND
    assert measure.diagnosis(figures).startswith("input-bound")


@pytest.mark.slow
@needs_tf
def test_a_custom_loop_with_a_heavy_step_is_compute_bound(tmp_path: Path) -> None:
    job, figures = _run_job(tmp_path, "loop", "compute", 80)
    share = _check_loop(job, figures)
    assert share < measure.INPUT_BOUND
    assert figures.input_wait_fraction is not None and figures.input_wait_fraction < measure.INPUT_BOUND
    assert measure.diagnosis(figures).startswith("compute-bound")


@pytest.mark.slow
@needs_tf
def test_keras_fit_with_a_heavy_model_is_compute_bound(tmp_path: Path) -> None:
    job, figures = _run_job(tmp_path, "fit", "compute", 40)
    _check_fit(job, figures)
    assert figures.input_wait_fraction is not None and figures.input_wait_fraction < measure.INPUT_BOUND


@pytest.mark.slow
@needs_tf
def test_exec_measure_finds_keras_fit_input_bound_and_says_what_can_help(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    proc = subprocess.run(
        [
            *EXE,
            "--measure",
            "--every",
            "1",
            "--",
            sys.executable,
            str(tmp_path / "job.py"),
            "fit",
            "input",
            "30",
        ],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = measure_lines(proc.stderr)
    periodic = [
        line for line in lines if re.fullmatch(r"nodeagent measure: [\d.]+ steps/s, input wait.*", line)
    ]
    # Each periodic line covers one second: one during which other processes slowed the step down
    # can read compute-bound, so most of them, and the whole run (below), say input-bound.
    bound = [line.endswith("(input-bound)") for line in periodic]
    assert periodic and sum(bound) > len(bound) / 2, lines
    summary = next(line for line in lines if "steps measured after" in line)
    found = re.fullmatch(
        r"nodeagent measure: ([\d.]+) steps/s \(keras-fit: (\d+) steps measured after (\d+) warm-up\), "
        r"input wait (\d+)% of the step time",
        summary,
    )
    assert found, summary
    rate, count, first, share = float(found[1]), int(found[2]), int(found[3]), int(found[4])
    assert first + count == job["steps"] == 60
    assert rate == pytest.approx(count / (job["ends"][-1] - job["begins"][first]), rel=0.03)
    assert share > 100 * measure.INPUT_BOUND
    # The job's input is a tf.py_function in a sequential map: not for tf.data's options.
    diagnosis = next(line for line in lines if "input-bound: waits on input" in line)
    assert "Python sets the pace of the input" in diagnosis and "tune the input" not in diagnosis, lines
    stage = next(line for line in lines if "input stage:" in line)
    assert stage.startswith(
        "nodeagent measure: input stage: Python in the pipeline (EagerPyFunc: tf.py_function"
    )


def test_a_measurement_that_cannot_be_written_warns_once_and_leaves_the_job_alone(tmp_path: Path) -> None:
    _fake_tf_keras_job(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = measure.hook_env(clean_env(tmp_path, PYTHONPATH=str(tmp_path / "site")), blocker, every_s=-1)
    env["PYTHONPATH"] = os.pathsep.join([HOOKS, str(tmp_path / "site")])
    proc = _python(tmp_path, (tmp_path / "job.py").read_text(), env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"calls": 30, "hook": True}, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("nodeagent measure: NODEAGENT_MEASURE_EVERY='-1.0' is not a number")
    assert lines[1].startswith(f"nodeagent measure: could not write the measurement to '{blocker}'")
    assert all(line.endswith("the job runs on without it") for line in lines)


def test_a_missing_command_is_127_with_measure_too(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*EXE, "--measure", "--", "no-such-command-here"],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        check=False,
    )
    assert proc.returncode == 127 and "no-such-command-here: command not found" in proc.stderr
