from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.core import parse


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
        ("", []),
        ("5", [5]),
        ("0-7:2", [0, 2, 4, 6]),
        ("0-9:2/5", [0, 1, 5, 6]),
        ("1,0\x00", [0, 1]),
    ],
)
def test_cpulist(text: str, cpus: list[int]) -> None:
    assert parse.cpulist(text) == cpus


@pytest.mark.parametrize("bad", ["a-b", "3-1", "1,,2", "-1", "0-99999999"])
def test_cpulist_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        parse.cpulist(bad)


@given(st.sets(st.integers(min_value=0, max_value=4095)))
def test_format_then_parse_round_trips(cpus: set[int]) -> None:
    assert parse.cpulist(parse.format_cpulist(cpus)) == sorted(cpus)


def test_cpumask_words_most_significant_first() -> None:
    assert parse.cpumask("00000003,00000001") == [0, 32, 33]
    assert parse.cpumask("ff\n") == list(range(8))
    with pytest.raises(ValueError):
        parse.cpumask("xyz")


def test_meminfo_drops_node_prefix() -> None:
    text = "Node 0 MemTotal:       2096684 kB\nNode 0 MemFree:  100 kB\nHugePages_Total:     4\n"
    assert parse.meminfo(text) == {"MemTotal": 2096684, "MemFree": 100, "HugePages_Total": 4}


def test_selected_and_link_attributes() -> None:
    assert parse.selected("always [madvise] never") == "madvise"
    assert parse.selected("garbage") is None
    assert parse.link_speed_gts("16.0 GT/s PCIe") == 16.0
    assert parse.link_speed_gts("8 GT/s") == 8.0
    assert parse.link_speed_gts("Unknown") is None
    assert parse.link_width("16") == 16
    assert parse.link_width("x8") == 8
    assert parse.link_width("0") is None
    assert parse.integer("0x10de") == 0x10DE
