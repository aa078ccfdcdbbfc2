"""The gate as a fleet composes it: node x playbook x baseline or expectation, one verdict each.

Each row of SCENARIOS is a recorded node (tests/support/recorded_nodes.py: real recordings, with a loss
made as the driver and the kernel show it), a playbook (every shipped one, or one stating the
hardware with `expect:`), a baseline recorded on a node (or none), and what must come out: the exit
code of `nodeagent preflight`, whether the node may run the job, and a property of the findings.

What the rows hold, each from the issue that asked for it:
- a GPU lost against a baseline of the intact node is refused under every shipped playbook;
- a recording holding only `nvidia-smi -q -x` has no FAIL under gpu-training (unrecorded is not
  absent), and nothing in it claims something is "not present";
- a node against its own baseline (recorded under another name) has no finding from the baseline,
  and a recording that never held the HCAs is not a node whose HCAs are gone;
- two disabled IB ports are exactly two findings, the rdma check's about each port;
- a memlock limit below what gpu-training asks is one finding, the kernel check's;
- a node that may run the job prints nothing with `--format slurm`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.gate.playbook import shipped_names
from tests.support import corpus
from tests.support.cli import run_cli
from tests.support.recorded_nodes import GPUS, HCAS, bus_ids, disable_port, drop_gpu, node, record_limits

pytestmark = pytest.mark.xdist_group("gate-matrix")

Doc = dict[str, Any]


def _intact(tmp: Path, name: str) -> Path:
    tree = node(tmp, name, GPUS, HCAS)
    record_limits(tree, "unlimited")
    return tree


def _lost_gpu(tmp: Path, name: str) -> Path:
    tree = _intact(tmp, name)
    drop_gpu(tree, bus_ids(tree)[2])
    return tree


def _two_ports_down(tmp: Path, name: str) -> Path:
    tree = _intact(tmp, name)
    disable_port(tree, "mlx5_10")
    disable_port(tree, "mlx5_11")
    return tree


def _memlock_64k(tmp: Path, name: str) -> Path:
    tree = node(tmp, name, GPUS, HCAS)
    record_limits(tree, "65536")
    return tree


def _xml_only(tmp: Path, name: str) -> Path:
    return corpus.build_tree(corpus.load(GPUS), tmp / name)


NODES: dict[str, Callable[[Path, str], Path]] = {
    "intact": _intact,
    "lost-gpu": _lost_gpu,
    "two-ports-down": _two_ports_down,
    "memlock-64k": _memlock_64k,
    "xml-only": _xml_only,
}


@dataclass(frozen=True)
class Scenario:
    node: str
    playbook: str  # a shipped name, or "expect:{...}" for gpu-training with that `expect:`
    baseline: str | None  # the node the baseline was recorded on (under another name)
    exit_code: int
    allowed: bool
    holds: Callable[[Doc], None] = lambda doc: None

    @property
    def id(self) -> str:
        return f"{self.node}-{self.playbook}-{self.baseline or 'nobaseline'}"


def fails(doc: Doc) -> list[tuple[str, str]]:
    return [(f["check_id"], f["subject"]) for f in doc["findings"] if f["status"] == "FAIL"]


def of(doc: Doc, check_id: str) -> list[Doc]:
    return [f for f in doc["findings"] if f["check_id"] == check_id]


def one_gpu_gone(doc: Doc) -> None:
    """One FAIL, the baseline's, for the GPU gone; nothing else from the baseline."""
    (gone,) = fails(doc)
    assert gone[0] == "baseline" and gone[1].startswith("GPU "), fails(doc)
    assert [f["subject"] for f in of(doc, "baseline")] == [gone[1]]


def no_fail_and_nothing_absent(doc: Doc) -> None:
    assert fails(doc) == []
    text = json.dumps(doc["findings"])
    assert "not present" not in text and "absent (no InfiniBand" not in text
    assert "not recorded: /sys/class/infiniband" in text  # the rdma rule says why it cannot judge


def unrecorded_is_not_gone(doc: Doc) -> None:
    """The baseline had 12 HCA ports and /proc/self/limits; this recording never held either: one
    UNKNOWN per place saying so, no HCA "gone", no FAIL."""
    assert fails(doc) == []
    gaps = {f["subject"]: (f["status"], f["summary"]) for f in of(doc, "baseline")}
    assert set(gaps) == {"/sys/class/infiniband", "/proc/self"}, gaps
    for place, (status, summary) in gaps.items():
        assert status == "UNKNOWN" and summary.startswith(f"not recorded: {place}, so "), summary
    assert "gone" not in json.dumps(of(doc, "baseline"))


def nothing_from_the_baseline(doc: Doc) -> None:
    assert [f["status"] for f in of(doc, "baseline")] == ["OK"], of(doc, "baseline")


def two_port_findings(doc: Doc) -> None:
    # Every problem about the two ports (the OK summary of the rate rule lists all twelve).
    about = [
        f
        for f in doc["findings"]
        if f["status"] != "OK" and ("mlx5_10" in json.dumps(f) or "mlx5_11" in json.dumps(f))
    ]
    assert sorted((f["check_id"], f["subject"], f["status"]) for f in about) == [
        ("rdma", "mlx5_10/1", "FAIL"),
        ("rdma", "mlx5_11/1", "FAIL"),
    ], [(f["check_id"], f["subject"], f["summary"]) for f in about]
    for f in about:  # the baseline's value is in the one finding, with the playbook's rule
        assert "the baseline has ACTIVE" in f["summary"] and "playbook gpu-training" in f["summary"]
        assert any(k.endswith("in intact.json") for k in f["evidence"]), f["evidence"]
    assert of(doc, "baseline") == []


def one_memlock_finding(doc: Doc) -> None:
    """The kernel check's, re-judged by gpu-training's rule: no second one from the playbook (or
    from the rdma check, which leaves the limit to the kernel check)."""
    about = [
        f
        for f in doc["findings"]
        if f["status"] not in ("OK", "SKIPPED") and ("memlock" in f["subject"] or "memlock" in f["summary"])
    ]
    assert [(f["check_id"], f["subject"], f["status"]) for f in about] == [("kernel", "memlock", "FAIL")]
    assert "playbook gpu-training: /proc/self/limits soft = 65536, expected unlimited" in about[0]["summary"]


def expected_gpus_short(doc: Doc) -> None:
    assert ("playbook", "hardware.gpus") in fails(doc)
    (short,) = [f for f in of(doc, "playbook") if f["subject"] == "hardware.gpus"]
    assert short["summary"] == "hardware.gpus = 3, expected >= 4"


# The intact node under each shipped playbook: what the recording holds is healthy, and what it
# does not hold (NUMA, THP, sysctls) is not recorded, never a fault. The K80 recording has GPUs with
# uncorrectable ECC errors over their lifetime and persistence mode off: WARN in the gpu check,
# which refuses no node at fail_on: fail (preflight exits 0 when the node may run the job).
SHIPPED = shipped_names()

SCENARIOS = [
    *(Scenario("intact", pb, None, 0, True) for pb in SHIPPED),
    *(Scenario("intact", pb, "intact", 0, True, nothing_from_the_baseline) for pb in SHIPPED),
    *(Scenario("lost-gpu", pb, "intact", 2, False, one_gpu_gone) for pb in SHIPPED),
    Scenario("lost-gpu", "expect:{gpus: 4}", None, 2, False, expected_gpus_short),
    Scenario("intact", "expect:{gpus: 4, rdma_hcas: 12, rdma_ports_active: 12}", None, 0, True),
    Scenario("xml-only", "gpu-training", None, 3, False, no_fail_and_nothing_absent),
    Scenario("xml-only", "gpu-training", "xml-only", 3, False, nothing_from_the_baseline),
    Scenario("xml-only", "preflight", "intact", 3, False, unrecorded_is_not_gone),
    Scenario("two-ports-down", "gpu-training", "intact", 2, False, two_port_findings),
    Scenario("memlock-64k", "gpu-training", None, 2, False, one_memlock_finding),
]


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every node once, and a baseline of each (recorded from a copy under another name, so that
    the recording's name is never part of what is compared)."""
    tmp = tmp_path_factory.mktemp("gate-matrix")
    out: dict[str, Path] = {}
    for name, build in NODES.items():
        tree = build(tmp, name)
        out[name] = tree
        other = tmp / f"{name}-then"
        shutil.copytree(tree, other, symlinks=True)
        saved = tmp / f"{name}.json"
        code, _, _ = run_cli("baseline", "save", str(saved), "--root", str(other))
        assert code == 0
        out[f"baseline:{name}"] = saved
    return out


def _playbook(spec: str, tmp: Path) -> str:
    if not spec.startswith("expect:"):
        return spec
    path = tmp / f"ours-{abs(hash(spec))}.yml"
    path.write_text(f"description: our nodes\ninclude: [gpu-training]\nexpect: {spec[len('expect:') :]}\n")
    return str(path)


@pytest.mark.parametrize("case", SCENARIOS, ids=lambda c: c.id)
def test_the_gate_gives_one_right_verdict(case: Scenario, farm: dict[str, Path], tmp_path: Path) -> None:
    argv = ["preflight", "--root", str(farm[case.node]), "--playbook", _playbook(case.playbook, tmp_path)]
    if case.baseline is not None:
        argv += ["--baseline", str(farm[f"baseline:{case.baseline}"])]
    code, out, _ = run_cli(*argv, "--format", "json")
    doc = json.loads(out)
    assert (code, doc["verdict"]["allowed"]) == (case.exit_code, case.allowed), (
        doc["verdict"],
        [
            (f["status"], f["check_id"], f["subject"], f["summary"])
            for f in doc["findings"]
            if f["status"] != "OK"
        ],
    )
    case.holds(doc)
    # The same run as Slurm reads it: nothing when the node may run the job, one line when not.
    code, reason, _ = run_cli(*argv, "--format", "slurm")
    assert code == case.exit_code
    if case.allowed:
        assert reason == ""
    else:
        assert reason.count("\n") == 1 and reason.startswith("nodeagent: ") and "check." not in reason
