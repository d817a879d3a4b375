"""Eval set management: merging cases into a set without duplicates.

Two cases are duplicates when they have the same ``eval_id`` or the same content: the same
normalised user messages, expected tool calls (names and arguments) and expected responses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from scorers.eval.model import EvalCase, EvalSet
from scorers.eval.text import normalise_message

__all__ = ["MergeResult", "case_key", "merge_cases"]


def case_key(case: EvalCase) -> str:
    """The content identity of a case (see the module docstring)."""
    turns = [
        [
            normalise_message(t.user_text),
            [[c.name, json.dumps(c.arguments, sort_keys=True)] for c in t.tool_uses],
            normalise_message(t.expected_response),
        ]
        for t in case.turns
    ]
    return json.dumps(turns, ensure_ascii=False)


@dataclass(frozen=True)
class MergeResult:
    """The merged set and what happened to the offered cases."""

    eval_set: EvalSet
    added: int
    duplicates: int


def merge_cases(target: EvalSet, cases: Iterable[EvalCase]) -> MergeResult:
    """``target`` with the ``cases`` that are not duplicates of its own (or of each other) appended."""
    ids = {c.eval_id for c in target.eval_cases}
    keys = {case_key(c) for c in target.eval_cases if c.turns}
    merged = list(target.eval_cases)
    added = dupes = 0
    for case in cases:
        key = case_key(case)
        if case.eval_id in ids or (case.turns and key in keys):
            dupes += 1
            continue
        ids.add(case.eval_id)
        keys.add(key)
        merged.append(case)
        added += 1
    return MergeResult(target.model_copy(update={"eval_cases": merged}), added, dupes)
