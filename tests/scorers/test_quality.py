"""Tests of scorers.quality: the estimators against their reference implementations, and their coverage
over simulated production windows with known truth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from ppi_py import ppi_mean_ci
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.proportion import proportion_confint

from scorers.quality import (
    Estimate,
    Labelled,
    PredictedStratum,
    Stratum,
    change,
    cohen_kappa,
    corrected,
    mean_ci,
    narrowest,
    post_stratified,
    ppi_mean,
    sampled_predictions,
    stratified_ppi,
    wilson_bounds,
)
from scorers.sampling import uncertainty_rates

ALPHA = 0.05


def _ppi_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels, their predictions and the unlabelled predictions of a prediction that catches 80 % of
    failures and marks 5 % of good runs."""
    rng = np.random.default_rng(seed)
    n, big_n = 150 + 20 * seed, 3000
    good = rng.random(n + big_n) < 0.85
    predicted = np.where(good, rng.random(n + big_n) > 0.05, rng.random(n + big_n) >= 0.8).astype(float)
    return good[:n].astype(float), predicted[:n], predicted[n:]


class TestReferences:
    """Each estimator equals its reference implementation on the same labels (to 1e-9)."""

    @pytest.mark.parametrize("seed", range(5))
    def test_ppi_mean_equals_ppi_python(self, seed: int) -> None:
        y, yhat, yhat_u = _ppi_data(seed)
        low, high = ppi_mean_ci(y, yhat, yhat_u, alpha=ALPHA)
        ours = ppi_mean([Labelled(a, b) for a, b in zip(y, yhat, strict=True)], len(yhat_u), yhat_u.sum(), yhat_u.sum())
        assert ours.value is not None
        assert ours.low is not None
        assert ours.high is not None
        assert (float(low[0]), float(high[0])) == pytest.approx((ours.low, ours.high), abs=1e-9)

    @pytest.mark.parametrize("seed", range(3))
    def test_weighted_ppi_has_ppi_pythons_centre_and_the_hajek_variance(self, seed: int) -> None:
        """With unequal design weights, at a given λ: ppi-python's centre; a variance without the spread of
        the weights times the residuals' mean (the Hájek form): narrower where the labels' mean is far from
        0, never more than 1 % wider here."""
        y, yhat, yhat_u = _ppi_data(seed)
        w = np.random.default_rng(seed).choice([20.0, 10.0], len(y))
        labels = [Labelled(a, b, c) for a, b, c in zip(y, yhat, w, strict=True)]
        for lam in (0.0, 0.4, 1.0):
            low, high = ppi_mean_ci(y, yhat, yhat_u, alpha=ALPHA, w=w, lam=lam)
            ours = ppi_mean(labels, len(yhat_u), yhat_u.sum(), yhat_u.sum(), lam=lam)
            assert ours.value is not None
            assert ours.low is not None
            assert ours.high is not None
            assert float((low[0] + high[0]) / 2) == pytest.approx(ours.value, abs=1e-9)
            assert ours.high - ours.low <= 1.01 * float(high[0] - low[0])

    @pytest.mark.parametrize("seed", range(3))
    def test_weighted_ppi_tunes_lambda_to_its_least_variance(self, seed: int) -> None:
        """With unequal weights λ minimises the reported variance: no λ on a fine grid does better."""
        y, yhat, yhat_u = _ppi_data(seed)
        w = np.random.default_rng(seed).choice([20.0, 10.0], len(y))
        labels = [Labelled(a, b, c) for a, b, c in zip(y, yhat, w, strict=True)]
        tuned = ppi_mean(labels, len(yhat_u), yhat_u.sum(), yhat_u.sum())
        assert tuned.se is not None
        for lam in np.linspace(0.0, 1.0, 101):
            fixed = ppi_mean(labels, len(yhat_u), yhat_u.sum(), yhat_u.sum(), lam=float(lam))
            assert fixed.se is not None
            assert tuned.se <= fixed.se + 1e-12, lam

    @pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
    def test_ppi_with_a_fixed_lambda(self, lam: float) -> None:
        rng = np.random.default_rng(11)
        y = (rng.random(200) < 0.7).astype(float)
        yhat = np.where(rng.random(200) < 0.8, y, 1 - y)
        yhat_u = (rng.random(5000) < 0.7).astype(float)
        low, high = ppi_mean_ci(y, yhat, yhat_u, alpha=ALPHA, lam=lam)
        ours = ppi_mean(
            [Labelled(a, b) for a, b in zip(y, yhat, strict=True)], 5000, yhat_u.sum(), yhat_u.sum(), lam=lam
        )
        assert (float(low[0]), float(high[0])) == pytest.approx((ours.low, ours.high), abs=1e-9)

    @pytest.mark.parametrize(("x", "n"), [(0, 10), (3, 10), (10, 10), (187, 200), (1, 1000)])
    def test_wilson_equals_statsmodels(self, x: int, n: int) -> None:
        low, high = proportion_confint(x, n, alpha=ALPHA, method="wilson")
        assert (low, high) == pytest.approx(wilson_bounds(x / n, n), abs=1e-9)
        labels = [Labelled(1.0)] * x + [Labelled(0.0)] * (n - x)
        assert (low, high) == pytest.approx(
            (mean_ci("sample", labels, 10 * n).low, mean_ci("sample", labels, 10 * n).high), abs=1e-9
        )

    def test_kappa_equals_statsmodels(self) -> None:
        rng = np.random.default_rng(3)
        pairs = [(bool(a), bool(a) if rng.random() < 0.8 else not a) for a in rng.random(300) < 0.7]
        table = np.zeros((2, 2))
        for a, b in pairs:
            table[0 if a else 1, 0 if b else 1] += 1
        ref = cohens_kappa(table)
        ours = cohen_kappa(pairs)
        assert ours is not None
        assert (ref.kappa, ref.kappa_low, ref.kappa_upp) == pytest.approx(ours, abs=1e-9)

    def test_one_stratum_is_wilson(self) -> None:
        """A single stratum labelled in a small part: the share and Wilson's interval (fpc ~ 1)."""
        labels = [Labelled(1.0)] * 90 + [Labelled(0.0)] * 10
        est = post_stratified("sample", [Stratum(10**9, labels)])
        low, high = proportion_confint(90, 100, alpha=ALPHA, method="wilson")
        assert (0.9, low, high) == pytest.approx((est.value, est.low, est.high), abs=1e-6)

    def test_a_stratum_labelled_in_full_is_exact(self) -> None:
        est = post_stratified("stratified", [Stratum(4, [Labelled(1.0), Labelled(0.0), Labelled(0.0), Labelled(0.0)])])
        assert (0.25, 0.25, 0.25) == (est.value, est.low, est.high)

    def test_a_stratum_without_labels_gives_no_estimate(self) -> None:
        est = post_stratified("sample", [Stratum(100, [Labelled(1.0)]), Stratum(5, [])])
        assert not est.known
        assert (2, 105) == (est.n + 1, est.population)


class TestChange:
    def test_a_real_drop_is_significant_and_no_change_is_not(self) -> None:
        before = Estimate("ppi", 0.91, 0.89, 0.93, 500, 10_000, se=0.0102)
        after = Estimate("ppi", 0.85, 0.83, 0.87, 500, 10_000, se=0.0102)
        moved = change(before, after)
        assert moved is not None
        assert moved.p_value is not None
        assert -0.06 == pytest.approx(moved.delta)
        assert moved.p_value < 0.001
        same = change(before, before)
        assert same is not None
        assert same.p_value == pytest.approx(1.0)

    def test_unknown_side_gives_none(self) -> None:
        assert change(Estimate("sample", None, None, None, 0, 10), Estimate("sample", 0.5, 0.4, 0.6, 10, 10)) is None


# --- coverage over simulated windows ---------------------------------------------------------------


@dataclass(frozen=True)
class Population:
    pass_rate: float
    recall: float = 0.6  # share of failures a rule flags
    false_positive: float = 0.02  # share of good runs a rule flags
    caught: float = 0.9  # share of failures the prediction marks
    marked: float = 0.05  # share of good runs the prediction marks
    informative: bool = True
    judge_caught: float = 0.95  # share of failures the LLM judge fails (it judges every sample member)
    judge_marked: float = 0.04  # share of good runs it fails
    false_pass: float = 0.0  # share of failing runs a reviewer passes (a known error rate)
    false_fail: float = 0.0  # share of good runs a reviewer fails


@dataclass(frozen=True)
class Window:
    """One simulated window of one agent: each run's truth, design and verdict (numpy arrays)."""

    fails: np.ndarray
    category_a: np.ndarray
    rule: np.ndarray
    predicted_pass: np.ndarray
    rate: np.ndarray
    drawn: np.ndarray
    reviewed: np.ndarray
    said_pass: np.ndarray
    judged_pass: np.ndarray


def simulate(
    rng: np.random.Generator,
    pop: Population,
    runs: int,
    rates: tuple[float, ...] = (0.05,),
    by_prediction: tuple[float, float] | None = None,
) -> Window:
    """A window of ``runs`` runs; reviewers clear 90 % of rule-flagged items and 60 % of the rest of the
    sample (rule-flagged items first: the labelled part of the sample is not a random part of it).
    ``by_prediction``: the sample's rates for runs predicted to pass and the others instead of ``rates``."""
    fails = rng.random(runs) >= pop.pass_rate
    rule = rng.random(runs) < np.where(fails, pop.recall, pop.false_positive)
    if pop.informative:
        predicted_pass = ~(rng.random(runs) < np.where(fails, pop.caught, pop.marked))
    else:
        predicted_pass = rng.random(runs) < pop.pass_rate
    rate = np.asarray(rates)[np.arange(runs) * len(rates) // runs]
    if by_prediction is not None:
        rate = np.where(predicted_pass, *by_prediction)
    drawn = rng.random(runs) < rate
    u = rng.random(runs)
    reviewed = (rule & (u < 0.9)) | (drawn & ~rule & (u < 0.6))
    category_a = fails & (rng.random(runs) < 0.6)
    said_pass = np.where(fails, rng.random(runs) < pop.false_pass, rng.random(runs) >= pop.false_fail)
    judged_pass = ~(rng.random(runs) < np.where(fails, pop.judge_caught, pop.judge_marked))
    return Window(fails, category_a, rule, predicted_pass, rate, drawn, reviewed, said_pass, judged_pass)


def estimates(w: Window, target: str, pop: Population) -> dict[str, Estimate]:
    """The estimators as review_queue.quality feeds them: ``pass`` (pass rate) or ``category_a`` (its share).

    The reviewer's verdict passes a good run and fails a bad one, naming category A or not — but for the
    population's known error rates, which the pass-rate estimates are then corrected for (the plain
    sample's uncorrected estimate is kept as ``uncorrected``)."""
    y = w.said_pass.astype(float) if target == "pass" else w.category_a.astype(float)
    pred = w.predicted_pass.astype(float) if target == "pass" else (~w.predicted_pass) * 0.6
    said = w.judged_pass.astype(float) if target == "pass" else (~w.judged_pass) * 0.6
    sample, ppi, judge = [], [], []
    for flagged in (True, False):
        member = w.rule == flagged
        done = np.flatnonzero(member & w.drawn & w.reviewed)
        labels = [Labelled(float(y[i]), float(pred[i]), 1 / float(w.rate[i])) for i in done]
        size = int(member.sum())
        sample.append(Stratum(size, labels))
        ppi.append(PredictedStratum(size, float(pred[member].sum()), float((pred[member] ** 2).sum()), labels))
        # the judge judges every sample member; the ones nobody reviewed stand for the stratum
        rest = np.flatnonzero(member & w.drawn & ~w.reviewed)
        n_eff, total, squares = sampled_predictions([(float(said[i]), 1 / float(w.rate[i])) for i in rest])
        judged = [Labelled(float(y[i]), float(said[i]), 1 / float(w.rate[i])) for i in done]
        judge.append(PredictedStratum(size, total, squares, judged, predicted=n_eff))
    flagged_all = [Labelled(float(y[i])) for i in np.flatnonzero(w.rule & w.reviewed)]
    verdicts = [Labelled(float(y[i])) for i in np.flatnonzero(w.reviewed)]
    n = len(y)
    found = {
        "sample": post_stratified("sample", sample),
        "stratified": post_stratified("stratified", [Stratum(sample[0].size, flagged_all), sample[1]]),
        "ppi": stratified_ppi(ppi),
        "humans": stratified_ppi(ppi, lam=0.0),
        "judge": stratified_ppi(judge, method="judge"),
    }
    found["headline"] = headline(found)
    if pop.false_pass or pop.false_fail:
        fixed = {name: corrected(e, pop.false_pass, pop.false_fail) for name, e in found.items()}
        found = {**fixed, "uncorrected": found["sample"]}
    return {**found, "naive": mean_ci("naive", verdicts, n)}


def headline(found: dict[str, Estimate]) -> Estimate:
    """The report's headline: the narrower of the prediction-powered estimates, else the sample's."""
    return narrowest([found["ppi"], found["judge"]]) or found["sample"]


def truth(w: Window, target: str) -> float:
    return float((~w.fails).mean() if target == "pass" else w.category_a.mean())


def coverage(
    pop: Population,
    target: str,
    *,
    windows: int,
    runs: int,
    seed: int,
    rates: tuple[float, ...] = (0.05,),
    by_prediction: tuple[float, float] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Each estimator's share of windows whose interval covers the truth, and its mean width."""
    rng = np.random.default_rng(seed)
    hits: dict[str, int] = {}
    widths: dict[str, float] = {}
    for _ in range(windows):
        w = simulate(rng, pop, runs, rates, by_prediction)
        true = truth(w, target)
        for name, est in estimates(w, target, pop).items():
            assert est.low is not None, name
            assert est.high is not None, name
            hits[name] = hits.get(name, 0) + (est.low <= true <= est.high)
            widths[name] = widths.get(name, 0.0) + (est.high - est.low) / windows
    return {name: h / windows for name, h in hits.items()}, widths


WINDOWS = 1000
RUNS = 8000


@pytest.mark.parametrize(
    ("pop", "target", "rates"),
    [
        (Population(0.92), "pass", (0.05,)),
        (Population(0.80), "pass", (0.05, 0.10)),
        (Population(0.92, informative=False), "pass", (0.05,)),
        (Population(0.85), "category_a", (0.05,)),
        (Population(0.90, false_pass=0.10, false_fail=0.03), "pass", (0.05,)),
    ],
    ids=["92-pass", "80-pass-two-rates", "uninformative", "category-share", "reviewers-who-err"],
)
def test_every_interval_covers_the_truth_and_the_naive_share_does_not(
    pop: Population, target: str, rates: tuple[float, ...]
) -> None:
    """Over 1,000 simulated windows (8,000 runs each, fixed seed) every estimator's 95 % interval
    covers the window's true value 93.5-96.5 % of the time; the plain share of verdicts almost never. With
    reviewers of known error rates (10 % of failures passed, 3 % of good runs failed), the corrected
    intervals cover and the uncorrected one does not."""
    covered, _ = coverage(pop, target, windows=WINDOWS, runs=RUNS, seed=41, rates=rates)
    for name in ("sample", "stratified", "ppi", "humans", "judge", "headline"):
        assert 0.935 <= covered[name] <= 0.965, (name, covered)
    assert covered["naive"] < 0.05, covered
    if "uncorrected" in covered:  # reviewers who err, not corrected for it: the interval misses
        assert covered["uncorrected"] < 0.85, covered


def test_a_good_prediction_narrows_the_interval_and_a_useless_one_costs_nothing() -> None:
    """A prediction catching 90 % of failures and marking 5 % of good runs, at 20 % failures: the PPI++
    interval is at least 20 % narrower than the humans-only one (the same estimator with λ = 0: the
    labels alone); an uninformative prediction makes it at most 2 % wider."""
    _, good = coverage(Population(0.80), "pass", windows=400, runs=RUNS, seed=5)
    assert good["ppi"] <= 0.8 * good["humans"], good
    _, useless = coverage(Population(0.80, informative=False), "pass", windows=400, runs=RUNS, seed=5)
    assert useless["ppi"] <= 1.02 * useless["humans"], useless


def test_a_judge_on_the_sample_narrows_the_interval_where_reviewers_cover_part_of_it() -> None:
    """An LLM judge that judges every sample member (catching 95 % of failures, failing 4 % of good runs)
    while reviewers clear 60 % of the unflagged sample: its unreviewed members' predictions narrow the
    interval by at least 8 % against the labels alone; the headline is never wider than either."""
    _, widths = coverage(Population(0.80, informative=False), "pass", windows=400, runs=RUNS, seed=5)
    assert widths["judge"] <= 0.92 * widths["humans"], widths
    assert widths["headline"] <= min(widths["judge"], widths["ppi"]) + 1e-12, widths


def test_a_stratum_whose_predicted_runs_are_all_labelled_is_its_labels() -> None:
    labels = [Labelled(1.0, 0.0, 20.0), Labelled(0.0, 1.0, 20.0), Labelled(1.0, 1.0, 20.0)]
    alone = stratified_ppi([PredictedStratum(60, 0.0, 0.0, labels)], lam=0.0)
    judged = stratified_ppi([PredictedStratum(60, 0.0, 0.0, labels, predicted=0.0)], method="judge:j")
    assert judged.method == "judge:j"
    assert (judged.value, judged.low, judged.high) == (alone.value, alone.low, alone.high)


def test_sampled_predictions_are_the_weighted_means_at_the_effective_size() -> None:
    size, total, squares = sampled_predictions([(1.0, 20.0), (0.0, 20.0), (1.0, 10.0)])
    assert size == pytest.approx(50.0**2 / 900.0)
    assert total / size == pytest.approx(30.0 / 50.0)
    assert squares / size == pytest.approx(30.0 / 50.0)
    assert sampled_predictions([]) == (0.0, 0.0, 0.0)


def test_sampling_where_the_prediction_is_least_sure_narrows_the_interval_for_the_same_budget() -> None:
    """The same 5 % expected sample spread by :func:`scorers.sampling.uncertainty_rates` over the runs
    predicted to pass and the others (their pass rates learnt from a first window's reviewed sample):
    over 1,000 windows the prediction-powered intervals still cover 93.5-96.5 %, the design-based ones at
    least 93.5 % (they do not use the prediction, and the uneven weights make them conservative), and
    the headline interval is at least 5 % narrower than with the even rate."""
    pop = Population(0.80)
    first = simulate(np.random.default_rng(1), pop, RUNS)
    learnt = []
    for predicted in (True, False):  # what allocation_inputs reads: the sample's first verdicts by group
        seen = first.drawn & first.reviewed & (first.predicted_pass == predicted)
        learnt.append((float(first.said_pass[seen].sum()) + 1) / (int(seen.sum()) + 2))
    share = float(first.predicted_pass.mean())
    split = uncertainty_rates(0.05, share, (learnt[0], learnt[1]))
    assert split[1] > 1.5 * split[0]
    covered, active = coverage(pop, "pass", windows=WINDOWS, runs=RUNS, seed=43, by_prediction=split)
    for name in ("ppi", "humans", "judge", "headline"):
        assert 0.935 <= covered[name] <= 0.965, (name, covered)
    for name in ("sample", "stratified"):
        assert covered[name] >= 0.935, (name, covered)
    _, even = coverage(pop, "pass", windows=WINDOWS, runs=RUNS, seed=43)
    assert active["headline"] <= 0.95 * even["headline"], (active, even)
