"""Tests for scorers.judge.agreement and the agreement gauges (scorers.judge.metrics)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from collector.errors import BackpressureError
from scorers.judge.agreement import agreements, cohen_kappa
from scorers.judge.metrics import AgreementCollector
from scorers.judge.model import VerdictPair
from tests.support.judge import ListPairSource


def _table(yy: int, yn: int, ny: int, nn: int) -> list[tuple[bool, bool]]:
    return [(True, True)] * yy + [(True, False)] * yn + [(False, True)] * ny + [(False, False)] * nn


class TestCohenKappa:
    """Cohen's kappa of two binary raters."""

    def test_textbook_example(self) -> None:
        """20/5/10/15: p_o = 0.7, p_e = 0.5, kappa = 0.4."""
        n, agreed, kappa = cohen_kappa(_table(20, 5, 10, 15))
        assert (50, 35) == (n, agreed)
        assert 0.4 == pytest.approx(kappa)

    def test_perfect_and_opposite(self) -> None:
        """Full agreement is 1; systematic disagreement on balanced classes is -1."""
        assert 1.0 == pytest.approx(cohen_kappa(_table(5, 0, 0, 5))[2])
        assert -1.0 == pytest.approx(cohen_kappa(_table(0, 5, 5, 0))[2])

    def test_chance_level_is_zero(self) -> None:
        """Independent raters with 50 % pass rates: kappa 0."""
        assert 0.0 == pytest.approx(cohen_kappa(_table(5, 5, 5, 5))[2])

    def test_undefined_is_nan(self) -> None:
        """No pairs, or both raters always 'pass': kappa is NaN, never a division error."""
        assert math.isnan(cohen_kappa([])[2])
        n, agreed, kappa = cohen_kappa(_table(7, 0, 0, 0))
        assert (7, 7) == (n, agreed)
        assert math.isnan(kappa)

    def test_agrees_with_scikit_formula_on_skewed_data(self) -> None:
        """A skewed table against the formula worked by hand: p_o=0.85, p_e=0.74, kappa=0.4231."""
        # a: 85 pass; b: 80 pass; both pass 75, both fail 10.
        kappa = cohen_kappa(_table(75, 10, 5, 10))[2]
        p_o, p_e = 0.85, 0.85 * 0.80 + 0.15 * 0.20
        assert (p_o - p_e) / (1 - p_e) == pytest.approx(kappa)


class TestAgreements:
    """Grouping by judge and rubric version."""

    def test_groups_and_rates(self) -> None:
        """Each (judge, rubric version) gets its own n, rate and kappa, sorted."""
        pairs = [
            VerdictPair("safety", "safety@1", True, True),
            VerdictPair("safety", "safety@1", False, True),
            VerdictPair("ground", "groundedness@2", True, True),
            VerdictPair("ground", "groundedness@1", False, False),
        ]
        out = agreements(pairs)
        assert [("ground", "groundedness@1"), ("ground", "groundedness@2"), ("safety", "safety@1")] == [
            (a.judge, a.rubric_version) for a in out
        ]
        safety = out[2]
        assert (2, 1, 0.5) == (safety.n, safety.agreed, safety.rate)


class TestAgreementCollector:
    """The scrape-time gauges."""

    def test_gauges_per_judge_and_rubric(self) -> None:
        """vigil_judge_agreement_rate and vigil_judge_cohen_kappa carry judge and rubric_version."""
        source = ListPairSource([VerdictPair("ground", "groundedness@1", a, b) for a, b in _table(20, 5, 10, 15)])
        registry = CollectorRegistry()
        registry.register(AgreementCollector(source))
        labels = {"judge": "ground", "rubric_version": "groundedness@1"}
        assert 0.7 == pytest.approx(registry.get_sample_value("vigil_judge_agreement_rate", labels))
        assert 0.4 == pytest.approx(registry.get_sample_value("vigil_judge_cohen_kappa", labels))

    def test_recomputed_only_after_the_interval(self) -> None:
        """Scrapes within min_interval_s reuse the figures; a later scrape sees new verdicts."""
        now = [0.0]
        source = ListPairSource([VerdictPair("j", "r@1", True, True)])
        collector = AgreementCollector(source, min_interval_s=15, clock=lambda: now[0])
        assert 1.0 == collector.current()[0].rate
        source.pairs.append(VerdictPair("j", "r@1", True, False))
        assert 1.0 == collector.current()[0].rate
        now[0] = 16.0
        assert 0.5 == collector.current()[0].rate
        assert 2 == source.calls

    def test_failing_source_serves_last_figures(self) -> None:
        """An unreachable store is logged; the scrape still answers with the previous figures."""

        class Down(ListPairSource):
            def verdict_pairs(self) -> list[VerdictPair]:
                raise BackpressureError(1.0)

        good = AgreementCollector(ListPairSource([VerdictPair("j", "r@1", True, True)]), min_interval_s=0)
        assert 1 == len(good.current())
        down = AgreementCollector(Down([]), min_interval_s=0)
        assert [] == down.current()
        registry = CollectorRegistry()
        registry.register(down)
        assert registry.get_sample_value("vigil_judge_agreement_rate", {"judge": "j", "rubric_version": "r@1"}) is None
