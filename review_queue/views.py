"""Pure view helpers of the reviewer UI: waterfall geometry, depth of spans, human durations.

No I/O and no HTML: templates render what these return (with autoescaping on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["WATERFALL_WIDTH", "age", "clock_time", "waterfall"]

WATERFALL_WIDTH = 1000
"""Width of the waterfall's SVG viewBox; bars are laid out in these units."""
ROW_HEIGHT = 22
LABEL_WIDTH = 0


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
