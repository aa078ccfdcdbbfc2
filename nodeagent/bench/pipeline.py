"""The benchmark's tf.data input pipelines: parse TFRecord -> decode JPEG -> random crop -> random
flip -> cast/normalize -> batch, written three ways (the worker imports this; TensorFlow is passed in).

- naive: what a first pipeline looks like (`ds.map(f).batch(n)`), with every tf.data mechanism that
  would quietly parallelize or overlap it turned off, so that it really is sequential and
  unprefetched: autotune, injected prefetch, map parallelization (a stateless map is run in
  parallel by default, OptimizationOptions.map_parallelization) and map+batch fusion (the fused
  MapAndBatch op computes the next batch on a background thread: a one-batch prefetch in disguise).
- tuned: the same code without those options: the user's plain pipeline, as TensorFlow's defaults
  and `nodeagent exec`'s tf.data hook (options the program left unset) make it run.
- autotune: what the guide says to write: map(num_parallel_calls=AUTOTUNE) and prefetch(AUTOTUNE)
  (https://www.tensorflow.org/guide/data_performance).

The augmentation uses stateless random ops with a per-element seed from Dataset.random, as the TF
guide recommends for tf.data (https://www.tensorflow.org/guide/random_numbers#stateless_rngs,
https://www.tensorflow.org/tutorials/images/data_augmentation): a map with stateful random ops
(tf.image.random_crop) cannot be parallelized by tf.data's map_parallelization, only by code.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodeagent.bench import data

SHUFFLE_BUFFER = 1024  # records (about 55 MB of JPEGs at 384 px): a typical in-memory shuffle
SEED = 7

# The explicit "off" switches of the naive configuration (dotted tf.data.Options paths).
NAIVE_OPTIONS: dict[str, Any] = {
    "autotune.enabled": False,
    "experimental_optimization.inject_prefetch": False,
    "experimental_optimization.map_parallelization": False,
    "experimental_optimization.map_and_batch_fusion": False,
}


def records(tf: Any, files: Sequence[Path]) -> Any:
    """Shuffled, endlessly repeated serialized examples, each zipped with a stateless-RNG seed."""
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    ds = ds.shuffle(SHUFFLE_BUFFER, seed=SEED, reshuffle_each_iteration=True).repeat()
    seeds = tf.data.Dataset.random(seed=SEED).batch(2, drop_remainder=True)  # shape [2] int64
    return tf.data.Dataset.zip((ds, seeds))


def make_preprocess(tf: Any, size: int) -> Any:
    """The per-record function: a stateless function of (record, seed), so tf.data may parallelize it."""
    features = {
        data.KEY_ENCODED: tf.io.FixedLenFeature([], tf.string),
        data.KEY_LABEL: tf.io.FixedLenFeature([], tf.int64),
        data.KEY_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        data.KEY_WIDTH: tf.io.FixedLenFeature([], tf.int64),
    }

    def preprocess(record: Any, seed: Any) -> tuple[Any, Any]:
        parsed = tf.io.parse_single_example(record, features)
        image = tf.io.decode_jpeg(parsed[data.KEY_ENCODED], channels=3)
        crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        image = tf.image.stateless_random_crop(image, [size, size, 3], crop_seed)
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        image = tf.cast(image, tf.float32) * (1.0 / 127.5) - 1.0  # [-1, 1]
        return image, tf.cast(parsed[data.KEY_LABEL], tf.int32)

    return preprocess


def build(tf: Any, config: str, files: Sequence[Path], size: int, batch: int) -> Any:
    """The dataset of (images [batch, size, size, 3] float32, labels [batch] int32) for `config`."""
    fn = make_preprocess(tf, size)
    ds = records(tf, files)
    if config in ("naive", "tuned"):
        ds = ds.map(fn).batch(batch, drop_remainder=True)
        if config == "naive":
            ds = ds.with_options(options_from(tf, NAIVE_OPTIONS))
        return ds
    if config in ("autotune", "input_only", "compute_only"):
        ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).batch(batch, drop_remainder=True)
        return ds.prefetch(tf.data.AUTOTUNE)
    raise ValueError(f"unknown configuration {config!r}")


def options_from(tf: Any, dotted: dict[str, Any]) -> Any:
    options = tf.data.Options()
    for path, value in dotted.items():
        *parents, leaf = path.split(".")
        target = options
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return options


# Deprecated aliases (same values under another name) and options that are never None.
_SKIP = {"experimental_deterministic", "experimental_threading", "experimental_distribute"}


def options_dict(options: Any, prefix: str = "") -> dict[str, Any]:
    """The options that are set (not None, i.e. not left to TensorFlow's default), dotted."""
    out: dict[str, Any] = {}
    for name in sorted(dir(type(options))):
        if name.startswith("_") or name in _SKIP or not isinstance(getattr(type(options), name), property):
            continue
        value = getattr(options, name)
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[prefix + name] = value
        elif isinstance(value, enum.Enum):
            out[prefix + name] = value.name
        else:  # a nested options object (autotune, experimental_optimization, threading, ...)
            out.update(options_dict(value, f"{prefix}{name}."))
    return out
