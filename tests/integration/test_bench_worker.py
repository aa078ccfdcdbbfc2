"""The benchmark's data set and worker, for real: TensorFlow generates a small JPEG TFRecord set once
(module fixture, in a temporary cache) and each configuration runs in its own process at a tiny size.
Timings are never asserted, only that they are there and positive."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.bench import CONFIGS, TRAINING_CONFIGS, data, pipeline
from nodeagent.tuning import launcher

pytestmark = [
    pytest.mark.slow,
    # One worker under pytest-xdist (--dist loadgroup): the module's fixtures generate the data set
    # and run every configuration in TensorFlow (most of a minute), which each worker would repeat.
    pytest.mark.xdist_group(name="bench_worker"),
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None,
        reason=f"tensorflow is not installed in this environment ({data.INSTALL_HINT})",
    ),
]

Proc = subprocess.CompletedProcess[str]
IMAGES, SIZE, SHARDS = 48, 56, 2  # stored at 96 px
BATCH, WARMUP, STEPS, REPEATS = 8, 1, 3, 2
KEYS = {
    "config",
    "images_per_s",
    "input_wait_fraction",
    "cpu_seconds_per_image",
    "batch",
    "steps",
    "repeats",
    "intra_op_threads",
    "inter_op_threads",
    "tf_version",
    "tf_data_options",
}


def clean_env(**extra: str) -> dict[str, str]:
    # Without a profile's variables from the caller's environment: the configurations run as plain jobs.
    drop = {launcher.TF_DATA_ENV, "PYTHONPATH", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def worker(config: str, folder: Path, *more: str, env: dict[str, str] | None = None) -> Proc:
    argv = [sys.executable, "-m", "nodeagent.bench.worker", "--config", config, "--data", str(folder)]
    argv += ["--batch", str(BATCH), "--image-size", str(SIZE), "--warmup-steps", str(WARMUP)]
    argv += ["--steps", str(STEPS), "--repeats", str(REPEATS), *more]
    return subprocess.run(
        argv, capture_output=True, text=True, env=env or clean_env(), timeout=280, check=False
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-cache")


@pytest.fixture(scope="module")
def dataset(cache: Path) -> Path:
    return data.ensure_dataset(IMAGES, SIZE, SHARDS, cache)


@pytest.fixture(scope="module")
def results(dataset: Path) -> dict[str, Proc]:
    """Each configuration once, with --progress (shared by the tests below)."""
    return {config: worker(config, dataset, "--progress") for config in CONFIGS}


def last_json(proc: Proc) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


# -- data ------------------------------------------------------------------------------------------


def test_dataset_is_cached_under_its_key(dataset: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dataset == cache / data.cache_key(IMAGES, SIZE, SHARDS)
    assert dataset.name == f"v{data.FORMAT_VERSION}-48img-96px-2shards"
    manifest = data.read_manifest(dataset)
    assert (manifest.images, manifest.size, manifest.stored_size, manifest.shards) == (48, 56, 96, 2)
    assert [f.name for f in manifest.files] == [
        "shard-00000-of-00002.tfrecord",
        "shard-00001-of-00002.tfrecord",
    ]
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folder left

    def regenerate(*args: Any) -> None:
        raise AssertionError("the cached data set was generated again")

    monkeypatch.setattr(data, "_generate_in_subprocess", regenerate)
    before = (dataset / data.MANIFEST).stat().st_mtime_ns
    assert data.ensure_dataset(IMAGES, SIZE, SHARDS, cache) == dataset
    assert (dataset / data.MANIFEST).stat().st_mtime_ns == before


def test_default_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data.default_cache() == tmp_path / "nodeagent" / "bench"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the spec: relative paths are invalid
    assert data.default_cache() == Path.home() / ".cache" / "nodeagent" / "bench"


def test_dataset_holds_decodable_jpegs_with_labels(dataset: Path) -> None:
    # In a subprocess: this test process never imports TensorFlow.
    code = f"""
import json, sys
import tensorflow as tf
from nodeagent.bench import data
m = data.read_manifest(data.Path({str(dataset)!r}))
spec = {{data.KEY_ENCODED: tf.io.FixedLenFeature([], tf.string),
         data.KEY_LABEL: tf.io.FixedLenFeature([], tf.int64),
         data.KEY_FORMAT: tf.io.FixedLenFeature([], tf.string)}}
out = {{"shapes": [], "labels": [], "formats": [], "kinds": [], "per_shard": []}}
for f in m.files:
    n = 0
    for record in tf.data.TFRecordDataset(str(f)):
        ex = tf.io.parse_single_example(record, spec)
        raw = ex[data.KEY_ENCODED]
        out["kinds"].append(bool(tf.io.is_jpeg(raw)))
        out["shapes"].append(tf.io.decode_jpeg(raw).shape.as_list())
        out["labels"].append(int(ex[data.KEY_LABEL]))
        out["formats"].append(ex[data.KEY_FORMAT].numpy().decode())
        n += 1
    out["per_shard"].append(n)
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=280,
        check=False,
    )
    doc = last_json(proc)
    assert doc["per_shard"] == [24, 24]
    assert all(doc["kinds"]) and set(doc["formats"]) == {"JPEG"}
    assert doc["shapes"] == [[96, 96, 3]] * IMAGES
    assert all(0 <= label < data.CLASSES for label in doc["labels"])
    assert len(set(doc["labels"])) > 3  # labels vary


def test_failed_generation_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_then_fail(images: int, size: int, shards: int, out: Path) -> None:
        (out / "shard-00000-of-00001.tfrecord").write_bytes(b"partial")
        raise RuntimeError("generator died")

    monkeypatch.setattr(data, "_generate_in_subprocess", half_then_fail)
    with pytest.raises(RuntimeError, match="generator died"):
        data.ensure_dataset(4, 16, 1, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("images", "size", "shards", "match"),
    [(0, 64, 1, "at least one image"), (8, 4, 1, "at least 8 px"), (4, 64, 5, "shards=5")],
)
def test_bad_sizes_are_refused(images: int, size: int, shards: int, match: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=match):
        data.ensure_dataset(images, size, shards, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_incomplete_folder_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / data.MANIFEST).write_text(json.dumps({"images": 1, "files": ["gone.tfrecord"]}))
    with pytest.raises(ValueError, match="malformed"):
        data.read_manifest(tmp_path)


def test_importing_the_bench_package_does_not_import_tensorflow() -> None:
    code = (
        "import sys, nodeagent.bench, nodeagent.bench.data, nodeagent.bench.worker; "
        "print('tensorflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# -- worker ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_prints_the_contract_json(config: str, results: dict[str, Proc]) -> None:
    doc = last_json(results[config])
    assert set(doc) >= KEYS
    assert doc["config"] == config
    assert (doc["batch"], doc["steps"], doc["repeats"]) == (BATCH, STEPS, REPEATS)
    assert len(doc["images_per_s"]) == REPEATS
    assert all(isinstance(x, float) and x > 0 for x in doc["images_per_s"])
    assert isinstance(doc["cpu_seconds_per_image"], float) and doc["cpu_seconds_per_image"] > 0
    # No profile here: TensorFlow's defaults, one thread per CPU this process may use.
    assert doc["intra_op_threads"] == doc["inter_op_threads"] == len(os.sched_getaffinity(0))
    assert doc["tf_version"].startswith("2.")
    assert isinstance(doc["tf_data_options"], dict)
    wait = doc["input_wait_fraction"]
    if config in TRAINING_CONFIGS:
        assert isinstance(wait, float) and 0 <= wait <= 1
    else:
        assert wait is None


def test_naive_waits_on_input_with_everything_off(results: dict[str, Proc]) -> None:
    doc = last_json(results["naive"])
    assert doc["input_wait_fraction"] > 0
    assert doc["tf_data_options"] == pipeline.NAIVE_OPTIONS
    # The user's plain pipeline sets nothing: TensorFlow's defaults (or a profile's) apply to it.
    assert last_json(results["tuned"])["tf_data_options"] == {}


@pytest.mark.parametrize("config", CONFIGS)
def test_progress_lines(config: str, results: dict[str, Proc]) -> None:
    proc = results[config]
    assert proc.returncode == 0, proc.stderr[-3000:]
    total = WARMUP + STEPS * REPEATS
    lines = [line for line in proc.stderr.splitlines() if line.startswith("progress ")]
    assert lines == [f"progress {done} {total}" for done in range(1, total + 1)]
    assert len(proc.stdout.strip().splitlines()) == 1  # stdout holds the JSON and nothing else


def test_tuned_reports_the_options_of_the_hook(dataset: Path) -> None:
    """Under `nodeagent exec` the tf.data hook sets options the program left unset; the worker reports
    what the iterated dataset really carried, and TF_NUM_* as the thread counts."""
    options = {"autotune.enabled": True, "deterministic": False, "threading.private_threadpool_size": 1}
    env = clean_env(
        PYTHONPATH=str(launcher.HOOKS_DIR),
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="3",
        **{launcher.TF_DATA_ENV: json.dumps(options)},
    )
    proc = worker("tuned", dataset, env=env)
    doc = last_json(proc)
    assert doc["tf_data_options"] == options
    assert (doc["intra_op_threads"], doc["inter_op_threads"]) == (1, 3)
    assert "nodeagent tf.data hook" not in proc.stderr  # applied without complaint


def test_worker_errors_exit_non_zero_on_stderr(dataset: Path, tmp_path: Path) -> None:
    proc = worker("naive", tmp_path)
    assert proc.returncode == 2
    assert "manifest.json missing" in proc.stderr and proc.stdout == ""

    proc = worker("naive", dataset, "--image-size", "97")
    assert proc.returncode == 2 and "larger than the stored images (96 px)" in proc.stderr


def test_worker_failure_inside_tensorflow_is_not_hidden(dataset: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in dataset.iterdir():
        content = f.read_bytes()
        (broken / f.name).write_bytes(content if f.name == data.MANIFEST else content[: len(content) // 3])
    proc = worker("naive", broken)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "DataLossError" in proc.stderr or "corrupted record" in proc.stderr
