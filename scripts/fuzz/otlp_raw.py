#!/usr/bin/env python3
"""libFuzzer harness: raw bytes into the OTLP protobuf decoder, the compiled one checked against Python.

    bash scripts/fuzz/run.sh otlp_raw 60       # (builds, preloads the sanitizer runtime, seeds)

Each input is a request body as it arrives after decompression. Fails on a sanitizer report in the
compiled decoder (``collector/_otlp_fast.c``, built with ASan + UBSan), on a result the Python
decoder (``collector/otlp.py``, the reference) would not give — from the compiled decoder, or from
the fallback that reads a handed-back body's pairs with the compiled pair reader — and on anything
but a result or a ``DecodeError`` from the production entry point (``decode_protobuf``).
"""

from __future__ import annotations

import contextlib
import sys

import _sanitized
import atheris

with atheris.instrument_imports(include=["collector"]):
    from collector import otlp
    from collector.errors import DecodeError
    from tests.support.decoders import Divergence, assert_same, compiled_decode, python_decode

FAST = _sanitized.loaded("collector._otlp_fast")


def check(body: bytes) -> None:
    """One input: the production path answers, and the compiled result (if any) is the reference's."""
    with contextlib.suppress(DecodeError):
        otlp.decode_protobuf(body)
    reference = python_decode(body)
    compiled = compiled_decode(body, FAST)
    if compiled is not None:
        assert_same(compiled, reference)
    # a handed-back body: its pairs read by the compiled pair reader where it can (otlp._fallback_pair)
    try:
        fallback = otlp._decode_protobuf_python(body, otlp._fallback_pair)
    except DecodeError as exc:
        if not isinstance(reference, DecodeError):
            raise Divergence(f"only the fallback refused the body: {exc}") from exc
        return
    if not any("values for its size" in e for e in fallback.errors):  # (the fallback's own budget)
        assert_same(fallback, reference)


def main() -> None:
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
