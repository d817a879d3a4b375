"""Tests for scorers.detect: structure first, vocabulary second, user rules, evidence."""

from __future__ import annotations

import json
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.model import SpanEvent, StatusCode
from scorers.detect import (
    _PAST,
    _PAST_TEXT,
    BUILTIN_RULES,
    CREWAI_FORCE_FINAL_ANSWER,
    DetectionConfig,
    Detector,
    GrowingText,
    block_words,
    is_block_reason,
    limit_words,
    output_check_spent,
    policy_words,
    rejection_feedback,
    tokens_of,
)
from scorers.errors import DetectionConfigError
from scorers.model import Message, Run, RunStatus
from scorers.normalise import normalise
from tests.support.spans import node, trace

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}


def chat(finish: str, **extra: Any) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": [finish], **extra}


def _exc(kind: str, message: str = "") -> SpanEvent:
    return SpanEvent("exception", attributes={"exception.type": kind, "exception.message": message})


class TestTokens:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("MaxIterationsExceeded", ("max", "iterations", "exceeded")),
            ("GRAPH_RECURSION_LIMIT", ("graph", "recursion", "limit")),
            ("PIIDetectionError", ("pii", "detection", "error")),
            ("LlmCallsLimitExceededError", ("llm", "calls", "limit", "exceeded", "error")),
            ("stopped after 6 iterations", ("stopped", "after", "6", "iterations")),
        ],
    )
    def test_split(self, text: str, expected: tuple[str, ...]) -> None:
        assert expected == tokens_of(text)


class TestLimitVocabulary:
    @pytest.mark.parametrize(
        "text",
        [
            "MaxIterationsExceeded",
            "myproject.errors.MaxIterationsExceeded",
            "agent X stopped after 6 iterations",
            "Max turns exceeded: {'max_turns': 3}",
            "Recursion limit of 6 reached without hitting a stop condition.",
            "langgraph.errors.GraphRecursionError",
            "UsageLimitExceeded",
            "The next request would exceed the request_limit of 3",
            "LlmCallsLimitExceededError",
            "Max number of llm calls limit of 3 exceeded",
            "ModelCallLimitExceededError",
            "ToolCallLimitExceededError",
            "Reached max steps.",
            "Agent was not able to resolve the task in 10 iterations.",
            "Maximum auto function invocation attempts reached",
            "Maximum iterations reached",
            "exceeded maximum number of tool calls",
            "Agent stopped due to iteration limit or time limit.",
            "MaxStepsReached",
            "TooManyIterations: iteration cap hit",
        ],
    )
    def test_limits(self, text: str) -> None:
        assert limit_words(text)

    @pytest.mark.parametrize(
        "text",
        [
            "Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3",
            "RateLimitError",
            "You exceeded your current quota",
            "maximum recursion depth exceeded while calling a Python object",
            "RecursionError",
            "Max retries exceeded with url: /v1/chat/completions",
            "This model's maximum context length is 8192 tokens",
            "context_length_exceeded",
            "Request timed out.",
            "Internal Server Error",
            "Error code: 500 - {'error': {'message': 'The server had an error'}}",
            "ValueError: order A-404 not found",
            "request too large: payload size exceeded",
            "AI_RetryError: Failed after 2 attempts. Last error: The server had an error",
            "could not connect after 3 attempts",
            "",
        ],
    )
    def test_not_limits(self, text: str) -> None:
        assert not limit_words(text)


class TestBlockVocabulary:
    @pytest.mark.parametrize(
        "text",
        [
            "InputGuardrailTripwireTriggered",
            "agents.exceptions.OutputGuardrailTripwireTriggered",
            "Guardrail tripwire triggered: {'guardrail': 'no_card_numbers'}",
            "Model refused to produce output: Response withheld by the provider's content filter.",
            "ModelRefusalError",
            "langchain.agents.middleware.pii.PIIDetectionError",
            "Detected 1 PII entity (email) in input",
            "ContentPolicyViolationError",
            "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "content_filter",
            "Output flagged by moderation",
            "Response blocked due to safety settings",
            "ResponsibleAIPolicyViolation",
            "Prompt injection detected",
            "guardrail intervened",
        ],
    )
    def test_blocks(self, text: str) -> None:
        assert block_words(text)

    @pytest.mark.parametrize(
        "text",
        [
            "Error code: 500 - Internal server error",
            "ConnectionRefusedError: [Errno 111] Connection refused",
            "Rate limit reached",
            "order A-404 not found",
            "MaxTurnsExceeded",
            "TimeoutError",
            "filter() got an unexpected keyword argument",
            "",
        ],
    )
    def test_not_blocks(self, text: str) -> None:
        assert not block_words(text)

    @pytest.mark.parametrize(
        "reason", ["content_filter", "content-filter", "CONTENT_FILTER", "content filter", "ContentFilter", "safety"]
    )
    def test_block_reason_any_spelling(self, reason: str) -> None:
        assert is_block_reason(reason)

    @pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "end_turn", "max_tokens"])
    def test_ordinary_reasons(self, reason: str) -> None:
        assert not is_block_reason(reason)

    @given(st.text(max_size=80))
    def test_never_raises(self, text: str) -> None:
        """Arbitrary text never breaks the matchers."""
        assert isinstance(limit_words(text), bool)
        assert isinstance(block_words(text), bool)


def _bot(*children: Any, attrs: Mapping[str, Any] = AGENT, complete: bool = True, **root: Any) -> Run:
    """The run of one ``invoke_agent bot`` root span (``attrs``, :data:`AGENT` by default) over ``children``."""
    return normalise(trace(node("invoke_agent bot", dict(attrs), *children, **root)), complete=complete)


def _evidence(run: Run, signal: str) -> list[tuple[str, str]]:
    return [(e.rule, e.span_name) for e in run.evidence if e.signal == signal]


class TestStructure:
    def test_cutoff_graceful_cap(self) -> None:
        """The run ends while the model's last turn asked for tools: a limit hit, with evidence on that LLM span."""
        run = _bot(
            node("chat 1", chat("tool_calls")),
            node("execute_tool search", TOOL),
            node("chat 2", chat("tool-calls")),
            node("execute_tool search", TOOL),
        )
        assert (True, RunStatus.LIMIT_HIT) == (run.hit_max_iterations, run.status)
        assert [("limit.cutoff", "chat 2")] == _evidence(run, "hit_max_iterations")

    def test_answer_after_tools_is_not_cutoff(self) -> None:
        run = _bot(node("chat 1", chat("tool_calls")), node("t", TOOL), node("c", chat("stop")))
        assert not run.hit_max_iterations
        assert [] == list(run.evidence)

    def test_answer_tool_is_not_cutoff(self) -> None:
        """smolagents/PydanticAI answer through a final_answer/final_result tool."""
        final = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "final_result"}
        run = _bot(node("chat", chat("tool_calls")), node("f", final))
        assert not run.hit_max_iterations

    def test_error_explains_the_end(self) -> None:
        """A run that raised an unrelated error is errored, not a limit hit."""
        run = _bot(
            node("chat", chat("tool_calls")),
            node("t", TOOL, status_code=StatusCode.ERROR, status_message="boom"),
            attrs={**AGENT, "error.type": "ValueError"},
            status_code=StatusCode.ERROR,
            status_message="ValueError: boom",
        )
        assert (False, True, RunStatus.ERROR) == (run.hit_max_iterations, run.errored, run.status)
        assert [("errored.root", "invoke_agent bot")] == _evidence(run, "errored")

    def test_incomplete_run_is_not_cutoff(self) -> None:
        run = _bot(node("chat", chat("tool_calls")), complete=False)
        assert not run.hit_max_iterations

    def test_counter_reaches_cap(self) -> None:
        run = _bot(attrs={**AGENT, "agent.steps": 8, "agent.max_steps": 8})
        assert [("limit.counter", "invoke_agent bot")] == _evidence(run, "hit_max_iterations")

    @pytest.mark.parametrize("filler", [0, 100])
    def test_counter_and_decision_on_wide_spans(self, filler: int) -> None:
        """Agent spans with many keys (too many to memoise their key profile) are read all the same."""
        wide = {f"app.field_{i}": i for i in range(filler)}
        counted = {**AGENT, **wide, "agent.steps": 8, "agent.max_steps": 8}
        guarded = {**AGENT, **wide, "gen_ai.guardrail.tripwire_triggered": True}
        runs = [normalise(trace(node("invoke_agent bot", attrs))) for attrs in (counted, guarded, {**AGENT, **wide})]
        signals = [(r.hit_max_iterations, r.safety_blocked) for r in runs]
        assert signals == [(True, False), (False, True), (False, False)]

    def test_counter_below_cap(self) -> None:
        run = _bot(attrs={**AGENT, "agent.steps": 3, "agent.max_steps": 8})
        assert not run.hit_max_iterations

    def test_refusal_field(self) -> None:
        """OpenAI structured refusal in the output messages, with no finish reason: a block."""
        output = '[{"role": "assistant", "content": null, "refusal": "I can\'t help with that."}]'
        run = _bot(node("chat", chat("stop", **{"output.value": output})))
        assert (True, RunStatus.BLOCKED) == (run.safety_blocked, run.status)
        assert [("block.refusal", "chat")] == _evidence(run, "safety_blocked")

    def test_null_refusal_is_not_a_block(self) -> None:
        output = '{"role": "assistant", "content": "Sunny.", "refusal": null}'
        run = _bot(node("chat", chat("stop", **{"output.value": output})))
        assert not run.safety_blocked

    def test_own_exception_on_agent_span(self) -> None:
        run = _bot(
            node("chat", chat("tool_calls")),
            events=(_exc("myapp.MaxIterationsExceeded", "agent bot stopped after 6 iterations"),),
            status_code=StatusCode.ERROR,
            status_message="agent bot stopped after 6 iterations",
        )
        assert run.hit_max_iterations
        assert run.errored
        rules = {rule for rule, _ in _evidence(run, "hit_max_iterations")}
        assert {"limit.vocabulary"} == rules

    def test_tool_error_text_is_not_a_limit_or_block(self) -> None:
        """A tool that fails with 'rate limit' or 'content filter' is a tool error only."""
        tool = node("t", {**TOOL, "error.type": "RateLimitError"}, status_code=StatusCode.ERROR,
                    status_message="Max iterations exceeded: content filter")  # fmt: skip
        run = _bot(node("c", chat("tool_calls")), tool, node("c2", chat("stop")))
        assert (False, False, 1) == (run.hit_max_iterations, run.safety_blocked, run.tool_errors)

    def test_http_500_is_errored_not_blocked(self) -> None:
        failed = node("chat", {"gen_ai.operation.name": "chat", "error.type": "openai.InternalServerError"},
                      status_code=StatusCode.ERROR, status_message="Error code: 500 - internal error")  # fmt: skip
        run = normalise(trace(node("invoke_agent bot", {**AGENT, "error.type": "openai.InternalServerError"}, failed,
                                   status_code=StatusCode.ERROR, status_message="Error code: 500")))  # fmt: skip
        assert (True, False, False, RunStatus.ERROR) == attrgetter(
            "errored", "safety_blocked", "hit_max_iterations", "status"
        )(run)


class TestUserRules:
    def test_own_exception_type(self) -> None:
        detector = Detector(
            DetectionConfig.from_mapping({"hit_max_iterations": {"exception_types": ["BudgetExhausted"]}})
        )
        spans = trace(node("invoke_agent bot", AGENT, events=(_exc("app.errors.BudgetExhausted", "no budget"),),
                           status_code=StatusCode.ERROR))  # fmt: skip
        assert not normalise(spans).hit_max_iterations
        run = normalise(spans, detector=detector)
        assert [("user.limit.exception", "invoke_agent bot")] == _evidence(run, "hit_max_iterations")

    def test_message_pattern_and_attribute(self) -> None:
        config = DetectionConfig.from_mapping(
            {
                "safety_blocked": {
                    "messages": [r"answer (was )?withheld"],
                    "attributes": {"app.verdict": ["withheld"]},
                },
            }
        )
        detector = Detector(config)
        by_message = trace(
            node("invoke_agent bot", AGENT, status_code=StatusCode.ERROR, status_message="Answer withheld")
        )
        by_attr = trace(node("invoke_agent bot", {**AGENT, "app.verdict": "WITHHELD"}))
        assert normalise(by_message, detector=detector).safety_blocked
        assert [("user.block.attribute", "invoke_agent bot")] == _evidence(
            normalise(by_attr, detector=detector), "safety_blocked"
        )

    def test_disable_builtin(self) -> None:
        detector = Detector(DetectionConfig.from_mapping({"disable": ["limit.cutoff"]}))
        spans = trace(node("invoke_agent bot", AGENT, node("chat", chat("tool_calls")), node("t", TOOL)))
        assert normalise(spans).hit_max_iterations
        assert not normalise(spans, detector=detector).hit_max_iterations

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ({"hit_max_iterations": {"messages": ["(unclosed"]}}, "detection.hit_max_iterations.messages[0]"),
            ({"disable": ["no.such.rule"]}, "unknown rule 'no.such.rule'"),
            ({"safety_blocked": {"exception_typos": ["X"]}}, "unknown key 'exception_typos'"),
            ({"limits": {}}, "unknown key 'limits'"),
            ({"safety_blocked": {"exception_types": "X"}}, "expected a list"),
        ],
    )
    def test_bad_config_is_one_line(self, data: dict[str, Any], message: str) -> None:
        with pytest.raises(DetectionConfigError, match=r"^detection") as caught:
            DetectionConfig.from_mapping(data)
        assert message in str(caught.value)
        assert "\n" not in str(caught.value)

    def test_every_builtin_can_be_disabled(self) -> None:
        detector = Detector(DetectionConfig.from_mapping({"disable": list(BUILTIN_RULES)}))
        assert not any(detector.enabled(rule) for rule in BUILTIN_RULES)


class TestInjectedMessages:
    """Framework messages that say the limit was reached, in the last LLM call's conversation."""

    def _run(self, messages: list[dict[str, str]], tool_result: str = "It is sunny.") -> Run:
        import json

        tool = {**TOOL, "gen_ai.tool.call.result": tool_result}
        last = chat(
            "stop",
            **{
                "gen_ai.input.messages": json.dumps(
                    [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in messages]
                )
            },
        )
        return normalise(
            trace(node("invoke_agent bot", AGENT, node("c1", chat("tool_calls")), node("t", tool), node("c2", last)))
        )

    def test_system_message_after_the_first(self) -> None:
        run = self._run([
            {"role": "system", "content": "You help. You have a maximum of 3 steps."},
            {"role": "user", "content": "weather?"},
            {"role": "system", "content": "You have reached the maximum number of iterations (3). Answer now."},
        ])  # fmt: skip
        assert [("limit.output", "c2")] == _evidence(run, "hit_max_iterations")

    def test_own_system_prompt_is_not_read(self) -> None:
        run = self._run([
            {"role": "system", "content": "Stop when the maximum number of steps is reached."},
            {"role": "user", "content": "weather?"},
        ])  # fmt: skip
        assert not run.hit_max_iterations

    def test_tool_message_no_tool_returned(self) -> None:
        run = self._run([
            {"role": "system", "content": "You help."},
            {"role": "user", "content": "weather?"},
            {"role": "tool", "content": "Tool call limit reached. Tool call get_weather not executed."},
        ])  # fmt: skip
        assert run.hit_max_iterations

    def test_tool_message_a_tool_returned_is_a_result(self) -> None:
        """A real tool that answers 'API call limit reached' is a tool result, not the agent's limit."""
        text = "API call limit reached for today."
        run = self._run(
            [
                {"role": "system", "content": "You help."},
                {"role": "user", "content": "q"},
                {"role": "tool", "content": text},
            ],
            tool_result=text,
        )
        assert not run.hit_max_iterations

    @given(
        st.lists(
            st.sampled_from(["Reached", "EXCEEDED", "maxHit", "hit_limit", "Stopped", "exhausts", "exceeds", "steps",
                             "white", "LimitHIT", "reach", "_", " ", ".", "7", "Iterations"]),
            max_size=12,
        )
    )  # fmt: skip
    def test_past_prefilter_never_hides_a_past_token(self, words: list[str]) -> None:
        """The cheap search run before tokenising a message finds every text whose tokens hold a past-tense mark."""
        text = "".join(words)
        if not _PAST.isdisjoint(tokens_of(text)):
            assert _PAST_TEXT.search(text)


class TestGuardDecisions:
    @pytest.mark.parametrize(
        "attrs",
        [
            {"gen_ai.guardrail.tripwire_triggered": True},
            {"microsoft.security.decision.type": "deny"},
            {"gen_ai.security.decision.type": "DENY"},
            {"guardrails.moderation.result": "flagged"},
        ],
    )
    def test_decision_attributes(self, attrs: dict[str, Any]) -> None:
        run = normalise(trace(node("invoke_agent bot", {**AGENT, **attrs})))
        assert [("block.guardrail", "invoke_agent bot")] == _evidence(run, "safety_blocked")

    @pytest.mark.parametrize(
        "attrs",
        [
            {"gen_ai.guardrail.tripwire_triggered": False},
            {"microsoft.security.decision.type": "allow"},
            {"guardrail.name": "pii"},
            {"guardrail.on_fail": "block"},
        ],
    )
    def test_passing_decisions(self, attrs: dict[str, Any]) -> None:
        assert not normalise(trace(node("invoke_agent bot", {**AGENT, **attrs}))).safety_blocked

    def test_openinference_guardrail_output(self) -> None:
        guard = node("toxicity", {"openinference.span.kind": "GUARDRAIL", "output.value": "BLOCKED"})
        run = normalise(trace(node("agent", {"openinference.span.kind": "AGENT"}, guard)))
        assert [("block.guardrail", "toxicity")] == _evidence(run, "safety_blocked")


def test_nemo_guardrails_rail_stop() -> None:
    """NeMo Guardrails marks the rail that blocked with ``rail.stop = true`` on its ``guardrails.rail`` span."""
    rail = node("guardrails.rail", {"rail.type": "input", "rail.name": "self check input", "rail.stop": True})
    passed = node("guardrails.rail", {"rail.type": "output", "rail.name": "self check output", "rail.stop": False})
    run = normalise(trace(node("guardrails.request", {}, rail, passed)))
    assert [("block.guardrail", "guardrails.rail")] == _evidence(run, "safety_blocked")


def _conversation(*messages: tuple[str, str]) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in messages])


def _gave_up(feedback: str, status: str = "UnexpectedModelBehavior: Exceeded maximum output retries (1)") -> list[Any]:
    """A run whose output check rejected the answer twice and raised, with ``feedback`` before the last answer."""
    inputs = _conversation(("user", "Who do I write to?"), ("assistant", "jane@example.com"), ("user", feedback))
    outputs = _conversation(("assistant", "jane@example.com"))
    last = node("chat gpt-4o", {**chat("stop"), "gen_ai.input.messages": inputs, "gen_ai.output.messages": outputs})
    return trace(node("invoke_agent bot", AGENT, node("chat gpt-4o", chat("stop")), last,
                      status_code=StatusCode.ERROR, status_message=status))  # fmt: skip


class TestOutputChecks:
    """``block.output_check``: an output check that gave up is a block when its rejection names a policy."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Exceeded maximum output retries (1)", True),
            ("Exceeded maximum retries (3) for output validation", True),
            ("Task failed guardrail validation after 3 retries. Last error: x", True),
            ("Connection failed after 3 retries", False),
            ("Max turns exceeded", False),
        ],
    )
    def test_spent(self, text: str, expected: bool) -> None:
        assert expected == output_check_spent(text)

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("The answer contains personal data (an e-mail address).", True),
            ("PII found in the answer", True),
            ("The answer is harmful; rewrite it.", True),
            ("That topic is not allowed here.", True),
            ("This violates the company policy.", True),
            ("The answer is not valid JSON. Reply with a JSON object.", False),
            ("Missing field 'summary'.", False),
            ("The answer must be shorter than 200 characters.", False),
            # the feedback of an output guard (block.output_guard) is read with the same words
            ("The answer reveals a social security number. Answer without it.", True),
            ("SSN found in the answer", True),
            ("Do not print the customer's card number.", True),
            ("The answer includes a date of birth.", True),
            ("Remove the e-mail address from the answer.", True),
            ("Check no_personal_data failed with error: ", True),
            ("That breaks our content policy.", True),
            ("Name your source in square brackets at the end.", False),
            ("Check long_enough failed with error: ", False),
            ("Use the security group sg-1 in the answer.", False),
        ],
    )
    def test_policy_words(self, text: str, expected: bool) -> None:
        assert expected == policy_words(text)

    def test_policy_rejection_blocks(self) -> None:
        run = normalise(_gave_up("Your answer failed validation: it contains personal data."))
        assert (RunStatus.BLOCKED, True) == (run.status, run.errored)
        assert [("block.output_check", "invoke_agent bot")] == _evidence(run, "safety_blocked")

    def test_format_rejection_stays_an_error(self) -> None:
        run = normalise(_gave_up("Your answer failed validation: not valid JSON."))
        assert (RunStatus.ERROR, False) == (run.status, run.safety_blocked)

    def test_rejection_in_the_exception_message(self) -> None:
        status = "Exceeded maximum retries (2) for output validation: the answer is unsafe"
        run = normalise(_gave_up("Try again.", status=status))
        assert [("block.output_check", "invoke_agent bot")] == _evidence(run, "safety_blocked")

    def test_a_policy_word_without_a_spent_check_is_no_block(self) -> None:
        """The same feedback with an unrelated error reaching the caller: nothing gave up, no block."""
        run = normalise(_gave_up("It contains personal data.", status="ValueError: boom"))
        assert not run.safety_blocked

    def test_user_rejections_and_disable(self) -> None:
        feedback = "Your answer breaks the brand guidelines."
        assert not normalise(_gave_up(feedback)).safety_blocked
        config = {"safety_blocked": {"rejections": ["brand guidelines"]}, "disable": ["block.output_check"]}
        run = normalise(_gave_up(feedback), detector=Detector(DetectionConfig.from_mapping(config)))
        assert [("user.block.rejection", "invoke_agent bot")] == _evidence(run, "safety_blocked")
        off = Detector(DetectionConfig.from_mapping({"disable": ["block.output_check"]}))
        assert not normalise(_gave_up("It contains personal data."), detector=off).safety_blocked

    def test_bad_rejection_pattern_is_one_line(self) -> None:
        with pytest.raises(DetectionConfigError, match=r"safety_blocked\.rejections\[0\]: invalid regular expression"):
            DetectionConfig.from_mapping({"safety_blocked": {"rejections": ["("]}})


def _call(name: str, inputs: list[tuple[str, str]], answer: str, finish: str = "stop") -> Any:
    """One GenAI chat span: its input conversation and its one assistant answer."""
    attrs = {
        **chat(finish),
        "gen_ai.input.messages": _conversation(*inputs),
        "gen_ai.output.messages": _conversation(("assistant", answer)),
    }
    return node(name, attrs)


PROMPT = ("user", "Which booking do I have?")
SSN_ANSWER = "Your booking is under SSN 078-05-1120."


def _retried(feedback: list[tuple[str, str]], *between: Any, resend_answer: bool = True) -> list[Any]:
    """A run whose first answer a check sent back with ``feedback``; the second answer passed (no error).

    ``resend_answer``: the rejected answer stays in the next call's conversation (PydanticAI, smolagents);
    else the framework discarded it (Strands' ``Guide`` after a model call).
    """
    again = [PROMPT, *([("assistant", SSN_ANSWER)] if resend_answer else []), *feedback]
    return trace(
        node(
            "invoke_agent bot",
            AGENT,
            _call("chat 1", [PROMPT], SSN_ANSWER),
            *between,
            _call("chat 2", again, "Your booking is confirmed."),
        )
    )


class TestOutputGuards:
    """``block.output_guard``: an answer sent back with feedback that names a safety reason blocks the run,
    even when a later answer passed (issue 40, item 1)."""

    def test_retry_feedback_after_the_answer_blocks(self) -> None:
        """PydanticAI's shape: the rejected answer, then the validator's ModelRetry text as a user message."""
        feedback = [("user", "Validation failed:\n<pyai:retry_feedback>The answer reveals a social security number.")]
        run = normalise(_retried(feedback))
        assert (RunStatus.BLOCKED, False) == (run.status, run.errored)
        assert [("block.output_guard", "chat 2")] == _evidence(run, "safety_blocked")
        assert "social security number" in run.evidence[0].value

    def test_guidance_in_place_of_a_discarded_answer_blocks(self) -> None:
        """Strands' shape: the answer is discarded, the guard's guidance follows the prompt."""
        feedback = [("user", "[pii-guard] Your answer exposed a social security number; answer again.")]
        run = normalise(_retried(feedback, resend_answer=False))
        assert [("block.output_guard", "chat 2")] == _evidence(run, "safety_blocked")

    def test_form_rejection_is_no_block(self) -> None:
        """A rejection that names no safety reason — even of an answer that mentions an SSN — blocks nothing:
        the answer's own text is taken out of the feedback before its words are read."""
        run = normalise(_retried([("user", "Name your source in brackets. You wrote: " + SSN_ANSWER)]))
        assert (RunStatus.OK, False) == (run.status, run.safety_blocked)

    def test_another_history_carries_no_feedback(self) -> None:
        """The next call does not extend the answering call's conversation (another agent): no rejection."""
        spans = trace(
            node(
                "invoke_agent bot",
                AGENT,
                _call("chat 1", [PROMPT], SSN_ANSWER),
                _call("chat 2", [("user", "Summarise"), ("user", "It holds a social security number.")], "ok"),
            )
        )
        assert not normalise(spans).safety_blocked

    def test_a_new_invocation_is_a_new_turn(self) -> None:
        """The next call belongs to another agent invocation (a chat's next turn in the same trace): the user's
        new message is no check's feedback, whatever it says."""
        again = [PROMPT, ("assistant", SSN_ANSWER), ("user", "Is my social security number stored?")]
        spans = trace(
            node(
                "chat session",
                {},
                node("invoke_agent bot", AGENT, _call("chat 1", [PROMPT], SSN_ANSWER)),
                node("invoke_agent bot", AGENT, _call("chat 2", again, "No.")),
            )
        )
        assert not normalise(spans).safety_blocked

    @pytest.mark.parametrize("finish", ["tool_calls", "stop"])
    def test_tool_results_after_a_tool_request_are_no_rejection(self, finish: str) -> None:
        """The model asked for a tool (by finish reason, or a tool ran: ReAct prose, a Responses API call that
        finished ``completed``): what follows is the tool's result, whatever it says."""
        spans = trace(
            node(
                "invoke_agent bot",
                AGENT,
                _call("chat 1", [PROMPT], "", finish=finish),
                node("execute_tool search", TOOL),
                _call("chat 2", [PROMPT, ("assistant", ""), ("user", "The SSN lookup found a date of birth.")], "ok"),
            )
        )
        assert not normalise(spans).safety_blocked

    def test_check_span_is_the_evidence(self) -> None:
        """A span that recorded the check between the two calls is the one the evidence names."""
        check = node("output validator no_ssn", {})
        run = normalise(_retried([("user", "The answer reveals a social security number.")], check))
        assert [("block.output_guard", "output validator no_ssn")] == _evidence(run, "safety_blocked")

    def test_user_rejections_and_disable(self) -> None:
        feedback = [("user", "Your answer breaks the brand guidelines.")]
        assert not normalise(_retried(feedback)).safety_blocked
        config = {"safety_blocked": {"rejections": ["brand guidelines"]}}
        run = normalise(_retried(feedback), detector=Detector(DetectionConfig.from_mapping(config)))
        assert [("user.block.rejection", "chat 2")] == _evidence(run, "safety_blocked")
        off = Detector(DetectionConfig.from_mapping({"disable": ["block.output_guard"]}))
        assert not normalise(_retried([("user", "It holds a social security number.")]), detector=off).safety_blocked

    def test_answer_tool_feedback(self) -> None:
        """smolagents' shape: the answer went through the answer tool, whose result repeats it; the failed
        check's error follows as a tool response."""
        before = [Message("system", "You solve tasks."), Message("user", "Book my trip."), Message("assistant", "")]
        after = [
            *before[:2],
            Message("tool-call", "Calling tools: final_answer"),
            Message("tool-response", "Observation:\nBooked for SSN 078-05-1120."),
            Message("tool-response", "Error:\nCheck long_enough failed with error: "),
            Message("assistant", ""),
        ]
        found = rejection_feedback(before, after, ("Booked for SSN 078-05-1120.",))
        assert [s for s, _ in found] == ["input.tool-response_message", "input.tool-response_message"]
        assert not any(policy_words(text) for _, text in found)  # the answer's own "SSN" is taken out
        assert [] == rejection_feedback(before, before)  # nothing added: no feedback

    def test_output_tool_retry_names_the_output_function_span(self) -> None:
        """PydanticAI's output tool: the answer is a ``final_result`` call (no tool call), its output function
        raised ``ModelRetry`` (retry attributes on its span), the reason comes back as the call's response."""
        call = ("assistant", 'tool_call final_result({"summary": "SSN 078-05-1120"})')
        first = _call("chat 1", [PROMPT], call[1], finish="tool_call")
        rejected = node(
            "execute_tool final_result",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "final_result",
             "pydantic_ai.tool.retry.cause": "model_retry"},
            status_code=StatusCode.ERROR,
        )  # fmt: skip
        again = _call("chat 2", [PROMPT, call, ("user", "The summary reveals a social security number.")], "ok")
        passed = node("execute_tool final_result", {"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.name": "final_result"})  # fmt: skip
        run = normalise(trace(node("invoke_agent bot", AGENT, first, rejected, again, passed), scope="pydantic-ai"))
        assert (0, 0, RunStatus.BLOCKED) == (run.tool_calls, run.tool_errors, run.status)
        assert [("block.output_guard", "execute_tool final_result")] == _evidence(run, "safety_blocked")

    def test_benign_rejections_excuse_a_built_in_term(self) -> None:
        """A user's ``benign_rejections`` say a rejection that holds a built-in term is about form."""
        feedback = [("user", "The phone number format is wrong: use +44.")]
        assert normalise(_retried(feedback)).safety_blocked
        config = {"safety_blocked": {"benign_rejections": ["phone number format"]}}
        detector = Detector(DetectionConfig.from_mapping(config))
        assert not normalise(_retried(feedback), detector=detector).safety_blocked
        assert not normalise(_gave_up("The phone number format is wrong."), detector=detector).safety_blocked
        with pytest.raises(DetectionConfigError, match=r"safety_blocked\.benign_rejections\[0\]: invalid"):
            DetectionConfig.from_mapping({"safety_blocked": {"benign_rejections": ["("]}})

    def test_every_rule_id_can_be_disabled(self) -> None:
        assert "block.output_guard" in BUILTIN_RULES


class TestGrowingText:
    """The lower-cased marker search that reads only what a growing input added."""

    _PIECES = st.sampled_from(
        ["MUST give your", " absolute BEST", " Final answer", "must give your absolute best final answer", "]", ",",
         '{"role":"user"}', "İ", "\u212a", "Σ", "ß", " ", "x"]
    )  # fmt: skip

    @given(st.lists(st.tuples(st.sampled_from(["grow", "grow-json", "new"]), st.lists(_PIECES, max_size=5)),
                    max_size=10))  # fmt: skip
    def test_same_as_lowering_every_text(self, steps: list[tuple[str, list[str]]]) -> None:
        marker = CREWAI_FORCE_FINAL_ANSWER
        search = GrowingText(marker, short=0)
        text = ""
        for how, pieces in steps:
            added = "".join(pieces)
            if how == "grow":
                text += added
            elif how == "grow-json":
                text = (text[:-1] + "," if text.endswith("]") else text + "[") + added + "]"
            else:
                text = added
            assert search(text) == (marker in text.lower()), text

    def test_a_marker_split_across_the_join_is_found(self) -> None:
        """The text grown past the last one completes a marker the last one began."""
        search = GrowingText(CREWAI_FORCE_FINAL_ANSWER, short=0)
        first = "Now it's time you MUST give your absolute"
        assert not search(first)
        assert search(first + " BEST Final Answer.")
        assert search(first + " BEST Final Answer. More.")  # the last text held it: so does this one
        assert not search("[1]")
        assert not search("[1,2]")  # grown past its "]"

    def test_short_texts_are_searched_whole_and_long_ones_remembered(self) -> None:
        search = GrowingText(CREWAI_FORCE_FINAL_ANSWER, short=64)
        long = "x" * 100 + " must give your absolute"
        assert not search(long)
        assert search(long + " best final answer")  # grown: only the join and what follows searched
        assert not search("short, no marker")

    @pytest.mark.parametrize("marker", ["Upper", "a]b", "é"])
    def test_markers_it_cannot_search_are_refused(self, marker: str) -> None:
        with pytest.raises(ValueError, match="marker"):
            GrowingText(marker)
