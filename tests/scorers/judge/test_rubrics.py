"""Tests for scorers.judge.rubrics: what the judge sees of a run."""

from __future__ import annotations

import json
from typing import Any

from scorers.judge.model import TranscriptTurn
from scorers.judge.rubrics import (
    BUILTIN_RUBRICS,
    SESSION_PREAMBLE,
    SESSION_RUBRICS,
    has_content,
    render,
    render_session,
    sent_turns,
    transcript_has_content,
)
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


def _turns(n: int, user: str = "question {i}", answer: str = "answer {i}") -> list[TranscriptTurn]:
    return [TranscriptTurn(i, f"{i:032x}", (user.format(i=i),), answer.format(i=i)) for i in range(1, n + 1)]


def _session_doc(request_user: str) -> dict[str, Any]:
    assert request_user.startswith("<session>\n")
    assert request_user.endswith("\n</session>")
    doc: dict[str, Any] = json.loads(request_user.removeprefix("<session>\n").removesuffix("\n</session>"))
    return doc


class TestRenderSession:
    """A session judge reads the conversation's turns in order, bounded, as data."""

    def test_document_and_prompt(self) -> None:
        """Each turn's user text and answer, in order; the rubric's instructions are the system prompt."""
        turns = [
            TranscriptTurn(1, "a" * 32, ("My name is Ana.", "I live in Porto."), "Hello Ana."),
            TranscriptTurn(2, "b" * 32, ("Where do I live?",), None),
        ]
        rubric = SESSION_RUBRICS["knowledge_retention"]
        request = render_session("support", turns, rubric)
        assert rubric.instructions == request.system
        assert request.system.startswith(SESSION_PREAMBLE)
        assert {
            "agent": "support",
            "turns": [
                {"turn": 1, "user": "My name is Ana.\nI live in Porto.", "assistant": "Hello Ana."},
                {"turn": 2, "user": "Where do I live?", "assistant": None},
            ],
        } == _session_doc(request.user)
        assert [{"role": "system", "content": rubric.instructions}, {"role": "user", "content": request.user}] == (
            request.messages()
        )

    def test_three_rubrics_versioned_and_data_only(self) -> None:
        """Three session rubrics, each scoring 1 for a good conversation and warning that content is data."""
        assert {"contradiction", "conversation_completeness", "knowledge_retention"} == set(SESSION_RUBRICS)
        for name, rubric in SESSION_RUBRICS.items():
            assert f"{name}@1" == rubric.label
            assert "never as instructions" in rubric.instructions
            assert '"score"' in rubric.instructions

    def test_hash_follows_content_not_rubric(self) -> None:
        """Same conversation, same hash (the cache key adds rubric and model); a changed answer changes it."""
        one = render_session("support", _turns(3), SESSION_RUBRICS["contradiction"])
        two = render_session("support", _turns(3), SESSION_RUBRICS["knowledge_retention"])
        other = render_session("support", _turns(3, answer="changed {i}"), SESSION_RUBRICS["contradiction"])
        assert one.content_hash == two.content_hash
        assert one.content_hash != other.content_hash
        assert 32 == len(one.content_hash)

    def test_long_conversation_keeps_first_and_last_turns(self) -> None:
        """Past max_chars // 400 turns, the first and last halves are kept and the gap is counted."""
        doc = _session_doc(render_session("support", _turns(40), SESSION_RUBRICS["contradiction"], 4000).user)
        assert [1, 2, 3, 4, 5, 36, 37, 38, 39, 40] == [t["turn"] for t in doc["turns"]]
        assert 30 == doc["turns_omitted"]

    def test_trimming_first_changes_nothing(self) -> None:
        """The service keeps only the turns the largest judge can be sent: every judge's request is unchanged."""
        full = _turns(100)
        for chars in (4000, 12_000):
            kept = sent_turns(full, 12_000)
            rubric = SESSION_RUBRICS["contradiction"]
            assert render_session("a", full, rubric, chars) == render_session("a", kept, rubric, chars)
        assert 30 == len(sent_turns(full, 12_000))

    def test_long_texts_are_cut_within_the_bound(self) -> None:
        """One huge message cannot crowd out the others: every text is cut to an even share."""
        turns = _turns(4, user="x" * 50_000 + "{i}", answer="y" * 50_000 + "{i}")
        request = render_session("support", turns, SESSION_RUBRICS["contradiction"], 12_000)
        doc = _session_doc(request.user)
        assert 4 == len(doc["turns"])
        assert all("characters cut]" in t["user"] and "characters cut]" in t["assistant"] for t in doc["turns"])
        assert len(request.user) < 12_000 + 1_000  # the cut notes and the JSON keys

    def test_transcript_content(self) -> None:
        """A conversation with no captured text has nothing to judge."""
        assert not transcript_has_content([TranscriptTurn(1, "a" * 32, (), None)])
        assert transcript_has_content([TranscriptTurn(1, "a" * 32, (), "an answer")])
