"""Session and user ids read from a trace (scorers.session_ids), per key convention and precedence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scorers.dialects import SESSION_KEYS, USER_KEYS
from scorers.errors import SessionConfigError
from scorers.normalise import normalise
from scorers.session_ids import DEFAULT_SESSION_KEYS, MAX_ID_CHARS, SessionKeys, id_value
from tests.support.spans import node, trace

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}


def _ids(root: dict[str, Any], *children: dict[str, Any], keys: SessionKeys = DEFAULT_SESSION_KEYS) -> tuple[Any, ...]:
    spans = trace(node("invoke_agent bot", {**AGENT, **root}, *(node("chat m", {**CHAT, **c}) for c in children)))
    run = normalise(spans, sessions=keys)
    return run.session_id, run.user_id


class TestConventions:
    """Every framework's own key gives the session or user id, on the root or on a child span."""

    @pytest.mark.parametrize(
        "key",
        [
            "gen_ai.conversation.id",  # OTel GenAI (Google ADK, PydanticAI)
            "session.id",  # OpenInference (using_session; LangChain thread_id/session_id/conversation_id)
            "langfuse.session.id",
            "traceloop.association.properties.session_id",
            "traceloop.association.properties.conversation_id",
            "traceloop.association.properties.thread_id",
            "traceloop.association.properties.chat_id",
            "ai.telemetry.metadata.sessionId",  # Vercel AI SDK experimental_telemetry.metadata
            "ai.telemetry.metadata.conversationId",
            "ai.telemetry.metadata.threadId",
            "ai.telemetry.metadata.chatId",
            "langsmith.metadata.thread_id",
            "langsmith.metadata.session_id",
            "langsmith.metadata.conversation_id",
        ],
    )
    def test_session_keys(self, key: str) -> None:
        assert key in SESSION_KEYS
        assert ("conv-7", None) == _ids({key: "conv-7"})
        assert ("conv-7", None) == _ids({}, {key: "conv-7"})

    @pytest.mark.parametrize(
        "key",
        [
            "user.id",
            "enduser.id",
            "langfuse.user.id",
            "traceloop.association.properties.user_id",
            "ai.telemetry.metadata.userId",
            "langsmith.metadata.user_id",
        ],
    )
    def test_user_keys(self, key: str) -> None:
        assert key in USER_KEYS
        assert (None, "u-1") == _ids({key: "u-1"})
        assert (None, "u-1") == _ids({}, {}, {key: "u-1"})

    def test_langsmith_project_is_no_session(self) -> None:
        """``langsmith.trace.session_id`` is LangSmith's tracing project, not a conversation."""
        assert (None, None) == _ids({"langsmith.trace.session_id": "proj-1"})

    def test_run_metadata_json(self) -> None:
        """The root's ``metadata`` JSON (OpenInference LangChain, PydanticAI run metadata) fills what keys lack."""
        meta = '{"thread_id": "t-1", "user_id": "alice", "langgraph_step": 1}'
        assert ("t-1", "alice") == _ids({"metadata": meta})
        assert ("s-9", "alice") == _ids({"metadata": meta, "session.id": "s-9"})
        assert (None, None) == _ids({"metadata": "not json {"})
        assert (None, None) == _ids({"metadata": '["user_id"]'})
        assert (None, None) == _ids({}, {"metadata": meta})  # a child's metadata is not the run's

    def test_no_keys(self) -> None:
        assert (None, None) == _ids({}, {})


class TestPrecedence:
    def test_root_before_earlier_spans(self) -> None:
        """The root's id wins even over a span that starts first (clock skew, a late root)."""
        spans = trace(
            node("invoke_agent bot", {**AGENT, "session.id": "root"}, node("chat m", {**CHAT, "session.id": "child"}))
        )
        root, child = spans
        early = replace(child, start_ns=root.start_ns - 5)
        assert "root" == normalise([early, root]).session_id

    def test_first_span_in_start_order(self) -> None:
        assert ("first", "u-first") == _ids(
            {}, {"session.id": "first", "user.id": "u-first"}, {"session.id": "second", "user.id": "u-second"}
        )

    def test_each_id_from_its_first_span(self) -> None:
        """The session from the root, the user from the first span carrying one."""
        assert ("s", "u") == _ids({"gen_ai.conversation.id": "s"}, {}, {"user.id": "u"}, {"user.id": "later"})

    def test_key_order_within_a_span(self) -> None:
        assert ("genai", None) == _ids({"session.id": "oi", "gen_ai.conversation.id": "genai"})

    def test_rootless_run_reads_its_spans(self) -> None:
        spans = trace(node("invoke_agent bot", AGENT, node("chat m", {**CHAT, "session.id": "s-1"})))
        assert "s-1" == normalise(spans[1:], complete=False).session_id


class TestValues:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("  abc  ", "abc"),
            (42, "42"),
            ("", None),
            ("   ", None),
            (True, None),
            (1.5, None),
            (["a"], None),
            ("x" * 1000, "x" * MAX_ID_CHARS),
        ],
    )
    def test_id_value(self, value: object, expected: str | None) -> None:
        assert expected == id_value(value)

    def test_blank_value_falls_through_to_the_next_key(self) -> None:
        assert ("next", None) == _ids({"gen_ai.conversation.id": " ", "session.id": "next"})


class TestUserKeys:
    """``sessions`` in vigil.yaml: the user's own keys, after the built-in ones; one-line errors."""

    def test_appended_after_builtins(self) -> None:
        keys = SessionKeys.from_mapping({"session_keys": ["app.conversation"], "user_keys": [" app.customer "]})
        assert (*SESSION_KEYS, "app.conversation") == keys.session
        assert (*USER_KEYS, "app.customer") == keys.user
        assert ("c-1", "k-1") == _ids({"app.conversation": "c-1"}, {"app.customer": "k-1"}, keys=keys)
        assert ("builtin", None) == _ids({"app.conversation": "c-1", "session.id": "builtin"}, keys=keys)

    def test_default_ignores_unknown_keys(self) -> None:
        assert (None, None) == _ids({"app.conversation": "c-1"})

    def test_empty_is_default(self) -> None:
        assert DEFAULT_SESSION_KEYS is SessionKeys.from_mapping(None)
        assert DEFAULT_SESSION_KEYS is SessionKeys.from_mapping({})

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            (["a"], "sessions: expected a mapping"),
            ({"session_key": ["a"]}, "sessions: unknown key 'session_key' (expected session_keys, user_keys)"),
            ({"session_keys": "a"}, "sessions.session_keys: expected a list of attribute keys (non-empty strings)"),
            ({"user_keys": ["a", ""]}, "sessions.user_keys: expected a list of attribute keys (non-empty strings)"),
            ({"user_keys": [f"k{i}" for i in range(33)]}, "sessions.user_keys: at most 32 keys"),
        ],
    )
    def test_bad_config_is_one_line(self, data: Any, message: str) -> None:
        with pytest.raises(SessionConfigError) as err:
            SessionKeys.from_mapping(data)
        assert message == str(err.value)
