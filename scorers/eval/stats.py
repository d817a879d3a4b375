"""Honest statistics for evaluations of non-deterministic agents: intervals and paired tests.

Pure functions over counts and sequences, pure Python (the sizes of an eval — tens to a few
thousand runs — need no numpy). Each returns a frozen dataclass.

* :func:`wilson`: the Wilson score interval of a pass rate (``successes`` of ``n``). Unlike the
  normal ("Wald") interval it stays inside [0, 1] and keeps its coverage at 0/n and n/n, which
  are the usual pass counts of a case run five times.
* :func:`bootstrap_ratio` / :func:`bootstrap_mean`: the percentile bootstrap interval of a ratio
  ``sum(numerators) / sum(denominators)`` over units (or a plain mean). The units are resampled
  with replacement :data:`RESAMPLES` times from a seeded generator, so a report is reproducible;
  to resample *cases* with all their repeats (a cluster bootstrap: repeats of one case are not
  independent), pass one unit per case (its passes, its runs).
* :func:`mcnemar`: McNemar's test for paired pass/fail (the same case and repeat under a base
  and a new agent). Only discordant pairs carry information: ``b`` passed → failed, ``c``
  failed → passed; under "no change" ``b ~ Binomial(b + c, 1/2)``. ``p_value`` is the **exact**
  two-sided binomial p-value (as ``statsmodels.stats.contingency_tables.mcnemar(exact=True)``):
  conservative, which suits a gate that must not fail on noise; ``mid_p`` (exact minus half the
  probability of the observed count, Fagerland et al. 2013) is given for reading, not used.
* :func:`paired_bootstrap`: for a continuous metric (a criterion's score, steps, tokens,
  latency) the paired bootstrap of the mean difference ``new - base``. Chosen over Wilcoxon's
  signed-rank test because the reports state *means* (Wilcoxon tests a shift of the median of
  the differences' distribution, not the mean); because eval scores are bounded and heavily tied
  (0/1 trajectory scores, identical reruns giving zero differences, which Wilcoxon must drop or
  split by convention); and because it gives the difference's interval in the metric's own
  units. Its p-value is **not** read off the bootstrap: inverting a percentile interval is
  anti-conservative on few pairs (three pairs that all got worse leave no resample on the other
  side of 0, "p < 0.0001"), so the p-value comes from the paired sign-flip randomisation test of
  the same mean difference (:func:`sign_flip_p`: exact up to 14 differing pairs, seeded Monte
  Carlo up to 400, its normal approximation beyond), which is valid at any size and on 0/1
  scores is McNemar's test. The interval and the p-value can disagree at the margin; the
  verdict follows the p-value.
* :func:`two_proportions`: the pooled two-proportion z-test (two independent samples of
  counts, e.g. an SLO's ratio over two periods), with each side's Wilson interval.
* :func:`holm`: Holm's step-down adjustment, for a verdict over several metrics at once
  (the family-wise error stays at ``alpha``; a gate over eight metrics at 5 % each would
  otherwise fail one run in three on noise).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "SEED",
    "Interval",
    "McNemar",
    "PairedDifference",
    "TwoProportions",
    "bootstrap_mean",
    "bootstrap_ratio",
    "holm",
    "mcnemar",
    "paired_bootstrap",
    "percentile",
    "sign_flip_p",
    "two_proportions",
    "wilson",
]

CONFIDENCE: Final = 0.95
"""Default confidence of every interval."""
RESAMPLES: Final = 10_000
"""Default bootstrap resamples: the Monte Carlo error of a 95 % endpoint is then well under the
interval's own width for the sizes of an eval."""
SEED: Final = 0
"""Default seed of the bootstrap generator (the same inputs give the same interval)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """An estimate with its interval: ``low <= estimate <= high`` at ``confidence``."""

    estimate: float
    low: float
    high: float
    confidence: float

    def text(self, fmt: str = ".2f") -> str:
        """``0.80 [0.38, 0.96]``."""
        return f"{self.estimate:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The Wilson score interval of ``successes / n`` (n = 0: the whole [0, 1], estimate 0).

    Raises:
        ValueError: counts out of range.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    z = _z(confidence)
    if n == 0:
        return Interval(0.0, 0.0, 1.0, confidence)
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), confidence)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of sorted values, linear between order statistics (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _resampled(numerators: Sequence[float], denominators: Sequence[float], resamples: int, seed: int) -> list[float]:
    n = len(numerators)
    rng = random.Random(seed)
    out: list[float] = []
    if all(d == 1 for d in denominators):  # a plain mean: draw the values themselves
        values = list(numerators)
        out = [sum(rng.choices(values, k=n)) / n for _ in range(resamples)]
        out.sort()
        return out
    idx = range(n)
    for _ in range(resamples):
        pick = rng.choices(idx, k=n)
        den = sum(denominators[i] for i in pick)
        if den > 0:
            out.append(sum(numerators[i] for i in pick) / den)
    out.sort()
    return out


def bootstrap_ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """Percentile bootstrap interval of ``sum(numerators) / sum(denominators)``, units resampled together.

    Raises:
        ValueError: no units, unequal lengths, or a zero total denominator.
    """
    if len(numerators) != len(denominators):
        raise ValueError("numerators and denominators differ in length")
    if not numerators or sum(denominators) <= 0:
        raise ValueError("bootstrap of no units (or a zero denominator)")
    _z(confidence)
    estimate = sum(numerators) / sum(denominators)
    values = _resampled(numerators, denominators, resamples, seed)
    alpha = 1 - confidence
    return Interval(estimate, percentile(values, alpha / 2), percentile(values, 1 - alpha / 2), confidence)


def bootstrap_mean(
    values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED
) -> Interval:
    """Percentile bootstrap interval of the mean of ``values``."""
    return bootstrap_ratio(values, [1.0] * len(values), confidence=confidence, resamples=resamples, seed=seed)


def _binom_pmf(k: int, n: int) -> float:
    return (
        math.comb(n, k) / 2.0**n
        if n < 1000
        else math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2))
    )


@dataclass(frozen=True, slots=True)
class McNemar:
    """McNemar's test on paired pass/fail.

    Attributes:
        pairs: pairs compared; ``b`` passed → failed, ``c`` failed → passed.
        base_rate / new_rate: pass rates of the two sides over the pairs.
        p_value: exact two-sided binomial p-value (1.0 without discordant pairs).
        mid_p: the mid-p variant (for reading; the verdict uses ``p_value``).
    """

    pairs: int
    b: int
    c: int
    base_rate: float
    new_rate: float
    p_value: float
    mid_p: float

    @property
    def difference(self) -> float:
        """``new_rate - base_rate`` (= (c - b) / pairs)."""
        return self.new_rate - self.base_rate


def mcnemar(base: Sequence[bool], new: Sequence[bool]) -> McNemar:
    """McNemar's exact test of paired outcomes ``base[i]`` / ``new[i]``.

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(base) != len(new):
        raise ValueError("paired outcomes differ in length")
    b = sum(1 for x, y in zip(base, new, strict=True) if x and not y)
    c = sum(1 for x, y in zip(base, new, strict=True) if y and not x)
    n = b + c
    pairs = len(base)
    if n == 0:
        p, mid = 1.0, 1.0
    else:
        k = min(b, c)
        tail = sum(_binom_pmf(i, n) for i in range(k + 1))
        p = min(1.0, 2 * tail)
        mid = min(1.0, 2 * (tail - 0.5 * _binom_pmf(k, n)))
    base_rate = sum(map(bool, base)) / pairs if pairs else 0.0
    new_rate = sum(map(bool, new)) / pairs if pairs else 0.0
    return McNemar(pairs, b, c, base_rate, new_rate, p, mid)


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """The paired bootstrap of ``mean(new) - mean(base)``.

    Attributes:
        pairs: pairs compared (over ``units`` resampled units).
        base_mean / new_mean: the two means over the pairs.
        difference: ``new_mean - base_mean`` with its percentile interval.
        p_value: of the sign-flip test on the same differences (see the module docstring).
        resamples / seed: as drawn.
    """

    pairs: int
    units: int
    base_mean: float
    new_mean: float
    difference: Interval
    p_value: float
    resamples: int
    seed: int


def paired_bootstrap(
    base: Sequence[float],
    new: Sequence[float],
    *,
    units: Sequence[object] | None = None,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> PairedDifference:
    """Paired bootstrap of the mean difference ``new[i] - base[i]``.

    Args:
        base / new: the paired values.
        units: the resampling (and sign-flipping) unit of each pair (e.g. its case id, so a
            case's repeats are drawn together); None: every pair is its own unit.
        confidence / resamples / seed: of the interval.

    Raises:
        ValueError: no pairs or unequal lengths.
    """
    if len(base) != len(new) or (units is not None and len(units) != len(base)):
        raise ValueError("paired values differ in length")
    if not base:
        raise ValueError("paired bootstrap of no pairs")
    diffs = [y - x for x, y in zip(base, new, strict=True)]
    keys = list(range(len(diffs))) if units is None else list(units)
    sums: dict[object, list[float]] = {}
    for key, d in zip(keys, diffs, strict=True):
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += d
        acc[1] += 1.0
    nums = [v[0] for v in sums.values()]
    dens = [v[1] for v in sums.values()]
    estimate = sum(diffs) / len(diffs)
    values = _resampled(nums, dens, resamples, seed)
    alpha = 1 - confidence
    interval = Interval(estimate, percentile(values, alpha / 2), percentile(values, 1 - alpha / 2), confidence)
    p = sign_flip_p(nums, resamples=resamples, seed=seed)
    n = len(base)
    return PairedDifference(n, len(nums), sum(base) / n, sum(new) / n, interval, p, resamples, seed)


EXACT_FLIPS: Final = 14
"""Up to this many non-zero differences the sign-flip test enumerates every assignment (2^14)."""
NORMAL_FLIPS: Final = 400
"""Beyond this many the sign-flip distribution is taken as normal (its Monte Carlo would cost
``resamples × m`` steps in pure Python)."""


def sign_flip_p(differences: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """Two-sided p-value of the paired sign-flip (randomisation) test of a zero mean difference.

    Under "no change" the two sides of a pair are exchangeable, so each difference is as likely
    with either sign; the p-value is the share of sign assignments whose ``|sum|`` reaches the
    observed one — exact over every assignment up to :data:`EXACT_FLIPS` non-zero differences,
    over ``resamples`` seeded random ones up to :data:`NORMAL_FLIPS` (``(k + 1) / (resamples + 1)``),
    and from the normal approximation of the sum beyond. On 0/1 outcomes it is McNemar's test.
    """
    nonzero = [abs(d) for d in differences if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(d for d in differences if d != 0))
    slack = 1e-9 * max(nonzero)
    m = len(nonzero)
    if m > NORMAL_FLIPS:
        # The sum of m independent ±d_i: mean 0, variance sum(d_i^2), normal by the CLT.
        z = observed / math.sqrt(sum(d * d for d in nonzero))
        return min(1.0, 2 * NormalDist().cdf(-z))
    if m <= EXACT_FLIPS:
        hits = 0
        for mask in range(1 << m):
            total = sum(d if mask >> i & 1 else -d for i, d in enumerate(nonzero))
            hits += abs(total) >= observed - slack
        return hits / (1 << m)
    rng = random.Random(seed)
    hits = 0
    for _ in range(resamples):
        mask = rng.getrandbits(m)
        total = sum(d if mask >> i & 1 else -d for i, d in enumerate(nonzero))
        hits += abs(total) >= observed - slack
    return min(1.0, (hits + 1) / (resamples + 1))


@dataclass(frozen=True, slots=True)
class TwoProportions:
    """The pooled two-proportion z-test of ``x1/n1`` (base) against ``x2/n2`` (new)."""

    base: Interval
    new: Interval
    z: float
    p_value: float

    @property
    def difference(self) -> float:
        """``new - base``."""
        return self.new.estimate - self.base.estimate


def two_proportions(x1: int, n1: int, x2: int, n2: int, confidence: float = CONFIDENCE) -> TwoProportions:
    """Two-sided pooled z-test of equal proportions, with each side's Wilson interval.

    Raises:
        ValueError: counts out of range or an empty side.
    """
    if n1 <= 0 or n2 <= 0:
        raise ValueError("two_proportions needs events on both sides")
    a, b = wilson(x1, n1, confidence), wilson(x2, n2, confidence)
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return TwoProportions(a, b, 0.0, 1.0)
    z = (x2 / n2 - x1 / n1) / se
    return TwoProportions(a, b, z, min(1.0, 2 * NormalDist().cdf(-abs(z))))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (monotone, capped at 1)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out
