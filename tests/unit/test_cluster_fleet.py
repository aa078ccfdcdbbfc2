"""The fleet comparison: drift from the majority and median/MAD outliers, on hosts built from a real
recorded machine (hwloc's 40intel64-2g2n4c+pcilocality tree: a 4-socket Dell R910 with an
InfiniBand HCA) with the natural differences of a real fleet (names, pids, counters, UUIDs)."""

from __future__ import annotations

import copy
import json
import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rich.console import Console

from nodeagent import engine
from nodeagent.checks import all_checks
from nodeagent.compare.fleet import (
    THRESHOLD,
    Drift,
    Outlier,
    Value,
    abbreviate,
    compare,
    host_values,
    outliers_in,
    parse_number,
)
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import documents
from nodeagent.facts import node
from nodeagent.render.fleet import render_table
from tests.support.helpers import fixture_host

MACHINE = "40intel64-2g2n4c+pcilocality"
HOSTS = [f"node{i:02d}" for i in range(1, 7)]
ODD = "node06"
Recorded = tuple[dict[str, Any], list[dict[str, Any]]]
Edit = Callable[[dict[str, Any], list[dict[str, Any]]], None]

GOVERNOR = "check.cstates.cpuidle./sys/devices/system/cpu/cpuidle/current_governor"
NR_HUGEPAGES = "check.hugepages.hugepages-2048kB./sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
ETH0_SPEED = "check.nic.eth0./sys/class/net/eth0/speed"
RX_PACKETS = "/sys/class/net/eth0/statistics/rx_packets"


@pytest.fixture(scope="module")
def recorded() -> Recorded:
    """The machine's facts document and the findings of every check, as the cluster runner gets them."""
    host = fixture_host(MACHINE)
    facts = node.collect(host)
    findings = documents(f for r in engine.run(host, all_checks()) for f in r.findings)
    return facts, findings


def _uuid(n: int) -> str:
    return f"{n:08x}-1f2e-4d3c-8b4a-{n:012x}"


def fleet_host(name: str, recorded: Recorded, edit: Edit | None = None) -> dict[str, Value]:
    """The recorded machine as host `name` of a fleet: what differs between identical nodes by
    nature (its name quoted in messages, the moment's free memory and counters, serial numbers,
    UUIDs, a container's veth, the checker's own pid) differs, everything else is the same."""
    n = int(name.removeprefix("node"))
    # JSON, as the runner receives it over SSH; each host quotes its own name where the recording did.
    facts, findings = json.loads(json.dumps(recorded).replace(MACHINE, name))
    facts["source"] = "ssh"
    facts["started"] = 1_700_000_000.0 + n
    facts["memory"]["available_mib"] = 400_000 + 37 * n
    facts["kernel"]["release"] = "5.15.0-91-generic"
    facts["kernel"]["cmdline"] = f"root=UUID={_uuid(n)} ro quiet intel_idle.max_cstate=1"
    facts["dmi"]["product_serial"] = f"SN{n:06d}"
    facts["dmi"]["product_uuid"] = _uuid(n)
    facts["nics"].append({"name": f"veth{n:x}a9c", "mtu": 1500, "operstate": "up", "driver": "veth"})
    for pool in facts["hugepages"]["pools"]:
        pool["free"] = pool["total"] - n % 3
    for f in findings:
        if RX_PACKETS in f["evidence"]:
            f["evidence"][RX_PACKETS] = str(3_849_028_801 + 1000 * n)
    pid = 4000 + n
    findings.append(
        {
            "check_id": "threads",
            "host": name,
            "status": "WARN",
            "subject": f"pid {pid}",
            "summary": f"pid {pid} (python) runs 300 threads on 40 CPUs",
            "evidence": {f"/proc/{pid}/status Threads": "300", f"/proc/{pid}/cmdline": "python train.py"},
        }
    )
    if edit is not None:
        edit(facts, findings)
    return host_values(facts, findings)


def fleet(recorded: Recorded, edits: Mapping[str, Edit] | None = None) -> dict[str, dict[str, Value]]:
    return {h: fleet_host(h, recorded, (edits or {}).get(h)) for h in HOSTS}


def _evidence(findings: list[dict[str, Any]], check_id: str, subject: str) -> dict[str, Any]:
    found = [f for f in findings if f["check_id"] == check_id and f["subject"] == subject]
    assert len(found) == 1, [(f["check_id"], f["subject"]) for f in findings]
    evidence: dict[str, Any] = found[0]["evidence"]
    return evidence


# --- host_values on the recorded machine -----------------------------------------------------------


def test_recorded_machine_flattens_to_the_documented_keys(recorded: Recorded) -> None:
    v = fleet_host("node01", recorded)
    assert v["topology.numa_nodes[0].memory_mib"] == 131059
    assert v["topology.numa_nodes[1].cpus"] == "1,5,9,13,17,21,25,29,33,37"
    assert v["topology.numa_nodes[0].distances.1"] == 20
    assert v["nics[eth0].speed_mbps"] == 1000
    assert v["nics[eth0].driver"] == "bnx2"
    assert v["rdma[qib0].rate_gbps"] == 40.0
    assert v["hugepages.pools[2048].total"] == 0
    assert v["dmi.bios_version"] == "2.5.0"
    assert v["kernel.cmdline.intel_idle.max_cstate"] == "1"
    assert v["kernel.cmdline.quiet"] is True
    # Evidence: numbers parsed, units normalised, statuses kept.
    assert v[ETH0_SPEED] == 1000.0
    assert v["check.rdma.qib0/1./sys/class/infiniband/qib0/ports/1/rate"] == 40e9  # "40 Gb/sec (4X QDR)"
    assert v[GOVERNOR] == "menu"
    assert v["check.nic.eth0.status"] == "WARN"
    assert v["check.cstates.cpuidle.status"] == "OK"
    # The host's own name, quoted in a message, is the same placeholder on every host.
    assert v["check.gpu.gpus.nvidia-smi -q -x"] == "nvidia-smi: not recorded in snapshot <host>.tar.bz2"


def test_what_differs_by_nature_is_left_out(recorded: Recorded) -> None:
    keys = list(fleet_host("node03", recorded))
    for gone in (
        "host",
        "source",
        "started",
        "memory.available_mib",
        "dmi.product_serial",
        "dmi.product_uuid",
        "kernel.cmdline.root",
        "hugepages.pools[2048].free",
    ):
        assert gone not in keys
    for fragment in ("rx_packets", "veth", "pid 400", "/proc/400", "free_hugepages", "node03"):
        assert not [k for k in keys if fragment in k], fragment


def test_identical_nodes_differing_only_by_nature_show_no_drift(recorded: Recorded) -> None:
    cmp = compare(fleet(recorded))
    assert cmp.hosts == 6
    assert cmp.drift == []
    assert cmp.outliers == []


# --- drift -----------------------------------------------------------------------------------------


def _odd_node(facts: dict[str, Any], findings: list[dict[str, Any]]) -> None:
    facts["kernel"]["release"] = "5.15.0-88-generic"
    facts["hugepages"]["pools"][0]["total"] = 1024
    facts["hugepages"]["pools"][0]["free"] = 1024
    facts["nics"][0]["speed_mbps"] = 100
    _evidence(findings, "hugepages", "hugepages-2048kB")[
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
    ] = "1024"
    _evidence(findings, "nic", "eth0")["/sys/class/net/eth0/speed"] = "100"
    _evidence(findings, "cstates", "cpuidle")["/sys/devices/system/cpu/cpuidle/current_governor"] = "ladder"


def test_one_changed_node_is_exactly_the_drift(recorded: Recorded) -> None:
    cmp = compare(fleet(recorded, {ODD: _odd_node}))
    expected: dict[str, tuple[Value, Value]] = {
        "kernel.release": ("5.15.0-91-generic", "5.15.0-88-generic"),
        "hugepages.pools[2048].total": (0, 1024),
        "nics[eth0].speed_mbps": (1000, 100),
        NR_HUGEPAGES: (0.0, 1024.0),
        ETH0_SPEED: (1000.0, 100.0),
        GOVERNOR: ("menu", "ladder"),
    }
    assert {d.key: (d.majority, d.majority_hosts, d.hosts) for d in cmp.drift} == {
        key: (majority, 5, {ODD: odd}) for key, (majority, odd) in expected.items()
    }
    assert [d.key for d in cmp.drift] == sorted(expected)
    # One node among five equal ones: MAD is 0, so these are drift, not outliers.
    assert cmp.outliers == []


def test_a_fleet_split_in_halves_lists_every_host(recorded: Recorded) -> None:
    def always(facts: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        facts["hugepages"]["thp_enabled"] = "always"

    def madvise(facts: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        facts["hugepages"]["thp_enabled"] = "madvise"

    edits = {h: always if i < 3 else madvise for i, h in enumerate(HOSTS)}
    cmp = compare(fleet(recorded, edits))
    assert cmp.drift == [
        Drift(
            key="hugepages.thp_enabled",
            majority=None,
            majority_hosts=0,
            hosts={h: "always" if i < 3 else "madvise" for i, h in enumerate(HOSTS)},
        )
    ]
    # Four against two is a majority: only the two are named.
    edits = {h: always if i < 4 else madvise for i, h in enumerate(HOSTS)}
    (drift,) = compare(fleet(recorded, edits)).drift
    assert (drift.majority, drift.majority_hosts, drift.hosts) == (
        "always",
        4,
        {"node05": "madvise", ODD: "madvise"},
    )


def test_a_missing_interface_is_drift_with_none(recorded: Recorded) -> None:
    def no_ib0(facts: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        facts["nics"] = [n for n in facts["nics"] if n["name"] != "ib0"]

    values = fleet(recorded, {ODD: no_ib0})
    cmp = compare(values)
    present = {k: v for k, v in values["node01"].items() if k.startswith("nics[ib0].")}
    assert "nics[ib0].mtu" in present
    # A key the majority has as None (ib0's unknown speed) is no different from a missing one.
    assert {d.key for d in cmp.drift} == {k for k, v in present.items() if v is not None}
    for d in cmp.drift:
        assert (d.majority, d.majority_hosts, d.hosts) == (present[d.key], 5, {ODD: None})


def test_a_key_only_one_host_has_is_not_compared() -> None:
    values: dict[str, dict[str, Value]] = {h: {"a": 1} for h in HOSTS}
    values[ODD]["only-here"] = "x"
    assert compare(values).drift == []
    values["node05"]["only-here"] = "x"
    (drift,) = compare(values).drift
    assert (drift.majority, drift.majority_hosts) == (None, 4)
    assert drift.hosts == {"node05": "x", ODD: "x"}


def test_true_one_and_text_one_are_different_values() -> None:
    values: dict[str, dict[str, Value]] = {"a": {"k": True}, "b": {"k": 1}, "c": {"k": "1"}, "d": {"k": 1.0}}
    (drift,) = compare(values).drift
    assert drift.majority_hosts == 0  # 1 and 1.0 agree (2 of 4): no strict majority
    values["e"] = {"k": 1}
    (drift,) = compare(values).drift
    assert (drift.majority, drift.majority_hosts, drift.hosts) == (1, 3, {"a": True, "c": "1"})


# --- outliers --------------------------------------------------------------------------------------


def _row(o: Outlier) -> tuple[str, str, float, float, float, float, str]:
    return (o.key, o.host, o.value, o.median, o.mad, round(o.score, 1), o.direction)


def test_a_node_with_a_tenth_of_the_memory_is_a_low_outlier(recorded: Recorded) -> None:
    totals = dict(zip(HOSTS, [517020, 517012, 517028, 517020, 517016, 51702], strict=True))

    def memory(mib: int) -> Edit:
        def edit(facts: dict[str, Any], findings: list[dict[str, Any]]) -> None:
            facts["memory"]["total_mib"] = mib

        return edit

    cmp = compare(fleet(recorded, {h: memory(mib) for h, mib in totals.items()}))
    # median (517016 + 517020) / 2 = 517018; deviations 2, 6, 10, 2, 2, 465316 -> MAD (2 + 6) / 2 = 4
    # score 0.6745 * (51702 - 517018) / 4 = -78463.9105
    assert [_row(o) for o in cmp.outliers] == [
        ("memory.total_mib", ODD, 51702.0, 517018.0, 4.0, -78463.9, "low")
    ]
    (drift,) = cmp.drift  # no two-thirds agree on these: all of them listed
    assert (drift.key, drift.majority_hosts, drift.hosts) == ("memory.total_mib", 0, totals)


def test_bandwidth_low_and_latency_high() -> None:
    bandwidth = {"h1": 100.0, "h2": 101.0, "h3": 99.0, "h4": 100.5, "h5": 10.0}
    # median 100, deviations 0, 1, 1, 0.5, 90 -> MAD 1; score 0.6745 * (10 - 100) / 1
    assert [_row(o) for o in outliers_in(bandwidth, "bw")] == [("bw", "h5", 10.0, 100.0, 1.0, -60.7, "low")]
    latency = {"h1": 2.0, "h2": 2.1, "h3": 1.9, "h4": 2.05, "h5": 9.0}
    (slow,) = outliers_in(latency, "lat")
    assert (slow.host, slow.direction, slow.median, round(slow.mad, 9)) == ("h5", "high", 2.05, 0.05)
    assert round(slow.score, 6) == round(0.6745 * (9.0 - 2.05) / 0.05, 6)
    # median 10, MAD 1: a host scoring 3 is within the 3.5 cut-off, one scoring 6 is not.
    near = {"a": 10.0, "b": 11.0, "c": 9.0, "e": 10.0}
    assert outliers_in(near | {"d": 10.0 + 3 / 0.6745}, "x") == []
    assert [o.host for o in outliers_in(near | {"d": 10.0 + 6 / 0.6745}, "x")] == ["d"]


def test_fewer_than_min_hosts_gives_no_outlier() -> None:
    assert outliers_in({"a": 1.0, "b": 1000.0}, "k") == []
    four = {"a": 1.0, "b": 1.1, "c": 0.9, "d": 1000.0}
    assert [o.host for o in outliers_in(four, "k")] == ["d"]
    assert outliers_in(four, "k", min_hosts=5) == []
    values: dict[str, dict[str, Value]] = {h: {"k": x} for h, x in four.items()}
    assert compare(values, min_hosts=5).outliers == []
    assert [o.host for o in compare(values).outliers] == ["d"]


def test_mad_zero_is_drift_not_an_outlier() -> None:
    samples = dict.fromkeys(HOSTS[:5], 8.0) | {ODD: 0.0}
    assert outliers_in(samples, "gpus") == []
    cmp = compare({h: {"gpus": int(x)} for h, x in samples.items()})
    assert cmp.outliers == []
    assert cmp.drift == [Drift(key="gpus", majority=8, majority_hosts=5, hosts={ODD: 0})]


def test_non_finite_and_non_numeric_values_are_not_measured() -> None:
    values: dict[str, dict[str, Value]] = {
        "a": {"k": 1.0},
        "b": {"k": 1.1},
        "c": {"k": 0.9},
        "d": {"k": math.inf},
        "e": {"k": "1000"},
        "f": {"k": True},
    }
    assert compare(values).outliers == []
    assert outliers_in({"a": 1.0, "b": math.nan, "c": 2.0}, "k") == []


@pytest.mark.parametrize(
    "kwargs", [{"threshold": 0.0}, {"threshold": -3.5}, {"threshold": math.nan}, {"min_hosts": 0}]
)
def test_bad_parameters_are_a_usage_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="fleet comparison"):
        compare({"a": {"k": 1}}, **kwargs)
    with pytest.raises(UsageError, match="fleet comparison"):
        outliers_in({"a": 1.0}, "k", **kwargs)


# --- host_values on hand-built documents -----------------------------------------------------------


def test_lists_are_keyed_by_identity() -> None:
    facts = {
        "host": "gpu07",
        "pci": [
            {"address": "0000:3b:00.0", "device": "0x20b0", "speed_gts": 16.0, "local_cpus": [0, 1, 2]},
            {"address": "0000:5e:00.0", "device": "0x101b", "speed_gts": 8.0, "local_cpus": []},
        ],
        "rdma": [
            {"device": "mlx5_0", "port": 1, "state": "ACTIVE"},
            {"device": "mlx5_0", "port": 2, "state": "DOWN"},
        ],
        "gpus": [{"index": None, "pci_address": "0000:3b:00.0", "vendor": "NVIDIA"}],
        "hugepages": {"pools": [{"size_kb": 1048576, "total": 8}]},
        "matrix": [[1, 2], [3, 4]],
        "notes": ["a", "b"],
    }
    assert host_values(facts, []) == {
        "pci[0000:3b:00.0].device": "0x20b0",
        "pci[0000:3b:00.0].speed_gts": 16.0,
        "pci[0000:3b:00.0].local_cpus": "0,1,2",
        "pci[0000:5e:00.0].device": "0x101b",
        "pci[0000:5e:00.0].speed_gts": 8.0,
        "pci[0000:5e:00.0].local_cpus": "",
        "rdma[mlx5_0/1].state": "ACTIVE",
        "rdma[mlx5_0/2].state": "DOWN",
        "gpus[0000:3b:00.0].vendor": "NVIDIA",
        "gpus[0000:3b:00.0].index": None,
        "hugepages.pools[1048576].total": 8,
        "matrix[0]": "1,2",
        "matrix[1]": "3,4",
        "notes": "a,b",
        # Counted from the lists above (nodeagent.compare.hardware): 1 GPU, 1 HCA with 2 ports, 1 ACTIVE.
        "hardware.gpus": 1,
        "hardware.gpu_models[NVIDIA]": 1,
        "hardware.rdma_hcas": 1,
        "hardware.rdma_ports": 2,
        "hardware.rdma_ports_active": 1,
    }


def test_entries_without_identity_are_keyed_by_position() -> None:
    assert host_values({"x": [{"v": 1}, {"v": 2}], "y": [{"name": "a"}, {"name": "a"}]}, []) == {
        "x[0].v": 1,
        "x[1].v": 2,
        "y[0].name": "a",
        "y[1].name": "a",
    }


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("1000", 1000.0),
        (" -1 ", -1.0),
        ("2.5", 2.5),
        ("2048 kB", 2048 * 1024.0),
        ("80 GiB", 80 * 1024.0**3),
        ("16 GT/s", 16e9),
        ("1000 Mb/s", 1e9),
        ("40 Gb/sec (4X QDR)", 40e9),
        ("512 (free 3)", 512.0),
        ("20 us", 20e-6),
        ("0-39", None),
        ("0,4,8", None),
        ("2.5.0", None),
        ("10/26/2011", None),
        ("0x10de", None),
        ("4X", None),
        ("up", None),
        ("unknown (-1 or absent)", None),
        ("MemTotal 131059 MiB", None),
        ("", None),
    ],
)
def test_evidence_numbers(text: str, number: float | None) -> None:
    assert parse_number(text) == (pytest.approx(number) if number is not None else None)


def test_findings_flatten_with_the_worst_status_and_a_dash_for_no_subject() -> None:
    findings = [
        {
            "check_id": "gpu",
            "host": "n1",
            "status": "FAIL",
            "subject": "GPU0",
            "summary": "ECC",
            "evidence": {"e": "3"},
        },
        {
            "check_id": "gpu",
            "host": "n1",
            "status": "OK",
            "subject": "GPU0",
            "summary": "ok",
            "evidence": {"t": "x"},
        },
        {
            "check_id": "kernel",
            "host": "n1",
            "status": "OK",
            "subject": "",
            "summary": "",
            "evidence": {"k": " on "},
        },
    ]
    values = host_values(None, findings)
    assert values == {
        "check.gpu.GPU0.e": 3.0,
        "check.gpu.GPU0.t": "x",
        "check.gpu.GPU0.status": "FAIL",
        "check.kernel.-.k": "on",
        "check.kernel.-.status": "OK",
    }
    assert host_values(None, list(reversed(findings))) == values


def test_host_names_are_replaced_only_as_whole_words() -> None:
    facts = {"host": "gpu1", "a": "ssh gpu1: refused", "b": "gpu10 is a neighbour", "c": "gpu1.tar.bz2"}
    assert host_values(facts, []) == {
        "a": "ssh <host>: refused",
        "b": "gpu10 is a neighbour",
        "c": "<host>.tar.bz2",
    }


# --- properties ------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-10, 10, allow_nan=False),
    st.text("ab", max_size=2),
)
host_names = st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=9, unique=True)
# Multiples of 1/8 up to 1e6: exact in binary, so scaling by a power of two is exact too.
measurements = st.one_of(st.integers(0, 20), st.integers(-8 * 10**6, 8 * 10**6).map(lambda i: i / 8))


@settings(max_examples=150, deadline=None)
@given(
    hosts=host_names, shared=st.dictionaries(st.text("xyz", min_size=1, max_size=3), scalars), data=st.data()
)
def test_keys_equal_on_every_host_never_drift(
    hosts: list[str], shared: dict[str, Value], data: st.DataObject
) -> None:
    values: dict[str, dict[str, Value]] = {}
    for h in hosts:
        own = data.draw(st.dictionaries(st.sampled_from(["r.1", "r.2", "r.3"]), scalars))
        values[h] = {**{f"same.{k}": v for k, v in shared.items()}, **own}
    cmp = compare(values)
    assert not [d for d in cmp.drift if d.key.startswith("same.")]
    for d in cmp.drift:
        assert d.hosts
        if d.majority_hosts:
            assert 2 * d.majority_hosts > len(hosts)
            assert len(d.hosts) == len(hosts) - d.majority_hosts
        else:
            assert set(d.hosts) == set(hosts)


def _as_fleet(samples: list[float | int], order: list[int]) -> dict[str, dict[str, Value]]:
    # Two keys, so that sorting by key and then host is exercised.
    return {f"h{i}": {"k1": samples[i], "k2": -samples[i] if i % 2 else 7} for i in order}


@settings(max_examples=150, deadline=None)
@given(samples=st.lists(measurements, min_size=0, max_size=12), data=st.data())
def test_outliers_do_not_depend_on_host_order(samples: list[float | int], data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(len(samples))))
    assert (
        compare(_as_fleet(samples, order)).outliers
        == compare(_as_fleet(samples, list(range(len(samples))))).outliers
    )


@settings(max_examples=150, deadline=None)
@given(samples=st.lists(measurements, min_size=3, max_size=12), power=st.integers(-20, 20))
def test_scaling_by_a_power_of_two_keeps_outliers_exactly(samples: list[float | int], power: int) -> None:
    base = {f"h{i}": float(x) for i, x in enumerate(samples)}
    scaled = {h: x * 2.0**power for h, x in base.items()}
    before, after = outliers_in(base, "k"), outliers_in(scaled, "k")
    assert [(o.host, o.score, o.direction) for o in before] == [(o.host, o.score, o.direction) for o in after]


@settings(max_examples=150, deadline=None)
@given(samples=st.lists(measurements, min_size=3, max_size=12), factor=st.floats(1e-3, 1e3))
def test_scaling_by_any_positive_constant_keeps_the_outlier_hosts(
    samples: list[float | int], factor: float
) -> None:
    base = {f"h{i}": float(x) for i, x in enumerate(samples)}
    # Scores within rounding of the cut-off may fall either side once scaled: leave those out.
    scores = [o.score for o in outliers_in(base, "k", threshold=1e-12)]
    assume(all(abs(abs(s) - THRESHOLD) > 1e-6 for s in scores))
    values = {h: {"k": x} for h, x in base.items()}
    scaled = {h: {"k": x * factor} for h, x in base.items()}
    assert [o.host for o in compare(values).outliers] == [o.host for o in compare(scaled).outliers]


def test_outlier_scores_follow_the_definition() -> None:
    base = {"a": 3.0, "b": 5.0, "c": 4.0, "d": 40.0, "e": 4.5, "f": -20.0}
    med = statistics.median(base.values())
    mad = statistics.median(abs(x - med) for x in base.values())
    got = {o.host: o for o in outliers_in(base, "k")}
    assert set(got) == {"d", "f"}
    for host, o in got.items():
        assert (o.median, o.mad, o.score) == (med, mad, 0.6745 * (base[host] - med) / mad)
    assert (got["d"].direction, got["f"].direction) == ("high", "low")


# --- output ----------------------------------------------------------------------------------------


def _text(renderable: Any) -> str:
    console = Console(width=80, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_table_at_80_columns_names_the_odd_host(recorded: Recorded) -> None:
    cmp = compare(fleet(recorded, {ODD: _odd_node}))
    text = _text(render_table(cmp))
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "drift" in text
    assert ODD in text
    assert "ladder" in text
    assert "5.15.0-88-generic" in text
    assert "5 hosts (majority)" in text
    assert "across 6 hosts" in text


def test_table_shows_outliers_and_splits() -> None:
    values: dict[str, dict[str, Value]] = {f"h{i:02d}": {"bw": 100.0 + i % 3, "mode": "a"} for i in range(16)}
    values["h07"]["bw"] = 9.5
    for h in list(values)[:8]:
        values[h]["mode"] = "b"
    text = _text(render_table(compare(values)))
    assert "outliers" in text
    assert "h07" in text
    assert "low" in text
    assert "(no majority)" in text
    assert "16 hosts, 2 values" in text
    assert "+5 more" in text  # 8 hosts on each side of the split, 3 named


def test_table_of_an_agreeing_fleet_is_one_line() -> None:
    cmp = compare({h: {"k": 1} for h in HOSTS})
    assert _text(render_table(cmp)).strip() == "fleet: no drift, no outliers across 6 hosts"


def test_abbreviate() -> None:
    assert abbreviate(["h01", "h02"]) == "h01, h02"
    assert abbreviate(["h01", "h02", "h03", "h04"]) == "h01, h02, h03, h04"
    assert abbreviate([f"h{i:02d}" for i in range(15)]) == "h00, h01, h02 +12 more"


def test_the_comparison_dumps_as_json_the_document_reads_back(recorded: Recorded) -> None:
    values = fleet(recorded, {ODD: _odd_node})
    values["node05"] = copy.deepcopy(values["node05"]) | {"memory.total_mib": 51702}
    cmp = compare(values)
    again = json.loads(json.dumps({"drift": [d.model_dump() for d in cmp.drift], "outliers": []}))
    assert [Drift.model_validate(d) for d in again["drift"]] == cmp.drift
    assert cmp.hosts == 6
    assert {
        "key": "nics[eth0].speed_mbps",
        "majority": 1000,
        "majority_hosts": 5,
        "hosts": {ODD: 100},
    } in again["drift"]
    assert cmp.outliers == []  # MAD 0: five of six have 517020


def test_a_host_short_of_the_fleets_hardware_is_flagged_at_the_playbooks_level() -> None:
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome
    from nodeagent.core.finding import Status

    def outcome(name: str, gpus: int, active: int) -> HostOutcome:
        facts = {
            "host": name,
            "gpus": [{"pci_address": f"0000:{i:02x}:00.0", "vendor": "NVIDIA"} for i in range(gpus)],
            "rdma": [
                {"device": f"mlx5_{i}", "port": 1, "state": "ACTIVE" if i < active else "DOWN"}
                for i in range(8)
            ],
        }
        return HostOutcome(name, name, {"status": "OK", "findings": []}, facts)

    outcomes = {
        o.name: o
        for o in (outcome("g1", 8, 8), outcome("g2", 8, 8), outcome("g3", 7, 6), outcome("g4", 8, 8))
    }
    report = FleetReport.build(outcomes, 0.0)  # FAIL unless a playbook lowers it
    g3 = report.outcomes["g3"].doc or {}
    assert g3["status"] == "FAIL" and report.status is Status.FAIL
    short = {f["subject"]: f["summary"] for f in g3["findings"] if f["check_id"] == "fleet"}
    assert short == {
        "hardware.gpus": "hardware.gpus = 7, where 3 of 4 hosts have 8",
        "hardware.gpu_models[NVIDIA]": "hardware.gpu_models[NVIDIA] = 7, where 3 of 4 hosts have 8",
        "hardware.rdma_ports_active": "hardware.rdma_ports_active = 6, where 3 of 4 hosts have 8",
    }
    assert all((report.outcomes[h].doc or {})["status"] == "OK" for h in ("g1", "g2", "g4"))
    # A playbook that says `lost_hardware: warn` (parts swapped on purpose) lowers it to a warning.
    lowered = FleetReport.build(outcomes, 0.0, lost_hardware=Status.WARN)
    assert (lowered.outcomes["g3"].doc or {})["status"] == "WARN"
