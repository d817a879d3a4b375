"""Built-in scorers: plain callables ``Run -> Score | None``.

``None`` means "no opinion" (for example ``tool_error_rate`` on a run without tools).
Ranges: ``tool_error_rate``, ``step_efficiency``, ``max_iterations_hit`` and
``safety_block`` are in [0, 1]; ``repeated_tool_calls`` is a count ≥ 1; ``latency`` is
seconds ≥ 0; ``tokens`` is a count ≥ 0.
"""

from __future__ import annotations

from operator import itemgetter

from collector.model import fast_constructor
from scorers.model import Run, Score

_score = fast_constructor(Score)  # (name, value, detail, span_ids): the hot path builds 7 a run


def tool_error_rate(run: Run) -> Score | None:
    """Fraction of executed tool calls that ended in error, in [0, 1]; None without tool calls."""
    if run.tool_calls <= 0:
        return None
    failed = tuple(t.span_id for t in run.tools if t.error is not None)
    value = min(1.0, run.tool_errors / run.tool_calls)
    return _score("tool_error_rate", value, f"{run.tool_errors}/{run.tool_calls} tool calls failed", failed)


def repeated_tool_calls(run: Run) -> Score | None:
    """Largest number of identical calls (same tool, same canonical arguments) in the run.

    1 means no call was repeated; 3 means some tool was called three times with the same
    arguments — a loop. Calls whose arguments were not captured are not compared (two
    searches with unknown arguments are not evidence of a loop). None when no call had
    captured arguments.
    """
    counts: dict[tuple[str, str], int] = {}
    for t in run.tools:
        if t.arguments is not None:
            key = (t.name, t.arguments)
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    (name, _), count = max(counts.items(), key=itemgetter(1))  # the first of equal counts, as most_common
    spans = tuple(t.span_id for t in run.tools if t.name == name and t.arguments is not None)
    return _score("repeated_tool_calls", float(count), f"{name} called {count}x with the same arguments", spans)


def max_iterations_hit(run: Run) -> Score:
    """1 when the run hit an iteration/turn/recursion cap, else 0."""
    return _score("max_iterations_hit", 1.0 if run.hit_max_iterations else 0.0, None, ())


def safety_block(run: Run) -> Score:
    """1 when a content filter, refusal or guardrail blocked the run, else 0."""
    return _score("safety_block", 1.0 if run.safety_blocked else 0.0, None, ())


def latency(run: Run) -> Score:
    """Run duration in seconds (root span start to end)."""
    return _score("latency", run.duration_s, None, ())


def tokens(run: Run) -> Score:
    """Input plus output tokens over the run's LLM calls."""
    return _score("tokens", float(run.input_tokens + run.output_tokens), None, ())
