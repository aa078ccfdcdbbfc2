"""threads: CPUs available vs thread-pool variables, ranks, and running training processes."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.checks import threads
from nodeagent.checks.threads import Facts, Params, Proc, pool_size
from nodeagent.core import parse
from nodeagent.core.finding import Status
from nodeagent.facts.cgroup import CgroupCpus
from nodeagent.facts.topology import NumaNode, Topology
from nodeagent.host import LocalHost, SnapshotHost
from tests.support.helpers import FIXTURE_TREES, findings_about, fixture_host, make_tree, one_finding

# -- hand-built facts -----------------------------------------------------------------------------


def _topology(n: int, smt: int = 1) -> Topology:
    cpus = list(range(n))
    return Topology(
        cpus_online=cpus,
        cpus_offline=[],
        packages=1,
        cores=n // smt,
        threads_per_core=smt,
        numa_nodes=[NumaNode(0, cpus, 1024)],
        gpu_memory_nodes=[],
        ignored_numa_nodes={},
        cpu_model=None,
        smt_control=None,
        memory_total_mib=1024,
        cpu_package=dict.fromkeys(cpus, 0),
        # SMT siblings n/smt apart, as Intel numbers them: CPU c and c + n/smt share a core.
        core_of={c: c % (n // smt) for c in cpus},
        problems=[],
    )


def _cpus(n: int, quota: float | None = None, affinity: list[int] | None = None) -> CgroupCpus:
    return CgroupCpus(
        affinity=list(range(n)) if affinity is None else affinity,
        mems_allowed=[0],
        cpuset=list(range(n)),
        cpuset_source="/sys/fs/cgroup/cpuset.cpus.effective",
        quota_cpus=quota,
        quota_source=None if quota is None else "/sys/fs/cgroup/cpu.max",
        online=list(range(n)),
        cpu_version=2,
        cpuset_version=2,
        cgroup_paths={"cpu": "/", "cpuset": "/"},
        namespace_root=False,
    )


def _facts(
    n: int = 8,
    env: dict[str, str] | None = None,
    procs: list[Proc] | None = None,
    quota: float | None = None,
    smt: int = 1,
    scanned: int = 100,
) -> Facts:
    return Facts(
        cpus=_cpus(n, quota),
        topology=_topology(n, smt),
        environ={} if env is None else env,
        processes=procs or [],
        scanned=scanned,
    )


def _proc(
    pid: int, threads_n: int, cpus: list[int], ppid: int = 1, cmd: str = "python train.py", **env: str
) -> Proc:
    return Proc(pid, ppid, "python3", cmd, threads_n, cpus, dict(env))


@pytest.mark.parametrize(
    ("var", "raw", "n"),
    [
        ("OMP_NUM_THREADS", "8", 8),
        ("OMP_NUM_THREADS", "8,2", 8),
        ("OMP_NUM_THREADS", "0", None),
        ("OMP_NUM_THREADS", "eight", None),
        ("TF_NUM_INTRAOP_THREADS", "0", -1),
        ("TF_NUM_INTRAOP_THREADS", " 4 ", 4),
        ("MKL_NUM_THREADS", "-2", None),
    ],
)
def test_pool_size(var: str, raw: str, n: int | None) -> None:
    assert pool_size(var, raw) == n


def test_all_unset_is_ok_with_what_tf_will_pick() -> None:
    f = threads.evaluate(_facts(8, smt=2), Params())
    cpus = one_finding(f, "cpus")
    assert cpus.status is Status.OK
    assert "8 CPUs available" in cpus.summary and "4 physical cores" in cpus.summary
    defaults = one_finding(f, "defaults")
    assert defaults.status is Status.OK
    assert "TF intra-op: 8 (every CPU in the affinity mask)" in defaults.summary
    assert "MKL: 4 (physical cores)" in defaults.summary
    assert defaults.fix is None


def test_defaults_oversubscribe_a_cfs_quota() -> None:
    # 32 CPUs in the mask, a 4-CPU quota: TF sizes its pools from the mask and gets throttled.
    f = threads.evaluate(_facts(32, quota=4.0), Params())
    assert "CFS quota 4 CPUs" in one_finding(f, "cpus").summary
    defaults = one_finding(f, "defaults")
    assert defaults.status is Status.WARN
    assert defaults.fix == "tf-threads"
    assert "TF_NUM_INTRAOP_THREADS=4" in defaults.remediation


def test_pool_variable_larger_than_cpus_warns() -> None:
    f = threads.evaluate(_facts(8, env={"OMP_NUM_THREADS": "16", "TF_NUM_INTRAOP_THREADS": "8"}), Params())
    omp = one_finding(f, "OMP_NUM_THREADS")
    assert omp.status is Status.WARN
    assert omp.fix == "tf-threads"
    assert omp.evidence["/proc/self/environ OMP_NUM_THREADS"] == "16"
    assert one_finding(f, "TF_NUM_INTRAOP_THREADS").status is Status.OK
    assert "OMP_NUM_THREADS" not in one_finding(f, "defaults").summary


def test_two_inter_op_threads_are_accepted_on_one_cpu() -> None:
    """Inter-op threads wait on blocking ops rather than compute: the floor of two the tf-threads
    tuner plans is accepted on a single CPU; intra-op threads, which compute, are not."""
    env = {"TF_NUM_INTEROP_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2"}
    f = threads.evaluate(_facts(1, env=env), Params())
    assert one_finding(f, "TF_NUM_INTEROP_THREADS").status is Status.OK
    assert one_finding(f, "TF_NUM_INTRAOP_THREADS").status is Status.WARN
    more = one_finding(
        threads.evaluate(_facts(1, env={"TF_NUM_INTEROP_THREADS": "3"}), Params()), "TF_NUM_INTEROP_THREADS"
    )
    assert more.status is Status.WARN and more.expected == "<= 2"


def test_physical_core_budget_when_smt_siblings_do_not_count() -> None:
    facts = _facts(8, env={"TF_NUM_INTRAOP_THREADS": "8"}, smt=2)
    assert one_finding(threads.evaluate(facts, Params()), "TF_NUM_INTRAOP_THREADS").status is Status.OK
    strict = one_finding(threads.evaluate(facts, Params(count_smt_siblings=False)), "TF_NUM_INTRAOP_THREADS")
    assert strict.status is Status.WARN
    assert "4 physical cores" in strict.summary


def test_unparsable_variable_warns() -> None:
    f = threads.evaluate(_facts(8, env={"MKL_NUM_THREADS": "all"}), Params())
    mkl = one_finding(f, "MKL_NUM_THREADS")
    assert mkl.status is Status.WARN
    assert "not a thread count" in mkl.summary


def test_tf_zero_means_default() -> None:
    f = threads.evaluate(_facts(8, env={"TF_NUM_INTEROP_THREADS": "0"}), Params())
    assert not findings_about(f, "TF_NUM_INTEROP_THREADS")
    assert "TF_NUM_INTEROP_THREADS" in one_finding(f, "defaults").summary


def test_environment_unreadable_is_skipped() -> None:
    f = threads.evaluate(replace(_facts(8), environ=None), Params())
    env = one_finding(f, "environment")
    assert env.status is Status.SKIPPED
    assert env.evidence == {"/proc/self/environ": "absent"}


def test_no_cpu_information_is_skipped() -> None:
    cpus = replace(_cpus(0), affinity=None, cpuset=None, online=[])
    f = threads.evaluate(replace(_facts(4), cpus=cpus), Params())
    assert one_finding(f, "cpus").status is Status.SKIPPED
    assert not findings_about(f, "defaults")


def test_parse_problems_warn() -> None:
    cpus = replace(_cpus(4), problems=["/sys/fs/cgroup/cpu.max: unparsable value 'x'"])
    f = threads.evaluate(replace(_facts(4), cpus=cpus), Params())
    warn = [x for x in findings_about(f, "cpus") if x.status is Status.WARN]
    assert warn and warn[0].evidence == {"/sys/fs/cgroup/cpu.max": "unparsable value 'x'"}


def test_declared_local_ranks_times_intra_op() -> None:
    # torchrun exported LOCAL_WORLD_SIZE=4; intra-op unset: each rank takes all 16 CPUs.
    f = threads.evaluate(_facts(16, env={"LOCAL_WORLD_SIZE": "4"}), Params())
    ranks = one_finding(f, "ranks")
    assert ranks.status is Status.WARN
    assert "4 ranks x 16 intra-op threads = 64" in ranks.summary
    assert "TF_NUM_INTRAOP_THREADS=4" in ranks.remediation
    ok = threads.evaluate(_facts(16, env={"TF_NUM_INTRAOP_THREADS": "4"}), Params(local_ranks=4))
    assert one_finding(ok, "ranks").status is Status.OK


def test_single_rank_has_no_rank_finding() -> None:
    assert not findings_about(
        threads.evaluate(_facts(16, env={"SLURM_NTASKS_PER_NODE": "1"}), Params()), "ranks"
    )


def test_no_processes_is_skipped_with_reason() -> None:
    none_recorded = one_finding(threads.evaluate(_facts(8, scanned=0), Params()), "processes")
    assert none_recorded.status is Status.SKIPPED and "no process folders" in none_recorded.summary
    idle = one_finding(threads.evaluate(_facts(8, scanned=250), Params()), "processes")
    assert idle.status is Status.SKIPPED and "250 processes" in idle.summary


def test_process_with_too_many_threads() -> None:
    cpus = list(range(8))
    f = threads.evaluate(_facts(64, procs=[_proc(100, 200, cpus)]), Params())
    warn = one_finding(f, "pid 100")
    assert warn.status is Status.WARN
    assert warn.fix == "tf-threads"
    assert warn.evidence["/proc/100/status Threads"] == "200"
    assert warn.evidence["/proc/100/status Cpus_allowed_list"] == "0-7"
    # 40 threads on 8 CPUs stay under the floor of 64 threads: fine.
    ok = threads.evaluate(_facts(64, procs=[_proc(100, 40, cpus)]), Params())
    assert not findings_about(ok, "pid 100")
    assert one_finding(ok, "processes").status is Status.OK


def test_process_pool_variable_larger_than_its_mask() -> None:
    f = threads.evaluate(_facts(64, procs=[_proc(7, 20, [0, 1, 2, 3], OMP_NUM_THREADS="32")]), Params())
    warn = one_finding(f, "pid 7")
    assert warn.status is Status.WARN
    assert "OMP_NUM_THREADS=32" in warn.summary and "4 CPUs" in warn.summary
    assert warn.evidence["/proc/7/environ OMP_NUM_THREADS"] == "32"


def test_unpinned_ranks_share_cpus() -> None:
    everything = list(range(16))
    procs = [_proc(pid, 30, everything, cmd=f"python train.py --rank {pid}") for pid in (10, 11, 12, 13)]
    f = threads.evaluate(_facts(16, procs=procs), Params())
    pin = one_finding(f, "pinning")
    assert pin.status is Status.WARN
    assert pin.fix == "numa-pinning"
    assert "4 training processes share CPUs 0-15" in pin.summary
    assert "64 threads on 16 CPUs" in pin.summary


def test_pinned_ranks_with_dataloader_workers_and_a_launcher() -> None:
    launcher = Proc(5, 1, "python3", "python -m torch.distributed.run train.py", 3, list(range(16)), {})
    rank_a = _proc(10, 30, list(range(8)), ppid=5, cmd="python train.py --local-rank 0")
    rank_b = _proc(11, 30, list(range(8, 16)), ppid=5, cmd="python train.py --local-rank 1")
    # DataLoader workers: forked from the rank, same command line and CPUs.
    workers = [replace(rank_a, pid=20 + i, ppid=10, threads=2) for i in range(3)]
    f = threads.evaluate(_facts(16, procs=[launcher, rank_a, rank_b, *workers]), Params())
    pin = one_finding(f, "pinning")
    assert pin.status is Status.OK
    assert "2 training ranks pinned to disjoint CPU sets" in pin.summary
    assert "3 worker(s) and 1 launcher(s) not counted" in pin.summary
    assert all(x.status is not Status.WARN for x in f)


# -- recorded trees -------------------------------------------------------------------------------


def test_cpuset_limits_the_power9_tree() -> None:
    f = threads.CHECK.run(fixture_host("nvidiagpunumanodes"), Params())
    cpus = one_finding(f, "cpus")
    assert cpus.status is Status.OK
    # cpuset /jjh = 0-87 intersected with the recorded CPUs 0-15,88-103; SMT4 POWER9 cores.
    assert cpus.summary.startswith("16 CPUs available")
    assert "cgroup v1 cpuset 0-87" in cpus.summary
    assert "4 physical cores" in cpus.summary
    assert cpus.evidence["/sys/fs/cgroup/cpuset/jjh/cpuset.effective_cpus"] == "0-87"
    assert one_finding(f, "environment").status is Status.SKIPPED


def test_torque_cpuset_tree() -> None:
    cpus = one_finding(threads.CHECK.run(fixture_host("40intel64-2g2n4c+pcilocality"), Params()), "cpus")
    assert cpus.summary.startswith("40 CPUs available")
    assert cpus.evidence["/dev/cpuset/torque/513099.master.cm.cluster/cpus"] == "0-39"


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_without_unknown(name: str) -> None:
    findings = threads.CHECK.run(fixture_host(name), Params())
    assert findings
    assert all(f.status is not Status.UNKNOWN for f in findings)
    assert all(f.check_id == "threads" for f in findings)


# -- collect on built /proc trees -----------------------------------------------------------------


def _status(name: str, pid: int, ppid: int, threads_n: int | str, cpus: str) -> str:
    return (
        f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n"
        f"Threads:\t{threads_n}\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\n"
    )


def _nul(*items: str) -> str:
    return "\x00".join(items) + "\x00"


V1_MOUNTINFO = (
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
)


def _proc_tree(extra: dict[str, str]) -> dict[str, str]:
    files = {
        "/sys/devices/system/cpu/online": "0-7\n",
        "/proc/self/status": _status("nodeagent", 99, 1, 1, "0-7"),
        "/proc/self/environ": _nul(
            "PATH=/usr/bin", "OMP_NUM_THREADS=16", "SECRET_TOKEN=hunter2", "HOME=/root"
        ),
        # A rank with 120 threads on 4 CPUs, asking OpenMP for 16.
        "/proc/100/status": _status("python3", 100, 1, 120, "0-3"),
        "/proc/100/cmdline": _nul("/usr/bin/python3", "train.py", "--epochs", "3"),
        "/proc/100/environ": _nul("OMP_NUM_THREADS=16", "AWS_SECRET_ACCESS_KEY=x"),
        # A second rank on overlapping CPUs, PyTorch-renamed main thread.
        "/proc/101/status": _status("pt_main_thread", 101, 1, 12, "2-7"),
        "/proc/101/cmdline": _nul("/opt/conda/bin/python", "-m", "torch.distributed.run", "x.py"),
        "/proc/101/environ": "",
        # A shell that inherited a pool variable: one thread, not a training process.
        "/proc/102/status": _status("bash", 102, 1, 1, "0-7"),
        "/proc/102/cmdline": _nul("-bash"),
        "/proc/102/environ": _nul("OMP_NUM_THREADS=4"),
        # A compiled program using an OpenMP pool.
        "/proc/103/status": _status("solver", 103, 1, 9, "0-7"),
        "/proc/103/cmdline": _nul("./solver"),
        "/proc/103/environ": _nul("OMP_NUM_THREADS=8"),
        # A kernel thread: empty command line.
        "/proc/2/status": _status("kthreadd", 2, 0, 1, "0-7"),
        "/proc/2/cmdline": "",
        # Python, but not a training job ("constraints" must not match "train").
        "/proc/104/status": _status("python3", 104, 1, 3, "0-7"),
        "/proc/104/cmdline": _nul("python3", "-m", "pip", "install", "-c", "constraints.txt"),
    }
    files.update(extra)
    return files


def test_collect_reads_processes_through_the_host(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        _proc_tree(
            {
                "/proc/self/cgroup": "4:cpu,cpuacct:/\n3:cpuset:/\n",
                "/proc/self/mountinfo": V1_MOUNTINFO,
                "/sys/fs/cgroup/cpuset/cpuset.effective_cpus": "0-7\n",
                "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            }
        ),
    )
    facts = threads.collect(host)
    assert [p.pid for p in facts.processes] == [100, 101, 103]
    assert facts.scanned == 6  # pids 2, 100-104
    # Only thread-pool variables are kept: the rest of an environment may hold secrets.
    assert facts.environ == {"OMP_NUM_THREADS": "16"}
    assert facts.processes[0].env == {"OMP_NUM_THREADS": "16"}
    assert facts.processes[0].cmdline == "/usr/bin/python3 train.py --epochs 3"
    assert facts.processes[1].cpus_allowed == [2, 3, 4, 5, 6, 7]

    findings = threads.evaluate(facts, Params())
    assert one_finding(findings, "cpus").summary.startswith("8 CPUs available")
    assert one_finding(findings, "OMP_NUM_THREADS").status is Status.WARN  # 16 > 8
    pid100 = findings_about(findings, "pid 100")
    assert any(
        f.summary == "pid 100 (python3) asks for OMP_NUM_THREADS=16 but may run on 4 CPUs" for f in pid100
    )
    assert any("120 threads on 4 CPUs" in f.summary for f in pid100)
    pin = one_finding(findings, "pinning")
    # Ranks 100 (0-3), 101 (2-7) and the OpenMP solver (0-7) overlap; pools 16 + 6 (its mask) + 8.
    assert pin.status is Status.WARN
    assert "3 training processes share CPUs 0-7" in pin.summary
    assert "30 threads on 8 CPUs" in pin.summary


def test_collect_v2_quota_limits_the_budget(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        _proc_tree(
            {
                "/proc/self/environ": _nul("PATH=/bin"),
                "/proc/self/cgroup": "0::/job\n",
                "/proc/self/mountinfo": "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
                "/sys/fs/cgroup/job/cpu.max": "200000 100000\n",
                "/sys/fs/cgroup/job/cpuset.cpus.effective": "0-7\n",
            }
        ),
    )
    findings = threads.CHECK.run(host, Params())
    assert "2 CPUs available" in one_finding(findings, "cpus").summary
    defaults = one_finding(findings, "defaults")
    assert defaults.status is Status.WARN  # TF would start 8 threads per pool on a 2-CPU quota


def test_collect_container_namespace_root(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/sys/devices/system/cpu/online": "0-31\n",
            "/proc/self/status": _status("nodeagent", 1, 0, 1, "0-31"),
            "/proc/self/environ": _nul("TF_NUM_INTRAOP_THREADS=6"),
            "/proc/self/cgroup": "0::/kubepods/burstable/pod-1/abc\n",
            "/proc/self/mountinfo": "30 23 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
            "/sys/fs/cgroup/cpu.max": "600000 100000\n",
        },
    )
    findings = threads.CHECK.run(host, Params())
    cpus = one_finding(findings, "cpus")
    assert "6 CPUs available" in cpus.summary and "container" in cpus.summary
    assert one_finding(findings, "TF_NUM_INTRAOP_THREADS").status is Status.OK
    assert one_finding(findings, "processes").status is Status.SKIPPED


def test_collect_corrupt_proc_files(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        _proc_tree(
            {
                "/proc/self/environ": "OMP_NUM_THREADS=\x00\x00\x00garbage",
                "/proc/100/status": _status("python3", 100, 1, "many", "0-3,zz"),
                "/proc/101/status": "\x00\x00\x00",
                "/proc/103/cmdline": "\x00\x00",
            }
        ),
    )
    facts = threads.collect(host)
    findings = threads.evaluate(facts, Params())
    assert all(f.status is not Status.UNKNOWN for f in findings)
    problems = [f for f in findings_about(findings, "cpus") if f.status is Status.WARN]
    assert problems
    assert "/proc/100/status" in problems[0].evidence
    assert one_finding(findings, "OMP_NUM_THREADS").status is Status.WARN  # empty value: not a count


def test_collect_empty_tree(tmp_path: Path) -> None:
    findings = threads.CHECK.run(make_tree(tmp_path, {}), Params())
    assert {f.subject: f.status for f in findings} == {
        "cpus": Status.SKIPPED,
        "environment": Status.SKIPPED,
        "processes": Status.SKIPPED,
    }


# -- this machine ---------------------------------------------------------------------------------


def test_local_host() -> None:
    findings = threads.CHECK.run(LocalHost(), Params())
    assert all(f.status is not Status.UNKNOWN for f in findings)
    cpus = one_finding(findings, "cpus")
    assert cpus.status is Status.OK
    facts = threads.collect(LocalHost())
    assert facts.cpus.effective_cpus == len(os.sched_getaffinity(0)) or facts.cpus.quota_cpus is not None
    assert cpus.summary.startswith(f"{facts.cpus.effective_cpus} CPUs available")
    # The test process itself is never reported as a training process.
    assert os.getpid() not in [p.pid for p in facts.processes]


def test_snapshot_of_this_machine_reads_back_the_same_budget(tmp_path: Path) -> None:
    from nodeagent.host.recorder import snapshot

    archive = tmp_path / "node.tar.gz"
    snapshot(LocalHost(), threads.CHECK.paths, threads.CHECK.commands, archive)
    recorded = threads.collect(SnapshotHost(archive))
    live = threads.collect(LocalHost())
    assert recorded.cpus.affinity == live.cpus.affinity
    assert recorded.cpus.cpuset == live.cpus.cpuset
    assert recorded.cpus.cpuset_source == live.cpus.cpuset_source
    assert recorded.cpus.quota_cpus == live.cpus.quota_cpus
    assert recorded.cpus.effective_cpus == live.cpus.effective_cpus


def test_interpreter_path_is_not_a_training_hint(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/300/status": _status("python3", 300, 1, 4, "0-1"),
            "/proc/300/cmdline": _nul("/opt/envs/torch-train/bin/python3", "-m", "http.server"),
            "/proc/301/status": _status("python3", 301, 1, "²", "0-1"),
            "/proc/301/cmdline": _nul("python3", "pretrain.py"),
        },
    )
    facts = threads.collect(host)
    assert [p.pid for p in facts.processes] == [301]
    assert facts.processes[0].threads is None
    assert facts.problems == ["/proc/301/status: unparsable Threads '²'"]


STATUS_LINES = (
    "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nNoThreads:\t9\nThreads:\t17\n"
    "Cpus_allowed:\tff\nCpus_allowed_list:\t0-7\n"
)


@pytest.mark.parametrize("key", ["Name", "Threads", "Cpus_allowed", "Cpus_allowed_list", "Umask", "VmRSS"])
def test_one_status_field_reads_as_the_whole_parse_does(key: str) -> None:
    """The candidates' scan reads Name and Threads alone: a key's own line, never one that ends
    with its name, and "" when absent, as from the full parse."""
    for text in (STATUS_LINES, Path("/proc/self/status").read_text()):
        assert threads._status_field(text, key) == parse.key_values(text).get(key, "")


def test_threads_and_cpu_isa_scan_the_process_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    host = LocalHost()
    calls: list[LocalHost] = []
    table = threads._process_table

    def counted(h: LocalHost) -> tuple[list[threads._Candidate], int]:
        calls.append(h)
        return table(h)

    monkeypatch.setattr(threads, "_process_table", counted)
    first = threads.training_processes(host)
    again = threads.training_processes(host, (*threads.KEPT_VARS, "ONEDNN_VERBOSE"))
    assert len(calls) == 1 and [p.pid for p in first[0]] == [p.pid for p in again[0]]
