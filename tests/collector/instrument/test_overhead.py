"""Smoke test of the helper-overhead benchmark (``vigil bench``); no timing assertions."""

from __future__ import annotations

from vigil.bench.pipeline import bench_helpers


class TestBenchHelpers:
    """bench_helpers measures helper and bare spans side by side."""

    def test_reports_ratio_and_costs(self) -> None:
        """A small run gives a positive ratio consistent with the per-span costs."""
        ratio, helper_us, bare_us = bench_helpers(600, 1)
        assert ratio > 0
        assert helper_us > 0
        assert bare_us > 0
        assert abs(ratio - helper_us / bare_us) < 1e-6
