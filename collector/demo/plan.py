"""What the demo fleet sends: agents, run kinds, the mix, scripted scenarios and their ground truth.

Pure and deterministic: everything here is a function of the seed. A *scenario* is one
scripted conversation of one agent (``support.looping.3``): the turns the fake model answers
with, the agent's settings (iteration cap, optimal steps) and what the world does to it (a
tool that fails, a guardrail that blocks, a slow backend). Each run of the fleet plays one
scenario under its own tag, and :func:`expected` tells what Vigil should derive from it.

The mix is dealt from shuffled *decks* of 100 runs holding exactly :data:`MIX` of each kind,
so any 100 consecutive runs from the start of a deck have the configured proportions.

**Conversations.** Runs come in *conversations* (:func:`conversations`): the turns of one agent's
chat with one user, sharing a session id (``gen_ai.conversation.id``), each turn one run dealt the
next card of the deck (so the mix per 100 runs is unchanged). A conversation is planned turn by
turn from what the user sees: it has 1–5 turns of distinct follow-up questions (:data:`LENGTHS`),
and after a turn that failed (errored, blocked, cut at the iteration cap) the user gives up
(the session ends: *abandoned*), asks the same question again (*re-ask*) or asks for a human
(:data:`AFTER_FAILURE`); after a thumbs-down the user may re-ask. Most conversations see no failure
at all. :meth:`RunPlan.signals` and :func:`session_truth` say which session signals Vigil should
find (:mod:`review_queue.sessions`). The ``triage`` agent files tickets: its sessions are one turn.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    "Act",
    "AgentSpec",
    "Fault",
    "Kind",
    "RunPlan",
    "Scenario",
    "conversations",
    "expected",
    "plan_runs",
    "planner",
    "scenario",
    "scenarios",
    "session_truth",
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
        prompts: user requests it receives (a conversation's first message).
        answers: final answers it gives.
        follow_ups: the user's later questions in a conversation, the last a closing thanks (none:
            one-turn sessions).
    """

    name: str
    model: str
    tools: Mapping[str, Args]
    optimal_steps: int
    max_iterations: int
    weight: int
    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    follow_ups: tuple[str, ...] = ()


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
        follow_ups=("When will it arrive?", "Can I change the delivery address?", "Do you ship to Norway?",
                    "Thanks, that is all."),
    ),
    AgentSpec(
        "research", "gpt-4.1",
        {"web_search": _pick("query", _TOPICS), "fetch_page": lambda rng: {"url": f"https://example.org/{rng.randrange(999)}"},
         "summarize": _pick("topic", _TOPICS)},
        optimal_steps=3, max_iterations=16, weight=20,
        prompts=("Summarise recent work on {t}.", "What changed this year in {t}?", "Give me three sources on {t}."),
        answers=("Here is a short summary with sources.", "Three developments stand out.", "Sources attached."),
        follow_ups=("Which of these matters most for Europe?", "Can you make that shorter?",
                    "Who are the main players?", "Thanks, that helps."),
    ),
    AgentSpec(
        "billing", "gpt-4o",
        {"get_invoice": _id("INV"), "get_balance": _id("ACC"), "issue_refund": _id("INV")},
        optimal_steps=2, max_iterations=10, weight=25,
        prompts=("Why was I charged twice?", "What is my balance?", "Please refund my last invoice."),
        answers=("The duplicate charge was reversed.", "Your balance is 42.10 EUR.", "Refund issued."),
        follow_ups=("Which card was used?", "Can I get the invoice as a PDF?", "When is the next payment due?",
                    "Great, thanks."),
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


class Act(str, Enum):
    """What the user does in a turn of a conversation."""

    OPEN = "open"
    """The conversation's first question."""
    FOLLOW_UP = "follow_up"
    """A new question."""
    REASK = "reask"
    """The same question again, repeated or rephrased, after a failed or disliked answer."""
    HUMAN = "human"
    """A request for a human."""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run to send: a scenario, and the tag that keeps its requests apart from other runs.

    A turn of a conversation (:func:`conversations`) also has the conversation's tag (its session
    id), its 0-based turn, the user's message, what the user does, and the scenario names of every
    turn of the conversation (its marker names them all, :class:`~collector.demo.fakeopenai.FakeOpenAI`).
    """

    index: int
    tag: str
    scenario: Scenario
    conversation: str = ""
    turn: int = 0
    message: str = ""
    act: Act = Act.OPEN
    script: tuple[str, ...] = ()

    @property
    def marker(self) -> str:
        """The scenario marker: ``[[scenario:NAME#TAG]]`` on the first user message of a lone run; a
        conversation's ``[[scenario:NAME1,NAME2,…#CONVERSATION]]`` in its system message."""
        if self.conversation:
            return f"[[scenario:{','.join(self.script)}#{self.conversation}]]"
        return f"[[scenario:{self.scenario.name}#{self.tag}]]"

    @property
    def user_message(self) -> str:
        """What the user says in this run."""
        return self.message or self.scenario.prompt

    @property
    def session_id(self) -> str:
        """The run's ``gen_ai.conversation.id``: its conversation's tag, or its own for a lone run."""
        return self.conversation or self.tag

    @property
    def signals(self) -> tuple[str, ...]:
        """The session signals this turn should raise in Vigil (:mod:`review_queue.sessions`): ``reask``,
        ``human_request`` (only when the user message reaches Vigil: an input guardrail stops the run
        before any model call, so no span carries it), ``thumbs_down`` (when the feedback is delivered)."""
        said = self.scenario.guardrail != "input"
        out = []
        if said and self.act is Act.REASK:
            out.append("reask")
        if said and self.act is Act.HUMAN:
            out.append("human_request")
        if self.scenario.feedback == "thumbs_down":
            out.append("thumbs_down")
        return tuple(out)


LENGTHS: Final[Mapping[int, int]] = {1: 30, 2: 30, 3: 22, 4: 12, 5: 6}
"""Relative weight of a conversation's planned number of questions (before any re-ask or request for a human)."""

AFTER_FAILURE: Final[Mapping[Act | None, int]] = {None: 45, Act.REASK: 35, Act.HUMAN: 20}
"""What the user does after a failed turn that answered something (a refusal, "I could not finish"):
give up (``None``: the session ends, abandoned), ask again, ask for a human. After a turn that
answered nothing (an error), re-asking is not possible in Vigil's sense: give up or ask for a human."""

AFTER_THUMBS_DOWN: Final = 0.5
"""Chance that a user who gave a thumbs-down asks the same question again."""

MAX_CONVERSATION_TURNS: Final = 7

HUMAN_REQUESTS: Final = (
    "Can I talk to a human, please?",
    "I want to speak to a real person.",
    "Please transfer me to a live agent.",
    "This is not working. Get me a human.",
)
REPHRASES: Final = ("{q}", "Sorry, I mean: {q}", "As I said, {lq}", "I asked: {q}")
"""How a re-ask says the question again: verbatim, or after a repair phrase."""

THINK_S: Final = (1.5, 6.0)
"""Seconds a demo user pauses between the answer and their next message (at pace 1)."""

SESSION_IDLE_S: Final = 60.0
"""The session idle close ``vigil run --demo`` uses unless ``session_idle_s`` is set: a minute after its
last turn a demo conversation is over (its turns are at most :data:`THINK_S` apart plus a turn's
latency, under 30 s), so closed sessions, their abandonment and their review items show within a couple
of minutes, not the 30 minutes production traffic needs (:data:`review_queue.sessions.DEFAULT_IDLE_S`)."""


def failed(s: Scenario) -> bool:
    """A run of ``s`` ends errored, blocked or at its iteration cap (Vigil's run status is not ``ok``)."""
    truth = expected(s)
    return bool(truth["errored"] or truth["safety_blocked"] or truth["hit_max_iterations"])


def answered(s: Scenario) -> bool:
    """A run of ``s`` gives the user an answer Vigil sees with the question (so a later repeat is a re-ask)."""
    return s.guardrail != "input" and not expected(s)["errored"]


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


def conversations(seed: int) -> Iterator[tuple[RunPlan, ...]]:
    """The endless sequence of conversations for ``seed``, each the runs of its turns in order.

    Runs are numbered across conversations (``RunPlan.index``) and each takes the next kind of the
    shuffled decks of :data:`MIX`, so the mix per 100 runs holds whatever the conversations' shapes.
    """
    rng = random.Random(seed)
    deal = _dealer(rng)
    # an agent's weight is its share of the runs: a conversation of a chatty agent holds more of them
    planned = sum(n * w for n, w in LENGTHS.items()) / sum(LENGTHS.values())
    weights = [a.weight / (planned if a.follow_ups else 1.0) for a in AGENTS]
    index = 0
    number = 0
    while True:
        agent = rng.choices(AGENTS, weights)[0]
        turns = _conversation(agent, rng, deal, seed)
        tag = f"s{seed}c{number}"
        script = tuple(s.name for s, _, _ in turns)
        yield tuple(
            RunPlan(index + n, f"s{seed}r{index + n}", s, tag, n, message, act, script)
            for n, (s, message, act) in enumerate(turns)
        )
        index += len(turns)
        number += 1


def _dealer(rng: random.Random) -> Iterator[Kind]:
    deck = [kind for kind, count in MIX.items() for _ in range(count)]
    while True:
        rng.shuffle(deck)
        yield from deck


def _conversation(
    agent: AgentSpec, rng: random.Random, deal: Iterator[Kind], seed: int
) -> list[tuple[Scenario, str, Act]]:
    """One conversation of ``agent``: ``(scenario, user message, act)`` per turn."""
    first = scenario(agent.name, next(deal), rng.randrange(VARIANTS), seed)
    turns = [(first, first.prompt, Act.OPEN)]
    if not agent.follow_ups:
        return turns
    planned = rng.choices(list(LENGTHS), list(LENGTHS.values()))[0]
    questions = rng.sample(agent.follow_ups, min(planned - 1, len(agent.follow_ups)))
    questions.sort(key=lambda q: q == agent.follow_ups[-1])  # the closing thanks comes last
    question = first.prompt  # the question the user would ask again
    while len(turns) < MAX_CONVERSATION_TURNS:
        last = turns[-1][0]
        act = _reaction(last, rng)
        if act is None and failed(last):
            break  # gave up: abandoned
        if act is None:
            if not questions:
                break
            question = questions.pop(0)
            act, message = Act.FOLLOW_UP, question
        elif act is Act.REASK:
            message = rng.choice(REPHRASES).format(q=question, lq=question[0].lower() + question[1:])
        else:
            message = rng.choice(HUMAN_REQUESTS)
        turns.append((scenario(agent.name, next(deal), rng.randrange(VARIANTS), seed), message, act))
        if act is Act.HUMAN:
            break  # the user waits for a person
    return turns


def _reaction(s: Scenario, rng: random.Random) -> Act | None:
    """What the user does after a turn of ``s``: re-ask, ask for a human, or (None) go on or give up."""
    if failed(s):
        choices = (
            dict(AFTER_FAILURE) if answered(s) else {None: AFTER_FAILURE[None], Act.HUMAN: AFTER_FAILURE[Act.HUMAN]}
        )
        return rng.choices(list(choices), list(choices.values()))[0]
    if s.feedback == "thumbs_down" and rng.random() < AFTER_THUMBS_DOWN:
        return Act.REASK
    return None


def session_truth(turns: Sequence[RunPlan]) -> dict[str, Any]:
    """The session signals Vigil should find in a conversation whose turns ``turns`` were played (in order):
    ``{turns, reask, human_request, thumbs_down}`` (lists of 1-based turn positions) and ``abandoned``
    (the last turn played failed)."""
    truth: dict[str, Any] = {"turns": len(turns), "reask": [], "human_request": [], "thumbs_down": []}
    for position, plan in enumerate(turns, 1):
        for signal in plan.signals:
            truth[signal].append(position)
    truth["abandoned"] = bool(turns) and failed(turns[-1].scenario)
    return truth


def planner(seed: int) -> Iterator[RunPlan]:
    """The endless sequence of runs for ``seed``: the turns of :func:`conversations`, in order."""
    for conversation in conversations(seed):
        yield from conversation


def plan_runs(seed: int, count: int) -> list[RunPlan]:
    """The first ``count`` runs of :func:`planner`."""
    plans = planner(seed)
    return [next(plans) for _ in range(count)]
