"""How long `nodeagent check --cluster` takes over 64 real SSH hosts, beside Ansible's fact gathering.

Builds 64 network namespaces on this machine, each running a real sshd (tests/sshcluster.py), and
prints wall times (median of --runs):
- `nodeagent check --cluster hosts.yml` over all 64 (agentless: one SSH round trip per host pulls
  what the checks read; the checks run here);
- `ansible all -m setup` over the same hosts (ansible-core from PyPI, installed into
  build/ansible-venv on first use), the side-by-side anchor;
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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
        check = [NODEAGENT, "check", "--cluster", str(inv), "--format", "json"]
        med, times, out = median_of(args.runs, check)
        doc = check_doc(out)
        summary = doc["summary"]
        print(
            f"nodeagent check --cluster ({args.hosts} hosts): {med:.2f} s  (runs: {shown(times)}; {summary})"
        )

        if ansible is not None:
            ainv = cluster.write_ansible_inventory(work / "ansible.yml")
            env = {
                **os.environ,
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
                "ANSIBLE_LOCAL_TEMP": str(work / "ansible-local"),
                "ANSIBLE_REMOTE_TMP": "/tmp/.ansible-remote",
            }
            argv = [str(ansible), "all", "-i", str(ainv), "-m", "setup", "-f", str(args.hosts)]
            amed, atimes, aout = median_of(args.runs, argv, env)
            # The default callback prints "NAME | SUCCESS => {facts}" per host (ansible-core has no json one).
            ok = len(re.findall(r"^\S+ \| SUCCESS", aout, re.MULTILINE))
            print(
                f"ansible all -m setup ({args.hosts} hosts): {amed:.2f} s "
                f"(runs: {shown(atimes)}; {ok} hosts ok)"
            )
            print(f"nodeagent is {amed / med:.1f}x faster than Ansible's fact gathering")

        dead_entry = {"name": "dead", "host": cluster.dead_address(), "connect_timeout": 2}
        doc_inv = yaml.safe_load(inv.read_text())
        with_dead = work / "with-dead.yml"
        with_dead.write_text(yaml.safe_dump({**doc_inv, "hosts": [*doc_inv["hosts"], dead_entry]}))
        dmed, dtimes, dout = median_of(
            args.runs, [NODEAGENT, "check", "--cluster", str(with_dead), "--format", "json"]
        )
        dead = check_doc(dout)["hosts"]["dead"]
        print(
            f"... plus 1 dead host (connect_timeout 2 s): {dmed:.2f} s, {dmed - med:+.2f} s "
            f"(runs: {shown(dtimes)}); "
            f"the dead host: {dead['error']['kind']} after {dead['duration_s']:.2f} s"
        )
        alone = work / "dead-alone.yml"
        alone.write_text(yaml.safe_dump({**doc_inv, "hosts": [dead_entry]}))
        t_alone, _ = timed([NODEAGENT, "check", "--cluster", str(alone), "--format", "json"])
        print(f"1 dead host alone: {t_alone:.2f} s (connect_timeout 2 s, plus nodeagent's start-up)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
