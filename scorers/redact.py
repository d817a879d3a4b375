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
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType, ModuleType
from typing import Final, cast

from scorers.errors import ScorersError
from scorers.model import Evidence, Message, Run, Step, ToolCall

__all__ = ["BUILTIN_PATTERNS", "DEFAULT_DENY", "RedactionConfigError", "Redactor", "compiled", "luhn_ok", "scan"]

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
            # a custom pattern under a built-in's name is a custom pattern: over the whole text
            (re.compile(regex), _replacement(name), _KINDS[name] if regex == BUILTIN_PATTERNS.get(name) else None)
            for name, regex in sources.items()
        )
        self._only_builtins = all(kind is not None for _, _, kind in self._passes)
        self.builtins_only = self._only_builtins
        """Whether only built-in patterns apply: a text :data:`scan` finds nothing in is returned as it is."""
        self._deny = tuple(deny)
        self._allow = tuple(allow)

    def text(self, value: str, scanned: Scan | EllipsisType = ...) -> str:
        """``value`` with every match replaced by ``[REDACTED:<pattern name>]``.

        Patterns run one after the other (keys, emails, cards, phones, then custom ones). The
        built-ins run only where :data:`scan` (one compiled pass over the text) says they can
        match: the key pattern over the whole text when one of its literals occurs; emails, cards
        and phones on their candidate runs only, each with one character of context either side,
        which gives exactly what the expression gives over the whole text. Text where no built-in
        can match costs that one pass. ``scanned``: :data:`scan` of ``value`` when the caller has
        it already (the run details' compiled attribute loop), not computed again.
        """
        if not value:
            return value
        found: Scan = None if isinstance(scanned, EllipsisType) else scanned
        fresh = not isinstance(scanned, EllipsisType)  # found is the scan of value (since it last changed)
        for regex, replace, kind in self._passes:
            if kind is None:  # a custom pattern: over the whole text
                new = regex.sub(replace, value)
            else:
                if not fresh:
                    found, fresh = scan(value), True
                    if found is None and self._only_builtins:
                        return value
                if found is None:
                    continue
                if kind == KIND_KEY:
                    if not found[0]:
                        continue
                    new = regex.sub(replace, value)
                else:
                    runs = cast(Runs, found[kind])
                    if runs is None:
                        continue
                    new = _sub_runs(regex, replace, value, runs)
            if new != value:
                value, fresh = new, False
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

KIND_KEY, KIND_EMAIL, KIND_CARD, KIND_PHONE = 0, 1, 2, 3
_KINDS: Mapping[str, int] = {"api_key": KIND_KEY, "email": KIND_EMAIL, "card": KIND_CARD, "phone": KIND_PHONE}
"""Where each built-in's candidates are in a :func:`scan` result."""

_KEY_MARKERS: Final = (
    "sk-", "AKIA", "xox", "AIza", "eyJ", "earer", "EARER", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
)  # fmt: skip
"""Literals of which every key match holds one (``bearer`` in either case through ``earer``/``EARER``)."""

_RUN_CLASSES: Final = (
    (re.compile(r"[A-Za-z0-9._%+@-]+"), 1, re.compile("@")),
    (re.compile(r"\d[\d -]*"), 13, re.compile(r"\d")),
    (re.compile(r"[\d+(][\d .()+-]*"), 8, re.compile(r"\d")),
)
"""Email, card, phone: each kind's run (its characters, from one a match can begin with), how many counted
characters (the ``@``, digits) a run needs."""

Runs = list[tuple[int, int]] | None
Scan = tuple[bool, Runs, Runs, Runs] | None


_GROUPS: Final = re.compile(r"\d+")


def _phone_groups(run: str) -> bool:
    """A grouped phone number ends in two groups of 3-4 digits; an international one has 8+ in a row."""
    lengths = [len(g) for g in _GROUPS.findall(run)]
    return sum(n >= 3 for n in lengths) >= 2 or any(n >= 8 for n in lengths)


def _scan_py(text: str) -> Scan:
    """The pure-Python twin of ``scorers._redact_fast.scan`` (see :data:`scan`)."""
    key = any(marker in text for marker in _KEY_MARKERS)
    runs = [
        [
            m.span()
            for m in found.finditer(text)
            if len(counted.findall(m.group())) >= need and (kind != KIND_PHONE or _phone_groups(m.group()))
        ]
        or None
        for kind, (found, need, counted) in zip((KIND_EMAIL, KIND_CARD, KIND_PHONE), _RUN_CLASSES, strict=True)
    ]
    if not key and not any(runs):
        return None
    return key, runs[0], runs[1], runs[2]


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("scorers._redact_fast")
    except ImportError:  # no C compiler where it was installed: the pure-Python scanner
        return None


_FAST = _compiled()


def compiled() -> ModuleType | None:
    """The compiled module (``scorers._redact_fast``: the scan, the run details' attribute loop), if built."""
    return _FAST


scan: Callable[[str], Scan] = _FAST.scan if _FAST is not None else _scan_py
"""``scan(text)``: where the built-in patterns can match, in one pass — ``None`` when nowhere, else
``(key_marker, email_runs, card_runs, phone_runs)``: whether a literal every key match holds occurs
(:data:`_KEY_MARKERS`), and the ``(start, end)`` of each maximal run of the characters an email
(ASCII letters, digits, ``._%+-@``, holding an ``@``), a card number (digits, space, ``-``, at least
13 digits) or a phone number (digits, space, ``.()+-``, at least 8 digits, and two groups of 3 or more
digits in a row or one of 8 or more: dates and short ids are not phone runs) is made of (``None``: no
run). Every match of a built-in lies inside one run of its kind. Compiled
(``scorers/_redact_fast.c``) where a C compiler was available at install, else in Python."""


def _sub_runs(
    regex: re.Pattern[str], replace: Callable[[re.Match[str]], str], text: str, runs: list[tuple[int, int]]
) -> str:
    """``regex.sub(replace, text)`` computed on the candidate ``runs`` of ``text`` only.

    Each run is matched with one character of context on either side: the built-in patterns'
    look-arounds read one character, and a context character (outside the class) is never part
    of a match, so the replaced run is what the whole-text substitution gives there.
    """
    size = len(text)
    parts: list[str] = []
    last = 0
    for start, end in runs:
        left, right = (1 if start > 0 else 0), (1 if end < size else 0)
        piece = text[start - left : end + right]
        new = regex.sub(replace, piece)
        if new != piece:
            parts.append(text[last:start])
            parts.append(new[left : len(new) - right])
            last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _replacement(name: str) -> Callable[[re.Match[str]], str]:
    marker = f"[REDACTED:{name}]"
    if name != "card":
        return lambda match: marker
    return lambda match: marker if luhn_ok(match.group()) else match.group()
