"""The demo fleet's plan, ground truth and scripted agents (no Vigil; see tests/e2e/test_demo.py).

The scenario tests play every scripted scenario with the real agent loop against a real
:class:`FakeOpenAI`, with spans going to an in-memory exporter, and check three things
agree: the plan's ground truth, what the agent observed, and what the fake server served.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.demo.agent import DemoAgent, latency_client
from collector.demo.fakeopenai import HEADER, MARKER, ContentFilterTurn, ErrorTurn, FakeOpenAI, TextTurn, ToolCallTurn
from collector.demo.fleet import DemoFleet, DemoRun, openai_capture_content, session_truths
from collector.demo.plan import (
    AGENTS,
    DECK,
    MIX,
    VARIANTS,
    Act,
    Fault,
    Kind,
    RunPlan,
    Scenario,
    answered,
    conversations,
    expected,
    failed,
    plan_runs,
    scenario,
    scenarios,
    session_truth,
)
from collector.demo.progress import FleetStats
from collector.demo.world import TOOLS, lookup
from collector.instrument.content import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
from collector.otlp import decode_protobuf
from review_queue.details import build_details
from review_queue.sessions import SessionConfig, Turn, session_signals, turn_features
from scorers.model import Message, Run, ScoredRun
from scorers.normalise import normalise
from scorers.redact import Redactor

SEED = 11
FLAGS = ("hit_max_iterations", "safety_blocked", "errored")


def of_kind(kind: Kind) -> list[Scenario]:
    """Scenarios of ``kind`` for :data:`SEED`: every variant of every agent, each asking one of the agent's
    questions (in turn, so the kinds together cover them all). :func:`scenarios` has every pairing."""
    k = list(Kind).index(kind)
    return [
        scenario(a.name, kind, v, SEED, a.intents()[(v + k) % len(a.intents())].name)
        for a in AGENTS
        for v in range(VARIANTS)
    ]


class TestMix:
    """The sequence of runs: proportions, determinism, tags."""

    def test_each_deck_has_the_configured_mix(self) -> None:
        """Every block of 100 runs from the start holds exactly MIX of each kind."""
        plans = plan_runs(SEED, 3 * DECK)
        for start in range(0, len(plans), DECK):
            assert dict(MIX) == dict(Counter(p.scenario.kind for p in plans[start : start + DECK]))

    def test_mostly_good(self) -> None:
        """About three runs in four are good ones."""
        assert 0.75 == MIX[Kind.GOOD] / DECK

    def test_partial_deck_is_close(self) -> None:
        """150 runs (one and a half decks) are within a few runs of the proportions, every kind present."""
        counts = Counter(p.scenario.kind for p in plan_runs(SEED, 150))
        assert set(Kind) == set(counts)
        for kind, per_deck in MIX.items():
            assert abs(1.5 * per_deck - counts[kind]) <= 0.5 * per_deck + 1

    def test_deterministic_per_seed(self) -> None:
        """The same seed gives the same runs; another seed another order."""
        names = [p.scenario.name for p in plan_runs(SEED, 200)]
        assert names == [p.scenario.name for p in plan_runs(SEED, 200)]
        assert names != [p.scenario.name for p in plan_runs(SEED + 1, 200)]

    def test_agents_follow_weights(self) -> None:
        """Each agent's share of 2000 runs is within 4 points of its weight."""
        counts = Counter(p.scenario.agent.name for p in plan_runs(SEED, 2000))
        total = sum(a.weight for a in AGENTS)
        for agent in AGENTS:
            assert abs(agent.weight / total - counts[agent.name] / 2000) < 0.04

    def test_tags_unique_and_markers_parse(self) -> None:
        """Every run has its own tag; a lone run's marker names its scenario and tag, a conversation's
        names every turn's scenario and the conversation (its session id)."""
        plans = plan_runs(SEED, 300)
        assert 300 == len({p.tag for p in plans})
        lone = RunPlan(0, "t0", plans[0].scenario)
        assert f"[[scenario:{lone.scenario.name}#t0]]" == lone.marker
        assert {HEADER: f"{lone.scenario.name}#t0"} == lone.header  # what the agents send, out of band
        assert ("t0", "t0") == (lone.session_id, lone.user_message.removesuffix(lone.scenario.prompt) or "t0")
        first = plans[0]
        turns = [p for p in plans if p.conversation == first.conversation]
        found = MARKER.fullmatch(first.marker)
        assert found is not None
        assert ([p.scenario.name for p in turns], first.conversation) == (found.group(1).split(","), found.group(2))
        assert {first.marker} == {p.marker for p in turns}
        assert {HEADER: f"{found.group(1)}#{found.group(2)}"} == first.header


class TestGroundTruth:
    """:func:`expected` per kind, over every variant of every agent."""

    def test_good_runs_are_clean(self) -> None:
        """Good, slow and thumbs-down runs raise no flag, fail no tool, and stay efficient."""
        for s in of_kind(Kind.GOOD) + of_kind(Kind.SLOW) + of_kind(Kind.THUMBS_DOWN):
            truth = expected(s)
            assert (False, False, False) == tuple(truth[f] for f in FLAGS)
            assert 0 == truth["tool_errors"]
            assert s.agent.optimal_steps / truth["llm_calls"] >= 0.3

    def test_slow_and_feedback(self) -> None:
        """Slow runs spend seconds in at least one tool; thumbs-down runs carry the feedback."""
        assert all(s.slow_s >= 4 and expected(s)["tool_calls"] >= 1 for s in of_kind(Kind.SLOW))
        assert {"thumbs_down"} == {expected(s)["feedback"] for s in of_kind(Kind.THUMBS_DOWN)}
        assert {None} == {expected(s)["feedback"] for s in of_kind(Kind.GOOD)}

    def test_inefficient_under_cap(self) -> None:
        """Inefficient runs have step efficiency below 0.3 and stay under the cap."""
        for s in of_kind(Kind.INEFFICIENT):
            truth = expected(s)
            assert s.agent.optimal_steps / truth["llm_calls"] < 0.3
            assert truth["llm_calls"] < s.agent.max_iterations
            assert not truth["hit_max_iterations"]

    def test_looping_hits_cap(self) -> None:
        """Looping runs make max_iterations - 1 calls, hit the cap, and raise only when told to."""
        loops = of_kind(Kind.LOOPING)
        assert {True, False} == {s.raise_on_max for s in loops}
        for s in loops:
            truth = expected(s)
            assert (s.agent.max_iterations - 1, True) == (truth["llm_calls"], truth["hit_max_iterations"])
            assert (truth["llm_calls"], s.raise_on_max) == (truth["tool_calls"], truth["errored"])

    def test_blocks(self) -> None:
        """Content-filtered and guardrail runs are blocked; an input guardrail stops before the model."""
        for s in of_kind(Kind.CONTENT_FILTER) + of_kind(Kind.GUARDRAIL):
            truth = expected(s)
            assert (False, True, False) == tuple(truth[f] for f in FLAGS)
            if s.guardrail == "input":
                assert 0 == truth["llm_calls"] == truth["input_tokens"]
        assert {"input", "output"} <= {s.guardrail for s in of_kind(Kind.GUARDRAIL)}

    def test_tool_failures_recover(self) -> None:
        """Tool-failure runs have one failed tool call and still answer."""
        for s in of_kind(Kind.TOOL_FAILURE):
            truth = expected(s)
            assert (1, False) == (truth["tool_errors"], truth["errored"])

    def test_errors_reach_the_caller(self) -> None:
        """Error runs raise: either the API fails (no tokens for that call) or a tool crashes."""
        for s in of_kind(Kind.ERROR):
            truth = expected(s)
            assert truth["errored"]
            assert isinstance(s.turns[-1], ErrorTurn) or (s.fault is Fault.FATAL and truth["tool_errors"] == 1)

    def test_tokens_follow_the_fake(self) -> None:
        """Tokens are the fake server's 100 + 10 i / 20 + 5 i per answered turn."""
        s = scenario("support", Kind.GOOD, 0, SEED)
        n = expected(s)["llm_calls"]
        assert sum(100 + 10 * i for i in range(n)) == expected(s)["input_tokens"]
        assert sum(20 + 5 * i for i in range(n)) == expected(s)["output_tokens"]

    def test_scripts_match_kind(self) -> None:
        """The scripted turns end as the kind says."""
        ends = {Kind.CONTENT_FILTER: ContentFilterTurn, Kind.LOOPING: ToolCallTurn, Kind.GOOD: TextTurn}
        for kind, turn in ends.items():
            assert all(isinstance(s.turns[-1], turn) for s in of_kind(kind))
        assert all(len(s.turns) == 1 for s in of_kind(Kind.LOOPING))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    """A fake model with every scenario of :data:`SEED` registered."""
    with FakeOpenAI({s.name: s.turns for s in scenarios(SEED)}) as server:
        yield server


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """An in-memory exporter on a private tracer provider."""
    return InMemorySpanExporter()


def agent_for(fake: FakeOpenAI, exporter: InMemorySpanExporter) -> DemoAgent:
    """A demo agent with no simulated latency, its spans going to ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return DemoAgent(latency_client(fake.base_url, 0.0), pace=0.0, tracer_provider=provider)


class TestScenariosPlayed:
    """Every scenario played by the real agent loop against the fake model agrees with its ground truth."""

    @pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
    def test_observed_equals_expected(self, kind: Kind, fake: FakeOpenAI, spans: InMemorySpanExporter) -> None:
        """Agent tally, fake-server log and span tree match the plan for every variant of every agent."""
        agent = agent_for(fake, spans)
        for i, s in enumerate(of_kind(kind)):
            plan = RunPlan(i, f"t{kind.value}{i}", s)
            seen = agent.run(plan)
            truth = expected(s)
            observed = {k: getattr(seen, k) for k in ("llm_calls", "tool_calls", "tool_errors", *FLAGS)}
            assert {k: truth[k] for k in observed} == observed, s.name
            served = fake.served(f"{s.name}#{plan.tag}")
            assert truth["llm_calls"] == len(served), s.name
            tokens = sum(e.prompt_tokens for e in served), sum(e.completion_tokens for e in served)
            assert (truth["input_tokens"], truth["output_tokens"]) == tokens, s.name
            trace = [x for x in spans.get_finished_spans() if format(x.context.trace_id, "032x") == seen.trace_id]
            assert truth["tool_calls"] == sum(1 for x in trace if x.name.startswith("execute_tool")), s.name
            root = next(x for x in trace if x.parent is None)
            assert f"invoke_agent {s.agent.name}" == root.name


class TestOwnLlmSpans:
    """Without the OpenAI instrumentation the agents emit GenAI chat spans Vigil reads the same way."""

    @pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
    def test_normalised_run_matches_truth(self, kind: Kind, fake: FakeOpenAI, spans: InMemorySpanExporter) -> None:
        """Vigil's normaliser derives every ground-truth field from the fallback spans."""
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        agent = DemoAgent(latency_client(fake.base_url, 0.0), pace=0.0, tracer_provider=provider, llm_spans=True)
        for i, s in enumerate(of_kind(kind)[:3]):
            seen = agent.run(RunPlan(i, f"own{kind.value}{i}", s))
            body = encode_spans(spans.get_finished_spans()).SerializeToString()
            batch = next(b for b in decode_protobuf(body).batches if b.trace_id == seen.trace_id)
            run = normalise(list(batch.spans))
            truth = expected(s)
            fields = ("agent", "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens", *FLAGS)
            assert {f: truth[f] for f in fields} == {f: getattr(run, f) for f in fields}, s.name

    def test_conversation_captured(self, fake: FakeOpenAI, spans: InMemorySpanExporter) -> None:
        """With content capture the chat spans carry the conversation: the details show the user's prompt,
        the model's tool calls, the tool results and the final answer, in order."""
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        agent = DemoAgent(
            latency_client(fake.base_url, 0.0), pace=0.0, tracer_provider=provider, llm_spans=True, capture_content=True
        )
        s = next(s for s in of_kind(Kind.GOOD) if s.tool_call_count)
        plan = RunPlan(0, "conv0", s)
        seen = agent.run(plan)
        body = encode_spans(spans.get_finished_spans()).SerializeToString()
        batch = next(b for b in decode_protobuf(body).batches if b.trace_id == seen.trace_id)
        doc = build_details(ScoredRun(normalise(list(batch.spans)), {}, None), Redactor())
        entries = [(e["kind"], e.get("role")) for e in doc["conversation"]]
        assert doc["content_captured"]
        user = [e for e in doc["conversation"] if e.get("role") == "user"]
        assert [s.prompt] == [e["content"] for e in user]  # the scenario went in a header, not the content
        assert "[[scenario:" not in json.dumps(doc)
        assert s.name not in json.dumps(doc)
        assert [plan.tag] == [e.tag for e in fake.served(s.name) if e.tag == plan.tag][:1]  # it still arrived
        assert entries.index(("message", "user")) < entries.index(("tool", None))
        last = doc["conversation"][-1]
        assert seen.output == last["content"]
        assert last.get("final") or "final" == last["kind"]

    def test_without_capture_no_messages(self, fake: FakeOpenAI, spans: InMemorySpanExporter) -> None:
        """Capture off: the chat spans carry no prompt."""
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        agent = DemoAgent(latency_client(fake.base_url, 0.0), pace=0.0, tracer_provider=provider, llm_spans=True)
        seen = agent.run(RunPlan(0, "noconv0", of_kind(Kind.GOOD)[0]))
        chats = [x for x in spans.get_finished_spans() if format(x.context.trace_id, "032x") == seen.trace_id]
        chats = [x for x in chats if x.name.startswith("chat ")]
        assert chats
        assert all("gen_ai.input.messages" not in (x.attributes or {}) for x in chats)


class TestOpenAICapture:
    """The OpenAI instrumentation records content only through its environment variable."""

    def test_sets_span_only_when_unset(self) -> None:
        """Unset (or blank): set to span_only; the call says it did."""
        env = {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: " "}
        assert openai_capture_content(env)
        assert "span_only" == env[OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT]

    def test_user_choice_stands(self) -> None:
        """A value the user set is left alone, even "no_content"."""
        env = {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: "no_content"}
        assert not openai_capture_content(env)
        assert "no_content" == env[OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT]


class TestFleet:
    """DemoFleet arguments, bookkeeping helpers."""

    @pytest.mark.parametrize(
        "kwargs", [{"rate_per_s": 0}, {"rate_per_s": 1, "duration_s": 0}, {"rate_per_s": 1, "runs": -1}]
    )
    def test_rejects_bad_limits(self, kwargs: dict[str, float]) -> None:
        """A non-positive rate or duration, or a negative run count, is refused."""
        with pytest.raises(ValueError, match="rate_per_s"):
            DemoFleet("http://127.0.0.1:1", seed=0, **kwargs)  # type: ignore[arg-type]

    def test_stop_before_run(self) -> None:
        """stop() on a fleet that never ran returns at once."""
        assert DemoFleet("http://127.0.0.1:1", rate_per_s=1, seed=0).shutdown(0.1)

    def test_workers_scale_with_rate(self) -> None:
        """More rate (or more latency) means more worker threads, within bounds."""
        slow = DemoFleet("http://x", rate_per_s=2, seed=0).workers
        fast = DemoFleet("http://x", rate_per_s=20, seed=0).workers
        assert 4 <= slow < fast <= 256

    def test_stats(self) -> None:
        """Sent and done counts by kind, raised runs and the rate, on an injected clock."""
        clock = [0.0]
        stats = FleetStats(2.0, now=lambda: clock[0])
        stats.restart()
        for t, kind in ((0.0, Kind.GOOD), (0.5, Kind.GOOD), (1.0, Kind.ERROR)):
            clock[0] = t
            stats.sent(kind)
        clock[0] = 10.0
        stats.done(Kind.ERROR, raised=True)
        sent, done, raised, elapsed = stats.snapshot()
        assert ({Kind.GOOD: 2, Kind.ERROR: 1}, {Kind.ERROR: 1}, 1, 10.0) == (sent, done, raised, elapsed)
        assert 2.0 == stats.rate()
        assert stats.summary().startswith("3 runs sent at 2.00/s, 1 finished (1 raised) in 10.0 s: good 2")


def _conversations(count: int) -> list[tuple[RunPlan, ...]]:
    found = conversations(SEED)
    return [next(found) for _ in range(count)]


def _vigil_signals(turns: tuple[RunPlan, ...]) -> dict[str, object]:
    """What Vigil's session rules (review_queue.sessions) find in the planned conversation, each turn
    read as Vigil reads it: the user message (none when an input guardrail stops the turn before any
    model call), an answer unless the turn errors, its status and thumbs-down."""
    out: list[Turn] = []
    for position, plan in enumerate(turns, 1):
        said = () if plan.scenario.guardrail == "input" else (Message("user", plan.user_message),)
        truth = expected(plan.scenario)
        run = Run(
            trace_id=f"{position:032x}", session_id=plan.session_id, messages=said,
            final_output="" if truth["errored"] else "an answer",
        )  # fmt: skip
        status = "error" if failed(plan.scenario) else "ok"
        down = plan.scenario.feedback == "thumbs_down"
        out.append(Turn(run.trace_id, position, status, True, down, turn_features(run, SessionConfig())))
    found: dict[str, object] = {"turns": len(turns), "reask": [], "human_request": [], "thumbs_down": []}
    signals = session_signals(out, SessionConfig().reask_threshold, closed=True)
    for signal in signals:
        if signal["signal"] != "abandoned":
            found[signal["signal"]].append(signal["turn"])  # type: ignore[attr-defined]
    found["abandoned"] = any(s["signal"] == "abandoned" for s in signals)
    return found


class TestConversations:
    """Runs come as conversations: shapes, proportions, and the session signals Vigil should find."""

    def test_turns_share_a_session(self) -> None:
        """A conversation's turns are consecutive runs of one agent sharing a session id, numbered from 0;
        triage (a ticket filer) has one-turn sessions; session ids are unique."""
        convs = _conversations(300)
        assert list(range(sum(len(c) for c in convs))) == [p.index for c in convs for p in c]
        for conv in convs:
            assert 1 == len({(p.session_id, p.scenario.agent.name) for p in conv})
            assert list(range(len(conv))) == [p.turn for p in conv]
            assert Act.OPEN is conv[0].act
            assert all(p.act is not Act.OPEN for p in conv[1:])
        assert 300 == len({c[0].session_id for c in convs})
        assert {1} == {len(c) for c in convs if c[0].scenario.agent.name == "triage"}

    def test_realistic_shapes(self) -> None:
        """Over 2000 conversations: most see no signal; about half have several turns; re-asks, requests
        for a human and abandonment each happen in a few percent to a fifth of them."""
        truths = [session_truth(c) for c in _conversations(2000)]
        share = {
            "fine": sum(not (t["reask"] or t["human_request"] or t["thumbs_down"] or t["abandoned"]) for t in truths),
            "multi": sum(t["turns"] > 1 for t in truths),
            "reask": sum(bool(t["reask"]) for t in truths),
            "human_request": sum(bool(t["human_request"]) for t in truths),
            "abandoned": sum(t["abandoned"] for t in truths),
        }
        share = {k: v / len(truths) for k, v in share.items()}
        assert share["fine"] >= 0.65, share
        assert 0.35 <= share["multi"] <= 0.75, share
        assert 0.02 <= share["reask"] <= 0.15, share
        assert 0.02 <= share["human_request"] <= 0.12, share
        assert 0.05 <= share["abandoned"] <= 0.25, share

    def test_users_react_to_what_they_saw(self) -> None:
        """Re-asks and requests for a human follow a failed turn (or a thumbs-down, for a re-ask); a re-ask
        repeats an earlier question of the conversation; a conversation ends after a request for a
        human, and ends early only after a failed turn."""
        for conv in _conversations(2000):
            for before, plan in itertools.pairwise(conv):
                if plan.act is Act.REASK:
                    assert failed(before.scenario) or before.scenario.feedback == "thumbs_down"
                    assert answered(before.scenario)
                    earlier = {p.user_message.lower().rstrip("?.") for p in conv[: plan.turn] if p.act is not Act.REASK}
                    assert any(q in plan.user_message.lower() for q in earlier), plan.user_message
                if plan.act is Act.HUMAN:
                    assert failed(before.scenario)
                    assert plan is conv[-1]
            messages = [p.user_message for p in conv if p.act in (Act.OPEN, Act.FOLLOW_UP)]
            assert len(messages) == len(set(messages))  # new questions are new

    def test_vigil_finds_what_was_planned(self) -> None:
        """Vigil's own session rules over each planned conversation find exactly the planned signals:
        follow-up questions are never re-asks nor requests for a human, every planned one is."""
        wrong = [
            (c[0].session_id, session_truth(c), _vigil_signals(c))
            for c in _conversations(1500)
            if session_truth(c) != _vigil_signals(c)
        ]
        assert [] == wrong

    def test_session_truths_from_played_runs(self) -> None:
        """The fleet's per-session truth from its run records equals the plan's, also for a cut conversation."""
        conv = next(c for c in _conversations(500) if len(c) >= 3 and session_truth(c)["reask"])
        runs = [
            DemoRun(f"{p.index:032x}", p.scenario.agent.name, p.scenario.kind.value, {}, session_id=p.session_id,
                    turn=p.turn + 1, act=p.act.value, signals=p.signals, failed=failed(p.scenario))
            for p in reversed(conv)
        ]  # fmt: skip
        assert {conv[0].session_id: session_truth(conv)} == session_truths(runs)
        assert session_truth(conv[:2]) == session_truths([r for r in runs if r.turn <= 2])[conv[0].session_id]


class TestConversationsPlayed:
    """A conversation played by the agent against the fake model: each turn gets its own script."""

    def test_history_and_scripts(self, fake: FakeOpenAI, spans: InMemorySpanExporter) -> None:
        """Each turn's requests are served from that turn's scenario with the turn's own step numbers
        (so tokens and calls match each run's truth), the later turns resend the history, and every run
        carries the conversation's gen_ai.conversation.id."""
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        agent = DemoAgent(
            latency_client(fake.base_url, 0.0), pace=0.0, tracer_provider=provider, llm_spans=True, capture_content=True
        )
        conv = next(c for c in _conversations(800) if len(c) >= 4 and any(p.act is Act.REASK for p in c))
        history: list[dict[str, str]] = []
        for plan in conv:
            before = len(fake.served())
            seen = agent.run(plan, history)
            truth = expected(plan.scenario)
            served = fake.served()[before:]
            assert {plan.scenario.name} >= {e.scenario for e in served}, plan
            assert (truth["llm_calls"], truth["input_tokens"]) == (len(served), sum(e.prompt_tokens for e in served))
            assert {plan.conversation} >= {e.tag for e in served}
            trace = [x for x in spans.get_finished_spans() if format(x.context.trace_id, "032x") == seen.trace_id]
            root = next(x for x in trace if x.parent is None)
            assert plan.session_id == (root.attributes or {})["gen_ai.conversation.id"]
            chats = [x for x in trace if x.name.startswith("chat ")]
            if chats:
                said = json.loads(str((chats[0].attributes or {})["gen_ai.input.messages"]))
                users = [m["parts"][0]["content"] for m in said if m["role"] == "user"]
                assert [*(m["content"] for m in history if m["role"] == "user"), plan.user_message] == users
                assert plan.scenario.system == said[0]["parts"][0]["content"]  # the system message has no marker
                assert "[[scenario:" not in json.dumps(said)
            history.append({"role": "user", "content": plan.user_message})
            if seen.output:
                history.append({"role": "assistant", "content": seen.output})


class TestConversationMarker:
    """FakeOpenAI's conversation marker, without HTTP."""

    def test_script_per_user_message(self) -> None:
        """The n-th user message plays the n-th script, counting assistant turns since it; beyond the list
        the last script plays; a name with a comma cannot be registered."""
        scripts = {"one": [ToolCallTurn.of("a"), TextTurn("first")], "two": [TextTurn("second")]}
        fake = FakeOpenAI(scripts)
        system = {"role": "system", "content": "[[scenario:one,two#c1]]"}
        user1, user2 = {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}
        call = {"role": "assistant", "content": None, "tool_calls": []}
        tool = {"role": "tool", "tool_call_id": "x", "content": "ok"}
        answer = {"role": "assistant", "content": "first"}

        def served(*messages: dict[str, object]) -> tuple[str, int, str]:
            status, _body = fake.answer("/v1/chat/completions", {"model": "m", "messages": [system, *messages]})
            assert 200 == status
            entry = fake.served()[-1]
            return entry.scenario, entry.turn, entry.kind

        assert ("one", 0, "tool_calls") == served(user1)
        assert ("one", 1, "text") == served(user1, call, tool)
        assert ("two", 0, "text") == served(user1, call, tool, answer, user2)
        assert ("two", 0, "text") == served(user1, answer, user2, answer, {"role": "user", "content": "q3"})
        assert "c1" == fake.served()[-1].tag
        with pytest.raises(ValueError, match="must match"):
            fake.register("a,b", [TextTurn("x")])


ANSWERS_TELL: dict[str, str] = {
    "where": "should arrive on", "arrival": "estimate", "damaged": "return", "refund": "refund", "address": "redirect",
    "norway": "Norway", "thanks": "welcome", "human": "queue", "twice": "twice", "balance": "balance",
    "card": "made with", "pdf": ".pdf", "due": "is due on", "summary": "Sources", "changes": "Sources",
    "sources": "1. ", "europe": "For Europe", "shorter": "In short", "players": "main players",
    "mobile": "routed to Mobile", "billing": "routed to Billing", "product": "routed to Product",
}  # fmt: skip
"""What a good answer to each intent must say (a due date for "when is the next payment due?"...)."""


def _strings(value: object) -> Iterator[str]:
    """Every string inside a JSON-like value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


class TestCoherentScripts:
    """Each scenario's question, tool calls and answer fit each other (issue 38, item 3)."""

    def test_good_answers_fit_their_question_and_tools(self) -> None:
        """Every good run of every agent, intent and user: the tools are the agent's own with their declared
        parameters, the answer says what the question asks and quotes what the tools returned, and no
        template field is left unfilled."""
        good = [s for s in scenarios(SEED) if s.kind is Kind.GOOD]
        assert len(good) == sum(len(a.intents()) for a in AGENTS) * VARIANTS
        for s in good:
            answer = s.turns[-1]
            assert isinstance(answer, TextTurn), s.name
            calls = [c for t in s.turns if isinstance(t, ToolCallTurn) for c in t.calls]
            assert calls, s.name
            for call in calls:
                assert call.name in s.agent.tools, s.name
                assert set(TOOLS[call.name].parameters) == set(call.arguments), s.name
            assert ANSWERS_TELL[s.intent] in answer.text, (s.name, answer.text)
            returned = {v for c in calls for v in _strings(lookup(c.name, c.arguments)) if len(v) >= 4}
            assert any(v in answer.text for v in returned), (s.name, answer.text)
            assert "{" not in answer.text, s.name
            assert "{" not in s.system, s.name
            assert "{" not in s.prompt, s.name

    def test_a_conversation_is_one_user(self) -> None:
        """The turns of a conversation share the system prompt (one user's ids) and ask what their scenario
        answers: a follow-up its question, a re-ask the earlier question, a request for a human the handoff."""
        for conv in _conversations(300):
            assert 1 == len({p.scenario.system for p in conv})
            for plan in conv:
                if plan.act in (Act.OPEN, Act.FOLLOW_UP):
                    assert plan.scenario.prompt == plan.user_message
                elif plan.act is Act.REASK:
                    assert plan.scenario.prompt in plan.user_message or plan.user_message.endswith(
                        plan.scenario.prompt[0].lower() + plan.scenario.prompt[1:]
                    )
                else:
                    assert "human" == plan.scenario.intent


class _TraceSink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver keeping every request body (``bodies`` is set on a subclass)."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class TestNoSpoilers:
    """Nothing a reviewer can see of a demo run tells what it was meant to be (issue 38, item 3)."""

    def test_fleet_spans_and_conversations_carry_no_ground_truth(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The fleet plays 150 runs (every kind) to an OTLP receiver with content capture on. No span name,
        status, attribute or event value — prompts, answers, tool arguments and results included — and no
        stored conversation (the details document Vigil keeps; its entries' ``kind``, Vigil's own, aside) holds
        the scenario marker, the header, a scenario name or the name of a run kind ("good", "looping"...)."""
        monkeypatch.setenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "span_only")
        bodies: list[bytes] = []
        sink = ThreadingHTTPServer(("127.0.0.1", 0), type("Sink", (_TraceSink,), {"bodies": bodies}))
        threading.Thread(target=sink.serve_forever, args=(0.05,), daemon=True).start()
        try:
            endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
            fleet = DemoFleet(endpoint, rate_per_s=200, runs=150, seed=SEED, pace=0.0, progress=False)
            truth = fleet.run()
        finally:
            sink.shutdown()
            sink.server_close()
        assert set(Kind) == {Kind(r.kind) for r in truth}
        traces: dict[str, list[Any]] = {}
        for body in bodies:
            for batch in decode_protobuf(body).batches:
                traces.setdefault(batch.trace_id, []).extend(batch.spans)
        assert {r.trace_id for r in truth} <= set(traces)
        names = {r.scenario for r in truth} | {s.name for s in scenarios(SEED)}
        kinds = re.compile(
            r"\b(" + "|".join(k.value for k in Kind if k not in (Kind.ERROR, Kind.CONTENT_FILTER)) + r")\b"
        )
        captured = 0
        for trace_id, trace in traces.items():
            doc = build_details(ScoredRun(normalise(trace), {}, None), Redactor())
            captured += bool(doc.get("content_captured"))
            said = [{k: v for k, v in e.items() if k != "kind"} for e in doc["conversation"]]  # kind: Vigil's
            texts = [json.dumps(said)]
            for x in trace:  # attribute values: their keys are the conventions' (gen_ai.guardrail.*)
                shown = [
                    x.name,
                    x.status_message,
                    [*x.attributes.values()],
                    [[*e.attributes.values()] for e in x.events],
                ]
                texts.append(json.dumps(shown, default=str))
            for text in texts:
                assert "[[scenario:" not in text, trace_id
                assert HEADER.lower() not in text.lower(), trace_id
                assert not [n for n in names if n in text], (trace_id, [n for n in names if n in text])
                assert not kinds.search(text), (trace_id, kinds.search(text))
        assert captured >= len(truth) // 2  # the conversations were there to scan
