"""How long `nodeagent check --cluster` takes over 64 real SSH hosts, beside Ansible's fact gathering.

Builds 64 network namespaces on this machine, each running a real sshd (tests/sshcluster.py), and
prints wall times (median of --runs):
- `nodeagent check --cluster hosts.yml` over all 64 (agentless: one SSH round trip per host pulls
  what the checks read; the checks run here);
- `ansible all -m setup` over the same hosts (ansible-core from PyPI, installed into
  build/ansible-venv on first use), the side-by-side anchor: once with as many forks as hosts (the
  same parallelism as nodeagent), once with Ansible's default of 5 forks;
- the cost of one dead host: the 64 plus an address that never answers (connect_timeout 2 s),
  against the 64 alone, and the dead host alone.

Every "host" shares this machine's CPUs, so both tools pay for the sshd and the remote side of all
64 hosts too. The hosts log in as a service account with /bin/sh as its shell (created if missing):
the root account here runs `pyenv init` from ~/.bashrc in every SSH session (bash sources it for
sshd's commands), about 100 processes and 0.25 s per command, which would measure the sandbox's
shell start-up rather than either tool.

Run as root: `.venv/bin/python tests/perf/cluster_speed.py [--hosts 64] [--runs 3]`.
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

from tests.sshcluster import SSHCluster, cluster_available  # noqa: E402

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
    args = ap.parse_args()
    reason = cluster_available()
    if reason is not None:
        print(f"cannot build the namespace cluster here: {reason}")
        return 2
    ensure_account()
    ansible = None if args.no_ansible else ensure_ansible()
    work = Path(tempfile.mkdtemp(prefix="nodeagent-perf-"))
    work.chmod(0o755)  # the service account's sshd reads authorized_keys from here
    print(f"{args.hosts} namespace hosts, {os.cpu_count()} CPUs, {args.runs} runs each (median)")
    with SSHCluster(args.hosts, work, user=ACCOUNT) as cluster:
        inv = cluster.write_inventory(work / "hosts.yml")
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
        for _ in range(args.runs):
            node0, here0 = sessions_cpu(cluster), own_children_cpu()
            t, proc = timed([*check, str(inv)])
            node_cpu.append(sessions_cpu(cluster) - node0)
            here_cpu.append(own_children_cpu() - here0)
            times.append(t)
            doc = check_doc(proc.stdout)
            t, proc = timed([*check, str(with_dead)])
            dtimes.append(t)
            dead = check_doc(proc.stdout)["hosts"]["dead"]
        med, dmed = statistics.median(times), statistics.median(dtimes)
        print(
            f"nodeagent check --cluster ({args.hosts} hosts): {med:.2f} s  "
            f"(runs: {shown(times)}; {doc['summary']})"
        )
        print(
            f"... plus 1 dead host (connect_timeout 2 s): {dmed:.2f} s, {dmed - med:+.2f} s "
            f"(runs: {shown(dtimes)}); "
            f"the dead host: {dead['error']['kind']} after {dead['duration_s']:.2f} s"
        )
        per_host = 1000 / args.hosts
        print(
            f"CPU per host: {statistics.median(node_cpu) * per_host:.0f} ms on the node (sshd's session "
            f"and the recorder), {statistics.median(here_cpu) * per_host:.0f} ms here (nodeagent: "
            "start-up, SSH, checks, fleet comparison)"
        )
        alone = work / "dead-alone.yml"
        alone.write_text(yaml.safe_dump({**doc_inv, "hosts": [dead_entry]}))
        t_alone, _ = timed([*check, str(alone)])
        print(f"1 dead host alone: {t_alone:.2f} s (connect_timeout 2 s, plus nodeagent's start-up)")

        if ansible is not None:  # last: its ControlPersist masters stay up for 60 s after each run
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
            for label, extra in ((f"-f {args.hosts}", ["-f", str(args.hosts)]), ("default forks", [])):
                amed, atimes, aout = median_of(args.runs, [*argv, *extra], env)
                # The default callback prints "NAME | SUCCESS => {facts}" per host.
                ok = len(re.findall(r"^\S+ \| SUCCESS", aout, re.MULTILINE))
                print(
                    f"ansible all -m setup {label} ({args.hosts} hosts): {amed:.2f} s "
                    f"(runs: {shown(atimes)}; {ok} hosts ok); nodeagent is {amed / med:.1f}x faster"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
