"""nodeagent.core.document: a class's declaration is its document, its keys in the order the class
names, another document inlined where it says, and nothing dumped that declares no document."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import pytest
from pydantic import Field, computed_field
from pydantic.dataclasses import dataclass

from nodeagent.core import document


@dataclass
class Inner:
    a: int
    b: int


@dataclass
class Outer(document.InKeyOrder):
    document_keys = ("name", "derived", "inner")
    document_inlined = "inner"

    name: str
    inner: Inner
    late: str = "stored last"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def derived(self) -> int:
        return self.inner.a + self.inner.b


def test_keys_come_in_the_named_order_with_the_inlined_document_in_its_place() -> None:
    doc = document.dump(Outer("x", Inner(1, 2)))
    assert list(doc) == ["name", "derived", "a", "b", "late"]
    assert doc == {"name": "x", "derived": 3, "a": 1, "b": 2, "late": "stored last"}


def test_a_key_the_order_does_not_name_is_kept_after_the_named_ones() -> None:
    assert list(document.dump(Outer("x", Inner(1, 2))))[-1] == "late"


@dataclasses.dataclass
class Plain:
    a: int


def test_an_object_that_declares_no_document_is_refused() -> None:
    with pytest.raises(TypeError, match="Plain is not a pydantic dataclass"):
        document.dump(Plain(1))


@dataclass
class Optional_:
    cpus: Annotated[list[int], document.EMPTY_AS_NULL]
    why: Annotated[str | None, Field(exclude_if=document.is_none)] = None
    notes: Annotated[list[str], Field(exclude_if=document.is_empty)] = Field(default_factory=list)


def test_empty_values_are_null_or_left_out_as_declared() -> None:
    assert document.dump(Optional_([])) == {"cpus": None}
    assert document.dump(Optional_([0, 1], "because", ["n"])) == {
        "cpus": [0, 1],
        "why": "because",
        "notes": ["n"],
    }
