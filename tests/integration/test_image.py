"""The OCI image (`make image`, build-aux/image.sh): built from Debian's packages without a container
daemon, an OCI image layout whose every blob is what its descriptor says, tagged nodeagent:VERSION
(pyproject.toml's version, the one the Kubernetes manifests name), with nodeagent's venv and no
TensorFlow; and its nodeagent, run from the image's own root file system, gives on a recorded node
mounted at /host the document this tree's nodeagent gives on the same recording.

The image is run two ways: by podman (vfs storage in a private folder), where this machine lets a
container runtime start a container (the test skips naming the runtime's error where it cannot);
and by unpacking the layout (umoci unpack) and starting its entry point with the image config's
environment in a chroot of a private mount and PID namespace (the root file system read-only, a
tmpfs at /tmp, the recording bound read-only at /host, as the DaemonSet mounts them). Root only
(mmdebstrap's root mode, chroot, mounts). The Debian layer is cached under build/image across runs
(keyed by its inputs), so a run costs a minute or two once that is built."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden_docs import stable
from tests.support.paths import REPO, VM
from tests.support.wheel_contents import version

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("image"), pytest.mark.timeout(1800)]

NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
NODE = "gpu-node-07"
BUILD_TIMEOUT_S = 1500
RUN_TIMEOUT_S = 300
EXIT_CODES = {"OK": 0, "SKIPPED": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


REF = f"nodeagent:{version()}"
ARCHIVE = REPO / "build" / "image" / f"nodeagent-{version()}.oci.tar"


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root: mmdebstrap's root mode, chroot and mounts (make test runs as root)"
    for tool in ("mmdebstrap", "umoci", "unshare", "chroot"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (make system-packages)"
    return None


@dataclass(frozen=True)
class Layout:
    """The image archive unpacked: its OCI layout folder, and its manifest and config as parsed."""

    folder: Path
    manifest: dict[str, Any]
    config: dict[str, Any]

    def blob(self, descriptor: dict[str, Any]) -> Path:
        return _blob(self.folder, descriptor)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    why = unavailable()
    if why:
        pytest.skip(why)
    proc = subprocess.run(
        ["make", "image"], cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = tmp_path_factory.mktemp("image") / "oci"
    folder.mkdir()
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(folder, filter="tar")
    index = json.loads((folder / "index.json").read_text())
    (descriptor,) = index["manifests"]
    manifest = json.loads(_blob(folder, descriptor).read_bytes())
    config = json.loads(_blob(folder, manifest["config"]).read_bytes())
    return Layout(folder, manifest, config)


def _blob(folder: Path, descriptor: dict[str, Any]) -> Path:
    algorithm, digest = str(descriptor["digest"]).split(":")
    return folder / "blobs" / algorithm / digest


# -- the layout ----------------------------------------------------------------------------------


def test_the_layout_names_one_manifest_by_the_versioned_tag(layout: Layout) -> None:
    # https://github.com/opencontainers/image-spec/blob/main/image-layout.md
    assert json.loads((layout.folder / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout.folder / "index.json").read_text())
    (descriptor,) = index["manifests"]
    assert descriptor["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert descriptor["annotations"] == {"org.opencontainers.image.ref.name": REF}
    assert layout.manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [d["mediaType"] for d in layout.manifest["layers"]] == [LAYER_MEDIA_TYPE] * 2


def test_every_blob_is_what_its_descriptor_says(layout: Layout) -> None:
    index = json.loads((layout.folder / "index.json").read_text())
    descriptors = [*index["manifests"], layout.manifest["config"], *layout.manifest["layers"]]
    for d in descriptors:
        data = layout.blob(d).read_bytes()
        assert (f"sha256:{hashlib.sha256(data).hexdigest()}", len(data)) == (d["digest"], d["size"])
    # The config's diff_ids are the layers' uncompressed digests.
    diff_ids = [f"sha256:{_gunzip_digest(layout.blob(d))}" for d in layout.manifest["layers"]]
    assert layout.config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    # Nothing else is in the layout: umoci gc removed what the build replaced.
    blobs = {p.name for p in (layout.folder / "blobs" / "sha256").iterdir()}
    assert blobs == {d["digest"].split(":")[1] for d in descriptors}


def _gunzip_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with gzip.open(path) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def test_the_config_starts_nodeagent_from_its_venv(layout: Layout) -> None:
    config = layout.config
    assert (config["os"], config["architecture"]) == (
        "linux",
        OCI_ARCH.get(platform.machine(), platform.machine()),
    )
    process = config["config"]
    assert process["Entrypoint"] == ["/opt/nodeagent/bin/nodeagent"] and process["Cmd"] == ["check"]
    env = dict(e.split("=", 1) for e in process["Env"])
    # `nodeagent` on PATH: the init container's command names it so.
    assert env["PATH"].split(":")[0] == "/opt/nodeagent/bin"
    assert process["Labels"]["org.opencontainers.image.version"] == version()


def test_the_layers_hold_debian_python_and_nodeagent_without_tensorflow(layout: Layout) -> None:
    base, app = (_names(layout.blob(d)) for d in layout.manifest["layers"])
    assert {"usr/bin/python3", "usr/bin/dmesg", "usr/bin/sh", "etc/debian_version"} <= base
    assert all(n == "opt" or n.startswith("opt/nodeagent") for n in app)
    (site,) = {n.split("/site-packages/")[0] for n in app if "/site-packages/" in n}
    assert f"{site}/site-packages/nodeagent-{version()}.dist-info/METADATA" in app
    assert f"{site}/site-packages/nodeagent/checks/__init__.py" in app
    assert "opt/nodeagent/bin/nodeagent" in app
    assert not [n for n in app if "/site-packages/tensorflow" in n]


def _names(layer: Path) -> set[str]:
    with tarfile.open(layer) as tar:
        return {m.name.removeprefix("./").rstrip("/") for m in tar.getmembers()}


# -- the image run against a recorded node --------------------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded node as a folder named `host`, as in the container (its name is in the report)."""
    tree = tmp_path_factory.mktemp("recording") / "host"
    tree.mkdir()
    with tarfile.open(VM) as tar:
        tar.extractall(tree, filter="tar")
    return tree


@pytest.fixture(scope="module")
def expected(recording: Path) -> tuple[int, Any]:
    """This tree's nodeagent (the venv's) on the recording: what the image's must give too."""
    proc = subprocess.run(
        [NODEAGENT, "check", "--root", str(recording), "--hostname", NODE, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=_clean_env(),
        check=False,
    )
    assert proc.returncode in EXIT_CODES.values(), proc.stderr
    return proc.returncode, stable(json.loads(proc.stdout))


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NODEAGENT_ROOT", "NODEAGENT_HOSTNAME")}


@pytest.fixture(scope="module")
def rootfs(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The image's root file system, unpacked from the layout by umoci."""
    bundle = tmp_path_factory.mktemp("bundle") / "bundle"
    proc = subprocess.run(
        ["umoci", "unpack", "--image", f"{layout.folder}:{REF}", str(bundle)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    yield bundle / "rootfs"
    shutil.rmtree(bundle, ignore_errors=True)


# The container's mounts, made in a private mount namespace that ends with the command: the root
# file system read-only, its own procfs (a PID namespace of its own), a tmpfs at /tmp, the node's
# tree read-only at /host; then the entry point, in a chroot, with the image config's environment.
_ENTER = """set -e
root=$1 tree=$2; shift 2
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$root/host"
mount --bind "$tree" "$root/host" && mount -o remount,bind,ro "$root/host"
mount -o remount,bind,ro "$root"
exec chroot "$root" "$@"
"""


def run_in_rootfs(rootfs: Path, layout: Layout, tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    process = layout.config["config"]
    argv = ["env", "-i", *process["Env"], *process["Entrypoint"], *args]
    namespace = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private"]
    return subprocess.run(
        [*namespace, "sh", "-c", _ENTER, "sh", str(rootfs), str(tree), *argv],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _document(proc: subprocess.CompletedProcess[str]) -> tuple[int, Any]:
    assert proc.returncode in EXIT_CODES.values(), proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode == EXIT_CODES[doc["status"]]  # the exit code is the worst status
    return proc.returncode, stable(doc)


CHECK = ("check", "--root", "/host", "--hostname", NODE, "--format", "json")


def test_the_image_root_file_system_checks_a_recorded_node(
    rootfs: Path, layout: Layout, recording: Path, expected: tuple[int, Any]
) -> None:
    proc = run_in_rootfs(rootfs, layout, recording, *CHECK)
    assert proc.stderr == ""
    assert _document(proc) == expected
    # Its nodeagent is the venv's, by the image's python3, not this machine's.
    which = run_in_rootfs(rootfs, layout, recording, "--version")
    assert which.returncode == 0 and which.stdout.strip() == f"nodeagent, version {version()}", which.stderr


@pytest.fixture(scope="module")
def podman(layout: Layout) -> Iterator[list[str]]:
    """podman with its own storage (vfs: no overlay mounts needed), the image loaded into it. Its
    folder is a short one under /tmp: podman refuses a run root longer than 50 characters, which
    pytest's folders for a worker are."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make system-packages)")
    with tempfile.TemporaryDirectory(prefix="na-podman-") as folder:
        _enough_room(Path(folder))
        yield _loaded(Path(folder))


# vfs storage unpacks every layer in full, and each layer again on top of the ones below it: 444 MB
# at its peak for the 85 MB archive (measured here, `du` every 5 s), about 5 times; 8 leaves room.
STORAGE_PER_ARCHIVE_BYTE = 8


def _enough_room(folder: Path) -> None:
    """A full disk is this machine's state, not the image's: say so before podman fails on it."""
    need = ARCHIVE.stat().st_size * STORAGE_PER_ARCHIVE_BYTE
    free = shutil.disk_usage(folder).free
    if free < need:
        pytest.skip(
            f"{free >> 20} MiB free under {folder.parent}, podman's vfs storage needs about {need >> 20} MiB"
        )


def _loaded(state: Path) -> list[str]:
    base = ["podman", "--storage-driver", "vfs", "--root", f"{state}/root", "--runroot", f"{state}/run"]
    base += ["--tmpdir", f"{state}/tmp", "--events-backend", "none"]
    proc = subprocess.run(
        [*base, "load", "--input", str(ARCHIVE)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0 and f"localhost/{REF}" in proc.stdout, proc.stdout + proc.stderr
    return base


# podman's exit codes for a container that did not start (podman-run(1)): 125 podman's own error,
# 126 the runtime's; their message names the runtime (crun, runc) or "OCI runtime".
_RUNTIME_FAILURES = (125, 126)


def test_podman_runs_the_image_on_a_recorded_node(
    podman: list[str], recording: Path, expected: tuple[int, Any]
) -> None:
    run = [*podman, "run", "--rm", "--network", "none", "--read-only", "-v", f"{recording}:/host:ro"]
    proc = subprocess.run(
        [*run, f"localhost/{REF}", *CHECK], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    if proc.returncode in _RUNTIME_FAILURES and ("OCI" in proc.stderr or "crun" in proc.stderr):
        pytest.skip(f"podman cannot start a container on this machine: {proc.stderr.strip()}")
    assert _document(proc) == expected
