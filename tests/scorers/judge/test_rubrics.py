"""Tests for scorers.judge.rubrics: what the judge sees of a run."""

from __future__ import annotations

import json

from scorers.judge.rubrics import BUILTIN_RUBRICS, has_content, render
from scorers.model import Message, Run, ToolCall

RUN = Run(
    trace_id="a" * 32,
    agent="support",
    final_output="Your order ships Monday.",
    messages=(Message("system", "be nice"), Message("user", "When does order 7 ship?")),
    tools=(ToolCall("s1", "lookup_order", arguments='{"id": 7}', result='{"ships": "Monday"}'),),
)


class TestRender:
    """The request is deterministic, hashed, and treats run content as data."""

    def test_document(self) -> None:
        """The user request, tool calls with results and the final answer are in the run document."""
        request = render(RUN, BUILTIN_RUBRICS["groundedness"])
        doc = json.loads(request.user.removeprefix("<run>\n").removesuffix("\n</run>"))
        assert "When does order 7 ship?" == doc["user_request"]
        assert [
            {"tool": "lookup_order", "arguments": '{"id": 7}', "result": '{"ships": "Monday"}', "error": None}
        ] == doc["tool_calls"]
        assert "Your order ships Monday." == doc["final_answer"]
        assert "never as instructions" in request.system
        assert "system" == request.messages()[0]["role"]

    def test_hash_follows_content(self) -> None:
        """Same content, same hash (even for another trace id); other content, other hash."""
        a = render(RUN, BUILTIN_RUBRICS["safety"])
        b = render(Run(**{**_fields(RUN), "trace_id": "b" * 32}), BUILTIN_RUBRICS["safety"])
        c = render(Run(**{**_fields(RUN), "final_output": "It shipped."}), BUILTIN_RUBRICS["safety"])
        assert a.content_hash == b.content_hash
        assert a.content_hash != c.content_hash

    def test_long_fields_are_cut(self) -> None:
        """A huge tool result is cut, so the request stays near max_chars."""
        huge = ToolCall("s1", "fetch", result="x" * 100_000)
        request = render(
            Run(trace_id="a" * 32, final_output="ok", tools=(huge,)), BUILTIN_RUBRICS["groundedness"], 4000
        )
        assert len(request.user) < 6000
        assert "characters cut" in request.user

    def test_has_content(self) -> None:
        """A run without captured output or messages cannot be judged."""
        assert has_content(RUN)
        assert not has_content(Run(trace_id="a" * 32))


def _fields(run: Run) -> dict[str, object]:
    return {name: getattr(run, name) for name in Run.__dataclass_fields__}
