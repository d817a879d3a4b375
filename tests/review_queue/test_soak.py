"""Tests for vigil.bench.soak: a short soak measures memory and accounts for every run."""

from __future__ import annotations

import pytest

from vigil.bench.soak import SoakResult, _growth, soak

pytestmark = pytest.mark.integration


def test_short_soak_accounts_for_every_run() -> None:
    """Samples are taken, every accepted run is stored, nothing is refused at a modest rate."""
    result = soak(6.0, 40.0, sample_every_s=1.0)
    assert len(result.samples) >= 4
    assert all(rss > 10 for _, rss in result.samples)
    assert result.accepted_runs > 100
    assert result.accepted_runs == result.stored_runs
    assert 0 == result.refused


def test_growth_compares_last_quarter_with_third_quarter() -> None:
    """Warm-up (first half) is ignored; growth is last-quarter median over third-quarter median."""
    samples = [(float(i), rss) for i, rss in enumerate([50, 90, 95, 99, 100, 100, 110, 110])]
    assert pytest.approx(0.10) == _growth(samples)
    assert 0.0 == _growth(samples[:4])


def test_rss_summary() -> None:
    """start, median, peak and end of the samples (what BENCHMARKS.md quotes)."""
    result = SoakResult(samples=[(0.0, 100.0), (5.0, 130.0), (10.0, 120.0), (15.0, 125.0)])
    assert (100.0, 122.5, 130.0, 125.0) == result.rss()
    assert (0.0, 0.0, 0.0, 0.0) == SoakResult().rss()
