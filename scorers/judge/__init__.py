"""LLM-as-judge online scoring: rubric-based, sampled, budgeted, cached, isolated from the stream.

Public surface: the service, its configuration and the agreement computation.
"""

from __future__ import annotations

from scorers.judge.agreement import agreements, cohen_kappa
from scorers.judge.config import JudgeSpec, judge_rules, parse_judges
from scorers.judge.metrics import AgreementCollector, JudgeMetrics
from scorers.judge.model import Agreement, JudgeResult, JudgeSink, Rubric, VerdictPair, VerdictPairSource
from scorers.judge.service import JudgeService

__all__ = [
    "Agreement",
    "AgreementCollector",
    "JudgeMetrics",
    "JudgeResult",
    "JudgeService",
    "JudgeSink",
    "JudgeSpec",
    "Rubric",
    "VerdictPair",
    "VerdictPairSource",
    "agreements",
    "cohen_kappa",
    "judge_rules",
    "parse_judges",
]
