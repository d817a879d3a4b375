"""The review services one API/UI process uses, built once from the store and the settings."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from review_queue.access import Access, random_secret
from review_queue.auth import Authenticator, SessionSigner, TokenStore
from review_queue.details_status import DetailsPolicy
from review_queue.feedback import DEFAULT_PENDING_MAX, DEFAULT_PENDING_S, FeedbackStore
from review_queue.metrics import ReviewMetrics
from review_queue.model import DEFAULT_CATEGORIES
from review_queue.store import SqlStore
from review_queue.workbench import DEFAULT_LEASE_S, ReviewObserver, Workbench
from scorers.rules import DEFAULT_SAMPLE_RATE, Rule, compile_rules, score_thresholds
from scorers.slo import SloConfig, parse_slo

__all__ = ["DEFAULT_SAMPLE_RATE", "ReviewServices", "build_services"]


@dataclass(frozen=True)
class ReviewServices:
    """Everything the API and the UI call.

    Attributes:
        store: the run index and queue (reads).
        workbench: queue operations and verdicts.
        feedback: user feedback and its join to runs.
        tokens: the token table.
        access: authentication, sessions and role checks.
        metrics: review metrics, when registered.
        clock: Unix epoch seconds (the stats page's "now").
        slo: the quality targets shown on the stats page.
        details: which run details are kept (the run pages say why a run has none).
        reviewer_error: the reviewers' known ``(false_pass, false_fail)`` rates the quality estimates
            correct for (``review_error_rates``), ``None``: taken as right.
        thresholds: ``score -> [(rule, comparison, threshold)]`` of the flag rules that test one score
            (:func:`scorers.rules.score_thresholds`): the run pages show each score against them.
    """

    store: SqlStore
    workbench: Workbench
    feedback: FeedbackStore
    tokens: TokenStore
    access: Access
    metrics: ReviewMetrics | None = None
    clock: Callable[[], float] = time.time
    slo: SloConfig = field(default_factory=lambda: parse_slo(None))
    details: DetailsPolicy = field(default_factory=DetailsPolicy)
    reviewer_error: tuple[float, float] | None = None
    thresholds: Mapping[str, Sequence[tuple[str, str, float]]] = field(default_factory=dict)


def build_services(
    store: SqlStore,
    *,
    admin_token: str | None = None,
    rules: Sequence[Rule] | None = None,
    sample_rate: float = DEFAULT_SAMPLE_RATE,
    lease_s: float = DEFAULT_LEASE_S,
    categories: Sequence[str] = DEFAULT_CATEGORIES,
    session_secret: bytes | None = None,
    secure_cookies: bool = False,
    metrics: ReviewMetrics | None = None,
    redact: Callable[[str], str] | None = None,
    clock: Callable[[], float] = time.time,
    slo: SloConfig | None = None,
    feedback_pending_max: int = DEFAULT_PENDING_MAX,
    feedback_pending_s: float = DEFAULT_PENDING_S,
    details: DetailsPolicy | None = None,
    reviewer_error: tuple[float, float] | None = None,
) -> ReviewServices:
    """Wire the review services over ``store``.

    Args:
        store: the store.
        admin_token: ``VIGIL_ADMIN_TOKEN``.
        rules: the compiled flag rules (default rules when omitted).
        sample_rate: the random sample rate (recorded on feedback-created items).
        lease_s: claim lease.
        categories: failure taxonomy.
        session_secret: cookie signing key (random per process when omitted).
        secure_cookies: mark cookies ``Secure``.
        metrics: review metrics to update.
        redact: applied to feedback comments before they are stored.
        clock: Unix epoch seconds.
        slo: the quality targets (the defaults when omitted).
        feedback_pending_max: feedback rows held for runs not stored yet, at most.
        feedback_pending_s: seconds such feedback waits for its run.
        details: the details sample rate and retention (the defaults when omitted).
        reviewer_error: the reviewers' known error rates (see :class:`ReviewServices`).
    """
    retry = store.retry_after_s
    observer: ReviewObserver = metrics if metrics is not None else ReviewObserver()
    workbench = Workbench(
        store.engine, clock=clock, lease_s=lease_s, categories=categories, observer=observer, retry_after_s=retry
    )
    compiled = tuple(rules) if rules is not None else compile_rules(None)
    feedback = FeedbackStore(
        store.engine,
        compiled,
        sample_rate,
        clock=clock,
        on_received=metrics.feedback_received if metrics is not None else None,
        redact=redact,
        retry_after_s=retry,
        pending_max=feedback_pending_max,
        pending_s=feedback_pending_s,
        on_refused=metrics.feedback_refused_once if metrics is not None else None,
        on_dropped=metrics.feedback_dropped_rows if metrics is not None else None,
        sessions=store,
    )
    tokens = TokenStore(store.engine, clock=clock, retry_after_s=retry, admin_configured=admin_token is not None)
    access = Access(
        Authenticator(tokens, admin_token),
        SessionSigner(session_secret or random_secret(), clock=clock),
        secure_cookies=secure_cookies,
    )
    return ReviewServices(
        store,
        workbench,
        feedback,
        tokens,
        access,
        metrics,
        clock,
        slo or parse_slo(None),
        details or DetailsPolicy(),
        reviewer_error,
        score_thresholds(compiled),
    )
