"""The benchmark's data set: TFRecord shards of real JPEG images, generated once and cached.

`ensure_dataset()` is what callers use; it never imports TensorFlow: the images are made and
encoded by `python -m nodeagent.bench.data` in a subprocess, written into a temporary folder next to
the cache entry and renamed into place, so a half-written data set is never seen (rename(2) is
atomic within a file system) and two processes generating the same set at once both end with one
complete copy.

The pictures are synthetic but compress like photos: a colour gradient, a few flat or shaded
shapes with sharp edges, a smooth texture and sensor-like noise, encoded by tf.io.encode_jpeg at
quality 90 (about 3 bits per pixel at 384 px, as camera JPEGs), so decoding costs what it costs on real
data. Records use the keys of TensorFlow's ImageNet TFRecords (image/encoded, image/class/label,
...: https://github.com/tensorflow/models/blob/master/research/slim/datasets/build_imagenet_data.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bump when the generator or the record format changes: the cache key holds it, so old sets are
# never reused with new code.
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
CLASSES = 10
JPEG_QUALITY = 90
SEED = 20240604
STALE_TEMP_S = 3600  # a temporary folder this old belongs to a generator that died
INSTALL_HINT = "pip install 'nodeagent[tf]'"

# Feature keys as in TensorFlow's ImageNet TFRecords (build_imagenet_data.py, linked above).
KEY_ENCODED = "image/encoded"
KEY_LABEL = "image/class/label"
KEY_HEIGHT = "image/height"
KEY_WIDTH = "image/width"
KEY_FORMAT = "image/format"


def stored_size(size: int) -> int:
    """Side of the stored JPEGs for training crops of `size` px: 12/7 of it, 384 px for 224, so a
    stored image has about the pixel count of an average ImageNet training photo (about 400 x 350,
    https://image-net.org/about.php) and the crop takes a third of it, within the 8-100% area range
    of Inception-style random crops (https://arxiv.org/abs/1409.4842, section 6)."""
    return round(size * 12 / 7)


@dataclass(frozen=True)
class Manifest:
    folder: Path
    images: int
    size: int  # the training crop size the set was made for
    stored_size: int  # side of the stored JPEGs
    shards: int
    classes: int
    files: list[Path]
    jpeg_bytes: int

    @property
    def bits_per_pixel(self) -> float:
        return self.jpeg_bytes * 8 / (self.images * self.stored_size**2)


def default_cache() -> Path:
    """$XDG_CACHE_HOME/nodeagent/bench, else ~/.cache/nodeagent/bench (XDG base directory spec:
    https://specifications.freedesktop.org/basedir-spec/latest/)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "nodeagent" / "bench"


def cache_key(images: int, size: int, shards: int) -> str:
    return f"v{FORMAT_VERSION}-{images}img-{stored_size(size)}px-{shards}shards"


def ensure_dataset(images: int, size: int, shards: int, cache: Path | None = None) -> Path:
    """The folder of the data set (manifest.json + shard-*.tfrecord), generating it the first time.

    `cache` replaces the default cache root ($XDG_CACHE_HOME/nodeagent/bench); the set is in
    `<cache>/<key>/`. Raises RuntimeError when generation fails (the generator's stderr included).
    """
    _validate(images, size, shards)
    root = cache if cache is not None else default_cache()
    key = cache_key(images, size, shards)
    final = root / key
    if _complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale(root, key)
    if final.exists():
        # Only a complete set is ever renamed into place: this one lost files afterwards (a cleaner,
        # a user). Made again rather than reported, as a cache should be.
        shutil.rmtree(final, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        _generate_in_subprocess(images, size, shards, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not _complete(final):  # not a concurrent generator's finished copy: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_manifest(folder: Path) -> Manifest:
    """The manifest of a generated set; ValueError naming what is wrong."""
    path = folder / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{folder}: not a benchmark data set ({MANIFEST} missing)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None
    try:
        files = [folder / str(name) for name in doc["files"]]
        manifest = Manifest(
            folder=folder,
            images=int(doc["images"]),
            size=int(doc["size"]),
            stored_size=int(doc["stored_size"]),
            shards=int(doc["shards"]),
            classes=int(doc["classes"]),
            files=files,
            jpeg_bytes=int(doc["jpeg_bytes"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: malformed ({type(e).__name__}: {e})") from None
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"{folder}: shard(s) missing: {', '.join(missing)}")
    return manifest


def _validate(images: int, size: int, shards: int) -> None:
    if images < 1:
        raise ValueError(f"images={images}: need at least one image")
    if size < 8:
        raise ValueError(f"size={size}: images need at least 8 px (one JPEG block)")
    if not 1 <= shards <= images:
        raise ValueError(f"shards={shards}: need 1..images ({images}) shards")


def _complete(folder: Path) -> bool:
    try:
        read_manifest(folder)
    except ValueError:
        return False
    return True


def _remove_stale(root: Path, key: str) -> None:
    now = time.time()
    for old in root.glob(f".{key}.*"):
        try:
            if now - old.stat().st_mtime > STALE_TEMP_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def _generate_in_subprocess(images: int, size: int, shards: int, out: Path) -> None:
    argv = [sys.executable, "-m", "nodeagent.bench.data"]
    argv += ["--images", str(images), "--size", str(size), "--shards", str(shards), "--out", str(out)]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter; errors still show
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        if "No module named 'tensorflow'" in err:
            raise RuntimeError(f"generating the benchmark data needs TensorFlow: {INSTALL_HINT}")
        tail = "\n".join(err.splitlines()[-20:])
        raise RuntimeError(f"generating the benchmark data set failed (exit {proc.returncode}):\n{tail}")


# -- the generator (runs in the subprocess, with TensorFlow) ----------------------------------------


def picture(rng: Any, side: int) -> Any:
    """One synthetic photo-like uint8 image (side x side x 3) as a numpy array (about 10 ms at 384 px:
    float32 throughout, shapes drawn inside their bounding boxes)."""
    import numpy as np

    f32 = np.float32
    coords = np.arange(side, dtype=f32) / f32(side)
    x, y = coords[None, :], coords[:, None]
    angle = rng.uniform(0, 2 * np.pi)
    t = f32(np.cos(angle)) * x + f32(np.sin(angle)) * y
    t = (t - t.min()) * f32(255 / (np.ptp(t) + 1e-6))
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    palette = (c0 + (c1 - c0) * np.linspace(0, 1, 256)[:, None]).astype(f32)
    img = palette[t.astype(np.uint8)]  # the gradient through a 256-colour lookup: cheaper than math
    for _ in range(int(rng.integers(2, 9))):
        cx, cy = rng.uniform(0, 1, 2)
        rx, ry = rng.uniform(0.04, 0.3, 2)
        x0, x1 = max(0, int((cx - rx) * side)), min(side, int((cx + rx) * side) + 1)
        y0, y1 = max(0, int((cy - ry) * side)), min(side, int((cy + ry) * side) + 1)
        if x0 >= x1 or y0 >= y1:
            continue
        u, v = (x[:, x0:x1] - f32(cx)) / f32(rx), (y[y0:y1, :] - f32(cy)) / f32(ry)
        kind = rng.integers(3)
        if kind == 0:  # ellipse
            mask = u**2 + v**2 < 1
        elif kind == 1:  # rectangle
            mask = (np.abs(u) < 1) & (np.abs(v) < 1)
        else:  # triangle: a rectangle cut along its diagonal
            mask = (np.abs(u) < 1) & (np.abs(v) < 1) & (u > v)
        # Flat colour lit from above or below: a vertical shading across the shape.
        color = rng.uniform(0, 255, 3).astype(f32) + f32(rng.uniform(-60, 60)) * v[..., None]
        region = img[y0:y1, x0:x1]
        region[mask] = np.broadcast_to(color, region.shape)[mask]
    # A smooth texture (coarse noise, bilinearly upsampled by two small matrix products) and fine
    # sensor-like noise, as in photos.
    cells = int(rng.integers(4, 24))
    coarse = rng.standard_normal((cells, cells * 3), dtype=f32) * f32(rng.uniform(4, 20))
    pos = np.linspace(0, cells - 1, side, dtype=f32)
    up = np.maximum(f32(0), f32(1) - np.abs(pos[:, None] - np.arange(cells, dtype=f32)))  # side x cells
    rows = (up @ coarse).reshape(side, cells, 3)
    img += np.einsum("xc,ycd->yxd", up, rows, optimize=True)
    # Uniform rather than Gaussian sensor noise: a third of the cost, and JPEG cannot tell.
    img += (rng.random(img.shape, dtype=f32) - f32(0.5)) * f32(rng.uniform(20, 60))
    return np.clip(img, 0, 255).astype(np.uint8)


def generate(images: int, size: int, shards: int, out: Path) -> None:
    import numpy as np

    tf = importlib.import_module("tensorflow")
    side = stored_size(size)
    rng = np.random.default_rng(SEED)
    names = [f"shard-{k:05d}-of-{shards:05d}.tfrecord" for k in range(shards)]
    total = 0
    for k, name in enumerate(names):
        start, stop = k * images // shards, (k + 1) * images // shards
        with tf.io.TFRecordWriter(str(out / name)) as writer:
            for _ in range(start, stop):
                encoded = tf.io.encode_jpeg(picture(rng, side), quality=JPEG_QUALITY).numpy()
                total += len(encoded)
                feature = {
                    KEY_ENCODED: _bytes(tf, encoded),
                    KEY_LABEL: _int(tf, int(rng.integers(CLASSES))),
                    KEY_HEIGHT: _int(tf, side),
                    KEY_WIDTH: _int(tf, side),
                    KEY_FORMAT: _bytes(tf, b"JPEG"),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    manifest = {
        "format_version": FORMAT_VERSION,
        "images": images,
        "size": size,
        "stored_size": side,
        "shards": shards,
        "classes": CLASSES,
        "jpeg_quality": JPEG_QUALITY,
        "jpeg_bytes": total,
        "files": names,
        "tensorflow": tf.__version__,
    }
    # The manifest last: a folder without one is incomplete (and it is renamed into place only after).
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def _bytes(tf: Any, value: bytes) -> Any:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(tf: Any, value: int) -> Any:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeagent.bench.data", description=__doc__)
    parser.add_argument("--images", type=int, required=True)
    parser.add_argument("--size", type=int, required=True, help="training crop size (stored: 12/7 of it)")
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="an existing empty folder")
    args = parser.parse_args(argv)
    try:
        _validate(args.images, args.size, args.shards)
    except ValueError as e:
        parser.error(str(e))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    generate(args.images, args.size, args.shards, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
