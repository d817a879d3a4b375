"""Judge–human agreement: agreement rate and Cohen's kappa, pure functions.

For runs with both an LLM judge verdict and a human verdict (pass/fail), grouped by judge
and rubric version. Cohen's kappa corrects the raw agreement for the agreement expected by
chance from each rater's pass rate: ``κ = (p_o − p_e) / (1 − p_e)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scorers.judge.model import Agreement, VerdictPair


def cohen_kappa(pairs: Iterable[tuple[bool, bool]]) -> tuple[int, int, float]:
    """Agreement of two binary raters.

    Args:
        pairs: ``(rater_a_pass, rater_b_pass)`` per item.

    Returns:
        ``(n, agreed, kappa)``; kappa is NaN when there are no pairs or chance agreement is 1
        (both raters gave every item the same single class).
    """
    n = agreed = a_pass = b_pass = 0
    for a, b in pairs:
        n += 1
        agreed += a == b
        a_pass += a
        b_pass += b
    if n == 0:
        return 0, 0, math.nan
    p_o = agreed / n
    p_e = (a_pass / n) * (b_pass / n) + (1 - a_pass / n) * (1 - b_pass / n)
    if p_e >= 1.0:
        return n, agreed, math.nan
    return n, agreed, (p_o - p_e) / (1 - p_e)


def agreements(pairs: Iterable[VerdictPair]) -> list[Agreement]:
    """Agreement rate and kappa per (judge, rubric version), sorted by judge then rubric."""
    groups: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    for pair in pairs:
        groups.setdefault((pair.judge, pair.rubric_version), []).append((pair.judge_pass, pair.human_pass))
    out = []
    for (judge, rubric), values in sorted(groups.items()):
        n, agreed, kappa = cohen_kappa(values)
        out.append(Agreement(judge, rubric, n, agreed, agreed / n, kappa))
    return out
