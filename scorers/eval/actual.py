"""What the agent actually did, read from normalised runs: one :class:`ActualTurn` per trace.

A turn is one trace (one :class:`scorers.model.Run`); a multi-turn case captured from a live agent
is one trace per turn sharing ``vigil.eval.case_id`` (and ``gen_ai.conversation.id``), taken in
start-time order (``vigil.eval.turn``, when present, orders them first).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from scorers.eval.criteria import ActualTurn
from scorers.model import Run

__all__ = [
    "CASE_ID",
    "CONVERSATION_ID",
    "EVAL_SET_ID",
    "TURN",
    "TracedCall",
    "decode_args",
    "group_by_case",
    "turn_of",
    "turns_of",
    "user_messages",
]

CASE_ID = "vigil.eval.case_id"
"""Root-span attribute naming the eval case a trace belongs to."""
EVAL_SET_ID = "vigil.eval.set_id"
"""Root-span attribute naming the eval set (optional)."""
TURN = "vigil.eval.turn"
"""Root-span attribute: the 0-based turn of a multi-turn case (optional; start time orders otherwise)."""
CONVERSATION_ID = "gen_ai.conversation.id"
"""The OTel GenAI conversation id shared by the turns of one conversation."""


def decode_args(text: str | None) -> dict[str, Any]:
    """A tool call's captured arguments as a JSON object (a non-object value becomes ``{"input": value}``)."""
    if text is None or text == "":
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


class TracedCall:
    """A tool call read from a trace; its arguments are decoded on first use (most never are)."""

    __slots__ = ("_args", "_raw", "id", "name")

    def __init__(self, name: str, raw: str | None, call_id: str | None = None) -> None:
        self.name = name
        self.id = call_id
        self._raw = raw
        self._args: dict[str, Any] | None = None

    @property
    def arguments(self) -> dict[str, Any]:
        """The decoded arguments (see :func:`decode_args`)."""
        if self._args is None:
            self._args = decode_args(self._raw)
        return self._args

    @property
    def canonical(self) -> str | None:
        """The captured arguments text (canonical JSON when they were JSON)."""
        return self._raw

    @property
    def args(self) -> dict[str, Any]:
        """Same as :attr:`arguments` (the name ADK's ``FunctionCall`` uses)."""
        return self.arguments

    def __repr__(self) -> str:
        return f"TracedCall(name={self.name!r}, arguments={self._raw!r})"


def user_messages(run: Run) -> list[str]:
    """The user messages captured in the run's conversation, in order."""
    return [m.content for m in run.messages if m.role == "user" and m.content]


def turn_of(run: Run) -> ActualTurn:
    """The turn a run shows: its (last) user message, tool calls with decoded arguments, final answer,
    and what it cost (LLM calls, tokens, wall time), its failed tool calls and its system prompt."""
    users = user_messages(run)
    calls = tuple(TracedCall(t.name, t.arguments, t.call_id) for t in run.tools)
    return ActualTurn(
        users[-1] if users else "",
        calls,
        run.final_output or "",
        run.trace_id,
        steps=run.llm_calls,
        tokens=run.input_tokens + run.output_tokens,
        latency_ms=max(0, run.end_ns - run.start_ns) / 1e6,
        tool_errors=sum(t.error is not None for t in run.tools),
        system_prompt="\n".join(m.content for m in run.messages if m.role in ("system", "developer") and m.content),
    )


def _order(run: Run) -> tuple[int, int]:
    turn = run.attributes.get(TURN)
    return (turn if isinstance(turn, int) and not isinstance(turn, bool) else 1 << 30, run.start_ns)


def group_by_case(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """Runs carrying ``vigil.eval.case_id``, grouped by it, each group in turn order."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        case = run.attributes.get(CASE_ID)
        if isinstance(case, str) and case:
            groups.setdefault(case, []).append(run)
    for group in groups.values():
        group.sort(key=_order)
    return groups


def turns_of(runs: Sequence[Run]) -> list[ActualTurn]:
    """The turns of one case's runs (already in order)."""
    return [turn_of(r) for r in runs]
