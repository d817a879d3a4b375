"""What the demo fleet sends: agents, run kinds, the mix, scripted scenarios and their ground truth.

Pure and deterministic: everything here is a function of the seed (but :func:`fresh_seed`, which draws one:
``vigil run --demo`` plays a fresh seed each start unless ``--demo-seed`` names one, so a restart on the
same database never reuses an earlier start's session ids). A *scenario* is one
scripted exchange of one agent with one user (``support.where.looping.3``: what the user asks,
the kind of run, the variant, which picks the user): the turns the fake model answers with, the
agent's settings (iteration cap, optimal steps) and what the world does to it (a tool that fails,
a guardrail that blocks, a slow backend). Each run of the fleet plays one scenario under its own
tag, and :func:`expected` tells what Vigil should derive from it.

**Coherent, and blind.** An agent answers a fixed set of questions (:class:`Intent`): each names the
tool calls that answer it and an answer written from what those tools return
(:func:`collector.demo.world.lookup`, the same data the agents' simulated backends give them), so a
"when is my next payment due?" gets a ``get_balance`` call and the due date it returned. The
scenario's name and kind never enter a message: the agents name the script to the fake server in
the :data:`~collector.demo.fakeopenai.HEADER` request header (:attr:`RunPlan.header`), so reviewers
judge the runs blind while the driver side keeps the truth.

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
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from collector.demo.fakeopenai import (
    HEADER,
    ContentFilterTurn,
    ErrorTurn,
    RefusalTurn,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    Usage,
)
from collector.demo.world import TOOLS, TOPICS, lookup, topic_facts

__all__ = [
    "AGENTS",
    "MIX",
    "Act",
    "AgentSpec",
    "Fault",
    "Intent",
    "Kind",
    "RunPlan",
    "Scenario",
    "conversations",
    "expected",
    "fresh_seed",
    "persona",
    "plan_runs",
    "planner",
    "scenario",
    "scenarios",
    "session_prefix",
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

Persona = Mapping[str, str]
"""One simulated user's context: the ids their tools look up (``customer_id``, ``order_id``, ``case_id``,
``account_id``, ``invoice_id``, ``ticket_id``) and a research ``topic``."""

Steps = tuple[tuple[ToolCall, ...], ...]
"""Tool-calling turns: each the calls one model answer asks for."""


@dataclass(frozen=True, slots=True)
class Intent:
    """One thing a user asks an agent, and how a good agent answers it.

    Attributes:
        name: short id (part of the scenario name, never shown).
        question: what the user says (``{t}``: the persona's research topic).
        steps: the tool calls that answer it, turn by turn, for a persona.
        answer: the final answer as a :meth:`str.format` template over the persona's ids (``{order_id}``),
            what the tools returned by tool name (``{lookup_order[carrier]}``) and the derived fields of
            :func:`answer_fields` (``{facts[findings]}``, ``{sources}``, ``{duplicate[amount]}``...).
    """

    name: str
    question: str
    steps: Callable[[Persona], Steps]
    answer: str


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


def _one(name: str, key: str) -> Callable[[Persona], Steps]:
    """Steps of a single call of tool ``name`` with the persona's ``key`` (``order_id``...)."""
    return lambda p: ((_call(name, **{key: p[key]}),),)


def _duplicate(p: Persona) -> dict[str, Any]:
    """The later of the two identical payments of the persona's account (the double charge; the list is
    newest first)."""
    return dict(lookup("list_payments", {"account_id": p["account_id"]})["payments"][0])


def _search_then_read(query: str) -> Callable[[Persona], Steps]:
    """Steps of a web search for ``query`` (``{t}``: the topic), then reading its first result."""

    def steps(p: Persona) -> Steps:
        q = query.format(t=p["topic"])
        first = lookup("web_search", {"query": q})["results"][0]["url"]
        return ((_call("web_search", query=q),), (_call("fetch_page", url=first),))

    return steps


def answer_fields(p: Persona, steps: Steps) -> dict[str, Any]:
    """What an answer template may use: the persona, each tool's result by name (the last call's), the
    research topic's ``facts``, the search ``sources`` and ``listing``, a double charge's ``duplicate``."""
    fields: dict[str, Any] = dict(p)
    fields |= {c.name: lookup(c.name, c.arguments) for turn in steps for c in turn}
    fields["facts"] = topic_facts(p.get("topic", ""))
    found = fields.get("web_search", {}).get("results", [])
    fields["sources"] = "; ".join(f"{x['title']} ({x['url']})" for x in found[:2])
    fields["listing"] = "; ".join(f"{n}. {x['title']}, {x['url']}" for n, x in enumerate(found, 1))
    fields["duplicate"] = _duplicate(p) if "account_id" in p else {}
    return fields


SUPPORT: Final = (
    Intent(
        "where", "Where is my order?", _one("lookup_order", "order_id"),
        "Your order {order_id} ({lookup_order[item]}) shipped with {lookup_order[carrier]} on "
        "{lookup_order[shipped_on]} and is {lookup_order[status]} now. It should arrive on "
        "{lookup_order[estimated_delivery]}; the tracking number is {lookup_order[tracking_number]}.",
    ),
    Intent(
        "damaged", "Can I return an item that arrived damaged?",
        lambda p: ((_call("search_kb", query="damaged item returns"),),
                   (_call("create_return", order_id=p["order_id"], reason="arrived damaged"),)),
        "Yes: damaged items can be returned free of charge within 30 days. I've opened return "
        "{create_return[return_id]} for order {order_id}. Print the prepaid label at {create_return[label_url]}; "
        "{create_return[refund_amount]} goes back to you once the parcel is scanned.",
    ),
    Intent(
        "refund", "I never got my refund.", _one("get_refund", "order_id"),
        "I can see it: a refund of {get_refund[amount]} for order {order_id} was issued on "
        "{get_refund[issued_on]} to your {get_refund[method]}. Banks take 3-5 working days to show it, so it "
        "should be there by {get_refund[expected_by]}.",
    ),
)  # fmt: skip
SUPPORT_FOLLOW_UPS: Final = (
    Intent(
        "arrival", "When will my order arrive?", _one("lookup_order", "order_id"),
        "Order {order_id} is {lookup_order[status]} with {lookup_order[carrier]}; the current estimate is "
        "{lookup_order[estimated_delivery]}.",
    ),
    Intent(
        "address", "Can I change the delivery address?",
        lambda p: ((_call("lookup_order", order_id=p["order_id"]), _call("search_kb", query="change address")),),
        "Order {order_id} has already left our warehouse, so I can't change the address here any more, but you "
        "can redirect it with {lookup_order[carrier]} using tracking number {lookup_order[tracking_number]}.",
    ),
    Intent(
        "norway", "Do you ship to Norway?", lambda p: ((_call("search_kb", query="international shipping"),),),
        "Yes. {search_kb[excerpt]}",
    ),
    Intent(
        "thanks", "Thanks, that is all.", _one("close_case", "case_id"),
        "You're welcome! I've closed this case. Have a great day.",
    ),
)  # fmt: skip

BILLING: Final = (
    Intent(
        "twice", "Why was I charged twice?",
        lambda p: ((_call("list_payments", account_id=p["account_id"]),),
                   (_call("issue_refund", account_id=p["account_id"], reference=_duplicate(p)["payment_id"]),)),
        "You were charged {duplicate[amount]} twice on {duplicate[date]} for invoice {duplicate[invoice_id]}: "
        "the second charge ({duplicate[payment_id]}) was a duplicate from a payment retry. I've refunded it "
        "({issue_refund[refund_id]}); it will be back on your {duplicate[card]} by {issue_refund[expected_by]}.",
    ),
    Intent(
        "balance", "What is my balance?", _one("get_balance", "account_id"),
        "Your current balance is {get_balance[balance]}. The next payment, {get_balance[next_payment_amount]}, "
        "is due on {get_balance[next_payment_due]}.",
    ),
    Intent(
        "refund", "Please refund my last invoice.",
        lambda p: ((_call("get_invoice", invoice_id=p["invoice_id"]),),
                   (_call("issue_refund", account_id=p["account_id"], reference=p["invoice_id"]),)),
        "Done: invoice {invoice_id} from {get_invoice[date]} ({get_invoice[amount]}) is refunded under "
        "{issue_refund[refund_id]}. Expect the money on your {issue_refund[method]} by {issue_refund[expected_by]}.",
    ),
)  # fmt: skip
BILLING_FOLLOW_UPS: Final = (
    Intent(
        "card", "Which card was used for my last payment?", _one("list_payments", "account_id"),
        "Your last payment, {duplicate[amount]} on {duplicate[date]}, was made with your {duplicate[card]}.",
    ),
    Intent(
        "pdf", "Can I get the invoice as a PDF?", _one("get_invoice", "invoice_id"),
        "Sure: invoice {invoice_id} ({get_invoice[date]}, {get_invoice[amount]}) is at {get_invoice[pdf_url]}.",
    ),
    Intent(
        "due", "When is the next payment due?", _one("get_balance", "account_id"),
        "Your next payment of {get_balance[next_payment_amount]} is due on {get_balance[next_payment_due]}; it "
        "will be charged automatically to your {get_balance[payment_method]}.",
    ),
    Intent(
        "thanks", "Great, thanks.", _one("close_case", "case_id"),
        "You're welcome, glad I could help! I've closed this case.",
    ),
)  # fmt: skip

RESEARCH: Final = (
    Intent(
        "summary", "Summarise recent work on {t}.", _search_then_read("{t} recent research"),
        "Recent work on {topic} has three threads: {facts[findings]}. Sources: {sources}.",
    ),
    Intent(
        "changes", "What changed this year in {t}?", _search_then_read("{t} developments this year"),
        "Three developments stand out: {facts[findings]}. Sources: {sources}.",
    ),
    Intent(
        "sources", "Give me three sources on {t}.",
        lambda p: ((_call("web_search", query=f"{p['topic']} overview"),),),
        "Here are three places to start: {listing}.",
    ),
)  # fmt: skip
RESEARCH_FOLLOW_UPS: Final = (
    Intent(
        "europe", "Which of these matters most for Europe?",
        lambda p: ((_call("web_search", query=f"{p['topic']} Europe policy"),),),
        "For Europe, {facts[europe]}.",
    ),
    Intent(
        "shorter", "Can you make that shorter?", _one("summarize", "topic"), "In short: {summarize[summary]}.",
    ),
    Intent(
        "players", "Who are the main players?",
        lambda p: ((_call("web_search", query=f"{p['topic']} leading companies"),),),
        "The main players are {facts[players]}.",
    ),
    Intent(
        "thanks", "Thanks, that helps.", _one("save_notes", "topic"),
        "You're welcome. I've saved these notes on {topic} to your workspace.",
    ),
)  # fmt: skip


def _route(summary: str, queue: str, priority: str, team: str) -> Intent:
    """A triage ticket about ``summary`` that belongs in ``queue`` at ``priority``."""
    return Intent(
        queue,
        f"New ticket: {summary}.",
        lambda p: ((_call("route_ticket", ticket_id=p["ticket_id"], queue=queue, priority=priority),),),
        "Ticket {ticket_id} (" + summary + ") routed to " + team + ", priority " + priority + ".",
    )


TRIAGE: Final = (
    _route("the app crashes on login", "mobile", "P2", "Mobile apps"),
    _route("the invoice PDF is blank", "billing", "P3", "Billing systems"),
    _route("feature idea: a dark mode for the dashboard", "product", "P4", "Product management"),
)


def _handoff(team: str) -> Intent:
    """How an agent hands a conversation to ``team`` when the user asks for a person."""
    return Intent(
        "human",
        "Can I talk to a human, please?",
        lambda p: ((_call("handoff_to_human", case_id=p["case_id"], reason="customer asked for a person"),),),
        "Of course. I've passed case {case_id} to " + team + ": you're number "
        "{handoff_to_human[queue_position]} in the queue, about {handoff_to_human[estimated_wait_minutes]} minutes.",
    )


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One simulated agent.

    Attributes:
        name: ``gen_ai.agent.name``.
        model: the model it asks for.
        tools: the tools it offers the model (:data:`collector.demo.world.TOOLS`).
        optimal_steps: LLM calls a good run needs (declared on the root span).
        max_iterations: the iteration cap.
        weight: relative share of the traffic.
        system: its system prompt (``{…}``: the persona's ids).
        openers: what users open a conversation with.
        follow_ups: the user's later questions in a conversation, the last a closing thanks (none:
            one-turn sessions).
        handoff: how it answers a request for a human.
        unavailable: its answer when a tool failed.
        brush_off: an unhelpful answer (users give those a thumbs-down).
        leak: what an answer stopped by the output guardrail adds (an internal code).
    """

    name: str
    model: str
    tools: tuple[str, ...]
    optimal_steps: int
    max_iterations: int
    weight: int
    system: str
    openers: tuple[Intent, ...]
    follow_ups: tuple[Intent, ...] = ()
    handoff: Intent | None = None
    unavailable: str = "Sorry, that system is not answering right now. Please try again in a few minutes."
    brush_off: str = "You can find that in your account settings."
    leak: str = " (Internal: staff discount code STAFF-40 applies.)"

    def intents(self) -> tuple[Intent, ...]:
        """Every intent it answers: openers, follow-ups, the handoff."""
        return (*self.openers, *self.follow_ups, *((self.handoff,) if self.handoff else ()))

    def intent(self, name: str) -> Intent:
        """The intent called ``name``. Raises :class:`KeyError` when it has none."""
        for intent in self.intents():
            if intent.name == name:
                return intent
        raise KeyError(f"{self.name} has no intent {name!r}")


_SHOP: Final = (
    "You are the customer-support assistant of Northwind Home, an online homeware shop. The signed-in "
    "customer is {customer_id}; their latest order is {order_id}; this conversation is case {case_id}. "
    "Look things up with the tools before answering, and keep answers short."
)

AGENTS: Final[tuple[AgentSpec, ...]] = (
    AgentSpec(
        "support", "gpt-4o-mini",
        ("lookup_order", "get_customer", "search_kb", "create_return", "get_refund", "close_case", "handoff_to_human"),
        optimal_steps=2, max_iterations=10, weight=40, system=_SHOP,
        openers=SUPPORT, follow_ups=SUPPORT_FOLLOW_UPS, handoff=_handoff("a colleague from the support team"),
        unavailable="Sorry, I can't reach our order system right now, so I can't confirm that. Please try again "
        "in a few minutes.",
        brush_off="You can check this yourself under My orders in your account.",
    ),
    AgentSpec(
        "research", "gpt-4.1",
        ("web_search", "fetch_page", "summarize", "save_notes", "handoff_to_human"),
        optimal_steps=3, max_iterations=16, weight=20,
        system="You are a research assistant. Search the web and read sources before you answer; cite the "
        "pages you used. This workspace session is {case_id}.",
        openers=RESEARCH, follow_ups=RESEARCH_FOLLOW_UPS, handoff=_handoff("a research librarian"),
        unavailable="Sorry, the search service did not answer, so I can't give you sourced findings right now.",
        brush_off="There is a lot written about this; a web search will turn up plenty.",
        leak=" (Internal: use the staff library login LIB-STAFF-7 for paywalled sources.)",
    ),
    AgentSpec(
        "billing", "gpt-4o",
        ("get_balance", "list_payments", "get_invoice", "issue_refund", "close_case", "handoff_to_human"),
        optimal_steps=2, max_iterations=10, weight=25,
        system="You are the billing assistant of Northwind Home. The signed-in customer's account is "
        "{account_id}; their latest invoice is {invoice_id}; this conversation is case {case_id}. Check the "
        "account with the tools before answering.",
        openers=BILLING, follow_ups=BILLING_FOLLOW_UPS, handoff=_handoff("a colleague from the billing team"),
        unavailable="Sorry, the billing system is not answering right now, so I can't check that. Please try "
        "again in a few minutes.",
        brush_off="Please see the Billing page of your account for that.",
    ),
    AgentSpec(
        "triage", "gpt-4.1-mini",
        ("classify_ticket", "route_ticket"),
        optimal_steps=1, max_iterations=6, weight=15,
        system="You triage new helpdesk tickets: pick the team queue (mobile, billing or product) and a "
        "priority (P1-P4), then route the ticket with the tools. The ticket is {ticket_id}.",
        openers=TRIAGE,
        unavailable="The ticketing system is not answering; the ticket stays in the inbox for now.",
        brush_off="Routed.",
        leak=" (Internal: on-call override code OC-5512.)",
    ),
)  # fmt: skip
"""The fleet's agents."""

_BY_NAME: Final = {a.name: a for a in AGENTS}


def persona(agent: str, variant: int, seed: int = 0, intent: str = "") -> dict[str, str]:
    """The simulated user of ``agent``'s variant ``variant``: the ids their conversation looks up (the
    ``ticket_id`` also depends on the ``intent``: each ticket is a new one)."""
    rng = random.Random(f"{seed}/{agent}/persona/{variant}")

    def number(prefix: str, digits: int = 5) -> str:
        return f"{prefix}-{rng.randrange(10 ** (digits - 1), 10**digits)}"

    return {
        "customer_id": number("C"),
        "order_id": number("A"),
        "case_id": number("CASE", 6),
        "account_id": number("ACC"),
        "invoice_id": number("INV", 6),
        "topic": rng.choice(TOPICS),
        "ticket_id": f"T-{random.Random(f'{seed}/{agent}/ticket/{variant}/{intent}').randrange(1000, 10000)}",
    }


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
        name: the fake server's script name, ``AGENT.INTENT.KIND.VARIANT``.
        agent: the agent's spec.
        kind: what runs of it are meant to be.
        turns: the fake model's answers (the last one repeats).
        prompt: the user's request.
        intent: the name of what the user asks (:class:`Intent`).
        system: the agent's system prompt for this user (the persona's ids filled in).
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
    intent: str = ""
    system: str = ""

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
    def header(self) -> dict[str, str]:
        """The request header that tells the fake server the script (:data:`~collector.demo.fakeopenai.HEADER`):
        what :attr:`marker` says, out of band, so that no message a reviewer reads carries it."""
        return {HEADER: self.marker.removeprefix("[[scenario:").removesuffix("]]")}

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
    return [
        scenario(a.name, kind, v, seed, intent.name)
        for a in AGENTS
        for intent in a.intents()
        for kind in Kind
        for v in range(VARIANTS)
    ]


@functools.lru_cache(maxsize=8192)
def scenario(agent: str, kind: Kind, variant: int, seed: int = 0, intent: str | None = None) -> Scenario:
    """The scripted scenario ``agent.intent.kind.variant`` (deterministic in its arguments).

    ``variant`` picks the user (:func:`persona`: the ids their tools look up), ``intent`` what they ask
    (default: one of the agent's openers, by variant). The good answer is written from what the tools
    return for that user (:func:`collector.demo.world.lookup`), so question, tool calls and answer fit.

    Raises:
        KeyError: unknown agent or intent.
    """
    spec = _BY_NAME[agent]
    chosen = spec.intent(intent) if intent else spec.openers[variant % len(spec.openers)]
    who = persona(agent, variant, seed, chosen.name)
    steps = chosen.steps(who)
    script = _Script(
        name=f"{agent}.{chosen.name}.{kind.value}.{variant}",
        spec=spec,
        rng=random.Random(f"{seed}/{agent}/{chosen.name}/{kind.value}/{variant}"),
        prompt=chosen.question.format(t=who["topic"]),
        system=spec.system.format(**who),
        intent=chosen.name,
        steps=steps,
        answer=chosen.answer.format(**answer_fields(who, steps)),
        recheck=_RECHECKS[agent](who, chosen.question),
    )
    return _BUILDERS[kind](script)


@dataclass(frozen=True, slots=True)
class _Script:
    """What the builders write one scenario from: the user's question, and how a good run answers it."""

    name: str
    spec: AgentSpec
    rng: random.Random
    prompt: str
    system: str
    intent: str
    steps: Steps
    answer: str
    recheck: ToolCall

    def make(self, kind: Kind, turns: Sequence[Turn], **settings: Any) -> Scenario:
        return Scenario(
            self.name, self.spec, kind, tuple(turns), self.prompt, intent=self.intent, system=self.system, **settings
        )

    def calls(self, count: int | None = None) -> list[Turn]:
        """The good run's first ``count`` tool-calling turns (all by default)."""
        return [ToolCallTurn(t) for t in self.steps[:count]]

    def rechecking(self, count: int) -> list[Turn]:
        """``count`` tool-calling turns that look the same things up again and again, then do what the good
        run does once (a refund, a routed ticket: never twice) — an inefficient run."""
        writes = [t for t in self.steps if any(TOOLS[c.name].writes for c in t)]
        reads = [t for t in self.steps if t not in writes] or [(self.recheck,)]
        looks = [reads[i % len(reads)] for i in range(count - len(writes))]
        return [ToolCallTurn(t) for t in (*looks, *writes)]


_RECHECKS: Final[Mapping[str, Callable[[Persona, str], ToolCall]]] = {
    "support": lambda p, q: _call("get_customer", customer_id=p["customer_id"]),
    "billing": lambda p, q: _call("get_balance", account_id=p["account_id"]),
    "research": lambda p, q: _call("web_search", query=p["topic"]),
    "triage": lambda p, q: _call("classify_ticket", ticket_id=p["ticket_id"], summary=q.removeprefix("New ticket: ")),
}
"""The read-only lookup each agent repeats when nothing else it called can be looked up again."""


def _good(s: _Script, kind: Kind = Kind.GOOD) -> Scenario:
    slow_s = round(s.rng.uniform(4.0, 8.0), 2) if kind is Kind.SLOW else 0.0
    if kind is Kind.THUMBS_DOWN:  # an unhelpful answer: what users give a thumbs-down
        return s.make(kind, (*s.calls(), TextTurn(s.spec.brush_off)), feedback="thumbs_down")
    return s.make(kind, (*s.calls(), TextTurn(s.answer)), slow_s=slow_s)


def _inefficient(s: _Script) -> Scenario:
    steps = 4 * s.spec.optimal_steps + s.rng.randint(0, 1)  # efficiency <= 0.25, under the cap
    return s.make(Kind.INEFFICIENT, (*s.rechecking(steps - 1), TextTurn(s.answer)))


def _looping(s: _Script) -> Scenario:
    same = ToolCallTurn((s.steps[0][0],))  # the model asks for the same call forever
    return s.make(Kind.LOOPING, (same,), raise_on_max=s.rng.random() < 0.5)


def _content_filter(s: _Script) -> Scenario:
    words = s.answer.split()
    cut = " ".join(words[: s.rng.choice((0, 2, 4))])  # the filter stops the answer a few words in
    return s.make(Kind.CONTENT_FILTER, (*s.calls(s.rng.randint(0, 1)), ContentFilterTurn(cut)))


def _guardrail(s: _Script) -> Scenario:
    where = s.rng.choice(("input", "output"))  # an output guardrail stops an answer that leaks a code
    return s.make(Kind.GUARDRAIL, (*s.calls(), TextTurn(s.answer + s.spec.leak)), guardrail=where)


def _tool_failure(s: _Script) -> Scenario:
    upto = s.rng.randint(1, len(s.steps))  # the last tool turn fails, and the model says so
    fault_at = sum(len(t) for t in s.steps[: upto - 1])
    turns = (*s.calls(upto), TextTurn(s.spec.unavailable))
    return s.make(Kind.TOOL_FAILURE, turns, fault_at=fault_at, fault=Fault.RECOVERABLE)


def _error(s: _Script) -> Scenario:
    calls = s.calls(s.rng.randint(0, 1))
    if calls and s.rng.random() < 0.5:  # a backend bug the agent does not handle
        return s.make(Kind.ERROR, (*calls, TextTurn(s.answer)), fault_at=0, fault=Fault.FATAL)
    failure = ErrorTurn(500, "The server had an error while processing your request.", "server_error")
    return s.make(Kind.ERROR, (*calls, failure))


_BUILDERS: Final[Mapping[Kind, Callable[[_Script], Scenario]]] = {
    Kind.GOOD: _good,
    Kind.SLOW: lambda s: _good(s, Kind.SLOW),
    Kind.THUMBS_DOWN: lambda s: _good(s, Kind.THUMBS_DOWN),
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
        tag = f"{session_prefix(seed)}{number}"
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
    """One conversation of ``agent``: ``(scenario, user message, act)`` per turn.

    One user (a variant: :func:`persona`) through the whole conversation; each turn's scenario is
    written for what the user asks in it (the question's :class:`Intent`, a re-ask's earlier one, the
    agent's handoff for a request for a human), with the kind the deck deals."""
    variant = rng.randrange(VARIANTS)

    def play(intent: Intent) -> Scenario:
        return scenario(agent.name, next(deal), variant, seed, intent.name)

    opener = rng.choice(agent.openers)
    first = play(opener)
    turns = [(first, first.prompt, Act.OPEN)]
    if not agent.follow_ups:
        return turns
    planned = rng.choices(list(LENGTHS), list(LENGTHS.values()))[0]
    questions = rng.sample(agent.follow_ups, min(planned - 1, len(agent.follow_ups)))
    questions.sort(key=lambda q: q == agent.follow_ups[-1])  # the closing thanks comes last
    asked, question = opener, first.prompt  # the question the user would ask again
    while len(turns) < MAX_CONVERSATION_TURNS:
        last = turns[-1][0]
        act = _reaction(last, rng)
        if act is None and failed(last):
            break  # gave up: abandoned
        if act is None:
            if not questions:
                break
            asked = questions.pop(0)
            turn = play(asked)
            act, question = Act.FOLLOW_UP, turn.prompt
            message = question
        elif act is Act.REASK:
            turn = play(asked)
            message = rng.choice(REPHRASES).format(q=question, lq=question[0].lower() + question[1:])
        else:
            turn = play(agent.handoff or asked)
            message = rng.choice(HUMAN_REQUESTS)
        turns.append((turn, message, act))
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


MAX_SEED: Final = 2**32
"""Fresh seeds (:func:`fresh_seed`) are below it: session ids stay short (``s3141592653c17``)."""


def session_prefix(seed: int) -> str:
    """What every session id of a fleet with ``seed`` starts with (``s{seed}c``, then the conversation's number)."""
    return f"s{seed}c"


def fresh_seed(taken: Callable[[int], bool] | None = None, draws: int = 16) -> int:
    """A seed from the system's entropy, for a fleet whose ids must not meet an earlier fleet's.

    Args:
        taken: whether a seed's session ids (:func:`session_prefix`) are already stored; a taken seed
            is drawn again, up to ``draws`` times (a clash of two 32-bit draws is already rare).
        draws: how many seeds to try before giving up.

    Raises:
        RuntimeError: every draw was taken.
    """
    for _ in range(draws):
        seed = secrets.randbelow(MAX_SEED)
        if taken is None or not taken(seed):
            return seed
    raise RuntimeError(f"no untaken demo seed in {draws} draws")


def planner(seed: int) -> Iterator[RunPlan]:
    """The endless sequence of runs for ``seed``: the turns of :func:`conversations`, in order."""
    for conversation in conversations(seed):
        yield from conversation


def plan_runs(seed: int, count: int) -> list[RunPlan]:
    """The first ``count`` runs of :func:`planner`."""
    plans = planner(seed)
    return [next(plans) for _ in range(count)]
