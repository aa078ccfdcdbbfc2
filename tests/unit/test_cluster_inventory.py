"""The cluster inventory: both YAML forms, hostlists, limits, and one-line errors naming file:line."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cluster.inventory.hostnames import is_host
from nodeagent.cluster.inventory.load import (
    HostSpec,
    Inventory,
    expand_hostlist,
    from_hostlist,
    load_inventory,
)
from nodeagent.core.errors import UsageError


def write(tmp_path: Path, text: str, name: str = "hosts.yml") -> Path:
    """`text` dedented, its first line being line 1 of the file."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def error(path: Path, limit: str | None = None) -> str:
    with pytest.raises(UsageError) as caught:
        load_inventory(path, limit)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def by_name(inventory: Inventory) -> dict[str, HostSpec]:
    return {host.name: host for host in inventory.hosts}


# --- the native form -------------------------------------------------------------------------------


def test_native_form_with_defaults_hostlists_mappings_and_groups(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults: {user: root, port: 22, identity_file: /keys/id_ed25519, connect_timeout: 5,
                   command_timeout: 60, jump_host: ops@bastion:2222, known_hosts: ./known_hosts,
                   nodeagent: /opt/venv/bin/nodeagent, python: python3.11}
        hosts:
          - node01                      # a name
          - gpu[01-03]                  # a Slurm hostlist expression
          - {name: n3, host: 10.0.0.3, port: 2222, user: ubuntu, vars: {rack: r1, slots: 8, ib: true}}
          - name: n4
            identity_file: /keys/other
            connect_timeout: 2.5
            command_timeout: 30
            jump_host: bastion2
            nodeagent: nodeagent-dev
            python: /usr/bin/python3
        groups:
          rack1: [node01, "gpu[01-02]"]
          rack2: ["n3,n4", gpu02]
        """,
    )
    inventory = load_inventory(path)
    assert inventory.source == str(path)
    assert inventory.known_hosts == str(tmp_path / "known_hosts")  # relative to the inventory's folder
    assert [h.name for h in inventory.hosts] == ["node01", "gpu01", "gpu02", "gpu03", "n3", "n4"]
    hosts = by_name(inventory)
    assert hosts["gpu02"] == HostSpec(
        name="gpu02",
        address="gpu02",
        port=22,
        user="root",
        identity_file="/keys/id_ed25519",
        connect_timeout=5.0,
        command_timeout=60.0,
        jump_host="ops@bastion:2222",
        nodeagent="/opt/venv/bin/nodeagent",
        python="python3.11",
        vars={},
        groups=("rack1", "rack2"),
    )
    # The host's own settings win over the defaults; what it does not set comes from the defaults.
    n3 = hosts["n3"]
    assert (n3.address, n3.port, n3.user, n3.identity_file) == (
        "10.0.0.3",
        2222,
        "ubuntu",
        "/keys/id_ed25519",
    )
    assert n3.vars == {"rack": "r1", "slots": "8", "ib": "true"}
    assert n3.groups == ("rack2",)
    n4 = hosts["n4"]
    assert (n4.address, n4.port, n4.user) == ("n4", 22, "root")
    assert (n4.identity_file, n4.connect_timeout, n4.command_timeout) == ("/keys/other", 2.5, 30.0)
    assert (n4.jump_host, n4.nodeagent, n4.python) == ("bastion2", "nodeagent-dev", "/usr/bin/python3")
    assert hosts["gpu03"].groups == ()
    assert {hosts["gpu01"], hosts["gpu01"]} == {hosts["gpu01"]}  # hashable despite the vars mapping


def test_native_form_without_defaults_leaves_port_to_ssh_config(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, "hosts: [node01, 'fe80::1', 192.168.1.7]\n"))
    assert inventory.hosts == (
        HostSpec(name="node01", address="node01"),
        HostSpec(name="fe80::1", address="fe80::1"),
        HostSpec(name="192.168.1.7", address="192.168.1.7"),
    )
    assert inventory.hosts[0].port is None and inventory.known_hosts is None


def test_native_connection_local_in_defaults_and_per_host(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults: {connection: local}
        hosts:
          - local[1-2]
          - {name: n3, host: 10.0.0.3, connection: ssh}
        """,
    )
    hosts = by_name(load_inventory(path))
    assert [(h.name, h.connection) for h in hosts.values()] == [
        ("local1", "local"),
        ("local2", "local"),
        ("n3", "ssh"),
    ]
    plain = load_inventory(write(tmp_path, "hosts: [a, {name: b, connection: local}]\n", "plain.yml"))
    assert [h.connection for h in plain.hosts] == ["ssh", "local"]  # ssh unless it says otherwise


def test_identity_file_tilde_is_expanded_and_relative_paths_follow_the_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/home/alice")
    native = write(
        tmp_path,
        """
        defaults: {identity_file: ~/.ssh/id_ed25519, known_hosts: ~/.ssh/cluster_hosts}
        hosts: [a, {name: b, identity_file: keys/b}]
        """,
    )
    inventory = load_inventory(native)
    assert by_name(inventory)["a"].identity_file == "/home/alice/.ssh/id_ed25519"
    assert by_name(inventory)["b"].identity_file == str(tmp_path / "keys/b")
    assert inventory.known_hosts == "/home/alice/.ssh/cluster_hosts"
    ansible = write(
        tmp_path,
        """
        all:
          hosts:
            a: {ansible_ssh_private_key_file: ~/.ssh/a}
            b: {ansible_ssh_private_key_file: keys/b}
        """,
        "ansible.yml",
    )
    hosts = by_name(load_inventory(ansible))
    assert hosts["a"].identity_file == "/home/alice/.ssh/a"
    assert hosts["b"].identity_file == "keys/b"  # Ansible reads it from the current directory


# --- the Ansible form ------------------------------------------------------------------------------


ANSIBLE = """
all:
  vars:
    ansible_user: admin
    site: all
    owner: ops
  hosts:
    login:2200:
      ansible_host: 10.0.0.1
  children:
    cluster:
      vars: {site: cluster, ansible_ssh_common_args: "-o ProxyJump=ops@bastion:2222"}
      children:
        gpus:
          vars: {site: gpus, ansible_python_interpreter: /usr/bin/python3.11}
          hosts:
            gpu[01:04]:
          children:
            a100:
              vars: {site: a100}
              hosts:
                gpu01: {site: own, ansible_port: "2201", ansible_ssh_timeout: 3, labels: [x, y]}
        cpus:
          hosts:
            cpu-[a:c]: {ansible_python_interpreter: auto_silent}
            node[01:05:2]:
    rack1:
      hosts:
        gpu02: {ansible_user: ubuntu, ansible_ssh_private_key_file: /keys/rack1}
        login:
"""


def test_ansible_form_children_inheritance_precedence_ranges_and_shared_hosts(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, ANSIBLE))
    names = [h.name for h in inventory.hosts]
    gpus = ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert names == ["login", *gpus, "cpu-a", "cpu-b", "cpu-c", "node01", "node03", "node05"]
    hosts = by_name(inventory)

    login = hosts["login"]  # port from the host key, listed in all: and in rack1
    assert (login.address, login.port, login.user, login.jump_host) == ("10.0.0.1", 2200, "admin", None)
    assert login.groups == ("rack1",)
    assert login.vars == {"site": "all", "owner": "ops"}

    gpu01 = hosts["gpu01"]  # host vars beat a100's, which beat gpus', cluster's and all's
    assert gpu01.vars["site"] == "own"
    assert gpu01.vars["owner"] == "ops"
    assert gpu01.vars["labels"] == '["x","y"]'
    assert (gpu01.port, gpu01.connect_timeout, gpu01.user) == (2201, 3.0, "admin")
    assert (gpu01.jump_host, gpu01.python) == ("ops@bastion:2222", "/usr/bin/python3.11")
    assert gpu01.groups == ("a100", "cluster", "gpus")
    assert "ansible_port" not in gpu01.vars and "ansible_user" not in gpu01.vars

    gpu02 = hosts["gpu02"]  # in gpus (under cluster) and rack1: once, with every group
    assert gpu02.groups == ("cluster", "gpus", "rack1")
    assert (gpu02.user, gpu02.identity_file, gpu02.port) == ("ubuntu", "/keys/rack1", None)
    assert gpu02.vars["site"] == "gpus"  # the deeper group wins over cluster and all

    assert hosts["gpu04"].vars["site"] == "gpus"
    assert hosts["cpu-b"].python == "python3"  # auto_silent is Ansible's discovery, not a command
    assert hosts["cpu-b"].vars["site"] == "cluster"
    assert hosts["node03"].groups == ("cluster", "cpus")


@pytest.mark.parametrize(
    ("value", "connection"),
    [
        # Ansible's inventory guide: "SSH protocol types are smart, ssh or paramiko"; the plugins'
        # fully qualified names are ansible.builtin.ssh, ansible.builtin.paramiko_ssh and
        # ansible.builtin.local.
        ("ssh", "ssh"),
        ("paramiko", "ssh"),
        ("paramiko_ssh", "ssh"),
        ("smart", "ssh"),
        ("ansible.builtin.ssh", "ssh"),
        ("ansible.builtin.paramiko_ssh", "ssh"),
        ("local", "local"),
        ("ansible.builtin.local", "local"),
    ],
)
def test_ansible_connection_with_ansibles_meaning(tmp_path: Path, value: str, connection: str) -> None:
    path = write(tmp_path, f"all:\n  hosts:\n    h1: {{ansible_connection: {value}}}\n    h2:\n")
    hosts = by_name(load_inventory(path))
    assert (hosts["h1"].connection, hosts["h2"].connection) == (connection, "ssh")
    assert "ansible_connection" not in hosts["h1"].vars


def test_ansible_connection_follows_group_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        all:
          hosts:
            local1: {ansible_connection: local}
            local2: {ansible_connection: local}
          children:
            laptop:
              vars: {ansible_connection: local}
              hosts:
                dev1:
                dev2: {ansible_connection: ssh, ansible_host: 10.0.0.2}
        """,
    )
    hosts = by_name(load_inventory(path))
    assert {name: h.connection for name, h in hosts.items()} == {
        "local1": "local",
        "local2": "local",
        "dev1": "local",
        "dev2": "ssh",
    }
    # Two entries on this machine stay two hosts, each known by its inventory name.
    assert (hosts["local1"].address, hosts["local2"].address) == ("local1", "local2")


def test_ansible_groups_at_one_depth_apply_by_priority_then_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        zeta:
          hosts: {n1: , n2: }
          vars: {rack: zeta}
        alpha:
          hosts: {n1: , n2: }
          vars: {rack: alpha}
        boosted:
          hosts: {n2: }
          vars: {rack: boosted, ansible_group_priority: 10}
        """,
    )
    hosts = by_name(load_inventory(path))
    assert hosts["n1"].vars["rack"] == "zeta"  # same depth and priority: the later name wins
    assert hosts["n2"].vars["rack"] == "boosted"
    assert hosts["n2"].groups == ("alpha", "boosted", "zeta")


def test_ansible_group_defined_twice_and_referenced_by_name_is_one_group(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        all:
          children:
            training:
              children:
                gpus:
            gpus:
              hosts:
                g1:
              vars: {ansible_ssh_extra_args: "-J jump.example.com"}
        """,
    )
    g1 = load_inventory(path).hosts[0]
    assert g1.groups == ("gpus", "training")
    assert g1.jump_host == "jump.example.com"


# --- hostlists -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node01", ["node01"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
        ("a,b", ["a", "b"]),
        (" a , b ", ["a", "b"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("x[001-002,10]", ["x001", "x002", "x10"]),
        ("node[01-02],gpu[3,5]-ib,login", ["node01", "node02", "gpu3-ib", "gpu5-ib", "login"]),
        ("10.0.0.[1-3]", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    ],
)
def test_expand_hostlist(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("node[01-04", "'[' is not closed"),
        ("node]1", "']' without a '['"),
        ("n[[1-2]]", "brackets cannot be nested"),
        ("n[]", "'[]' is empty"),
        ("n[a-c]", "'a-c' in [a-c] is not a number or a range"),
        ("n[4-1]", "range '4-1' goes backwards"),
        ("a,,b", "an empty name between commas"),
        ("a,", "an empty name between commas"),
        ("n[1-2,]", "'' in [1-2,] is not a number"),
        ("n[0-100000]", "[0-100000] expands to more than 100000 names"),
        ("n[0-999]m[0-999]", "expands to more than 100000 names"),
    ],
)
def test_expand_hostlist_refuses_bad_syntax_naming_the_expression(expr: str, problem: str) -> None:
    with pytest.raises(UsageError) as caught:
        expand_hostlist(expr)
    message = str(caught.value)
    assert message.startswith(f"hostlist {expr!r}: {problem}")
    assert "\n" not in message


def test_expand_hostlist_refuses_an_empty_expression() -> None:
    with pytest.raises(UsageError, match="hostlist '': empty"):
        expand_hostlist("  ")


@st.composite
def range_expressions(draw: st.DrawFn) -> tuple[str, int, int]:
    """A hostlist expression with 1-3 brackets of 1-3 (optionally zero-padded) ranges, its expected
    name count, and the narrowest width a bracket asked for."""
    prefix = draw(st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z]", fullmatch=True))
    brackets, count = [], 1
    for _ in range(draw(st.integers(1, 3))):
        ranges, size = [], 0
        for _ in range(draw(st.integers(1, 3))):
            low = draw(st.integers(0, 60))
            length = draw(st.integers(1, 5))
            width = draw(st.integers(1, 3))
            high = low + length - 1
            ranges.append(f"{str(low).zfill(width)}-{high}" if length > 1 else str(low).zfill(width))
            size += length
        brackets.append("[" + ",".join(ranges) + "]")
        count *= size
    separators = [draw(st.sampled_from(["", "-", "x"])) for _ in brackets[1:]]
    middle = brackets[0] + "".join(
        sep + bracket for sep, bracket in zip(separators, brackets[1:], strict=True)
    )
    suffix = draw(st.sampled_from(["", "-ib", ".cluster.local"]))
    return prefix + middle + suffix, count, len(prefix)


@given(range_expressions())
def test_expand_hostlist_property_count_and_valid_names(case: tuple[str, int, int]) -> None:
    expr, count, prefix_length = case
    names = expand_hostlist(expr)
    assert len(names) == count
    assert all(is_host(name) for name in names), names
    assert all(name[:prefix_length] == expr[:prefix_length] for name in names)


@pytest.mark.parametrize(
    "name", ["node01", "a-b.example.com", "10.0.0.1", "::1", "fe80::1%eth0", "N01", "x" * 63]
)
def test_valid_host_names_and_addresses(name: str) -> None:
    assert is_host(name)


@pytest.mark.parametrize(
    "name",
    [
        "node1;touch /tmp/pwned",
        "has space",
        "$(reboot)",
        "`id`",
        "-oProxyCommand=x",
        "node-",
        "a..b",
        "10.0.0.256",  # a resolver would read a dotted number as an address
        "123",
        "fe80::1%eth0;id",
        "x" * 64,
        "node_1",
        "nöde",
        "",
    ],
)
def test_invalid_host_names_are_refused(name: str) -> None:
    assert not is_host(name)


# --- validation: each error is one line naming file:line and the field ------------------------------


def test_missing_file_folder_and_non_utf8_are_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yml"
    assert error(missing) == f"{missing}: no such inventory file; check the path"
    assert error(tmp_path).startswith(f"{tmp_path}: is a folder")
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"hosts: [\xff]\n")
    assert error(binary).startswith(f"{binary}: not UTF-8 text")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts: [a]\n")
    path.chmod(0)
    assert error(path).startswith(f"{path}: cannot read the inventory")


def test_absurdly_nested_yaml_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts: " + "[" * 5000 + "]" * 5000 + "\n")
    assert error(path) == f"{path}: the YAML is nested too deeply to be an inventory"


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts:\n  - a\n  - b: c: d\n")
    assert error(path) == f"{path}:3: YAML syntax error: mapping values are not allowed here; fix the YAML"
    unclosed = write(tmp_path, "hosts:\n  - a\n  - [b\n  - c\n", "unclosed.yml")
    message = error(unclosed)
    assert message.startswith(f"{unclosed}:5: YAML syntax error: expected ',' or ']'"), message
    assert "(while parsing a flow sequence from line 3)" in message
    tab = write(tmp_path, "hosts:\n\t- a\n", "tab.yml")
    assert error(tab).startswith(f"{tab}:2: YAML syntax error: found character '\\t'")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    assert error(path) == f"{path}: the inventory is empty; list the nodes under hosts:"


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- node01\n- node02\n")
    assert error(path).startswith(f"{path}:1: the top level is a list, not a mapping")
    scalar = write(tmp_path, "node01\n", "scalar.yml")
    assert error(scalar).startswith(f"{scalar}:1: the top level is 'node01', not a mapping")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # the example of the format
            "hosts:\n  - a\n  - b\n  - {name: c, port: abc}\n",
            "4: hosts[2].port: must be an integer between 1 and 65535 (got 'abc')",
        ),
        (
            "defaults:\n  prot: 22\nhosts: [a]\n",
            "2: defaults.prot: unknown key; did you mean 'port'?",
        ),
        (
            "hosts:\n  - name: a\n    usr: root\n",
            "3: hosts[0].usr: unknown key; did you mean 'user'?",
        ),
        (
            "hosts:\n  - name: a\n    colour: red\n",
            "3: hosts[0].colour: unknown key; known keys: command_timeout, connect_timeout, connection,",
        ),
        ("host: [a]\n", "1: host: unknown key; did you mean 'hosts'?"),
        ("hosts:\n  - host: 10.0.0.1\n", "2: hosts[0].name: is required"),
        ("defaults: {}\n", "1: hosts: is required"),
        ("hosts: []\n", "1: hosts: lists no hosts"),
        ("hosts:\n", "1: hosts: lists no hosts"),
        ("hosts: node01\n", "1: hosts: must be a list of host names"),
        ("hosts:\n  - a\n  - 17\n", "3: hosts[1]: must be a host name, a hostlist expression"),
        (
            "hosts:\n  - name: a\n    connection: telnet\n",
            "3: hosts[0].connection: must be ssh (the default) or local (the host is this machine: no SSH) "
            "(got 'telnet')",
        ),
        (
            "defaults:\n  connection: Local\nhosts: [a]\n",
            "2: defaults.connection: must be ssh (the default) or local",
        ),
        (
            "hosts:\n  - name: a\n    port: 70000\n",
            "3: hosts[0].port: must be an integer between 1 and 65535 (got 70000)",
        ),
        (
            "defaults: {port: 0}\nhosts: [a]\n",
            "1: defaults.port: must be an integer between 1 and 65535 (got 0)",
        ),
        (
            "defaults: {port: '22'}\nhosts: [a]\n",
            "1: defaults.port: must be an integer between 1 and 65535 (got '22')",
        ),
        (
            "defaults: {port: true}\nhosts: [a]\n",
            "1: defaults.port: must be an integer between 1 and 65535 (got true)",
        ),
        (
            "hosts:\n  - name: a\n    command_timeout: 0\n",
            "3: hosts[0].command_timeout: must be a number of seconds greater than 0 (got 0)",
        ),
        (
            "defaults:\n  connect_timeout: -1.5\nhosts: [a]\n",
            "2: defaults.connect_timeout: must be a number of seconds greater than 0 (got -1.5)",
        ),
        (
            "defaults:\n  connect_timeout: soon\nhosts: [a]\n",
            "2: defaults.connect_timeout: must be a number of seconds greater than 0 (got 'soon')",
        ),
        (
            "hosts:\n  - name: a\n    vars: [x]\n",
            "3: hosts[0].vars: must be a mapping of name: value (got a list)",
        ),
        ("defaults: [user]\nhosts: [a]\n", "1: defaults: must be a mapping of setting: value (got a list)"),
        (
            "hosts: [a]\ngroups:\n  g: a\n",
            "3: groups.g: must be a list of host names or hostlist expressions",
        ),
        (
            "hosts: [a]\ngroups:\n  g:\n    - [a]\n",
            "4: groups.g[0]: must be a host name or hostlist expression",
        ),
        (
            "hosts: [a, b]\ngroups:\n  g: [a, bb]\n",
            "3: groups.g[1]: unknown host 'bb'; list it under hosts: first (did you mean 'b'?)",
        ),
        ("hosts: [a]\ngroups:\n  'my group': [a]\n", "3: groups.my group: is not a valid group name"),
        (
            "hosts:\n  - node[01-0x]\n",
            "2: hosts[0]: hostlist 'node[01-0x]': '01-0x' in [01-0x] is not a number",
        ),
        (
            "hosts:\n  - a\n  - 1: b\n",
            "3: hosts[1]: the key 1 is read as an integer, not text; quote it: '1'",
        ),
        (
            "hosts: [a]\ngroups: {yes: [a]}\n",
            "2: groups: the key yes is read as a boolean, not text; quote it: 'yes'",
        ),
    ],
)
def test_native_schema_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    message = error(path)
    assert message.startswith(f"{path}:{expected}"), message


def test_every_schema_error_of_a_mapping_is_a_line(tmp_path: Path) -> None:
    """Two mistakes in the defaults: both reported, by line, one line each."""
    path = write(tmp_path, "defaults:\n  port: 0\n  connect_timeout: soon\nhosts: [a]\n")
    with pytest.raises(UsageError) as caught:
        load_inventory(path)
    assert str(caught.value).splitlines() == [
        f"{path}:2: defaults.port: must be an integer between 1 and 65535 (got 0)",
        f"{path}:3: defaults.connect_timeout: must be a number of seconds greater than 0 (got 'soon')",
    ]


def test_duplicate_hosts_name_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts:\n  - node01\n  - gpu01\n  - {name: node01, host: 10.0.0.1}\n")
    assert error(path) == (
        f"{path}:4: hosts[2]: duplicate host 'node01', first listed on line 2 (hosts[0]); list each host once"
    )
    overlap = write(tmp_path, "hosts:\n  - node[01-04]\n  - node03\n", "overlap.yml")
    assert error(overlap).startswith(
        f"{overlap}:3: hosts[1]: duplicate host 'node03', first listed on line 2"
    )


def test_duplicate_yaml_keys_name_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        all:
          hosts:
            node01:
            node02:
            node01: {ansible_port: 2222}
        """,
    )
    assert error(path) == f"{path}:5: all.hosts.node01: duplicate key (first on line 3); keep one"
    native = write(tmp_path, "defaults:\n  user: a\n  user: b\nhosts: [x]\n", "native.yml")
    assert error(native) == f"{native}:3: defaults.user: duplicate key (first on line 2); keep one"
    control = write(tmp_path, 'hosts:\n  - name: a\n    vars: {"x\\ny": 1, "x\\ny": 2}\n', "control.yml")
    assert error(control) == f"{control}:3: hosts[0].vars.'x\\ny': duplicate key (first on line 3); keep one"


PASSWORD = "no passwords in the inventory: use a key (identity_file) or ssh-agent"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("hosts:\n  - name: a\n    password: hunter2\n", "3: hosts[0].password"),
        ("hosts:\n  - name: a\n    vars:\n      ansible_password: x\n", "4: hosts[0].vars.ansible_password"),
        ("defaults: {Password: x}\nhosts: [a]\n", "1: defaults.Password"),
        ("all:\n  vars:\n    ansible_ssh_pass: x\n  hosts: {a: }\n", "3: all.vars.ansible_ssh_pass"),
        (
            "all:\n  hosts:\n    a:\n      ansible_become_password: x\n",
            "4: all.hosts.a.ansible_become_password",
        ),
        ("all:\n  hosts:\n    a:\n      ansible_become_pass: x\n", "4: all.hosts.a.ansible_become_pass"),
        (
            "all:\n  hosts:\n    a:\n      deep: [{ansible_password: x}]\n",
            "4: all.hosts.a.deep[0].ansible_password",
        ),
    ],
)
def test_passwords_are_refused_anywhere(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    assert error(path) == f"{path}:{where}: {PASSWORD}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "hosts:\n  - node1;touch /tmp/pwned\n",
            "2: hosts[0]: 'node1;touch /tmp/pwned' is not a valid host name or address",
        ),
        ("hosts:\n  - ok\n  - has space\n", "3: hosts[1]: 'has space' is not a valid host name or address"),
        ("hosts: ['$(reboot)']\n", "1: hosts[0]: '$(reboot)' is not a valid host name or address"),
        ("hosts: ['`id`']\n", "1: hosts[0]: '`id`' is not a valid host name or address"),
        (
            "hosts:\n  - name: a\n    host: -oProxyCommand=x\n",
            "3: hosts[0].host: '-oProxyCommand=x' is not a valid",
        ),
        ("hosts:\n  - name: a b\n", "2: hosts[0].name: 'a b' is not a valid host name or address"),
        ("hosts:\n  - name: a\n    user: root;id\n", "3: hosts[0].user: 'root;id' is not a valid user name"),
        ("defaults: {user: -x}\nhosts: [a]\n", "1: defaults.user: '-x' is not a valid user name"),
        (
            "defaults: {jump_host: ops@bad;host}\nhosts: [a]\n",
            "1: defaults.jump_host: 'bad;host' is not a valid host name or address",
        ),
        (
            "defaults: {jump_host: 'b d@bastion'}\nhosts: [a]\n",
            "1: defaults.jump_host: jump host 'b d@bastion': 'b d' is not a valid user name",
        ),
        (
            "defaults: {jump_host: bastion:99999}\nhosts: [a]\n",
            "1: defaults.jump_host: jump host 'bastion:99999': the port must be",
        ),
        ("defaults: {nodeagent: ''}\nhosts: [a]\n", "1: defaults.nodeagent: must not be empty"),
        (
            'hosts:\n  - name: a\n    python: "py\\nthon"\n',
            "3: hosts[0].python: must be one line without NUL characters",
        ),
        ("defaults: {identity_file: '  '}\nhosts: [a]\n", "1: defaults.identity_file: must not be empty"),
    ],
)
def test_names_users_jump_hosts_and_commands_are_checked(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    message = error(path)
    assert message.startswith(f"{path}:{expected}"), message


def test_accepted_user_and_jump_host_forms(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        hosts:
          - {name: a, user: Admin, jump_host: bastion}
          - {name: b, user: svc.user$, jump_host: ops@10.0.0.1:2222}
          - {name: c, user: _x, jump_host: 'fe80::1'}
        """,
    )
    assert [h.jump_host for h in load_inventory(path).hosts] == ["bastion", "ops@10.0.0.1:2222", "fe80::1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "all:\n  children:\n    gpus:\n      vars:\n        ansible_port: abc\n      hosts: {g1: }\n",
            "5: all.children.gpus.vars.ansible_port: must be an integer between 1 and 65535 (got 'abc')",
        ),
        (
            "all:\n  hosts:\n    g1:\n      ansible_host: '{{ inventory_hostname }}.ib'\n",
            "4: all.hosts.g1.ansible_host: Jinja templates are not expanded by nodeagent",
        ),
        (
            "all:\n  hosts:\n    g1:\n      ansible_host: 'bad host'\n",
            "4: all.hosts.g1.ansible_host: 'bad host' is not a valid host name or address",
        ),
        ("all:\n  hosts:\n    'g1;id':\n", "3: all.hosts.g1;id: 'g1;id' is not a valid host name or address"),
        (
            "all:\n  hosts:\n    g1:\n      ansible_user: 'r t'\n",
            "4: all.hosts.g1.ansible_user: 'r t' is not a valid user",
        ),
        (
            "all:\n  hosts:\n    g1:\n      ansible_ssh_timeout: 0\n",
            "4: all.hosts.g1.ansible_ssh_timeout: must be a number of seconds greater than 0",
        ),
        (
            "all:\n  ansible_user: root\n",
            "2: all.ansible_user: unknown key; known keys: children, hosts, vars; put variables under vars:",
        ),
        ("all:\n  host: {a: }\n", "2: all.host: unknown key; did you mean 'hosts'?"),
        ("all:\n  hosts: [a, b]\n", "2: all.hosts: must be a mapping of host: variables (got a list)"),
        ("all:\n  hosts:\n    a: 10.0.0.1\n", "3: all.hosts.a: must be a mapping of variables"),
        (
            "all:\n  hosts:\n    node[01:1]:\n",
            "3: all.hosts.node[01:1]: bad host range 'node[01:1]': [01:1]: a zero-padded start",
        ),
        (
            "all:\n  hosts:\n    node[01-04]:\n",
            "3: all.hosts.node[01-04]: bad host range 'node[01-04]': [01-04] is not an Ansible range",
        ),
        (
            "all:\n  hosts:\n    node[9:1]:\n",
            "3: all.hosts.node[9:1]: bad host range 'node[9:1]': [9:1] goes backwards",
        ),
        ("all:\n  vars: {a: 1}\n", "1: the Ansible inventory lists no hosts"),
        (
            "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
            "7: all.children.a.children.b.children.a: group 'a' contains itself (a -> b -> a)",
        ),
        (
            "g:\n  hosts: {n1: }\n  vars: {ansible_group_priority: high}\n",
            "3: g.vars.ansible_group_priority: must be an integer (got 'high')",
        ),
        ("g:\n  hosts: {n1: }\n'bad group':\n  hosts: {n2: }\n", "3: bad group: is not a valid group name"),
        (
            "all:\n  hosts:\n    c1:\n      ansible_connection: community.docker.docker\n",
            "4: all.hosts.c1.ansible_connection: connection 'community.docker.docker' is not supported; "
            "nodeagent reaches a host over SSH (ssh, paramiko, smart) or runs on this machine (local)",
        ),
        (
            "all:\n  vars:\n    ansible_connection: winrm\n  hosts: {w1: }\n",
            "3: all.vars.ansible_connection: connection 'winrm' is not supported",
        ),
        (
            "all:\n  hosts:\n    d1: {ansible_connection: docker}\n",
            "3: all.hosts.d1.ansible_connection: connection 'docker' is not supported",
        ),
        (
            "all:\n  hosts:\n    d1: {ansible_connection: 5}\n",
            "3: all.hosts.d1.ansible_connection: connection 5 is not supported",
        ),
    ],
)
def test_ansible_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    message = error(path)
    assert message.startswith(f"{path}:{expected}"), message


# --- limit -----------------------------------------------------------------------------------------


def test_limit_by_host_group_and_hostlist(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        hosts: ["node[01-04]", login]
        groups:
          rack1: ["node[01-02]"]
          empty: []
        """,
    )
    assert [h.name for h in load_inventory(path, limit="login").hosts] == ["login"]
    assert [h.name for h in load_inventory(path, limit="rack1").hosts] == ["node01", "node02"]
    # Inventory order, not limit order; a group and a host together; no duplicates.
    assert [h.name for h in load_inventory(path, limit="login, rack1,node02").hosts] == [
        "node01",
        "node02",
        "login",
    ]
    assert [h.name for h in load_inventory(path, limit="node[03-04]").hosts] == ["node03", "node04"]
    assert len(load_inventory(path, limit="all").hosts) == 5

    assert error(path, "node1") == f"{path}: limit: unknown host or group 'node1'; did you mean 'node01'?"
    assert error(path, "rack1,zzz").startswith(f"{path}: limit: unknown host or group 'zzz'")
    assert error(path, "node[04-05]").startswith(f"{path}: limit: unknown host or group 'node05'")
    assert error(path, "empty") == f"{path}: limit 'empty': the group has no hosts"
    assert error(path, " , ").startswith(f"{path}: limit ' , ' names no hosts")
    assert error(path, "node[01").startswith(f"{path}: limit: hostlist 'node[01': '[' is not closed")


def test_limit_on_ansible_group_includes_its_children(tmp_path: Path) -> None:
    path = write(tmp_path, ANSIBLE)
    assert [h.name for h in load_inventory(path, limit="gpus").hosts] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert [h.name for h in load_inventory(path, limit="a100,login").hosts] == ["login", "gpu01"]
    assert len(load_inventory(path, limit="cluster").hosts) == 10


# --- --hosts ---------------------------------------------------------------------------------------


def test_from_hostlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/alice")
    inventory = from_hostlist(
        "node[01-02],node01,10.0.0.9", user="root", port=2222, identity_file="~/.ssh/k", jump_host=None
    )
    assert inventory.source == "--hosts node[01-02],node01,10.0.0.9"
    assert inventory.known_hosts is None
    assert inventory.hosts == tuple(
        HostSpec(name=name, address=name, user="root", port=2222, identity_file="/home/alice/.ssh/k")
        for name in ("node01", "node02", "10.0.0.9")
    )
    assert from_hostlist("a", known_hosts="/etc/kh", connect_timeout=3).known_hosts == "/etc/kh"
    assert from_hostlist("a", connect_timeout=3).hosts[0].connect_timeout == 3.0


def test_from_hostlist_errors() -> None:
    with pytest.raises(UsageError) as caught:
        from_hostlist("node[01-02")
    assert str(caught.value).startswith("--hosts: hostlist 'node[01-02': '[' is not closed")
    with pytest.raises(UsageError) as caught:
        from_hostlist("a;reboot")
    assert str(caught.value).startswith("--hosts 'a;reboot': 'a;reboot' is not a valid host name or address")
    with pytest.raises(UsageError) as caught:
        from_hostlist("a", port=0)
    assert str(caught.value) == "--hosts 'a': port: must be an integer between 1 and 65535 (got 0)"
    with pytest.raises(UsageError) as caught:
        from_hostlist("a", user="x y")
    assert str(caught.value).startswith("--hosts 'a': user: 'x y' is not a valid user name")
    with pytest.raises(TypeError, match="'colour'"):
        from_hostlist("a", colour="red")
