#!/usr/bin/env python3
"""libFuzzer harness: the compiled redaction and run-details loops (``scorers/_redact_fast.c``, built
with ASan + UBSan) against their Python twins, on values the input describes.

    bash scripts/fuzz/run.sh 60 redact

Each input chooses one entry point and its argument:

- ``scan(text)`` against ``scorers.redact._scan_py``: the same candidate runs of e-mails, card and
  phone numbers and the same key marker;
- ``stored_attributes`` (``review_queue.details._attributes``) against ``_attributes_py``: a span's
  attributes stored alike (keys dropped or redacted, values cut, redacted, stringified, the count
  dropped), each loop keeping its own memory from input to input as a writer keeps its own;
- ``genai_pairs`` against ``scorers.dialects.genai._pairs_py``: the same ``(role, content)`` of each
  GenAI message.

Texts are dense in what the loops decide on: secrets of each kind, NUL, non-ASCII digits, long texts
past the cache and value limits, the 64-bit integer bounds, non-finite floats, nesting.
"""

from __future__ import annotations

import sys
from typing import Any

import _sanitized
import atheris

with atheris.instrument_imports(include=["scorers.redact", "review_queue.details", "scorers.dialects.genai"]):
    import orjson

    from review_queue import details
    from scorers import redact
    from scorers.dialects import genai
    from scorers.dialects.base import MAX_TEXT, as_text

FAST = _sanitized.loaded("scorers._redact_fast")

PIECES = (
    "a", " ", "bob@example.com", "a.b+c@mail.example.org", "sk-proj-abcdefghijklmnopqrstuvwx", "AKIAABCDEFGHIJKLMNOP",
    "+49 151 1234 5678", "(030) 123-4567", "4111 1111 1111 1111", "4111-1111-1111-1112", "2024-05-01", "\x00", "é",
    "٣٤٥", "１２３", "x" * 120, "y" * 300, "call_5f3a9b2c", "[REDACTED:email]", "\n", "@", "-", ".", "password",
)  # fmt: skip
KEYS = ("gen_ai.tool.name", "n", "", "user_password", "x-api_key", "mail bob@example.com", "k" * 300, "authorization")


class Values:
    """Python values read from the fuzzer's input."""

    def __init__(self, data: bytes) -> None:
        self.fdp = atheris.FuzzedDataProvider(data)

    def pick(self, n: int) -> int:
        return self.fdp.ConsumeIntInRange(0, n - 1)

    def text(self) -> str:
        if self.pick(4) == 3:
            return self.fdp.ConsumeUnicodeNoSurrogates(self.fdp.ConsumeIntInRange(0, 64))
        return "".join(PIECES[self.pick(len(PIECES))] for _ in range(self.fdp.ConsumeIntInRange(0, 40)))

    def scalar(self) -> Any:
        match self.pick(8):
            case 0 | 1:
                return self.text()
            case 2:
                return self.fdp.ConsumeInt(9) if self.pick(2) else self.fdp.ConsumeInt(4)
            case 3:
                return (2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 0, 1, True, False, None)[self.pick(9)]
            case 4:
                return self.fdp.ConsumeRegularFloat() if self.pick(2) else self.fdp.ConsumeFloat()
            case 5:
                return self.fdp.ConsumeBytes(self.pick(5))
            case _:
                return self.text()[:3]

    def value(self, depth: int = 0) -> Any:
        if depth >= 6:
            return self.scalar()
        match self.pick(10):
            case 0:
                return [self.value(depth + 1) for _ in range(self.fdp.ConsumeIntInRange(0, 70 if self.pick(4) else 5))]
            case 1:
                return (self.value(depth + 1), self.value(depth + 1))
            case 2:
                return {self.key(): self.value(depth + 1) for _ in range(self.pick(4))}
            case _:
                return self.scalar()

    def key(self) -> str:
        return KEYS[self.pick(len(KEYS))] if self.pick(2) else self.text()[:12]

    def attributes(self) -> dict[str, Any]:
        if self.pick(8) == 0:  # past MAX_ATTRIBUTES
            return {f"k{i}": self.fdp.ConsumeInt(2) for i in range(self.fdp.ConsumeIntInRange(100, 140))}
        return {self.key(): self.value() for _ in range(self.pick(13))}

    def messages(self) -> list[Any]:
        def part() -> Any:
            if self.pick(6) == 0:
                return self.text()[:3]
            fields = ("type", "content", "name", "arguments", "response", "result")
            kinds = ("text", "tool_call", "tool_call_response", "image", 5, None)
            out: dict[str, Any] = {}
            for field in fields:
                if self.pick(2):
                    out[field] = kinds[self.pick(len(kinds))] if field == "type" else self.part_value()
            return out

        def message() -> Any:
            if self.pick(8) == 0:
                return self.scalar()
            out: dict[str, Any] = {}
            if self.pick(4):
                out["role"] = ("user", "assistant", "tool", "", None, _Str("x"))[self.pick(6)]
            if self.pick(4):
                out["parts"] = [part() for _ in range(self.pick(5))] if self.pick(4) else self.text()[:3]
            if self.pick(3) == 0:
                out["content"] = self.text()[:5] if self.pick(2) else [{"text": self.text()[:4]}]
            return out

        return [message() for _ in range(self.pick(9))]

    def part_value(self) -> Any:
        match self.pick(6):
            case 0:
                return "x" * (MAX_TEXT + 5)
            case 1:
                return {"q": self.scalar()}
            case 2:
                return _Str(self.text()[:3])
            case _:
                return self.scalar()


class _Str(str):
    """A str subclass: the compiled loops must treat it as Python does."""


REDACTORS = (redact.Redactor(), redact.Redactor(custom={"ticket": r"TICKET-\d+"}))
MEMORIES = [(details.Texts(r), details.Texts(r)) for r in REDACTORS]  # (compiled, Python) per redactor


def _stored(mapping: Any, dropped: int) -> tuple[bytes, int]:
    return orjson.dumps(mapping, option=orjson.OPT_NON_STR_KEYS), dropped


def one_input(data: bytes) -> None:
    values = Values(data)
    match values.pick(3):
        case 0:
            text = values.text()
            ours, theirs = FAST.scan(text), redact._scan_py(text)
            if ours != theirs:
                raise AssertionError(f"scan({text!r}): compiled {ours}, python {theirs}")
        case 1:
            fast, slow = MEMORIES[values.pick(2)]
            attrs = values.attributes()
            ours_stored = _stored(*details._attributes(attrs, fast))
            theirs_stored = _stored(*details._attributes_py(attrs, slow))
            if ours_stored != theirs_stored:
                raise AssertionError(
                    f"stored_attributes({attrs!r}):\n compiled {ours_stored}\n python   {theirs_stored}"
                )
        case _:
            items = values.messages()
            pairs = genai._pairs(items, genai.message_of, as_text, MAX_TEXT)
            expected = genai._pairs_py(items, genai.message_of, as_text, MAX_TEXT)
            if pairs != expected:
                raise AssertionError(f"genai_pairs({items!r}): compiled {pairs}, python {expected}")


def main() -> None:
    if details._STORED is None or genai._pairs is genai._pairs_py:
        raise SystemExit("the sanitizer build of scorers._redact_fast lacks the run-details loops")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
