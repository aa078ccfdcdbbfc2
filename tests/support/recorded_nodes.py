"""Recorded GPU nodes for the gate's tests, built from real recordings (tests/fixtures/corpus), and
the losses made the way the driver and the kernel show them in the recorded files.

Nobody has published a whole recording of a GPU node with its HCAs: a node is one snapshot tree
holding the files of a GPU recording and an RDMA one, and what each recorded (nodeagent.json's
`paths`, so that what neither recorded reads as not recorded).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from nodeagent.host.base import META_FILE
from tests.support import corpus
from tests.support.cli import run_cli

GPUS = "smix-pai-azure-4x-tesla-k80"  # 4 Tesla K80 GPUs, `nvidia-smi -q -x`
NVLINK = "topo-gcp-a3-h100-8gpu-nv18-gpu-numa-id"  # 8 H100, topo -m with NV18 and nvlink -s
HCAS = "ib-gpud-h100-roce-cx7-400-all-active"  # 12 ConnectX ports of an H100 node, all ACTIVE
SMI_XML = "commands/nvidia-smi-q-x.txt"
NVLINK_S = "commands/nvidia-smi-nvlink-s.txt"


def node(tmp_path: Path, name: str, *recordings: str) -> Path:
    """One snapshot tree holding the files of several recordings, and what each of them recorded."""
    dest = tmp_path / name
    walked: set[str] = set()
    for i, rec in enumerate(recordings):
        part = corpus.build_tree(corpus.load(rec), tmp_path / f"{name}.part{i}")
        walked |= set(json.loads((part / META_FILE).read_text())["paths"])
        shutil.copytree(part, dest, dirs_exist_ok=True)
    (dest / META_FILE).write_text(json.dumps({"paths": sorted(walked)}))
    return dest


def drop_gpu(tree: Path, bus_id: str) -> None:
    """The GPU at `bus_id` gone from `nvidia-smi -q -x`, as the driver shows a GPU it lost."""
    xml = tree / SMI_XML
    text = xml.read_text()
    blocks = re.findall(r"<gpu id=\"[^\"]+\">.*?</gpu>", text, flags=re.DOTALL)
    (gone,) = [b for b in blocks if f'id="{bus_id}"' in b]
    attached = int(re.search(r"<attached_gpus>(\d+)</attached_gpus>", text).group(1))  # type: ignore[union-attr]
    text = text.replace(gone, "").replace(
        f"<attached_gpus>{attached}</attached_gpus>", f"<attached_gpus>{attached - 1}</attached_gpus>"
    )
    xml.write_text(text)


def bus_ids(tree: Path) -> list[str]:
    return re.findall(r"<gpu id=\"([^\"]+)\">", (tree / SMI_XML).read_text())


def drop_hca(tree: Path, device: str) -> None:
    shutil.rmtree(tree / "sys" / "class" / "infiniband" / device)


def save_baseline(tree: Path, path: Path) -> None:
    result = run_cli("baseline", "save", str(path), "--root", str(tree))
    assert result.returncode == 0, result.stderr


def disable_port(tree: Path, device: str, port: int = 1) -> None:
    """A port taken down (`ibportstate LID PORT disable`), as the kernel then shows it: ports/N/state
    "1: DOWN" and phys_state "3: Disabled" (ib_port_state, ib_port_phys_state; tests/support/ib_sysfs.py)."""
    base = tree / "sys" / "class" / "infiniband" / device / "ports" / str(port)
    (base / "state").write_text("1: DOWN\n")
    (base / "phys_state").write_text("3: Disabled\n")


# /proc/self/limits as fs/proc/base.c (proc_pid_limits) prints it: "%-25s %-20s %-20s %-10s".
_LIMIT_LINE = "{:<25} {:<20} {:<20} {:<10}\n"


def record_limits(tree: Path, memlock: str) -> None:
    """The node's /proc/self/limits with `memlock` ("65536", "unlimited") as the soft and hard
    locked-memory limit, recorded (added to what the tree says it walked)."""
    text = _LIMIT_LINE.format("Limit", "Soft Limit", "Hard Limit", "Units")
    text += _LIMIT_LINE.format("Max open files", "1048576", "1048576", "files")
    text += _LIMIT_LINE.format("Max locked memory", memlock, memlock, "bytes")
    path = tree / "proc" / "self" / "limits"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    meta = json.loads((tree / META_FILE).read_text())
    meta["paths"] = sorted({*meta["paths"], "/proc/self/limits"})
    (tree / META_FILE).write_text(json.dumps(meta))
