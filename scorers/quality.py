"""Production quality from the review sample: design-based and prediction-powered estimates.

Pure functions over labels and counts; :mod:`review_queue.quality` reads them from the store. Every
estimate carries its 95 % interval and its ``n`` and is computed from the sample's *design* — who
could have been picked, with what probability — never from whichever runs happened to be labelled.

The design (:class:`scorers.model.SampleDesign`): every run of a window has a known probability
``p`` of entering the *random stratum*, a Bernoulli sample independent of the rules, and a known
rule flag ``r`` fixed at its first decision. A run's label ``y`` is its first completed human verdict
(1 = pass) or, for a failure category, whether that verdict named the category.

Three estimators of a population mean θ (the review pass rate, a category's share of runs …):

- :func:`post_stratified` over the random stratum alone (``method = "sample"``): within each rule
  stratum ``h`` (flagged or not) the labelled members of the random stratum, weighted ``1/p``, give the
  stratum's mean; the strata are combined with their *known* population shares ``N_h / N``. Because
  reviewers clear rule-flagged items first, the labelled part of the sample over-represents flagged
  runs; weighting each stratum by its population share (a weighting-class adjustment for
  non-response) removes that, and with even coverage it is the plain share with its Wilson interval.
- :func:`post_stratified` with every labelled rule-flagged run in the flagged stratum
  (``method = "stratified"``): the flagged stratum is mostly reviewed in full, so its mean is nearly
  known (finite-population correction), and only the unflagged stratum is estimated from the sample.
  It assumes the labelled flagged runs stand for the flagged stratum (true when they are all
  reviewed; the stratum's coverage is reported).
- :func:`ppi_mean` (``method = "ppi"``), prediction-powered inference with PPI++ power tuning
  (Angelopoulos, Duchi & Zrnic 2023, arXiv:2311.01453; the ``ppi-python`` package's ``ppi_mean_ci``,
  whose numbers it reproduces): a prediction on *every* run (Vigil's own verdict) corrected by the
  labelled random-stratum runs; λ is tuned from the data so the interval is never much wider than the
  labels' alone and much narrower when the prediction is good. An LLM judge that judges the random
  stratum predicts a *sample* of each stratum (``method = "judge:<name>"``): its predictions on the
  stratum's members nobody reviewed stand for the stratum (:func:`sampled_predictions`) and the
  reviewed members correct them — it narrows the interval when reviewers cover part of the sample.

Intervals of the stratified estimators combine each stratum's Wilson interval (at the stratum's
Kish effective size, shrunk by its finite-population correction) by MOVER (Zou & Donner 2008,
"Construction of confidence limits about effect measures"; Zou, Huang & Zhang 2009 for linear
functions of proportions), which keeps Wilson's good coverage near 0 and 1. ``tests/scorers/
test_quality.py`` checks coverage over simulated populations with known truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

__all__ = [
    "CONFIDENCE",
    "Change",
    "Estimate",
    "Labelled",
    "PredictedStratum",
    "Stratum",
    "change",
    "cohen_kappa",
    "corrected",
    "mean_ci",
    "narrowest",
    "post_stratified",
    "ppi_mean",
    "sampled_predictions",
    "stratified_ppi",
    "wilson_bounds",
]

CONFIDENCE: Final = 0.95
"""The confidence of every interval shown."""

WEIGHTED_LAMBDA_LABELS: Final = 100
"""Labels from which PPI++'s λ is tuned for unequal weights (:func:`_weighted_lambda`): below it the
minimiser's own noise (it is estimated from the same labels) costs more coverage than it saves."""


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One estimate with its interval.

    Attributes:
        method: ``sample``, ``stratified``, ``ppi`` or ``naive``.
        value: the point estimate, ``None`` when the data cannot give one.
        low: the interval's lower bound (``None`` with ``value``).
        high: the interval's upper bound.
        n: the labels it used.
        population: the runs it speaks for.
        se: the standard error (normal-theory estimators; ``None`` otherwise).
    """

    method: str
    value: float | None
    low: float | None
    high: float | None
    n: int
    population: int
    se: float | None = None

    @property
    def known(self) -> bool:
        """Whether there is an estimate at all."""
        return self.value is not None


@dataclass(frozen=True, slots=True)
class Labelled:
    """One labelled run: its label, its prediction and its design weight.

    Attributes:
        y: the label (1.0 = the event: a pass, a category named; 0.0 = not).
        prediction: the prediction of ``y`` (0/1 or a probability), for :func:`ppi_mean`.
        weight: the inverse of the run's probability of being labelled.
    """

    y: float
    prediction: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Stratum:
    """A stratum of the population: its size and its labelled members.

    Attributes:
        size: runs in the stratum (``N_h``, counted exactly).
        labels: its labelled members.
    """

    size: int
    labels: Sequence[Labelled]


def wilson_bounds(p: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` seen in ``n`` (possibly effective, fractional) trials."""
    if n <= 0:
        return 0.0, 1.0
    z2 = _z(confidence) ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = math.sqrt(z2) / (1 + z2 / n) * math.sqrt(max(0.0, p * (1 - p)) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _weighted(labels: Sequence[Labelled]) -> tuple[float, float]:
    """The weighted mean of the labels and their Kish effective size ``(Σw)² / Σw²``."""
    total = sum(x.weight for x in labels)
    squares = sum(x.weight * x.weight for x in labels)
    return sum(x.weight * x.y for x in labels) / total, total * total / squares


def post_stratified(method: str, strata: Sequence[Stratum], confidence: float = CONFIDENCE) -> Estimate:
    """θ = Σ (N_h / N) ȳ_h over the strata, with a MOVER-Wilson interval.

    A stratum with runs but no label leaves the estimate unknown (nothing in the data speaks for its
    runs). Each stratum's Wilson interval is taken at its effective size and shrunk by
    ``sqrt(1 - n_h / N_h)`` (a stratum labelled in full is known exactly).
    """
    population = sum(s.size for s in strata)
    n = sum(len(s.labels) for s in strata)
    if population <= 0 or any(s.size > 0 and not s.labels for s in strata):
        return Estimate(method, None, None, None, n, population)
    value = 0.0
    below = above = 0.0
    for s in strata:
        if s.size <= 0:
            continue
        share = s.size / population
        mean, size = _weighted(s.labels)
        low, high = wilson_bounds(mean, size, confidence)
        fpc = math.sqrt(max(0.0, 1.0 - len(s.labels) / s.size))
        value += share * mean
        below += (share * fpc * (mean - low)) ** 2
        above += (share * fpc * (high - mean)) ** 2
    return Estimate(
        method, value, max(0.0, value - math.sqrt(below)), min(1.0, value + math.sqrt(above)), n, population
    )


def mean_ci(method: str, labels: Sequence[Labelled], population: int, confidence: float = CONFIDENCE) -> Estimate:
    """The weighted share of the labels with its Wilson interval at the Kish effective size."""
    if not labels:
        return Estimate(method, None, None, None, 0, population)
    mean, size = _weighted(labels)
    low, high = wilson_bounds(mean, size, confidence)
    return Estimate(method, mean, low, high, len(labels), population)


def ppi_mean(
    labels: Sequence[Labelled],
    unlabelled_n: float,
    unlabelled_sum: float,
    unlabelled_sumsq: float,
    *,
    confidence: float = CONFIDENCE,
    lam: float | None = None,
) -> Estimate:
    """The PPI++ estimate of a mean and its normal interval, as ``ppi_py.ppi_mean_ci`` computes it.

    Args:
        labels: the labelled runs (label, prediction, design weight).
        unlabelled_n: runs whose prediction stands for the population (``N``; every run of the window,
            or a sample's effective size: :func:`sampled_predictions`).
        unlabelled_sum: the sum of their predictions.
        unlabelled_sumsq: the sum of their squared predictions (= the sum for 0/1 predictions).
        confidence: the interval's confidence.
        lam: a fixed power-tuning λ (1 = plain PPI, 0 = the labels alone); ``None`` tunes it from the
            data (PPI++: the variance-minimising λ, clipped to [0, 1]).
    """
    n, big_n = len(labels), unlabelled_n
    if n < 2 or big_n < 1:
        return Estimate("ppi", None, None, None, n, round(big_n))
    total_w = sum(x.weight for x in labels)
    w = [x.weight / total_w * n for x in labels]  # ppi-python's construct_weight_vector
    mean_u = unlabelled_sum / big_n
    var_u = max(0.0, unlabelled_sumsq / big_n - mean_u**2)  # ddof 0, as numpy's std
    if lam is None and n >= WEIGHTED_LAMBDA_LABELS and max(w) - min(w) > 1e-9:
        lam = _weighted_lambda(labels, w, var_u, big_n)
    if lam is None:
        theta = mean_u + sum(wi * (x.y - x.prediction) for wi, x in zip(w, labels, strict=True)) / n
        grads = [wi * (x.y - theta) for wi, x in zip(w, labels, strict=True)]
        hats = [wi * (x.prediction - theta) for wi, x in zip(w, labels, strict=True)]
        g_mean, h_mean = sum(grads) / n, sum(hats) / n
        cov = sum((g - g_mean) * (h - h_mean) for g, h in zip(grads, hats, strict=True)) / n
        # variance (ddof 1) of the labelled and unlabelled prediction gradients pooled together
        sum_u = unlabelled_sum - big_n * theta
        sumsq_u = unlabelled_sumsq - 2 * theta * unlabelled_sum + big_n * theta * theta
        pooled = n + big_n
        pooled_mean = (sum(hats) + sum_u) / pooled
        var = (sum(h * h for h in hats) + sumsq_u - pooled * pooled_mean**2) / (pooled - 1)
        lam = 0.0 if var <= 0 else min(1.0, max(0.0, cov / ((1 + n / big_n) * var)))
    residuals = [x.y - lam * x.prediction for x in labels]
    r_mean = sum(wi * r for wi, r in zip(w, residuals, strict=True)) / n  # the weights' mean is 1
    value = lam * mean_u + r_mean
    # the linearised variance of the weighted (Hájek) mean of the residuals; with equal weights it is
    # ppi-python's std(w * r)**2 / n exactly, with unequal ones it leaves out the spread of w * mean(r)
    # that ppi-python's form counts as noise (a rate that changed within the window is not noise)
    var_r = sum((wi * (r - r_mean)) ** 2 for wi, r in zip(w, residuals, strict=True)) / n
    se = math.sqrt(lam * lam * var_u / big_n + var_r / n)
    half = _z(confidence) * se
    return Estimate("ppi", value, value - half, value + half, n, round(big_n), se)


def _weighted_lambda(labels: Sequence[Labelled], w: Sequence[float], var_u: float, big_n: float) -> float:
    """The λ in [0, 1] that minimises the variance :func:`ppi_mean` reports, for unequal design weights.

    With ``a = w (y - ȳ)`` and ``b = w (f - f̄)`` (weighted means), that variance is
    ``λ² var_u / N + (mean(a²) - 2 λ mean(a b) + λ² mean(b²)) / n``, least at
    ``λ = mean(a b) / (mean(b²) + n var_u / N)``. With equal weights PPI++'s own λ is used (the
    ``ppi-python`` reference's); with the unequal weights of a sample drawn where the prediction is
    least sure (:mod:`scorers.sampling`), that λ, tuned for equal weights, gives up most of the gain.
    """
    n = len(labels)
    y_bar = sum(wi * x.y for wi, x in zip(w, labels, strict=True)) / n
    f_bar = sum(wi * x.prediction for wi, x in zip(w, labels, strict=True)) / n
    a = [wi * (x.y - y_bar) for wi, x in zip(w, labels, strict=True)]
    b = [wi * (x.prediction - f_bar) for wi, x in zip(w, labels, strict=True)]
    ab = sum(ai * bi for ai, bi in zip(a, b, strict=True)) / n
    bb = sum(bi * bi for bi in b) / n
    denominator = bb + n * var_u / big_n
    return 0.0 if denominator <= 0 else min(1.0, max(0.0, ab / denominator))


@dataclass(frozen=True, slots=True)
class PredictedStratum:
    """A stratum for :func:`stratified_ppi`: its size, its predictions' sums and its labelled members.

    Attributes:
        size: runs in the stratum (``N_h``).
        prediction_sum: the sum of the predictions of all its runs.
        prediction_sumsq: the sum of their squares (= ``prediction_sum`` for 0/1 predictions).
        labels: its labelled members of the random stratum.
    """

    size: int
    prediction_sum: float
    prediction_sumsq: float
    labels: Sequence[Labelled]
    predicted: float | None = None
    """How many runs the prediction sums are over (``None``: all ``size`` of them). A judge that
    judges the random stratum's members only predicts a sample of the stratum: its sums are then
    :func:`sampled_predictions`', at the sample's effective size."""


def sampled_predictions(predictions: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """``(n, sum, sum of squares)`` of predictions made on a weighted sample of a stratum, for
    :class:`PredictedStratum`: the weighted (Hájek) means of the predictions and their squares, scaled
    to the sample's Kish effective size, so :func:`ppi_mean` sees their mean and its sampling variance.

    Args:
        predictions: ``(prediction, weight)`` of each predicted run not labelled (the labelled ones
            are :class:`Labelled`; PPI's two samples must be disjoint, and a random split of a random
            sample gives two independent ones).
    """
    total = sum(w for _, w in predictions)
    if total <= 0:
        return 0.0, 0.0, 0.0
    size = total * total / sum(w * w for _, w in predictions)
    mean = sum(f * w for f, w in predictions) / total
    square = sum(f * f * w for f, w in predictions) / total
    return size, mean * size, square * size


def stratified_ppi(
    strata: Sequence[PredictedStratum],
    *,
    confidence: float = CONFIDENCE,
    lam: float | None = None,
    method: str = "ppi",
) -> Estimate:
    """PPI++ within each stratum (:func:`ppi_mean`), combined with the strata's known shares.

    θ = Σ (N_h / N) θ_h and se² = Σ (N_h / N)² se_h² (the strata's samples are independent). The
    interval combines each stratum's Wilson interval, taken at the effective size its PPI variance
    implies (``θ_h (1 - θ_h) / se_h²``), by MOVER, as :func:`post_stratified` does: the normal interval
    of a share near 1 from a hundred labels covers too little on the side away from 1. With ``lam = 0``
    it is the labels alone, stratum by stratum: the humans-only interval it is compared with. A stratum
    with runs and fewer than two labels leaves the estimate unknown; one whose every predicted run is
    labelled (``predicted`` 0) is estimated from its labels alone. ``method`` names the estimate
    (``ppi``; ``judge:<name>`` for a judge's predictions).
    """
    population = sum(s.size for s in strata)
    n = sum(len(s.labels) for s in strata)
    value = variance = below = above = 0.0
    for s in strata:
        if s.size <= 0:
            continue
        predicted = s.size if s.predicted is None else s.predicted
        if predicted < 1:  # no prediction beyond the labelled runs: the labels alone speak for the stratum
            part = ppi_mean(s.labels, 1, 0.0, 0.0, confidence=confidence, lam=0.0)
        else:
            part = ppi_mean(s.labels, predicted, s.prediction_sum, s.prediction_sumsq, confidence=confidence, lam=lam)
        if part.value is None or part.se is None:
            return Estimate(method, None, None, None, n, population)
        share, mean = s.size / population, min(1.0, max(0.0, part.value))
        # Wilson at the effective size the PPI variance implies (skewed near 0 and 1 as a share is)
        size = mean * (1 - mean) / part.se**2 if part.se > 0 and 0 < mean < 1 else float(len(s.labels))
        low, high = wilson_bounds(mean, size, confidence)
        value += share * mean
        variance += (share * part.se) ** 2
        below += (share * (mean - low)) ** 2
        above += (share * (high - mean)) ** 2
    if population <= 0:
        return Estimate(method, None, None, None, n, population)
    low, high = max(0.0, value - math.sqrt(below)), min(1.0, value + math.sqrt(above))
    return Estimate(method, value, low, high, n, population, math.sqrt(variance))


def narrowest(candidates: Sequence[Estimate]) -> Estimate | None:
    """The known candidate of the smallest standard error (the first of equals); ``None`` if none is known.

    Picks the headline among valid prediction-powered estimates of one figure (Vigil's prediction, a
    judge's): each covers on its own, and the coverage simulation (``tests/scorers/test_quality.py``)
    checks that choosing the narrower one keeps covering.
    """
    known = [e for e in candidates if e.known and e.se is not None]
    return min(known, key=lambda e: e.se or 0.0) if known else None


def corrected(e: Estimate, false_pass: float, false_fail: float) -> Estimate:
    """A pass rate estimated from reviewers with known error rates, corrected (Rogan & Gladen 1978).

    Reviewers who pass a failing run with probability ``false_pass`` and fail a good one with
    ``false_fail`` give labels whose mean is ``φ = θ (1 - false_fail) + (1 - θ) false_pass``; so
    ``θ = (φ - false_pass) / (1 - false_pass - false_fail)``. The map is increasing, so the interval's
    bounds map to the corrected interval's (clipped to [0, 1]); the standard error scales with it.

    Raises:
        ValueError: rates outside [0, 1) or summing to 1 or more (the labels would say nothing).
    """
    scale = 1.0 - false_pass - false_fail
    if not (0.0 <= false_pass < 1.0 and 0.0 <= false_fail < 1.0) or scale <= 0:
        raise ValueError(f"reviewer error rates must be in [0, 1) and sum below 1, got {false_pass}, {false_fail}")
    if e.value is None or e.low is None or e.high is None:
        return e

    def fix(x: float) -> float:
        return min(1.0, max(0.0, (x - false_pass) / scale))

    se = None if e.se is None else e.se / scale
    return Estimate(e.method, fix(e.value), fix(e.low), fix(e.high), e.n, e.population, se)


@dataclass(frozen=True, slots=True)
class Change:
    """The change between two windows' estimates and its two-sided p-value (a z test).

    Attributes:
        delta: later minus earlier.
        p_value: ``None`` when either side has no standard error to test with.
    """

    delta: float
    p_value: float | None


def change(earlier: Estimate, later: Estimate, confidence: float = CONFIDENCE) -> Change | None:
    """``later - earlier`` of two estimates of disjoint windows (independent samples), with its p-value.

    The standard errors come from the estimates (``se``) or, for interval-only estimates, from their
    interval's half-width over z (the windows are disjoint, so the variances add).
    """
    if earlier.value is None or later.value is None:
        return None
    z = _z(confidence)

    def se(e: Estimate) -> float:
        if e.se is not None:
            return e.se
        assert e.low is not None
        assert e.high is not None
        return (e.high - e.low) / (2 * z)

    spread = math.hypot(se(earlier), se(later))
    delta = later.value - earlier.value
    if spread <= 0:
        return Change(delta, None)
    return Change(delta, 2 * (1 - NormalDist().cdf(abs(delta) / spread)))


def cohen_kappa(
    pairs: Sequence[tuple[bool, bool]], confidence: float = CONFIDENCE
) -> tuple[float, float, float] | None:
    """Cohen's κ of two raters over ``pairs`` with its large-sample interval (Fleiss, Cohen & Everitt 1969).

    Returns:
        ``(kappa, low, high)``, or ``None`` with fewer than two pairs or when chance agreement is 1.
    """
    n = len(pairs)
    if n < 2:
        return None
    a = sum(1 for x, y in pairs if x and y) / n
    b = sum(1 for x, y in pairs if x and not y) / n
    c = sum(1 for x, y in pairs if not x and y) / n
    d = 1.0 - a - b - c
    observed = a + d
    row1, col1 = a + b, a + c
    row0, col0 = 1 - row1, 1 - col1
    chance = row1 * col1 + row0 * col0
    if chance >= 1.0:
        return None
    kappa = (observed - chance) / (1 - chance)
    # the standard error under the alternative (Fleiss, Cohen & Everitt 1969), as statsmodels' cohens_kappa
    cells = ((a, row1, col1), (d, row0, col0))
    term1 = sum(p * (1 - (r + c_) * (1 - kappa)) ** 2 for p, r, c_ in cells)
    term2 = (1 - kappa) ** 2 * (b * (col1 + row0) ** 2 + c * (col0 + row1) ** 2)
    term3 = (kappa - chance * (1 - kappa)) ** 2
    se = math.sqrt(max(0.0, term1 + term2 - term3)) / ((1 - chance) * math.sqrt(n))
    half = _z(confidence) * se
    return kappa, kappa - half, kappa + half
