"""Flag rules: declarative CEL expressions over a run and its scores.

A rule is ``name: {expr: <CEL>, priority: high|normal|low}``. Expressions see every scalar
field of the run as a top-level variable (``agent``, ``status``, ``complete``,
``duration_s``, ``llm_calls``, ``tool_calls``, ``tool_errors``, ``input_tokens``,
``output_tokens``, ``hit_max_iterations``, ``safety_blocked``, ``errored``, ``service``,
``span_count``…), ``scores`` (a map of scorer name to value; use
``has(scores.x)`` since a scorer may have no opinion), ``attributes`` (selected root-span
attributes), ``feedback`` (a map, filled by the review issue), ``judge`` (a map of LLM
judge name to its latest score in [0, 1]; use ``has(judge.x)``: a run is decided before its
judges answer, and re-decided when they do) and ``random_sample`` (the deterministic sample
decision). Rules are compiled and dry-run at start-up; a bad
rule refuses to start naming the rule. At run time a rule that fails to evaluate does
not match and is counted.

The random sample is ``blake2b(trace_id)`` mapped to [0, 1) below the sample rate, so
every replica and every replay agrees.
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from scorers import cel_core as cel
from scorers.errors import RuleError
from scorers.model import OUTCOME_FIELDS, Evidence, Flag, Priority, Run, SampleDesign

DEFAULT_SAMPLE_RATE = 0.05
"""Share of runs flagged at random when nothing else is configured (deterministic on the trace id)."""

DEFAULT_REPEAT_THRESHOLD = 3
"""Identical tool calls that count as a loop (the ``tool_loop`` default rule's threshold)."""

DEFAULT_RULES: Mapping[str, Mapping[str, str]] = {
    "hit_max_iterations": {"expr": "hit_max_iterations", "priority": "high"},
    "safety_blocked": {"expr": "safety_blocked", "priority": "high"},
    "low_step_efficiency": {
        "expr": "has(scores.step_efficiency) && scores.step_efficiency < 0.3",
        "priority": "normal",
    },
    "errored": {"expr": "errored", "priority": "normal"},
    "tool_loop": {
        "expr": "has(scores.repeated_tool_calls) && scores.repeated_tool_calls >= 3.0",
        "priority": "normal",
    },
    "random_sample": {"expr": "random_sample", "priority": "low"},
    "user_thumbs_down": {"expr": "has(feedback.thumbs_down) && feedback.thumbs_down", "priority": "normal"},
}
"""Rules in force when none are configured. A configured rule with the same name
replaces the default; ``enabled: false`` switches one off."""

RUN_FIELDS: tuple[str, ...] = (
    "trace_id", "agent", "service", "dialect", "complete", "duration_s", *OUTCOME_FIELDS, "span_count"
)  # fmt: skip
BOOLEAN_VARIABLES = frozenset(("complete", "hit_max_iterations", "safety_blocked", "errored", "random_sample"))
VARIABLES = frozenset((*RUN_FIELDS, "status", "error_type", "scores", "attributes", "feedback", "random_sample"))
VARIABLES = VARIABLES | {"judge"}  # LLM judge scores (scorers.judge), re-decided when a judge answers

OnRuleError = Callable[[str, Exception], None]

EVAL_ERRORS = (RuntimeError, ValueError, TypeError, LookupError, ArithmeticError)
"""What evaluating a CEL program raises on bad data (missing key, division by zero, overflow)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A compiled rule.

    Attributes:
        name / expr / priority: as configured.
        program: the compiled CEL program.
        variables: the identifiers the expression references.
        flag_name: set when the whole expression is one boolean run variable (``errored``):
            it is then read directly, with the same result as CEL and a fraction of the cost.
        score_test: set when the expression is ``has(scores.X) && scores.X <op> <double literal>``
            (the shape of the default score rules): ``(X, comparison, literal)``, evaluated in
            Python with the same result as CEL — building a CEL context for the scores map
            costs ~12 µs a run, more than the rest of the decision.
    """

    name: str
    expr: str
    priority: Priority
    program: cel.Program
    variables: tuple[str, ...]
    flag_name: str | None = None
    score_test: tuple[str, Callable[[float, float], bool], float] | None = None

    def matches(self, act: Mapping[str, Any], context: cel.Context | None = None) -> bool:
        """Evaluate against an activation (or a prebuilt CEL context holding its variables).

        Raises:
            One of :data:`EVAL_ERRORS` on bad data (a missing key, division by zero).
        """
        if self.flag_name is not None:
            return act[self.flag_name] is True
        if self.score_test is not None:
            name, compare, literal = self.score_test
            scores = act["scores"]
            if name not in scores:
                return False  # has() is false
            value = scores[name]
            if (type(value) is float and value == value) or type(value) is int:  # noqa: PLR0124 - NaN test
                return compare(value, literal)
            # NaN, bools, other types: CEL decides (it raises on some of them), as without the shortcut
        if context is not None and self.score_test is None:
            return self.program.execute(context) is True
        return self.program.execute({k: act[k] for k in self.variables if k in act}) is True


def sample_point(trace_id: str) -> float:
    """Map a trace id deterministically to [0, 1)."""
    digest = hashlib.blake2b(trace_id.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


RANDOM_SAMPLE: Final = "random_sample"
"""The reason of the random review sample (a default rule whose expression is ``random_sample``)."""


def sample_design(trace_id: str, rate: float, flag: Flag | None, *, drawn: bool | None = None) -> SampleDesign:
    """The run's place in the review sample when ``flag`` is decided at ``rate`` (see :class:`SampleDesign`).

    ``drawn``: the draw when the caller made it already (:func:`decide`'s ``drawn``); else it is made here.
    """
    rule_flagged = flag is not None and any(reason != RANDOM_SAMPLE for reason in flag.reasons)
    return SampleDesign(rate, sample_point(trace_id) < rate if drawn is None else drawn, rule_flagged)


def compile_rules(
    config: Mapping[str, Any] | None,
    score_names: Sequence[str] = (),
    *,
    repeat_threshold: int = DEFAULT_REPEAT_THRESHOLD,
    judge_names: Sequence[str] = (),
) -> tuple[Rule, ...]:
    """Merge ``config`` over :data:`DEFAULT_RULES`, compile and validate every rule.

    Args:
        config: configured rules ``{name: {expr, priority, enabled}}``.
        score_names: the scorer chain, so rules may read ``scores.<name>`` in the dry run.
        repeat_threshold: identical tool calls that make the default ``tool_loop`` rule fire.
        judge_names: the configured LLM judges, so rules may read ``judge.<name>`` in the dry run.

    Raises:
        RuleError: naming the first bad rule (syntax, unknown variable, bad priority,
            or an expression that does not yield a boolean on a sample run).
    """
    merged: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_RULES.items()}
    merged["tool_loop"]["expr"] = (
        f"has(scores.repeated_tool_calls) && scores.repeated_tool_calls >= {float(repeat_threshold)!r}"
    )
    merge_rule_specs(merged, config)
    rules = tuple(_compile(name, spec) for name, spec in merged.items())
    for rule in rules:
        _dry_run(rule, score_names, judge_names)
    return rules


def merge_rule_specs(merged: dict[str, dict[str, Any]], config: Mapping[str, Any] | None, noun: str = "rule") -> None:
    """Apply configured rules ``{name: {expr, priority, enabled}}`` over ``merged`` (the defaults) in
    place: a rule set to ``None`` or ``enabled: false`` is removed, a mapping replaces its namesake.

    Raises:
        RuleError: a configured rule is neither ``None`` nor a mapping (``noun`` names its kind).
    """
    for name, spec in (config or {}).items():
        if spec is None or (isinstance(spec, Mapping) and spec.get("enabled") is False):
            merged.pop(name, None)
        elif isinstance(spec, Mapping):
            merged[name] = dict(spec)
        else:
            raise RuleError(name, f"a {noun} must be a mapping {{expr, priority}}")


def rule_expr_priority(name: str, spec: Mapping[str, Any]) -> tuple[str, Priority]:
    """A rule's CEL expression and priority (``normal`` when not given).

    Raises:
        RuleError: the expression is missing or empty, or the priority is not high, normal or low.
    """
    expr = spec.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        raise RuleError(name, "missing 'expr' (a CEL expression)")
    try:
        priority = Priority(str(spec.get("priority", "normal")).lower())
    except ValueError:
        raise RuleError(name, f"priority must be high, normal or low, got {spec.get('priority')!r}") from None
    return expr, priority


def _compile(name: str, spec: Mapping[str, Any]) -> Rule:
    expr, priority = rule_expr_priority(name, spec)
    unknown = set(spec) - {"expr", "priority", "enabled", "description"}
    if unknown:
        raise RuleError(name, f"unknown keys {sorted(unknown)}")
    try:
        program = cel.compile(expr)
        variables = tuple(program.variables())
    except (ValueError, RuntimeError) as exc:
        raise RuleError(name, f"CEL syntax error: {exc}") from exc
    flag_name = expr.strip() if expr.strip() in BOOLEAN_VARIABLES else None
    return Rule(name, expr, priority, program, variables, flag_name, _score_test(expr))


_SCORE_TEST = re.compile(
    r"\s*has\(\s*scores\.([A-Za-z_]\w*)\s*\)\s*&&\s*scores\.\1\s*(<=|>=|<|>|==|!=)\s*(-?\d+\.\d+(?:[eE][-+]?\d+)?)\s*"
)
COMPARISONS: Mapping[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
"""The comparisons a score test may make (``has(scores.X) && scores.X <op> <literal>``), by operator."""


def _score_test(expr: str) -> tuple[str, Callable[[float, float], bool], float] | None:
    """``(score, comparison, literal)`` when ``expr`` is a guarded comparison of one score with a double literal.

    Only double literals (``0.3``, ``3.0``) qualify: scores are doubles, and a double compared
    with a double means the same in CEL and Python (NaN compares false, except ``!=``).
    """
    match = _SCORE_TEST.fullmatch(expr)
    if match is None:
        return None
    return match[1], COMPARISONS[match[2]], float(match[3])


def score_thresholds(rules: Sequence[Rule]) -> dict[str, list[tuple[str, str, float]]]:
    """``score -> [(rule, comparison, threshold)]`` of every rule that is one guarded comparison of a
    score with a literal (``has(scores.X) && scores.X < 0.3``): where a score flags a run."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for rule in rules:
        match = _SCORE_TEST.fullmatch(rule.expr) if rule.score_test is not None else None
        if match is not None:
            out.setdefault(match[1], []).append((rule.name, match[2], float(match[3])))
    return out


def _dry_run(rule: Rule, score_names: Sequence[str], judge_names: Sequence[str] = ()) -> None:
    sample = Run(trace_id="0" * 32, agent="sample")
    scores = dict.fromkeys(score_names, 0.0)
    full = activation(sample, scores, random_sample=False, judge=dict.fromkeys(judge_names, 0.0))
    outside = [v for v in rule.variables if v not in VARIABLES]
    # Comprehension variables (the x in list.exists(x, ...)) are legitimate; a genuinely
    # unknown identifier fails evaluation below.
    try:
        result = rule.program.execute({k: full[k] for k in rule.variables if k in full})
    except (LookupError, ArithmeticError):
        return  # data-dependent (a missing map key, 0/0 on the empty sample run): not a config error
    except (RuntimeError, ValueError, TypeError) as exc:
        hint = f" (unknown names: {', '.join(outside)})" if outside else ""
        raise RuleError(rule.name, f"evaluation failed on a sample run: {exc}{hint}") from exc
    if not isinstance(result, bool):
        raise RuleError(rule.name, f"must evaluate to a boolean, got {type(result).__name__}")


def activation(
    run: Run,
    scores: Mapping[str, float],
    *,
    random_sample: bool,
    feedback: Mapping[str, Any] | None = None,
    judge: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The variables a rule sees for ``run`` (``judge``: LLM judge name to score)."""
    act: dict[str, Any] = {name: getattr(run, name) for name in RUN_FIELDS}
    act["status"] = run.status.value
    act["error_type"] = run.error_type or ""
    act["scores"] = dict(scores)
    act["attributes"] = dict(run.attributes)
    act["feedback"] = dict(feedback or {})
    act["random_sample"] = random_sample
    act["judge"] = dict(judge or {})
    return act


def decide(
    run: Run,
    scores: Mapping[str, float],
    rules: tuple[Rule, ...],
    sample_rate: float,
    *,
    feedback: Mapping[str, Any] | None = None,
    on_error: OnRuleError | None = None,
    judge: Mapping[str, float] | None = None,
    drawn: bool | None = None,
) -> Flag | None:
    """Make the one flag decision for ``run`` (``judge``: the LLM judge scores known so far; ``drawn``:
    ``sample_point(run.trace_id) < sample_rate`` when the caller made that draw already).

    Returns:
        A :class:`Flag` listing every matching reason (highest priority first, then rule
        order) with the highest priority, or None when nothing matched.
    """
    if drawn is None:
        drawn = sample_point(run.trace_id) < sample_rate
    act = activation(run, scores, random_sample=drawn, feedback=feedback, judge=judge)
    # One CEL context per run for every non-trivial rule: converting the variables once
    # costs far less than converting them for each rule.
    needed = {v for r in rules if r.flag_name is None and r.score_test is None for v in r.variables if v in act}
    context = cel.Context({k: act[k] for k in needed}) if needed else None
    matched: list[Rule] = []
    for rule in rules:
        try:
            if rule.matches(act, context):
                matched.append(rule)
        except EVAL_ERRORS as exc:
            if on_error is not None:
                on_error(rule.name, exc)
    if not matched:
        return None
    matched.sort(key=lambda r: -r.priority.rank)
    return Flag(tuple(r.name for r in matched), matched[0].priority, sample_rate)


_SIGNAL_FIELDS = frozenset(("hit_max_iterations", "safety_blocked", "errored"))


def reason_evidence(  # noqa: PLR0917 - the decision's own inputs, in decide's order
    run: Run,
    flag: Flag,
    rules: tuple[Rule, ...],
    scores: Mapping[str, float],
    feedback: Mapping[str, Any] | None = None,
    judge: Mapping[str, float] | None = None,
) -> tuple[Evidence, ...]:
    """The evidence of each reason of ``flag``: what the rule read and where it shows in the run.

    A rule over a headline signal (``hit_max_iterations``, ``safety_blocked``, ``errored``) gets
    that signal's span evidence; a rule over scores, run fields, feedback or judges gets one entry
    per variable it reads, with the value (and the first failed tool span for tool errors); the
    random sample gets its sample point. Computed for flagged runs only.
    """
    by_name = {r.name: r for r in rules}
    out: list[Evidence] = []
    for reason in flag.reasons:
        rule = by_name.get(reason)
        if rule is None:
            continue
        tag = f"rule:{reason}"
        found = False
        for e in run.evidence:
            if e.signal in rule.variables and e.signal in _SIGNAL_FIELDS:
                out.append(Evidence(reason, e.rule, e.span_id, e.span_name, e.source, e.value))
                found = True
        for var in sorted(frozenset(rule.variables) - _SIGNAL_FIELDS):
            item = _variable_evidence(reason, tag, var, run, rule, scores, flag, feedback, judge)
            if item is not None:
                out.append(item)
                found = True
        if not found:
            out.append(Evidence(reason, tag, "", "", "expr", rule.expr[:240]))
    return tuple(out)


def _variable_evidence(  # noqa: PLR0917 - one private helper of reason_evidence
    reason: str,
    tag: str,
    var: str,
    run: Run,
    rule: Rule,
    scores: Mapping[str, float],
    flag: Flag,
    feedback: Mapping[str, Any] | None,
    judge: Mapping[str, float] | None,
) -> Evidence | None:
    if var == "random_sample":
        point = sample_point(run.trace_id)
        return Evidence(reason, tag, "", "", "sample_point", f"{point:.4f} < sample rate {flag.sample_rate:g}")
    if var == "scores":
        used = [name for name in scores if f"scores.{name}" in rule.expr]
        if not used:
            return None
        name = used[0]
        span = _tool_span(run, failed=name == "tool_error_rate", repeated=name == "repeated_tool_calls")
        return Evidence(reason, tag, span[0], span[1], f"scores.{name}", f"{scores[name]:g}")
    if var in ("feedback", "judge"):
        values = feedback if var == "feedback" else judge
        shown = ", ".join(f"{k}={v}" for k, v in (values or {}).items() if f"{var}.{k}" in rule.expr)
        return Evidence(reason, tag, "", "", var, shown[:240]) if shown else None
    if var in ("attributes",):
        return Evidence(reason, tag, "", "", var, rule.expr[:240])
    value = getattr(run, var, None)
    if var == "status":
        value = run.status.value
    if value is None:
        return None
    span = _tool_span(run, failed=var == "tool_errors", repeated=False)
    return Evidence(reason, tag, span[0], span[1], var, str(value)[:240])


def _tool_span(run: Run, *, failed: bool, repeated: bool) -> tuple[str, str]:
    if failed:
        hit = next((t for t in run.tools if t.error is not None), None)
        return (hit.span_id, hit.name) if hit is not None else ("", "")
    if repeated:
        seen: dict[tuple[str, str | None], int] = {}
        for t in run.tools:
            key = (t.name, t.arguments)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1 and t.arguments is not None:
                return t.span_id, t.name
    return "", ""
