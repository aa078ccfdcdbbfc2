"""nodeagent's measuring hook: a TensorFlow job's training steps per second and the share of its step
time spent waiting for input, with no change to the job.

`sitecustomize` loads this file (from its own folder, by path) only when NODEAGENT_MEASURE_DIR is set,
and only once the job imports TensorFlow or a Keras trainer: a job that never does pays nothing more
than the tf.data hook's one finder.

What is wrapped, right after the module that defines it is imported:
- custom loops: `__next__` and `get_next` of tf.data's eager iterator (OwnedIterator,
  tensorflow/python/data/ops/iterator_ops.py) and of tf.distribute's (DistributedIteratorBase,
  tensorflow/python/distribute/input_lib.py). Each eager call is a step: its duration is the wait,
  and a step lasts from one next() to the next (the exhausting call, StopIteration, ends the last
  one). Calls made while a tf.function is traced are not steps (the graph pulls its own batches,
  unseen). Every batch a Python loop pulls counts, so a loop that also pulls validation batches
  eagerly counts those as steps too.
- Keras 3 `fit` (keras/src/backend/tensorflow/trainer.py): fit calls `self.train_function(iterator)`
  once per step and the batch is pulled inside a tf.function, invisible from Python. The wrapped
  `make_train_function` wraps what it made: each call first pulls the batch eagerly (timed: the
  wait) and then runs Keras' own compiled step on it, handing it over as a one-batch iterable, as
  Keras' `train_on_batch` does. The model computes exactly what it did; the step function is traced
  for eager tensors instead of an iterator, so a new batch shape (a last partial batch) traces it once
  more. Only a plain tf.data iterator with steps_per_execution=1 is measured so; otherwise (several
  steps per call, a tf.distribute iterator of per-replica values, a Keras other than 3) the calls
  are still counted and the input wait is reported unknown, with the reason.
- Python called by tf.data (a from_generator generator, tf.py_function, tf.numpy_function): the
  __call__ of TensorFlow's FuncRegistry (tensorflow/python/ops/script_ops.py), timed only.
- tf_keras (Keras 2: tf_keras/src/engine/training.py) pulls the batch inside its compiled
  train_function, which cannot be fed anything but an iterator without retracing each step: its
  calls are counted, steps_per_execution steps each, and the input wait is unknown.

Warm-up: the first max(5, 5% of all) steps are not measured. The first step traces the step
function (and compiles it with XLA), the next ones fill tf.data's buffers while its autotuner settles
on parallelism (https://www.tensorflow.org/guide/data_performance_analysis); 5% keeps a long job's
ramp-up out too. Measured: the complete steps after the warm-up; input wait share = the time inside
next() / the time from the first measured step's start to the last one's end. What the job does
between two steps (callbacks, validation, checkpoints) belongs to the step before: steps/s is the
pace of the whole job, not of the compiled step alone.

At exit (atexit: a job killed by a signal writes nothing) one JSON file, $NODEAGENT_MEASURE_DIR/<pid>.json,
written atomically (temporary file + rename): {"pid", "source": "keras-fit" | "tf-data-loop",
"steps", "warmup_steps", "measured_steps", "seconds", "steps_per_s", "input_wait_s",
"input_wait_fraction", "input_wait_unknown", "python_s", "pipeline"}; none when no step was seen.
"python_s" is the time the measured steps spent in Python functions tf.data called (a generator,
tf.py_function), summed over threads (`_wrap_python_call`); None where that is not timed. "pipeline"
describes the input pipeline most batches came from, by structure (`describe`, `classify`): its
stages ({"kind", "op", "where", "detail", "parallel", "stateful"}), the tf-data tuner's options the
program turned off itself, and "unknown" (why, with no stages) where its graph cannot be read: a
tf.distribute iterator, batches Keras does not take from a tf.data iterator, an error. It is read
once per dataset, after the first batch is pulled from it (outside the timed wait). Keras fit's figures win
over the loop's when both are there (Keras' own eager next() calls, such as the one that builds the
model, are not training steps). With NODEAGENT_MEASURE_EVERY=SECONDS, one line on stderr that often,
over the steps since the previous line, printed by the training thread as a step starts.

Nothing here may break the job: any error warns once on stderr and the job runs on unmeasured.
"""

from __future__ import annotations

import math
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

DIR_ENV = "NODEAGENT_MEASURE_DIR"
EVERY_ENV = "NODEAGENT_MEASURE_EVERY"
# The same line as nodeagent.bench.run.INPUT_BOUND (the TF profiler's "highly input-bound" at 20%,
# with a margin for a host-side timer); this file cannot import nodeagent, a test holds them equal.
INPUT_BOUND = 0.25
WARMUP_MIN_STEPS = 5
WARMUP_SHARE = 0.05
KERAS_FIT = "keras-fit"
TF_DATA_LOOP = "tf-data-loop"
_MARK = "_nodeagent_measured"

_clock = time.perf_counter
_warn_hook: list[Callable[..., None]] = []


def _warn(what: str, error: BaseException | None = None) -> None:
    """One line on stderr per kind of problem, through the tf.data hook's warning when there is one."""
    if _warn_hook:
        _warn_hook[0](what, error, "the job runs on without it", "measure")
        return
    detail = f": {type(error).__name__}: {error}" if error is not None else ""
    try:  # noqa: SIM105
        sys.stderr.write(f"nodeagent measure: {what}{detail}; the job runs on without it\n")
    except Exception:
        pass


# -- time in Python called by tf.data -------------------------------------------------------------
#
# Every Python function TensorFlow's runtime calls (the generator of Dataset.from_generator, the
# functions of tf.py_function and tf.numpy_function) goes through one object, the FuncRegistry of
# tensorflow/python/ops/script_ops.py, whose __call__ is timed: the seconds spent there, added up
# over all threads. Only a clock read before and after each call; what the function does is untouched.

_python_calls: list[Any] = []  # [the lock of the running total] once the registry is timed
_python_total = [0.0]


def _python_s() -> float:
    return _python_total[0]


def _wrap_python_call(original: Callable[..., Any]) -> Any:
    import functools

    lock = _python_calls[0]

    @functools.wraps(original)
    def timed_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = _clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent = _clock() - start
            with lock:  # calls from several tf.data threads add up
                _python_total[0] += spent

    return timed_call


# -- the record of steps -------------------------------------------------------------------------


class Steps:
    """The steps of one source: when each began, how long it waited, how many steps it held.

    A record's end is the next record's start; the last one's is `closed_at` when that came after
    its start (the exhausting next(), or the end of a Keras call), else the last record is open and
    not measured. A wait of -1 is unknown (the reason is kept in `reasons`).
    """

    def __init__(self, source: str, every_s: float | None) -> None:
        from array import array

        self.source = source
        self.starts = array("d")
        self.waits = array("d")
        self.counts = array("q")
        self.python = array("d")  # _python_s() as each record began
        self.python_closed = 0.0
        self.total = 0
        self.closed_at: float | None = None
        self.reasons: list[str] = []
        self.every_s = every_s
        # The periodic line: totals of the records that ended, and where the current window began.
        self.done_steps = 0
        self.done_wait = 0.0
        self.done_unknown = 0
        self.mark: tuple[float, int, float, int] | None = None  # (time, done_steps, done_wait, done_unknown)

    def step(self, start: float, wait: float | None, count: int = 1, reason: str | None = None) -> None:
        if self.starts:
            self._ended(len(self.starts) - 1)
        self.starts.append(start)
        self.waits.append(-1.0 if wait is None else wait)
        self.counts.append(count)
        self.python.append(_python_s())
        self.total += count
        if reason is not None and reason not in self.reasons:
            self.reasons.append(reason)
        if self.every_s is not None:
            self._maybe_print(start)

    def close(self, at: float) -> None:
        self.closed_at = at
        self.python_closed = _python_s()

    def _ended(self, i: int) -> None:
        self.done_steps += self.counts[i]
        if self.waits[i] < 0:
            self.done_unknown += 1
        else:
            self.done_wait += self.waits[i]

    def _maybe_print(self, now: float) -> None:
        if self.mark is None:
            if self.total >= WARMUP_MIN_STEPS:
                self.mark = (now, self.done_steps, self.done_wait, self.done_unknown)
            return
        began, steps, waited, unknown = self.mark
        seconds = now - began
        if self.every_s is None or seconds < self.every_s or seconds <= 0:
            return
        self.mark = (now, self.done_steps, self.done_wait, self.done_unknown)
        rate = (self.done_steps - steps) / seconds
        if self.done_unknown > unknown:
            wait = f"input wait unknown ({self.reasons[-1] if self.reasons else 'not measured'})"
        else:
            share = (self.done_wait - waited) / seconds
            bound = "input-bound" if share > INPUT_BOUND else "compute-bound"
            wait = f"input wait {share:.0%} ({bound})"
        try:  # noqa: SIM105
            sys.stderr.write(f"nodeagent measure: {rate:.1f} steps/s, {wait}\n")
        except Exception:  # a closed stderr must not break the job
            pass

    def _last_complete(self) -> int:
        """The index of the last record whose end is known."""
        last = len(self.starts) - 1
        if self.closed_at is not None and last >= 0 and self.closed_at >= self.starts[last]:
            return last
        return last - 1

    def _end(self, i: int) -> float:
        return self.starts[i + 1] if i + 1 < len(self.starts) else float(self.closed_at or 0.0)

    def summary(self, pid: int) -> dict[str, Any]:
        warmup = max(WARMUP_MIN_STEPS, math.ceil(self.total * WARMUP_SHARE))
        first, skipped = 0, 0
        while first < len(self.counts) and skipped < warmup:
            skipped += self.counts[first]
            first += 1
        last = self._last_complete()
        doc: dict[str, Any] = {
            "pid": pid,
            "source": self.source,
            "steps": self.total,
            "warmup_steps": skipped,
            "measured_steps": 0,
            "seconds": 0.0,
            "steps_per_s": None,
            "input_wait_s": None,
            "input_wait_fraction": None,
            "input_wait_unknown": None,
            "python_s": None,
        }
        if first > last:
            doc["input_wait_unknown"] = (
                f"no complete step after the warm-up (the first max({WARMUP_MIN_STEPS}, "
                f"{WARMUP_SHARE:.0%}) steps; {self.total} steps seen)"
            )
            return doc
        seconds = self._end(last) - self.starts[first]
        steps = sum(self.counts[first : last + 1])
        waits = self.waits[first : last + 1]
        doc.update(measured_steps=steps, seconds=seconds)
        if _python_calls:
            after = self.python[last + 1] if last + 1 < len(self.python) else self.python_closed
            doc["python_s"] = max(0.0, after - self.python[first])
        doc["steps_per_s"] = steps / seconds if seconds > 0 else None
        if any(w < 0 for w in waits):
            doc["input_wait_unknown"] = "; ".join(self.reasons) or "not measured"
        elif seconds > 0:
            doc["input_wait_s"] = sum(waits)
            doc["input_wait_fraction"] = doc["input_wait_s"] / seconds
        else:
            doc["input_wait_unknown"] = "the measured steps took no measurable time"
        return doc


_state: dict[str, Any] = {}


def _steps(source: str) -> Steps:
    """The record of `source`, created on first use (with the exit writer registered once)."""
    found = _state.get(source)
    if found is None:
        found = _state[source] = Steps(source, _every())
        if not _state.get("atexit"):
            import atexit

            _state["atexit"] = True
            atexit.register(write_report)
    assert isinstance(found, Steps)
    return found


def _every() -> float | None:
    raw = os.environ.get(EVERY_ENV, "").strip()
    if not raw:
        return None
    try:
        every = float(raw)
    except ValueError:
        every = -1.0
    if not every > 0 or every == float("inf"):
        _warn(f"{EVERY_ENV}={raw!r} is not a number of seconds above 0: no progress line")
        return None
    return every


def report() -> dict[str, Any] | None:
    """This process's figures (Keras fit's when it ran steps, else the loop's); None without steps."""
    for source in (KERAS_FIT, TF_DATA_LOOP):
        steps = _state.get(source)
        if isinstance(steps, Steps) and steps.total > 0:
            doc = steps.summary(os.getpid())
            doc["pipeline"] = _pipelines.main()
            return doc
    return None


def write_report() -> None:
    """$NODEAGENT_MEASURE_DIR/<pid>.json, replaced whole (a reader never sees half of it)."""
    try:
        doc = report()
        folder = os.environ.get(DIR_ENV, "")
        if doc is None or not folder:
            return
        import json

        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{os.getpid()}.json")
        tmp = os.path.join(folder, f".{os.getpid()}.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except Exception as e:
        _warn(f"could not write the measurement to {os.environ.get(DIR_ENV)!r}", e)


# -- the input pipeline, by structure ------------------------------------------------------------
#
# The dataset behind a measured iterator is read as TensorFlow serialises it (the GraphDef of
# `dataset._as_serialized_graph()`, as protobuf's JSON mapping): its dataset nodes in pipeline order
# (source first) and, in its function library, the ops each map, filter or interleave function runs.
# Op names are TensorFlow's registered op types (checked against TensorFlow 2.21):
# - `Dataset.from_generator` is a FlatMapDataset whose function makes a GeneratorDataset, whose
#   init/next/finalize functions call Python (PyFunc);
# - `tf.py_function` is EagerPyFunc, `tf.numpy_function` PyFunc (PyFuncStateless when stateless);
# - file readers are dataset ops (TFRecordDataset, ...) inside the function of a FlatMapDataset
#   (one file at a time), an InterleaveDataset (sequential) or a Parallel/LegacyParallel interleave,
#   or ReadFile inside a map;
# - `map` is MapDataset (sequential) or ParallelMapDatasetV2, whose last input is num_parallel_calls
#   (-1: AUTOTUNE).

PY_FUNCS = ("EagerPyFunc", "PyFunc", "PyFuncStateless")
GENERATOR = "GeneratorDataset"
READERS = (
    "TFRecordDataset",
    "TFRecordDatasetV2",
    "TextLineDataset",
    "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2",
    "ReadFile",
)
DECODERS = (
    "DecodeJpeg",
    "DecodeAndCropJpeg",
    "DecodePng",
    "DecodeGif",
    "DecodeBmp",
    "DecodeImage",
    "DecodeWebP",
    "DecodeRaw",
    "DecodePaddedRaw",
    "DecodeCSV",
    "DecodeJSONExample",
    "DecodeCompressed",
    "DecodeProtoV2",
    "DecodeWav",
    "ParseExample",
    "ParseExampleV2",
    "ParseSingleExample",
    "ParseSequenceExample",
    "ParseSequenceExampleV2",
    "ParseSingleSequenceExample",
    "ParseTensor",
)
# Ops whose state keeps tf.data's map_parallelization from running a map in parallel (it only
# parallelises stateless functions): Python, and the stateful random ops (tf.random.uniform, ...).
STATEFUL = (
    *PY_FUNCS,
    "RandomUniform",
    "RandomUniformInt",
    "RandomStandardNormal",
    "TruncatedNormal",
    "RandomShuffle",
    "RandomGamma",
    "RandomPoisson",
    "RandomPoissonV2",
    "Multinomial",
)
SEQUENTIAL_MAPS = ("MapDataset",)
PARALLEL_MAPS = ("ParallelMapDataset", "ParallelMapDatasetV2", "MapAndBatchDataset")
SEQUENTIAL_INTERLEAVES = ("FlatMapDataset", "InterleaveDataset")
PARALLEL_INTERLEAVES = (
    "ParallelInterleaveDataset",
    "ParallelInterleaveDatasetV2",
    "ParallelInterleaveDatasetV3",
    "ParallelInterleaveDatasetV4",
    "LegacyParallelInterleaveDatasetV2",
)
BATCHES = (
    "BatchDataset",
    "BatchDatasetV2",
    "PaddedBatchDataset",
    "PaddedBatchDatasetV2",
    "ParallelBatchDataset",
)
PREFETCHES = ("PrefetchDataset",)
CACHES = ("CacheDataset", "CacheDatasetV2")
# Wrappers that end a pipeline without being a stage of it (options, tf.data's own model).
_TRAILING = (
    "OptionsDataset",
    "ModelDataset",
    "OptimizeDataset",
    "OptimizeDatasetV2",
    "AssertCardinalityDataset",
)
AUTOTUNE = -1
# Tensors a pipeline holds (from_tensor_slices of an in-memory array, captured tables) are
# serialised with its graph; above this many bytes the graph is not read, to keep the hook cheap.
GRAPH_CAP_BYTES = 16 << 20
# The tf-data tuner's options a program may have set itself (the exec hook never overrides those).
WATCHED_OPTIONS = ("map_parallelization", "inject_prefetch")


def _bare(name: str) -> str:
    """A node input without its output index or control mark: "^a", "a:0" -> "a"."""
    return name.lstrip("^").split(":", 1)[0]


def _called(attrs: dict[str, Any]) -> list[str]:
    """The functions a node's attributes name (f, init_func, next_func, predicate, lists of them)."""
    names: list[str] = []
    for value in attrs.values():
        if not isinstance(value, dict):
            continue
        func = value.get("func")
        if isinstance(func, dict) and isinstance(func.get("name"), str):
            names.append(func["name"])
        listed = value.get("list")
        if isinstance(listed, dict):
            names += [f["name"] for f in listed.get("func", []) if isinstance(f, dict) and "name" in f]
    return names


def _function_ops(library: dict[str, list[dict[str, Any]]], roots: list[str]) -> list[str]:
    """Every op type the functions `roots` run, through the functions they call in turn."""
    ops: list[str] = []
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in library.get(name, []):
            op = node.get("op", "")
            if op and op not in ops:
                ops.append(op)
            todo += _called(node.get("attr", {}))
    return ops


def _int_const(node: dict[str, Any] | None) -> int | None:
    """The value of a scalar integer Const node (protobuf's JSON gives int64 as a string)."""
    if node is None or node.get("op") != "Const":
        return None
    tensor = node.get("attr", {}).get("value", {}).get("tensor", {})
    for key in ("int64Val", "intVal"):
        values = tensor.get(key)
        if isinstance(values, list) and len(values) == 1:
            try:
                return int(values[0])
            except (TypeError, ValueError):
                return None
    return None


def _calls(node: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> str:
    """ "num_parallel_calls=AUTOTUNE" (or =N) of a parallel map or interleave, when its graph says."""
    inputs = [_bare(i) for i in node.get("input", []) if not i.startswith("^")]
    position = -2 if node.get("op") == "MapAndBatchDataset" else -1
    if node.get("op") == "LegacyParallelInterleaveDatasetV2" or len(inputs) < 2:
        return ""
    value = _int_const(nodes.get(inputs[position]))
    if value is None:
        return ""
    return "num_parallel_calls=" + ("AUTOTUNE" if value == AUTOTUNE else str(value))


def _where(op: str, calls: str) -> tuple[str, bool | None]:
    """How a stage runs, said by the dataset op that holds it, and whether that runs in parallel."""
    if op in SEQUENTIAL_MAPS:
        return f"in a sequential map ({op})", False
    if op in PARALLEL_MAPS:
        return f"in a parallel map ({op}{', ' + calls if calls else ''})", True
    if op in SEQUENTIAL_INTERLEAVES:
        return f"one input at a time ({op})", False
    if op in PARALLEL_INTERLEAVES:
        return f"in a parallel interleave ({op}{', ' + calls if calls else ''})", True
    return f"in {op}", None


def _stage(
    kind: str, op: str, where: str, detail: str, parallel: bool | None, stateful: bool
) -> dict[str, Any]:
    return {
        "kind": kind,
        "op": op,
        "where": where,
        "detail": detail,
        "parallel": parallel,
        "stateful": stateful,
    }


def _node_stage(
    node: dict[str, Any], ops: list[str], nodes: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The stage one dataset node is, by the ops it and its functions run; None for the plumbing
    (range, shuffle, repeat, take, options...)."""
    op = node.get("op", "")
    detail, parallel = _where(op, _calls(node, nodes))
    stateful = any(o in STATEFUL for o in ops)
    if GENERATOR in ops or op == GENERATOR:
        return _stage(
            "python-generator",
            GENERATOR,
            op,
            "Dataset.from_generator: Python makes each element",
            False,
            True,
        )
    python = [o for o in ops if o in PY_FUNCS]
    if python:
        return _stage("python-function", python[0], op, detail, parallel, True)
    reads = [o for o in ops if o in READERS] or ([op] if op in READERS else [])
    if reads:
        decodes = [o for o in ops if o in DECODERS]
        also = f", then {', '.join(decodes)}" if decodes else ""
        # A reader dataset at the top level reads its files in the order given, one at a time.
        return _stage(
            "file-read", reads[0], op, detail + also, False if op in READERS else parallel, stateful
        )
    decodes = [o for o in ops if o in DECODERS]
    if decodes:
        return _stage("decode", decodes[0], op, detail, parallel, stateful)
    if op in SEQUENTIAL_MAPS or op in PARALLEL_MAPS:
        return _stage("map", op, op, detail, parallel, stateful)
    if op in BATCHES:
        return _stage("batch", op, op, "", None, False)
    if op in PREFETCHES:
        return _stage("prefetch", op, op, "", None, False)
    if op in CACHES:
        return _stage("cache", op, op, "", None, False)
    return None


def classify(graph: dict[str, Any]) -> list[dict[str, Any]]:
    """The stages of a pipeline from its GraphDef (protobuf's JSON mapping), source first.

    Each stage: kind (python-generator, python-function, file-read, decode, map, batch, prefetch,
    cache), op (the TensorFlow op that makes it that kind), where (the dataset op that runs it),
    detail (how it runs), parallel (True, False, or None where that does not apply) and stateful
    (a stateful op keeps tf.data from parallelising its map). A pipeline whose last stage is no
    prefetch gets a prefetch stage with op "" saying so.
    """
    library = {
        f.get("signature", {}).get("name", ""): f.get("nodeDef", [])
        for f in graph.get("library", {}).get("function", [])
        if isinstance(f, dict)
    }
    nodes = {n.get("name", ""): n for n in graph.get("node", []) if isinstance(n, dict)}
    stages: list[dict[str, Any]] = []
    last = ""
    for node in graph.get("node", []):
        op = node.get("op", "")
        if not op.endswith("Dataset") and not op[:-2].endswith("Dataset") and op not in READERS:
            continue
        if op not in _TRAILING:
            last = op
        ops = _function_ops(library, _called(node.get("attr", {})))
        found = _node_stage(node, ops, nodes)
        if found is not None:
            stages.append(found)
    if last and last not in PREFETCHES:
        stages.append(_stage("prefetch", "", "", f"no prefetch after the last stage ({last})", False, False))
    return stages


def _graph_bytes(dataset: Any) -> int:
    """The bytes of tensors the pipeline holds (from_tensor_slices, from_tensors, captured by its
    functions): what serialising its graph would copy."""
    total = 0
    todo, seen = [dataset], set()
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        tensors = list(getattr(ds, "_tensors", []) or [])
        for wrapper in ds._functions():
            tensors += list(getattr(getattr(wrapper, "function", None), "captured_inputs", []) or [])
        for t in tensors:
            count = t.shape.num_elements() if getattr(t, "shape", None) is not None else None
            size = getattr(getattr(t, "dtype", None), "size", 0) or 0
            total += (count or 0) * size
        todo += list(ds._inputs())
    return total


def _options_off(dataset: Any) -> list[str]:
    """The tf-data tuner's options this program turned off itself (tf.data.Options reads None for
    "not set"); the exec hook keeps them off, so tuning cannot change those."""
    options = dataset.options()
    if options.experimental_optimization.apply_default_optimizations is False:
        return list(WATCHED_OPTIONS)
    return [name for name in WATCHED_OPTIONS if getattr(options.experimental_optimization, name) is False]


def describe(dataset: Any) -> dict[str, Any]:
    """The pipeline of `dataset`: {"stages", "options_off", "unknown"}; unknown (the reason, no
    stages) when its graph cannot be read."""
    import importlib

    doc: dict[str, Any] = {"stages": [], "options_off": [], "unknown": None}
    held = _graph_bytes(dataset)
    if held > GRAPH_CAP_BYTES:
        doc["unknown"] = (
            f"the pipeline holds {held / (1 << 20):.0f} MiB of tensors (from_tensor_slices or captured), "
            f"more than the {GRAPH_CAP_BYTES >> 20} MiB the hook copies to read its graph"
        )
        return doc
    options = importlib.import_module("tensorflow.python.data.ops.options")
    graph_pb2 = importlib.import_module("tensorflow.core.framework.graph_pb2")
    json_format = importlib.import_module("google.protobuf.json_format")
    # IGNORE: a pipeline with Python in it (from_generator, py_function) serialises without a warning.
    raw = dataset._as_serialized_graph(external_state_policy=options.ExternalStatePolicy.IGNORE)
    graph = json_format.MessageToDict(graph_pb2.GraphDef.FromString(raw.numpy()))
    doc["stages"] = classify(graph)
    doc["options_off"] = _options_off(dataset)
    return doc


class _Pipeline:
    """One dataset seen behind a measured iterator: its description and the batches pulled from it."""

    def __init__(self, dataset: Any, doc: dict[str, Any]) -> None:
        import weakref

        try:
            self.ref: Callable[[], Any] = weakref.ref(dataset)
        except TypeError:
            self.ref = lambda: None
        self.doc = doc
        self.pulls = 0


class _Pipelines:
    """The pipelines behind the measured iterators, each described once (on the first batch pulled
    from it; a new epoch's iterator over the same dataset reuses it)."""

    def __init__(self) -> None:
        self.by_id: dict[int, _Pipeline] = {}
        self.gone: list[_Pipeline] = []

    def pulled(self, iterator: Any, plain: type | None) -> None:
        dataset = (
            getattr(iterator, "_dataset", None) if plain is not None and isinstance(iterator, plain) else None
        )
        key = id(dataset) if dataset is not None else id(type(iterator))
        found = self.by_id.get(key)
        if found is None or (dataset is not None and found.ref() is not dataset):
            if found is not None:
                self.gone.append(found)
            found = self.by_id[key] = _Pipeline(dataset, self._describe(iterator, dataset))
        found.pulls += 1

    @staticmethod
    def _describe(iterator: Any, dataset: Any) -> dict[str, Any]:
        if dataset is None:
            why = f"the batches come from a {type(iterator).__name__}, whose dataset the hook does not read"
            if "Distributed" in type(iterator).__name__:
                why = "a tf.distribute iterator: its per-replica datasets are not read"
            return {"stages": [], "options_off": [], "unknown": why}
        try:
            return describe(dataset)
        except Exception as e:
            return {
                "stages": [],
                "options_off": [],
                "unknown": f"its graph could not be read: {type(e).__name__}: {e}",
            }

    def main(self) -> dict[str, Any] | None:
        """The pipeline most batches came from (the training one, beside a validation one)."""
        every = [*self.gone, *self.by_id.values()]
        return max(every, key=lambda p: p.pulls).doc if every else None


_pipelines = _Pipelines()
_plain: list[type] = []  # tf.data's OwnedIterator, once TensorFlow is imported


def _pulled(iterator: Any) -> None:
    try:
        _pipelines.pulled(iterator, _plain[0] if _plain else None)
    except Exception as e:
        _warn("could not describe the input pipeline", e)


# -- tf.data and tf.distribute iterators (custom loops) ------------------------------------------


class _Busy:
    """Per-thread depth of measured calls: a next() inside a measured one (DistributedIterator's
    __next__ calls its get_next; the Keras wrapper's own pull) is not another step."""

    def __init__(self) -> None:
        import threading

        self.local = threading.local()

    def enter(self) -> bool:
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        return depth == 0

    def leave(self) -> None:
        self.local.depth -= 1


_busy: list[_Busy] = []


def _wrap_next(
    original: Callable[..., Any], eager: Callable[[], bool], ended: tuple[type[BaseException], ...]
) -> Any:
    import functools

    @functools.wraps(original)
    def measured_next(self: Any, *args: Any, **kwargs: Any) -> Any:
        busy = _busy[0]
        outermost = busy.enter()
        try:
            if not outermost or not eager():
                return original(self, *args, **kwargs)
            start = _clock()
            try:
                value = original(self, *args, **kwargs)
            except ended:
                _record_end(start)
                raise
            _record_step(start, _clock() - start)
            _pulled(self)  # after the timed call: reading the pipeline is not waiting for input
            return value
        finally:
            busy.leave()

    return measured_next


def _record_step(start: float, wait: float) -> None:
    try:
        _steps(TF_DATA_LOOP).step(start, wait)
    except Exception as e:
        _warn("could not record a step", e)


def _record_end(at: float) -> None:
    try:
        _steps(TF_DATA_LOOP).close(at)
    except Exception as e:
        _warn("could not record the end of an iterator", e)


def _patch(cls: type, name: str, wrapper: Callable[[Any], Any]) -> None:
    """Wrap `name` where it is defined in `cls`'s MRO, once."""
    owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
    if owner is None:
        raise AttributeError(f"{cls.__name__}.{name} not found")
    original = owner.__dict__[name]
    if getattr(original, _MARK, False):
        return
    wrapped = wrapper(original)
    setattr(wrapped, _MARK, True)
    setattr(owner, name, wrapped)


def on_tensorflow(tf: ModuleType, warn: Callable[..., None] | None = None) -> None:
    """Wrap the eager iterators' next() of tf.data and tf.distribute."""
    _setup(warn)
    import importlib

    context = importlib.import_module("tensorflow.python.eager.context")
    iterator_ops = importlib.import_module("tensorflow.python.data.ops.iterator_ops")
    ended = (StopIteration, tf.errors.OutOfRangeError)
    if not _plain:
        _plain.append(iterator_ops.OwnedIterator)

    def wrap(original: Callable[..., Any]) -> Any:
        return _wrap_next(original, context.executing_eagerly, ended)

    for name in ("__next__", "get_next"):
        _patch(iterator_ops.OwnedIterator, name, wrap)
    try:
        if not _python_calls:
            import threading

            _python_calls.append(threading.Lock())
        registry = importlib.import_module("tensorflow.python.ops.script_ops").FuncRegistry
        _patch(registry, "__call__", _wrap_python_call)
    except Exception as e:  # the registry moved: the stages are still named, Python's time is not
        _python_calls.clear()
        _warn("the time in Python functions tf.data calls is not measured", e)
    try:
        input_lib = importlib.import_module("tensorflow.python.distribute.input_lib")
        for name in ("__next__", "get_next"):
            _patch(input_lib.DistributedIteratorBase, name, wrap)
    except Exception as e:  # tf.distribute's internals moved: custom loops over tf.data still count
        _warn("tf.distribute iterators are not measured", e)


def _setup(warn: Callable[..., None] | None) -> None:
    if warn is not None and not _warn_hook:
        _warn_hook.append(warn)
    if not _busy:
        _busy.append(_Busy())


# -- Keras 3 fit ---------------------------------------------------------------------------------


class _KerasKinds:
    """The iterator types a Keras 3 train function is called with: the plain tf.data one (measured)
    and tf.distribute's; `plain` is None for a Keras whose train function is not known."""

    def __init__(self, plain: type | None, distributed: type | None) -> None:
        self.plain = plain
        self.distributed = distributed

    def unmeasurable(self, model: Any, iterator: Any) -> str | None:
        """Why the wait of this call cannot be measured; None when it can."""
        per_call = getattr(model, "steps_per_execution", 1)
        if per_call != 1:
            return (
                f"steps_per_execution={per_call}: Keras pulls the batches inside one compiled call, so "
                "waiting for them cannot be told apart from computing (steps_per_execution=1 measures it)"
            )
        if self.plain is None:
            return "a Keras other than 3 (its train function is not known to take a batch)"
        if isinstance(iterator, self.plain):
            return None
        if self.distributed is not None and isinstance(iterator, self.distributed):
            return "a tf.distribute strategy's batches (per-replica values) are pulled in the compiled step"
        return f"the batches come from a {type(iterator).__name__} the program hands over (train_on_batch)"

    def counting(self, iterator: Any) -> _Pulls | None:
        """A Python iterable of batches (train_on_batch's) wrapped to count the batches Keras takes,
        one step each; None for TensorFlow's iterators, which Keras reads inside the compiled call
        (steps_per_execution steps per call, as Keras counts them itself)."""
        tf_kinds = tuple(k for k in (self.plain, self.distributed) if k is not None)
        if self.plain is None or isinstance(iterator, tf_kinds):
            return None
        return _Pulls(iterator)


class _Pulls:
    """Iterates over `source`, counting what is taken."""

    def __init__(self, source: Any) -> None:
        self.source = iter(source)
        self.count = 0

    def __iter__(self) -> _Pulls:
        return self

    def __next__(self) -> Any:
        item = next(self.source)
        self.count += 1
        return item


def _safely(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as e:
        _warn("could not record a Keras step", e)


def _keras_train_function(model: Any, made: Callable[[Any], Any], kinds: _KerasKinds) -> Any:
    import functools

    record = _steps(KERAS_FIT)

    def counted(start: float, why: str, count: int) -> None:
        record.step(start, None, count, why)
        record.close(_clock())

    def measured(start: float, waited: float) -> None:
        record.step(start, waited)
        record.close(_clock())

    @functools.wraps(made)
    def train_function(iterator: Any) -> Any:
        start = _clock()
        try:
            why = kinds.unmeasurable(model, iterator)
        except Exception as e:
            _warn("could not inspect Keras' train function call", e)
            return made(iterator)
        if why is not None:
            _pulled(iterator)
            pulls = kinds.counting(iterator)
            try:
                logs = made(iterator if pulls is None else pulls)
            except StopIteration:
                _safely(lambda: record.close(start))
                raise
            count = int(getattr(model, "steps_per_execution", 1) or 1) if pulls is None else pulls.count
            _safely(lambda: counted(start, why, count))
            return logs
        busy = _busy[0]
        busy.enter()  # Keras' pull is not also a loop's step
        try:
            batch = next(iterator)
        except StopIteration:
            _safely(lambda: record.close(start))
            raise
        finally:
            busy.leave()
        waited = _clock() - start
        _pulled(iterator)
        logs = made([batch])  # Keras' own step on that batch, as train_on_batch hands it one
        _safely(lambda: measured(start, waited))
        return logs

    setattr(train_function, _MARK, True)
    return train_function


def _wrap_make(measured: Callable[[Any, Any], Any], what: str) -> Callable[[Any], Any]:
    """A wrapper for a trainer's make_train_function: the train function it makes (Keras keeps it in
    self.train_function) is replaced by `measured(model, made)`, once; `what` names it in a warning."""

    def wrapper(original: Callable[..., Any]) -> Any:
        import functools

        @functools.wraps(original)
        def make_train_function(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            try:
                made = getattr(self, "train_function", None)
                if made is not None and not getattr(made, _MARK, False):
                    self.train_function = measured(self, made)
                    if result is made:
                        result = self.train_function
            except Exception as e:
                _warn(f"could not measure {what}", e)
            return result

        return make_train_function

    return wrapper


def on_keras_trainer(module: ModuleType, warn: Callable[..., None] | None = None) -> None:
    """Wrap Keras 3's TensorFlowTrainer.make_train_function (keras/src/backend/tensorflow/trainer.py)."""
    _setup(warn)
    import importlib

    kinds = _KerasKinds(None, None)
    try:
        kinds.distributed = importlib.import_module("tensorflow").distribute.DistributedIterator
        version = importlib.import_module("keras.src.version").__version__
        if str(version).split(".")[0] == "3":
            kinds.plain = importlib.import_module("tensorflow.python.data.ops.iterator_ops").OwnedIterator
    except Exception as e:
        _warn("Keras' version is unknown: fit's steps are counted, its input wait is not measured", e)
    _patch(
        module.TensorFlowTrainer,
        "make_train_function",
        _wrap_make(lambda model, made: _keras_train_function(model, made, kinds), "Keras' train function"),
    )


# -- tf_keras (Keras 2) --------------------------------------------------------------------------

_TF_KERAS_WHY = (
    "tf_keras pulls each batch inside its compiled train_function, so waiting for it cannot be told "
    "apart from computing"
)


def _tf_keras_per_call(model: Any) -> int:
    variable = getattr(model, "_steps_per_execution", None)
    if variable is None:
        return 1
    return int(variable.numpy().item())


def _tf_keras_train_function(model: Any, made: Callable[[Any], Any]) -> Any:
    import functools

    record = _steps(KERAS_FIT)

    @functools.wraps(made)
    def train_function(*args: Any, **kwargs: Any) -> Any:
        start = _clock()
        if args:
            _pulled(args[0])  # the iterator its compiled step pulls from
        try:
            logs = made(*args, **kwargs)
        except StopIteration:
            record.close(start)
            raise
        try:
            record.step(start, None, _tf_keras_per_call(model), _TF_KERAS_WHY)
            record.close(_clock())
        except Exception as e:
            _warn("could not count a tf_keras step", e)
        return logs

    setattr(train_function, _MARK, True)
    return train_function


def on_tf_keras_training(module: ModuleType, warn: Callable[..., None] | None = None) -> None:
    """Wrap tf_keras' Model.make_train_function (tf_keras/src/engine/training.py): steps only."""
    _setup(warn)
    _patch(module.Model, "make_train_function", _wrap_make(_tf_keras_train_function, "tf_keras' steps"))


# The modules whose import installs a wrapper, and what installs it (sitecustomize's finder).
HOOKS: dict[str, Callable[..., None]] = {
    "tensorflow": on_tensorflow,
    "keras.src.backend.tensorflow.trainer": on_keras_trainer,
    "tf_keras.src.engine.training": on_tf_keras_training,
}
