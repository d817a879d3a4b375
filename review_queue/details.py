"""Run details: the per-run document behind the run page (conversation, span tree, span attributes).

The review item's snapshot exists only for flagged runs; the details document exists for every
flagged run (as long as the run) and for every other run by default (``VIGIL_DETAILS_SAMPLE_RATE``,
1 by default; a lower rate keeps a deterministic share of the unflagged runs), kept
``VIGIL_DETAILS_RETENTION_DAYS`` (7 by default; ``0`` keeps details of flagged runs only).
It is built **off the scoring path**: :class:`DetailsWriter` receives each batch once the store
has committed it (the stream worker's / consumer's ``on_written`` hook), and a thread of its own
builds, redacts, bounds and writes the documents in batches. When that thread falls
behind, whole batches are dropped and counted (``vigil_run_details_dropped_total``): a missing
details document shows as "details not kept", it never slows scoring down.

What is stored is the *compact* form (``details_version`` 2, :func:`compact`): one array per span
(:data:`SPAN_FIELDS`, in that order) holding the span's attribute mapping itself when every key and
value is already known to be stored unchanged (:class:`Texts` remembers them), and the
conversation. :func:`decode` expands it into the reviewer-facing document (span objects with their
duration, events as objects) when a page is rendered; :func:`build_details` gives the expanded
form directly. Building the compact form is what every run pays, so it does as little as it can:
no per-span object with twenty keys, no per-value work for values seen before (BENCHMARKS.md,
"run details").

Bounds (per run, documented in docs/reviewing.md, "Run details"):

* :data:`MAX_VALUE_CHARS` characters per attribute value, message, argument or result;
* :data:`MAX_ATTRIBUTES` attributes and :data:`MAX_EVENTS` events per span (the rest counted);
* :data:`MAX_SPANS` spans per run;
* :data:`MAX_DOC_BYTES` of JSON before compression: past it, attributes are dropped from the
  last spans first (each such span says so).

Every text goes through the same :class:`scorers.redact.Redactor` as the review snapshot and
attribute keys through its key filter (``*password*``, ``*api_key*`` … dropped). The stored body
is compact JSON compressed with Zstandard (see :data:`CODEC`).
"""

from __future__ import annotations

import hashlib
import math
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import orjson
import structlog
import zstandard

from collector.budget import ByteAccount
from collector.lifecycle import name_os_thread
from collector.model import AttrValue, SpanEvent
from review_queue.sessions import user_message
from review_queue.views import unanswered
from scorers import content
from scorers.model import Run, ScoredRun, Step, StepKind, ToolCall, run_bytes
from scorers.pricing import PriceTable
from scorers.redact import Redactor, compiled

_STORED: Final = getattr(compiled(), "stored_attributes", None)
"""The compiled :func:`_attributes` (``scorers/_redact_fast.c``), ``None`` where it was not built."""

__all__ = [
    "DEFAULT_DETAILS_RETENTION_DAYS",
    "DEFAULT_DETAILS_SAMPLE_RATE",
    "DETAILS_VERSION",
    "MAX_ATTRIBUTES",
    "MAX_DOC_BYTES",
    "MAX_EVENTS",
    "MAX_SPANS",
    "MAX_VALUE_CHARS",
    "SPAN_FIELDS",
    "DetailsWriter",
    "Texts",
    "build_details",
    "compact",
    "decode",
    "details_row",
    "details_sampled",
    "encode",
    "expand",
]

log = structlog.get_logger(__name__)

DETAILS_VERSION: Final = 2
"""Version of the stored (compact) form; version 1 bodies (expanded documents) still decode."""
DEFAULT_DETAILS_RETENTION_DAYS: Final = 7.0
"""Days an unflagged run's details are kept (``VIGIL_DETAILS_RETENTION_DAYS``); 0: flagged runs only."""
DEFAULT_DETAILS_SAMPLE_RATE: Final = 1.0
"""Share of unflagged runs whose details are written (``VIGIL_DETAILS_SAMPLE_RATE``; flagged runs always are):
every run, as the run page promises (any stored run can be opened). The cost is measured by the heavy-content
bench row (``vigil bench --heavy``, BENCHMARKS.md); a lower rate is an operator's choice to save CPU and disk."""
SPAN_FIELDS: Final = (
    "span_id", "parent_id", "name", "kind", "start_ns", "end_ns", "error", "error_type", "status_message",
    "model", "input_tokens", "output_tokens", "cost_usd", "finish_reasons", "attributes", "attributes_dropped",
    "events", "events_dropped",
)  # fmt: skip
"""The fields of a span, in the order of a stored span array (an event array: name, time_ns, attributes)."""
_ATTRS: Final = SPAN_FIELDS.index("attributes")
MAX_VALUE_CHARS: Final = 2048
MAX_ATTRIBUTES: Final = 128
MAX_EVENTS: Final = 32
MAX_EVENT_ATTRIBUTES: Final = 32
MAX_SPANS: Final = 2000
MAX_LIST_ITEMS: Final = 64
MAX_DOC_BYTES: Final = 1024 * 1024
CODEC: Final = "zstd1+json"
"""How bodies are stored: the compact JSON form compressed with Zstandard (level 1), one blob per run.
On the heavy-content workload (``vigil bench --heavy``: ~22 spans and 1-2 KB of messages per model span)
a run's JSON is ~36 KB and its blob ~4.5 KB (8×); compressing costs ~43 µs a run and saves ~65 µs of
the SQLite insert, and the database is 8× smaller (BENCHMARKS.md, "heavy-content row"). Bodies of
the earlier codecs (``json``: plain compact JSON; ``zlib1+json``) still decode."""
_ZSTD_LEVEL: Final = 1
_ZSTD = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    found: zstandard.ZstdCompressor | None = getattr(_ZSTD, "compressor", None)
    if found is None:  # one per thread: a compressor object is not thread-safe
        found = _ZSTD.compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return found


def _compress(data: bytes) -> bytes:
    """``data`` compressed (:data:`CODEC`), in a bytes object of its own length: python-zstandard's
    ``compress()`` leaves its output allocated at the compression bound (about the input's size, 8× a
    heavy run's blob), and a writer's batch holds up to 500 of them (BENCHMARKS.md, "session 16")."""
    return bytes(memoryview(_compressor().compress(data)))


_KIND = {kind: kind.value for kind in StepKind}


def details_sampled(trace_id: str, rate: float) -> bool:
    """Whether an unflagged run's details are written at ``rate`` (deterministic: every replica agrees).

    The point is a keyed BLAKE2b of the trace id, independent of the review queue's random sample
    (:func:`scorers.rules.sample_point`) and of the trace-id bits OpenTelemetry's ratio samplers read.
    """
    if rate >= 1.0:
        return True
    digest = hashlib.blake2b(trace_id.lower().encode(), digest_size=8, person=b"vigil.details").digest()
    return int.from_bytes(digest, "big") < rate * 2**64


def build_details(
    scored: ScoredRun,
    redactor: Redactor,
    prices: PriceTable | None = None,
    texts: Texts | None = None,
    *,
    fit: bool = True,
) -> dict[str, Any]:
    """The details document of one scored run as a page reads it (plain JSON types, redacted, bounded).

    Args:
        scored: the run as scored (unredacted: this function redacts).
        redactor: the redactor of the review snapshot.
        prices: the model price table (estimated cost per LLM span); none: no cost.
        texts: the redaction memory to use (a writer keeps one); default a fresh one.
        fit: cut the document to :data:`MAX_DOC_BYTES`.

    Returns:
        ``{details_version, trace_id, spans: [{...}], conversation: [...], content_captured,
        spans_dropped, truncated}``: what :func:`decode` gives for the stored :func:`compact` form.
    """
    doc = decode(orjson.dumps(compact(scored, texts if texts is not None else Texts(redactor), prices)), "json")
    if fit:
        _fit(doc, len(orjson.dumps(doc)))
    return doc


def compact(scored: ScoredRun, text: Texts, prices: PriceTable | None = None) -> dict[str, Any]:
    """The stored form of one scored run's details (``details_version`` 2; see the module docstring).

    Args:
        scored: the run as scored (unredacted: this function redacts through ``text``).
        text: the redaction memory (:class:`Texts`) of the caller's thread.
        prices: the model price table (estimated cost per LLM span); none: no cost.
    """
    run = scored.run
    steps = run.steps if len(run.steps) <= MAX_SPANS else run.steps[:MAX_SPANS]
    conversation = _conversation(run, text)
    return {
        "details_version": DETAILS_VERSION,
        "trace_id": run.trace_id,
        "spans": [_span(step, text, prices) for step in steps],
        "spans_dropped": max(0, len(run.steps) - MAX_SPANS),
        "truncated": False,
        "conversation": conversation,
        "content_captured": any(e["kind"] != "guardrail" for e in conversation),
    }


def expand(doc: dict[str, Any]) -> dict[str, Any]:
    """The reviewer-facing document of a stored one: span arrays become objects (with ``duration_s``).

    A version 1 document (already expanded) is returned as it is. Values are not redacted again:
    they were redacted when stored.
    """
    if doc.get("details_version") != DETAILS_VERSION:
        return doc
    spans = []
    for row in doc.get("spans") or ():
        if isinstance(row, dict):  # already expanded
            spans.append(row)
            continue
        if not isinstance(row, list) or len(row) != len(SPAN_FIELDS):
            continue
        span = dict(zip(SPAN_FIELDS, row, strict=True))
        start, end = span["start_ns"] or 0, span["end_ns"] or 0
        span["duration_s"] = max(0, end - start) / 1e9
        span["events"] = [
            {"name": e[0], "time_ns": e[1], "attributes": e[2]}
            for e in span["events"] or ()
            if isinstance(e, list) and len(e) == 3
        ]
        spans.append(span)
    return {**doc, "spans": spans}


def encode(doc: Mapping[str, Any]) -> bytes:
    """Stored body of a details document (:data:`CODEC`)."""
    return _compress(orjson.dumps(doc))


def decode(body: bytes, codec: str = CODEC) -> dict[str, Any]:
    """The reviewer-facing details document of a stored body (``zstd1+json``, ``json`` or ``zlib1+json``):
    :func:`expand` of it."""
    if codec == "zstd1+json":
        raw = zstandard.ZstdDecompressor().decompress(body)
    else:
        raw = zlib.decompress(body) if codec == "zlib1+json" else body
    value = orjson.loads(raw)
    return expand(value) if isinstance(value, dict) else {}


def details_row(
    scored: ScoredRun, redactor: Redactor, prices: PriceTable | None, now: float, texts: Texts | None = None
) -> dict[str, Any]:
    """The ``run_details`` row of a scored run (its body: :func:`compact`, cut to :data:`MAX_DOC_BYTES`)."""
    texts = texts if texts is not None else Texts(redactor)
    doc = compact(scored, texts, prices)
    body = orjson.dumps(doc)
    if len(body) > MAX_DOC_BYTES:
        _fit_compact(doc, len(body))
        body = orjson.dumps(doc)
    final = scored.run.final_output
    asked = user_message(scored.run)
    return {
        "final_output": None if final is None else texts(final),
        "user_message": texts(asked) if asked else None,
        "trace_id": scored.run.trace_id,
        "span_count": scored.run.span_count,
        "codec": CODEC,
        "body": _compress(body),
        "created_at": now,
    }


_DROPPED: Final = "\x00dropped"
"""Cached form of a key the redactor's key filter drops (no stored key contains NUL)."""


class Texts:
    """Redacts and clips text; remembers short values and attribute keys across runs.

    Attribute keys and short values (model names, tool names, ids, finish reasons) repeat from
    run to run: each is redacted (and each key checked against the redactor's key filter) once,
    until :data:`CACHE_ENTRIES` are remembered, then the memory starts afresh. Keys and scalar
    values that are stored exactly as they come are also remembered in :attr:`clean_keys` /
    :attr:`clean_values`, so that a span whose attributes are all known is stored without looking
    at each of them (:func:`_attributes`). Not thread-safe: one per writer thread.
    """

    __slots__ = ("_redactor", "builtins_only", "clean_keys", "clean_values", "keys", "redact", "values")

    CACHE_ENTRIES: Final = 8192
    """Entries of each memory before it starts afresh. The values that repeat (models, tools, span names,
    finish reasons) are a few hundred; ids, token counts and arguments never repeat, and at 50,000 entries
    the memories held ~30 MB of them (heavy-content workload) for nothing."""
    CACHED_CHARS: Final = 256

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self.builtins_only = redactor.builtins_only
        self.redact = redactor.text
        """The redactor's :meth:`~scorers.redact.Redactor.text`."""
        """Whether a text the compiled scan finds nothing in is stored unchanged (no custom pattern)."""
        self.values: dict[str, str] = {}
        """Short value → its stored form."""
        self.keys: dict[str, str] = {}
        """Attribute key → its stored form, or :data:`_DROPPED`."""
        self.clean_keys: set[str] = set()
        """Attribute keys kept and stored unchanged."""
        self.clean_values: set[str | int | float | None] = set()
        """Scalar attribute values stored unchanged (strings the redactor leaves alone, 64-bit integers,
        finite floats; booleans compare equal to 0 and 1, which are stored unchanged too)."""

    def __call__(self, value: str, limit: int = MAX_VALUE_CHARS) -> str:
        """``value`` cut at ``limit`` characters (saying how many were cut), redacted, NUL-free."""
        if len(value) <= self.CACHED_CHARS:
            found = self.values.get(value)
            if found is None:
                found = self._redactor.text(value).replace("\x00", "\ufffd")
                if len(self.values) >= self.CACHE_ENTRIES:
                    self.values.clear()
                self.values[value] = found
            return found if len(found) <= limit else self._cut(found, limit)
        return self._redactor.text(self._cut(value, limit)).replace("\x00", "\ufffd")

    @staticmethod
    def _cut(value: str, limit: int) -> str:
        return value if len(value) <= limit else value[:limit] + f"… [{len(value) - limit} more characters]"

    def key(self, key: str) -> str | None:
        """The stored form of an attribute key (redacted, ≤ 256 characters), ``None`` when the key filter drops it."""
        found = self.keys.get(key)
        if found is None:
            found = self(key, 256) if self._redactor.keep_attribute(key) else _DROPPED
            if len(self.keys) >= self.CACHE_ENTRIES:
                self.keys.clear()
                self.clean_keys.clear()
            self.keys[key] = found
            if found == key:
                self.clean_keys.add(key)
        return None if found is _DROPPED else found

    def unchanged(self, value: str) -> bool:
        """Whether ``value`` is stored exactly as it is (short, nothing to redact, no NUL); remembered when so."""
        if len(value) > self.CACHED_CHARS or "\x00" in value or self._redactor.text(value) != value:
            return False
        self.remember_clean(value)
        return True

    def remember_clean(self, value: str | int | float) -> None:
        """Remember a scalar value the caller found stored unchanged (bounded like the other memories)."""
        if len(self.clean_values) >= self.CACHE_ENTRIES:
            self.clean_values.clear()
        self.clean_values.add(value)


def _value(value: AttrValue, text: Texts, depth: int = 0) -> Any:
    if isinstance(value, str):
        return text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list | tuple) and depth < 3:
        items = [_value(v, text, depth + 1) for v in value[:MAX_LIST_ITEMS]]
        if len(value) > MAX_LIST_ITEMS:
            items.append(f"… {len(value) - MAX_LIST_ITEMS} more")
        return items
    if isinstance(value, Mapping) and depth < 3:
        return _attributes_py(value, text, depth + 1)[0]
    return text(str(value))


_FLAT: Final = (str, int, float)


def _attributes(attrs: Mapping[str, AttrValue], text: Texts, depth: int = 0) -> tuple[Mapping[str, Any], int]:
    """The stored attributes of a span (redacted, filtered, bounded) and how many were dropped.

    Compiled (``stored_attributes`` of ``scorers/_redact_fast.c``) for a span's own dict where the
    extension was built: the same result, values looked at in C and handed to :class:`Texts` /
    :func:`_value` only when they may change; else :func:`_attributes_py`.
    """
    if _STORED is not None and depth == 0 and attrs.__class__ is dict:
        return _STORED(  # type: ignore[no-any-return]
            attrs, text.keys, text.values, text, text.key, _value, _DROPPED, text.builtins_only,
            MAX_ATTRIBUTES, MAX_LIST_ITEMS, Texts.CACHED_CHARS, MAX_VALUE_CHARS, Texts.CACHE_ENTRIES, text.redact,
        )  # fmt: skip
    return _attributes_py(attrs, text, depth)


def _attributes_py(attrs: Mapping[str, AttrValue], text: Texts, depth: int = 0) -> tuple[Mapping[str, Any], int]:
    """The pure-Python :func:`_attributes` (its twin in C is checked against it by the tests).

    When every key and every scalar value is known to be stored unchanged (flat lists of such
    values too), the mapping itself is returned: nothing is copied.
    """
    # The hot loop of the writer (~100 attributes a run): most spans are stored as they come.
    clean = text.clean_values
    if len(attrs) <= MAX_ATTRIBUTES and text.clean_keys.issuperset(attrs):
        try:
            for value in attrs.values():
                if value.__class__ is list:  # (at depth 3 a list is stored as its string: looked at below)
                    if depth >= 3 or len(value) > MAX_LIST_ITEMS or not clean.issuperset(value):
                        break
                elif value.__class__ is str and len(value) > Texts.CACHED_CHARS:
                    if text(value) is not value:  # a long text (messages, results): unchanged when nothing in it
                        break  # was cut, redacted or replaced (the stored form is then another object)
                elif value not in clean and not (value.__class__ is str and text.unchanged(value)):
                    break
            else:
                return attrs, 0
        except TypeError:  # a map, or a list holding lists or maps: looked at one by one below
            pass
    out: dict[str, Any] = {}
    dropped = 0
    keys = text.keys
    for key, value in attrs.items():
        stored = keys.get(key)
        if stored is None:
            stored = (text.key(key) if isinstance(key, str) else None) or _DROPPED
        if stored is _DROPPED or len(out) >= MAX_ATTRIBUTES:
            dropped += 1
            continue
        try:  # (a long text is never remembered as clean: not hashed for nothing)
            known = not (value.__class__ is str and len(value) > Texts.CACHED_CHARS) and value in clean
        except TypeError:  # a list or a map
            known = False
        if known:
            out[stored] = value
            continue
        out[stored] = kept = _value(value, text, depth)
        if kept == value:
            for item in kept if kept.__class__ is list else (kept,):
                if item.__class__ in _FLAT and (item.__class__ is not str or len(item) <= Texts.CACHED_CHARS):
                    text.remember_clean(item)
    return out, dropped


def _events(events: Sequence[SpanEvent], text: Texts) -> list[list[Any]]:
    out = []
    for event in events[:MAX_EVENTS]:
        attrs = event.attributes
        if len(attrs) > MAX_EVENT_ATTRIBUTES:
            attrs = dict(list(attrs.items())[:MAX_EVENT_ATTRIBUTES])
        out.append([text(event.name, 256), event.time_ns, _attributes(attrs, text)[0]])
    return out


def _span(step: Step, text: Texts, prices: PriceTable | None) -> list[Any]:
    """One span as a stored array (:data:`SPAN_FIELDS`)."""
    attrs, dropped = _attributes(step.attributes, text)
    cost = None
    model = step.model
    if model is not None:
        if prices is not None and (step.input_tokens or step.output_tokens) and step.kind is StepKind.LLM:
            price = prices.price(model)
            if price is not None:
                cost = (step.input_tokens * price[0] + step.output_tokens * price[1]) / 1e6
        model = text.values.get(model) or text(model, 256)
    name = text.values.get(step.name)
    if name is None or len(name) > 512:
        name = text(step.name, 512)
    events = step.events
    return [
        step.span_id,
        step.parent_id,
        name,
        _KIND[step.kind],
        step.start_ns,
        step.end_ns,
        step.error,
        None if step.error_type is None else text(step.error_type, 256),
        text(step.status_message) if step.status_message else "",
        model if model is None or len(model) <= 256 else text(model, 256),
        step.input_tokens,
        step.output_tokens,
        cost,
        step.finish_reasons,
        attrs,
        dropped,
        _events(events, text) if events else (),
        len(events) - MAX_EVENTS if len(events) > MAX_EVENTS else 0,
    ]


def _conversation(run: Run, text: Texts) -> list[dict[str, Any]]:
    """The run as a reviewer reads it, in order: the input, each model turn, each tool call, guardrails, the answer.

    Messages come from each LLM span in start order (:func:`scorers.content.message_pairs`: OTel
    GenAI, OpenInference, Traceloop, Vercel; the GenAI history each call resends parsed only where it
    grew, :class:`scorers.content.MessageHistory`); a message already shown (the history each call
    repeats) is not shown again. Tool calls come from the tool spans, between the model turns.
    """
    message_pairs = content.MessageHistory()
    tools: dict[str, ToolCall] = {t.span_id: t for t in run.tools}
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    history: list[tuple[str, str]] = []
    shown_results: set[str] = set()
    for step in run.steps if len(run.steps) <= MAX_SPANS else run.steps[:MAX_SPANS]:
        if step.kind is StepKind.LLM:
            found = message_pairs(step.attributes)
            if not found:  # content not captured on this call
                history = found
                continue
            common = len(history)
            if common > len(found) or found[:common] != history:  # not the usual case, the history grown
                common = 0
                while common < min(len(found), len(history)) and found[common] == history[common]:
                    common += 1
            # each call repeats the history: show what is new (all of it when the history was rewritten,
            # but never a message shown before)
            fresh = found[common:] if common == len(history) else [m for m in found[common:] if m not in seen]
            history = found
            for role, said in fresh:
                if not said.strip() or (role == "tool" and said in shown_results):
                    continue
                seen.add((role, said))
                entries.append(
                    {"kind": "message", "role": text(role, 64), "content": text(said), "span_id": step.span_id}
                )
        elif step.kind is StepKind.TOOL and step.span_id in tools:
            call = tools[step.span_id]
            if call.result is not None:
                shown_results.add(call.result)
            entries.append(
                {
                    "kind": "tool",
                    "name": text(call.name, 256),
                    "call_id": call.call_id,
                    "arguments": None if call.arguments is None else text(call.arguments),
                    "result": None if call.result is None else text(call.result),
                    "error": None if call.error is None else text(call.error),
                    "span_id": step.span_id,
                }
            )
        elif step.kind is StepKind.GUARDRAIL:
            entries.append(
                {
                    "kind": "guardrail",
                    "name": text(step.name, 256),
                    "blocked": step.error or run.safety_blocked,
                    "message": text(step.status_message),
                    "span_id": step.span_id,
                }
            )
    if not any(e["kind"] == "message" for e in entries):
        for message in run.messages:  # content captured on the agent span only
            entries.insert(
                0, {"kind": "message", "role": text(message.role, 64), "content": text(message.content), "span_id": ""}
            )
    final = run.final_output
    if final is not None:
        last = next((e for e in reversed(entries) if e["kind"] == "message" and e["role"] == "assistant"), None)
        redacted = text(final)
        said = "" if last is None else str(last["content"]).strip()
        ended = unanswered(run.hit_max_iterations, run.errored)  # its last output is then not an answer
        if last is None or not said or (said != redacted.strip() and said not in redacted):
            entries.append({"kind": "final", "content": redacted, "span_id": "", **({"ended": ended} if ended else {})})
        elif ended:
            last["ended"] = ended
        else:
            last["final"] = True
    return entries


def _fit(doc: dict[str, Any], size: int) -> None:
    """Drop attributes from the last spans until the document (``size`` bytes of JSON) fits :data:`MAX_DOC_BYTES`."""
    if size <= MAX_DOC_BYTES:
        return
    doc["truncated"] = True
    for span in reversed(doc["spans"]):
        if size <= MAX_DOC_BYTES:
            break
        before = len(orjson.dumps(span))
        span["attributes_dropped"] += len(span["attributes"])
        span["attributes"] = {}
        span["events"] = [{"name": e["name"], "time_ns": e["time_ns"], "attributes": {}} for e in span["events"]]
        size -= before - len(orjson.dumps(span))
    while size > MAX_DOC_BYTES and doc["conversation"]:
        size -= len(orjson.dumps(doc["conversation"].pop(0)))


def _fit_compact(doc: dict[str, Any], size: int) -> None:
    """:func:`_fit` of a stored (compact) document: attributes go from the last spans first, then the conversation."""
    if size <= MAX_DOC_BYTES:
        return
    doc["truncated"] = True
    dropped = SPAN_FIELDS.index("attributes_dropped")
    events = SPAN_FIELDS.index("events")
    for span in reversed(doc["spans"]):
        if size <= MAX_DOC_BYTES:
            break
        before = len(orjson.dumps(span))
        span[dropped] += len(span[_ATTRS])
        span[_ATTRS] = {}
        span[events] = [[e[0], e[1], {}] for e in span[events]]
        size -= before - len(orjson.dumps(span))
    while size > MAX_DOC_BYTES and doc["conversation"]:
        size -= len(orjson.dumps(doc["conversation"].pop(0)))


WriteRows = Callable[[list[dict[str, Any]]], None]


class DetailsWriter:
    """Builds and writes run details on a thread of its own; a :class:`collector.lifecycle.Component`.

    Args:
        write: stores rows (:meth:`review_queue.store.SqlStore.write_details`).
        redactor: the snapshot's redactor.
        prices: model prices for the per-span cost (optional).
        keep_unflagged: write details of unflagged runs too (details retention > 0).
        sample_rate: the share of unflagged runs whose details are written (:func:`details_sampled`).
        max_batches: batches waiting before new ones are dropped.
        max_runs: runs waiting before new batches are dropped.
        max_bytes: estimated bytes of the runs waiting or being written
            (:func:`scorers.model.run_bytes`, the estimate the judges' queues use too): the
            ``details`` share of the memory limit; past it new batches are dropped (counted), except
            into an empty writer. 0: unbounded.
        on_dropped: called with the number of runs dropped (metrics).
        clock: Unix seconds.
    """

    def __init__(
        self,
        write: WriteRows,
        redactor: Redactor,
        *,
        prices: PriceTable | None = None,
        keep_unflagged: bool = True,
        sample_rate: float = 1.0,
        max_batches: int = 64,
        max_runs: int = 4096,
        max_bytes: int = 0,
        on_dropped: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._write = write
        self._redactor = redactor
        self.builtins_only = redactor.builtins_only
        self.redact = redactor.text
        """The redactor's :meth:`~scorers.redact.Redactor.text`."""
        """Whether a text the compiled scan finds nothing in is stored unchanged (no custom pattern)."""
        self._prices = prices
        self._keep_unflagged = keep_unflagged
        self._sample_rate = sample_rate if keep_unflagged else 0.0
        self._queue: queue.Queue[tuple[Sequence[ScoredRun], int] | None] = queue.Queue(max_batches)
        self._max_runs = max_runs
        self.account = ByteAccount(max_bytes)
        """Estimated bytes of the runs queued or being written (``vigil_memory_held_bytes{structure="details"}``)."""
        self._pending = 0
        self._lock = threading.Lock()
        self._on_dropped = on_dropped
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._texts = Texts(redactor)
        self.written = 0
        self.dropped = 0

    def submit(self, batch: Sequence[ScoredRun]) -> None:
        """Queue a written batch (never blocks; a full queue drops the batch and counts it)."""
        rate = self._sample_rate
        if rate < 1.0:
            batch = [s for s in batch if s.flag is not None or (rate > 0.0 and details_sampled(s.run.trace_id, rate))]
        if not batch:
            return
        size = sum(run_bytes(s.run) for s in batch) if self.account.budget else 0
        with self._lock:
            room = self._pending + len(batch) <= self._max_runs and (self.account.fits(size) or not self.account.held)
            if room:
                try:
                    self._queue.put_nowait((batch, size))
                    self._pending += len(batch)
                    self.account.add(size)
                except queue.Full:
                    room = False
        if not room:
            self.dropped += len(batch)
            if self._on_dropped is not None:
                self._on_dropped(len(batch))

    def write_now(self, batch: Iterable[ScoredRun]) -> int:
        """Build and write ``batch`` on the calling thread (tests, ``vigil replay``); returns rows written."""
        now = self._clock()
        rows = [details_row(s, self._redactor, self._prices, now, self._texts) for s in batch]
        if rows:
            self._write(rows)
            self.written += len(rows)
        return len(rows)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread = threading.Thread(target=self._loop, name="vigil-details", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Write what is queued (within ``timeout_s``) and stop."""
        if self._thread is None:
            return True
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return False
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        name_os_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            runs, size = list(item[0]), item[1]
            while len(runs) < 500:  # coalesce what is waiting into one transaction
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._flush(runs, size)
                    return
                runs.extend(more[0])
                size += more[1]
            self._flush(runs, size)

    def _flush(self, runs: list[ScoredRun], size: int) -> None:
        with self._lock:
            self._pending -= len(runs)
        try:
            self.write_now(runs)
        except Exception:  # details are a convenience: log and go on, never stop the thread
            log.exception("run_details_write_failed", runs=len(runs))
            self.dropped += len(runs)
            if self._on_dropped is not None:
                self._on_dropped(len(runs))
        finally:
            with self._lock:  # held until written: the rows being built count too
                self.account.sub(size)
