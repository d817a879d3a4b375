"""The compiled OTLP decoder (``collector/_otlp_fast.c``) against the Python one, the reference.

Shared by ``tests/collector/test_otlp_fast.py`` and the fuzz harnesses in ``scripts/fuzz/``, which
hand in a sanitizer build of the extension: the compiled decoder either hands a body back or
produces exactly what the Python decoder produces.
"""

from __future__ import annotations

from types import ModuleType

from collector import otlp
from collector.errors import DecodeError
from collector.model import DecodeResult, SpanEvent, new_span

__all__ = ["Divergence", "assert_same", "compiled_decode", "python_decode"]


class Divergence(AssertionError):
    """The compiled decoder produced what the Python decoder would not."""


def compiled_decode(body: bytes, fast: ModuleType | None = None) -> DecodeResult | None:
    """The compiled decoder's result (``fast``, the installed build by default), or None when it hands
    the body back."""
    fast = fast or otlp._fast
    assert fast is not None, "collector._otlp_fast was not built by the install"
    acc = otlp._Accumulator()
    limits = (otlp.MAX_DEPTH, otlp.MAX_ATTRIBUTE_BYTES)
    cut = fast.decode(body, acc.traces, acc.reject_ids, new_span, SpanEvent, otlp._KINDS, otlp._CODES, *limits)
    if cut < 0:
        return None
    acc.truncated = cut
    return acc.result(len(body))


def python_decode(body: bytes) -> DecodeResult | DecodeError:
    """The Python decoder's result, or the error it refuses the body with."""
    try:
        return otlp._decode_protobuf_python(body)
    except DecodeError as exc:
        return exc


def assert_same(compiled: DecodeResult, reference: DecodeResult | DecodeError) -> None:
    """Raise :class:`Divergence` unless both decoders accounted for the body alike."""
    if not isinstance(reference, DecodeResult):
        raise Divergence(f"the Python decoder refused a body the compiled one took: {reference}")
    # repr, not ==: a NaN double attribute is never equal to itself, but prints the same
    ours = repr([(b.trace_id, b.spans) for b in compiled.batches])
    theirs = repr([(b.trace_id, b.spans) for b in reference.batches])
    if ours != theirs:
        raise Divergence(f"different spans:\n compiled {ours[:2000]}\n python   {theirs[:2000]}")
    counts = (compiled.rejected, compiled.errors, compiled.truncated)
    expected = (reference.rejected, reference.errors, reference.truncated)
    if counts != expected:
        raise Divergence(f"different (rejected, errors, truncated): compiled {counts}, python {expected}")
