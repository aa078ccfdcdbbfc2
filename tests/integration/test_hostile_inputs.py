"""Hostile and broken inputs: each limit is one line naming it, exit 64 for a file or a
setting, a FAIL for one host's output, and the controller's memory stays bounded."""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.api.report import HostError
from nodeagent.cluster import pull
from nodeagent.cluster.inventory.load import load_inventory
from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.gate.playbook import load_playbook
from nodeagent.host.recorder import PULL_MAGIC
from tests.support.cli import CliRun, run_cli
from tests.support.sshcluster import ClusterFactory

pytestmark = pytest.mark.slow

ALLOWED_EXITS = {0, 1, 2, 3, 64}


def one_line_usage(proc: CliRun) -> str:
    assert proc.returncode == 64, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def usage(fn: Callable[..., object], *args: object) -> str:
    with pytest.raises(UsageError) as caught:
        fn(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- YAML ------------------------------------------------------------------------------------------

# 718 bytes in the adversarial run; nine levels of nine aliases: 9**9 values once expanded.
ALIAS_BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "hosts: [h1]\n"
)


def test_an_alias_bomb_inventory_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 1024
    message = usage(load_inventory, path)
    assert message.startswith(f"{path}:")
    assert "NODEAGENT_MAX_ALIAS_VALUES" in message
    proc = run_cli("check", "--cluster", str(path), process=True)
    assert "NODEAGENT_MAX_ALIAS_VALUES" in one_line_usage(proc)


def test_merge_keys_with_a_few_aliases_still_work(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("defaults: &d {user: root}\nhosts:\n  - name: h1\n    <<: *d\n")
    assert load_inventory(path).hosts[0].user == "root"


def test_an_alias_inside_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("x: &a [*a]\nhosts: [h1]\n")
    assert "refers to the value that contains it" in usage(load_inventory, path)


def test_sixty_range_lines_pass_the_host_cap_in_all(tmp_path: Path) -> None:
    native = tmp_path / "hosts.yml"
    native.write_text("hosts:\n" + "".join(f"  - n{i}x[1-99999]\n" for i in range(60)))
    ansible = tmp_path / "ansible.yml"
    ansible.write_text("all:\n  hosts:\n" + "".join(f"    n{i}x[1:99999]:\n" for i in range(60)))
    for path, line in ((native, 3), (ansible, 4)):
        start = time.monotonic()
        message = usage(load_inventory, path)
        assert message.startswith(f"{path}:{line}:"), message
        assert "more than 100,000 host names in all" in message
        assert time.monotonic() - start < 20
    # Counted from the bounds, never listed: a billion names cost nothing.
    huge = tmp_path / "huge.yml"
    huge.write_text("hosts:\n  - n[1-100]\n  - m[1-1000000000]\n")
    assert "more than 100,000" in usage(load_inventory, huge)


@pytest.mark.parametrize(
    ("value", "words"),
    [("2024-13-45", "is not a valid date"), ("9" * 5000, "is not a valid integer")],
)
def test_impossible_yaml_values_name_their_line(tmp_path: Path, value: str, words: str) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"hosts:\n  - name: h1\n    vars:\n      when: {value}\n")
    message = usage(load_inventory, inv)
    assert message.startswith(f"{inv}:4: ") and words in message
    assert len(message) < 300
    book = tmp_path / "book.yml"
    book.write_text(f"description: {value}\n")
    assert usage(load_playbook, str(book)).startswith(f"{book}:1: ")
    proc = run_cli("check", "--cluster", str(inv), process=True)
    assert one_line_usage(proc).endswith(usage(load_inventory, inv))


def test_deep_yaml_is_refused_before_recursion(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("hosts: " + "[" * 100 + "]" * 100 + "\n")
    assert "nested too deeply" in usage(load_inventory, path)


@pytest.mark.parametrize("option", ["--playbook", "--cluster", "--baseline"])
def test_a_device_given_as_a_file_is_refused_before_reading(option: str) -> None:
    proc = run_cli("check", option, "/dev/zero", process=True)
    line = one_line_usage(proc)
    assert "/dev/zero" in line and "regular file" in line, line


def test_a_file_over_the_input_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_text("description: x\n" + "# padding\n" * 200_000)
    message = usage(load_playbook, str(path))
    assert "NODEAGENT_MAX_INPUT_MIB" in message


# --- JSON ------------------------------------------------------------------------------------------


def test_a_deeply_nested_json_baseline_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text('{"hosts": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = run_cli(
        "check",
        "--root",
        "tests/fixtures/corpus/ib-gpud-a100-vm-hdr-vf",
        "--baseline",
        str(path),
        process=True,
    )
    line = one_line_usage(proc)
    assert str(path) in line and "nested" in line, line
    with pytest.raises(ValueError, match="NODEAGENT_MAX_DEPTH"):
        limits.loads_json("[" * 100 + "]" * 100)


# --- --set -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("numa-pinning.ranks=.nan", "not a finite number"),
        ("hugepages.max_fraction=.inf", "not a finite number"),
        ("numa-pinning.ranks=1000000", "more than 4096"),
        (f"hugepages.pages_per_node={'9' * 5000}", "not a valid integer"),
    ],
)
def test_impossible_settings_are_refused(setting: str, words: str) -> None:
    line = one_line_usage(run_cli("tune", "--set", setting, process=True))
    assert words in line, line


# --- Playbooks -------------------------------------------------------------------------------------


def test_a_diamond_of_includes_thirty_deep_resolves_fast(tmp_path: Path) -> None:
    (tmp_path / "l0a.yml").write_text(
        "description: bottom\nchecks: {numa: {}}\nthresholds:\n  - {value: memory.total_mib, min: 1}\n"
    )
    (tmp_path / "l0b.yml").write_text("budget_s: 5\n")
    for n in range(1, 31):
        for side in "ab":
            (tmp_path / f"l{n}{side}.yml").write_text(f"include: [l{n - 1}a.yml, l{n - 1}b.yml]\n")
    start = time.monotonic()
    pb = load_playbook(str(tmp_path / "l30a.yml"))
    assert time.monotonic() - start < 10
    assert pb.checks == ("numa",) and len(pb.thresholds) == 1 and pb.budget_s == 5.0
    assert len(pb.includes) <= 256


def test_many_thresholds_merge_in_linear_time(tmp_path: Path) -> None:
    rows = "".join(f"  - {{value: 'nics[*].mtu', min: {i}}}\n" for i in range(4000))
    (tmp_path / "base.yml").write_text("thresholds:\n" + rows)
    (tmp_path / "top.yml").write_text("include: [base.yml]\nthresholds:\n" + rows)
    start = time.monotonic()
    assert len(load_playbook(str(tmp_path / "top.yml")).thresholds) == 4000
    assert time.monotonic() - start < 30


def test_an_include_of_a_secret_file_does_not_echo_it(tmp_path: Path) -> None:
    secret = "root:$6$s3cr3tSALT$abcdefghijklmnopqrstuvwxyz0123456789:19000:0:99999:7:::"
    (tmp_path / "shadow").write_text(secret + "\ndaemon:*:19000:0:99999:7:::\n")
    (tmp_path / "top.yml").write_text("include: [./shadow]\n")
    message = usage(load_playbook, str(tmp_path / "top.yml"))
    assert "s3cr3t" not in message and "$6$" not in message
    assert str(tmp_path / "shadow") in message and "not a playbook" in message


# --- Inventory variables ---------------------------------------------------------------------------


def test_a_bad_data_address_is_refused_when_the_inventory_loads(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text('hosts:\n  - name: h1\n    vars:\n      data_address: "10.0.0.3; reboot"\n')
    assert usage(load_inventory, path).startswith(f"{path}:4: hosts[0].vars.data_address: ")


# --- The pull stream -------------------------------------------------------------------------------


def zlib_bomb(mib: int) -> bytes:
    c = zlib.compressobj(9)
    return PULL_MAGIC + b"".join(c.compress(bytes(1 << 20)) for _ in range(mib)) + c.flush()


def test_a_zlib_bomb_is_refused_while_decompressing() -> None:
    bomb = zlib_bomb(256)  # 256 MiB of zeros, 8 times the cap, in under 1 MiB
    assert len(bomb) < 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=re.escape("more than 32 MiB (limit NODEAGENT_MAX_RECORDING_MIB)")):
        pull.read(bomb, cap=32 << 20)
    # What was inflated is kept up to the cap, then dropped: never the gigabyte.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 80_000  # KiB


def test_a_stream_is_counted_while_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """limits.read_capped (a Prometheus answer): an answer of the limit exactly is read; one byte
    more is TooLarge naming the limit, with no byte past it asked for, even from a stream that
    never ends."""
    monkeypatch.setenv("NODEAGENT_MAX_PROMETHEUS_MIB", "1")
    name = "NODEAGENT_MAX_PROMETHEUS_MIB"
    assert limits.read_capped(io.BytesIO(bytes(1 << 20)).read1, name) == bytes(1 << 20)
    asked: list[int] = []

    def endless(n: int) -> bytes:
        asked.append(n)
        return bytes(n)

    for read1 in (io.BytesIO(bytes((1 << 20) + 1)).read1, endless):
        with pytest.raises(limits.TooLarge, match=re.escape(f"more than 1 MiB (limit {name})")):
            limits.read_capped(read1, name, piece=4096)
    assert sum(asked) == (1 << 20) + 1


# --- Over SSH: a node that prints without end, a node that sends a bomb ---------------------------


FAKE_PYTHON = {
    # The agentless pull runs `PYTHON -I -S -c BOOTSTRAP`: these stand in for the node's python3.
    "endless": "#!/bin/sh\nexec yes nodeagent-output-without-end\n",
    "bomb": "#!/bin/sh\ncat >/dev/null\nexec cat {bomb}\n",
}

# The caps the controller runs with: what a hostile node costs it is bounded by them.
STDOUT_CAP_MIB = 64
RECORDING_CAP_MIB = 64

CONTROLLER = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                      "peak_kib": peak_kib}))
    """
)


@pytest.mark.slow  # real sshd in a network namespace
@pytest.mark.parametrize("kind", ["endless", "bomb"])
def test_a_hostile_node_is_a_fail_and_memory_stays_bounded(
    ssh_cluster_factory: ClusterFactory, tmp_path: Path, kind: str
) -> None:
    cluster = ssh_cluster_factory(1)
    bomb = tmp_path / "bomb.bin"
    if kind == "bomb":  # 5 ms a MiB to make
        bomb.write_bytes(zlib_bomb(8 * RECORDING_CAP_MIB))  # 8 times the cap inflated, 0.5 MB on the wire
    fake = tmp_path / f"fake-{kind}"
    fake.write_text(FAKE_PYTHON[kind].format(bomb=bomb))
    fake.chmod(0o755)
    inventory = cluster.write_inventory(tmp_path / "hosts.yml", python=str(fake), command_timeout=45)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CONTROLLER,
            sys.executable,
            "-m",
            "nodeagent",
            "check",
            "--cluster",
            str(inventory),
            "--format",
            "json",
            "--only",
            "numa",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "NODEAGENT_MAX_STDOUT_MIB": str(STDOUT_CAP_MIB),
            "NODEAGENT_MAX_RECORDING_MIB": str(RECORDING_CAP_MIB),
        },
        check=False,
    )
    result = json.loads(out.stdout)
    assert result["rc"] in ALLOWED_EXITS, result["stderr"][-2000:]
    assert "Traceback" not in result["stderr"]
    doc = json.loads(result["stdout"])
    (host,) = doc["hosts"].values()
    assert host["status"] == "FAIL"
    limit = "NODEAGENT_MAX_STDOUT_MIB" if kind == "endless" else "NODEAGENT_MAX_RECORDING_MIB"
    assert limit in host["error"]["message"], host["error"]
    peak_mib = result["peak_kib"] / 1024
    print(f"controller peak RSS with a {kind} node: {peak_mib:.0f} MiB")
    # nodeagent itself (about 130 MiB here), and what the cap lets in, more than once at most.
    assert peak_mib < 130 + 3 * max(STDOUT_CAP_MIB, RECORDING_CAP_MIB)


# --- The SSH reading loop's caps, on a channel that never stops talking -------------------------


class _EndlessChannel:
    """Stands in for paramiko's Channel: `stream` ("stdout" or "stderr") never runs dry."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.closed = False

    def settimeout(self, _: float) -> None: ...

    def exec_command(self, _: str) -> None: ...

    def recv_stderr_ready(self) -> bool:
        return self.stream == "stderr"

    def recv_stderr(self, n: int) -> bytes:
        return b"e" * n

    def recv(self, n: int) -> bytes:
        return b"o" * n

    def close(self) -> None:
        self.closed = True


class _Transport:
    def __init__(self, chan: _EndlessChannel) -> None:
        self.chan = chan

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float) -> _EndlessChannel:
        return self.chan


@pytest.mark.parametrize(
    ("stream", "variable"), [("stdout", "NODEAGENT_MAX_STDOUT_MIB"), ("stderr", "NODEAGENT_MAX_STDERR_MIB")]
)
def test_a_node_that_never_stops_writing_is_cut_at_the_cap(stream: str, variable: str) -> None:
    from types import SimpleNamespace

    from nodeagent.cluster import ssh

    chan = _EndlessChannel(stream)
    conn = SimpleNamespace(client=SimpleNamespace(get_transport=lambda: _Transport(chan)))
    with pytest.raises(HostError) as e:
        ssh.run(conn, "yes", timeout=30, max_stdout=1 << 20, max_stderr=1 << 20)
    assert e.value.message.startswith(f"{stream} output larger than 1 MiB (limit {variable})")
    assert chan.closed
