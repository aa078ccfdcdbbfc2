"""The tf.data hook (nodeagent/hooks/sitecustomize.py) in real interpreters: what it costs when
TensorFlow is never imported, and, with TensorFlow, that every iterated dataset gets the default
options once while the options the program set stay as they are."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.tuners import tf_data
from nodeagent.tuning import launcher

# Real sshd, TensorFlow or many subprocesses: left out of `make test-fast`.
pytestmark = pytest.mark.slow

HOOKS = str(launcher.HOOKS_DIR)
ENV = launcher.TF_DATA_ENV
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="tensorflow is not installed in this environment (pip install tensorflow-cpu, or nodeagent[tf])",
)
# What the tuner plans, with a 2-thread pool: the hook and the tuner must agree on the format.
OPTIONS = tf_data.options_for(tf_data.Params(), 2)


def run_python(
    tmp_path: Path,
    code: str,
    options: Any = None,
    pythonpath: list[str] | None = None,
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "PYTHONPATH", "TF_DETERMINISTIC_OPS")}
    env["PYTHONPATH"] = os.pathsep.join(HOOKS if p == "HOOKS" else p for p in (pythonpath or ["HOOKS"]))
    if options is not None:
        env[ENV] = options if isinstance(options, str) else json.dumps(options)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"  # TensorFlow's C++ start-up chatter, not ours
    env.update(extra or {})
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=280, check=False
    )


def hook_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("nodeagent tf.data hook:")]


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


# -- without TensorFlow: nothing happens -----------------------------------------------------------

MODULES = """
import json, sys
finders = [type(f).__name__ for f in sys.meta_path]
hook = sys.modules.get("sitecustomize")
print(json.dumps({"modules": sorted(sys.modules), "finders": finders,
                  "hook": getattr(hook, "__file__", None)}))
"""


def test_the_hook_imports_no_tensorflow_when_the_program_does_not(tmp_path: Path) -> None:
    plain = result(run_python(tmp_path, MODULES, pythonpath=[]))
    hooked = result(run_python(tmp_path, MODULES, options=OPTIONS))
    assert hooked["hook"] == str(launcher.HOOKS_DIR / "sitecustomize.py")
    assert "_TensorFlowFinder" in hooked["finders"]
    added = set(hooked["modules"]) - set(plain["modules"])
    assert not any(m == "tensorflow" or m.startswith(("tensorflow.", "keras", "numpy")) for m in added)
    # Only the hook itself and the import machinery it names: no json, typing or functools at start-up.
    assert added <= {"sitecustomize", "__future__", "importlib", "importlib.machinery", "warnings"}, added


def test_without_options_the_hook_installs_nothing(tmp_path: Path) -> None:
    hooked = result(run_python(tmp_path, MODULES))
    assert "_TensorFlowFinder" not in hooked["finders"]


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = 'yes'\n")
    code = "import os, sys\nprint(os.environ.get('SITE_RAN'), sys.modules['sitecustomize'].__file__)\n"
    proc = run_python(tmp_path, code, options=OPTIONS, pythonpath=["HOOKS", str(site)])
    assert proc.returncode == 0, proc.stderr
    ran, hook = proc.stdout.split()
    assert ran == "yes" and hook == str(launcher.HOOKS_DIR / "sitecustomize.py")

    (site / "sitecustomize.py").write_text("raise RuntimeError('broken site hook')\n")
    proc = run_python(tmp_path, "print('still runs')\n", options=OPTIONS, pythonpath=["HOOKS", str(site)])
    assert proc.returncode == 0 and proc.stdout.strip() == "still runs"
    assert "Error in sitecustomize" in proc.stderr and "broken site hook" in proc.stderr


# -- with TensorFlow -----------------------------------------------------------------------------

PROGRAM = r"""
import json, sys
import tensorflow as tf

hook = sys.modules["sitecustomize"]
out = {"tf": tf.__version__}
calls = []
original_with_options = tf.data.Dataset.with_options

def spy(self, options):
    calls.append(self)
    return original_with_options(self, options)

tf.data.Dataset.with_options = spy

def applied(ds):
    # The dataset iter() really used: the hook's cached one, which the iterator holds too.
    it = iter(ds)
    cached = hook.with_defaults(ds)
    if hasattr(it, "_dataset"):
        assert it._dataset.options() == cached.options()
    return cached.options()

def threading_of(o):
    return {"pool": o.threading.private_threadpool_size, "intra": o.threading.max_intra_op_parallelism}

# 1. A sequential map, no options set: every default arrives, and the data is unchanged.
ds = tf.data.Dataset.range(40).map(lambda x: x * 2)
assert ds.options().threading.private_threadpool_size is None
got = sorted(int(v) for v in ds)
assert got == [2 * i for i in range(40)], got
o = applied(ds)
out["plain"] = {
    **threading_of(o),
    "autotune": o.autotune.enabled,
    "map_parallelization": o.experimental_optimization.map_parallelization,
    "inject_prefetch": o.experimental_optimization.inject_prefetch,
    "parallel_batch": o.experimental_optimization.parallel_batch,
    "deterministic": o.deterministic,
}

# 2. Options the program set are kept; the others are filled in.
user = tf.data.Options()
user.threading.private_threadpool_size = 7
user.deterministic = True
user.experimental_optimization.map_parallelization = False
ds2 = tf.data.Dataset.range(10).map(lambda x: x + 1).with_options(user)
assert [int(v) for v in ds2] == list(range(1, 11))  # deterministic=True kept: in order
o2 = applied(ds2)
out["user"] = {**threading_of(o2), "deterministic": o2.deterministic,
               "map_parallelization": o2.experimental_optimization.map_parallelization,
               "autotune": o2.autotune.enabled}

# 3. apply_default_optimizations=False: the program chose its optimizations; none are added.
no_opt = tf.data.Options()
no_opt.experimental_optimization.apply_default_optimizations = False
ds3 = tf.data.Dataset.range(3).with_options(no_opt)
list(ds3)
o3 = applied(ds3)
out["no_default_optimizations"] = {**threading_of(o3),
                                   "map_parallelization": o3.experimental_optimization.map_parallelization}

# 4. Once per dataset: three epochs, one with_options.
ds4 = tf.data.Dataset.range(5).map(lambda x: x - 1)
calls.clear()
for _ in range(3):
    assert sorted(int(v) for v in ds4) == [-1, 0, 1, 2, 3]
out["with_options_calls_over_3_epochs"] = sum(1 for c in calls if c is ds4)
out["cached_is_stable"] = hook.with_defaults(ds4) is hook.with_defaults(ds4)

# 5. tf.distribute: experimental_distribute_dataset and distribute_datasets_from_function.
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
ds5 = tf.data.Dataset.range(8).map(lambda x: x * 3).batch(4)
calls.clear()
total = sum(int(tf.reduce_sum(b)) for b in strategy.experimental_distribute_dataset(ds5))
assert total == 3 * sum(range(8))
out["distribute_dataset"] = {"applied": any(c is ds5 for c in calls),
                             **threading_of(hook.with_defaults(ds5).options())}
made = []

def dataset_fn(ctx):
    made.append(tf.data.Dataset.range(4).batch(2))
    return made[-1]

total = sum(int(tf.reduce_sum(b)) for b in strategy.distribute_datasets_from_function(dataset_fn))
assert total == 6
out["from_function"] = {"applied": any(c is made[0] for c in calls)}

# 6. Keras model.fit: the adapter's iter()/distribute path gets the options, once over 2 epochs.
try:
    import keras
except ImportError:
    out["keras"] = None
else:
    x = tf.random.uniform((32, 4))
    y = tf.random.uniform((32, 1))
    ds6 = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b)).batch(8)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    calls.clear()
    model.fit(ds6, epochs=2, verbose=0)
    out["keras"] = {"with_options_calls": sum(1 for c in calls if c is ds6),
                    **threading_of(hook.with_defaults(ds6).options())}

# 7. Inside tf.function the dataset is iterated as it is (options are not known while tracing).
ds7 = tf.data.Dataset.range(6)

@tf.function
def total_of():
    s = tf.constant(0, tf.int64)
    for v in iter(ds7):
        s += v
    return s

out["tf_function_total"] = int(total_of())

# 8. Op determinism asked for: deterministic=False is not applied.
tf.config.experimental.enable_op_determinism()
ds8 = tf.data.Dataset.range(3).map(lambda x: x)
list(ds8)
out["determinism_enabled"] = {"deterministic": applied(ds8).deterministic}
print(json.dumps(out))
"""


@needs_tf
@pytest.mark.slow
def test_options_take_effect_and_user_options_are_kept(tmp_path: Path) -> None:
    proc = run_python(tmp_path, PROGRAM, options=OPTIONS)
    got = result(proc)
    assert hook_lines(proc.stderr) == []
    assert got["plain"] == {
        "pool": 2,
        "intra": 1,
        "autotune": True,
        "map_parallelization": True,
        "inject_prefetch": True,
        "parallel_batch": True,
        "deterministic": False,
    }
    assert got["user"] == {
        "pool": 7,
        "deterministic": True,
        "map_parallelization": False,
        "intra": 1,
        "autotune": True,
    }
    assert got["no_default_optimizations"] == {"pool": 2, "intra": 1, "map_parallelization": None}
    assert got["with_options_calls_over_3_epochs"] == 1 and got["cached_is_stable"] is True
    assert got["distribute_dataset"] == {"applied": True, "pool": 2, "intra": 1}
    assert got["from_function"] == {"applied": True}
    if got["keras"] is not None:
        assert got["keras"] == {"with_options_calls": 1, "pool": 2, "intra": 1}
    assert got["tf_function_total"] == 15
    assert got["determinism_enabled"] == {"deterministic": None}


BROKEN = r"""
import json, os, sys
import tensorflow as tf
out = {}
# Whatever goes wrong inside the hook, the program's datasets still work, unchanged.
ds = tf.data.Dataset.range(5).map(lambda x: x + 1)
out["first"] = sorted(int(v) for v in ds)
out["pool"] = sys.modules["sitecustomize"].with_defaults(ds).options().threading.private_threadpool_size
if os.environ.get("BREAK"):
    tf.data.Dataset.options = lambda self: 1 / 0
    out["broken"] = [sorted(int(v) for v in tf.data.Dataset.range(3)) for _ in range(2)]
print(json.dumps(out))
"""


@needs_tf
@pytest.mark.slow
def test_bad_options_warn_once_and_leave_datasets_alone(tmp_path: Path) -> None:
    proc = run_python(tmp_path, BROKEN, options="{not json")
    got = result(proc)
    assert got["first"] == [1, 2, 3, 4, 5] and got["pool"] is None
    lines = hook_lines(proc.stderr)
    assert len(lines) == 1 and "could not install the default tf.data options" in lines[0], proc.stderr

    mixed = {"threading.private_threadpool_size": "many", "no_such.option": 1, "deterministic": False}
    proc = run_python(tmp_path, BROKEN, options=mixed, extra={"BREAK": "1"})
    got = result(proc)
    assert got["first"] == [1, 2, 3, 4, 5] and got["pool"] is None
    assert got["broken"] == [[0, 1, 2], [0, 1, 2]]
    lines = hook_lines(proc.stderr)
    assert len(lines) == 3, proc.stderr  # each problem once, however many datasets
    assert any("threading.private_threadpool_size='many' is not valid" in line for line in lines)
    assert any("no_such.option=1 is not valid" in line for line in lines)
    assert any("applying the default tf.data options failed: ZeroDivisionError" in line for line in lines)


EXEC_PROGRAM = r"""
import json, os, sys
import tensorflow as tf
planned = json.loads(os.environ["NODEAGENT_TF_DATA_OPTIONS"])
ds = tf.data.Dataset.range(8).map(lambda x: x * x)
assert sorted(int(v) for v in ds) == [i * i for i in range(8)]
o = sys.modules["sitecustomize"].with_defaults(ds).options()
print(json.dumps({"planned": planned, "pool": o.threading.private_threadpool_size,
                  "deterministic": o.deterministic}))
"""


@needs_tf
@pytest.mark.slow
def test_tune_apply_then_exec_delivers_the_options(tmp_path: Path) -> None:
    """The whole path: `tune --only tf-data --apply` writes the profile, `exec` runs the job with it."""
    env = {
        k: v for k, v in os.environ.items() if k not in launcher.RANK_VARS and k not in (ENV, "PYTHONPATH")
    }
    env.update(NODEAGENT_STATE_DIR=str(tmp_path / "state"), TF_CPP_MIN_LOG_LEVEL="3")
    nodeagent = [sys.executable, "-m", "nodeagent"]
    tune = subprocess.run(
        [*nodeagent, "tune", "--only", "tf-data", "--apply", "--profile", "tf"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert tune.returncode == 0, tune.stdout + tune.stderr
    script = tmp_path / "job.py"
    script.write_text(EXEC_PROGRAM)
    job = subprocess.run(
        [*nodeagent, "exec", "--profile", "tf", "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        check=False,
    )
    got = result(job)
    assert got["pool"] == got["planned"]["threading.private_threadpool_size"] >= 1
    assert got["deterministic"] is False
