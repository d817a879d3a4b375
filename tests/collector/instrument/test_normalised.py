"""The helpers' spans, encoded as OTLP and normalised, give the Run fields Vigil derives (no subprocess)."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.instrument import MaxIterationsExceeded, agent_run, guardrail, tool_call
from collector.otlp import decode_protobuf
from scorers.efficiency import StepEfficiency
from scorers.model import Run, RunStatus
from scorers.normalise import normalise


def normalised(exporter: InMemorySpanExporter) -> Run:
    """The one run in the exporter, through the OTLP wire format and Vigil's normaliser."""
    [batch] = decode_protobuf(encode_spans(exporter.get_finished_spans()).SerializeToString()).batches
    return normalise(batch.spans)


def spin() -> None:
    """An agent that loops until its raising cap stops it."""
    with agent_run("loop", max_iterations=2, raise_on_max=True) as run:
        while True:
            run.tick()


def give_up_after_failed_tool() -> None:
    """An agent whose tool fails and which then raises to its caller."""
    with agent_run("support"):
        with pytest.raises(LookupError), tool_call("lookup"):
            raise LookupError("missing")
        raise RuntimeError("gave up")


class TestVigilReadsTheMarkers:
    """Every vigil.* marker the helpers write is recognised by the normaliser."""

    def test_normal_run(self, capturing: InMemorySpanExporter) -> None:
        """Agent name, tool calls, status OK, declared optimal steps and the captured final output."""
        with agent_run("support", max_iterations=8, optimal_steps=2) as run:
            run.tick()
            with tool_call("lookup", call_id="call_1", arguments={"id": 7}) as call:
                call.set_result({"status": "shipped"})
            run.set_output("Your order shipped.")
        r = normalised(capturing)
        assert ("support", 1, 0, RunStatus.OK, False, False, False) == (
            r.agent, r.tool_calls, r.tool_errors, r.status, r.hit_max_iterations, r.safety_blocked, r.errored,
        )  # fmt: skip
        assert (2, "Your order shipped.", "lookup", '{"id":7}') == (
            r.optimal_steps,
            r.final_output,
            r.tools[0].name,
            r.tools[0].arguments,
        )

    def test_cap_hit(self, exporter: InMemorySpanExporter) -> None:
        """A run that reached its cap is LIMIT_HIT, not errored."""
        with agent_run("loop", max_iterations=3) as run:
            while run.tick():
                pass
        r = normalised(exporter)
        assert (RunStatus.LIMIT_HIT, True, False) == (r.status, r.hit_max_iterations, r.errored)

    def test_cap_hit_raised(self, exporter: InMemorySpanExporter) -> None:
        """A raised cap hit is both a limit hit and an error reaching the caller."""
        with pytest.raises(MaxIterationsExceeded):
            spin()
        r = normalised(exporter)
        assert (RunStatus.LIMIT_HIT, True, True, "collector.instrument.MaxIterationsExceeded") == (
            r.status,
            r.hit_max_iterations,
            r.errored,
            r.error_type,
        )

    def test_guardrail_block(self, exporter: InMemorySpanExporter) -> None:
        """A guardrail block makes the run BLOCKED."""
        with agent_run("support"), guardrail("pii") as g:
            g.block("card number")
        r = normalised(exporter)
        assert (RunStatus.BLOCKED, True, False) == (r.status, r.safety_blocked, r.errored)

    def test_tool_failure_and_raised_error(self, exporter: InMemorySpanExporter) -> None:
        """A failed tool counts as a tool error; an exception reaching the caller makes the run errored."""
        with pytest.raises(RuntimeError, match="gave up"):
            give_up_after_failed_tool()
        r = normalised(exporter)
        assert (1, 1, True, RunStatus.ERROR, "RuntimeError") == (
            r.tool_calls,
            r.tool_errors,
            r.errored,
            r.status,
            r.error_type,
        )

    def test_step_efficiency_uses_optimal_steps(self, exporter: InMemorySpanExporter) -> None:
        """optimal_steps on the root feeds step_efficiency (agent turns stand in for LLM calls here)."""
        with agent_run("support", optimal_steps=1):
            pass
        score = StepEfficiency()(normalised(exporter))
        assert score is not None
        assert 1.0 == score.value
