"""The compiled hot loops of the run-details form (``scorers/_redact_fast.c``) against their Python twins:
``stored_attributes`` (review_queue.details._attributes) and ``genai_pairs`` (the conversation's GenAI
messages), on generated values and on the heavy-content workload's runs, byte for byte."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from review_queue import details
from scorers.dialects import genai
from scorers.dialects.base import MAX_TEXT, as_text
from scorers.model import ScoredRun
from scorers.redact import Redactor

pytestmark = pytest.mark.skipif(details._STORED is None, reason="never: the suite is installed with a C compiler")


def test_the_compiled_loops_are_built() -> None:
    """The extension holds both loops wherever the suite runs (CI installs with a C compiler)."""
    assert details._STORED is not None
    assert genai._pairs is not genai._pairs_py


# Values dense in what the attribute loop decides on: secrets, NUL, long and short texts, the bounds of
# 64-bit integers, non-finite floats, booleans, bytes, nested lists and maps, tuples.
_TEXT_PIECES = st.sampled_from(
    ["a", " ", "bob@example.com", "sk-proj-abcdefghijklmnopqrstuvwx", "+49 151 1234 5678", "4111 1111 1111 1111",
     "\x00", "é", "٣", "x" * 120, "call_5f3a9b2c", "[REDACTED:email]", "\n"]
)  # fmt: skip
_TEXTS = st.one_of(st.lists(_TEXT_PIECES, max_size=40).map("".join), st.text(max_size=20))
_SCALARS = st.one_of(
    _TEXTS,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 0, 1, True, False, None]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=4),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=70), st.tuples(inner, inner), st.dictionaries(_TEXTS, inner, max_size=3)
    ),
    max_leaves=80,
)
_KEYS = st.one_of(
    st.sampled_from(["gen_ai.tool.name", "n", "", "user_password", "x-api_key", "mail bob@example.com", "k" * 300]),
    st.text(max_size=12),
)
_ATTRS = st.dictionaries(_KEYS, _VALUES, max_size=12) | st.dictionaries(
    st.sampled_from([f"k{i}" for i in range(140)] + ["", "password"]), st.integers(), min_size=120, max_size=140
)


def _stored(attrs: dict[str, Any], texts: details.Texts, *, compiled: bool) -> tuple[bytes, int]:
    mapping, dropped = details._attributes(attrs, texts) if compiled else details._attributes_py(attrs, texts)
    return orjson.dumps(mapping, option=orjson.OPT_NON_STR_KEYS), dropped


@cache
def _texts(custom: bool) -> tuple[details.Texts, details.Texts]:
    """One memory each for the compiled and the Python loop, kept across examples (as a writer keeps its own)."""
    redactor = Redactor(custom={"ticket": r"TICKET-\d+"}) if custom else Redactor()
    return details.Texts(redactor), details.Texts(redactor)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(_ATTRS, min_size=1, max_size=4), st.booleans())
def test_compiled_attributes_equal_the_python_loop(spans: list[dict[str, Any]], custom: bool) -> None:
    """Span after span through one memory each, the compiled loop stores what the Python loop stores:
    the same keys dropped or redacted, the same values cut, redacted, stringified, the same count dropped."""
    fast, slow = _texts(custom)
    for attrs in spans:
        assert _stored(attrs, slow, compiled=False) == _stored(attrs, fast, compiled=True)


def test_compiled_attributes_give_the_mapping_itself_when_nothing_changes() -> None:
    """Nothing to change: the span's own mapping, not a copy; a value that changes: a new mapping."""
    texts = details.Texts(Redactor())
    plain: dict[str, Any] = {"gen_ai.tool.name": "search", "n": 3, "tags": ["a", "b"], "x": 1.5, "ok": True}
    assert (plain, 0) == details._attributes(plain, texts)
    assert plain is details._attributes(plain, texts)[0]
    inf = {**plain, "x": math.inf, "big": 2**64}
    stored, dropped = details._attributes(inf, texts)
    assert ({**plain, "x": "inf", "big": str(2**64)}, 0) == (stored, dropped)
    assert stored is not inf


def test_an_empty_key_is_dropped_the_first_time_as_the_python_loop_does() -> None:
    """The Python loop drops an empty key when its memory first meets it (``or _DROPPED``) and keeps it once
    remembered; the compiled loop follows it step by step."""
    fast, slow = details.Texts(Redactor()), details.Texts(Redactor())
    for _ in range(2):
        assert _stored({"": "v", "a": 1}, slow, compiled=False) == _stored({"": "v", "a": 1}, fast, compiled=True)


# GenAI messages: the parts the compiled reader reads (text, tool calls, their responses) and the shapes it
# hands to message_of (chat "content", non-dict parts, other part types, str subclasses, missing roles).
class _Str(str):
    pass


_PART_VALUES = st.one_of(
    st.text(max_size=8),
    st.none(),
    st.integers(),
    st.just("x" * (MAX_TEXT + 5)),
    st.dictionaries(st.sampled_from(["q", "n"]), st.one_of(st.integers(), st.floats(), st.text(max_size=3))),
    st.builds(_Str, st.text(max_size=3)),
)
_PARTS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "tool_call", "tool_call_response", "image", 5, None]),
        "content": _PART_VALUES,
        "name": _PART_VALUES,
        "arguments": _PART_VALUES,
        "response": _PART_VALUES,
        "result": _PART_VALUES,
    },
)
_MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "role": st.one_of(st.sampled_from(["user", "assistant", "tool", ""]), st.none(), st.builds(_Str, st.just("x"))),
        "parts": st.one_of(st.lists(st.one_of(_PARTS, st.text(max_size=3)), max_size=4), st.text(max_size=3)),
        "content": st.one_of(st.text(max_size=5), st.lists(st.fixed_dictionaries({"text": st.text(max_size=4)}))),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_MESSAGES, st.integers(), st.text(max_size=3)), max_size=8))
def test_compiled_genai_pairs_equal_message_of(items: list[Any]) -> None:
    """Every message the compiled reader reads gives what ``message_of`` gives, in order; what it cannot
    read it hands to ``message_of``."""
    assert genai._pairs_py(items, genai.message_of, as_text, MAX_TEXT) == genai._pairs(
        items, genai.message_of, as_text, MAX_TEXT
    )


def _heavy(tmp: Path) -> list[ScoredRun]:
    """60 runs of the heavy-content workload, decoded from their OTLP bodies and scored by ``vigil run``'s pipeline."""
    from prometheus_client import CollectorRegistry

    from collector.model import Span
    from collector.otlp import decode_protobuf
    from scorers.assemble import ClosedTrace
    from vigil.bench.heavy import heavy_bodies, heavy_runs
    from vigil.bench.pipeline import _settings
    from vigil.run import build

    traces: dict[str, list[Span]] = {}
    for body in heavy_bodies(heavy_runs(60)):
        for batch in decode_protobuf(body).batches:
            traces.setdefault(batch.trace_id, []).extend(batch.spans)
    pipeline = build(_settings(tmp / "heavy.db"), CollectorRegistry()).worker._pipeline
    return [pipeline.process(ClosedTrace(k, tuple(v), True)) for k, v in traces.items()]


def test_heavy_workload_details_are_byte_identical_to_the_python_loops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On the heavy-content workload's runs (1-2 KB of messages per model call, tool arguments and results,
    e-mails and phone numbers to redact), every stored body is the one the Python loops give."""
    runs = _heavy(tmp_path)
    redactor = Redactor()
    texts = details.Texts(redactor)
    compiled = [details.details_row(s, redactor, None, 0.0, texts) for s in runs]
    monkeypatch.setattr(details, "_STORED", None)
    monkeypatch.setattr(genai, "_pairs", genai._pairs_py)
    texts = details.Texts(redactor)
    python = [details.details_row(s, redactor, None, 0.0, texts) for s in runs]
    assert len(runs) == 60
    assert any("[REDACTED:email]" in repr(details.decode(r["body"])) for r in python)
    assert [r["body"] for r in python] == [r["body"] for r in compiled]
    assert [r["final_output"] for r in python] == [r["final_output"] for r in compiled]


def test_stored_bodies_hold_their_own_length_not_the_compression_bound(tmp_path: Path) -> None:
    """A writer's batch holds up to 500 rows: each body must cost its compressed size, not the ~36 KB
    python-zstandard allocates for it (the compression bound, of which it shortens only the visible size)."""
    import tracemalloc

    runs = _heavy(tmp_path)[:20]
    redactor = Redactor()
    texts = details.Texts(redactor)
    details.details_row(runs[0], redactor, None, 0.0, texts)  # the caches filled
    tracemalloc.start()
    try:
        bodies = [details.details_row(s, redactor, None, 0.0, texts)["body"] for s in runs]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < sum(len(b) for b in bodies) + 64 * 1024 * 2
    assert max(len(b) for b in bodies) < 16 * 1024  # what makes the bound matter: JSON 5 to 10 times the blob


def test_conversation_shows_each_message_once_as_histories_grow_are_rewritten_and_cut() -> None:
    """Each model call resends the history: what it adds is shown; a rewritten or cut history shows only
    messages never shown before (the prefix each call shares with the previous one, found by a slice)."""
    from scorers.model import Run, Step, StepKind

    def call(i: int, said: list[str]) -> Step:
        messages = [{"role": "user", "parts": [{"type": "text", "content": s}]} for s in said]
        return Step(
            f"{i:016x}",
            None,
            "chat",
            StepKind.LLM,
            i,
            i + 1,
            attributes={"gen_ai.input.messages": orjson.dumps(messages).decode()},
        )

    histories = [["a"], ["a", "b"], ["a", "b", "c"], ["a", "x"], ["a", "x", "d"], ["b", "c", "e"], ["b", "c", "e"]]
    run = Run("0" * 31 + "1", steps=tuple(call(i, h) for i, h in enumerate(histories)))
    shown = [e["content"] for e in details._conversation(run, details.Texts(Redactor())) if e["kind"] == "message"]
    assert ["a", "b", "c", "x", "d", "e"] == shown


@pytest.mark.parametrize("compiled", [True, False])
def test_a_list_at_depth_three_is_its_string_however_warm_the_cache(compiled: bool) -> None:
    """Issue 42 (4): the "every key and value already known clean" shortcut skipped the rule that
    stores a list at depth 3 as its string, so a warm cache stored ['v'] where a cold one stored "['v']"."""
    attrs: dict[str, Any] = {"a": [{"x": "v", "b": {"c": ["v"]}}]}
    attributes = details._attributes if compiled else details._attributes_py
    texts = details.Texts(Redactor())
    cold = attributes(attrs, texts)
    warm = attributes(attrs, texts)
    assert cold == warm == ({"a": [{"x": "v", "b": {"c": "['v']"}}]}, 0)


@pytest.mark.parametrize(
    ("fields", "ended"),
    [
        ({}, None),
        ({"hit_max_iterations": True}, "at its iteration cap"),
        ({"errored": True}, "with an error"),
        ({"safety_blocked": True}, None),  # a blocked run's refusal is what it answered
    ],
)
def test_the_last_output_of_a_run_that_ended_without_an_answer_is_not_its_final_answer(
    fields: dict[str, bool], ended: str | None
) -> None:
    """A run cut at its iteration cap (or errored) whose last assistant message stands as its
    final output: the conversation marks that message as where the run ended, never "final"."""
    from scorers.model import Message, Run

    said = (Message("user", "Where is my order?"), Message("assistant", "Calling lookup_order(42)"))
    run = Run("0" * 31 + "2", messages=said, final_output="Calling lookup_order(42)", **fields)
    [last] = [e for e in details._conversation(run, details.Texts(Redactor())) if e.get("role") == "assistant"]
    assert (last.get("final", False), last.get("ended")) == (ended is None, ended)
