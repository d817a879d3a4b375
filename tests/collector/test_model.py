"""Tests for collector.model: the fast constructor of frozen dataclasses."""

from __future__ import annotations

import dataclasses
import gc
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from collector import model
from collector.model import Span, SpanKind, StatusCode, fast_constructor

FIELDS = ("a" * 32, "b" * 16, None, "chat m", SpanKind.CLIENT, 1, 2, StatusCode.ERROR, "boom", {"k": 1}, (), {}, "s")


@pytest.fixture(params=["compiled", "python"])
def new_span(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Span]:
    """fast_constructor(Span) from the compiled extension, and its pure-Python form."""
    if request.param == "python":
        monkeypatch.setattr(model, "_compiled_constructor", lambda *_: None)
        make = fast_constructor(Span)
        assert "function" == type(make).__name__
        return make
    make = fast_constructor(Span)
    assert "Constructor" == type(make).__name__, "the compiled constructor was not built"
    return make


class TestFastConstructor:
    def test_same_as_the_dataclass_constructor(self, new_span: Callable[..., Span]) -> None:
        """The result is a genuine Span, equal to one built by __init__, with the same repr."""
        fast, slow = new_span(*FIELDS), Span(*FIELDS)
        assert type(fast) is Span
        assert slow == fast
        assert repr(slow) == repr(fast)
        assert fast.is_root

    def test_still_frozen_and_replaceable(self, new_span: Callable[..., Span]) -> None:
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

    def test_wrong_argument_count_is_a_type_error(self, new_span: Callable[..., Span]) -> None:
        """Every field must be given, positionally."""
        with pytest.raises(TypeError):
            new_span(*FIELDS[:-1])

    def test_no_reference_leaks(self, new_span: Callable[..., Span]) -> None:
        """Values are held once per span and released with it (the compiled slots are refcounted)."""
        marker = object()
        before = sys.getrefcount(marker)
        spans = [new_span(*FIELDS[:9], {"k": marker}, (), {}, "s") for _ in range(100)]
        shared = ("x" * 32, marker)
        many = [new_span(shared[0], "b" * 16, None, "n", SpanKind.CLIENT, 1, 2, StatusCode.OK, "", {}, (), {}, marker)]
        assert sys.getrefcount(marker) >= before + 101
        del spans, many, shared
        gc.collect()
        assert before == sys.getrefcount(marker)

    def test_compiled_refuses_non_slot_names(self) -> None:
        """The compiled constructor only writes object slots it found in the class."""
        from collector import _otlp_fast

        with pytest.raises(TypeError, match="not an object slot"):
            _otlp_fast.constructor(Span, ("trace_id", "nope"))

    def test_keywords_fill_the_same_slots(self, new_span: Callable[..., Span]) -> None:
        """Fields may be given by name (in any order) after the positional ones."""
        names = [f.name for f in dataclasses.fields(Span)]
        by_name = dict(zip(names, FIELDS, strict=True))
        assert Span(*FIELDS) == new_span(**dict(reversed(list(by_name.items()))))
        assert Span(*FIELDS) == new_span(*FIELDS[:5], **dict(list(by_name.items())[5:]))
        with pytest.raises(TypeError):
            new_span(*FIELDS[:-1], bogus="s")
        with pytest.raises(TypeError):
            new_span(*FIELDS[:-1], trace_id="a" * 32)


def test_constructor_object_header_is_variable_size() -> None:
    """Issue 42 (3): the Constructor type is allocated with PyObject_GC_NewVar, so its struct starts
    with PyObject_VAR_HEAD; with PyObject_HEAD the size field overlapped the cls pointer and
    sys.getsizeof returned an address-sized number."""
    import sys

    from collector import model

    assert sys.getsizeof(model.new_span) < 4096
