"""Tests of scorers.model's shared tables."""

from __future__ import annotations

import dataclasses

from scorers.model import OUTCOME_FIELDS, Run


def test_outcome_fields_are_run_fields_in_order() -> None:
    """Every outcome field is a field of Run, listed once and in Run's order."""
    names = [f.name for f in dataclasses.fields(Run)]
    assert list(OUTCOME_FIELDS) == [n for n in names if n in OUTCOME_FIELDS]
