"""Unit tests of review_queue.sessions: word sets, the re-ask measure, the request-for-a-human
vocabulary, a turn's stored features and the session signals (no database)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from review_queue.sessions import (
    DEFAULT_HUMAN_PHRASES,
    SessionConfig,
    Turn,
    _call_user,
    _last_user,
    _phrase_in,
    human_phrase,
    jaccard,
    session_signals,
    turn_features,
    word_set,
)
from scorers import content
from scorers.model import Message, Run, Step, StepKind


def test_word_set_lowercases_drops_punctuation_short_and_stop_words() -> None:
    assert frozenset({"how", "reset", "password"}) == word_set("How do I reset my PASSWORD?!")


@pytest.mark.parametrize(
    ("first", "second", "reask"),
    [
        ("How do I reset my password?", "how do I reset my password", True),  # a repeat
        ("How do I reset my password?", "How can I reset my password??", True),  # a rephrase
        ("What's the refund policy for damaged items", "refund policy for items that arrived damaged?", True),
        ("How do I reset my password?", "Thanks, that worked!", False),
        ("Book a flight to Paris", "Book a hotel in Rome", False),
    ],
)
def test_reask_measure_is_jaccard_of_word_sets(first: str, second: str, reask: bool) -> None:
    assert reask == (jaccard(word_set(first), word_set(second)) >= SessionConfig().reask_threshold)


def test_jaccard_of_nothing_is_zero() -> None:
    assert 0.0 == jaccard(frozenset(), frozenset())


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("Can I TALK to a human, please?", "talk to a human"),
        ("I want a live agent now", "live agent"),
        ("this is useless. customer service please", "customer service"),
        ("what does a humane society do", None),
        ("talk to a humanoid robot", None),  # word boundaries
    ],
)
def test_human_phrase(text: str, phrase: str | None) -> None:
    assert phrase == human_phrase(text, DEFAULT_HUMAN_PHRASES)


def test_configured_phrases_extend_the_vocabulary_and_bad_config_is_one_line() -> None:
    config = SessionConfig.from_mapping({"human_phrases": ["Get me your BOSS!"], "reask_threshold": 0.8})
    assert "get me your boss" == human_phrase("please get me your boss now", config.human_phrases)
    assert "live agent" in config.human_phrases
    assert 0.8 == config.reask_threshold
    with pytest.raises(ValueError, match="reask_threshold must be a number in"):
        SessionConfig.from_mapping({"reask_threshold": 2})
    with pytest.raises(ValueError, match=r"unknown keys \['idle'\]"):
        SessionConfig.from_mapping({"idle": 3})


def test_turn_features_hash_the_last_user_message_and_name_the_spans() -> None:
    root = Step("a" * 16, None, "invoke_agent", StepKind.AGENT)
    llm = Step("b" * 16, root.span_id, "chat", StepKind.LLM)
    run = Run(
        "1" * 32,
        session_id="s",
        steps=(root, llm),
        messages=(Message("user", "hi there"), Message("assistant", "hello"), Message("user", "speak to a human")),
        final_output="ok",
    )
    feats = turn_features(run, SessionConfig())
    assert feats is not None
    assert {"human", "repair", "span", "root", "answered", "terms"} == set(feats)
    assert (["b" * 16, "chat"], ["a" * 16, "invoke_agent"], "speak to a human", True) == (
        feats["span"], feats["root"], feats["human"], feats["answered"],
    )  # fmt: skip
    assert 2 == len(feats["terms"])  # "speak", "human" ("to", "a" dropped); hashed, no text
    assert all(isinstance(t, int) for t in feats["terms"])
    assert turn_features(Run("2" * 32), SessionConfig()) is None  # no session id: a session of one


def _turn(position: int, user: str, *, answered: bool = True, status: str = "ok", down: bool = False) -> Turn:
    feats = {
        "terms": sorted(hash(w) for w in word_set(user)),
        "human": human_phrase(user, DEFAULT_HUMAN_PHRASES),
        "span": [f"llm{position}", "chat"],
        "root": [f"root{position}", "agent"],
        "answered": answered,
    }
    return Turn(f"t{position}", position, status, True, down, feats)


def test_session_signals_name_turn_and_span() -> None:
    turns = [
        _turn(1, "How do I reset my password?"),
        _turn(2, "How can I reset my password?", down=True),
        _turn(3, "let me speak to a person", status="error"),
    ]
    signals = session_signals(turns, 0.6, closed=True)
    assert [
        ("reask", "t2", 2, "llm2", "user_message"),
        ("thumbs_down", "t2", 2, "root2", "feedback"),
        ("human_request", "t3", 3, "llm3", "user_message"),
        ("abandoned", "t3", 3, "root3", "status"),
    ] == [(s["signal"], s["trace_id"], s["turn"], s["span_id"], s["source"]) for s in signals]
    assert "repeats turn 1 (Jaccard 1.00)" == signals[0]["value"]  # "do" and "can" are stop words
    assert ["reask", "thumbs_down", "human_request"] == [
        s["signal"] for s in session_signals(turns, 0.6, closed=False)
    ]  # abandonment only at close


def test_no_abandonment_after_a_good_last_turn_and_reask_needs_an_answer() -> None:
    turns = [_turn(1, "reset my password", answered=False), _turn(2, "reset my password")]
    assert [] == session_signals(turns, 0.6, closed=True)
    cut = [Turn("t1", 1, "ok", False, False, None)]  # cut off (incomplete), no features stored
    assert [("abandoned", "incomplete", "")] == [
        (s["signal"], s["value"], s["span_id"]) for s in session_signals(cut, 0.6, closed=True)
    ]


def _repair_turn(position: int, user: str) -> Turn:
    feats = {
        "terms": sorted(hash(w) for w in word_set(user)),
        "human": None,
        "repair": human_phrase(user, SessionConfig().reask_markers),
        "span": ["s", "chat"],
        "root": ["r", "agent"],
        "answered": True,
    }
    return Turn(f"t{position}", position, "ok", True, False, feats)


def test_a_repair_marker_with_a_shared_word_is_a_rephrase() -> None:
    asked = _repair_turn(1, "What is the weather in Paris?")
    rephrased = _repair_turn(2, "Sorry, so how warm is it in Paris right now?")
    unrelated = _repair_turn(2, "Sorry, I have to go")
    plain = _repair_turn(2, "How warm is it in Paris right now?")  # no marker: a follow-up, not a re-ask
    assert ["rephrases turn 1 (repair marker 'sorry')"] == [
        s["value"] for s in session_signals([asked, rephrased], 0.6, closed=False)
    ]
    assert [] == session_signals([asked, unrelated], 0.6, closed=False)
    assert [] == session_signals([asked, plain], 0.6, closed=False)


@given(
    st.lists(
        st.sampled_from(["talk", "to", "a", "human", "agent", "real", "person", "sorry", "again", "x"]), max_size=12
    ),
    st.lists(
        st.sampled_from(["talk to a human", "human", "real person", "a human agent", "sorry", "again"]), max_size=5
    ),
)
def test_the_compiled_phrase_pass_names_what_the_plain_scan_names(words: list[str], phrases: list[str]) -> None:
    padded = f" {' '.join(words)} "
    plain = next((p for p in phrases if f" {p} " in padded), None)
    assert plain == _phrase_in(padded, phrases)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "parts": [{"type": "text", "content": "be brief"}]}],
        [
            {"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]},
            {"role": "assistant", "parts": [{"type": "tool_call", "name": "get_weather", "arguments": {}}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "response": "sunny"}]},
        ],
        [
            {"role": "User", "content": "old"},
            {"role": "assistant", "content": "a"},
            {"role": "human", "content": "new"},
        ],
        [{"role": 3}, {"parts": []}, "text"],
        [{"role": "user", "content": "hi"}, {"role": "USER"}, {"role": ""}],
    ],
)
def test_the_genai_fast_read_finds_what_the_adapters_find(messages: list[Any]) -> None:
    attributes = {"gen_ai.input.messages": orjson.dumps(messages).decode(), "gen_ai.output.messages": "[]"}
    found = content.messages_of(attributes)
    assert (bool(found), _last_user(found) if found else None) == _call_user(attributes)
