"""Baselines (nodeagent.gate.baseline): saved from recorded trees, compared with the same tree, a modified
copy of it, and a fleet of copies where the majority decides; corrupt files are one-line errors."""

from __future__ import annotations

import dataclasses
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from nodeagent import checks, engine
from nodeagent.compare import fleet
from nodeagent.compare.fleet import Value
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, documents
from nodeagent.facts import node
from nodeagent.gate import baseline
from nodeagent.host import SnapshotHost
from tests.support.cli import RunCli
from tests.support.helpers import FIXTURE_TREES, SYSFS_FIXTURES, fixture_host
from tests.support.paths import VM

SWAPPINESS = "check.kernel.vm.swappiness./proc/sys/vm/swappiness"
MEMTOTAL = "memory.total_mib"


def tree(tmp_path: Path, name: str) -> Path:
    """The recorded VM extracted into tmp_path/name, named `name` (its nodeagent.json hostname)."""
    root = tmp_path / name
    root.mkdir()
    with tarfile.open(VM) as tar:
        tar.extractall(root, filter="tar")
    meta = root / "nodeagent.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "hostname": name}))
    return root


def values_of(source: Path, only: tuple[str, ...] = ()) -> dict[str, Value]:
    """What `nodeagent baseline save` and `check --baseline` compare: facts and findings, flattened."""
    host = SnapshotHost(source)
    report = engine.run_report(host, checks.select(list(only), []))
    return fleet.host_values(node.collect(host), documents(report.findings))


def set_swappiness(root: Path, value: int) -> None:
    (root / "proc/sys/vm/swappiness").write_text(f"{value}\n")


def scale_memtotal(root: Path, factor: float) -> int:
    """Multiply /proc/meminfo's MemTotal; the new value in kB."""
    meminfo = root / "proc/meminfo"
    text = meminfo.read_text()
    found = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    assert found is not None
    kb = int(found.group(1))
    new = int(kb * factor)
    meminfo.write_text(re.sub(r"^(MemTotal:\s+)\d+", rf"\g<1>{new}", text, count=1, flags=re.MULTILINE))
    return new


def warnings(findings: list[Finding]) -> dict[str, Finding]:
    return {f.subject: f for f in findings if f.status is Status.WARN}


@pytest.fixture(scope="module")
def vm_values() -> dict[str, Value]:
    return values_of(VM)


# --- One node --------------------------------------------------------------------------------------


def test_the_same_tree_compares_equal(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "good.json"
    baseline.save({"vm": vm_values}, path, "tests/data/firecracker-vm-2cpu.tar.gz")
    loaded = baseline.load(path)
    assert loaded.hosts == {"vm": vm_values}
    assert loaded.source.endswith("firecracker-vm-2cpu.tar.gz") and loaded.recorded_at != "?"
    again = values_of(VM)  # a second, independent run of the checks on the same tree
    found = baseline.compare(loaded, again, "vm")
    assert [f.status for f in found] == [Status.OK]
    assert found[0].check_id == "baseline" and found[0].host == "vm"
    assert "values as in the baseline" in found[0].summary


@pytest.mark.parametrize("name", ["16amd64-8n2c", "nvidiagpunumanodes"])
def test_an_hwloc_tree_compares_equal_with_itself(tmp_path: Path, name: str) -> None:
    archive = SYSFS_FIXTURES / f"{name}.tar.bz2"
    path = tmp_path / "b.json"
    baseline.save({name: values_of(archive)}, path, str(archive))
    found = baseline.compare(baseline.load(path), values_of(archive), name)
    assert [f.status for f in found] == [Status.OK]


def test_a_modified_tree_names_each_difference(tmp_path: Path) -> None:
    good = tree(tmp_path, "node1")
    path = tmp_path / "good.json"
    baseline.save({"node1": values_of(good)}, path, str(good))
    set_swappiness(good, 10)
    scale_memtotal(good, 0.9)  # a DIMM's worth of memory gone
    found = baseline.compare(baseline.load(path), values_of(good), "node1")
    warned = warnings(found)
    assert SWAPPINESS in warned and MEMTOTAL in warned
    swap = warned[SWAPPINESS]
    assert swap.check_id == "baseline" and swap.host == "node1"
    # The value now, and the baseline's beside it.
    assert swap.evidence == {SWAPPINESS: "10", f"{SWAPPINESS} in good.json": "60"}
    assert swap.expected.startswith("60") and "good.json" in swap.expected
    assert "is 10; the baseline has 60" in swap.summary
    # Nothing but what was changed (and what derives from it) differs.
    assert all(re.search(r"swappiness|mem|MemTotal", key, re.IGNORECASE) for key in warned), sorted(warned)
    assert not [f for f in found if f.status is Status.OK]


def test_memory_within_one_percent_is_the_same(tmp_path: Path) -> None:
    good = tree(tmp_path, "node1")
    path = tmp_path / "good.json"
    baseline.save({"node1": values_of(good)}, path, str(good))
    scale_memtotal(good, 0.997)  # a firmware or kernel update reserving a few MiB more
    found = baseline.compare(baseline.load(path), values_of(good), "node1")
    assert MEMTOTAL not in warnings(found)
    assert [f.status for f in found] == [Status.OK]


def test_only_checks_run_both_times_are_compared(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "good.json"
    baseline.save({"vm": vm_values}, path, "vm")
    kernel_only = values_of(VM, ("kernel",))
    assert not any(k.startswith("check.numa.") for k in kernel_only)
    found = baseline.compare(baseline.load(path), kernel_only, "vm")
    assert [f.status for f in found] == [Status.OK]
    # ... but a value of a check that ran both times is still compared.
    changed = {**kernel_only, SWAPPINESS: 1.0}
    assert list(warnings(baseline.compare(baseline.load(path), changed, "vm"))) == [SWAPPINESS]


def test_missing_and_new_keys(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "good.json"
    baseline.save({"vm": vm_values}, path, "vm")
    now = dict(vm_values)
    del now["topology.cores"]
    now["nics[eth9].mtu"] = 9000
    warned = warnings(baseline.compare(baseline.load(path), now, "vm"))
    # A new interface is one finding about the device, not one per field.
    assert set(warned) == {"topology.cores", "interface eth9"}
    assert warned["topology.cores"].evidence == {
        "topology.cores": "(absent)",
        "topology.cores in good.json": "2",
    }
    assert warned["topology.cores"].expected.startswith("2")
    assert warned["interface eth9"].summary == "interface eth9 new since the baseline"
    assert warned["interface eth9"].expected.startswith("absent")


def test_readings_statuses_and_prose_are_not_compared(tmp_path: Path) -> None:
    """A GPU's temperature and idle clocks change from minute to minute (fleet.host_values leaves
    them out); a finding's status is the check's own verdict; a check's sentence about what it saw
    is words, not a value. None makes a node differ from its baseline; a typed value (the power cap
    the gpu check reports as a value of its own) does."""
    where = "nvidia-smi -q -x: GPU0 0000:07:00.0"
    cap = "nvidia-smi -q -x: GPU0 power cap"

    def values(summary: str, status: str, temperature: str | None) -> dict[str, Value]:
        watts = re.search(r"(\d+) W cap", summary)
        evidence = {where: summary, **({cap: f"{watts.group(1)} W"} if watts else {})}
        findings: list[dict[str, Any]] = [
            {"check_id": "gpu", "subject": "gpus", "status": status, "evidence": evidence}
        ]
        if temperature is not None:
            evidence = {"nvidia-smi -q -x: GPU0 temperature": temperature}
            findings.append({"check_id": "gpu", "subject": "GPU0", "status": "OK", "evidence": evidence})
        return fleet.host_values(None, findings)

    then = values("NVIDIA A100-SXM4-80GB, 31 C, 400 W cap, ECC on, clocks: GPU idle", "OK", "80 C")
    path = tmp_path / "gpu.json"
    baseline.save({"gpu1": then}, path, "test")
    now = values("NVIDIA A100-SXM4-80GB, 44 C, 400 W cap, ECC on", "WARN", None)
    assert [f.status for f in baseline.compare(baseline.load(path), now, "gpu1")] == [Status.OK]
    capped = values("NVIDIA A100-SXM4-80GB, 44 C, 250 W cap, ECC on", "WARN", None)
    assert list(warnings(baseline.compare(baseline.load(path), capped, "gpu1"))) == [f"check.gpu.gpus.{cap}"]


def test_fewer_active_nvlinks_is_hardware_lost(tmp_path: Path) -> None:
    """The nvlink check's count of a GPU's active links ("18 of 18", as `nvidia-smi nvlink -s`
    shows them) lower than in the baseline is hardware lost: at the device level the caller gives
    (FAIL unless a playbook lowers it), where another changed value is a WARN."""
    where = "nvidia-smi nvlink -s: GPU3 active links"

    def values(active: str) -> dict[str, Value]:
        finding = {"check_id": "nvlink", "subject": "GPU3", "status": "OK", "evidence": {where: active}}
        return fleet.host_values(None, [finding])

    path = tmp_path / "nv.json"
    baseline.save({"gpu1": values("18 of 18")}, path, "test")
    (lost,) = baseline.compare(baseline.load(path), values("16 of 18"), "gpu1")
    assert (lost.status, lost.subject) == (Status.FAIL, f"check.nvlink.GPU3.{where}")
    assert "is 16 of 18; the baseline has 18 of 18" in lost.summary
    (more,) = baseline.compare(baseline.load(path), values("18 of 18"), "gpu1")
    assert more.status is Status.OK


# --- A fleet ---------------------------------------------------------------------------------------


def test_a_fleet_baseline_expects_the_majority(tmp_path: Path) -> None:
    roots = {name: tree(tmp_path, name) for name in ("node1", "node2", "node3")}
    set_swappiness(roots["node3"], 10)  # the odd one out when the baseline was recorded
    path = tmp_path / "fleet.json"
    baseline.save({name: values_of(root) for name, root in roots.items()}, path, "fleet")
    fleet_baseline = baseline.load(path)
    assert set(fleet_baseline.hosts) == {"node1", "node2", "node3"}
    # node1 is as the majority was; node3 still differs from it, and is told so.
    assert [f.status for f in baseline.compare(fleet_baseline, values_of(roots["node1"]), "node1")] == [
        Status.OK
    ]
    odd = warnings(baseline.compare(fleet_baseline, values_of(roots["node3"]), "node3"))
    assert list(odd) == [SWAPPINESS]
    assert odd[SWAPPINESS].expected.startswith("60 (on 2 of 3 baseline hosts)")
    # A new node joining with the majority's value passes.
    newcomer = tree(tmp_path, "node4")
    assert [f.status for f in baseline.compare(fleet_baseline, values_of(newcomer), "node4")] == [Status.OK]


def test_a_split_fleet_sets_no_expectation(tmp_path: Path) -> None:
    roots = {name: tree(tmp_path, name) for name in ("node1", "node2")}
    set_swappiness(roots["node2"], 10)
    path = tmp_path / "split.json"
    baseline.save({name: values_of(root) for name, root in roots.items()}, path, "fleet")
    split = baseline.load(path)
    assert SWAPPINESS in split.reference.unsettled
    set_swappiness(roots["node1"], 30)  # neither half's value: still nothing to compare it with
    found = baseline.compare(split, values_of(roots["node1"]), "node1")
    assert [f.status for f in found] == [Status.OK]
    assert "not compared" in found[0].summary


def test_fleet_memory_is_compared_with_the_median(tmp_path: Path) -> None:
    """Identical nodes differ by a few MiB of firmware reservations: no exact majority, but the
    median holds them together and a node missing a tenth of its memory stands out."""
    roots = {name: tree(tmp_path, name) for name in ("node1", "node2", "node3")}
    scale_memtotal(roots["node2"], 0.9995)
    scale_memtotal(roots["node3"], 1.0004)
    path = tmp_path / "fleet.json"
    baseline.save({name: values_of(root) for name, root in roots.items()}, path, "fleet")
    loaded = baseline.load(path)
    assert loaded.reference.expected[MEMTOTAL].median
    short = tree(tmp_path, "node4")
    scale_memtotal(short, 0.998)
    assert MEMTOTAL not in warnings(baseline.compare(loaded, values_of(short), "node4"))
    scale_memtotal(short, 0.9)
    warned = warnings(baseline.compare(loaded, values_of(short), "node4"))
    assert MEMTOTAL in warned and "median of 3 baseline hosts" in warned[MEMTOTAL].expected


# --- Files -----------------------------------------------------------------------------------------


def one_line_error(path: Path) -> str:
    with pytest.raises(UsageError) as e:
        baseline.load(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_corrupt_baseline_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text('{\n "version": 1,\n "hosts": {"a": {"x": 1,}}\n}\n')
    message = one_line_error(path)
    assert f"{path}:3: " in message and "not JSON" in message


def test_a_missing_baseline_says_how_to_record_one(tmp_path: Path) -> None:
    assert "nodeagent baseline save" in one_line_error(tmp_path / "nope.json")


def test_a_baseline_of_another_version_is_refused(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "b.json"
    baseline.save({"vm": vm_values}, path, "vm")
    doc = json.loads(path.read_text())
    doc["version"] = 99
    path.write_text(json.dumps(doc, indent=1))
    message = one_line_error(path)
    assert f"{path}:2: version: is 99" in message and f"reads version {baseline.VERSION}" in message


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (
            {"version": 1, "hosts": {"a": {"k": [1, 2]}}},
            ":5: hosts.a.k: must be a string, number, boolean or null",
        ),
        ({"version": 1, "hosts": {"a": 3}}, ":4: hosts.a: must be an object (got 3)"),
        ({"version": 1, "hosts": {}}, ":3: hosts: names no host"),
        ({"version": 1, "hosts": {"a": {"k": 1}}, "source": 7}, ":8: source: must be a string (got 7)"),
        ({"version": "1", "hosts": {"a": {}}}, ':2: version: must be an integer (got "1")'),
        ({"version": True, "hosts": {"a": {}}}, ":2: version: must be an integer (got true)"),
        ({"hosts": {"a": {}}}, ":1: version: is required"),
        ({"version": 1}, ":1: hosts: is required"),
        ([1, 2], ":1: not a nodeagent baseline"),
    ],
)
def test_a_malformed_baseline_names_the_line_and_field(tmp_path: Path, doc: object, where: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc, indent=1))
    assert f"{path}{where}" in one_line_error(path)


def test_a_baseline_of_another_tool_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(b"\x89PNG\r\n")
    assert "not UTF-8" in one_line_error(path)
    path.write_text("hosts: [a]\n")
    assert f"{path}:1: not a readable nodeagent baseline: not JSON" in one_line_error(path)


def test_a_baseline_saved_now_loads_as_it_was_written(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "b.json"
    values = {**vm_values, "odd.float": 1.5, "odd.none": None, "odd.bool": True}
    baseline.save({"vm": values}, path, "vm")
    doc = json.loads(path.read_text())
    assert list(doc) == ["version", "nodeagent", "recorded_at", "source", "hosts"]
    assert path.read_text() == json.dumps(doc, indent=1) + "\n"  # indent 1, keys in this order, as before
    loaded = baseline.load(path)
    assert loaded.hosts == {"vm": dict(sorted(values.items()))} and loaded.source == "vm"


def test_save_replaces_the_file_whole(tmp_path: Path, vm_values: dict[str, Value]) -> None:
    path = tmp_path / "b.json"
    path.write_text("old")
    baseline.save({"vm": vm_values, "vm2": vm_values}, path, "two")
    doc = json.loads(path.read_text())
    assert doc["version"] == baseline.VERSION and doc["nodeagent"] and doc["recorded_at"]
    assert sorted(doc["hosts"]) == ["vm", "vm2"] and doc["source"] == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]  # no temporary file left behind
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(UsageError, match="does not exist"):
        baseline.save({"vm": vm_values}, tmp_path / "no" / "b.json", "vm")
    with pytest.raises(UsageError, match="no host"):
        baseline.save({}, path, "none")


@pytest.mark.parametrize("tree", FIXTURE_TREES)
def test_node_facts_are_the_records_as_asdict_gives_them(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts document converts its records without dataclasses.asdict's deep copy, to the same
    dicts and lists."""
    fast = node.collect(fixture_host(tree))
    monkeypatch.setattr(node, "_plain", dataclasses.asdict)
    assert fast == node.collect(fixture_host(tree))


# --- baseline save --cluster --limit ------------------------------------------------------------


def refusing_inventory(tmp_path: Path) -> Path:
    """Two hosts whose SSH port refuses at once (nothing listens on port 1): every pull fails, and
    the error names the hosts that were asked."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    hosts = [{"name": name, "host": "127.0.0.1", "port": 1} for name in ("gpu01", "gpu02")]
    inv = tmp_path / "hosts.yml"
    defaults = {"known_hosts": str(known), "connect_timeout": 2, "command_timeout": 5}
    inv.write_text(json.dumps({"defaults": defaults, "hosts": hosts}))  # JSON is YAML
    return inv


@pytest.mark.parametrize(("limit", "asked"), [([], "gpu01, gpu02"), (["--limit", "gpu02"], "gpu02")])
def test_baseline_save_of_a_fleet_takes_limit_as_check_does(
    tmp_path: Path, run_cli: RunCli, limit: list[str], asked: str
) -> None:
    out = tmp_path / "fleet.json"
    code, _, err = run_cli(
        "baseline", "save", str(out), "--cluster", str(refusing_inventory(tmp_path)), *limit
    )
    assert code == 64 and not out.exists()
    assert f"no result from {asked}: a baseline needs every host" in err


def test_baseline_save_limit_without_an_inventory_is_one_line(tmp_path: Path, run_cli: RunCli) -> None:
    code, _, err = run_cli("baseline", "save", str(tmp_path / "b.json"), "--limit", "gpu01")
    assert code == 64
    assert err == "nodeagent: error: --limit selects from an inventory file: give --cluster FILE too\n"
