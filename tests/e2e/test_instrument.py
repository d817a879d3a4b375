"""End to end: runs made with collector.instrument -> OTLP (HTTP and gRPC) -> ``vigil run`` -> REST API.

A small support agent is written with the helpers (``agent_run``, ``tool_call``,
``guardrail``) and the real ``openai`` client, which talks to a scripted
:class:`FakeOpenAI`; ``vigil_setup(instrument_openai=True)`` makes the official OpenAI
instrumentation emit the LLM spans. The agent records what it observed (ground truth) and
every derived field of ``GET /api/v1/runs/{trace_id}`` must equal it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from opentelemetry import trace
from opentelemetry.util._once import Once
from prometheus_client.parser import text_string_to_metric_families

from collector.demo.fakeopenai import FakeOpenAI, TextTurn, ToolCallTurn, Turn
from collector.instrument import MaxIterationsExceeded, agent_run, guardrail, tool_call, vigil_setup
from collector.instrument import spans as helper_spans
from tests.e2e.drivers.harness import RunTruth
from tests.support.review_queue import TRUTH_FIELDS as FIELDS
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

MODEL = "gpt-4o-mini"
RUN_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Scenario:
    """One scripted run: what the model answers and how the agent is configured."""

    name: str
    turns: tuple[Turn, ...]
    max_iterations: int = 6
    optimal_steps: int = 2
    raise_on_max: bool = False
    block_output: bool = False


SCENARIOS = (
    Scenario("normal", (ToolCallTurn.of("lookup_order", order_id="7"), TextTurn("Order 7 has shipped."))),
    Scenario("capped", (ToolCallTurn.of("lookup_order", order_id="7"),), max_iterations=3),
    Scenario("blocked", (TextTurn("Card 4111 1111 1111 1111 is on file."),), optimal_steps=1, block_output=True),
    Scenario(
        "tool_fails",
        (ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")),
        optimal_steps=1,
    ),
    Scenario("tool_crashes", (ToolCallTurn.of("refund", order_id="7"),)),
    Scenario("cap_raises", (ToolCallTurn.of("lookup_order", order_id="7"),), max_iterations=2, raise_on_max=True),
)

# scenario: agent, llm_calls, tool_calls, tool_errors, input, output tokens, hit_max, blocked, errored
# Turn i of the fake model reports 100 + 10 i prompt and 20 + 5 i completion tokens.
EXPECTED: dict[str, tuple[Any, ...]] = {
    "normal": ("helper_agent", 2, 1, 0, 210, 45, False, False, False),
    "capped": ("helper_agent", 2, 2, 0, 210, 45, True, False, False),
    "blocked": ("helper_agent", 1, 0, 0, 100, 20, False, True, False),
    "tool_fails": ("helper_agent", 2, 1, 1, 210, 45, False, False, False),
    "tool_crashes": ("helper_agent", 1, 1, 1, 100, 20, False, False, True),
    "cap_raises": ("helper_agent", 1, 1, 0, 100, 20, True, False, True),
}


class RefundBackendError(RuntimeError):
    """The refund backend is broken: nothing the agent can recover from."""


@dataclass(kw_only=True)
class Truth(RunTruth):
    """What the agent observed in one run (the drivers' ground truth), over which protocol."""

    protocol: str
    optimal_steps: int = 0


def lookup_order(order_id: str) -> str:
    """Status of an order; unknown ids raise LookupError."""
    if order_id.startswith("A-"):
        raise LookupError(f"order {order_id} not found")
    return json.dumps({"order_id": order_id, "status": "shipped"})


def refund(order_id: str) -> str:
    """Always fails with an unrecoverable backend error."""
    raise RefundBackendError(f"refund backend returned malformed JSON for {order_id}")


TOOLS = {"lookup_order": lookup_order, "refund": refund}


class HelperAgent:
    """A chat-completions tool loop instrumented with Vigil's helpers."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client

    def play(self, s: Scenario, tag: str, truth: Truth) -> None:
        """Run scenario ``s``; exceptions that reach the caller are recorded in ``truth``."""
        truth.optimal_steps = s.optimal_steps
        try:
            with agent_run(
                truth.agent, max_iterations=s.max_iterations, optimal_steps=s.optimal_steps, raise_on_max=s.raise_on_max
            ) as run:
                truth.trace_id = run.trace_id
                try:
                    run.set_output(self._loop(run, s, tag, truth))
                finally:
                    truth.hit_max_iterations = run.max_iterations_hit
        except (MaxIterationsExceeded, RefundBackendError):
            truth.errored = True

    def _loop(self, run: Any, s: Scenario, tag: str, truth: Truth) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"[[scenario:{s.name}#{tag}]] Where is my order?"}
        ]
        while run.tick():
            reply = self.client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            truth.llm_calls += 1
            assert reply.usage is not None
            truth.input_tokens += reply.usage.prompt_tokens
            truth.output_tokens += reply.usage.completion_tokens
            message = reply.choices[0].message
            if not message.tool_calls:
                return self._checked(message.content or "", s, truth)
            messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            for call in message.tool_calls:
                assert call.type == "function"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": self._tool(call, truth)})
        return "I could not finish in time."

    def _checked(self, answer: str, s: Scenario, truth: Truth) -> str:
        with guardrail("pii_output") as g:
            if s.block_output and "4111" in answer:
                g.block("card number in the answer")
                truth.safety_blocked = True
                return "Sorry, I cannot share that."
        return answer

    def _tool(self, call: Any, truth: Truth) -> str:
        name, arguments = call.function.name, json.loads(call.function.arguments)
        truth.tool_calls += 1
        try:
            with tool_call(name, call_id=call.id, arguments=arguments) as tool:
                result = TOOLS[name](**arguments)
                tool.set_result(result)
        except LookupError as exc:
            truth.tool_errors += 1
            return f"Error: {exc}"
        except RefundBackendError:
            truth.tool_errors += 1
            raise
        return result


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run`` on free ports, no random sampling (only rules flag)."""
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": "0"}
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        yield running


@pytest.fixture(scope="module")
def played(vigil: VigilProcess) -> list[Truth]:
    """Every scenario over OTLP/HTTP, the normal one also over OTLP/gRPC; the agents' ground truth."""
    truths: list[Truth] = []
    with pytest.MonkeyPatch.context() as mp, FakeOpenAI({s.name: s.turns for s in SCENARIOS}) as fake:
        mp.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())  # leave no global provider behind
        mp.setattr(trace, "_TRACER_PROVIDER", None)
        mp.setattr(helper_spans, "_defaults", None)
        agent = HelperAgent(openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0))
        runs = [
            ("http/protobuf", vigil.otlp_endpoint, SCENARIOS),
            ("grpc", f"http://{vigil.otlp_grpc_target}", SCENARIOS[:1]),
        ]
        for protocol, endpoint, scenarios in runs:
            environ = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true", "OTEL_BSP_SCHEDULE_DELAY": "200"}
            with vigil_setup("helper-bot", endpoint, protocol=protocol, environ=environ) as tracing:
                for s in scenarios:
                    truths.append(Truth(scenario=s.name, agent="helper_agent", protocol=protocol))
                    agent.play(s, protocol.replace("/", "_"), truths[-1])
                assert tracing.force_flush(10_000)
    return truths


def fetch_run(vigil: VigilProcess, trace_id: str) -> dict[str, Any]:
    """Poll ``/api/v1/runs/{trace_id}`` until the run exists and is complete."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        response = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", timeout=5)
        if response.status_code == 200 and response.json().get("complete"):
            return dict(response.json())
        time.sleep(0.2)
    raise AssertionError(f"run {trace_id} never completed\n{vigil.log_tail()}")


class TestGroundTruth:
    """The agent is deterministic: its observations equal the scenario table (so the e2e check is not vacuous)."""

    def test_observed_matches_table(self, played: list[Truth]) -> None:
        """Each scenario's counts, tokens and outcome flags equal EXPECTED, over both protocols."""
        assert 7 == len(played)
        for truth in played:
            assert EXPECTED[truth.scenario] == tuple(getattr(truth, f) for f in FIELDS), truth.scenario
        assert len(played) == len({t.trace_id for t in played})


class TestThroughVigil:
    """Every run made with the helpers comes out of ``vigil run`` with the fields the agent observed."""

    def test_derived_fields(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """agent, counts, tokens, outcome flags, service and dialect match for every run and protocol."""
        problems = []
        for truth in played:
            run = fetch_run(vigil, truth.trace_id)
            expected = {f: getattr(truth, f) for f in FIELDS} | {"service": "helper-bot", "dialect": "genai"}
            got = {f: run[f] for f in expected}
            if expected != got:
                problems.append(f"{truth.scenario}/{truth.protocol}: expected {expected}, got {got}")
        assert not problems, "\n".join(problems)

    def test_step_efficiency_from_optimal_steps(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """scores.step_efficiency is min(1, optimal_steps / llm_calls) from the declared optimum."""
        for truth in played:
            run = fetch_run(vigil, truth.trace_id)
            expected = min(1.0, truth.optimal_steps / truth.llm_calls)
            assert expected == pytest.approx(run["scores"]["step_efficiency"]), truth.scenario

    def test_flags(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """Cap hits and blocks are flagged high, raised exceptions 'errored'; a clean run is not flagged."""
        for truth in played:
            flag = fetch_run(vigil, truth.trace_id)["flag"]
            if truth.hit_max_iterations or truth.safety_blocked:
                assert flag is not None, truth.scenario
                assert "high" == flag["priority"], truth.scenario
            if truth.errored:
                assert flag is not None, truth.scenario
                assert "errored" in flag["reasons"], truth.scenario
            if truth.scenario == "normal":
                assert flag is None, truth.protocol

    def test_statuses(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """Run status: limit hits win over errors, blocks are BLOCKED, a crash is ERROR."""
        statuses = {(t.scenario, t.protocol): fetch_run(vigil, t.trace_id)["status"] for t in played}
        assert {
            ("normal", "http/protobuf"): "ok",
            ("capped", "http/protobuf"): "limit_hit",
            ("blocked", "http/protobuf"): "blocked",
            ("tool_fails", "http/protobuf"): "ok",
            ("tool_crashes", "http/protobuf"): "error",
            ("cap_raises", "http/protobuf"): "limit_hit",
            ("normal", "grpc"): "ok",
        } == statuses

    def test_tool_content_and_error_type(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """With capture on the reviewer snapshot holds tool arguments; a crash reports the exception's type."""
        crash = next(t for t in played if t.scenario == "tool_crashes")
        run = fetch_run(vigil, crash.trace_id)
        assert run["error_type"].endswith("RefundBackendError")
        tools = run["review_item"]["snapshot"]["tools"]
        assert [("refund", '{"order_id":"7"}')] == [(t["name"], t["arguments"]) for t in tools]

    def test_grpc_run_came_over_grpc(self, vigil: VigilProcess, played: list[Truth]) -> None:
        """The gRPC run's 5 spans (root, 2 chat, 1 tool, 1 guardrail) arrived on the gRPC receiver."""
        assert any(t.protocol == "grpc" for t in played)
        text = httpx.get(vigil.metrics_url, timeout=5).text
        received = [
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "vigil_spans_received_total" and sample.labels.get("encoding") == "grpc"
        ]
        assert [5.0] == received

    def test_openai_instrumentation_undone(self, played: list[Truth]) -> None:
        """After the last shutdown the OpenAI instrumentation is off again."""
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

        assert played
        assert not OpenAIInstrumentor().is_instrumented_by_opentelemetry
