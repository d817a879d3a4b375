"""The reference-based criteria: pure functions of (actual turns, expected invocations) → a result.

Each returns a :class:`CriterionResult`: a score in [0, 1] (None when the criterion does not
apply, e.g. ``phrase_recall`` without phrases), whether it passed its threshold (``score >=
threshold``, as ADK), and a short explanation naming what was missing or different.

Turns are compared by position: the agent's i-th turn against the case's i-th invocation; a turn
the agent never produced counts as an empty one (no tool calls, no answer).

* ``tool_trajectory`` (ADK ``tool_trajectory_avg_score``): each invocation scores 1 when its tool
  calls match under the match type, else 0; the case scores the mean. EXACT: the same calls in the
  same order, nothing more; IN_ORDER: the expected calls appear in order within the actual ones
  (others may come between); ANY_ORDER: each expected call is matched by its own actual call.
  Calls match when the names are equal and the arguments match under ``arg_match``: ``exact``
  (decoded JSON values equal: key order ignored, ``250`` equals ``250.0``, strings case-sensitive,
  a missing or extra key differs), ``subset`` (every expected key present with an equal value;
  extra actual keys allowed) or ``ignore``.
* ``tool_recall`` / ``tool_precision``: over the case, the share of expected calls matched by their
  own actual call (recall) and of actual calls that match an expected one (precision), by tool name.
  Nothing expected: recall 1; nothing called: precision 1 when nothing was expected, else 0.
* ``param_accuracy``: each expected call is paired with an actual call of the same name (the pairing
  that gets the most arguments right); its score is the share of argument keys (the union of both
  sides) whose values are equal; an unpaired expected call scores 0; the case scores the mean over
  expected calls (1 when none are expected).
* ``response_match`` (ADK ``response_match_score``): ROUGE-1 F-measure of each turn's answer against
  the expected final response (:mod:`scorers.eval.text`), averaged over the invocations.
* ``phrase_recall``: the share of expected phrases contained in the answers (normalised text).
* ``task_success``: 1 when every other applicable criterion passed, else 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from collector.model import fast_constructor
from scorers.eval.model import ArgMatch, CriterionConfig, Invocation, MatchType
from scorers.eval.text import normalise_message, rouge1

__all__ = [
    "MATCHERS",
    "ActualTurn",
    "Call",
    "CriterionResult",
    "args_match",
    "match_any_order",
    "match_exact",
    "match_in_order",
    "param_accuracy",
    "phrase_recall",
    "response_match",
    "task_success",
    "tool_precision",
    "tool_recall",
    "tool_trajectory",
]


class Call(Protocol):
    """A tool call as the criteria see it: an expected :class:`scorers.eval.model.ToolCall` or one read
    from a trace (:class:`scorers.eval.actual.TracedCall`)."""

    @property
    def name(self) -> str:
        """The tool name."""
        ...

    @property
    def arguments(self) -> Mapping[str, Any]:
        """The arguments, decoded JSON."""
        ...


@dataclass(frozen=True, slots=True)
class ActualTurn:
    """What the agent did in one turn.

    Attributes:
        user_text: the user's message of the turn.
        tool_calls: the tool calls, in start order, arguments decoded.
        response: the agent's final answer (empty when none was captured).
        trace_id: the trace of the turn (empty when unknown).
        steps: LLM calls of the turn (``Run.llm_calls``, a step as :mod:`scorers.efficiency` counts it).
        tokens: input + output tokens of the turn.
        latency_ms: wall time of the turn, first span start to last span end.
        tool_errors: tool calls of the turn that failed.
        system_prompt: the system instructions captured in the turn's conversation (empty when not).
    """

    user_text: str = ""
    tool_calls: tuple[Call, ...] = ()
    response: str = ""
    trace_id: str = ""
    steps: int = 0
    tokens: int = 0
    latency_ms: float = 0.0
    tool_errors: int = 0
    system_prompt: str = ""


@dataclass(frozen=True, slots=True)
class CriterionResult:
    """One criterion's verdict on one case.

    Attributes:
        name: the criterion.
        score: in [0, 1], or None when it does not apply.
        threshold: the pass threshold.
        passed: ``score >= threshold``; None when it does not apply.
        detail: a short explanation (what was missing, which argument differed).
        per_turn: per-invocation scores when the criterion has them.
    """

    name: str
    score: float | None
    threshold: float
    passed: bool | None
    detail: str = ""
    per_turn: tuple[float, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """JSON form: every field by name, in field order (``per_turn`` as a list)."""
        return {**asdict(self), "per_turn": list(self.per_turn)}


_new_result = fast_constructor(CriterionResult)


def _result(
    name: str, score: float | None, cfg: CriterionConfig, detail: str, per_turn: Sequence[float] = ()
) -> CriterionResult:
    passed = None if score is None else score >= cfg.threshold
    return _new_result(name, score, cfg.threshold, passed, detail, tuple(per_turn))


# --- argument and call matching ------------------------------------------------------------


def args_match(actual: Mapping[str, Any], expected: Mapping[str, Any], mode: ArgMatch = ArgMatch.EXACT) -> bool:
    """Whether ``actual`` arguments match ``expected`` under ``mode`` (decoded JSON values, ``==``)."""
    if mode is ArgMatch.IGNORE:
        return True
    if mode is ArgMatch.SUBSET:
        return all(k in actual and actual[k] == v for k, v in expected.items())
    return dict(actual) == dict(expected)


def _call_match(mode: ArgMatch) -> Callable[[Call, Call], bool]:
    def same(actual: Call, expected: Call) -> bool:
        if actual.name != expected.name:
            return False
        if mode is ArgMatch.EXACT:
            # equal canonical texts are equal values (unequal texts may still be: 250 and 250.0)
            text = getattr(actual, "canonical", None)
            if text is not None and text == getattr(expected, "canonical", None):
                return True
        return args_match(actual.arguments, expected.arguments, mode)

    return same


def match_exact(actual: Sequence[Call], expected: Sequence[Call], mode: ArgMatch = ArgMatch.EXACT) -> bool:
    """EXACT: the same calls in the same order, no extra or missing call."""
    if len(actual) != len(expected):
        return False
    if mode is ArgMatch.EXACT and [(c.name, getattr(c, "canonical", None)) for c in actual] == [
        (c.name, getattr(c, "canonical", "")) for c in expected
    ]:
        return True  # the same names and canonical argument texts (the common, passing case)
    same = _call_match(mode)
    return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected, strict=True))


def match_in_order(actual: Sequence[Call], expected: Sequence[Call], mode: ArgMatch = ArgMatch.EXACT) -> bool:
    """IN_ORDER: the expected calls appear in order within the actual ones (a subsequence)."""
    same = _call_match(mode)
    i = 0
    for call in actual:
        if i < len(expected) and same(call, expected[i]):
            i += 1
    return i == len(expected)


def _pairing(actual: Sequence[Call], expected: Sequence[Call], same: Callable[[Call, Call], bool]) -> dict[int, int]:
    """A maximum matching expected index → actual index (augmenting paths; lists are short)."""
    edges = [[j for j, a in enumerate(actual) if same(a, e)] for e in expected]
    owner: dict[int, int] = {}  # actual index -> expected index

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(expected)):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def match_any_order(actual: Sequence[Call], expected: Sequence[Call], mode: ArgMatch = ArgMatch.EXACT) -> bool:
    """ANY_ORDER: each expected call is matched by its own actual call (extra actual calls allowed)."""
    return len(_pairing(actual, expected, _call_match(mode))) == len(expected)


MATCHERS: Mapping[MatchType, Callable[[Sequence[Call], Sequence[Call], ArgMatch], bool]] = {
    MatchType.EXACT: match_exact,
    MatchType.IN_ORDER: match_in_order,
    MatchType.ANY_ORDER: match_any_order,
}
"""The trajectory matcher of each match type (what ``tool_trajectory`` scores one invocation with)."""


def _turns(actual: Sequence[ActualTurn], expected: Sequence[Invocation]) -> list[tuple[ActualTurn, Invocation]]:
    padded = list(actual) + [ActualTurn()] * max(0, len(expected) - len(actual))
    return list(zip(padded, expected, strict=False))


def _show(call: Call) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    text = f"{call.name}({args})"
    return text if len(text) <= 120 else text[:119] + "…"


def _why_trajectory(actual: Sequence[Call], expected: Sequence[Call], match: MatchType, mode: ArgMatch) -> str:
    """What differs: missing calls, argument differences, extra calls, order."""
    pairs = _pairing(actual, expected, _call_match(mode))
    reasons: list[str] = []
    used = set(pairs.values())
    by_name = _pairing(actual, expected, lambda a, e: a.name == e.name)
    for i, e in enumerate(expected):
        if i in pairs:
            continue
        j = by_name.get(i)
        if j is not None and j not in used:
            reasons.append(f"{e.name}: {_arg_diff(actual[j].arguments, e.arguments, mode)}")
            used.add(j)
        else:
            reasons.append(f"missing {_show(e)}")
    if match is MatchType.EXACT:
        extra = [actual[j] for j in range(len(actual)) if j not in used]
        reasons += [f"unexpected {_show(c)}" for c in extra[:5]]
        reasons += [""] * max(0, len(extra) - 5)  # counted, not shown
    if not reasons:
        reasons.append("calls out of order" if match is not MatchType.ANY_ORDER else "no match")
    return "; ".join(reasons[:4]) + (f" (+{len(reasons) - 4} more)" if len(reasons) > 4 else "")


def _arg_diff(actual: Mapping[str, Any], expected: Mapping[str, Any], mode: ArgMatch) -> str:
    parts = []
    for k, v in expected.items():
        if k not in actual:
            parts.append(f"argument {k} missing (expected {json.dumps(v, ensure_ascii=False)})")
        elif actual[k] != v:
            want, got = json.dumps(v, ensure_ascii=False), json.dumps(actual[k], ensure_ascii=False)
            parts.append(f"argument {k}: expected {want}, got {got}")
    if mode is ArgMatch.EXACT:
        parts += [f"unexpected argument {k}" for k in actual if k not in expected]
    return "; ".join(parts) or "arguments differ"


# --- the criteria ----------------------------------------------------------------------------


def tool_trajectory(
    actual: Sequence[ActualTurn], expected: Sequence[Invocation], cfg: CriterionConfig, *, explain: bool = True
) -> CriterionResult:
    """ADK's ``tool_trajectory_avg_score``: 1/0 per invocation under the match type, averaged.

    With ``explain=False`` a failed turn is not explained (the online path keeps only the score).
    """
    matcher = MATCHERS[cfg.match_type]
    per_turn: list[float] = []
    why: list[str] = []
    for n, (act, exp) in enumerate(_turns(actual, expected), 1):
        ok = matcher(act.tool_calls, exp.tool_uses, cfg.arg_match)
        per_turn.append(1.0 if ok else 0.0)
        if not ok:
            why.append(
                f"turn {n}: {_why_trajectory(act.tool_calls, exp.tool_uses, cfg.match_type, cfg.arg_match)}"
                if explain
                else f"turn {n}: no match"
            )
    if not per_turn:
        return _result("tool_trajectory", None, cfg, "no expected invocation")
    score = sum(per_turn) / len(per_turn)
    detail = "; ".join(why) if why else f"all {len(per_turn)} turn(s) match ({cfg.match_type.value})"
    return _result("tool_trajectory", score, cfg, detail, per_turn)


def _all_calls(
    actual: Sequence[ActualTurn], expected: Sequence[Invocation]
) -> list[tuple[Sequence[Call], Sequence[Call]]]:
    return [(a.tool_calls, e.tool_uses) for a, e in _turns(actual, expected)]


def tool_recall(actual: Sequence[ActualTurn], expected: Sequence[Invocation], cfg: CriterionConfig) -> CriterionResult:
    """Share of expected tool calls made (by name, each matched by its own actual call)."""
    matched = total = 0
    missing: list[str] = []
    for act, exp in _all_calls(actual, expected):
        pairs = _pairing(act, exp, lambda a, e: a.name == e.name)
        matched += len(pairs)
        total += len(exp)
        missing += [e.name for i, e in enumerate(exp) if i not in pairs]
    score = matched / total if total else 1.0
    detail = f"{matched}/{total} expected call(s) made" + (f"; missing {', '.join(missing[:5])}" if missing else "")
    return _result("tool_recall", score, cfg, detail)


def tool_precision(
    actual: Sequence[ActualTurn], expected: Sequence[Invocation], cfg: CriterionConfig
) -> CriterionResult:
    """Share of actual tool calls that were expected (by name, each matched by its own expected call)."""
    matched = total = expected_total = 0
    extra: list[str] = []
    for act, exp in _all_calls(actual, expected):
        pairs = _pairing(act, exp, lambda a, e: a.name == e.name)
        used = set(pairs.values())
        matched += len(pairs)
        total += len(act)
        expected_total += len(exp)
        extra += [a.name for j, a in enumerate(act) if j not in used]
    score = matched / total if total else (1.0 if expected_total == 0 else 0.0)
    detail = f"{matched}/{total} call(s) expected" + (f"; unexpected {', '.join(extra[:5])}" if extra else "")
    return _result("tool_precision", score, cfg, detail)


def _arg_score(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> float:
    keys = set(actual) | set(expected)
    if not keys:
        return 1.0
    return sum(1 for k in keys if k in actual and k in expected and actual[k] == expected[k]) / len(keys)


def param_accuracy(
    actual: Sequence[ActualTurn], expected: Sequence[Invocation], cfg: CriterionConfig
) -> CriterionResult:
    """Mean over expected calls of the share of argument keys right in the paired actual call (0 unpaired)."""
    scores: list[float] = []
    wrong: list[str] = []
    for act, exp in _all_calls(actual, expected):
        # pair greedily by best argument score among same-name calls (each actual call used once)
        free = set(range(len(act)))
        for e in exp:
            best, best_j = 0.0, None
            for j in sorted(free):
                if act[j].name == e.name:
                    s = _arg_score(act[j].arguments, e.arguments)
                    if best_j is None or s > best:
                        best, best_j = s, j
            if best_j is None:
                scores.append(0.0)
                wrong.append(f"{e.name} not called")
                continue
            free.discard(best_j)
            scores.append(best)
            if best < 1.0:
                wrong.append(f"{e.name}: {_arg_diff(act[best_j].arguments, e.arguments, ArgMatch.EXACT)}")
    score = sum(scores) / len(scores) if scores else 1.0
    detail = "; ".join(wrong[:4]) if wrong else f"{len(scores)} call(s), all arguments right"
    return _result("param_accuracy", score, cfg, detail)


def response_match(
    actual: Sequence[ActualTurn], expected: Sequence[Invocation], cfg: CriterionConfig
) -> CriterionResult:
    """ADK's ``response_match_score``: ROUGE-1 F-measure per invocation, averaged."""
    per_turn = [rouge1(a.response, e.expected_response).fmeasure for a, e in _turns(actual, expected)]
    if not per_turn:
        return _result("response_match", None, cfg, "no expected invocation")
    score = sum(per_turn) / len(per_turn)
    low = [f"turn {n}: ROUGE-1 {s:.2f}" for n, s in enumerate(per_turn, 1) if s < cfg.threshold]
    detail = "; ".join(low[:4]) if low else f"ROUGE-1 {score:.2f} over {len(per_turn)} turn(s)"
    return _result("response_match", score, cfg, detail, per_turn)


def phrase_recall(actual: Sequence[ActualTurn], phrases: Sequence[str], cfg: CriterionConfig) -> CriterionResult:
    """Share of ``phrases`` contained in the agent's answers (normalised text); None without phrases."""
    if not phrases:
        return _result("phrase_recall", None, cfg, "no expected phrases")
    answers = normalise_message(" \n ".join(a.response for a in actual))
    missing = [p for p in phrases if normalise_message(p) not in answers]
    score = (len(phrases) - len(missing)) / len(phrases)
    detail = f"missing {', '.join(repr(p) for p in missing[:5])}" if missing else f"all {len(phrases)} phrase(s) found"
    return _result("phrase_recall", score, cfg, detail)


def task_success(others: Sequence[CriterionResult], cfg: CriterionConfig) -> CriterionResult:
    """1 when every applicable criterion in ``others`` passed, else 0."""
    failed = [r.name for r in others if r.passed is False]
    unknown = [r.name for r in others if r.passed is None and r.score is None and r.detail.startswith("judge")]
    score = 0.0 if failed or unknown else 1.0
    detail = f"failed: {', '.join(failed + unknown)}" if failed or unknown else "every criterion passed"
    return _result("task_success", score, cfg, detail)
