"""Scorer registry: built-in scorers by name plus plugins from the ``vigil.scorers`` entry points.

The chain is built once at start-up from names (``VIGIL_SCORERS``); an unknown name is a
start-up error listing the known ones. Nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points

from scorers import builtin
from scorers.efficiency import StepEfficiency
from scorers.errors import UnknownScorerError
from scorers.model import Scorer

ENTRY_POINT_GROUP = "vigil.scorers"

SIMPLE: Mapping[str, Scorer] = {
    "tool_error_rate": builtin.tool_error_rate,
    "repeated_tool_calls": builtin.repeated_tool_calls,
    "max_iterations_hit": builtin.max_iterations_hit,
    "safety_block": builtin.safety_block,
    "latency": builtin.latency,
    "tokens": builtin.tokens,
}
"""Stateless built-in scorers."""

BUILTIN_NAMES: tuple[str, ...] = ("step_efficiency", *SIMPLE)

SCORE_UNITS: Mapping[str, tuple[str, bool | None]] = {
    "step_efficiency": ("ratio", True),
    "tool_error_rate": ("ratio", False),
    "repeated_tool_calls": ("calls", False),
    "max_iterations_hit": ("flag", False),
    "safety_block": ("flag", False),
    "latency": ("s", False),
    "tokens": ("tokens", False),
}
"""``score -> (unit, higher is better)`` of the built-in scorers, as their docstrings in
``scorers/builtin.py`` and ``scorers/efficiency.py`` define them (``None``: neither way); a plugin's
scores are shown without a unit."""


def _plugins() -> dict[str, Callable[[], Scorer]]:
    return {ep.name: ep.load for ep in entry_points(group=ENTRY_POINT_GROUP)}


def build_chain(
    names: Sequence[str], *, optimal_steps: Mapping[str, int] | None = None
) -> tuple[tuple[str, Scorer], ...]:
    """Build the scorer chain.

    Args:
        names: scorer names in order.
        optimal_steps: per-agent optimal step counts for ``step_efficiency``.

    Returns:
        ``(name, scorer)`` pairs in order.

    Raises:
        UnknownScorerError: a name is neither built in nor an installed plugin.
    """
    plugins = _plugins()
    chain: list[tuple[str, Scorer]] = []
    for name in names:
        if name == "step_efficiency":
            chain.append((name, StepEfficiency(optimal_steps)))
        elif name in SIMPLE:
            chain.append((name, SIMPLE[name]))
        elif name in plugins:
            chain.append((name, plugins[name]()))
        else:
            raise UnknownScorerError(name, (*BUILTIN_NAMES, *plugins))
    return tuple(chain)
