"""Dashboard rows about operating Vigil: human review, LLM judges, pipeline health."""

from __future__ import annotations

from panels import ENV, RI, SEL, Chart, Row, Stat

_QUALITY = 'vigil_quality_estimate{%s, target="review_pass_rate", bound="%s"}'

REVIEW: Row = (
    "Human review",
    [
        Chart(
            "Review queue depth by priority",
            [(f'sum by (priority) (vigil_review_items{{{ENV}, state="pending"}})', "{{priority}}")],
            description="Pending review items.",
            stack=True,
        ),
        Chart(
            "Oldest pending item age by priority",
            [
                (f"max by (priority) (vigil_review_oldest_pending_age_seconds{{{ENV}}})", "{{priority}}"),
                ("vigil:review_sla_seconds", "SLA {{priority}}"),
            ],
            "s",
            "Alert VigilReviewBacklogOverSLA fires when an age crosses its priority's SLA line.",
        ),
        Chart(
            "Human review pass rate (7-day estimate, 95 % interval)",
            [
                (f"avg by (agent) ({_QUALITY % (SEL, 'value')})", "{{agent}}"),
                (f"avg by (agent) ({_QUALITY % (SEL, 'low')})", "{{agent}} low"),
                (f"avg by (agent) ({_QUALITY % (SEL, 'high')})", "{{agent}} high"),
            ],
            "percentunit",
            "Share of production runs a reviewer would pass, estimated from the random review sample's "
            "design (not the share of all verdicts, which counts the rule-flagged runs: mostly failures).",
        ),
        Chart(
            "Verdicts and feedback",
            [
                (f"sum by (verdict) (rate(vigil_review_verdicts_total{{{SEL}}}[{RI}]))", "verdict {{verdict}}"),
                (f"sum by (kind) (rate(vigil_feedback_received_total{{{ENV}}}[{RI}]))", "feedback {{kind}}"),
            ],
            "ops",
            w=12,
        ),
        Chart(
            "Claims, lease expiries, shed flags",
            [
                (f"sum(rate(vigil_review_claims_total{{{ENV}}}[{RI}]))", "claims"),
                (f"sum(rate(vigil_review_lease_expiries_total{{{ENV}}}[{RI}]))", "lease expiries"),
                (f"sum by (reason) (rate(vigil_review_shed_total{{{ENV}}}[{RI}]))", "shed {{reason}}"),
            ],
            "ops",
            w=12,
        ),
    ],
)

JUDGE: Row = (
    "LLM judge (when configured)",
    [
        Chart(
            "Judge score median",
            [
                (
                    f"histogram_quantile(0.5, sum by (judge, le) (rate(vigil_judge_score_bucket{{{ENV}}}[{RI}])))",
                    "{{judge}}",
                )
            ],
            w=6,
        ),
        Chart(
            "Judge requests by outcome, and runs not judged",
            [
                (f"sum by (judge, outcome) (rate(vigil_judge_requests_total{{{ENV}}}[{RI}]))", "{{judge}} {{outcome}}"),
                (
                    f"sum by (judge, reason) (rate(vigil_judge_dropped_total{{{ENV}}}[{RI}]))",
                    "{{judge}} dropped: {{reason}}",
                ),
            ],
            "ops",
            w=6,
        ),
        Chart(
            "Judge agreement with reviewers",
            [
                (f"max by (judge, rubric_version) (vigil_judge_cohen_kappa{{{ENV}}})", "kappa {{judge}}"),
                (f"max by (judge, rubric_version) (vigil_judge_agreement_rate{{{ENV}}})", "agreement {{judge}}"),
            ],
            w=6,
        ),
        Chart(
            "Judge latency p95 and cost",
            [
                (
                    "histogram_quantile(0.95, sum by (judge, le)"
                    f" (rate(vigil_judge_latency_seconds_bucket{{{ENV}}}[{RI}])))",
                    "{{judge}} p95 s",
                ),
                (f"sum by (judge) (rate(vigil_judge_cost_usd_total{{{ENV}}}[{RI}])) * 3600", "{{judge}} USD/h"),
            ],
            w=6,
        ),
    ],
)

PIPELINE: Row = (
    "Pipeline health",
    [
        Chart(
            "Spans in / rejected",
            [
                (f"sum by (encoding) (rate(vigil_spans_received_total{{{ENV}}}[{RI}]))", "in {{encoding}}"),
                (f"sum by (reason) (rate(vigil_spans_rejected_total{{{ENV}}}[{RI}]))", "rejected {{reason}}"),
            ],
            "ops",
        ),
        Chart(
            "OTLP requests by status",
            [
                (f"sum by (code) (rate(vigil_otlp_requests_total{{{ENV}}}[{RI}]))", "{{code}}"),
                (f"sum by (reason) (rate(vigil_otlp_rejected_requests_total{{{ENV}}}[{RI}]))", "refused {{reason}}"),
            ],
            "reqps",
        ),
        Chart(
            "Late spans and assembler events",
            [
                (f"sum by (event) (rate(vigil_assembler_events_total{{{ENV}}}[{RI}]))", "{{event}}"),
                (f"sum(rate(vigil_runs_rescored_total{{{ENV}}}[{RI}]))", "runs re-scored"),
            ],
            "ops",
        ),
        Chart(
            "Runs in flight",
            [(f"sum by (instance) (vigil_runs_in_flight{{{ENV}}})", "{{instance}}")],
            description="Runs being assembled (waiting for their quiet period).",
            w=6,
        ),
        Chart(
            "Late-span cache age",
            [(f"min by (instance) (vigil_late_cache_age_seconds{{{ENV}}})", "{{instance}}")],
            "s",
            "How long ago the scored run the late-span cache forgets next was scored: a span arriving later "
            "than this after its run was scored is dropped (late_evicted). It shrinks as throughput grows.",
            w=6,
        ),
        Chart(
            "Consumer lag (Kafka)",
            [(f"sum by (partition) (vigil_consumer_lag_records{{{ENV}}})", "partition {{partition}}")],
            description="Records the vigil-scorers group is behind the otlp_spans high watermark (vigil scorer only).",
            w=6,
        ),
        Chart(
            "Kafka producer and consumer",
            [
                (
                    f"max by (instance) (vigil_kafka_buffer_bytes{{{ENV}}}"
                    f" / (vigil_kafka_buffer_capacity_bytes{{{ENV}}} > 0))",
                    "collector buffer {{instance}}",
                ),
                (f"sum(rate(vigil_kafka_delivery_failures_total{{{ENV}}}[{RI}]))", "delivery failures/s"),
                (f"sum(rate(vigil_consumer_bad_records_total{{{ENV}}}[{RI}]))", "bad records/s"),
                (f"max by (instance) (vigil_consumer_paused{{{ENV}}})", "paused {{instance}}"),
            ],
            description="vigil collector's unacknowledged bytes (503 when full), failed deliveries, undecodable"
            " records, scorers paused on a store outage.",
            w=6,
        ),
        Chart(
            "Drops and refusals",
            [
                (f"sum by (stage, reason) (rate(vigil_dropped_total{{{ENV}}}[{RI}]))", "lost {{stage}} {{reason}}"),
                (f"sum by (stage, reason) (rate(vigil_refused_total{{{ENV}}}[{RI}]))", "refused {{stage}} {{reason}}"),
            ],
            "ops",
            "Spans lost after they were accepted (dropped), and spans refused with 503 + Retry-After after"
            " decoding (refused: the senders retry them).",
            w=6,
        ),
        Chart(
            "In-process stream fill",
            [
                (
                    f"max by (instance) (vigil_stream_depth_batches{{{ENV}}}"
                    f" / (vigil_stream_capacity_batches{{{ENV}}} > 0))",
                    "{{instance}}",
                )
            ],
            "percentunit",
            "vigil run only; 503 + Retry-After when full.",
            w=6,
        ),
        Chart(
            "Scorer errors and store writes",
            [
                (f"sum by (stage, name) (rate(vigil_scorer_errors_total{{{ENV}}}[{RI}]))", "error {{stage}}/{{name}}"),
                (f"sum(rate(vigil_store_write_errors_total{{{ENV}}}[{RI}]))", "store write errors"),
                (
                    f"histogram_quantile(0.95, sum by (le) (rate(vigil_store_write_seconds_bucket{{{ENV}}}[{RI}])))",
                    "store write p95 (s)",
                ),
            ],
            w=12,
        ),
        Stat(
            "Vigil targets up", f'sum(up{{job=~"vigil.*", {ENV}}})', "short", "Scraped Vigil processes answering.", w=6
        ),
        Stat("Runs scored (time range)", f"sum(increase(vigil_runs_total{{{SEL}}}[$__range]))", decimals=0, w=6),
    ],
)
