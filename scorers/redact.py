"""Redaction of personal data and secrets in run content, before it is stored or shown.

A :class:`Redactor` replaces every match of its patterns with ``[REDACTED:<name>]`` in
the free text of a run (final answer, messages, tool arguments, results and errors, span
status messages, root attributes) and drops or keeps root attributes by key patterns
(``fnmatch`` globs: a deny list always wins; a non-empty allow list keeps only what it
matches). Built-in patterns, chosen by name:

- ``email``: ``local@domain.tld``.
- ``phone``: international ``+`` numbers of 8–15 digits and grouped numbers such as
  ``(555) 123-4567`` or ``030 1234 5678`` (at least three groups, so ids and dates stay).
- ``card``: 13–19 digits, optionally grouped by spaces or dashes, that pass the Luhn check.
- ``api_key``: OpenAI/Anthropic-style ``sk-…`` keys, AWS access key ids, GitHub, Slack and
  Google API tokens, JWTs and ``Bearer`` credentials.

Redaction is deterministic and idempotent (a redacted text redacts to itself), so
re-scored runs, loop detection and judge caching are unaffected by it. Pure functions of
the compiled patterns; safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence

from scorers.errors import ScorersError
from scorers.model import Evidence, Message, Run, Step, ToolCall

__all__ = ["BUILTIN_PATTERNS", "DEFAULT_DENY", "RedactionConfigError", "Redactor", "luhn_ok"]

BUILTIN_PATTERNS: Mapping[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "phone": (
        r"(?<![\w+])\+[1-9]\d{7,14}(?!\w)"
        r"|(?<![\w+])\+?(?:\d{1,3}[ .-])?\(?\d{2,4}\)?[ .-]\d{3,4}[ .-]\d{3,4}(?![\w-])"
    ),
    "card": r"(?<![\d+-])\d(?:[ -]?\d){12,18}(?![\d-])",
    "api_key": (
        r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
        r"|\bAKIA[0-9A-Z]{16}\b"
        r"|\bgh[pousr]_[A-Za-z0-9]{36,}"
        r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
        r"|\bAIza[0-9A-Za-z_-]{35}"
        r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
        r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*"
    ),
}
"""Regular expressions of the built-in patterns, by name."""

DEFAULT_DENY: tuple[str, ...] = ("*authorization*", "*password*", "*secret*", "*api_key*", "*apikey*", "*cookie*")
"""Root attribute keys dropped unless the deny list is configured otherwise."""


class RedactionConfigError(ScorersError):
    """A redaction pattern name is unknown or a custom pattern does not compile."""


def luhn_ok(text: str) -> bool:
    """True when the digits of ``text`` pass the Luhn checksum (payment card numbers do)."""
    digits = [int(c) for c in text if c.isdigit()]
    doubled = (2 * d - 9 if 2 * d > 9 else 2 * d for d in digits[-2::-2])
    return (sum(digits[-1::-2]) + sum(doubled)) % 10 == 0


class Redactor:
    """Compiled redaction patterns and attribute key filters.

    Args:
        names: built-in pattern names to apply (see :data:`BUILTIN_PATTERNS`).
        custom: extra ``{name: regex}`` patterns.
        deny: root attribute key globs to drop.
        allow: when non-empty, only root attribute keys matching one of these are kept.

    Raises:
        RedactionConfigError: an unknown built-in name or a custom regex that does not compile.
    """

    def __init__(
        self,
        names: Sequence[str] = tuple(BUILTIN_PATTERNS),
        custom: Mapping[str, str] | None = None,
        *,
        deny: Sequence[str] = DEFAULT_DENY,
        allow: Sequence[str] = (),
    ) -> None:
        unknown = [n for n in names if n not in BUILTIN_PATTERNS]
        if unknown:
            raise RedactionConfigError(
                f"unknown redaction pattern {unknown[0]!r}: built-in names are {', '.join(BUILTIN_PATTERNS)}"
            )
        sources = {n: BUILTIN_PATTERNS[n] for n in _ORDER if n in names}
        for name, regex in (custom or {}).items():
            if not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise RedactionConfigError(f"redaction pattern name {name!r}: use letters, digits and _")
            try:
                re.compile(regex)
            except re.error as exc:
                raise RedactionConfigError(f"redaction pattern {name!r} does not compile: {exc}") from exc
            sources[name] = regex
        self.names = tuple(sources)
        self._passes = tuple(
            (re.compile(regex), _TRIGGERS.get(name) if name in BUILTIN_PATTERNS else None, _replacement(name))
            for name, regex in sources.items()
        )
        self._deny = tuple(deny)
        self._allow = tuple(allow)

    def text(self, value: str) -> str:
        """``value`` with every match replaced by ``[REDACTED:<pattern name>]``.

        Patterns run one after the other (keys, emails, cards, phones, then custom ones), each
        only when its trigger — a substring every match must contain — is present, so text
        without an ``@``, a digit or a key prefix costs a few substring tests.
        """
        if not value:
            return value
        for regex, trigger, replace in self._passes:
            if trigger is None or trigger(value):
                value = regex.sub(replace, value)
        return value

    def maybe(self, value: str | None) -> str | None:
        """:meth:`text` of ``value``, passing ``None`` through."""
        return None if value is None else self.text(value)

    def keep_attribute(self, key: str) -> bool:
        """Whether a root attribute with this key may be stored at all."""
        lowered = key.lower()
        if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in self._deny):
            return False
        return not self._allow or any(fnmatch.fnmatchcase(key, pattern) for pattern in self._allow)

    def run(self, run: Run) -> Run:
        """A copy of ``run`` with its free text redacted and its root attributes filtered."""
        if not self._passes and not self._deny and not self._allow:
            return run
        return dataclasses.replace(
            run,
            final_output=self.maybe(run.final_output),
            error_type=self.maybe(run.error_type),
            steps=tuple(self._step(s) for s in run.steps),
            tools=tuple(self._tool(t) for t in run.tools),
            messages=tuple(Message(m.role, self.text(m.content)) for m in run.messages),
            attributes={
                k: self.text(v) if isinstance(v, str) else v
                for k, v in run.attributes.items()
                if self.keep_attribute(k)
            },
            evidence=self.evidence(run.evidence),
        )

    def evidence(self, items: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
        """Evidence with its matched values and span names redacted (they quote messages and outputs)."""
        if not items or not self._passes:
            return items
        return tuple(dataclasses.replace(e, value=self.text(e.value), span_name=self.text(e.span_name)) for e in items)

    def _step(self, step: Step) -> Step:
        if not step.status_message and step.error_type is None:
            return step
        return dataclasses.replace(
            step, status_message=self.text(step.status_message), error_type=self.maybe(step.error_type)
        )

    def _tool(self, tool: ToolCall) -> ToolCall:
        if tool.arguments is None and tool.result is None and tool.error is None:
            return tool
        arguments, result, error = self.maybe(tool.arguments), self.maybe(tool.result), self.maybe(tool.error)
        if arguments == tool.arguments and result == tool.result and error == tool.error:
            return tool  # nothing to redact: no copy
        return dataclasses.replace(tool, arguments=arguments, result=result, error=error)


_ORDER = ("api_key", "email", "card", "phone")
"""Built-ins run in this order: keys before phones (a key's digits must not be taken for a phone
number), cards before phones (a grouped card number looks like one; digits that fail the Luhn
check are left for the phone pattern)."""

_DIGIT = re.compile(r"\d")
_TWO_DIGITS = re.compile(r"\d\d")


def _key_marker(text: str) -> bool:
    return (
        "sk-" in text or "AKIA" in text or "gh" in text or "xox" in text or "AIza" in text
        or "eyJ" in text or "earer" in text or "EARER" in text
    )  # fmt: skip


def _card_candidate(text: str) -> bool:
    return len(text) >= 13 and _DIGIT.search(text) is not None


def _phone_candidate(text: str) -> bool:
    # Both phone forms hold two adjacent digits: "+" and 8+ digits, or a first group of 2-4 digits
    # followed by two groups, each after one of " .-" (so ids such as call_4f09a2 skip the regex).
    return ("+" in text or " " in text or "-" in text or "." in text) and _TWO_DIGITS.search(text) is not None


_TRIGGERS: Mapping[str, Callable[[str], bool]] = {
    "api_key": _key_marker,
    "email": lambda text: "@" in text,
    "card": _card_candidate,
    "phone": _phone_candidate,
}
"""For each built-in, a cheap test every text containing a match passes."""


def _replacement(name: str) -> Callable[[re.Match[str]], str]:
    marker = f"[REDACTED:{name}]"
    if name != "card":
        return lambda match: marker
    return lambda match: marker if luhn_ok(match.group()) else match.group()
