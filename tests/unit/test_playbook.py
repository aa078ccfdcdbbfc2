"""Playbooks (nodeagent.gate.playbook): the shipped ones resolve and judge real recorded trees; includes
merge as documented; every malformed file is one line naming its file, line and field (exit 64)."""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from nodeagent import checks, engine, tuners
from nodeagent.cli.main import main
from nodeagent.compare import fleet
from nodeagent.compare.values import Value
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, documents
from nodeagent.facts import node
from nodeagent.gate import schema
from nodeagent.gate.playbook import BenchSettings, Playbook, list_playbooks, load_playbook
from nodeagent.gate.thresholds import evaluate
from nodeagent.host import SnapshotHost
from tests.support.helpers import FIXTURE_TREES, SYSFS_FIXTURES, fixture_host
from tests.support.paths import REPO, VM

SHIPPED = ["base", "cpu-training", "gpu-training", "preflight", "tune-tf"]
NUMA_BALANCING = "check.numa.kernel.numa_balancing./proc/sys/kernel/numa_balancing"
MEMLOCK = "check.kernel.memlock./proc/self/limits soft"
GOVERNORS = "check.cstates.governor.*/scaling_governor"


def node_values(host: SnapshotHost, pb: Playbook) -> dict[str, Value]:
    """The node's values as the gate judges them: the playbook's checks with its parameters, and
    the facts, flattened by fleet.host_values."""
    selected = checks.select(pb.checks)
    params = {c.id: c.make_params(dict(pb.check_params.get(c.id, {}))) for c in selected}
    found = documents(f for r in engine.run(host, selected, params) for f in r.findings)
    return fleet.host_values(node.collect(host), found)


def judged(host: SnapshotHost, name: str) -> list[Finding]:
    pb = load_playbook(name)
    return evaluate(pb.thresholds, node_values(host, pb), host.name)


def about(findings: list[Finding], subject: str) -> Finding:
    (f,) = [f for f in findings if f.subject == subject]
    return f


def extracted(archive: Path, dest: Path) -> Path:
    """A recorded tree unpacked (its sys/ and proc/ only: no device nodes), to edit one file."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if ("/sys/" in f"/{m.name}" or "/proc/" in f"/{m.name}")]
        tar.extractall(
            dest, members=[m for m in members if m.isfile() or m.isdir() or m.issym()], filter="tar"
        )
    return dest


# --- The shipped playbooks -------------------------------------------------------------------------


def test_shipped_playbooks_resolve() -> None:
    books = list_playbooks()
    assert [pb.name for pb in books] == SHIPPED
    check_ids = [c.id for c in checks.all_checks()]
    by_id = {t.id: t for t in tuners.all_tuners()}
    for pb in books:
        assert pb.description and pb.source.endswith(f"playbooks/{pb.name}.yml")
        assert list(pb.checks) == [c for c in check_ids if c in pb.checks]  # registry order
        for c in checks.select(pb.checks):
            c.make_params(dict(pb.check_params[c.id]))
        for tid in pb.tuners:
            by_id[tid].make_params(dict(pb.tuner_params[tid]))
        for t in pb.thresholds:
            assert "https://" in t.why, f"{pb.name}: {t.value} cites no source"
        json.dumps(document.dump(pb))


@pytest.mark.parametrize("name", SHIPPED)
def test_shown_playbook_loads_back_the_same(tmp_path: Path, name: str) -> None:
    """`playbooks show` prints the file format: saved (less name, source, includes) it loads as the
    same playbook, with nothing left to include."""
    pb = load_playbook(name)
    body = {k: v for k, v in document.dump(pb).items() if k not in ("name", "source", "includes")}
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    again = load_playbook(str(path))
    assert again.includes == ()
    fields = ("description", "checks", "check_params", "thresholds", "tuners", "tuner_params", "bench")
    for f in (*fields, "budget_s", "fail_on"):
        assert getattr(again, f) == getattr(pb, f), f


def test_preflight_is_fast_and_read_only() -> None:
    pb = load_playbook("preflight")
    assert pb.budget_s == 1.0 and pb.fail_on == "fail" and pb.tuners == () and pb.includes == ("base",)
    assert set(pb.checks) == {
        "cstates",
        "numa",
        "hugepages",
        "kernel",
        "threads",
        "pcie",
        "gpu",
        "nic",
        "rdma",
    }
    # Only checks tagged preflight; not topology (nvidia-smi topo -m) nor nvlink (a query per link).
    assert all("preflight" in c.tags for c in checks.select(pb.checks))
    assert not {"topology", "nvlink"} & set(pb.checks)


def test_gpu_training_audits_everything() -> None:
    pb = load_playbook("gpu-training")
    assert set(pb.checks) == {c.id for c in checks.all_checks()}
    assert pb.includes == ("base", "preflight")
    assert pb.check_params["nic"] == {"require_peermem": True}
    # Its numa_balancing threshold replaced base's warning, in base's place.
    on_key = [t for t in pb.thresholds if t.value == NUMA_BALANCING]
    assert [(t.severity, t.equals) for t in on_key] == [("fail", 0)]
    assert [t.value for t in pb.thresholds][:3] == [
        "hugepages.thp_enabled",
        "hugepages.thp_defrag",
        NUMA_BALANCING,
    ]
    assert pb.bench == BenchSettings(quick=False, repeats=None, processes=5)


def test_cpu_training_has_no_gpu_checks() -> None:
    pb = load_playbook("cpu-training")
    assert not {"gpu", "nvlink", "topology"} & set(pb.checks)
    assert pb.check_params["threads"] == {"count_smt_siblings": False}
    assert all(pb.tuner_params[t].get("cpu_only") for t in ("numa-pinning", "tf-threads", "tf-data"))


def test_tune_tf_tuners_and_verify_settings() -> None:
    pb = load_playbook("tune-tf")
    assert pb.tuners == ("numa-pinning", "tf-threads", "pinned-memory", "tf-data")  # registry order
    assert pb.bench == BenchSettings(quick=True, repeats=None, processes=3)  # as the file says
    assert pb.budget_s is None and pb.thresholds == ()


# --- Value keys against the real facts document -----------------------------------------------------


def test_fact_sections_are_the_facts_document() -> None:
    doc = node.collect(SnapshotHost(VM))
    assert set(doc) - {"host", "source"} == set(schema.FACT_SECTIONS)


@pytest.mark.parametrize("tree", ["firecracker", *FIXTURE_TREES])
def test_key_kinds_agree_with_recorded_values(tree: str) -> None:
    host = SnapshotHost(VM) if tree == "firecracker" else fixture_host(tree)
    values = fleet.host_values(node.collect(host), [])
    kinds = {"number": (int, float), "text": (str,), "boolean": (bool,)}
    judged = 0
    for key, value in values.items():
        kind = schema.key_kind(key)
        assert schema.key_problem(key, frozenset()) is None, key
        if kind is None or value is None:
            continue
        judged += 1
        assert isinstance(value, kinds[kind]) and not (kind == "number" and isinstance(value, bool)), key
    assert judged >= 5  # the topology's numbers at least


# --- Thresholds on recorded trees ----------------------------------------------------------------------


def test_firecracker_vm() -> None:
    host = SnapshotHost(VM)
    pre = judged(host, "preflight")
    assert about(pre, "hugepages.thp_enabled").status is Status.OK
    assert about(pre, "hugepages.thp_defrag").status is Status.OK
    # One NUMA node: the numa check reports no numa_balancing, so there is nothing to judge.
    assert about(pre, NUMA_BALANCING).status is Status.SKIPPED
    assert about(pre, "rdma[*].state").status is Status.SKIPPED  # no InfiniBand in a VM

    gpu = judged(host, "gpu-training")
    memlock = about(gpu, MEMLOCK)
    assert memlock.status is Status.FAIL
    assert memlock.evidence == {MEMLOCK: "8388608"}  # the soft limit, a number of bytes
    assert "--ulimit memlock=-1" in memlock.remediation
    assert about(gpu, "check.kernel.net.core./proc/sys/net/core/rmem_max").status is Status.OK

    cpu = judged(host, "cpu-training")
    # Recorded with OMP_NUM_THREADS=4 on 2 CPUs and nothing pinned: both refuse a CPU node.
    assert about(cpu, "check.threads.OMP_NUM_THREADS.status").status is Status.FAIL
    assert about(cpu, "check.threads.pinning.status").status is Status.FAIL
    assert about(cpu, "check.threads.*.status").status is Status.OK  # cpus and defaults
    assert about(cpu, GOVERNORS).status is Status.SKIPPED  # no cpufreq in the VM


def test_thp_never_fails_the_thp_threshold(tmp_path: Path) -> None:
    root = extracted(VM, tmp_path)
    (root / "sys/kernel/mm/transparent_hugepage/enabled").write_text("always madvise [never]\n")
    f = about(judged(SnapshotHost(root), "preflight"), "hugepages.thp_enabled")
    assert f.status is Status.WARN
    assert f.summary == "hugepages.thp_enabled = never, expected one of madvise, always"
    assert "transhuge.html" in f.remediation


@pytest.mark.slow
def test_numa_balancing_on_a_four_node_server(tmp_path: Path) -> None:
    archive = SYSFS_FIXTURES / "40intel64-2g2n4c+pcilocality.tar.bz2"
    root = next(extracted(archive, tmp_path).iterdir())
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    (root / "proc/sys/vm/zone_reclaim_mode").write_text("0\n")
    host = SnapshotHost(root)
    base = judged(host, "base")
    assert about(base, NUMA_BALANCING).status is Status.WARN
    assert about(base, "check.numa.vm.zone_reclaim_mode./proc/sys/vm/zone_reclaim_mode").status is Status.OK
    gpu = about(judged(host, "gpu-training"), NUMA_BALANCING)
    assert gpu.status is Status.FAIL and gpu.evidence == {NUMA_BALANCING: "1"}
    assert gpu.summary == f"{NUMA_BALANCING} = 1, expected 0"


def test_governor_glob_on_recorded_servers() -> None:
    hybrid = judged(fixture_host("20em64t-hybrid-1p6c2t+2ca4co1t"), "cpu-training")
    governors = [f for f in hybrid if "scaling_governor" in f.subject]
    assert len(governors) == 20 and {f.status for f in governors} == {Status.FAIL}
    assert governors[0].summary.endswith("/policy0/scaling_governor = powersave, expected one of performance")

    xeon = judged(fixture_host("32em64t-2n8c+dax+nvme+mic+dimms"), "cpu-training")
    ok = about(xeon, GOVERNORS)
    assert ok.status is Status.OK and len(ok.evidence) == 16 and set(ok.evidence.values()) == {"performance"}
    assert not [f for f in xeon if "scaling_governor" in f.subject and f.status is not Status.OK]


@pytest.mark.parametrize(
    ("tree", "port", "rate"),
    [("32em64t-2n8c+dax+nvme+mic+dimms", "mlx4_0", "56"), ("40intel64-2g2n4c+pcilocality", "qib0", "40")],
)
def test_infiniband_rates(tree: str, port: str, rate: str) -> None:
    found = judged(fixture_host(tree), "gpu-training")
    assert about(found, "rdma[*].state").status is Status.OK
    slow = about(found, f"rdma[{port}].rate_gbps")
    assert slow.status is Status.WARN and slow.evidence == {f"rdma[{port}].rate_gbps": rate}


# --- Includes --------------------------------------------------------------------------------------------


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_include_merges_and_overrides(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "site.yml": """\
description: our CPU nodes
include: [cpu-training]
budget_s: 2
checks:
  threads: {params: {local_ranks: 2}}
thresholds:
  - {value: "check.cstates.governor.*/scaling_governor", one_of: [performance], severity: warn, why: x}
bench: {repeats: 6}
""",
        },
    )
    pb = load_playbook(str(tmp_path / "site.yml"))
    parent = load_playbook("cpu-training")
    assert pb.name == "site" and pb.description == "our CPU nodes" and pb.includes == ("base", "cpu-training")
    assert pb.budget_s == 2.0 and pb.checks == parent.checks
    assert pb.check_params["threads"] == {"count_smt_siblings": False, "local_ranks": 2}  # merged per name
    governors = [t for t in pb.thresholds if t.value == GOVERNORS]
    assert [t.severity for t in governors] == ["warn"]
    assert len(pb.thresholds) == len(parent.thresholds)
    assert pb.bench == BenchSettings(quick=True, repeats=6, processes=None)


def test_skip_checks_drops_the_check_and_its_inherited_thresholds(tmp_path: Path) -> None:
    write(tmp_path, {"a.yml": "include: [cpu-training]\nskip_checks: [cstates, threads]\n"})
    pb = load_playbook(str(tmp_path / "a.yml"))
    assert not {"cstates", "threads"} & set(pb.checks)
    assert not [t for t in pb.thresholds if t.value.startswith(("check.cstates.", "check.threads."))]
    write(tmp_path, {"b.yml": "skip_checks: [gpu, nvlink]\n"})  # no checks chosen: all but these
    assert load_playbook(str(tmp_path / "b.yml")).checks == tuple(
        c.id for c in checks.all_checks() if c.id not in ("gpu", "nvlink")
    )
    write(tmp_path, {"c.yml": "checks: {numa: {}, gpu: {}}\nskip_checks: [nvlink]\n"})  # its own choice
    assert load_playbook(str(tmp_path / "c.yml")).checks == ("numa", "gpu")


def test_relative_includes_later_ones_win(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "top.yml": "include: [sub/first.yml, sub/second.yml]\n",
            "sub/first.yml": "include: [../common.yml]\nbudget_s: 3\nfail_on: warn\n",
            "sub/second.yml": "include: [../common.yml]\nbudget_s: 4\n",
            "common.yml": "description: shared\nchecks: {numa: {}}\n",  # twice, not a cycle
        },
    )
    pb = load_playbook(str(tmp_path / "top.yml"))
    assert pb.includes == ("../common.yml", "sub/first.yml", "../common.yml", "sub/second.yml")
    assert (pb.budget_s, pb.fail_on, pb.description, pb.checks) == (4.0, "warn", "shared", ("numa",))


def test_a_glob_threshold_in_a_user_playbook(tmp_path: Path) -> None:
    write(tmp_path, {"n.yml": "thresholds:\n  - {value: 'nics[*].mtu', min: 1500, why: jumbo}\n"})
    pb = load_playbook(str(tmp_path / "n.yml"))
    assert pb.checks == ()  # none chosen: the caller runs all
    found = evaluate(pb.thresholds, node_values(SnapshotHost(VM), pb), "vm")
    # eth0 has MTU 1400 (a VM), ifb0/ifb1 1500, lo 65536.
    assert [(f.status, f.subject) for f in found] == [
        (Status.OK, "nics[*].mtu"),
        (Status.FAIL, "nics[eth0].mtu"),
    ]
    assert found[0].evidence == {"nics[ifb0].mtu": "1500", "nics[ifb1].mtu": "1500", "nics[lo].mtu": "65536"}


# --- Malformed playbooks --------------------------------------------------------------------------------

# (files, the file to load, the error after "<folder>/"): one line each, naming file, line and field.
MALFORMED: dict[str, tuple[dict[str, str], str, str]] = {
    "bad YAML": (
        {"p.yml": "checks:\n  numa: {}\n  kernel: {params: [1, 2}\n"},
        "p.yml",
        "p.yml:3: YAML syntax error: expected ',' or ']', but got '}' (while parsing a flow sequence from "
        "line 3); fix the YAML",
    ),
    "unknown check": (
        {"p.yml": "description: x\nchecks:\n  numa: {}\n  nuam: {}\n"},
        "p.yml",
        "p.yml:4: checks.nuam: unknown check 'nuam'; did you mean 'numa'? (`nodeagent checks` lists them)",
    ),
    "unknown check parameter": (
        {"p.yml": "checks:\n  kernel:\n    params:\n      max_swapiness: 5\n"},
        "p.yml",
        "p.yml:4: checks.kernel.params.max_swapiness: check kernel has no parameter 'max_swapiness'; "
        "did you mean 'max_swappiness'?",
    ),
    "wrong parameter type": (
        {"p.yml": "checks:\n  kernel:\n    params:\n      max_swappiness: '5'\n"},
        "p.yml",
        "p.yml:4: checks.kernel.params.max_swappiness: must be a number like its default 10 (got '5'); "
        "see `nodeagent checks --params`",
    ),
    "wrong field type": (
        {"p.yml": "description: x\nbudget_s: fast\n"},
        "p.yml",
        "p.yml:2: budget_s: must be a number of seconds greater than 0 (got 'fast')",
    ),
    "a string for min": (
        {"p.yml": "thresholds:\n  - value: topology.cores\n    min: '4'\n"},
        "p.yml",
        "p.yml:3: thresholds[0].min: must be a number (got '4')",
    ),
    "include cycle": (
        {
            "a.yml": "include: [b.yml]\n",
            "b.yml": "description: b\ninclude:\n  - c.yml\n",
            "c.yml": "include: [a.yml]\n",
        },
        "a.yml",
        "c.yml:1: include[0]: include cycle a.yml -> b.yml -> c.yml -> a.yml; remove one of these includes",
    ),
    "includes itself": (
        {"a.yml": "description: a\ninclude: [base, ./a.yml]\n"},
        "a.yml",
        "a.yml:2: include[1]: include cycle a.yml -> a.yml; remove one of these includes",
    ),
    "unknown threshold key": (
        {"p.yml": "thresholds:\n  - value: hugepages.thp_enabled\n    minimum: 3\n"},
        "p.yml",
        "p.yml:3: thresholds[0].minimum: unknown field 'minimum'; did you mean 'min'?",
    ),
    "threshold without a condition": (
        {"p.yml": "checks: {numa: {}}\nthresholds:\n  - value: hugepages.thp_enabled\n    severity: warn\n"},
        "p.yml",
        "p.yml:3: thresholds[0]: needs a condition: min, max (numbers), equals or one_of; add one of them",
    ),
    "min on a string value": (
        {"p.yml": "thresholds:\n  - value: kernel.release\n    min: 5.15\n"},
        "p.yml",
        "p.yml:3: thresholds[0].min: kernel.release is text, and min/max compare numbers; "
        "use equals or one_of",
    ),
    "missing include file": (
        {"p.yml": "description: x\ninclude:\n  - base\n  - ./nope.yml\n"},
        "p.yml",
        "p.yml:4: include[1]: no such playbook file '{dir}/nope.yml'; "
        "paths are relative to this file's folder",
    ),
    "unknown shipped include": (
        {"p.yml": "include: [preflite]\n"},
        "p.yml",
        "p.yml:1: include[0]: no shipped playbook 'preflite'; did you mean 'preflight'? "
        "(or give the path of a .yml file)",
    ),
    "error in an included file": (
        {
            "p.yml": "include: [inc/q.yml]\n",
            "inc/q.yml": "tuners:\n  tf-threads:\n    params: {intra_op: -1}\n",
        },
        "p.yml",
        "inc/q.yml:3: tuners.tf-threads.params.intra_op: intra_op=-1: give a thread count, "
        "or 0 (derived from the cores)",
    ),
    "unknown value section": (
        {"p.yml": "thresholds:\n  - {value: hugepage.thp_enabled, equals: never}\n"},
        "p.yml",
        "p.yml:2: thresholds[0].value: 'hugepage.thp_enabled' starts with neither check. nor a facts section "
        "(did you mean 'hugepages'?); see the value keys in playbooks/README.md",
    ),
    "unknown device field": (
        {"p.yml": "thresholds:\n  - {value: 'nics[*].sped_mbps', min: 25000}\n"},
        "p.yml",
        "p.yml:2: thresholds[0].value: nics[...] has no field 'sped_mbps' (did you mean 'speed_mbps'?); "
        "see the value keys in playbooks/README.md",
    ),
    "threshold on a check not run": (
        {"p.yml": "checks: {numa: {}}\nthresholds:\n  - {value: 'check.kernel.vm.swappiness.x', max: 10}\n"},
        "p.yml",
        "p.yml:3: thresholds[0].value: reads check 'kernel', which this playbook does not run; add kernel "
        "under checks: or drop this threshold",
    ),
    "equals null": (
        {"p.yml": "thresholds:\n  - value: kernel.release\n    equals: null\n"},
        "p.yml",
        "p.yml:3: thresholds[0].equals: null matches nothing (a value a node lacks is SKIPPED); give a value "
        "to compare with",
    ),
    "duplicate key": (
        {"p.yml": "checks:\n  numa: {}\n  numa: {params: {smt: on}}\n"},
        "p.yml",
        "p.yml:3: checks.numa: duplicate key (first on line 2); keep one",
    ),
    "unknown expectation": (
        {"p.yml": "expect:\n  gpu: 8\n"},
        "p.yml",
        "p.yml:2: expect.gpu: unknown field 'gpu'; did you mean 'gpus'?",
    ),
    "expectation not a count": (
        {"p.yml": "expect: {gpus: eight}\n"},
        "p.yml",
        "p.yml:1: expect.gpus: must be a whole number of GPUs (0 or more) (got 'eight')",
    ),
    "expectation of a check not run": (
        {"p.yml": "checks: {gpu: {}}\nexpect:\n  gpus: 8\n  nvlinks_per_gpu: 18\n"},
        "p.yml",
        "p.yml:4: expect.nvlinks_per_gpu: is judged by check 'nvlink', which this playbook does not run; "
        "add nvlink under checks:",
    ),
    "unknown hardware count": (
        {"p.yml": "thresholds:\n  - {value: hardware.gpu, min: 8}\n"},
        "p.yml",
        "p.yml:2: thresholds[0].value: 'hardware.gpu': hardware has no count 'gpu' (did you mean 'gpus'?); "
        "see the value keys in playbooks/README.md",
    ),
    "missing not a level": (
        {"p.yml": "thresholds:\n  - {value: hardware.gpus, min: 8, missing: ignore}\n"},
        "p.yml",
        "p.yml:2: thresholds[0].missing: must be fail, warn or skip (what a value the node does not have "
        "gives) (got 'ignore')",
    ),
    "check entry not a mapping": (
        {"p.yml": "checks:\n  numa: yes\n"},
        "p.yml",
        "p.yml:2: checks.numa: must be a mapping, {} for the defaults or {params: {name: value}} (got true)",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_playbook_is_one_line(tmp_path: Path, case: str) -> None:
    files, entry, expected = MALFORMED[case]
    write(tmp_path, files)
    with pytest.raises(UsageError) as e:
        load_playbook(str(tmp_path / entry))
    assert str(e.value) == f"{tmp_path}/" + expected.replace("{dir}", str(tmp_path))
    assert e.value.exit_code == 64 and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["include cycle", "unknown threshold key", "min on a string value"])
def test_malformed_playbook_exits_64(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    files, entry, expected = MALFORMED[case]
    write(tmp_path, files)
    with pytest.raises(SystemExit) as e:
        main(["playbooks", "show", str(tmp_path / entry)])
    assert e.value.code == 64
    assert capsys.readouterr().err == f"nodeagent: error: {tmp_path}/{expected}\n"


# Five mistakes, each of a kind MALFORMED has alone: two the schema finds (lines 2 and 6) and three
# found against the registries (lines 4, 5 and 8), in no order of finding.
SEVERAL_MISTAKES = """description: five mistakes
budget_s: fast
checks:
  numa: {params: {bogus: 3}}
  nuam: {}
fail_on: maybe
thresholds:
  - {value: hugepage.thp_enabled, equals: never}
"""


def test_every_mistake_of_a_playbook_is_reported_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, {"p.yml": SEVERAL_MISTAKES})
    with pytest.raises(SystemExit) as e:
        main(["check", "--playbook", str(tmp_path / "p.yml")])
    assert e.value.code == 64
    at = f"nodeagent: error: {tmp_path}/p.yml"
    assert capsys.readouterr().err.splitlines() == [
        f"{at}:2: budget_s: must be a number of seconds greater than 0 (got 'fast')",
        f"{at}:4: checks.numa.params.bogus: check numa has no parameter 'bogus'; known parameters: "
        + ", ".join(sorted(f.name for f in dataclasses.fields(checks.select(["numa"])[0].params))),
        f"{at}:5: checks.nuam: unknown check 'nuam'; did you mean 'numa'? (`nodeagent checks` lists them)",
        f"{at}:6: fail_on: must be warn or fail (got 'maybe')",
        f"{at}:8: thresholds[0].value: 'hugepage.thp_enabled' starts with neither check. nor a facts "
        "section (did you mean 'hugepages'?); see the value keys in playbooks/README.md",
    ]


def test_every_mistake_of_a_playbook_and_of_its_includes(tmp_path: Path) -> None:
    """This file's mistakes first, by line, then those of the files it includes; and the
    thresholds judged against the checks the playbook runs, each of them."""
    files = {
        "p.yml": "include: [inc/q.yml]\nbudget_s: -1\nchecks:\n  nuam: {}\n",
        "inc/q.yml": "fail_on: maybe\ntuners:\n  tf-threads:\n    params: {intra_op: -1}\n",
    }
    write(tmp_path, files)
    with pytest.raises(UsageError) as e:
        load_playbook(str(tmp_path / "p.yml"))
    assert [line.split(": ", 2)[:2] for line in str(e.value).splitlines()] == [
        [f"{tmp_path}/p.yml:2", "budget_s"],
        [f"{tmp_path}/p.yml:4", "checks.nuam"],
        [f"{tmp_path}/inc/q.yml:1", "fail_on"],
        [f"{tmp_path}/inc/q.yml:4", "tuners.tf-threads.params.intra_op"],
    ]
    write(
        tmp_path,
        {
            "r.yml": "checks: {numa: {}}\nthresholds:\n  - {value: 'check.kernel.a', max: 1}\n"
            "  - {value: 'check.gpu.b', max: 1}\n"
        },
    )
    with pytest.raises(UsageError) as e:
        load_playbook(str(tmp_path / "r.yml"))
    assert [line.split(": ", 1)[0] for line in str(e.value).splitlines()] == [
        f"{tmp_path}/r.yml:3",
        f"{tmp_path}/r.yml:4",
    ]


def test_expect_becomes_thresholds_on_counts_and_check_parameters(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "ours.yml": "include: [gpu-training]\nexpect:\n  gpus: 8\n"
            "  gpu_models: {NVIDIA H100 80GB HBM3: 8}\n  rdma_ports_active: 8\n"
            "  rdma_min_rate_gbps: 400\n  nvlinks_per_gpu: 18\n"
            "  gpu_min_pcie_width: 16\n  memory_gib: 2000\n",
        },
    )
    pb = load_playbook(str(tmp_path / "ours.yml"))
    stated = {
        t.value: (t.min, t.severity, t.when_missing) for t in pb.thresholds if t.value.startswith("hardware.")
    }
    assert stated == {
        "hardware.gpus": (8, "fail", "fail"),
        "hardware.gpu_models[NVIDIA H100 80GB HBM3]": (8, "fail", "fail"),
        "hardware.rdma_ports_active": (8, "fail", "fail"),
    }
    (rate,) = [t for t in pb.thresholds if t.value == "rdma[*].rate_gbps" and t.severity == "fail"]
    assert rate.min == 400
    (memory,) = [t for t in pb.thresholds if t.value == "memory.total_mib"]
    assert memory.min == 2000 * 1024
    assert pb.check_params["nvlink"]["expected_links"] == 18
    assert pb.check_params["pcie"]["min_gpu_width"] == 16
    assert pb.lost_hardware == "fail"  # gpu-training's


def test_unknown_names_and_files() -> None:
    with pytest.raises(UsageError, match=r"^no shipped playbook 'preflite'; did you mean 'preflight'\?"):
        load_playbook("preflite")
    with pytest.raises(UsageError, match=r"^/nonexistent/p\.yml: no such playbook file; check the path$"):
        load_playbook("/nonexistent/p.yml")


def test_shipped_files_are_package_data() -> None:
    from importlib import resources

    names = sorted(
        p.name for p in resources.files("nodeagent.playbooks").iterdir() if p.name.endswith(".yml")
    )
    assert names == [f"{n}.yml" for n in SHIPPED]
    assert {p.name for p in (REPO / "playbooks").glob("*.yml")} == set(names)
