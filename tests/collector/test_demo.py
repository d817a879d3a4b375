"""The demo fleet's plan, ground truth and scripted agents (no Vigil; see tests/e2e/test_demo.py).

The scenario tests play every scripted scenario with the real agent loop against a real
:class:`FakeOpenAI`, with spans going to an in-memory exporter, and check three things
agree: the plan's ground truth, what the agent observed, and what the fake server served.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.demo.agent import DemoAgent, latency_client
from collector.demo.fakeopenai import ContentFilterTurn, ErrorTurn, FakeOpenAI, TextTurn, ToolCallTurn
from collector.demo.fleet import DemoFleet, openai_capture_content
from collector.demo.plan import (
    AGENTS,
    DECK,
    MIX,
    Fault,
    Kind,
    RunPlan,
    Scenario,
    expected,
    plan_runs,
    scenario,
    scenarios,
)
from collector.demo.progress import FleetStats
from collector.instrument.content import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
from collector.otlp import decode_protobuf
from review_queue.details import build_details
from scorers.model import ScoredRun
from scorers.normalise import normalise
from scorers.redact import Redactor

SEED = 11
FLAGS = ("hit_max_iterations", "safety_blocked", "errored")


def of_kind(kind: Kind) -> list[Scenario]:
    """Every scenario of ``kind`` for :data:`SEED`."""
    return [s for s in scenarios(SEED) if s.kind is kind]


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
        """Every run has its own tag; the marker names the scenario and the tag."""
        plans = plan_runs(SEED, 300)
        assert 300 == len({p.tag for p in plans})
        assert f"[[scenario:{plans[0].scenario.name}#{plans[0].tag}]]" == plans[0].marker


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
        assert [f"{plan.marker} {s.prompt}"] == [e["content"] for e in user]
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
