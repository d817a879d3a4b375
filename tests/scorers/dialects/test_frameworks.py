"""Framework adapters: each framework's quirks, on spans shaped like its instrumentor's.

The captured traces (tests/fixtures/traces, tests/scorers/test_captured_traces.py) check the
same on real instrumentor output; these pin each rule on its own, with spans built here.
"""

from __future__ import annotations

from typing import Any

from collector.model import StatusCode
from scorers.model import RunStatus, StepKind
from scorers.normalise import normalise
from tests.support.spans import node, trace

K = StepKind
OI_LLM = {"openinference.span.kind": "LLM", "llm.token_count.prompt": 100, "llm.token_count.completion": 20}
OI_TOOL = {"openinference.span.kind": "TOOL"}
OI_AGENT = {"openinference.span.kind": "AGENT"}
OI_CHAIN = {"openinference.span.kind": "CHAIN"}


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {**OI_TOOL, "tool.name": name, **extra}


class TestCrewAI:
    """``<role>._execute_core`` agent spans under a ``<crew>.kickoff`` root."""

    SCOPE = "openinference.instrumentation.crewai"

    def test_agent_role(self) -> None:
        """The agent is the role, not the entry method; the crew root does not name it."""
        spans = trace(
            node(
                "travel_crew.kickoff",
                OI_CHAIN,
                node("travel_agent._execute_core", OI_AGENT, node("get_weather.run", _tool("get_weather"))),
            ),
            scope=self.SCOPE,
        )
        run = normalise(spans)
        assert ("travel_agent", 1) == (run.agent, run.tool_calls)

    def test_other_scope_keeps_the_name(self) -> None:
        """The same span name from another instrumentation is not stripped."""
        run = normalise(trace(node("travel_agent._execute_core", OI_AGENT), scope="my.instrumentation"))
        assert "travel_agent._execute_core" == run.agent


class TestSmolagents:
    """``<name>.run`` agent spans; ``final_answer`` is how the agent answers."""

    SCOPE = "openinference.instrumentation.smolagents"

    def test_final_answer_is_no_tool_call(self) -> None:
        """``final_answer`` is not counted, is an OTHER step, and is no cut-off after a tool request."""
        spans = trace(
            node(
                "sa_travel_agent.run",
                OI_AGENT,
                node("Step 1", OI_CHAIN, node("m", OI_LLM), node("SimpleTool", _tool("get_weather"))),
                node(
                    "Step 2",
                    OI_CHAIN,
                    node("m", {**OI_LLM, "llm.finish_reason": "tool_calls"}),
                    node("FinalAnswerTool", _tool("final_answer")),
                ),
            ),
            scope=self.SCOPE,
        )
        run = normalise(spans)
        assert ("sa_travel_agent", 2, 1, ("get_weather",)) == (
            run.agent,
            run.llm_calls,
            run.tool_calls,
            tuple(t.name for t in run.tools),
        )
        assert K.OTHER == next(s.kind for s in run.steps if s.name == "FinalAnswerTool")
        assert (False, RunStatus.OK) == (run.hit_max_iterations, run.status)

    def test_final_answer_elsewhere_is_a_tool(self) -> None:
        """Outside smolagents a tool called ``final_answer`` is an ordinary tool call."""
        run = normalise(trace(node("agent", OI_AGENT, node("final_answer", _tool("final_answer")))))
        assert 1 == run.tool_calls


class TestDSPy:
    """``<Module>.forward`` root, ``<tool>.__call__`` tools, ReAct's ``finish``."""

    SCOPE = "openinference.instrumentation.dspy"

    def test_module_class_tools_and_finish(self) -> None:
        """The module class names the agent; tools lose ``.__call__``; ``finish`` is no tool call."""
        spans = trace(
            node(
                "TravelAgent.forward",
                OI_CHAIN,
                node(
                    "ReAct.forward",
                    OI_CHAIN,
                    node("LM.__call__", OI_LLM),
                    node("get_weather.__call__", OI_TOOL),
                    node("LM.__call__", OI_LLM),
                    node("finish.__call__", OI_TOOL),
                ),
            ),
            scope=self.SCOPE,
        )
        run = normalise(spans)
        assert ("TravelAgent", 2, ("get_weather",)) == (run.agent, run.llm_calls, tuple(t.name for t in run.tools))

    def test_litellm_completion_nested_in_lm_call(self) -> None:
        """LiteLLM's ``completion`` inside ``LM.__call__``: one call, its usage filled in."""
        bare_lm = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}
        spans = trace(
            node("TravelAgent.forward", OI_CHAIN, node("LM.__call__", bare_lm, node("completion", OI_LLM))),
            scope=self.SCOPE,
        )
        run = normalise(spans)
        assert (1, 100, 20) == (run.llm_calls, run.input_tokens, run.output_tokens)


class TestLlamaIndex:
    """``<class>.<method>`` spans; private LLM helpers; the agent named in workflow events."""

    SCOPE = "openinference.instrumentation.llama_index"

    def _run(self, step_output: str) -> list[Any]:
        helper = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}
        return trace(
            node(
                "FunctionAgent.run",
                OI_CHAIN,
                node(
                    "BaseWorkflowAgent.run_agent_step",
                    OI_CHAIN,
                    node("OpenAI._prepare_chat_with_tools", helper),
                    node("OpenAI.achat", OI_LLM),
                ),
                node("BaseWorkflowAgent.parse_agent_output", {**OI_CHAIN, "input.value": step_output}),
            ),
            scope=self.SCOPE,
        )

    def test_helper_is_no_model_call(self) -> None:
        """``OpenAI._prepare_chat_with_tools`` is an OTHER step; ``OpenAI.achat`` is the call."""
        run = normalise(self._run("{}"))
        assert 1 == run.llm_calls
        assert K.OTHER == next(s.kind for s in run.steps if s.name == "OpenAI._prepare_chat_with_tools")

    def test_agent_from_workflow_event(self) -> None:
        """``current_agent_name='…'`` in an event repr names the agent."""
        event = '{"ev": "AgentOutput(response=..., current_agent_name=\'travel_agent\', raw={})"}'
        assert "travel_agent" == normalise(self._run(event)).agent

    def test_agent_class_without_event(self) -> None:
        """Without the event, the root's class (``FunctionAgent``), not ``FunctionAgent.run``."""
        assert "FunctionAgent" == normalise(self._run("{}")).agent


class TestAutoGen:
    """AutoGen's own GenAI spans and OpenInference spans of the same calls."""

    SCOPE = "openinference.instrumentation.autogen_agentchat"

    def _agent(self, tool_status: StatusCode = StatusCode.UNSET) -> Any:
        native = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c1"}
        return node(
            "invoke_agent travel_agent",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel_agent"},
            node(
                "travel_agent.on_messages_stream",
                {**OI_AGENT, "graph.node.id": "travel_agent"},
                node("OpenAIChatCompletionClient.create", OI_LLM),
                node(
                    "travel_agent.lookup",
                    _tool("lookup", **{"output.value": "order A-404 not found"}),
                    node("execute_tool lookup", native, status_code=tool_status, scope="autogen-core"),
                ),
                node("OpenAIChatCompletionClient.create", OI_LLM),
            ),
            scope="autogen-core",
        )

    def test_nested_tool_twin_counts_once(self) -> None:
        """The native ``execute_tool`` inside the OpenInference TOOL span is the same call."""
        run = normalise(trace(self._agent(), scope=self.SCOPE))
        assert ("travel_agent", 2, 1, 0, "c1") == (
            run.agent,
            run.llm_calls,
            run.tool_calls,
            run.tool_errors,
            run.tools[0].call_id,
        )

    def test_twin_error_fails_the_call(self) -> None:
        """Only the native twin is ERROR: the call failed."""
        run = normalise(trace(self._agent(StatusCode.ERROR), scope=self.SCOPE))
        assert (1, 1) == (run.tool_calls, run.tool_errors)
        assert run.tools[0].error is not None

    def test_team_root_names_the_run(self) -> None:
        """A team root (``team_id``) names the run by its team class, not by its first speaker."""
        team = {**OI_CHAIN, "team_id": "t1", "participant_names": "['planner', 'critic']"}
        planner = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
        spans = trace(
            node("RoundRobinGroupChat.run_stream", team, node("invoke_agent planner", planner)), scope=self.SCOPE
        )
        assert "RoundRobinGroupChat" == normalise(spans).agent


class TestOpenAIAgents:
    """The Agents SDK root stays OK when the run raised."""

    def test_first_agent_error_reached_the_caller(self) -> None:
        """An ERROR agent span under an OK ``Agent workflow`` root errs the run."""
        spans = trace(
            node(
                "Agent workflow",
                OI_AGENT,
                node("travel_agent", {**OI_AGENT, "agent.name": "travel_agent"}, status_code=StatusCode.ERROR),
                status_code=StatusCode.OK,
            ),
            scope="openinference.instrumentation.openai_agents",
        )
        run = normalise(spans)
        assert ("travel_agent", True) == (run.agent, run.errored)

    def test_other_frameworks_need_the_root(self) -> None:
        """Elsewhere an inner error the root does not show did not reach the caller."""
        spans = trace(
            node("root", OI_AGENT, node("inner", OI_AGENT, status_code=StatusCode.ERROR), status_code=StatusCode.OK)
        )
        assert not normalise(spans).errored
