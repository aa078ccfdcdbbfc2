"""nodeagent.gate.fold on hand-built findings: a rule's verdict on a value a check reported
re-judges that check's finding; what no check carries stays the rule's, one finding per device."""

from __future__ import annotations

from nodeagent.compare.values import Value
from nodeagent.core.finding import Finding, Status
from nodeagent.gate.fold import Rule, fold

LIMITS = "/proc/self/limits"
PORT = "/sys/class/infiniband/mlx5_0/ports/1"


def memlock(status: Status = Status.WARN) -> Finding:
    return Finding(
        "kernel",
        status,
        "memlock limited (soft 64 KiB, hard 64 KiB)",
        {LIMITS: "Max locked memory: soft 64 KiB, hard 64 KiB", f"{LIMITS} soft": "64 KiB"},
        expected="unlimited",
        remediation="Set memlock unlimited.",
        subject="memlock",
    )


def port(status: Status = Status.OK) -> Finding:
    return Finding(
        "rdma", status, "mlx5_0 port 1: ACTIVE/LinkUp", {f"{PORT}/state": "ACTIVE"}, subject="mlx5_0/1"
    )


def threshold(key: str, status: Status, summary: str, expected: str = "unlimited") -> Finding:
    return Finding(
        "playbook", status, summary, {key: "x"}, expected=expected, remediation="Why.", subject=key
    )


def test_a_threshold_on_a_checks_value_rejudges_that_finding() -> None:
    key = f"check.kernel.memlock.{LIMITS} soft"
    rule = Rule(
        "playbook", "playbook gpu", [threshold(key, Status.FAIL, f"{key} = 65536, expected unlimited")]
    )
    out = fold([[memlock()]], [rule], {})
    (only,) = out.checks.values()
    assert (only.check_id, only.subject, only.status) == ("kernel", "memlock", Status.FAIL)
    # The check's own words first (it saw the problem), then the rule's, with the place, not the key.
    assert only.summary == (
        "memlock limited (soft 64 KiB, hard 64 KiB); "
        "playbook gpu: /proc/self/limits soft = 65536, expected unlimited"
    )
    assert only.expected == "unlimited; /proc/self/limits soft: unlimited (playbook gpu)"
    assert only.remediation == "Set memlock unlimited. Why."
    assert out.rules == {"playbook": []}


def test_a_rule_that_passes_changes_nothing_and_its_summary_over_check_values_goes() -> None:
    key = f"check.kernel.memlock.{LIMITS} soft"
    passed = threshold(key, Status.OK, f"{key} = unlimited")
    summary = threshold("check.kernel.*", Status.OK, "1 of 1 value(s) matching check.kernel.* are OK")
    out = fold([[memlock()]], [Rule("playbook", "playbook gpu", [passed, summary])], {})
    assert out.checks == {} and out.rules == {"playbook": []}


def test_a_devices_fact_lands_on_the_check_finding_about_that_port() -> None:
    """rdma[mlx5_0] is the facts' label of a one-port device; the rdma check names its port mlx5_0/1.
    The fact `state` is the file the check quotes: one verdict of the baseline per value."""
    values: dict[str, Value] = {"rdma[mlx5_0].port": 1, "rdma[mlx5_0].state": "DOWN"}
    fact = Finding(
        "baseline",
        Status.WARN,
        "rdma[mlx5_0].state is DOWN; the baseline has ACTIVE",
        {"rdma[mlx5_0].state": "DOWN", "rdma[mlx5_0].state in b.json": "ACTIVE"},
        subject="rdma[mlx5_0].state",
    )
    key = f"check.rdma.mlx5_0/1.{PORT}/state"
    file = Finding(
        "baseline",
        Status.WARN,
        f"{key} is DOWN; the baseline has ACTIVE",
        {key: "DOWN", f"{key} in b.json": "ACTIVE"},
        subject=key,
    )
    rule = threshold("rdma[mlx5_0].state", Status.FAIL, "rdma[mlx5_0].state = DOWN, expected one of ACTIVE")
    out = fold(
        [[port(Status.WARN)]],
        [Rule("playbook", "playbook gpu", [rule]), Rule("baseline", "baseline b.json", [fact, file])],
        values,
    )
    (only,) = out.checks.values()
    assert (only.subject, only.status) == ("mlx5_0/1", Status.FAIL)
    assert only.summary == (
        "mlx5_0 port 1: ACTIVE/LinkUp; playbook gpu: state = DOWN, expected one of ACTIVE; "
        f"baseline b.json: {PORT}/state is DOWN; the baseline has ACTIVE"
    )
    assert only.evidence[f"{PORT}/state in b.json"] == "ACTIVE"
    assert out.rules == {"playbook": [], "baseline": []}


def test_what_no_check_carries_stays_the_rules_one_finding_per_device() -> None:
    mtu = Finding(
        "baseline",
        Status.WARN,
        "nics[eth0].mtu is 1500; the baseline has 9000",
        {"nics[eth0].mtu": "1500"},
        expected="9000",
        subject="nics[eth0].mtu",
    )
    speed = Finding(
        "baseline",
        Status.WARN,
        "nics[eth0].speed_mbps is 10000; the baseline has 25000",
        {"nics[eth0].speed_mbps": "10000"},
        expected="25000",
        subject="nics[eth0].speed_mbps",
    )
    count = threshold("hardware.gpus", Status.FAIL, "hardware.gpus = 7, expected >= 8", ">= 8")
    out = fold(
        [[port()]],
        [Rule("playbook", "playbook gpu", [count]), Rule("baseline", "baseline b.json", [mtu, speed])],
        {},
    )
    assert out.checks == {}
    assert out.rules["playbook"] == [count]
    (nic,) = out.rules["baseline"]
    assert (nic.subject, nic.status) == ("nics[eth0]", Status.WARN)
    assert (
        nic.summary
        == "nics[eth0]: mtu is 1500; the baseline has 9000; speed_mbps is 10000; the baseline has 25000"
    )
    assert nic.evidence == {"mtu": "1500", "speed_mbps": "10000"}
