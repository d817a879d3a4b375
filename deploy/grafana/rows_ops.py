"""Dashboard rows about operating Vigil: human review, LLM judges, pipeline health."""

from __future__ import annotations

from panels import ENV, RI, SEL, Layout, stat, target, timeseries


def review_row(g: Layout) -> None:
    g.row("Human review")
    g.add(
        timeseries(
            "Review queue depth by priority",
            [target(f'sum by (priority) (vigil_review_items{{{ENV}, state="pending"}})', "{{priority}}")],
            "short",
            "Pending review items.",
            stack=True,
        ),
    )
    g.add(
        timeseries(
            "Oldest pending item age by priority",
            [
                target(f"max by (priority) (vigil_review_oldest_pending_age_seconds{{{ENV}}})", "{{priority}}"),
                target("vigil:review_sla_seconds", "SLA {{priority}}"),
            ],
            "s",
            "Alert VigilReviewBacklogOverSLA fires when an age crosses its priority's SLA line.",
        ),
    )
    quality = 'vigil_quality_estimate{%s, target="review_pass_rate", bound="%s"}'
    g.add(
        timeseries(
            "Human review pass rate (7-day estimate, 95 % interval)",
            [
                target(f"avg by (agent) ({quality % (SEL, 'value')})", "{{agent}}"),
                target(f"avg by (agent) ({quality % (SEL, 'low')})", "{{agent}} low"),
                target(f"avg by (agent) ({quality % (SEL, 'high')})", "{{agent}} high"),
            ],
            "percentunit",
            "Share of production runs a reviewer would pass, estimated from the random review sample's "
            "design (not the share of all verdicts, which counts the rule-flagged runs: mostly failures).",
        ),
    )
    g.add(
        timeseries(
            "Verdicts and feedback",
            [
                target(f"sum by (verdict) (rate(vigil_review_verdicts_total{{{SEL}}}[{RI}]))", "verdict {{verdict}}"),
                target(f"sum by (kind) (rate(vigil_feedback_received_total{{{ENV}}}[{RI}]))", "feedback {{kind}}"),
            ],
            "ops",
        ),
        12,
    )
    g.add(
        timeseries(
            "Claims, lease expiries, shed flags",
            [
                target(f"sum(rate(vigil_review_claims_total{{{ENV}}}[{RI}]))", "claims"),
                target(f"sum(rate(vigil_review_lease_expiries_total{{{ENV}}}[{RI}]))", "lease expiries"),
                target(f"sum by (reason) (rate(vigil_review_shed_total{{{ENV}}}[{RI}]))", "shed {{reason}}"),
            ],
            "ops",
        ),
        12,
    )


def judge_row(g: Layout) -> None:
    g.row("LLM judge (when configured)")
    g.add(
        timeseries(
            "Judge score median",
            [
                target(
                    f"histogram_quantile(0.5, sum by (judge, le) (rate(vigil_judge_score_bucket{{{ENV}}}[{RI}])))",
                    "{{judge}}",
                )
            ],
            "short",
        ),
        6,
    )
    g.add(
        timeseries(
            "Judge requests by outcome, and runs not judged",
            [
                target(
                    f"sum by (judge, outcome) (rate(vigil_judge_requests_total{{{ENV}}}[{RI}]))",
                    "{{judge}} {{outcome}}",
                ),
                target(
                    f"sum by (judge, reason) (rate(vigil_judge_dropped_total{{{ENV}}}[{RI}]))",
                    "{{judge}} dropped: {{reason}}",
                ),
            ],
            "ops",
        ),
        6,
    )
    g.add(
        timeseries(
            "Judge agreement with reviewers",
            [
                target(f"max by (judge, rubric_version) (vigil_judge_cohen_kappa{{{ENV}}})", "kappa {{judge}}"),
                target(f"max by (judge, rubric_version) (vigil_judge_agreement_rate{{{ENV}}})", "agreement {{judge}}"),
            ],
            "short",
        ),
        6,
    )
    g.add(
        timeseries(
            "Judge latency p95 and cost",
            [
                target(
                    "histogram_quantile(0.95, sum by (judge, le)"
                    f" (rate(vigil_judge_latency_seconds_bucket{{{ENV}}}[{RI}])))",
                    "{{judge}} p95 s",
                ),
                target(f"sum by (judge) (rate(vigil_judge_cost_usd_total{{{ENV}}}[{RI}])) * 3600", "{{judge}} USD/h"),
            ],
            "short",
        ),
        6,
    )


def pipeline_row(g: Layout) -> None:
    g.row("Pipeline health")
    g.add(
        timeseries(
            "Spans in / rejected",
            [
                target(f"sum by (encoding) (rate(vigil_spans_received_total{{{ENV}}}[{RI}]))", "in {{encoding}}"),
                target(f"sum by (reason) (rate(vigil_spans_rejected_total{{{ENV}}}[{RI}]))", "rejected {{reason}}"),
            ],
            "ops",
        ),
    )
    g.add(
        timeseries(
            "OTLP requests by status",
            [
                target(f"sum by (code) (rate(vigil_otlp_requests_total{{{ENV}}}[{RI}]))", "{{code}}"),
                target(
                    f"sum by (reason) (rate(vigil_otlp_rejected_requests_total{{{ENV}}}[{RI}]))", "refused {{reason}}"
                ),
            ],
            "reqps",
        ),
    )
    g.add(
        timeseries(
            "Late spans and assembler events",
            [
                target(f"sum by (event) (rate(vigil_assembler_events_total{{{ENV}}}[{RI}]))", "{{event}}"),
                target(f"sum(rate(vigil_runs_rescored_total{{{ENV}}}[{RI}]))", "runs re-scored"),
            ],
            "ops",
        ),
    )
    g.add(
        timeseries(
            "Runs in flight",
            [target(f"sum by (instance) (vigil_runs_in_flight{{{ENV}}})", "{{instance}}")],
            "short",
            "Runs being assembled (waiting for their quiet period).",
        ),
        6,
    )
    g.add(
        timeseries(
            "Late-span cache age",
            [target(f"min by (instance) (vigil_late_cache_age_seconds{{{ENV}}})", "{{instance}}")],
            "s",
            "How long ago the scored run the late-span cache forgets next was scored: a span arriving later "
            "than this after its run was scored is dropped (late_evicted). It shrinks as throughput grows.",
        ),
        6,
    )
    g.add(
        timeseries(
            "Consumer lag (Kafka)",
            [target(f"sum by (partition) (vigil_consumer_lag_records{{{ENV}}})", "partition {{partition}}")],
            "short",
            "Records the vigil-scorers group is behind the otlp_spans high watermark (vigil scorer only).",
        ),
        6,
    )
    g.add(
        timeseries(
            "Kafka producer and consumer",
            [
                target(
                    f"max by (instance) (vigil_kafka_buffer_bytes{{{ENV}}}"
                    f" / (vigil_kafka_buffer_capacity_bytes{{{ENV}}} > 0))",
                    "collector buffer {{instance}}",
                ),
                target(f"sum(rate(vigil_kafka_delivery_failures_total{{{ENV}}}[{RI}]))", "delivery failures/s"),
                target(f"sum(rate(vigil_consumer_bad_records_total{{{ENV}}}[{RI}]))", "bad records/s"),
                target(f"max by (instance) (vigil_consumer_paused{{{ENV}}})", "paused {{instance}}"),
            ],
            "short",
            "vigil collector's unacknowledged bytes (503 when full), failed deliveries, undecodable"
            " records, scorers paused on a store outage.",
        ),
        6,
    )
    g.add(
        timeseries(
            "Drops and refusals",
            [
                target(
                    f"sum by (stage, reason) (rate(vigil_dropped_total{{{ENV}}}[{RI}]))", "lost {{stage}} {{reason}}"
                ),
                target(
                    f"sum by (stage, reason) (rate(vigil_refused_total{{{ENV}}}[{RI}]))", "refused {{stage}} {{reason}}"
                ),
            ],
            "ops",
            "Spans lost after they were accepted (dropped), and spans refused with 503 + Retry-After after"
            " decoding (refused: the senders retry them).",
        ),
        6,
    )
    g.add(
        timeseries(
            "In-process stream fill",
            [
                target(
                    f"max by (instance) (vigil_stream_depth_batches{{{ENV}}}"
                    f" / (vigil_stream_capacity_batches{{{ENV}}} > 0))",
                    "{{instance}}",
                )
            ],
            "percentunit",
            "vigil run only; 503 + Retry-After when full.",
        ),
        6,
    )
    g.add(
        timeseries(
            "Scorer errors and store writes",
            [
                target(
                    f"sum by (stage, name) (rate(vigil_scorer_errors_total{{{ENV}}}[{RI}]))",
                    "error {{stage}}/{{name}}",
                ),
                target(f"sum(rate(vigil_store_write_errors_total{{{ENV}}}[{RI}]))", "store write errors"),
                target(
                    f"histogram_quantile(0.95, sum by (le) (rate(vigil_store_write_seconds_bucket{{{ENV}}}[{RI}])))",
                    "store write p95 (s)",
                ),
            ],
            "short",
        ),
        12,
    )
    g.add(
        stat("Vigil targets up", f'sum(up{{job=~"vigil.*", {ENV}}})', "short", "Scraped Vigil processes answering."),
        6,
    )
    g.add(
        stat("Runs scored (time range)", f"sum(increase(vigil_runs_total{{{SEL}}}[$__range]))", "short", decimals=0),
        6,
    )
