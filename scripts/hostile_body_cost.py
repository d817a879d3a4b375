"""The CPU a crafted OTLP body costs the decoder, against an ordinary body of the same size (issue 42).

The crafted body: spans whose one attribute each is a ``KeyValue`` made of 2-byte unknown fields
ending in a cut-off tag (about 1 MiB each). protobuf refuses each pair; the compiled decoder hands the
body to the Python one, which used to walk every pair field by field in Python before rejecting it
(7.8 s of CPU, GIL held, for 20 MiB on the machine that found it). The ordinary body: the heavy
bench's synthetic runs (``vigil.bench.synth``) with captured content, to the same size.

Each body is decoded ``--rounds`` times with :func:`collector.otlp.decode_protobuf` (the production
entry point: compiled decoder first, Python fallback), and the median process CPU is printed with
the ratio. Works on any tree: ``PYTHONPATH=<tree> python scripts/hostile_body_cost.py``::

    PYTHONPATH=/tmp/base .venv/bin/python scripts/hostile_body_cost.py --mib 20   # before
    .venv/bin/python scripts/hostile_body_cost.py --mib 20                        # after
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.otlp import decode_protobuf


def _ld(field: int, payload: bytes) -> bytes:
    size, out = len(payload), bytearray([field << 3 | 2])
    while True:
        out.append(size & 0x7F | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            return bytes(out) + payload


def crafted(size: int) -> bytes:
    """Spans of one ~1 MiB pair each, made of 2-byte unknown fields and a cut-off tag, ``size`` bytes in
    all (each span is rejected on its own pair, so each pair costs its walk)."""
    pair = _ld(1, b"a") + b"\x78\x00" * (512 * 1024) + b"\x80"
    spans = b"".join(
        _ld(2, _ld(1, bytes(range(1, 17))) + _ld(2, i.to_bytes(8, "big")) + _ld(5, b"s") + _ld(9, pair))
        for i in range(1, max(1, size // len(pair)) + 1)
    )
    return _ld(1, _ld(2, spans))


def deep_padded(size: int, pad: bytes = b"\x78\x00") -> bytes:
    """As :func:`crafted`, but each pair nested 40 kvlists deep first (too deep for protobuf, so the
    Python wire reader does walk it), then padded with ``pad`` (an unknown field; ``0a 00``: an empty
    copy of its key, legal protobuf): what the reader's unknown-field rule and field budget bound."""
    value = _ld(1, b"x")
    for _ in range(40):
        value = _ld(6, _ld(1, _ld(1, b"k") + _ld(2, value)))
    pair = _ld(1, b"deep") + _ld(2, value) + pad * (512 * 1024)
    spans = b"".join(
        _ld(2, _ld(1, bytes(range(1, 17))) + _ld(2, i.to_bytes(8, "big")) + _ld(5, b"s") + _ld(9, pair))
        for i in range(1, max(1, size // len(pair)) + 1)
    )
    return _ld(1, _ld(2, spans))


def _span(i: int, *attributes: bytes) -> bytes:
    return _ld(2, _ld(1, bytes(range(1, 17))) + _ld(2, i.to_bytes(8, "big")) + _ld(5, b"s") + b"".join(attributes))


def dense(size: int, unusual: bool = False) -> bytes:
    """Spans of one pair each holding an array of 64 Ki 4-byte values (``int_value: 1``), well-formed, plus
    one span whose attribute key is not UTF-8 (the compiled decoder hands such a body back; the Python
    decoder rejects that span). ``unusual``: each array also holds one member that gives its oneof twice
    (legal protobuf, last wins, that only the Python decoder reads), so every pair is read in Python."""
    members = _ld(1, b"\x18\x01") * (64 * 1024) + (_ld(1, b"\x18\x01\x18\x02") if unusual else b"")
    pair = _ld(1, b"dense") + _ld(2, _ld(5, members))
    spans = b"".join(_span(i, _ld(9, pair)) for i in range(1, max(1, size // len(pair)) + 1))
    bad = _span(2**40, _ld(9, _ld(1, b"\xff") + _ld(2, _ld(1, b"v"))))
    return _ld(1, _ld(2, spans + bad))


def ordinary(size: int) -> bytes:
    """The heavy bench's runs with captured content, merged into one request of about ``size`` bytes."""
    from vigil.bench.synth import body, make_run

    rng, spans, total = random.Random(7), [], 0
    while total < size:
        run = make_run(rng, content_bytes=2048).spans
        spans.extend(run)
        total += sum(s.ByteSize() for s in run)
    data = body(spans)
    ExportTraceServiceRequest.FromString(data)  # a valid request
    return data


def cpu(data: bytes, rounds: int) -> tuple[float, str]:
    """The median CPU seconds of decoding ``data`` and what the decoder made of it."""
    seconds, outcome = [], ""
    for _ in range(rounds):
        start = time.process_time()
        result = decode_protobuf(data)
        seconds.append(time.process_time() - start)
        spans = sum(len(b.spans) for b in result.batches)
        outcome = f"{spans} spans accepted, {result.rejected} rejected"
    return statistics.median(seconds), outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=20, help="body size in MiB (the default size limit: 20)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    size = args.mib * 1024 * 1024
    normal = ordinary(size)
    n, n_out = cpu(normal, args.rounds)
    print(f"ordinary        {len(normal) / 2**20:5.1f} MiB: {n:.3f} CPU-s median of {args.rounds} ({n_out})")
    variants = {
        "crafted": crafted(size),
        "deep+unknown": deep_padded(size),
        "deep+repeated": deep_padded(size, b"\x0a\x00"),
        "dense+1 bad": dense(size),
        "dense unusual": dense(size, unusual=True),
    }
    for name, data in variants.items():
        h, h_out = cpu(data, args.rounds)
        print(
            f"{name:13} {len(data) / 2**20:5.1f} MiB: {h:.3f} CPU-s median of {args.rounds} ({h_out}); "
            f"{h / n:.1f}x the ordinary body"
        )


if __name__ == "__main__":
    main()
