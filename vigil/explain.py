"""``vigil explain``: does Vigil understand my agent? Every derived field, and why each signal is (not) set.

Reads captured OTLP — ``ExportTraceServiceRequest`` files in protobuf (``.pb``, ``.bin``,
``.protobuf``, ``.otlp``) or JSON (``.json``), gzip allowed, or directories of them — groups the
spans by trace, and runs each trace through the same normalise → score → decide pipeline as
``vigil run``, with the configured scorers, rules and ``detection`` markers (``vigil.yaml``).
For a trace id already stored, it prints the stored run and its evidence instead.

For each run it prints the derived fields, the scores and the flag decision, and for each
headline signal (``hit_max_iterations``, ``safety_blocked``, ``errored``) either the evidence
that set it (rule, span, source, matched value) or what was looked at and why nothing
matched; then what the trace cannot show at all ("this trace cannot show X, because …",
:mod:`scorers.blind_spots`). ``--json`` prints the same as one JSON document per run.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from collector.errors import DecodeError
from collector.model import Span
from collector.otlp import decode_json, decode_protobuf
from review_queue.replay import body_kind, collect_files
from scorers.blind_spots import blind_spots, shape_of_run
from scorers.detect import BLOCK, ERRORED, LIMIT, is_tool_request
from scorers.model import Evidence, Run, ScoredRun, StepKind
from scorers.normalise import normalise
from scorers.pipeline import Pipeline

__all__ = ["ExplainError", "Explanation", "explain_files", "load_traces", "print_explanations", "why_not"]

SIGNALS = (LIMIT, BLOCK, ERRORED)
FIELDS = (
    "trace_id", "agent", "service", "dialect", "session_id", "user_id", "status", "complete", "duration_s",
    "span_count", "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens", "hit_max_iterations",
    "safety_blocked", "errored", "error_type", "optimal_steps", "final_output",
)  # fmt: skip


class ExplainError(ValueError):
    """A file could not be read or decoded (the message names it)."""


@dataclass(frozen=True)
class Explanation:
    """One run explained: the scored run and, per headline signal, evidence or the reason it is not set."""

    scored: ScoredRun
    why_not: Mapping[str, str]
    cannot_show: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        run = self.scored.run
        fields = {name: _plain(getattr(run, name)) for name in FIELDS}
        flag = self.scored.flag
        return {
            **fields,
            "scores": dict(self.scored.scores),
            "flag": None
            if flag is None
            else {"reasons": list(flag.reasons), "priority": flag.priority.value, "sample_rate": flag.sample_rate},
            "signals": {
                name: {
                    "set": bool(getattr(run, name)),
                    "evidence": [e.as_dict() for e in run.evidence if e.signal == name],
                    "why_not": self.why_not.get(name),
                }
                for name in SIGNALS
            },
            "reason_evidence": [e.as_dict() for e in self.scored.evidence],
            "cannot_show": list(self.cannot_show),
        }


def load_traces(paths: Iterable[Path]) -> dict[str, list[Span]]:
    """Every span of every file under ``paths``, grouped by trace id (in file order).

    Raises:
        ExplainError: a file cannot be read or is not OTLP (names the file and the reason).
        FileNotFoundError: a path does not exist.
    """
    traces: dict[str, list[Span]] = {}
    for path in collect_files(paths):
        raw = path.read_bytes()
        kind = body_kind(path)  # the same suffix rules as vigil replay; an unknown suffix is sniffed
        try:
            if path.suffix.lower() == ".gz":
                raw = gzip.decompress(raw)
            if kind == "json" or (kind is None and raw[:1] in (b"{", b"[")):
                result = decode_json(raw)
            else:
                result = decode_protobuf(raw)
        except (DecodeError, OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise ExplainError(f"{path}: not an OTLP trace export: {exc}") from None
        for batch in result.batches:
            traces.setdefault(batch.trace_id, []).extend(batch.spans)
    return traces


def explain_files(paths: Iterable[Path], pipeline: Pipeline) -> list[Explanation]:
    """Normalise, score and decide every trace found under ``paths`` (runs in trace start order)."""
    traces = load_traces(paths)
    out = []
    for spans in sorted(traces.values(), key=lambda ss: min(s.start_ns for s in ss)):
        run = normalise(spans, complete=True, detector=pipeline.detector, sessions=pipeline.sessions)
        scored = pipeline.decide_run(run)
        out.append(Explanation(scored, why_not(run), blind_spots(shape_of_run(run))))
    return out


def why_not(run: Run) -> dict[str, str]:
    """For each headline signal that is not set, what was looked at and why nothing matched."""
    out: dict[str, str] = {}
    llm = [s for s in run.steps if s.kind is StepKind.LLM]
    errors = [s for s in run.steps if s.error and s.kind is not StepKind.TOOL]
    error_texts = "; ".join(f"{s.name}: {s.error_type or s.status_message or 'error'}"[:120] for s in errors[:3])
    if not run.hit_max_iterations:
        if not llm:
            last = "no LLM call was seen, so the cut-off rule had nothing to read"
        elif is_tool_request(llm[-1].finish_reasons):
            last = (
                "the last LLM call asked for tools but "
                + ("the run raised an error that explains the end" if run.errored else "the run was incomplete")
                if run.errored or not run.complete
                else "the last LLM call asked for tools, but an answer tool (final_answer …) ran after it"
            )
        else:
            reasons = "/".join(llm[-1].finish_reasons) or "no finish reason"
            last = f"the last LLM call finished with {reasons} (a cut-off needs tool_calls and no later LLM call)"
        errs = f"errors seen did not match the limit vocabulary ({error_texts})" if errors else "no agent/LLM error"
        out[LIMIT] = f"{last}; {errs}; no iteration counter reached a declared cap"
    if not run.safety_blocked:
        seen_reasons = sorted({r for s in llm for r in s.finish_reasons})
        seen = "/".join(seen_reasons) if seen_reasons else "none"
        errs = f"errors seen did not match the block vocabulary ({error_texts})" if errors else "no agent/LLM error"
        out[BLOCK] = (
            f"finish reasons seen: {seen} (none blocks); no refusal field in model outputs; "
            f"no guardrail span failed or intervened; {errs}"
        )
    if not run.errored:
        out[ERRORED] = "the root span (the agent's caller) ended without error status, error.type or exception"
    return out


def print_explanations(explanations: Sequence[Explanation], out: TextIO, *, as_json: bool = False) -> None:
    """Write the explanations as rich tables (or JSON lines with ``as_json``)."""
    if as_json:
        for e in explanations:
            out.write(json.dumps(e.as_dict(), ensure_ascii=False) + "\n")
        return
    console = Console(file=out, highlight=False, width=None if out.isatty() else 100)
    for e in explanations:
        _print_one(console, e)
    console.print(f"{len(explanations)} run(s) explained.")


def _print_one(console: Console, e: Explanation) -> None:
    run = e.scored.run
    table = Table(title=f"run {run.trace_id} — agent {run.agent!r}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name in FIELDS[1:]:
        value = getattr(run, name)
        text = _plain(value)
        if isinstance(text, str) and len(text) > 200:
            text = text[:199] + "…"
        table.add_row(name, str(text))
    table.add_row("scores", ", ".join(f"{k}={v:g}" for k, v in e.scored.scores.items()) or "-")
    flag = e.scored.flag
    table.add_row("flag", "not flagged" if flag is None else f"{flag.priority.value}: {', '.join(flag.reasons)}")
    console.print(table, markup=False)
    for name in SIGNALS:
        found = [ev for ev in run.evidence if ev.signal == name]
        state = "SET" if getattr(run, name) else "not set"
        console.print(f"  {name}: {state}", markup=False)
        for ev in found:
            console.print(f"    because {_describe(ev)}", markup=False)
        if not found and name in e.why_not:
            console.print(f"    why not: {e.why_not[name]}", markup=False)
    for ev in e.scored.evidence:
        console.print(f"  reason {ev.signal}: {_describe(ev)}", markup=False)
    for text in e.cannot_show:
        console.print(f"  {text}", markup=False)
    console.print("")


def _describe(ev: Evidence) -> str:
    where = f"span {ev.span_name!r} ({ev.span_id})" if ev.span_id else "the run"
    return f"[{ev.rule}] {where} {ev.source} = {ev.value!r}"


def _plain(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float):
        return round(value, 4)
    return value


def stored_explanation(doc: Mapping[str, Any]) -> str:
    """A stored run (``/api/v1/runs/{trace_id}`` document) with its evidence, as text."""
    lines = [f"run {doc['trace_id']} — agent {doc.get('agent')!r} (stored; raw spans are not kept)"]
    for name in FIELDS[1:]:
        if name in doc:
            lines.append(f"  {name}: {doc[name]}")
    flag = doc.get("flag")
    lines.append("  flag: " + ("not flagged" if not flag else f"{flag['priority']}: {', '.join(flag['reasons'])}"))
    for ev in doc.get("evidence") or []:
        where = f"span {ev['span_name']!r} ({ev['span_id']})" if ev.get("span_id") else "the run"
        lines.append(f"  {ev['signal']}: [{ev['rule']}] {where} {ev['source']} = {ev['value']!r}")
    return "\n".join(lines)
