"""Tests for collector.model: the fast constructor of frozen dataclasses."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass

import pytest

from collector.model import Span, SpanKind, StatusCode, fast_constructor, new_span

FIELDS = ("a" * 32, "b" * 16, None, "chat m", SpanKind.CLIENT, 1, 2, StatusCode.ERROR, "boom", {"k": 1}, (), {}, "s")


class TestFastConstructor:
    def test_same_as_the_dataclass_constructor(self) -> None:
        """The result is a genuine Span, equal to one built by __init__, with the same repr."""
        fast, slow = new_span(*FIELDS), Span(*FIELDS)
        assert type(fast) is Span
        assert slow == fast
        assert repr(slow) == repr(fast)
        assert fast.is_root

    def test_still_frozen_and_replaceable(self) -> None:
        """Frozen semantics, dataclasses.replace and pickling keep working."""
        span = new_span(*FIELDS)
        with pytest.raises(dataclasses.FrozenInstanceError):
            span.name = "other"  # type: ignore[misc]
        assert "other" == dataclasses.replace(span, name="other").name
        assert span == pickle.loads(pickle.dumps(span))

    def test_refuses_classes_without_slots(self) -> None:
        """Only slotted dataclasses have the layout the constructor relies on."""

        @dataclass(frozen=True)
        class Plain:
            x: int

        with pytest.raises(TypeError, match="slotted"):
            fast_constructor(Plain)
