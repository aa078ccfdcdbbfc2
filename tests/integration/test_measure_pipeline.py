"""`exec --measure` reads the job's input pipeline by structure and advises per stage.

The hook (nodeagent/hooks/_nodeagent_measure.py) classifies the stages of a tf.data pipeline from
its GraphDef; nodeagent.bench.measure says what can speed each stage up and recommends the tf-data
tuner only when one of its options can. The classification is tested on GraphDefs TensorFlow
serialised (tests/fixtures/measure, made by make_graphs.py there): each expected stage list below
is read off the pipeline make_graphs.py built, op names being TensorFlow's own. The real jobs at
the end run through `nodeagent exec --measure` with TensorFlow.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import measure
from nodeagent.hooks import _nodeagent_measure as hook
from nodeagent.render import measure as measure_text
from tests.support.measure_files import write_measurement
from tests.support.paths import FIXTURES

GRAPHS = FIXTURES / "measure"
EXE = [sys.executable, "-m", "nodeagent", "exec"]
TUNE = "`nodeagent tune --only tf-data`, then"  # the recommendation, as the diagnosis gives it
MISSING = ("prefetch", "", "", False, False)  # no prefetch at the end of the pipeline

# (kind, op, where, parallel, stateful) per stage, source first, from make_graphs.py's pipelines.
EXPECTED: dict[str, list[tuple[str, str, str, bool | None, bool]]] = {
    # from_generator(...).batch(2)
    "generator": [
        ("python-generator", "GeneratorDataset", "FlatMapDataset", False, True),
        ("batch", "BatchDatasetV2", "BatchDatasetV2", None, False),
        MISSING,
    ],
    # range(8).map(py_function).batch(2).prefetch(1)
    "py-function": [
        ("python-function", "EagerPyFunc", "MapDataset", False, True),
        ("batch", "BatchDatasetV2", "BatchDatasetV2", None, False),
        ("prefetch", "PrefetchDataset", "PrefetchDataset", None, False),
    ],
    # range(8).map(numpy_function, num_parallel_calls=2)
    "numpy-function": [("python-function", "PyFunc", "ParallelMapDatasetV2", True, True), MISSING],
    # TFRecordDataset(one file).map(parse_single_example).batch(2)
    "tfrecord-sequential": [
        ("file-read", "TFRecordDataset", "FlatMapDataset", False, False),
        ("decode", "ParseExampleV2", "MapDataset", False, False),
        ("batch", "BatchDatasetV2", "BatchDatasetV2", None, False),
        MISSING,
    ],
    # files.interleave(TFRecordDataset, AUTOTUNE).map(decode_raw, AUTOTUNE).cache().batch(2).prefetch
    "tfrecord-parallel": [
        ("file-read", "TFRecordDataset", "ParallelInterleaveDatasetV4", True, False),
        ("decode", "DecodeRaw", "ParallelMapDatasetV2", True, False),
        ("cache", "CacheDatasetV2", "CacheDatasetV2", None, False),
        ("batch", "BatchDatasetV2", "BatchDatasetV2", None, False),
        ("prefetch", "PrefetchDataset", "PrefetchDataset", None, False),
    ],
    # paths.map(decode_jpeg(read_file(p))): the read and the decode in one sequential map
    "jpeg-map": [("file-read", "ReadFile", "MapDataset", False, False), MISSING],
    # range(8).map(sqrt).batch(2)
    "sequential-map": [
        ("map", "MapDataset", "MapDataset", False, False),
        ("batch", "BatchDatasetV2", "BatchDatasetV2", None, False),
        MISSING,
    ],
    # range(8).map(random.uniform + i), options: map_parallelization off
    "stateful-map-options-off": [("map", "MapDataset", "MapDataset", False, True), MISSING],
}


def graph(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GRAPHS / f"{name}.graph.json").read_text())
    return doc


def stages(name: str) -> list[measure.Stage]:
    return [measure.Stage(**s) for s in hook.classify(graph(name))]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_stages_of_a_pipeline_are_read_from_its_graph(name: str) -> None:
    found = [(s.kind, s.op, s.where, s.parallel, s.stateful) for s in stages(name)]
    assert found == EXPECTED[name]


def test_the_details_say_how_each_stage_runs() -> None:
    read, decode, *_ = stages("tfrecord-parallel")
    assert (
        read.detail == "in a parallel interleave (ParallelInterleaveDatasetV4, num_parallel_calls=AUTOTUNE)"
    )
    assert decode.detail == "in a parallel map (ParallelMapDatasetV2, num_parallel_calls=AUTOTUNE)"
    assert (
        stages("numpy-function")[0].detail == "in a parallel map (ParallelMapDatasetV2, num_parallel_calls=2)"
    )
    assert stages("jpeg-map")[0].detail == "in a sequential map (MapDataset), then DecodeJpeg"
    assert stages("sequential-map")[-1].detail == "no prefetch after the last stage (BatchDatasetV2)"
    # The options a program sets wrap the pipeline; the last stage is still the map.
    assert stages("stateful-map-options-off")[-1].detail == "no prefetch after the last stage (MapDataset)"


def test_a_graph_without_datasets_or_with_broken_parts_gives_what_it_can() -> None:
    assert hook.classify({}) == []
    doc = graph("sequential-map")
    doc["library"] = {"function": ["not a function", {"signature": {}}]}
    kinds = [s["kind"] for s in hook.classify(doc)]
    assert kinds == ["map", "batch", "prefetch"]


def _figures(name: str, wait: float | None = 0.6, options_off: list[str] | None = None) -> measure.JobFigures:
    return measure.JobFigures(
        50.0,
        wait,
        None if wait is not None else "steps_per_execution=4: ...",
        1,
        100,
        5,
        "tf-data-loop",
        stages=stages(name),
        options_off=options_off or [],
        pipeline_unknown=None,
    )


# Which pipelines the tf-data tuner's options can speed up: a sequential map of stateless TensorFlow
# ops (map_parallelization), and nothing in Python, in an interleave's reads, or already parallel.
TUNABLE = {"tfrecord-sequential", "jpeg-map", "sequential-map"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_tf_data_is_recommended_only_where_its_options_can_help(name: str) -> None:
    found = measure.diagnosis(_figures(name))
    assert found.startswith("input-bound: waits on input 60% of the step time (> 25%)")
    assert (TUNE in found) == (name in TUNABLE), found


def test_python_stages_say_what_can_help_instead() -> None:
    (generator, *_) = _figures("generator").advice
    assert generator.problem and not generator.tunable
    assert "cannot run Python in parallel" in generator.text and "TFRecord" in generator.text
    (function, *_) = _figures("py-function").advice
    assert function.problem and not function.tunable and "tf.py_function" in function.text
    assert "tf.data's options cannot speed up the stages holding it back" in measure.diagnosis(
        _figures("py-function")
    )


def test_a_sequential_read_needs_code_and_a_sequential_decode_the_tuner() -> None:
    read, decode, *rest = _figures("tfrecord-sequential").advice
    assert (read.stage.kind, read.problem, read.tunable) == ("file-read", True, False)
    assert "num_parallel_reads" in read.text and "interleave" in read.text
    assert (decode.stage.kind, decode.problem, decode.tunable) == ("decode", True, True)
    assert not any(a.problem for a in rest)


def test_a_stateful_map_or_options_the_program_set_keep_the_tuner_out() -> None:
    (stateful, _) = _figures("stateful-map-options-off").advice
    assert stateful.problem and not stateful.tunable and "stateless" in stateful.text
    (turned_off, *_) = _figures("sequential-map", options_off=["map_parallelization"]).advice
    assert (
        turned_off.problem and not turned_off.tunable and "turned map_parallelization off" in turned_off.text
    )
    found = _figures("sequential-map", options_off=["inject_prefetch"]).advice
    assert [a.stage.kind for a in found] == ["map", "prefetch", "batch"]  # the problems first
    assert found[1].problem and ".prefetch(tf.data.AUTOTUNE)" in found[1].text


def test_python_that_sets_the_pace_keeps_the_tuner_out_even_beside_a_sequential_map() -> None:
    # tf.py_function in one map, then a sequential map of TensorFlow ops (tests/test_exec_measure's job).
    figures = _figures("sequential-map")
    figures.stages = stages("py-function")[:1] + figures.stages
    figures.python_fraction = 0.9  # Python ran 90% of the measured time
    found = measure.diagnosis(figures)
    assert "Python functions tf.data called ran 90% of the measured time" in found
    assert "Python sets the pace of the input" in found and TUNE not in found
    figures.python_fraction = 0.1  # Python is not what the input waits for: the map can be tuned
    found = measure.diagnosis(figures)
    assert TUNE in found and "Python functions tf.data called ran 10% of the measured time" in found
    figures.python_fraction = None  # not measured: no guess either way, and no tuning first
    found = measure.diagnosis(figures)
    assert "the time spent in Python was not measured" in found and TUNE not in found
    figures.python_fraction = 0.1
    figures.stages = figures.stages[1:]  # no Python stage: no share of Python to tell
    assert "Python functions" not in measure.diagnosis(figures)


def test_a_parallel_pipeline_has_no_problem_and_no_tuning() -> None:
    found = _figures("tfrecord-parallel").advice
    assert not any(a.problem or a.tunable for a in found)
    assert "every stage found already runs in parallel" in measure.diagnosis(_figures("tfrecord-parallel"))


def test_an_unread_pipeline_is_unknown_with_its_reason_and_no_guess() -> None:
    figures = measure.JobFigures(
        50.0, 0.6, None, 1, 100, 5, "keras-fit", pipeline_unknown="a tf.distribute iterator"
    )
    found = measure.diagnosis(figures)
    assert "the input pipeline could not be read (a tf.distribute iterator)" in found
    assert TUNE not in found and figures.advice == []


def test_the_summary_lists_the_stages_problems_first_when_input_bound() -> None:
    figures = _figures("tfrecord-sequential")
    lines = measure_text.lines(measure.MeasuredRun(0, 10.0, 5.0, 2, figures))
    stage_lines = [line for line in lines if line.startswith("nodeagent measure: input stage: ")]
    assert len(stage_lines) == 4
    assert stage_lines[0].startswith("nodeagent measure: input stage: file reads (TFRecordDataset,")
    assert stage_lines[1].startswith("nodeagent measure: input stage: decoding (ParseExampleV2,")
    assert lines.index(stage_lines[0]) == lines.index(f"nodeagent measure: {measure.diagnosis(figures)}") + 1
    # Unknown wait: the stages still tell what could be tuned; compute-bound: no stage lines.
    unknown = measure_text.lines(measure.MeasuredRun(0, 10.0, 5.0, 2, _figures("generator", wait=None)))
    assert sum("input stage: Python generator" in line for line in unknown) == 1
    bound = measure_text.lines(measure.MeasuredRun(0, 10.0, 5.0, 2, _figures("generator", wait=0.1)))
    assert not any("input stage:" in line for line in bound)


def test_a_stage_from_a_file_is_one_line_whatever_it_holds() -> None:
    odd = measure.Stage(
        kind="map",
        op="Map\nDataset\x1b[31m",
        where="MapDataset",
        detail="in a sequential map",
        parallel=False,
        stateful=False,
    )
    figures = _figures("sequential-map")
    figures.stages = [odd]
    lines = measure_text.lines(measure.MeasuredRun(0, 10.0, 5.0, 2, figures))
    (line,) = [line for line in lines if "input stage:" in line]
    assert "\n" not in line and "\x1b" not in line and "\\x1b" in line


def _file(folder: Path, pid: int, pipeline: Any, python_s: float | None = None) -> None:
    """An input-bound process (it waited 6 s of 10 s) with its pipeline and Python time."""
    write_measurement(
        folder, pid, input_wait_s=6.0, input_wait_fraction=0.6, pipeline=pipeline, python_s=python_s
    )


def test_read_takes_the_stages_from_the_measurement_files(tmp_path: Path) -> None:
    described = {"stages": hook.classify(graph("generator")), "options_off": [], "unknown": None}
    _file(tmp_path, 1, {"stages": [], "options_off": [], "unknown": "a tf.distribute iterator"})
    _file(tmp_path, 2, described)
    _file(tmp_path, 3, {"stages": [{"kind": "teleport", "op": "X"}], "options_off": [], "unknown": None})
    figures = measure.read(tmp_path)
    assert figures is not None and figures.pipeline_unknown is None
    assert [s.kind for s in figures.stages] == ["python-generator", "batch", "prefetch"]
    (skipped,) = figures.skipped
    assert skipped.startswith(f"{tmp_path / '3.json'}: pipeline.stages.0.kind: Input should be")
    assert figures.stages[0].op == "GeneratorDataset"
    assert figures.advice[0].stage.kind == "python-generator" and figures.advice[0].tunable is False


def test_the_time_in_python_is_a_share_of_the_measured_time_of_all_processes(tmp_path: Path) -> None:
    _file(tmp_path, 1, None, python_s=3.0)  # each process measured 10 s
    _file(tmp_path, 2, None, python_s=1.0)
    figures = measure.read(tmp_path)
    assert figures is not None and figures.python_fraction == pytest.approx(4.0 / 20.0)
    _file(tmp_path, 3, None)  # one process did not time it: the job's share is unknown
    figures = measure.read(tmp_path)
    assert figures is not None and figures.python_fraction is None


def test_read_without_a_described_pipeline_says_why(tmp_path: Path) -> None:
    _file(tmp_path, 1, {"stages": [], "options_off": [], "unknown": "a tf.distribute iterator"})
    _file(tmp_path, 2, {"stages": [], "options_off": [], "unknown": "a tf.distribute iterator"})
    figures = measure.read(tmp_path)
    assert figures is not None and figures.stages == []
    assert figures.pipeline_unknown == "a tf.distribute iterator"
    (tmp_path / "2.json").unlink()
    _file(tmp_path, 1, None)
    figures = measure.read(tmp_path)
    assert figures is not None and figures.pipeline_unknown == "not described"


# -- real jobs -----------------------------------------------------------------------------------

needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="tensorflow is not installed in this environment (pip install tensorflow-cpu)",
)

# A custom loop over one of four input pipelines, with a step that does next to nothing, so the
# job waits on its input: (1) a Python generator, (2) a map calling tf.py_function, (3) a TFRecord
# file written here and parsed in a sequential map, (4) a sequential map of TensorFlow ops.
JOB = r"""
import sys
import numpy as np
import tensorflow as tf

kind, folder = sys.argv[1], sys.argv[2]
N, WIDTH = 320, 64

def generator():
    for i in range(N):
        yield np.full([WIDTH], i, np.float32)

def heavy(x):
    for _ in range(20):
        x = tf.tanh(x) + 0.1
    return x

if kind == "generator":
    ds = tf.data.Dataset.from_generator(generator, output_signature=tf.TensorSpec([WIDTH], tf.float32))
elif kind == "py-function":
    ds = tf.data.Dataset.range(N).map(
        lambda i: tf.py_function(lambda j: np.full([WIDTH], j.numpy(), np.float32), [i], tf.float32))
elif kind == "tfrecord":
    path = folder + "/data.tfrecord"
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(N):
            feature = tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)] * WIDTH))
            example = tf.train.Example(features=tf.train.Features(feature={"x": feature}))
            writer.write(example.SerializeToString())
    spec = {"x": tf.io.FixedLenFeature([WIDTH], tf.float32)}
    ds = tf.data.TFRecordDataset(path).map(lambda r: heavy(tf.io.parse_single_example(r, spec)["x"]))
else:
    ds = tf.data.Dataset.range(N).map(lambda i: heavy(tf.fill([WIDTH], tf.cast(i, tf.float32))))
total = 0.0
for batch in ds.batch(8):
    total += float(batch.numpy().sum()) * 0.0
print("done", total)
"""

# What each job's pipeline is, from the code above: (op, where) of each stage, and whether the
# tf-data tuner's options can speed one of them up.
JOBS: dict[str, tuple[list[tuple[str, str]], bool]] = {
    "generator": (
        [("GeneratorDataset", "FlatMapDataset"), ("BatchDatasetV2", "BatchDatasetV2"), ("", "")],
        False,
    ),
    "py-function": ([("EagerPyFunc", "MapDataset"), ("BatchDatasetV2", "BatchDatasetV2"), ("", "")], False),
    "tfrecord": (
        [
            ("TFRecordDataset", "FlatMapDataset"),
            ("ParseExampleV2", "MapDataset"),
            ("BatchDatasetV2", "BatchDatasetV2"),
            ("", ""),
        ],
        True,
    ),
    "map": ([("MapDataset", "MapDataset"), ("BatchDatasetV2", "BatchDatasetV2"), ("", "")], True),
}


@pytest.mark.slow
@needs_tf
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_exec_measure_names_the_stages_and_recommends_tf_data_only_where_it_helps(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("NODEAGENT_")}
    env.pop("PYTHONPATH", None)
    env.update(NODEAGENT_STATE_DIR=str(tmp_path / "state"), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [*EXE, "--measure", "--", sys.executable, str(tmp_path / "job.py"), kind, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0 and "done 0.0" in proc.stdout, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("nodeagent measure:")]
    diagnosis = next(line for line in lines if "input-bound" in line)  # a step that does nothing waits
    expected, tunable = JOBS[kind]
    assert (TUNE in diagnosis) == tunable, lines
    stage_lines = [line for line in lines if line.startswith("nodeagent measure: input stage: ")]
    assert len(stage_lines) == len(expected), lines
    for op, where in expected:
        named = f"({op}" if op else "no prefetch after the last stage"
        assert any(named in line and where in line for line in stage_lines), (op, where, lines)


# A loop over a map calling tf.py_function that sleeps 10 ms per element then a cheap step; the job
# times its own Python calls and its own next() calls, as the hook does, and prints them.
TIMED_JOB = r"""
import json, time
import numpy as np
import tensorflow as tf

clock = time.perf_counter
calls = []

def python(i):
    began = clock()
    time.sleep(0.010)
    out = np.full([4], i.numpy(), np.float32)
    calls.append((began, clock() - began))
    return out

ds = tf.data.Dataset.range(160).map(lambda i: tf.py_function(python, [i], tf.float32)).batch(4)
starts = []
iterator = iter(ds)
while True:
    starts.append(clock())
    try:
        batch = next(iterator)
    except StopIteration:
        break
    float(batch.numpy().sum())
print(json.dumps({"starts": starts, "calls": calls}))
"""


@pytest.mark.slow
@needs_tf
def test_the_time_in_python_is_the_time_the_jobs_python_functions_took(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(TIMED_JOB)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("NODEAGENT_")}
    env.pop("PYTHONPATH", None)
    env.update(TF_CPP_MIN_LOG_LEVEL="3")
    out = tmp_path / "measured"
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "job.py")],
        capture_output=True,
        text=True,
        env=measure.hook_env(env, out),
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = measure.read(out)
    assert figures is not None and figures.python_fraction is not None
    first, count = figures.warmup_steps, figures.measured_steps
    began, ended = job["starts"][first], job["starts"][first + count]
    spent = sum(d for start, d in job["calls"] if began <= start < ended)
    # The hook's clock also covers TensorFlow's conversion of the argument and the result around the
    # job's function, a little more than the job's own time (the 10 ms sleep keeps that small even on
    # a loaded machine); its span of steps is read by its own clock, which on a loaded machine can
    # run a little longer than the job's (a fresh-clone CI run measured 0.955 against 0.968).
    own = spent / (ended - began)
    assert own - 0.04 <= figures.python_fraction <= own + 0.08, (figures.python_fraction, own)
    assert [s.kind for s in figures.stages] == ["python-function", "batch", "prefetch"]
