"""Tests for collector.instrument.content: the capture switch, caps and JSON text."""

from __future__ import annotations

import inspect
import json

import pytest

from collector.errors import SettingsError
from collector.instrument.content import (
    MAX_ATTRIBUTE_CHARS,
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
    call_arguments,
    capture_from_env,
    clip,
    json_text,
    output_messages,
    signature_of,
)


class TestCaptureFromEnv:
    """The standard GenAI variable switches content capture; off by default."""

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (None, False),
            ("", False),
            ("false", False),
            ("NO_CONTENT", False),
            ("EVENT_ONLY", False),
            ("true", True),
            ("True", True),
            ("SPAN_ONLY", True),
            ("span_and_event", True),
            (" span_only ", True),
        ],
    )
    def test_values(self, value: str | None, expected: bool) -> None:
        """Only the values that put content on spans turn capture on."""
        environ = {} if value is None else {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: value}
        assert expected is capture_from_env(environ)

    def test_unknown_value_refused(self) -> None:
        """A typo is a configuration error naming the variable and the value."""
        with pytest.raises(SettingsError) as caught:
            capture_from_env({OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: "yes please"})
        assert (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "yes please") == (
            caught.value.variable,
            caught.value.value,
        )


class TestJsonText:
    """Captured values become bounded attribute text."""

    def test_string_kept(self) -> None:
        """Strings are not JSON-quoted."""
        assert "Error: nope" == json_text("Error: nope")

    def test_structures_as_json(self) -> None:
        """Dicts and lists become JSON, non-ASCII kept."""
        assert {"city": "Zürich", "n": [1, 2]} == json.loads(json_text({"city": "Zürich", "n": [1, 2]}))
        assert "Zürich" in json_text({"city": "Zürich"})

    def test_clipped(self) -> None:
        """Text over the limit is cut at the limit."""
        assert 10 == len(json_text(list(range(1000)), limit=10))
        assert MAX_ATTRIBUTE_CHARS == len(clip("x" * (MAX_ATTRIBUTE_CHARS + 1)))

    def test_output_messages_shape(self) -> None:
        """The final answer becomes one assistant message with a text part."""
        assert [{"role": "assistant", "parts": [{"type": "text", "content": '{"a": 1}'}], "finish_reason": "stop"}] == (
            json.loads(output_messages({"a": 1}))
        )


class TestCallArguments:
    """Decorated tools record their arguments by parameter name."""

    def test_bound_by_name(self) -> None:
        """Positional, keyword and defaulted-but-given arguments are named."""

        def f(a: int, b: int = 2, *rest: int, c: int = 3) -> None:
            pass

        assert {"a": 1, "b": 5, "rest": (6,), "c": 4} == call_arguments(signature_of(f), (1, 5, 6), {"c": 4})

    def test_mismatch_falls_back_to_raw(self) -> None:
        """A call that does not fit the signature is recorded raw."""

        def f(a: int) -> None:
            pass

        assert {"args": [1, 2], "kwargs": {}} == call_arguments(inspect.signature(f), (1, 2), {})

    def test_no_signature(self) -> None:
        """Without a signature the raw call is recorded."""
        assert {"args": [1], "kwargs": {"k": 2}} == call_arguments(None, (1,), {"k": 2})
