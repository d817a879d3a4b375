"""Pure view helpers of the reviewer UI: waterfall geometry, depth of spans, human durations.

No I/O and no HTML: templates render what these return (with autoescaping on).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from scorers import content
from scorers.blind_spots import Shape, blind_spots
from scorers.model import StepKind
from scorers.registry import SCORE_UNITS
from scorers.rules import COMPARISONS
from scorers.signals import skipped_type

__all__ = [
    "WATERFALL_WIDTH",
    "age",
    "attr_text",
    "attribute_rows",
    "blocked_input",
    "cannot_show",
    "clock_time",
    "iso_time",
    "line_chart",
    "pretty",
    "score_rows",
    "snapshot_conversation",
    "snippet",
    "span_json",
    "span_messages",
    "waterfall",
]

WATERFALL_WIDTH = 1000
"""Width of the waterfall's SVG viewBox; bars are laid out in these units."""
ROW_HEIGHT = 22
LABEL_WIDTH = 0


def unanswered(hit_max_iterations: bool, errored: bool) -> str | None:
    """How a run ended without an answer (``at its iteration cap``, ``with an error``), or ``None`` when
    it answered: its last output is then what it had said so far, not a final answer (a blocked run's
    refusal is its answer)."""
    if hit_max_iterations:
        return "at its iteration cap"
    if errored:
        return "with an error"
    return None


def waterfall(steps: Sequence[Mapping[str, Any]], start_ns: int, end_ns: int) -> dict[str, Any]:
    """Lay the run's steps out as bars on a shared time axis.

    Args:
        steps: snapshot steps (``span_id``, ``parent_id``, ``name``, ``kind``, ``start_ns``,
            ``end_ns``, ``error``), in start order.
        start_ns / end_ns: the run's bounds (widened to cover every step).

    Returns:
        ``{"rows": [{x, width, y, depth, name, kind, error, duration_s}], "height", "width",
        "total_s"}`` with ``x``/``width`` in viewBox units; a zero-length step gets a 2-unit bar.
    """
    starts = [s["start_ns"] for s in steps if s.get("start_ns")]
    ends = [s["end_ns"] for s in steps if s.get("end_ns")]
    lo = min([start_ns, *starts]) if start_ns else min(starts, default=0)
    hi = max([end_ns, *ends]) if end_ns else max(ends, default=lo)
    span = max(1, hi - lo)
    depths = _depths(steps)
    rows = []
    for index, step in enumerate(steps):
        begin = max(0, (step.get("start_ns") or lo) - lo)
        finish = max(begin, (step.get("end_ns") or step.get("start_ns") or lo) - lo)
        x = WATERFALL_WIDTH * begin / span
        width = max(2.0, WATERFALL_WIDTH * (finish - begin) / span)
        rows.append(
            {
                "x": round(min(x, WATERFALL_WIDTH - 2), 1),
                "width": round(min(width, WATERFALL_WIDTH - x) if x < WATERFALL_WIDTH - 2 else 2.0, 1),
                "y": index * ROW_HEIGHT,
                "depth": depths.get(step.get("span_id", ""), 0),
                "span_id": step.get("span_id", ""),
                "name": step.get("name", ""),
                "kind": step.get("kind", "other"),
                "error": bool(step.get("error")),
                "duration_s": (finish - begin) / 1e9,
                "offset_s": begin / 1e9,
                "span": step,
            }
        )
    return {
        "rows": rows,
        "height": max(ROW_HEIGHT, len(rows) * ROW_HEIGHT),
        "width": WATERFALL_WIDTH,
        "total_s": span / 1e9,
    }


def _depths(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    parents = {s.get("span_id", ""): s.get("parent_id") for s in steps}
    depths: dict[str, int] = {}
    for span_id in parents:
        depth, current, seen = 0, parents.get(span_id), {span_id}
        while current in parents and current not in seen and depth < 50:
            seen.add(current)
            depth += 1
            current = parents.get(current)
        depths[span_id] = depth
    return depths


def age(seconds: float) -> str:
    """A short human age: ``45s``, ``12m``, ``3h``, ``2d``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def clock_time(epoch_s: float | None) -> str:
    """UTC ``YYYY-MM-DD HH:MM:SS`` of an epoch time (empty for None)."""
    if epoch_s is None:
        return ""
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


SNIPPET_CHARS = 80
"""Characters of agent text a list cell shows (the rest in its tooltip, up to :data:`TOOLTIP_CHARS`)."""
TOOLTIP_CHARS = 600


def snippet(text: str | None, limit: int = SNIPPET_CHARS) -> str:
    """``text`` on one line (runs of whitespace as one space), cut at a word within ``limit`` characters
    with ``…``; empty for None. Plain text: the template escapes it."""
    flat = " ".join((text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


def iso_time(epoch_s: float | None) -> str:
    """ISO 8601 UTC of an epoch time, for ``<time datetime>`` (empty for None or 0: not known)."""
    if not epoch_s:
        return ""
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def score_rows(
    scores: Mapping[str, float] | None, thresholds: Mapping[str, Sequence[tuple[str, str, float]]]
) -> list[dict[str, Any]]:
    """Each score as the run pages show it: its value in its unit, which way is better, and the flag rules
    that test it — their threshold and whether this value crossed it (``crossed``: any rule fired)."""
    rows = []
    for name, value in sorted((scores or {}).items()):
        unit, better = SCORE_UNITS.get(name, ("", None))
        tests = [
            {"rule": rule, "op": op, "threshold": limit, "crossed": COMPARISONS[op](value, limit)}
            for rule, op, limit in thresholds.get(name, ())
        ]
        rows.append(
            {
                "name": name,
                "value": _score_text(value, unit),
                "direction": "" if better is None else ("higher is better" if better else "lower is better"),
                "tests": tests,
                "crossed": any(t["crossed"] for t in tests),
            }
        )
    return rows


def _score_text(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "flag":
        return "yes" if value else "no"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit == "s":
        return f"{value:.2f} s"
    text = f"{value:.0f}" if value == int(value) else f"{value:.3g}"
    return f"{text} {unit[:-1] if value == 1 and unit.endswith('s') else unit}".strip()


HEADLINE_SIGNALS = ("hit_max_iterations", "safety_blocked", "errored")


def evidence_by_signal(evidence: Sequence[Mapping[str, Any]] | None) -> dict[str, list[Mapping[str, Any]]]:
    """Group stored evidence (:class:`scorers.model.Evidence` dicts) by the signal or flag reason it supports."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    seen: set[tuple[Any, ...]] = set()
    for item in evidence or ():
        if not (isinstance(item, Mapping) and isinstance(item.get("signal"), str)):
            continue
        key = (item["signal"], item.get("rule"), item.get("span_id"), item.get("source"), item.get("value"))
        if key in seen:  # a reason named after its signal repeats the signal's evidence
            continue
        seen.add(key)
        grouped.setdefault(item["signal"], []).append(item)
    return grouped


def pretty(text: object) -> str:
    """``text`` as shown: JSON objects and arrays pretty-printed (2-space indent), other text unchanged."""
    if not isinstance(text, str):
        return "" if text is None else str(text)
    stripped = text.strip()
    if len(stripped) < 2 or stripped[0] not in "{[" or stripped[-1] not in "}]":
        return text
    try:
        return orjson.dumps(orjson.loads(stripped), option=orjson.OPT_INDENT_2).decode()
    except (orjson.JSONDecodeError, TypeError):
        return text


def attr_text(value: object) -> str:
    """An attribute value as text: strings as they are (JSON pretty-printed), lists and maps as JSON."""
    if isinstance(value, str):
        return pretty(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    return "null" if value is None else str(value)


FOLD_CHARS = 600
FOLD_LINES = 24


def attribute_rows(attributes: object) -> list[tuple[str, str, bool]]:
    """``(key, text, fold)`` of each attribute, sorted by key: ``text`` as :func:`attr_text`, ``fold`` when long.

    Done here rather than in the template: a 500-span run has ~10,000 of them.
    """
    if not isinstance(attributes, Mapping):
        return []
    rows = []
    for key in sorted(attributes):
        text = attr_text(attributes[key])
        rows.append((str(key), text, len(text) > FOLD_CHARS or text.count("\n") > FOLD_LINES))
    return rows


def span_json(span: Mapping[str, Any]) -> str:
    """The "copy as JSON" text of a span of the details document."""
    return orjson.dumps(span, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def snapshot_conversation(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation entries of a review snapshot (runs stored before details were kept).

    Same shape as :func:`review_queue.details.build_details`'s ``conversation``: the messages,
    then the tool calls, then the final answer (the snapshot does not say how they interleave).
    """
    entries: list[dict[str, Any]] = [
        {"kind": "message", "role": m.get("role", ""), "content": m.get("content", ""), "span_id": ""}
        for m in snapshot.get("messages") or ()
        if isinstance(m, Mapping)
    ]
    for t in snapshot.get("tools") or ():
        if isinstance(t, Mapping):
            entries.append(
                {
                    "kind": "tool",
                    **{k: t.get(k) for k in ("name", "call_id", "arguments", "result", "error", "span_id")},
                }
            )
    final = snapshot.get("final_output")
    if final:
        ended = unanswered(bool(snapshot.get("hit_max_iterations")), bool(snapshot.get("errored")))
        entries.append({"kind": "final", "content": final, "span_id": "", **({"ended": ended} if ended else {})})
    return entries


CHART_WIDTH = 300
CHART_HEIGHT = 80


def line_chart(series: Mapping[str, Sequence[float | None]], *, top: float | None = None) -> dict[str, Any]:
    """Polylines of small SVG charts, one per series, sharing one y scale (0 … ``top`` or the max).

    Args:
        series: name to values per bucket (``None``: no data in that bucket, a gap).
        top: the y axis' top value (e.g. 1.0 for a rate); default the largest value (at least 1).

    Returns:
        ``{"width", "height", "top", "lines": [{"name", "segments": ["x,y x,y …"], "last"}]}``.
    """
    values = [v for vs in series.values() for v in vs if v is not None]
    high = top if top is not None else max([1.0, *values])
    lines = []
    for name, vs in series.items():
        n = max(1, len(vs) - 1)
        segments: list[str] = []
        current: list[str] = []
        for i, v in enumerate(vs):
            if v is None:
                if current:
                    segments.append(" ".join(current))
                current = []
                continue
            x = round(CHART_WIDTH * i / n, 1)
            y = round(CHART_HEIGHT - CHART_HEIGHT * min(v, high) / high, 1)
            current.append(f"{x},{y}")
        if current:
            segments.append(" ".join(current))
        last = next((v for v in reversed(vs) if v is not None), None)
        lines.append({"name": name, "segments": segments, "last": last})
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "top": high, "lines": lines}


def cannot_show(run: Mapping[str, Any], details: Mapping[str, Any] | None) -> tuple[str, ...]:
    """What a stored run's trace cannot show (:mod:`scorers.blind_spots`), read from the run's headline
    fields and its details document's spans; nothing when the details were not kept (the page says why)."""
    if details is None:
        return ()
    spans = [s for s in details.get("spans") or [] if isinstance(s, Mapping)]
    answered = [s for s in spans if s.get("kind") == StepKind.LLM.value and not s.get("error")]
    shape = Shape(
        content_captured=bool(details.get("content_captured")),
        llm_calls=int(run.get("llm_calls") or 0),
        answered=len(answered),
        with_reasons=sum(1 for s in answered if s.get("finish_reasons")),
        with_tokens=sum(1 for s in answered if s.get("input_tokens") or s.get("output_tokens")),
        guardrail_spans=sum(1 for s in spans if s.get("kind") == StepKind.GUARDRAIL.value),
        skipped=sum(
            1
            for s in spans
            if s.get("error") and s.get("kind") != StepKind.LLM.value and skipped_type(s.get("error_type"))
        ),
        errored=bool(run.get("errored")),
        hit_max_iterations=bool(run.get("hit_max_iterations")),
        safety_blocked=bool(run.get("safety_blocked")),
    )
    return blind_spots(shape)


SPAN_MESSAGES_SHOWN = 40
"""Messages shown per span in its detail pane (the latest; a looping run's calls each resend the history)."""


def span_messages(
    spans: Sequence[Mapping[str, Any]], conversation: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each span's input and output as its detail pane shows them: ``{span_id: {"entries", "earlier"}}``.

    A model (or agent) span's messages are read from its stored attributes (every dialect,
    :func:`scorers.content.message_pairs`: the history it was sent, then its answer, each message's ``side``
    ``input`` or ``output`` where the dialect's keys tell them apart), the latest
    :data:`SPAN_MESSAGES_SHOWN` of them (``earlier``: how many more there were); a tool span, or a
    span whose attributes carry no messages (guardrails, spans whose attributes were not kept), shows the conversation
    entries linked to it. Entries have the conversation's shape (``kind``, ``role``, ``content`` …).
    """
    linked: dict[str, list[Mapping[str, Any]]] = {}
    for entry in conversation:
        span_id = entry.get("span_id")
        if span_id:
            linked.setdefault(str(span_id), []).append(entry)
    found: dict[str, dict[str, Any]] = {}
    for span in spans:
        span_id = str(span.get("span_id") or "")
        attributes = span.get("attributes")
        entries: list[Mapping[str, Any]] = []
        if span.get("kind") != StepKind.TOOL.value and isinstance(attributes, Mapping):
            entries = [
                {"kind": "message", "role": role, "content": said, "side": side}
                for side, role, said in _sides(attributes)
                if said.strip()
            ]
        if not entries:
            entries = linked.get(span_id, [])
        if entries:
            earlier = max(0, len(entries) - SPAN_MESSAGES_SHOWN)
            found[span_id] = {"entries": entries[earlier:], "earlier": earlier}
    return found


_OUTPUT_PREFIXES = ("gen_ai.output.messages", "llm.output_messages.", "gen_ai.completion.", "ai.response.text")
"""The message keys of a model call's output in each dialect (GenAI, OpenInference, Traceloop, Vercel); the others
are its input."""


def _sides(attributes: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(side, role, content)`` of a span's messages, ``side`` ``input`` or ``output`` (read apart from each other),
    or ``""`` for all of them when reading them apart finds fewer than reading them together."""
    both = content.message_pairs(attributes)
    if not both:
        return []
    output = {k: v for k, v in attributes.items() if k.startswith(_OUTPUT_PREFIXES)}
    said = content.message_pairs(output) if output else []
    sent = content.message_pairs({k: v for k, v in attributes.items() if k not in output})
    if len(sent) + len(said) < len(both):
        return [("", role, text) for role, text in both]
    return [("input", role, text) for role, text in sent] + [("output", role, text) for role, text in said]


# Where a trace may carry the input of a run blocked before any model call (docs/reviewing.md,
# "Blocked input"): the dialects' message keys on any span (scorers.content.message_pairs), then
# these, which no dialect reads as the conversation: OpenInference's ``input.value`` of an agent or
# chain span, PydanticAI's run history on its agent span (GenAI message parts), Vercel's ``ai.prompt``.
BLOCKED_INPUT_KEYS = ("pydantic_ai.all_messages", "input.value", "ai.prompt")


def blocked_input(
    spans: Sequence[Mapping[str, Any]], conversation: Sequence[Mapping[str, Any]], *, blocked: bool
) -> dict[str, Any] | None:
    """The user's input of a run whose conversation shows no user message (typically an input guardrail
    that stopped the turn before any model call), read from wherever a span of the trace carries it.

    Args:
        spans: the details document's spans (stored, redacted attributes).
        conversation: the run's conversation entries.
        blocked: the run was stored as safety-blocked.

    Returns:
        ``None`` when the conversation has a user message, or when nothing was blocked and no span carries
        an input; else ``{"text", "span_id", "span_name", "source", "blocked"}``: the first user message a
        span carries (``source``: the attribute it was read from), ``text`` ``None`` when the run was
        blocked and no span carries it (the page then says the trace does not). ``blocked``: the run was
        blocked (stored so, or a guardrail entry says so).
    """
    if any(e.get("kind") == "message" and e.get("role") == "user" for e in conversation):
        return None
    blocked = blocked or any(e.get("kind") == "guardrail" and e.get("blocked") for e in conversation)
    for span in spans:
        attributes = span.get("attributes")
        if not isinstance(attributes, Mapping) or span.get("kind") == StepKind.TOOL.value:
            continue  # (a tool span's input.value is its arguments)
        text, source = _user_text(attributes)
        if text:
            return {
                "text": text,
                "span_id": span.get("span_id", ""),
                "span_name": span.get("name", ""),
                "source": source,
                "blocked": blocked,
            }
    return {"text": None, "span_id": "", "span_name": "", "source": "", "blocked": True} if blocked else None


def _user_text(attributes: Mapping[str, Any]) -> tuple[str | None, str]:
    for role, said in content.message_pairs(attributes):
        if role in ("user", "human") and said.strip():
            return said, "messages"
    for key in BLOCKED_INPUT_KEYS:
        value = attributes.get(key)
        if not isinstance(value, str) or not value.strip():
            continue
        decoded = _json_value(value)
        if isinstance(decoded, list):  # a message history (GenAI parts or chat messages)
            for role, said in content.message_pairs({"gen_ai.input.messages": value}):
                if role in ("user", "human") and said.strip():
                    return said, key
            continue
        if isinstance(decoded, Mapping):  # {"messages": [...]}, {"input": "..."}, {"prompt": "..."}
            for name in ("input", "prompt", "query", "question", "message"):
                if isinstance(decoded.get(name), str) and decoded[name].strip():
                    return decoded[name], key
            messages = decoded.get("messages")
            if isinstance(messages, list):
                for role, said in content.message_pairs({"gen_ai.input.messages": orjson.dumps(messages).decode()}):
                    if role in ("user", "human") and said.strip():
                        return said, key
            continue
        return value, key
    return None, ""


def _json_value(text: str) -> object:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
