"""LLM-as-judge online scoring: rubric-based, sampled, budgeted, cached, isolated from the stream.

Public surface: the service, its configuration and the agreement computation.
"""

from __future__ import annotations

from scorers.judge.agreement import agreements, cohen_kappa
from scorers.judge.config import JudgeSpec, judge_rules, parse_judges, parse_session_judges
from scorers.judge.metrics import AgreementCollector, JudgeMetrics
from scorers.judge.model import (
    Agreement,
    JudgeResult,
    JudgeSink,
    Rubric,
    SessionJudgeSink,
    TranscriptTurn,
    VerdictPair,
    VerdictPairSource,
)
from scorers.judge.service import JudgeService
from scorers.judge.session import Conversation, SessionJudgeService

__all__ = [
    "Agreement",
    "AgreementCollector",
    "Conversation",
    "JudgeMetrics",
    "JudgeResult",
    "JudgeService",
    "JudgeSink",
    "JudgeSpec",
    "Rubric",
    "SessionJudgeService",
    "SessionJudgeSink",
    "TranscriptTurn",
    "VerdictPair",
    "VerdictPairSource",
    "agreements",
    "cohen_kappa",
    "judge_rules",
    "parse_judges",
    "parse_session_judges",
]
