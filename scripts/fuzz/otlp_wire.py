#!/usr/bin/env python3
"""libFuzzer harness: a structure-aware OTLP writer driven by the input, the compiled decoder checked
against Python.

    bash scripts/fuzz/run.sh 60 otlp_wire

Raw bytes rarely get past the first few fields of a request; here the input is read as a series of
choices that write a protobuf ``ExportTraceServiceRequest`` field by field
(``opentelemetry/proto/trace/v1/trace.proto``): resources, scopes, spans, events, status and nested
``AnyValue`` attributes (arrays, key-value lists, bytes, doubles), with what hostile exporters send —
ids of any length, repeated copies of a singular field (protobuf keeps the last, and checks every copy's
UTF-8), text that is not UTF-8, unknown fields of every wire type, wrong wire types, deep nesting, a cut
at the end. The checks are ``otlp_raw``'s.
"""

from __future__ import annotations

import struct
import sys

import _sanitized
import atheris

with atheris.instrument_imports(include=["collector"]):
    from otlp_raw import check

_sanitized.loaded("collector._otlp_fast")

KEYS = (
    b"gen_ai.operation.name", b"gen_ai.agent.name", b"gen_ai.tool.name", b"gen_ai.input.messages",
    b"gen_ai.output.messages", b"gen_ai.usage.input_tokens", b"openinference.span.kind", b"input.value",
    b"service.name", b"session.id", b"error.type", b"exception.message", b"",
)  # fmt: skip
TEXTS = (b"", b"chat", b"execute_tool", b"\xc3\xa9t\xc3\xa9", b"\xff\xfe", b"\xed\xa0\x80", b"\xc3", b"a\x00b")
ID_LENGTHS = (16, 16, 16, 8, 8, 0, 1, 15, 17, 32)


def varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def length(field: int, data: bytes) -> bytes:
    return tag(field, 2) + varint(len(data)) + data


class Writer:
    """Writes one request from the fuzzer's choices; every choice is read from the input."""

    def __init__(self, data: bytes) -> None:
        self.fdp = atheris.FuzzedDataProvider(data)

    def pick(self, n: int) -> int:
        return self.fdp.ConsumeIntInRange(0, n - 1)

    def rare(self, one_in: int) -> bool:
        """True about once in ``one_in`` inputs, and never once the input is used up (which reads as zeros):
        a short input writes a plain, well-formed request."""
        return self.pick(one_in) == one_in - 1

    def count(self, most: int) -> int:
        return self.fdp.ConsumeIntInRange(0, most)

    def text(self) -> bytes:
        match self.pick(5):
            case 0:
                return KEYS[self.pick(len(KEYS))]
            case 1:
                return TEXTS[self.pick(len(TEXTS))]
            case 2:
                return self.fdp.ConsumeUnicodeNoSurrogates(self.count(40)).encode()
            case 3:
                return self.fdp.ConsumeBytes(self.count(40))
            case _:
                return self.fdp.ConsumeBytes(1) * self.fdp.ConsumeIntInRange(0, 5000)

    def text_field(self, field: int) -> bytes:
        """A singular text field, now and then given twice with different text (protobuf keeps the last
        copy and checks every copy's UTF-8: an identical copy cannot tell the two apart)."""
        out = length(field, self.text())
        return out + length(field, self.text()) if self.rare(8) else out

    def ident(self) -> bytes:
        size = ID_LENGTHS[self.pick(len(ID_LENGTHS))]
        return bytes(size) if self.rare(8) else self.fdp.ConsumeBytes(size).ljust(size, b"\x01")

    def noise(self) -> bytes:
        """An unknown field (a high number) of any wire type, or a known number with the wrong wire type."""
        field = self.fdp.ConsumeIntInRange(1, 40) if self.pick(2) else self.fdp.ConsumeIntInRange(16, 2**29 - 1)
        match self.pick(6):
            case 0:
                return tag(field, 0) + varint(self.fdp.ConsumeInt(8))
            case 1:
                return tag(field, 1) + self.fdp.ConsumeBytes(8).ljust(8, b"\0")
            case 2:
                return length(field, self.fdp.ConsumeBytes(self.count(16)))
            case 3:
                return tag(field, 5) + self.fdp.ConsumeBytes(4).ljust(4, b"\0")
            case 4:
                return tag(field, self.pick(2) + 3)  # a group start or end: protobuf refuses groups here
            case _:
                return tag(field, self.pick(8))

    def message(self, fields: list[bytes]) -> bytes:
        """The fields, in another order, with copies and noise where the input says so."""
        if len(fields) > 1 and self.rare(6):  # protobuf takes fields in any order
            fields = fields[:]
            fields.append(fields.pop(self.pick(len(fields))))
        out = bytearray()
        for field in fields:
            # (a copy only of a small field: copies at every level of nesting would grow the body 2^depth)
            out += field * (2 if len(field) <= 256 and self.rare(10) else 1)
            if self.rare(12):
                out += self.noise()
        return bytes(out)

    def any_value(self, depth: int) -> bytes:
        kind = self.pick(9 if depth < 48 else 5)
        match kind:
            case 0:
                return length(1, self.text())
            case 1:
                return tag(2, 0) + varint(self.pick(3))
            case 2:
                return tag(3, 0) + varint(self.fdp.ConsumeInt(8))
            case 3:
                return tag(4, 1) + struct.pack("<d", self.fdp.ConsumeFloat())
            case 4:
                return length(7, self.fdp.ConsumeBytes(self.count(24)))
            case 5 | 6:
                items = [length(1, self.any_value(depth + 1)) for _ in range(self.count(4))]
                return length(5, self.message(items))  # ArrayValue.values
            case 7:
                pairs = [length(1, self.key_value(depth + 1)) for _ in range(self.count(4))]
                return length(6, self.message(pairs))  # KeyValueList.values
            case _:
                return b""

    def key_value(self, depth: int = 0) -> bytes:
        fields = [self.text_field(1)]
        if not self.rare(8):
            fields.append(length(2, self.any_value(depth)))
        return self.message(fields)

    def attributes(self, field: int, most: int) -> list[bytes]:
        return [length(field, self.key_value()) for _ in range(self.count(most))]

    def span(self) -> bytes:
        fields = [length(1, self.ident()), length(2, self.ident())]
        if self.pick(2):
            fields.append(length(4, self.ident()))
        if not self.rare(6):
            fields.append(self.text_field(5))
        fields.append(tag(6, 0) + varint(self.fdp.ConsumeIntInRange(-1, 7)))
        for number in (7, 8):
            if not self.rare(6):
                fields.append(tag(number, 1) + struct.pack("<Q", self.fdp.ConsumeIntInRange(0, 2**64 - 1)))
        fields += self.attributes(9, 6)
        for _ in range(self.count(2)):
            event = [tag(1, 1) + struct.pack("<Q", self.fdp.ConsumeIntInRange(0, 2**64 - 1)), self.text_field(2)]
            fields.append(length(11, self.message(event + self.attributes(3, 3))))
        if self.pick(2):
            status = [self.text_field(2), tag(3, 0) + varint(self.fdp.ConsumeIntInRange(-1, 4))]
            fields.append(length(15, self.message(status)))
        return self.message(fields)

    def request(self) -> bytes:
        resources = []
        for _ in range(self.fdp.ConsumeIntInRange(1, 3)):
            fields = []
            if not self.rare(4):
                fields.append(length(1, self.message(self.attributes(1, 3))))
            for _ in range(self.fdp.ConsumeIntInRange(1, 3)):
                scope = [length(1, self.message([self.text_field(1)]))] if self.pick(2) else []
                scope += [length(2, self.span()) for _ in range(self.fdp.ConsumeIntInRange(1, 4))]
                fields.append(length(2, self.message(scope)))
            resources.append(length(1, self.message(fields)))
        body = self.message(resources)
        if self.rare(16):
            body = body[: self.fdp.ConsumeIntInRange(0, len(body))]
        return body


def one_input(data: bytes) -> None:
    check(Writer(data).request())


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
