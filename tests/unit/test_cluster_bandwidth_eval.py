"""The bandwidth evaluation's fleet rules on hand-made links (nodeagent.cluster.bandwidth.evaluate):
the ratio rule (a link below a fraction of the median of its tool's links) beside the MAD rule, the
host attribution of what either flags, and fleets with too few links to compare. Pure: no network.

Every expected median and ratio is computed here from the links' own figures."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import pytest
from click.core import Option
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.cli.main import check
from nodeagent.cluster.bandwidth.measure import Link, Params, evaluate, plan_links
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status

DEAD = "h5: unreachable: connection refused by 10.0.0.5:22 (is sshd running there?)"
MAD_TO_Z = 0.6745  # the modified z-score's constant (Iglewicz and Hoaglin)


def names(count: int) -> list[str]:
    return [f"h{i}" for i in range(1, count + 1)]


def ring(gbits: Sequence[float | None], tool: str = "iperf3") -> list[Link]:
    """A ring of len(gbits) hosts h1..hN; link i is h(i+1) -> h(i+2). None: not measured (a dead host)."""
    return [
        Link(a, b, tool, g, 0.05 if g is not None else None, None if g is not None else DEAD)
        for (a, b), g in zip(plan_links(names(len(gbits)), "ring"), gbits, strict=True)
    ]


def healthy(count: int) -> list[float]:
    """A 10G fleet's links with the few percent of spread real iperf3 runs have: 9.30 to 9.50."""
    return [9.3 + 0.05 * (i % 5) for i in range(count)]


def problems(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.status in (Status.WARN, Status.FAIL)]


def flagged(findings: Sequence[Finding]) -> list[tuple[str, Status]]:
    return [(f.subject, f.status) for f in problems(findings)]


def label(links: Sequence[Link], i: int) -> str:
    return f"{links[i].src} -> {links[i].dst}"


def shown(value: float) -> str:
    """A figure as the findings print it: 3 significant digits."""
    return f"{value:.3g} Gbit/s"


def modified_z(value: float, values: Sequence[float]) -> float:
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return MAD_TO_Z * (value - median) / mad


# --- one link 1000 times slower than the others ---------------------------------------------------


@pytest.mark.parametrize("count", [3, 4, 6, 64])
def test_a_link_a_thousand_times_slower_fails_by_the_tenth_of_the_median(count: int) -> None:
    gbits = healthy(count)
    slow = count // 2
    gbits[slow] /= 1000
    links = ring(gbits)
    median = statistics.median(gbits)
    assert gbits[slow] < 0.1 * median  # the premise: below a tenth of the median
    bad = problems(evaluate(links, Params()))
    assert [(f.subject, f.status) for f in bad] == [(label(links, slow), Status.FAIL)]
    assert f"below 0.1 x the median {shown(median)} of the {count} measured iperf3 links" in bad[0].summary
    assert bad[0].evidence == {label(links, slow): shown(gbits[slow]), "fleet median": shown(median)}


def test_two_links_are_judged_against_the_minimum_and_say_so() -> None:
    gbits = healthy(2)
    gbits[1] /= 1000
    links = ring(gbits)
    findings = evaluate(links, Params(min_gbits_per_s=1.0))
    assert flagged(findings) == [(label(links, 1), Status.FAIL)]
    assert (
        "below the minimum 1 Gbit/s (2 iperf3 links measured: too few to compare with each other; "
        "judged against --min-gbits 1)" in problems(findings)[0].summary
    )
    assert "fleet median" not in problems(findings)[0].evidence  # the median of 2 is no reference
    assert not any("stands out" in f.summary for f in findings)


def test_two_links_without_a_minimum_are_not_judged_and_name_what_to_pass() -> None:
    gbits = healthy(2)
    gbits[1] /= 1000
    findings = evaluate(ring(gbits), Params())
    assert [f.status for f in findings] == [Status.SKIPPED]
    assert findings[0].summary.startswith("2 iperf3 links measured: too few to compare with each other")
    assert "pass --min-gbits N" in findings[0].summary
    assert findings[0].evidence == {"h1 -> h2": shown(gbits[0]), "h2 -> h1": shown(gbits[1])}


def test_two_links_that_reach_the_minimum_are_ok_saying_what_judged_them() -> None:
    findings = evaluate(ring(healthy(2)), Params(min_gbits_per_s=9.0))
    assert [f.status for f in findings] == [Status.OK]
    assert "too few to compare with each other; judged against --min-gbits 9" in findings[0].summary
    assert "stands out" not in findings[0].summary


def test_one_measured_link_is_too_few_as_well() -> None:
    findings = evaluate(ring([9.4, None]), Params())
    assert sorted(f.status.value for f in findings) == ["SKIPPED", "UNKNOWN"]
    skipped = next(f for f in findings if f.status is Status.SKIPPED)
    assert skipped.summary.startswith("1 iperf3 link measured: too few")


# --- the run that MAD alone passed: 16.1, 0.018, 8.5, 18.2 Gbit/s and a dead host ---------------------


def test_the_straggler_among_four_noisy_links_fails() -> None:
    gbits: list[float | None] = [16.1, 0.018, 8.5, None, None, 18.2]  # h5 dead: h4 -> h5, h5 -> h6
    links = ring(gbits)
    measured = [g for g in gbits if g is not None]
    median = statistics.median(measured)
    assert median == pytest.approx(12.3)
    assert modified_z(0.018, measured) > -3.5  # MAD alone does not see it
    findings = evaluate(links, Params())
    assert flagged(findings) == [("h2 -> h3", Status.FAIL)]
    assert (
        f"below 0.1 x the median {shown(median)} of the 4 measured iperf3 links"
        in problems(findings)[0].summary
    )
    unknown = [(f.subject, f.status) for f in findings if f.status is Status.UNKNOWN]
    assert unknown == [("h5", Status.UNKNOWN)]
    assert not any("stands out" in f.summary for f in findings)


# --- each fraction on both sides, with links too noisy for MAD ------------------------------------------

NOISY = [8.0, 18.0, 10.0, 16.0, 14.0]  # with one link below 10 the median is (10 + 14) / 2


@pytest.mark.parametrize(
    ("ratio", "status"), [(0.55, None), (0.45, Status.WARN), (0.11, Status.WARN), (0.09, Status.FAIL)]
)
def test_each_fraction_of_the_median_on_both_sides(ratio: float, status: Status | None) -> None:
    median = statistics.median([*NOISY, 0.0])
    gbits = [*NOISY, ratio * median]
    assert statistics.median(gbits) == median == 12.0
    assert modified_z(gbits[-1], gbits) > -3.5  # only the ratio rule can flag it
    findings = evaluate(ring(gbits), Params())
    if status is None:
        assert flagged(findings) == []
        assert [f.status for f in findings] == [Status.OK]
        return
    assert flagged(findings) == [("h6 -> h1", status)]
    fraction = 0.5 if status is Status.WARN else 0.1
    assert f"below {fraction} x the median 12 Gbit/s of the 6 measured iperf3 links" in findings[0].summary
    assert "modified z-score" not in findings[0].summary


def test_noisy_but_healthy_links_are_not_flagged() -> None:
    gbits = [8.0, 18.0, 9.5, 16.1, 12.0, 17.0]
    assert min(gbits) >= 0.5 * statistics.median(gbits)
    findings = evaluate(ring(gbits), Params())
    assert [f.status for f in findings] == [Status.OK]
    assert "no link stands out" in findings[0].summary


def test_the_fractions_are_parameters() -> None:
    gbits = [*NOISY, 0.3 * 12.0]
    assert flagged(evaluate(ring(gbits), Params())) == [("h6 -> h1", Status.WARN)]
    assert flagged(evaluate(ring(gbits), Params(warn_below_median=0.2, fail_below_median=0.1))) == []
    stricter = Params(warn_below_median=0.5, fail_below_median=0.4)
    assert flagged(evaluate(ring(gbits), stricter)) == [("h6 -> h1", Status.FAIL)]
    assert flagged(evaluate(ring(gbits), Params(warn_below_median=0, fail_below_median=0))) == []


# --- one finding per link, whatever flags it -------------------------------------------------------------


def test_a_link_flagged_by_both_rules_is_one_finding_with_the_worse_status_and_both_reasons() -> None:
    gbits = healthy(6)
    gbits[3] /= 1000
    assert modified_z(gbits[3], gbits) < -3.5  # MAD flags it too (WARN)
    findings = evaluate(ring(gbits), Params())
    assert flagged(findings) == [("h4 -> h5", Status.FAIL)]
    summary = problems(findings)[0].summary
    assert "below 0.1 x the median" in summary and "modified z-score" in summary


def test_both_rules_at_warn_are_one_warn() -> None:
    gbits = healthy(6)
    gbits[3] *= 0.3
    findings = evaluate(ring(gbits), Params())
    assert flagged(findings) == [("h4 -> h5", Status.WARN)]
    summary = problems(findings)[0].summary
    assert "below 0.5 x the median" in summary and "modified z-score" in summary


def test_the_minimum_and_the_ratio_are_one_finding() -> None:
    gbits = healthy(6)
    gbits[3] /= 1000
    findings = evaluate(ring(gbits), Params(min_gbits_per_s=5.0))
    assert flagged(findings) == [("h4 -> h5", Status.FAIL)]
    summary = problems(findings)[0].summary
    assert "below the minimum 5 Gbit/s" in summary and "below 0.1 x the median" in summary


# --- hosts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [3, 4, 6])
def test_a_host_whose_links_are_all_a_thousand_times_slower_fails_as_the_host(count: int) -> None:
    gbits = healthy(count)
    gbits[1] /= 1000  # h2 -> h3
    gbits[2] /= 1000  # h3 -> h4 (h3 -> h1 in a ring of 3)
    findings = evaluate(ring(gbits), Params())
    assert flagged(findings) == [("h3", Status.FAIL)]
    assert "h3 is the host" in problems(findings)[0].summary
    if count == 3:  # 2 of 3 links slow: the links' median is a slow one; the hosts' best links say it
        assert statistics.median(gbits) == max(gbits[1], gbits[2])
        assert "every link through h3 is slow" in problems(findings)[0].summary


def test_a_failing_link_beside_a_link_only_warned_about_names_the_links_not_their_host() -> None:
    """In a ring each host has two links: h3's out-link a thousand times slower (FAIL by the ratio)
    and its in-link a quarter below the others (WARN by the MAD rule, as iperf3 on a busy CPU
    measures a healthy link) are two facts of two strengths. Blaming h3 as a whole would make the
    weak one as sure as the strong one."""
    gbits = healthy(6)
    gbits[2] /= 1000  # h3 -> h4
    gbits[1] = 0.75 * statistics.median(gbits)  # h2 -> h3
    links = ring(gbits)
    findings = evaluate(links, Params())
    assert sorted(flagged(findings)) == [(label(links, 1), Status.WARN), (label(links, 2), Status.FAIL)]
    assert not any("is the host" in f.summary for f in findings)


def test_slow_out_links_of_one_host_in_pairs_mode_point_at_its_sending_side() -> None:
    hosts = names(5)
    links = [
        Link(a, b, "iperf3", 0.009 if a == "h3" else 9.3 + 0.02 * i, 0.05)
        for i, (a, b) in enumerate(plan_links(hosts, "pairs"))
    ]
    findings = evaluate(links, Params(mode="pairs"))
    assert flagged(findings) == [("h3", Status.FAIL)]
    assert "out-links" in problems(findings)[0].summary
    assert len([k for k in problems(findings)[0].evidence if "->" in k]) == 4


def test_a_host_next_to_a_dead_one_is_not_judged_on_its_one_link() -> None:
    gbits: list[float | None] = [9.4, 9.3, 0.3, None, None, 9.5]  # h3 -> h4 slow, h4's other link unmeasured
    findings = evaluate(ring(gbits), Params())
    assert flagged(findings) == [("h3 -> h4", Status.FAIL)]
    assert "every link through" not in problems(findings)[0].summary


# --- tools ------------------------------------------------------------------------------------------------


def test_rdma_and_tcp_links_have_their_own_medians() -> None:
    rdma = ring([97.0 + 0.1 * i for i in range(6)], tool="ib_write_bw")
    tcp = [Link(f"t{i}", f"t{i + 1}", "iperf3", 9.4 + 0.01 * i, 0.05) for i in range(3)]
    assert 0.1 * statistics.median([link.gbits_per_s or 0 for link in [*rdma, *tcp]]) > 9.4
    findings = evaluate([*rdma, *tcp], Params())
    assert [f.status for f in findings] == [Status.OK]
    assert "6 ib_write_bw links" in findings[0].summary and "3 iperf3 links" in findings[0].summary


def test_a_tool_with_two_links_beside_a_compared_one_is_not_judged() -> None:
    rdma = ring([97.0 + 0.1 * i for i in range(6)], tool="ib_write_bw")
    tcp = [Link("t1", "t2", "iperf3", 9.4, 0.05), Link("t2", "t1", "iperf3", 0.009, 0.05)]
    findings = evaluate([*rdma, *tcp], Params())
    assert sorted((f.status.value, f.summary.split(":")[0]) for f in findings) == [
        ("OK", "6 ib_write_bw links"),
        ("SKIPPED", "2 iperf3 links measured"),
    ]


# --- properties -------------------------------------------------------------------------------------------

rates = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)


@given(st.integers(min_value=2, max_value=40), rates)
def test_equal_links_at_any_rate_are_never_flagged(count: int, rate: float) -> None:
    findings = evaluate(ring([rate] * count), Params())
    assert [f.status for f in findings] == [Status.SKIPPED if count < 3 else Status.OK]


@given(st.lists(st.floats(min_value=0.0, max_value=0.2499), min_size=3, max_size=40), rates)
def test_links_within_a_quarter_of_each_other_are_never_flagged(spread: list[float], rate: float) -> None:
    # The MAD rule needs a shortfall of 20% of the median; the ratio rule half of it.
    findings = evaluate(ring([rate * (1 + s) for s in spread]), Params())
    assert flagged(findings) == []


verdict_inputs = st.lists(
    st.one_of(st.none(), st.floats(min_value=0.01, max_value=100.0), st.sampled_from([0.001, 10.0, 10.0])),
    min_size=2,
    max_size=12,
)


@given(verdict_inputs, st.integers(min_value=-10, max_value=10), st.sampled_from(["ring", "pairs"]))
def test_scaling_every_link_never_changes_a_verdict(gbits: list[float | None], power: int, mode: str) -> None:
    # A power of two scales a float exactly, so no comparison flips by rounding.
    hosts = names(len(gbits)) if mode == "ring" else names(4)
    pairs = plan_links(hosts, mode)
    values = (gbits * len(pairs))[: len(pairs)]
    scale = 2.0**power

    def verdicts(factor: float) -> list[tuple[str, Status]]:
        links = [
            Link(a, b, "iperf3", None if g is None else g * factor, 0.05, None if g is not None else DEAD)
            for (a, b), g in zip(pairs, values, strict=True)
        ]
        return [(f.subject, f.status) for f in evaluate(links, Params(mode=mode))]

    assert verdicts(scale) == verdicts(1.0)


# --- parameters ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"warn_below_median": 1.0}, "warn_below_median"),
        ({"warn_below_median": -0.1}, "warn_below_median"),
        ({"fail_below_median": float("nan")}, "fail_below_median"),
        ({"warn_below_median": 0.3, "fail_below_median": 0.4}, "fail_below_median 0.4 is above"),
    ],
)
def test_bad_fractions_are_usage_errors_naming_the_field(fields: dict[str, float], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        Params(**fields)  # type: ignore[arg-type]


def test_either_rule_can_be_turned_off() -> None:
    assert Params(warn_below_median=0, fail_below_median=0.1).fail_below_median == 0.1
    assert Params(warn_below_median=0.5, fail_below_median=0).warn_below_median == 0.5


def test_the_command_line_defaults_are_the_parameters_defaults() -> None:
    options = {p.name: p for p in check.params if isinstance(p, Option)}
    defaults = Params()
    assert options["warn_below_median"].default == defaults.warn_below_median == 0.5
    assert options["fail_below_median"].default == defaults.fail_below_median == 0.1
