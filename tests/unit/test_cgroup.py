"""CPUs available to a job: affinity, cgroup v1/v2 cpusets and CFS quotas, containers, corrupt values."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from nodeagent.facts import cgroup
from nodeagent.facts.cgroup import Mount, parse_cpu_max, parse_mountinfo, parse_mounts, parse_proc_cgroup
from nodeagent.host import LocalHost
from tests.support.helpers import FIXTURE_TREES, fixture_host, make_tree

STATUS = "Name:\tpython3\nThreads:\t1\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\n"
ONLINE = "/sys/devices/system/cpu/online"


def _status(cpus: str) -> str:
    return STATUS.format(cpus=cpus)


# -- parsers --------------------------------------------------------------------------------------


def test_parse_mountinfo_v1_v2_and_escapes() -> None:
    text = (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:5 - cgroup cgroup rw,cpuset\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /mnt/my\\040cgroup rw,relatime - cgroup2 cgroup2 rw\n"
        "garbage line\n"
    )
    mounts = parse_mountinfo(text)
    assert mounts == [
        Mount("/sys/fs/cgroup/cpu,cpuacct", "/docker/abc", 1, frozenset({"cpu", "cpuacct"})),
        Mount("/sys/fs/cgroup/cpuset", "/", 1, frozenset({"cpuset"})),
        Mount("/mnt/my cgroup", "/", 2, frozenset()),
    ]


def test_parse_mounts_noprefix_and_legacy_cpuset_fs() -> None:
    text = (
        "none /dev/cpuset cgroup rw,relatime,cpuset,noprefix,release_agent=/sbin/x 0 0\n"
        "none /cpusets cpuset rw 0 0\n"
        "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n"
    )
    assert parse_mounts(text) == [
        Mount("/dev/cpuset", "/", 1, frozenset({"cpuset"}), noprefix=True),
        Mount("/cpusets", "/", 1, frozenset({"cpuset"}), noprefix=True),
    ]


def test_parse_proc_cgroup() -> None:
    text = "12:cpuset:/job\n4:cpuacct,cpu:/slurm/uid_1/job_2\n1:name=systemd:/x\n0::/user.slice\nbad\n"
    assert parse_proc_cgroup(text) == {
        "cpuset": "/job",
        "cpuacct": "/slurm/uid_1/job_2",
        "cpu": "/slurm/uid_1/job_2",
        "name=systemd": "/x",
        "": "/user.slice",
    }


@pytest.mark.parametrize(
    ("text", "cpus"), [("max 100000", None), ("150000 100000", 1.5), ("200000", 2.0), ("50000 50000\n", 1.0)]
)
def test_parse_cpu_max(text: str, cpus: float | None) -> None:
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize("text", ["", "garbage", "100 0", "-5 100000", "1 2 3", "max -1"])
def test_parse_cpu_max_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_max(text)


# -- recorded trees -------------------------------------------------------------------------------


def test_torque_cpuset_under_dev_cpuset_noprefix() -> None:
    # /proc/mounts: "none /dev/cpuset cgroup rw,relatime,cpuset,noprefix,..."; no /proc/self/cgroup,
    # /proc/self/cpuset = /torque/513099.master.cm.cluster whose "cpus" file holds 0-39.
    c = cgroup.collect(fixture_host("40intel64-2g2n4c+pcilocality"))
    assert c.cgroup_paths == {"cpuset": "/torque/513099.master.cm.cluster"}
    assert c.cpuset_source == "/dev/cpuset/torque/513099.master.cm.cluster/cpus"
    assert c.cpuset == list(range(40))
    assert c.cpuset_version == 1
    assert c.quota_cpus is None
    assert c.effective_cpus == 40


def test_cpuset_wider_than_the_recorded_cpus() -> None:
    # cpuset /jjh: cpuset.effective_cpus 0-87, but hwloc trimmed the tree to CPUs 0-15,88-103.
    c = cgroup.collect(fixture_host("nvidiagpunumanodes"))
    assert c.cgroup_paths["cpuset"] == "/jjh"
    assert c.cpuset_source == "/sys/fs/cgroup/cpuset/jjh/cpuset.effective_cpus"
    assert c.cpuset == list(range(88))
    assert c.online == [*range(16), *range(88, 104)]
    assert c.allowed == list(range(16))
    assert c.effective_cpus == 16


def test_root_cpuset_of_offline_cpu_tree() -> None:
    # "9:cpuset:/" and /sys/fs/cgroup/cpuset/cpuset.cpus = 4-20 (no effective_cpus recorded).
    c = cgroup.collect(fixture_host("offline-cpu0-node0"))
    assert c.cpuset_source == "/sys/fs/cgroup/cpuset/cpuset.cpus"
    assert c.cpuset == list(range(4, 21))
    assert c.effective_cpus == 17
    # "8:cpuacct,cpu:/user.slice", but the recording holds no cpu,cpuacct folder: no quota.
    assert c.cgroup_paths["cpu"] == "/user.slice"
    assert c.quota_cpus is None


@pytest.mark.parametrize("name", FIXTURE_TREES)
def test_every_tree_gives_a_count(name: str) -> None:
    c = cgroup.collect(fixture_host(name))
    assert c.effective_cpus is not None and c.effective_cpus > 0
    assert c.problems == []


# -- hand-built layouts ---------------------------------------------------------------------------

V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_v2_innermost_cpuset_and_tightest_quota(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/self/status": _status("0-5"),
            "/proc/self/cgroup": "0::/user.slice/job\n",
            "/proc/self/mountinfo": V2_MOUNTINFO,
            ONLINE: "0-7\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-7\n",
            "/sys/fs/cgroup/cpu.max": "max 100000\n",  # the root has none in reality; harmless
            "/sys/fs/cgroup/user.slice/cpu.max": "100000 100000\n",  # 1 CPU: binds
            "/sys/fs/cgroup/user.slice/job/cpu.max": "150000 100000\n",
            "/sys/fs/cgroup/user.slice/job/cpuset.cpus.effective": "0-3\n",
        },
    )
    c = cgroup.collect(host)
    assert (c.cpu_version, c.cpuset_version) == (2, 2)
    assert c.cpuset == [0, 1, 2, 3]
    assert c.cpuset_source == "/sys/fs/cgroup/user.slice/job/cpuset.cpus.effective"
    assert c.quota_cpus == 1.0
    assert c.quota_source == "/sys/fs/cgroup/user.slice/cpu.max"
    assert c.allowed == [0, 1, 2, 3]
    assert c.effective_cpus == 1
    assert not c.namespace_root


def test_v2_cpuset_inherited_from_an_ancestor(tmp_path: Path) -> None:
    # The cpuset controller is not enabled below user.slice: the job has no cpuset files.
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "0::/user.slice/job\n",
            "/proc/self/mountinfo": V2_MOUNTINFO,
            "/sys/fs/cgroup/user.slice/cpuset.cpus.effective": "2-3\n",
            "/sys/fs/cgroup/user.slice/job/cpu.max": "250000 100000\n",
        },
    )
    c = cgroup.collect(host)
    assert c.cpuset == [2, 3]
    assert c.quota_cpus == 2.5
    assert c.effective_cpus == 2  # min(2 CPUs, ceil(2.5))


def test_v1_slurm_job_quota_and_cpuset(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/self/status": _status("0-15"),
            "/proc/self/cgroup": "5:cpuset:/slurm/uid_1/job_7\n4:cpu,cpuacct:/slurm/uid_1/job_7\n",
            "/proc/self/mountinfo": (
                "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                "34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
            ),
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1/job_7/cpu.cfs_quota_us": "300000\n",
            "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1/job_7/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpuset/cpuset.cpus": "0-15\n",
            "/sys/fs/cgroup/cpuset/slurm/uid_1/job_7/cpuset.cpus": "4-11\n",
            "/sys/fs/cgroup/cpuset/slurm/uid_1/job_7/cpuset.effective_cpus": "4-7\n",
        },
    )
    c = cgroup.collect(host)
    assert (c.cpu_version, c.cpuset_version) == (1, 1)
    # cpuset.effective_cpus beats cpuset.cpus of the same group (hot-unplugged CPUs drop out of it).
    assert c.cpuset == [4, 5, 6, 7]
    assert c.quota_cpus == 3.0
    assert c.quota_source == "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1/job_7/cpu.cfs_quota_us"
    assert c.effective_cpus == 3
    assert c.evidence["/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1/job_7/cpu.cfs_quota_us"] == "300000"


def test_v1_cpu_mounted_alone_beside_cgroup2_hybrid(tmp_path: Path) -> None:
    # This machine's layout: cpu and cpuacct on separate v1 hierarchies, cgroup2 at .../unified.
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n",
            "/proc/self/mountinfo": (
                "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
                "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
                "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
            ),
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpuset/cpuset.effective_cpus": "0-1\n",
            "/sys/fs/cgroup/unified/cpu.max": "100000 100000\n",  # not the cpu controller's hierarchy
        },
    )
    c = cgroup.collect(host)
    assert c.cpu_version == 1
    assert c.quota_cpus == 0.5
    assert c.effective_cpus == 1  # half a CPU still runs one thread at a time


def test_container_v2_path_not_visible_uses_namespace_root(tmp_path: Path) -> None:
    # Without a cgroup namespace /proc/self/cgroup shows the host path; /sys/fs/cgroup is the
    # container's own group, mounted as the root.
    host = make_tree(
        tmp_path,
        {
            "/proc/self/status": _status("0-63"),
            "/proc/self/cgroup": "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n",
            "/proc/self/mountinfo": V2_MOUNTINFO,
            ONLINE: "0-63\n",
            "/sys/fs/cgroup/cpu.max": "400000 100000\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-63\n",
        },
    )
    c = cgroup.collect(host)
    assert c.namespace_root
    assert c.quota_cpus == 4.0
    assert c.quota_source == "/sys/fs/cgroup/cpu.max"
    assert c.effective_cpus == 4


def test_container_v1_mount_root_maps_the_group(tmp_path: Path) -> None:
    # Docker on v1: mountinfo's root field says /docker/abc is what is mounted at the mount point.
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "4:cpu,cpuacct:/docker/abc\n3:cpuset:/docker/abc\n",
            "/proc/self/mountinfo": (
                "700 690 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n"
                "701 690 0:31 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpuset\n"
            ),
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpuset/cpuset.cpus": "0-7\n",
        },
    )
    c = cgroup.collect(host)
    assert not c.namespace_root  # the path mapped exactly onto the mount point
    assert c.quota_cpus == 2.0
    assert c.cpuset == list(range(8))
    assert c.effective_cpus == 2


def test_no_mount_tables_falls_back_to_the_usual_layout(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
            "/sys/fs/cgroup/cpu.max": "200000 100000\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-5\n",
        },
    )
    c = cgroup.collect(host)
    assert c.cgroup_paths == {"cpu": "/", "cpuset": "/"}
    assert c.effective_cpus == 2


def test_nothing_readable(tmp_path: Path) -> None:
    c = cgroup.collect(make_tree(tmp_path, {}))
    assert c.affinity is None and c.cpuset is None and c.quota_cpus is None
    assert c.allowed is None
    assert c.effective_cpus is None
    assert c.problems == []


def test_corrupt_values_are_problems_not_exceptions(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/self/status": "Name:\tx\nCpus_allowed_list:\t0-\x00\x003zz\nMems_allowed_list:\tnope\n",
            "/proc/self/cgroup": "0::/job\n\x00\x00garbage\n",
            "/proc/self/mountinfo": V2_MOUNTINFO + "truncated 1 2\n",
            ONLINE: "0-3\n",
            "/sys/fs/cgroup/job/cpu.max": "lots 100000\n",
            "/sys/fs/cgroup/job/cpuset.cpus.effective": "0-x\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-1\x00\x00",
        },
    )
    c = cgroup.collect(host)
    assert c.affinity is None
    assert c.quota_cpus is None
    assert c.cpuset == [0, 1]  # the corrupt inner value is skipped, the root's trailing NULs stripped
    assert c.effective_cpus == 2
    joined = "\n".join(c.problems)
    assert "Cpus_allowed_list" in joined
    assert "Mems_allowed_list" in joined
    assert "/sys/fs/cgroup/job/cpu.max" in joined
    assert "/sys/fs/cgroup/job/cpuset.cpus.effective" in joined


def test_v1_zero_quota_and_bad_period(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "2:cpu,cpuacct:/a/b\n",
            "/proc/self/mountinfo": "1 1 0:1 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu\n",
            "/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us": "0\n",
            "/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us": "100000\n",
            "/sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us": "0\n",
        },
    )
    c = cgroup.collect(host)
    assert c.quota_cpus is None
    assert any("cfs_quota_us: invalid CFS quota 0" in p for p in c.problems)
    assert any("a/b/cpu.cfs_period_us" in p for p in c.problems)


def test_escaping_paths_stay_under_the_mount(tmp_path: Path) -> None:
    # A process outside a cgroup namespace sees "/../../x"; it must not read outside the hierarchy.
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "0::/../../escape\n",
            "/proc/self/mountinfo": V2_MOUNTINFO,
            "/sys/fs/cgroup/cpu.max": "100000 100000\n",
            "/sys/escape/cpu.max": "900000 100000\n",
        },
    )
    c = cgroup.collect(host)
    assert c.quota_cpus == 1.0
    assert c.namespace_root


# -- this machine ---------------------------------------------------------------------------------


def test_local_host_matches_sched_getaffinity() -> None:
    c = cgroup.collect(LocalHost())
    affinity = sorted(os.sched_getaffinity(0))
    assert c.affinity == affinity
    assert c.allowed == affinity
    expected = len(affinity)
    if c.quota_cpus is not None:
        expected = min(expected, max(1, math.ceil(c.quota_cpus)))
    assert c.effective_cpus == expected
    assert c.problems == []
    mountinfo = Path("/proc/self/mountinfo").read_text()
    if " - cgroup cgroup " in mountinfo and ",cpuset" in mountinfo:
        # cgroup v1 (this Firecracker VM): the cpuset comes from the v1 hierarchy.
        assert c.cpuset_version == 1
        assert c.cpuset is not None and set(affinity) <= set(c.cpuset)
