"""Errors of the scorers package (one root: :class:`ScorerError`)."""

from __future__ import annotations


class ScorersError(Exception):
    """Root of every error raised by :mod:`scorers`."""


class UnknownScorerError(ScorersError, ValueError):
    """A configured scorer name is not registered.

    Attributes:
        name: the unknown name.
        known: the registered names.
    """

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown scorer {name!r}; known scorers: {', '.join(sorted(known))}")


class RuleError(ScorersError, ValueError):
    """A flag rule is invalid (bad CEL, unknown priority, unknown field).

    Attributes:
        rule: the rule name.
    """

    def __init__(self, rule: str, reason: str) -> None:
        self.rule = rule
        self.reason = reason
        super().__init__(f"invalid rule {rule!r}: {reason}")
