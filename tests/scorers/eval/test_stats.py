"""scorers.eval.stats agrees with scipy and statsmodels on generated data."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint, proportions_ztest

from scorers.eval import stats


def _cases(seed: int, count: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = [(0, 5), (5, 5), (0, 1), (1, 1), (3, 10), (50, 100), (1, 1000)]
    for _ in range(count):
        n = rng.randint(1, 400)
        out.append((rng.randint(0, n), n))
    return out


class TestWilson:
    @pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
    def test_matches_statsmodels(self, confidence: float) -> None:
        for x, n in _cases(1, 200):
            mine = stats.wilson(x, n, confidence)
            low, high = proportion_confint(x, n, alpha=1 - confidence, method="wilson")
            assert pytest.approx((low, high), abs=1e-12) == (mine.low, mine.high)
            assert x / n == mine.estimate

    def test_empty_is_the_whole_range(self) -> None:
        assert (0.0, 1.0) == (stats.wilson(0, 0).low, stats.wilson(0, 0).high)

    def test_bad_counts(self) -> None:
        with pytest.raises(ValueError, match="successes <= n"):
            stats.wilson(6, 5)


class TestBootstrap:
    def test_mean_matches_scipy_percentile_bootstrap(self) -> None:
        rng = np.random.default_rng(7)
        for n, scale in ((20, 1.0), (60, 200.0), (150, 0.3)):
            values = list(rng.gamma(2.0, scale, size=n))
            mine = stats.bootstrap_mean(values, seed=3)
            ref = sps.bootstrap((np.array(values),), np.mean, method="percentile", n_resamples=10_000, random_state=3)
            width = ref.confidence_interval.high - ref.confidence_interval.low
            # Two Monte Carlo draws of the same distribution: endpoints within 5 % of the width.
            assert pytest.approx(ref.confidence_interval.low, abs=0.05 * width) == mine.low
            assert pytest.approx(ref.confidence_interval.high, abs=0.05 * width) == mine.high
            assert pytest.approx(float(np.mean(values))) == mine.estimate

    def test_seeded(self) -> None:
        values = [random.Random(2).random() for _ in range(30)]
        assert stats.bootstrap_mean(values, seed=5) == stats.bootstrap_mean(values, seed=5)

    def test_ratio_of_clusters(self) -> None:
        """Cases with their repeats: the estimate is the pooled pass rate; the interval is wider
        than pooling the runs as if independent when the cases differ."""
        passes, runs = [5, 5, 0, 0, 5, 0, 5, 5], [5] * 8
        interval = stats.bootstrap_ratio(passes, runs)
        assert 25 / 40 == interval.estimate
        naive = stats.wilson(25, 40)
        assert (interval.high - interval.low) > (naive.high - naive.low)


class TestMcNemar:
    def test_matches_statsmodels_exact(self) -> None:
        rng = random.Random(11)
        for _ in range(200):
            n = rng.randint(1, 200)
            p_base, flip = rng.random(), rng.random() * 0.5
            base = [rng.random() < p_base for _ in range(n)]
            new = [(not x) if rng.random() < flip else x for x in base]
            mine = stats.mcnemar(base, new)
            table = [
                [sum(x and y for x, y in zip(base, new, strict=True)), mine.b],
                [mine.c, sum((not x) and (not y) for x, y in zip(base, new, strict=True))],
            ]
            ref = sm_mcnemar(table, exact=True)
            assert pytest.approx(float(ref.pvalue), abs=1e-12) == mine.p_value
            k, m = min(mine.b, mine.c), mine.b + mine.c
            if m:
                mid = 2 * (sps.binom.cdf(k, m, 0.5) - 0.5 * sps.binom.pmf(k, m, 0.5))
                assert pytest.approx(min(1.0, mid), abs=1e-12) == mine.mid_p

    def test_no_discordant_pairs(self) -> None:
        result = stats.mcnemar([True, False], [True, False])
        assert (0, 0, 1.0) == (result.b, result.c, result.p_value)


class TestPairedBootstrap:
    def test_interval_matches_scipy_on_differences(self) -> None:
        rng = np.random.default_rng(5)
        for n, shift in ((25, 0.0), (80, 0.1), (40, -3.0)):
            base = rng.normal(10, 2, size=n)
            new = base + shift + rng.normal(0, 1, size=n)
            mine = stats.paired_bootstrap(list(base), list(new), seed=1)
            ref = sps.bootstrap(
                (np.array(base), np.array(new)),
                lambda a, b, axis=-1: np.mean(b - a, axis=axis),
                paired=True,
                method="percentile",
                n_resamples=10_000,
                random_state=1,
            )
            width = ref.confidence_interval.high - ref.confidence_interval.low
            assert pytest.approx(ref.confidence_interval.low, abs=0.05 * width) == mine.difference.low
            assert pytest.approx(ref.confidence_interval.high, abs=0.05 * width) == mine.difference.high
            ref_p = sps.permutation_test(
                (base, new),
                lambda a, b, axis=-1: np.mean(b - a, axis=axis),
                permutation_type="samples",
                n_resamples=20_000,
                random_state=1,
            ).pvalue
            assert pytest.approx(float(ref_p), abs=0.02) == mine.p_value

    def test_p_value_agrees_with_a_t_test_on_normal_data(self) -> None:
        """On normal differences the bootstrap and the paired t-test reach the same verdict away from the edge."""
        rng = np.random.default_rng(9)
        for shift in (0.0, 0.05, 0.6, -0.8):
            base = rng.normal(0, 1, size=60)
            new = base + shift + rng.normal(0, 1, size=60)
            mine = stats.paired_bootstrap(list(base), list(new))
            ref = sps.ttest_rel(new, base).pvalue
            if ref < 0.01 or ref > 0.2:
                assert (mine.p_value < 0.05) == (ref < 0.05), (shift, mine.p_value, ref)
            assert pytest.approx(ref, abs=0.05) == mine.p_value

    def test_sign_flip_is_exact_on_few_pairs(self) -> None:
        """Up to 14 differing pairs every sign assignment is counted: scipy's exact permutation test."""
        rng = np.random.default_rng(2)
        for n in (3, 6, 10, 14):
            base = rng.integers(0, 5, size=n).astype(float)
            new = base + rng.normal(0.5, 1.0, size=n).round(1)
            ref = sps.permutation_test(
                (base, new),
                lambda a, b, axis=-1: np.mean(b - a, axis=axis),
                permutation_type="samples",
                n_resamples=1 << 20,
            )
            assert pytest.approx(float(ref.pvalue), abs=1e-9) == stats.paired_bootstrap(list(base), list(new)).p_value

    def test_many_pairs_use_the_normal_approximation(self) -> None:
        """Beyond 400 differing pairs: within Monte Carlo error of scipy's randomisation test."""
        rng = np.random.default_rng(12)
        for shift in (0.0, 0.08):
            base = rng.normal(0, 1, size=600)
            new = base + shift + rng.normal(0, 1, size=600)
            ref = sps.permutation_test(
                (base, new),
                lambda a, b, axis=-1: np.mean(b - a, axis=axis),
                permutation_type="samples",
                n_resamples=20_000,
                random_state=3,
            ).pvalue
            assert pytest.approx(float(ref), abs=0.02) == stats.sign_flip_p(list(new - base))

    def test_few_pairs_that_all_got_worse_are_not_significant(self) -> None:
        """Three pairs all worse: 2 of the 8 sign assignments are as extreme (the bootstrap would say ~0)."""
        assert 0.25 == stats.paired_bootstrap([1.0, 1.0, 1.0], [0.5, 0.4, 0.0]).p_value

    def test_on_zero_one_scores_it_is_mcnemar(self) -> None:
        rng = random.Random(8)
        for n in (5, 20, 60):
            base = [rng.random() < 0.7 for _ in range(n)]
            new = [rng.random() < 0.5 for _ in range(n)]
            flips = stats.paired_bootstrap([float(x) for x in base], [float(y) for y in new])
            exact = stats.mcnemar(base, new).p_value
            discordant = sum(x != y for x, y in zip(base, new, strict=True))
            tolerance = 1e-9 if discordant <= stats.EXACT_FLIPS else 0.02
            assert pytest.approx(exact, abs=tolerance) == flips.p_value

    def test_identical_is_not_significant(self) -> None:
        result = stats.paired_bootstrap([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
        assert (0.0, 1.0) == (result.difference.estimate, result.p_value)

    def test_units_group_repeats(self) -> None:
        result = stats.paired_bootstrap([1, 1, 0, 0], [0, 0, 0, 0], units=["a", "a", "b", "b"])
        assert (4, 2) == (result.pairs, result.units)


class TestTwoProportions:
    def test_matches_statsmodels(self) -> None:
        rng = random.Random(3)
        for _ in range(100):
            n1, n2 = rng.randint(20, 5000), rng.randint(20, 5000)
            x1, x2 = rng.randint(1, n1 - 1), rng.randint(1, n2 - 1)
            mine = stats.two_proportions(x1, n1, x2, n2)
            z, p = proportions_ztest([x2, x1], [n2, n1])
            assert pytest.approx(float(z), rel=1e-9) == mine.z
            assert pytest.approx(float(p), rel=1e-9, abs=1e-15) == mine.p_value


def test_holm_matches_statsmodels(monkeypatch: pytest.MonkeyPatch) -> None:
    from statsmodels.stats.multitest import multipletests

    # multipletests calls gc.collect() on every call: ~1.3 s each in the suite's heap (64 s for this test
    # in CI, 4 s alone). Collecting changes no number it returns.
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)

    rng = random.Random(4)
    for _ in range(50):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 10))]
        assert pytest.approx(list(multipletests(ps, method="holm")[1]), abs=1e-12) == stats.holm(ps)
