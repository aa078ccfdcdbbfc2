"""How long `nodeagent check --cluster` takes over 64 real SSH hosts, what it costs in CPU on both
sides, beside Ansible's fact gathering.

Builds 64 network namespaces on this machine, each running a real sshd (tests/support/sshcluster.py), and
prints (median of --runs):
- `nodeagent check --cluster hosts.yml` over all 64 (agentless: one SSH round trip per host pulls
  what the checks read; the checks run here): wall time;
- CPU per host on the controller: user + system time of the nodeagent process and of its children
  (its worker processes), divided by the hosts; with the share of it that is nodeagent's start-up
  (imports, the inventory), the CPU of a run whose only host is dead;
- CPU per host on the nodes: each host's sshd session and what it ran (the pull's python3), from
  the sshd listeners' reaped children (sshd reaps each session process, which reaps its commands);
- `ansible all -m setup` over the same hosts (ansible-core from PyPI, installed into
  build/ansible-venv on first use), the side-by-side anchor: once with as many forks as hosts (the
  same parallelism as nodeagent), once with Ansible's default of 5 forks;
- the cost of one dead host: the 64 plus an address that never answers (connect_timeout 2 s),
  against the 64 alone, and the dead host alone.

Every "host" shares this machine's CPUs, so both tools pay for the sshd and the remote side of all
64 hosts too: the wall time follows the load of the machine (printed at the start and the end),
the CPU times much less. The hosts log in as a service account with /bin/sh as its shell (created
if missing): the root account here runs `pyenv init` from ~/.bashrc in every SSH session (bash
sources it for sshd's commands), about 100 processes and 0.25 s per command, which would measure
the sandbox's shell start-up rather than either tool.

Run as root: `.venv/bin/python tests/perf/cluster_speed.py [--hosts 64] [--runs 3] [--no-ansible]
[--processes N] [--save-pulls DIR]` (--processes sets NODEAGENT_PROCESSES; --save-pulls keeps a
few hosts' pull streams for tests/perf/cluster_replay.py --pulls DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.sshcluster import SSHCluster, cluster_available  # noqa: E402

ACCOUNT = "nodeagent-bench"
NODEAGENT = str(Path(sys.executable).with_name("nodeagent"))
ANSIBLE_VENV = REPO / "build" / "ansible-venv"


def ensure_account() -> None:
    try:
        pwd.getpwnam(ACCOUNT)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--shell",
                "/bin/sh",
                "--home-dir",
                "/nonexistent",
                "--no-create-home",
                ACCOUNT,
            ],
            check=True,
        )
    # "*": no password login, but not a locked account (sshd refuses "!" ones without PAM).
    subprocess.run(["usermod", "-p", "*", ACCOUNT], check=True)


def ensure_ansible() -> Path:
    ansible = ANSIBLE_VENV / "bin" / "ansible"
    if not ansible.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "--quiet", "ansible-core"], check=True)
    return ansible


def timed(
    argv: list[str], env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=600)
    return time.perf_counter() - start, proc


def sessions_cpu(cluster: SSHCluster) -> float:
    """CPU seconds the hosts' sshd sessions and what they ran have used so far: sshd reaps each
    session process, which reaps the commands it ran, so their time adds up in its children's."""
    total = 0.0
    for host in cluster.hosts:
        if host.sshd is not None:
            times = psutil.Process(host.sshd.pid).cpu_times()
            total += times.children_user + times.children_system
    return total


def own_children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def save_pulls(inventory: Path, folder: Path, count: int) -> None:
    """`count` hosts' pull streams, as the controller receives them, into FOLDER/NAME.pull."""
    from nodeagent import checks
    from nodeagent.cluster import ssh
    from nodeagent.cluster.inventory.load import load_inventory
    from nodeagent.cluster.runner import CheckJob

    inv = load_inventory(inventory)
    keys = ssh.HostKeys.default(inv.known_hosts, False)
    job = CheckJob(checks.select())
    folder.mkdir(parents=True, exist_ok=True)
    for spec in inv.hosts[:count]:
        conn = ssh.connection(spec, keys)
        ssh.open_connection(conn, spec, keys)
        try:
            (folder / f"{spec.name}.pull").write_bytes(job.pull(spec, conn))
        finally:
            conn.close()


def median_of(
    runs: int, argv: list[str], env: dict[str, str] | None = None
) -> tuple[float, list[float], str]:
    times: list[float] = []
    out = ""
    for _ in range(runs):
        t, proc = timed(argv, env)
        times.append(t)
        out = proc.stdout
    return statistics.median(times), times, out


def shown(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def check_doc(out: str) -> dict[str, Any]:
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ansible", action="store_true")
    ap.add_argument("--processes", type=int, help="NODEAGENT_PROCESSES for nodeagent (default: its choice)")
    ap.add_argument("--save-pulls", type=Path, help="keep 8 hosts' pull streams in this folder")
    args = ap.parse_args()
    reason = cluster_available()
    if reason is not None:
        print(f"cannot build the namespace cluster here: {reason}")
        return 2
    ensure_account()
    ansible = None if args.no_ansible else ensure_ansible()
    work = Path(tempfile.mkdtemp(prefix="nodeagent-perf-"))
    work.chmod(0o755)  # the service account's sshd reads authorized_keys from here
    print(
        f"{args.hosts} namespace hosts, {os.cpu_count()} CPUs, {args.runs} runs each (median); "
        f"load average {load()} at the start"
    )
    env = None if args.processes is None else {**os.environ, "NODEAGENT_PROCESSES": str(args.processes)}
    with SSHCluster(args.hosts, work, user=ACCOUNT) as cluster:
        inv = cluster.write_inventory(work / "hosts.yml")
        med = measure_nodeagent(cluster, inv, work, args.runs, env)
        if args.save_pulls:
            save_pulls(inv, args.save_pulls, 8)
            print(f"8 hosts' pull streams saved in {args.save_pulls}")
        if ansible is not None:  # last: its ControlPersist masters stay up for 60 s after each run
            measure_ansible(cluster, ansible, work, args.runs, med)
    print(
        "targets: controller CPU <= 8 ms per host, node CPU <= 40 ms per host, "
        f"64 hosts <= 3 s; load average {load()} at the end"
    )
    return 0


def measure_nodeagent(
    cluster: SSHCluster, inv: Path, work: Path, runs: int, env: dict[str, str] | None
) -> float:
    """Prints nodeagent's figures; its median wall time over the fleet."""
    hosts = len(cluster.hosts)
    dead_entry = {"name": "dead", "host": cluster.dead_address(), "connect_timeout": 2}
    doc_inv = yaml.safe_load(inv.read_text())
    with_dead = work / "with-dead.yml"
    with_dead.write_text(yaml.safe_dump({**doc_inv, "hosts": [*doc_inv["hosts"], dead_entry]}))
    check = [NODEAGENT, "check", "--format", "json", "--cluster"]
    # The fleet with and without the dead host in turns, so a drift in the VM's speed shows in both.
    times: list[float] = []
    dtimes: list[float] = []
    node_cpu: list[float] = []
    here_cpu: list[float] = []
    for _ in range(runs):
        node0, here0 = sessions_cpu(cluster), own_children_cpu()
        t, proc = timed([*check, str(inv)], env)
        node_cpu.append(sessions_cpu(cluster) - node0)
        here_cpu.append(own_children_cpu() - here0)
        times.append(t)
        doc = check_doc(proc.stdout)
        t, proc = timed([*check, str(with_dead)], env)
        dtimes.append(t)
        dead = check_doc(proc.stdout)["hosts"]["dead"]
    med, dmed = statistics.median(times), statistics.median(dtimes)
    print(f"nodeagent check --cluster ({hosts} hosts): {med:.2f} s  (runs: {shown(times)}; {doc['summary']})")
    print(
        f"... plus 1 dead host (connect_timeout 2 s): {dmed:.2f} s, {dmed - med:+.2f} s "
        f"(runs: {shown(dtimes)}); "
        f"the dead host: {dead['error']['kind']} after {dead['duration_s']:.2f} s"
    )
    alone = work / "dead-alone.yml"
    alone.write_text(yaml.safe_dump({**doc_inv, "hosts": [dead_entry]}))
    startup: list[float] = []
    for _ in range(runs):
        here0 = own_children_cpu()
        t_alone, _ = timed([*check, str(alone)], env)
        startup.append(own_children_cpu() - here0)
    per_host = 1000 / hosts
    print(
        f"controller CPU per host: {statistics.median(here_cpu) * per_host:.1f} ms "
        f"(runs: {shown([c * per_host for c in here_cpu])}; nodeagent and its worker processes: "
        f"start-up, SSH, checks, fleet comparison, JSON), of which start-up "
        f"{statistics.median(startup) * per_host:.1f} ms (a run whose only host is dead: "
        f"{statistics.median(startup) * 1000:.0f} ms)"
    )
    print(
        f"node CPU per host: {statistics.median(node_cpu) * per_host:.1f} ms "
        f"(runs: {shown([c * per_host for c in node_cpu])}; sshd's session and the pull's python3)"
    )
    print(f"1 dead host alone: {t_alone:.2f} s (connect_timeout 2 s, plus nodeagent's start-up)")
    return med


def measure_ansible(cluster: SSHCluster, ansible: Path, work: Path, runs: int, nodeagent_s: float) -> None:
    hosts = len(cluster.hosts)
    ainv = cluster.write_ansible_inventory(work / "ansible.yml")
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-local"),
        "ANSIBLE_REMOTE_TMP": "/tmp/.ansible-remote",
    }
    argv = [str(ansible), "all", "-i", str(ainv), "-m", "setup"]
    # At the same parallelism (every host at once, as nodeagent's default of 128 does), then
    # as `ansible` runs when not told otherwise (5 forks).
    for label, extra in ((f"-f {hosts}", ["-f", str(hosts)]), ("default forks", [])):
        amed, atimes, aout = median_of(runs, [*argv, *extra], env)
        # The default callback prints "NAME | SUCCESS => {facts}" per host.
        ok = len(re.findall(r"^\S+ \| SUCCESS", aout, re.MULTILINE))
        print(
            f"ansible all -m setup {label} ({hosts} hosts): {amed:.2f} s "
            f"(runs: {shown(atimes)}; {ok} hosts ok); nodeagent is {amed / nodeagent_s:.1f}x faster"
        )


if __name__ == "__main__":
    raise SystemExit(main())
