"""cpu-isa: the CPU's model and flags (facts.cpu_isa: /proc/cpuinfo on recordings, py-cpuinfo on this
machine) and what the job's environment leaves oneDNN of them."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from nodeagent.api.check import NoParams
from nodeagent.checks import cpu_isa
from nodeagent.checks.cpu_isa import ISAS, Facts, best_isa, cap_of, isas_of, tf_opts
from nodeagent.checks.threads import Proc
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import cpu_isa as facts
from nodeagent.facts.cpu_isa import CpuIsa
from nodeagent.host import LocalHost, SnapshotHost
from nodeagent.host.recorder import _filter_environ
from tests.support.helpers import (
    FIXTURE_TREES,
    SYSFS_FIXTURES,
    findings_about,
    fixture_host,
    make_tree,
    one_finding,
)
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "corpus"
VM_TREES = [
    "vm-virt-what-aws-ec2-c5-large",
    "vm-ghw-qemu-skylake-offline-cpus",
    "vm-virt-what-gce-arm64-1vcpu",
    "vm-virt-what-hyperv-2008",
]
P = NoParams()


def _raw_hwloc(name: str) -> str:
    with tarfile.open(SYSFS_FIXTURES / f"{name}.tar.bz2") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/proc/cpuinfo"))
        data = tar.extractfile(member)
        assert data is not None
        return data.read().decode()


def _raw_vm(name: str) -> str:
    return (CORPUS / name / "tree" / "proc" / "cpuinfo").read_text()


def _source_flags(text: str) -> frozenset[str] | None:
    """What the machine printed: the flags of every "flags" line, as `grep ^flags` shows them."""
    lines = [line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")]
    return frozenset.intersection(*(frozenset(x) for x in lines)) if lines else None


def _source_model(text: str) -> str | None:
    found = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    return found[0] if found else None


def _run(host: SnapshotHost | LocalHost) -> list[Finding]:
    return cpu_isa.CHECK.run(host, P)


# -- facts on real recordings ----------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_hwloc_recordings_read_as_the_machine_printed_them(name: str) -> None:
    raw = _raw_hwloc(name)
    got = facts.collect(fixture_host(name))
    assert got.source == "/proc/cpuinfo"
    assert got.flags == _source_flags(raw)
    assert got.x86 is (_source_flags(raw) is not None)
    if got.x86:
        assert got.model == _source_model(raw)


@pytest.mark.parametrize("name", VM_TREES)
def test_corpus_recordings_read_as_the_machine_printed_them(name: str) -> None:
    raw = _raw_vm(name)
    got = facts.collect(SnapshotHost(CORPUS / name / "tree"))
    assert got.flags == _source_flags(raw)
    assert got.model == _source_model(raw)


def test_what_the_recorded_cpus_have() -> None:
    """The oneDNN flags, as the recorded /proc/cpuinfo lists them."""
    c5 = facts.collect(SnapshotHost(CORPUS / "vm-virt-what-aws-ec2-c5-large" / "tree"))
    assert c5.model == "Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz"
    assert c5.flags is not None and {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"} <= c5.flags
    assert not {"avx512_vnni", "avx512_bf16", "amx_tile", "avx_vnni"} & c5.flags
    hybrid = facts.collect(fixture_host("20em64t-hybrid-1p6c2t+2ca4co1t"))
    assert hybrid.model == "13th Gen Intel(R) Core(TM) i7-1370P"
    assert hybrid.flags is not None and {"avx2", "avx_vnni"} <= hybrid.flags and "avx512f" not in hybrid.flags


def _recorded(name: str) -> SnapshotHost:
    return SnapshotHost(CORPUS / name / "tree") if name in VM_TREES else fixture_host(name)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("2arm-2c", "ARMv7 Processor rev 1 (v7l)"),
        ("nvidiagpunumanodes", "POWER9, altivec supported"),
        ("vm-virt-what-gce-arm64-1vcpu", None),  # arm64 prints no model
    ],
)
def test_other_architectures_are_not_x86_and_skipped(name: str, model: str | None) -> None:
    got = facts.collect(_recorded(name))
    assert (got.x86, got.flags, got.model, got.why) == (False, None, model, "no flags field")
    (f,) = _run(_recorded(name))
    assert f.status is Status.SKIPPED and "not an x86 CPU" in f.summary
    assert f.evidence == {"/proc/cpuinfo": "no flags field"}


def test_per_processor_blocks_and_the_arm_header() -> None:
    arm = facts.parse_blocks(_raw_hwloc("2arm-2c"))
    # 32-bit ARM prints the model once, above the first processor, and the features after the last.
    assert arm[0] == {"Processor": "ARMv7 Processor rev 1 (v7l)", "processor": "0", "BogoMIPS": "1595.80"}
    assert arm[1] == {"processor": "1", "BogoMIPS": "1595.80"}
    assert arm[2]["Features"] == "swp half thumb fastmult vfp edsp neon vfpv3"
    assert arm[2]["CPU architecture"] == "7"
    # A flag that one processor lacks is not the CPU's: a job may run on that one.
    text = "processor\t: 0\nflags\t\t: sse4_1 avx avx2\n\nprocessor\t: 1\nflags\t\t: sse4_1 avx\n"
    assert facts.from_cpuinfo(text).flags == frozenset({"sse4_1", "avx"})


def test_missing_and_empty_cpuinfo_are_named(tmp_path: Path) -> None:
    absent = make_tree(tmp_path / "a", {"/proc/self/environ": ""})
    (f,) = _run(absent)
    assert f.status is Status.SKIPPED
    assert f.summary == "CPU instruction sets not judged: /proc/cpuinfo absent"
    assert f.evidence == {"/proc/cpuinfo": "absent"}
    empty = make_tree(tmp_path / "e", {"/proc/cpuinfo": "\n"})
    assert facts.collect(empty).why == "empty"


# -- this machine -----------------------------------------------------------------------------------


def test_live_root_only_is_live(tmp_path: Path) -> None:
    assert LocalHost().is_live
    assert not LocalHost(str(tmp_path)).is_live
    assert not SnapshotHost(CORPUS / "vm-virt-what-hyperv-2008" / "tree").is_live


class _HiddenCpuinfo(LocalHost):
    """This machine as a sandboxed runtime shows it: /proc/cpuinfo unreadable."""

    def read(self, path: str) -> str | None:
        return None if path == facts.CPUINFO else super().read(path)


def test_this_machine_reads_proc_cpuinfo_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's list answers where it is there; py-cpuinfo (a second of a child interpreter) is
    not asked."""
    monkeypatch.setattr(facts, "_py_cpuinfo", lambda: pytest.fail("py-cpuinfo asked"))
    text = Path("/proc/cpuinfo").read_text()
    live = facts.collect(LocalHost())
    assert live.source == "/proc/cpuinfo"
    assert live.flags == _source_flags(text)
    assert live.model == _source_model(text)


def test_this_machine_with_cpuinfo_hidden_answers_through_py_cpuinfo() -> None:
    """py-cpuinfo's flags hold every flag of this machine's /proc/cpuinfo, under the kernel's names."""
    text = Path("/proc/cpuinfo").read_text()
    kernel = _source_flags(text)
    live = facts.collect(_HiddenCpuinfo())
    if kernel is None:  # not x86
        assert live.x86 is False and live.flags is None
        return
    assert live.source == "py-cpuinfo", "py-cpuinfo is installed and works on this machine"
    assert live.flags is not None and kernel <= live.flags
    assert live.model == _source_model(text)
    (cpu,) = findings_about(_run(_HiddenCpuinfo()), "cpu")
    assert cpu.status is Status.OK and cpu.evidence["oneDNN ISA"] == best_isa(isas_of(live.flags))


def test_hidden_cpuinfo_and_no_py_cpuinfo_is_skipped_naming_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "_py_cpuinfo", dict)  # what get_cpu_info answers when its child fails
    live = facts.collect(_HiddenCpuinfo())
    assert live.source == "/proc/cpuinfo" and live.flags is None


def test_a_copied_tree_is_never_answered_by_py_cpuinfo(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text(_raw_vm("vm-virt-what-hyperv-2008"))
    got = facts.collect(LocalHost(str(root)))
    assert got.source == "/proc/cpuinfo" and got.model == "Intel(R) Xeon(R) CPU            5130  @ 2.00GHz"


def test_py_cpuinfo_names_become_the_kernels() -> None:
    got = facts.from_py_cpuinfo(
        {"arch": "X86_64", "brand_raw": "Xeon", "flags": ["avx2", "avx512f", "avx512vnni", "amx_tile"]}
    )
    assert got is not None and got.flags == frozenset({"avx2", "avx512f", "avx512_vnni", "amx_tile"})
    arm = facts.from_py_cpuinfo({"arch": "ARM_8", "brand_raw": "", "flags": ["asimd"]})
    assert arm is not None and (arm.x86, arm.flags, arm.model, arm.why) == (False, None, None, "arch ARM_8")
    assert facts.from_py_cpuinfo({}) is None
    assert facts.from_py_cpuinfo({"arch": "X86_64", "flags": []}) is None


# -- the recorder keeps the variables ---------------------------------------------------------------


def test_snapshots_keep_the_onednn_variables() -> None:
    env = (
        b"HOME=/root\x00ONEDNN_MAX_CPU_ISA=AVX2\x00DNNL_MAX_CPU_ISA=avx\x00TF_ENABLE_ONEDNN_OPTS=0\x00X=1\x00"
    )
    assert (
        _filter_environ(env)
        == b"ONEDNN_MAX_CPU_ISA=AVX2\x00DNNL_MAX_CPU_ISA=avx\x00TF_ENABLE_ONEDNN_OPTS=0\x00"
    )


# -- the check on recorded CPUs with an environment -------------------------------------------------


def _node(
    tmp_path: Path, cpuinfo: str, environ: str, procs: dict[int, tuple[str, str]] | None = None
) -> SnapshotHost:
    files = {"/proc/cpuinfo": cpuinfo, "/proc/self/environ": environ}
    for pid, (cmdline, env) in (procs or {}).items():
        files[f"/proc/{pid}/cmdline"] = cmdline
        files[f"/proc/{pid}/environ"] = env
        files[f"/proc/{pid}/status"] = "Name:\tpython3\nPPid:\t1\nThreads:\t8\nCpus_allowed_list:\t0-1\n"
    return make_tree(tmp_path / "node", files)


def test_a_clean_environment_is_ok(tmp_path: Path) -> None:
    findings = _run(_node(tmp_path, _raw_vm("vm-virt-what-aws-ec2-c5-large"), "HOME=/root\0"))
    cpu = one_finding(findings, "cpu")
    assert cpu.status is Status.OK
    assert cpu.summary == (
        "Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz: oneDNN can dispatch to AVX512_CORE "
        "(avx512bw avx512dq avx512f avx512vl)"
    )
    assert (
        cpu.evidence["/proc/cpuinfo flags"] == "sse4_1 avx avx2 avx512bw avx512cd avx512dq avx512f avx512vl"
    )
    env = one_finding(findings, "environment")
    assert env.status is Status.OK
    assert env.evidence == {
        "/proc/self/environ TF_ENABLE_ONEDNN_OPTS": "(unset)",
        "/proc/self/environ ONEDNN_MAX_CPU_ISA": "(unset)",
        "/proc/self/environ DNNL_MAX_CPU_ISA": "(unset)",
    }


def test_onednn_off_on_an_avx512_cpu_warns(tmp_path: Path) -> None:
    findings = _run(_node(tmp_path, _raw_vm("vm-virt-what-aws-ec2-c5-large"), "TF_ENABLE_ONEDNN_OPTS=0\0"))
    env = one_finding(findings, "environment")
    assert env.status is Status.WARN
    assert env.summary == (
        "nodeagent's environment: TF_ENABLE_ONEDNN_OPTS=0 turns TensorFlow's oneDNN kernels off "
        "(AVX512_CORE unused)"
    )
    assert env.evidence["/proc/self/environ TF_ENABLE_ONEDNN_OPTS"] == "0"
    # No VNNI, BF16 or AMX: TensorFlow leaves oneDNN off by default here, so the fix is to turn it on.
    assert "set TF_ENABLE_ONEDNN_OPTS=1" in env.remediation and "v2.9.0" in env.remediation


def test_a_cap_below_the_cpu_in_a_training_process_warns(tmp_path: Path) -> None:
    host = _node(
        tmp_path,
        _raw_hwloc("20em64t-hybrid-1p6c2t+2ca4co1t"),
        "HOME=/root\0",
        {
            4242: ("python3\0train.py\0", "ONEDNN_MAX_CPU_ISA=AVX2\0"),
            4343: ("python3\0train.py\0--rank=1\0", "DNNL_MAX_CPU_ISA=avx2_vnni\0"),
            4444: ("python3\0serve.py\0", "ONEDNN_MAX_CPU_ISA=SSE41\0"),  # not a training process
        },
    )
    findings = _run(host)
    assert one_finding(findings, "environment").status is Status.OK
    capped = one_finding(findings, "pid 4242")
    assert capped.status is Status.WARN
    assert capped.summary == (
        "pid 4242 (python3): ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below the CPU's AVX2_VNNI (AVX2_VNNI unused)"
    )
    assert capped.remediation.startswith("In the job's environment")
    assert "unset ONEDNN_MAX_CPU_ISA (or set it to AVX2_VNNI)" in capped.remediation
    assert capped.evidence["/proc/4242/environ ONEDNN_MAX_CPU_ISA"] == "AVX2"
    fine = one_finding(findings, "pid 4343")
    assert fine.status is Status.OK and "DNNL_MAX_CPU_ISA=avx2_vnni leaves oneDNN" in fine.summary
    assert not findings_about(findings, "pid 4444")


# -- evaluation on hand-built facts ------------------------------------------------------------------

SAPPHIRE_RAPIDS = ISAS["AVX512_CORE_AMX_FP16"]  # every flag oneDNN's highest set needs
CASCADE_LAKE = ISAS["AVX512_CORE_VNNI"] | {"avx512cd"}
HASWELL = ISAS["AVX2"]


def _facts(flags: frozenset[str], env: dict[str, str] | None, procs: list[Proc] | None = None) -> Facts:
    return Facts(CpuIsa("/proc/cpuinfo", "model name", "CPU X", True, flags), env, procs or [])


def _env(flags: frozenset[str], **env: str) -> Finding:
    return one_finding(cpu_isa.evaluate(_facts(flags, env), P), "environment")


def test_the_partial_order_of_onednn_sets() -> None:
    assert best_isa(isas_of(SAPPHIRE_RAPIDS)) == "AVX512_CORE_AMX_FP16"
    assert best_isa(isas_of(CASCADE_LAKE)) == "AVX512_CORE_VNNI"
    assert best_isa(isas_of(HASWELL | {"avx_vnni"})) == "AVX2_VNNI"
    assert best_isa(isas_of(frozenset({"sse2"}))) is None
    # AVX2_VNNI is below AVX512_CORE_FP16 but not below AVX512_CORE_BF16.
    assert "AVX2_VNNI" in isas_of(ISAS["AVX512_CORE_FP16"])
    assert "AVX2_VNNI" not in isas_of(ISAS["AVX512_CORE_BF16"])
    # Xeon Phi's AVX-512 has no BW/VL/DQ: not AVX512_CORE.
    assert isas_of(ISAS["AVX512_MIC"]) == {"SSE41", "AVX", "AVX2", "AVX512_MIC"}


def test_values_as_onednn_and_tensorflow_read_them() -> None:
    assert cap_of("avx512_core_amx") == "AVX512_CORE_AMX"
    assert cap_of("AVX10_1_512_AMX") == "AVX512_CORE_AMX"
    assert cap_of("DEFAULT") == "" and cap_of("all") == ""
    assert cap_of("avx9") is None and cap_of(" AVX2") is None
    assert [tf_opts(v) for v in ("0", "False", "1", "TRUE", "yes", "")] == [
        False,
        False,
        True,
        True,
        None,
        None,
    ]


@pytest.mark.parametrize(
    ("flags", "env", "status", "words"),
    [
        (SAPPHIRE_RAPIDS, {}, Status.OK, "unset"),
        (
            SAPPHIRE_RAPIDS,
            {"TF_ENABLE_ONEDNN_OPTS": "false"},
            Status.WARN,
            "turns TensorFlow's oneDNN kernels off",
        ),
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "1"}, Status.OK, "unset"),
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "yes"}, Status.OK, "TensorFlow ignores it"),
        (
            SAPPHIRE_RAPIDS,
            {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
            Status.WARN,
            "AVX512_CORE_AMX, AVX512_CORE_AMX_FP16 unused",
        ),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "avx10_1_512_amx_fp16"}, Status.OK, "leaves oneDNN"),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "DEFAULT"}, Status.OK, "leaves oneDNN"),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "avx9"}, Status.OK, "not an instruction set oneDNN knows"),
        # ONEDNN_ wins over DNNL_; an empty ONEDNN_ is unset to oneDNN.
        (CASCADE_LAKE, {"ONEDNN_MAX_CPU_ISA": "ALL", "DNNL_MAX_CPU_ISA": "AVX2"}, Status.OK, "leaves oneDNN"),
        (
            CASCADE_LAKE,
            {"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "AVX2"},
            Status.WARN,
            "DNNL_MAX_CPU_ISA=AVX2",
        ),
        (CASCADE_LAKE, {"DNNL_MAX_CPU_ISA": "AVX512_CORE"}, Status.WARN, "AVX512_CORE_VNNI unused"),
        # Nothing of AVX-512, VNNI, BF16 or AMX to lose.
        (HASWELL, {"TF_ENABLE_ONEDNN_OPTS": "0"}, Status.OK, "no AVX-512, VNNI, BF16 or AMX"),
        (HASWELL, {"ONEDNN_MAX_CPU_ISA": "AVX"}, Status.OK, "leaves oneDNN"),
    ],
)
def test_environment_verdicts(flags: frozenset[str], env: dict[str, str], status: Status, words: str) -> None:
    f = _env(flags, **env)
    assert f.status is status, f.summary
    assert words in f.summary


def test_both_switches_are_reported_with_both_fixes() -> None:
    f = _env(SAPPHIRE_RAPIDS, TF_ENABLE_ONEDNN_OPTS="0", ONEDNN_MAX_CPU_ISA="AVX2")
    assert f.status is Status.WARN
    assert "TF_ENABLE_ONEDNN_OPTS=0 turns" in f.summary and "ONEDNN_MAX_CPU_ISA=AVX2 caps" in f.summary
    # VNNI, BF16 and AMX: TensorFlow turns oneDNN on by default here, so unsetting the variable is enough.
    assert "unset TF_ENABLE_ONEDNN_OPTS: TensorFlow 2.9+ turns oneDNN on by default" in f.remediation
    assert "(or set it to AVX512_CORE_AMX_FP16)" in f.remediation
    assert f.expected == "oneDNN on, up to AVX512_CORE_AMX_FP16"


def test_an_unreadable_environment_is_skipped_naming_the_path() -> None:
    findings = cpu_isa.evaluate(_facts(CASCADE_LAKE, None), P)
    env = one_finding(findings, "environment")
    assert env.status is Status.SKIPPED and env.evidence == {"/proc/self/environ": "absent"}
    assert one_finding(findings, "cpu").status is Status.OK


def test_training_processes_are_judged_one_by_one() -> None:
    procs = [
        Proc(7, 1, "python3", "python3 train.py", 8, [0, 1], {"TF_ENABLE_ONEDNN_OPTS": "0"}),
        Proc(8, 1, "python3", "python3 train.py", 8, [2, 3], {"TF_ENABLE_ONEDNN_OPTS": "1"}),
    ]
    findings = cpu_isa.evaluate(_facts(CASCADE_LAKE, {}, procs), P)
    assert one_finding(findings, "pid 7").status is Status.WARN
    assert one_finding(findings, "pid 8").status is Status.OK
    assert one_finding(findings, "environment").status is Status.OK
