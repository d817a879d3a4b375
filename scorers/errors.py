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


class DetectionConfigError(ScorersError, ValueError):
    """The ``detection`` configuration is invalid; the message names the field (one line)."""


class SessionConfigError(ScorersError, ValueError):
    """The ``sessions`` configuration is invalid; the message names the field (one line)."""


class JudgeConfigError(ScorersError, ValueError):
    """An LLM judge is misconfigured (unknown rubric, bad selector, missing API key variable).

    Attributes:
        judge: the judge name.
        key: the offending key.
    """

    def __init__(self, judge: str, key: str, reason: str) -> None:
        self.judge = judge
        self.key = key
        self.reason = reason
        super().__init__(f"invalid judge {judge!r} ({key}): {reason}")


class JudgeCallError(ScorersError):
    """A judge request gave up: the endpoint failed, timed out, rate-limited us past the
    retries, or answered with a malformed verdict twice.

    Attributes:
        outcome: ``malformed``, ``timeout``, ``rate_limited`` or ``error`` (metric label).
        input_tokens / output_tokens: tokens the failed attempts still consumed.
    """

    def __init__(self, outcome: str, message: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.outcome = outcome
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        super().__init__(message)


class SloConfigError(ScorersError, ValueError):
    """The ``slo`` configuration is invalid; the message names the target and the key (one line)."""
