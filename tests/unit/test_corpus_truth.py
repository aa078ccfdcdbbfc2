"""Truth on machines nobody here made: every recording of tests/fixtures/corpus, facts and checks.

For each recording (see tests/support/corpus.py and tests/fixtures/corpus/FORMAT.md): `facts` and every
check run without an exception; every value the source data shows (`expect` in recording.yml,
read from the raw file, never from nodeagent) equals what nodeagent reads; and no FAIL is raised
that the source does not show as a fault (`verdicts.faults`, each of which must be reported), nor a
FAIL (and, where the entry
says `no_warn`, a WARN) about what the source shows to be by design (`verdicts.by_design`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nodeagent import checks, engine
from nodeagent.core import parse
from nodeagent.core.finding import Finding, Status
from nodeagent.engine import Report
from nodeagent.facts import gpu_report, gpus, network, node, nvml, ranks, system, topology
from nodeagent.host import SnapshotHost
from tests.support import corpus

NAMES = corpus.names()
CHECK_IDS = {c.id for c in checks.all_checks()}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def _host(name: str, trees: Path) -> tuple[corpus.Recording, SnapshotHost]:
    rec = corpus.load(name)
    dest = trees / name
    if not dest.exists():
        corpus.build_tree(rec, dest)
    return rec, SnapshotHost(dest)


def test_the_corpus_is_large_enough() -> None:
    assert len(NAMES) >= 40


def test_the_fixtures_readme_lists_every_recording() -> None:
    assert corpus.README.read_text() == corpus.readme(), "run: python -m tests.support.corpus --readme"


@pytest.mark.parametrize("name", NAMES)
def test_recording_names_its_source(name: str) -> None:
    rec = corpus.load(name)
    assert rec.source.licence
    assert rec.source.repository or rec.source.url, "a repository or a URL"
    if rec.source.repository and not rec.source.url:
        assert rec.source.path and rec.source.commit, "a repository file needs its path and commit"
    for file in rec.files.values():
        assert (rec.folder / file).exists(), file
    for verdict in rec.verdicts.faults:
        assert verdict.check in CHECK_IDS, f"faults name checks by id: {verdict.check}"


@pytest.mark.parametrize("name", NAMES)
def test_truth(name: str, trees: Path) -> None:
    rec, host = _host(name, trees)
    node.collect(host)  # no exception
    report = engine.run_report(host, checks.all_checks())
    crashed = [f for f in report.findings if "exception" in f.evidence]
    assert not crashed, [(f.check_id, f.summary) for f in crashed]
    host.refresh()
    for kind, compare in _COMPARE.items():
        if kind in rec.files:
            compare(rec.expect, host)
    _compare_tree(rec.expect, host)
    _verdicts(rec, report)


# -- expected facts ------------------------------------------------------------------------------


def _smi_log(expect: dict[str, Any], host: SnapshotHost) -> None:
    report = nvml.collect(host)
    assert report.error is None, report.error
    if "driver_version" in expect:
        assert report.driver_version == expect["driver_version"]
    if expect.get("cuda_version") not in (None, "Not Found"):
        assert report.cuda_version == expect["cuda_version"]
    want = expect.get("gpus", [])
    assert len(report.gpus) == len(want), "GPU count"
    for got, gpu in zip(report.gpus, want, strict=True):
        assert got.pci_address == gpu_report.normalize_bus_id(gpu["bus_id"])
        _equal(gpu, "name", got.name)
        _equal(gpu, "ecc_current", got.ecc_enabled)
        _equal(gpu, "persistence", got.persistence_mode)
        _equal(gpu, "volatile_uncorrectable", got.volatile_uncorrectable)
        _equal(gpu, "mig_current", got.mig_current)
        _equal(gpu, "mig_pending", got.mig_pending)
        pcie = got.pcie or gpu_report.PcieLink()
        for key in ("gen_max", "gen_current", "width_max", "width_current"):
            _equal(gpu, f"pcie_{key}", getattr(pcie, key))
        if "mig_instances" in gpu:
            assert len(got.mig_instances) == gpu["mig_instances"], "MIG instances"
    # facts and checks agree: `facts` lists the GPUs that -q -x shows when sysfs has none
    assert len(gpus.collect(host)) >= len(want) or not want


def _equal(expect: dict[str, Any], key: str, got: object) -> None:
    if key in expect:
        assert got == expect[key], f"{key}: nodeagent {got!r}, source {expect[key]!r}"


def _topo(expect: dict[str, Any], host: SnapshotHost) -> None:
    matrix, why = gpus.topo_matrix(host)
    if expect.get("partial"):
        return
    assert matrix is not None, why
    if "gpus" in expect:
        assert matrix.gpus == expect["gpus"]
    if "nics" in expect:
        assert matrix.nics == expect["nics"]
    for gpu, cells in (expect.get("affinity") or {}).items():
        if "cpus" in cells:
            want = None if cells["cpus"] is None else parse.cpulist(str(cells["cpus"]))
            assert matrix.cpu_affinity.get(gpu) == want, f"{gpu} CPU Affinity"
        if "numa" in cells:
            assert matrix.numa_affinity.get(gpu) == cells["numa"], f"{gpu} NUMA Affinity"
    for gpu, value in (expect.get("gpu_numa_id") or {}).items():
        assert matrix.gpu_numa_id.get(gpu) == value, f"{gpu} GPU NUMA ID"
    for row, cells in (expect.get("links") or {}).items():
        for column, cell in cells.items():
            assert matrix.link(row, column) == cell, f"{row}-{column}"
    _pinning(expect, host)


def _pinning(expect: dict[str, Any], host: SnapshotHost) -> None:
    """One rank per GPU, pinned to exactly the CPUs the driver lists for it; none where it lists none
    (pinning never invents CPUs)."""
    affinity = expect.get("affinity") or {}
    if not affinity or any("cpus" not in cells for cells in affinity.values()):
        return
    slots = ranks.layout(host).slots
    assert [s.gpu for s in slots] == list(affinity), "one rank per GPU"
    for slot in slots:
        cpus = affinity[slot.gpu]["cpus"]
        assert sorted(slot.cpus) == ([] if cpus is None else parse.cpulist(str(cpus))), f"{slot.gpu} pinning"


def _nvlink(expect: dict[str, Any], host: SnapshotHost) -> None:
    report = nvml.collect(host)
    by_index = {g.index: g for g in report.gpus}
    for index, want in (expect.get("nvlink") or {}).items():
        got = by_index.get(int(index))
        if got is None:  # a recording of nvlink -s alone: no -q -x to name the GPUs
            continue
        links = got.nvlinks
        assert len(links) == want["links"], f"GPU{index} links"
        assert sum(1 for x in links if x.active) == want["active"], f"GPU{index} active"
        assert sum(1 for x in links if x.active is False) == want["inactive"], f"GPU{index} inactive"


def _ports(expect: dict[str, Any], host: SnapshotHost) -> None:
    ports = {f"{p.device}/{p.port}": p for p in network.collect_rdma(host)}
    for key, want in (expect.get("ports") or expect.get("ib_ports") or {}).items():
        got = ports.get(key)
        assert got is not None, f"{key} not found in {sorted(ports)}"
        _equal(want, "state", got.state)
        _equal(want, "phys_state", got.phys_state)
        _equal(want, "link_layer", got.link_layer)
        if "rate_gbps" in want:
            assert got.rate_gbps == pytest.approx(want["rate_gbps"]), f"{key} rate"
        if "width" in want:
            assert getattr(got, "width", None) == want["width"], f"{key} width"


def _compare_tree(expect: dict[str, Any], host: SnapshotHost) -> None:
    if "cpus_online" in expect:
        assert len(topology.collect(host).cpus_online) == expect["cpus_online"], "online CPUs"
    if "numa_nodes" in expect:
        t = topology.collect(host)
        ids = sorted(n.id for n in t.numa_nodes) + [g.id for g in t.gpu_memory_nodes]
        assert sorted(ids) == expect["numa_nodes"], "NUMA nodes"
    if "nics" in expect and isinstance(expect["nics"], dict):
        nics = {n.name: n for n in network.collect_nics(host)}
        for name, want in expect["nics"].items():
            assert name in nics, f"NIC {name} not in {sorted(nics)}"
            _equal(want, "mtu", nics[name].mtu)
            if "speed_mbps" in want:
                assert nics[name].speed_mbps == want["speed_mbps"], f"{name} speed"
    if "ib_ports" in expect:
        _ports(expect, host)
    if "virtual" in expect:
        facts = system.collect(host)
        assert bool(facts.virtual) == expect["virtual"], facts.virtual
        hint = expect.get("hypervisor_hint")
        if hint and facts.dmi:
            assert hint in facts.dmi.values(), facts.dmi


_COMPARE = {
    "nvidia-smi -q -x": _smi_log,
    "nvidia-smi topo -m": _topo,
    "nvidia-smi nvlink -s": _nvlink,
    "ibstat": _ports,
    "ibv_devinfo": _ports,
}


# -- verdicts ------------------------------------------------------------------------------------


def _about(f: Finding, subject: str | None) -> bool:
    if subject is None:
        return True
    if re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d", subject):
        subject = gpu_report.normalize_bus_id(subject)  # nvidia-smi's 8-digit domain, sysfs's 4
    device = re.split(r"[/:]", subject)[0]
    text = " ".join([f.subject, f.summary, *f.evidence])
    return subject in text or device in text


def _verdicts(rec: corpus.Recording, report: Report) -> None:
    faults = rec.verdicts.faults
    unexplained = [
        (f.check_id, f.subject, f.summary)
        for f in report.findings
        if f.status is Status.FAIL and not any(v.check == f.check_id and _about(f, v.subject) for v in faults)
    ]
    assert not unexplained, f"FAIL without a fault in the source: {unexplained}"
    for v in faults:
        seen = [f for f in report.findings if f.check_id == v.check and _about(f, v.subject)]
        assert any(f.status in (Status.WARN, Status.FAIL, Status.UNKNOWN) for f in seen), (
            f"the source shows a fault nodeagent does not report ({v.why}): "
            f"{[(f.status.value, f.summary) for f in seen]}"
        )
    for v in rec.verdicts.by_design:
        flagged = [
            (f.status.value, f.subject, f.summary)
            for f in report.findings
            if f.check_id == v.check
            and (f.status is Status.FAIL or (v.no_warn and f.status is Status.WARN))
            and _about(f, v.subject)
            and not any(x.check == f.check_id and _about(f, x.subject) for x in faults)
        ]
        assert not flagged, f"flagged what the source shows is by design ({v.why}): {flagged}"
