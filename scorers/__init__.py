"""Turning traces into scored runs: assembly, normalisation, scorers, flag rules, the stream worker.

Public surface: the run model and the scorer contract.
"""

from __future__ import annotations

from scorers.model import Flag, Priority, Run, Score, ScoredRun, Scorer

__all__ = ["Flag", "Priority", "Run", "Score", "ScoredRun", "Scorer"]
