"""A reviewed run's tool calls as an eval case's expected trajectory (``vigil eval export``, sessions too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scorers.eval.actual import decode_args

__all__ = ["TOOL_CATEGORIES", "tool_uses"]

TOOL_CATEGORIES: Final = frozenset(("wrong_tool", "wrong_arguments", "loop"))
"""Failure categories that make a failed run's tool calls unfit as the expected trajectory."""


def tool_uses(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of a run's review snapshot as ADK ``tool_uses`` (id, name, decoded arguments)."""
    return [
        {
            "id": tool.get("call_id") or tool.get("span_id"),
            "name": tool["name"],
            "args": decode_args(tool.get("arguments")),
        }
        for tool in snapshot.get("tools", [])
    ]
