"""What the demo fleet sends: agents, run kinds, the mix, scripted scenarios and their ground truth.

Pure and deterministic: everything here is a function of the seed. A *scenario* is one
scripted conversation of one agent (``support.looping.3``): the turns the fake model answers
with, the agent's settings (iteration cap, optimal steps) and what the world does to it (a
tool that fails, a guardrail that blocks, a slow backend). Each run of the fleet plays one
scenario under its own tag, and :func:`expected` tells what Vigil should derive from it.

The mix is dealt from shuffled *decks* of 100 runs holding exactly :data:`MIX` of each kind,
so any 100 consecutive runs from the start of a deck have the configured proportions.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from collector.demo.fakeopenai import (
    ContentFilterTurn,
    ErrorTurn,
    RefusalTurn,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    Usage,
)

__all__ = [
    "AGENTS",
    "MIX",
    "AgentSpec",
    "Fault",
    "Kind",
    "RunPlan",
    "Scenario",
    "expected",
    "plan_runs",
    "planner",
    "scenario",
    "scenarios",
]


class Kind(str, Enum):
    """What a demo run is meant to be."""

    GOOD = "good"
    INEFFICIENT = "inefficient"
    LOOPING = "looping"
    CONTENT_FILTER = "content_filter"
    GUARDRAIL = "guardrail"
    TOOL_FAILURE = "tool_failure"
    SLOW = "slow"
    ERROR = "error"
    THUMBS_DOWN = "thumbs_down"


MIX: Final[Mapping[Kind, int]] = {
    Kind.GOOD: 75,
    Kind.INEFFICIENT: 5,
    Kind.LOOPING: 4,
    Kind.CONTENT_FILTER: 3,
    Kind.GUARDRAIL: 3,
    Kind.TOOL_FAILURE: 4,
    Kind.SLOW: 2,
    Kind.ERROR: 2,
    Kind.THUMBS_DOWN: 2,
}
"""Runs of each kind per deck of 100."""

DECK: Final = sum(MIX.values())
VARIANTS: Final = 6
"""Scripted variants per (agent, kind); a run picks one at random."""

Args = Callable[[random.Random], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One simulated agent.

    Attributes:
        name: ``gen_ai.agent.name``.
        model: the model it asks for.
        tools: tool name -> generator of plausible arguments.
        optimal_steps: LLM calls a good run needs (declared on the root span).
        max_iterations: the iteration cap.
        weight: relative share of the traffic.
        prompts: user requests it receives.
        answers: final answers it gives.
    """

    name: str
    model: str
    tools: Mapping[str, Args]
    optimal_steps: int
    max_iterations: int
    weight: int
    prompts: tuple[str, ...]
    answers: tuple[str, ...]


def _id(prefix: str, digits: int = 5) -> Args:
    key = {"A": "order_id", "C": "customer_id", "INV": "invoice_id", "ACC": "account_id", "T": "ticket_id"}[prefix]
    return lambda rng: {key: f"{prefix}-{rng.randrange(10 ** (digits - 1), 10**digits)}"}


def _pick(key: str, values: tuple[str, ...]) -> Args:
    return lambda rng: {key: rng.choice(values)}


_TOPICS = ("vector databases", "EU AI act", "battery recycling", "RISC-V adoption", "heat pumps", "GLP-1 supply")

AGENTS: Final[tuple[AgentSpec, ...]] = (
    AgentSpec(
        "support", "gpt-4o-mini",
        {"lookup_order": _id("A"), "get_customer": _id("C"),
         "search_kb": _pick("query", ("return policy", "shipping times", "warranty", "reset password"))},
        optimal_steps=2, max_iterations=10, weight=40,
        prompts=("Where is my order?", "Can I return a damaged kettle?", "I never got my refund."),
        answers=("Your order ships tomorrow.", "Yes: returns are free within 30 days.", "The refund is on its way."),
    ),
    AgentSpec(
        "research", "gpt-4.1",
        {"web_search": _pick("query", _TOPICS), "fetch_page": lambda rng: {"url": f"https://example.org/{rng.randrange(999)}"},
         "summarize": _pick("topic", _TOPICS)},
        optimal_steps=3, max_iterations=16, weight=20,
        prompts=("Summarise recent work on {t}.", "What changed this year in {t}?", "Give me three sources on {t}."),
        answers=("Here is a short summary with sources.", "Three developments stand out.", "Sources attached."),
    ),
    AgentSpec(
        "billing", "gpt-4o",
        {"get_invoice": _id("INV"), "get_balance": _id("ACC"), "issue_refund": _id("INV")},
        optimal_steps=2, max_iterations=10, weight=25,
        prompts=("Why was I charged twice?", "What is my balance?", "Please refund my last invoice."),
        answers=("The duplicate charge was reversed.", "Your balance is 42.10 EUR.", "Refund issued."),
    ),
    AgentSpec(
        "triage", "gpt-4.1-mini",
        {"classify_ticket": _id("T"), "route_ticket": _id("T")},
        optimal_steps=1, max_iterations=6, weight=15,
        prompts=("New ticket: app crashes on login.", "New ticket: invoice PDF is blank.", "New ticket: feature idea."),
        answers=("Routed to mobile, priority P2.", "Routed to billing, P3.", "Routed to product, P4."),
    ),
)  # fmt: skip
"""The fleet's agents."""

_BY_NAME: Final = {a.name: a for a in AGENTS}


class Fault(str, Enum):
    """What goes wrong in a tool call."""

    RECOVERABLE = "recoverable"
    """The tool raises; the agent reports the error to the model and carries on."""
    FATAL = "fatal"
    """The tool raises an error the agent does not handle; it reaches the caller."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scripted conversation of one agent.

    Attributes:
        name: the fake server's script name, ``AGENT.KIND.VARIANT``.
        agent: the agent's spec.
        kind: what runs of it are meant to be.
        turns: the fake model's answers (the last one repeats).
        prompt: the user's request.
        raise_on_max: reaching the cap raises to the caller instead of ending gracefully.
        guardrail: ``"input"`` or ``"output"`` when a guardrail blocks the run there.
        fault_at: 0-based ordinal (over the run) of the tool call that fails, if any.
        fault: how that call fails.
        slow_s: extra seconds the tool backends take over the whole run.
        feedback: the user's feedback on the answer (``"thumbs_down"``), if any.
    """

    name: str
    agent: AgentSpec
    kind: Kind
    turns: tuple[Turn, ...]
    prompt: str
    raise_on_max: bool = False
    guardrail: str | None = None
    fault_at: int | None = None
    fault: Fault | None = None
    slow_s: float = 0.0
    feedback: str | None = None

    @property
    def tool_call_count(self) -> int:
        """Tool calls the script asks for (a looping script asks again every turn: counted once)."""
        return sum(len(t.calls) for t in self.turns if isinstance(t, ToolCallTurn))

    def fault_of(self, ordinal: int) -> Fault | None:
        """How tool call number ``ordinal`` (0-based over the run) fails, or None."""
        return self.fault if ordinal == self.fault_at else None


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run to send: a scenario, and the tag that keeps its requests apart from other runs."""

    index: int
    tag: str
    scenario: Scenario

    @property
    def marker(self) -> str:
        """The ``[[scenario:NAME#TAG]]`` marker the first user message carries."""
        return f"[[scenario:{self.scenario.name}#{self.tag}]]"


def scenarios(seed: int = 0) -> list[Scenario]:
    """Every scenario a fleet with ``seed`` may play (to register them with the fake server)."""
    return [scenario(a.name, kind, v, seed) for a in AGENTS for kind in Kind for v in range(VARIANTS)]


@functools.lru_cache(maxsize=2048)
def scenario(agent: str, kind: Kind, variant: int, seed: int = 0) -> Scenario:
    """The scripted scenario ``agent.kind.variant`` (deterministic in its arguments).

    Raises:
        KeyError: unknown agent.
    """
    spec = _BY_NAME[agent]
    rng = random.Random(f"{seed}/{agent}/{kind.value}/{variant}")
    prompt = rng.choice(spec.prompts).format(t=rng.choice(_TOPICS))
    return _BUILDERS[kind](f"{agent}.{kind.value}.{variant}", spec, rng, prompt)


def _calls(spec: AgentSpec, rng: random.Random, turns: int, parallel: float = 0.0) -> list[Turn]:
    """``turns`` tool-calling turns with fresh arguments; some ask for two tools at once."""
    out: list[Turn] = []
    for _ in range(turns):
        width = 2 if rng.random() < parallel else 1
        names = rng.sample(sorted(spec.tools), min(width, len(spec.tools)))
        out.append(ToolCallTurn(tuple(ToolCall(n, spec.tools[n](rng)) for n in names)))
    return out


def _good(name: str, spec: AgentSpec, rng: random.Random, prompt: str, kind: Kind = Kind.GOOD) -> Scenario:
    low = 2 if kind is Kind.SLOW else 1  # slow runs spend their time in tool calls
    steps = rng.randint(max(low, spec.optimal_steps - 1), max(low, spec.optimal_steps + 1))
    turns = (*_calls(spec, rng, steps - 1, parallel=0.2), TextTurn(rng.choice(spec.answers)))
    slow_s = round(rng.uniform(4.0, 8.0), 2) if kind is Kind.SLOW else 0.0
    feedback = "thumbs_down" if kind is Kind.THUMBS_DOWN else None
    return Scenario(name, spec, kind, turns, prompt, slow_s=slow_s, feedback=feedback)


def _inefficient(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    steps = 4 * spec.optimal_steps + rng.randint(0, 1)  # efficiency <= 0.25, under the cap
    turns = (*_calls(spec, rng, steps - 1), TextTurn(rng.choice(spec.answers)))
    return Scenario(name, spec, Kind.INEFFICIENT, turns, prompt)


def _looping(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    (same,) = _calls(spec, rng, 1)  # the model asks for the same call forever
    return Scenario(name, spec, Kind.LOOPING, (same,), prompt, raise_on_max=rng.random() < 0.5)


def _content_filter(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    turns = (*_calls(spec, rng, rng.randint(0, 1)), ContentFilterTurn(rng.choice(("I can", "Sure, here", ""))))
    return Scenario(name, spec, Kind.CONTENT_FILTER, turns, prompt)


def _guardrail(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    where = rng.choice(("input", "output"))
    turns = (*_calls(spec, rng, rng.randint(0, 1)), TextTurn(rng.choice(spec.answers)))
    return Scenario(name, spec, Kind.GUARDRAIL, turns, prompt, guardrail=where)


def _tool_failure(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    calls = _calls(spec, rng, rng.randint(1, 2))
    turns = (*calls, TextTurn("Sorry, that system is not answering right now."))
    fault_at = rng.randrange(len(calls))
    return Scenario(name, spec, Kind.TOOL_FAILURE, turns, prompt, fault_at=fault_at, fault=Fault.RECOVERABLE)


def _error(name: str, spec: AgentSpec, rng: random.Random, prompt: str) -> Scenario:
    calls = _calls(spec, rng, rng.randint(0, 1))
    if calls and rng.random() < 0.5:  # a backend bug the agent does not handle
        turns = (*calls, TextTurn(rng.choice(spec.answers)))
        return Scenario(name, spec, Kind.ERROR, turns, prompt, fault_at=0, fault=Fault.FATAL)
    failure = ErrorTurn(500, "The server had an error while processing your request.", "server_error")
    return Scenario(name, spec, Kind.ERROR, (*calls, failure), prompt)


_BUILDERS: Final[Mapping[Kind, Callable[[str, AgentSpec, random.Random, str], Scenario]]] = {
    Kind.GOOD: _good,
    Kind.SLOW: lambda n, s, r, p: _good(n, s, r, p, Kind.SLOW),
    Kind.THUMBS_DOWN: lambda n, s, r, p: _good(n, s, r, p, Kind.THUMBS_DOWN),
    Kind.INEFFICIENT: _inefficient,
    Kind.LOOPING: _looping,
    Kind.CONTENT_FILTER: _content_filter,
    Kind.GUARDRAIL: _guardrail,
    Kind.TOOL_FAILURE: _tool_failure,
    Kind.ERROR: _error,
}


def expected(s: Scenario) -> dict[str, Any]:
    """What Vigil should derive from one run of ``s``: the fleet's ground truth.

    Keys: ``agent``, ``llm_calls``, ``tool_calls``, ``tool_errors``, ``input_tokens``,
    ``output_tokens``, ``hit_max_iterations``, ``safety_blocked``, ``errored`` (the run
    fields of Vigil's API), plus ``feedback`` (the user's intended feedback) and
    ``optimal_steps``.

    The agent ticks one iteration before each LLM call; the tick that reaches
    ``max_iterations`` marks the cap hit and stops it (so at most ``max_iterations - 1``
    LLM calls). A content filter, a final answer, a fatal tool fault or an API error ends
    the run.
    """
    truth: dict[str, Any] = dict.fromkeys(
        ("llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens"), 0
    )
    truth |= {"agent": s.agent.name, "hit_max_iterations": False, "safety_blocked": False, "errored": False}
    truth |= {"feedback": s.feedback, "optimal_steps": s.agent.optimal_steps}
    if s.guardrail == "input":
        truth["safety_blocked"] = True
        return truth
    for index in range(s.agent.max_iterations):
        if index + 1 == s.agent.max_iterations:
            truth["hit_max_iterations"] = True
            truth["errored"] = s.raise_on_max
            break
        turn = s.turns[min(index, len(s.turns) - 1)]
        truth["llm_calls"] += 1
        if not isinstance(turn, ErrorTurn):
            usage = turn.usage or Usage.for_turn(index)
            truth["input_tokens"] += usage.prompt_tokens
            truth["output_tokens"] += usage.completion_tokens
        if not _tally_turn(s, turn, truth):
            break
    return truth


def _tally_turn(s: Scenario, turn: Turn, truth: dict[str, Any]) -> bool:
    """Count one answered turn into ``truth``; False when the run ends with it."""
    if isinstance(turn, ErrorTurn):
        truth["errored"] = True
        return False
    if isinstance(turn, ContentFilterTurn):
        truth["safety_blocked"] = True
        return False
    if isinstance(turn, TextTurn):
        truth["safety_blocked"] = s.guardrail == "output"
        return False
    if isinstance(turn, RefusalTurn):
        truth["safety_blocked"] = True
        return False
    for _ in turn.calls:
        fault = s.fault_of(truth["tool_calls"])
        truth["tool_calls"] += 1
        if fault is not None:
            truth["tool_errors"] += 1
            if fault is Fault.FATAL:
                truth["errored"] = True
                return False
    return True


def planner(seed: int) -> Iterator[RunPlan]:
    """The endless sequence of runs for ``seed``: kinds dealt from shuffled decks of :data:`MIX`."""
    rng = random.Random(seed)
    deck = [kind for kind, count in MIX.items() for _ in range(count)]
    weights = [a.weight for a in AGENTS]
    index = 0
    while True:
        rng.shuffle(deck)
        for kind in deck:
            agent = rng.choices(AGENTS, weights)[0]
            sc = scenario(agent.name, kind, rng.randrange(VARIANTS), seed)
            yield RunPlan(index, f"s{seed}r{index}", sc)
            index += 1


def plan_runs(seed: int, count: int) -> list[RunPlan]:
    """The first ``count`` runs of :func:`planner`."""
    plans = planner(seed)
    return [next(plans) for _ in range(count)]
