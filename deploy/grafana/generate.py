"""Generate ``dashboards/vigil.json``, the Grafana dashboard of a Vigil deployment.

Run ``python deploy/grafana/generate.py`` after editing; ``tests/deploy/test_grafana.py`` fails
when the committed JSON differs from this script's output, and ``tests/deploy/test_scrape.py``
evaluates every query below against a real Prometheus scraping a real Vigil.

Variables: ``environment`` (the Prometheus target label set in ``deploy/prometheus/prometheus.yml``
or by the ServiceMonitor) and ``agent`` (the ``agent`` label of run metrics). Metrics without an
``agent`` label (pipeline, review queue, flag reasons) are filtered by environment only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "dashboards" / "vigil.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
ENV = 'environment=~"$environment"'
SEL = f'{ENV}, agent=~"$agent"'
RI = "$__rate_interval"

Panel = dict[str, Any]


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping rows."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[Panel] = []

    def row(self, title: str) -> None:
        self.y += self.row_h
        self.x, self.row_h = 0, 0
        self._add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.y += 1

    def add(self, panel: Panel, w: int = 8, h: int = 8) -> None:
        if self.x + w > 24:
            self.y += self.row_h
            self.x, self.row_h = 0, 0
        self._add(panel, w, h)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _add(self, panel: Panel, w: int, h: int) -> None:
        panel["id"] = self.next_id
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.next_id += 1
        self.panels.append(panel)


def target(expr: str, legend: str = "", ref: str = "A", *, exemplar: bool = False, fmt: str = "") -> Panel:
    t: Panel = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto"}
    if exemplar:
        t["exemplar"] = True
    if fmt:
        t["format"] = fmt
    return t


def timeseries(
    title: str,
    targets: list[Panel],
    unit: str = "short",
    description: str = "",
    *,
    thresholds: list[Panel] | None = None,
    stack: bool = False,
) -> Panel:
    custom: Panel = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    defaults: Panel = {"unit": unit, "custom": custom}
    if thresholds:
        custom["thresholdsStyle"] = {"mode": "line+area"}
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _refs(targets),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }


def stat(title: str, expr: str, unit: str = "short", description: str = "", decimals: int | None = None) -> Panel:
    defaults: Panel = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
    }


def heatmap(title: str, expr: str, unit: str, description: str = "") -> Panel:
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr, "{{le}}", fmt="heatmap")],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "calculate": False,
            "yAxis": {"unit": unit},
            "cellValues": {"unit": "reqps"},
            "color": {"scheme": "Oranges", "mode": "scheme"},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
        },
    }


def _refs(targets: list[Panel]) -> list[Panel]:
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    return targets


def quantiles(metric: str, by: str, sel: str, qs: tuple[float, ...] = (0.5, 0.95, 0.99)) -> list[Panel]:
    grouping = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        target(
            f"histogram_quantile({q}, sum by ({grouping}) (rate({metric}_bucket{{{sel}}}[{RI}])))",
            f"{prefix}p{int(q * 100)}",
            exemplar=True,
        )
        for q in qs
    ]


def ratio_band(floor: float, ceiling: float) -> list[Panel]:
    return [
        {"color": "red", "value": None},
        {"color": "transparent", "value": floor},
        {"color": "red", "value": ceiling},
    ]


def runs_row(g: Layout) -> None:
    g.row("Runs")
    g.add(
        timeseries(
            "Run rate by agent and outcome",
            [target(f"sum by (agent, outcome) (rate(vigil_runs_total{{{SEL}}}[{RI}]))", "{{agent}} {{outcome}}")],
            "ops",
            "Runs scored per second (outcome: ok, error, limit_hit, blocked).",
            stack=True,
        ),
        12,
    )
    g.add(
        {
            "type": "piechart",
            "title": "Outcomes (time range)",
            "datasource": DS,
            "targets": [target(f"sum by (outcome) (increase(vigil_runs_total{{{SEL}}}[$__range]))", "{{outcome}}")],
            "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "legend": {"displayMode": "table"}},
        },
        4,
    )
    g.add(
        timeseries(
            "Flag rate by reason",
            [target(f"sum by (reason, priority) (rate(vigil_flags_total{{{ENV}}}[{RI}]))", "{{reason}} {{priority}}")],
            "ops",
            "Flag reasons recorded per second; one flagged run may have several reasons.",
        ),
        8,
    )
    g.add(
        timeseries(
            "Share of runs flagged for review",
            [target(f"environment_agent:vigil_flag_ratio:rate5m{{{SEL}}}", "{{agent}}")],
            "percentunit",
            "Random sample (5 % by default) plus every rule-triggered run.",
        ),
        8,
    )
    g.add(
        timeseries(
            "Error rate",
            [target(f"environment_agent:vigil_error_ratio:rate5m{{{SEL}}}", "{{agent}}")],
            "percentunit",
            "Share of runs whose exception reached the caller (alert: VigilErrorRateSpike).",
        ),
        8,
    )
    g.add(
        timeseries(
            "Tool error rate by tool",
            [
                target(
                    f"sum by (tool) (rate(vigil_tool_errors_total{{{SEL}}}[{RI}]))"
                    f" / (sum by (tool) (rate(vigil_tool_calls_total{{{SEL}}}[{RI}])) > 0)",
                    "{{tool}}",
                )
            ],
            "percentunit",
            "Failed tool calls / tool calls.",
        ),
        8,
    )


def quality_row(g: Layout) -> None:
    g.row("Quality")
    g.add(
        timeseries(
            "Safety-block rate (band 0.05 % - 10 %)",
            [
                target(f"environment_agent:vigil_safety_block_ratio:rate5m{{{SEL}}}", "{{agent}} 5m"),
                target(f"environment_agent:vigil_safety_block_ratio:rate1h{{{SEL}}}", "{{agent}} 1h"),
            ],
            "percentunit",
            "Too high: the model or its users changed. Too low: guardrails not firing. The red areas are"
            " the alert thresholds (VigilSafetyBlockRateHigh on 1h, VigilSafetyBlockRateLow on 6h).",
            thresholds=ratio_band(0.0005, 0.10),
        ),
    )
    g.add(
        timeseries(
            "Max-iteration hit rate",
            [
                target(f"environment_agent:vigil_max_iterations_ratio:rate5m{{{SEL}}}", "{{agent}} 5m"),
                target(f"environment_agent:vigil_max_iterations_ratio:rate1d{{{SEL}}}", "{{agent}} 1d baseline"),
            ],
            "percentunit",
            "Share of runs that hit an iteration/turn/recursion cap (loops).",
        ),
    )
    g.add(
        timeseries(
            "Step efficiency median",
            [
                target(
                    "histogram_quantile(0.5, sum by (agent, le)"
                    f" (rate(vigil_run_step_efficiency_bucket{{{SEL}}}[{RI}])))",
                    "{{agent}}",
                    exemplar=True,
                ),
                target(f"environment_agent:vigil_step_efficiency:p50_1d{{{SEL}}}", "{{agent}} 1d"),
            ],
            "percentunit",
            "min(1, optimal / actual steps); 1 = optimal. Exemplar dots are runs (trace id).",
        ),
    )
    g.add(
        heatmap(
            "Step efficiency distribution",
            f"sum by (le) (rate(vigil_run_step_efficiency_bucket{{{SEL}}}[{RI}]))",
            "percentunit",
            "Runs per efficiency bucket.",
        ),
        12,
    )
    g.add(
        timeseries(
            "Steps per run",
            [
                target(
                    f"sum by (agent) (rate(vigil_run_steps_sum{{{SEL}}}[{RI}]))"
                    f" / (sum by (agent) (rate(vigil_run_steps_count{{{SEL}}}[{RI}])) > 0)",
                    "{{agent}} mean",
                ),
                target(
                    f"histogram_quantile(0.9, sum by (agent, le) (rate(vigil_run_steps_bucket{{{SEL}}}[{RI}])))",
                    "{{agent}} p90",
                    exemplar=True,
                ),
            ],
            "short",
            "LLM calls per run.",
        ),
        12,
    )


def cost_row(g: Layout) -> None:
    g.row("Tokens and estimated cost")
    g.add(
        timeseries(
            "Tokens per second",
            [target(f"sum by (agent, direction) (rate(vigil_tokens_total{{{SEL}}}[{RI}]))", "{{agent}} {{direction}}")],
            "short",
            stack=True,
        ),
    )
    g.add(
        timeseries(
            "Estimated cost (USD per hour)",
            [target(f"sum by (agent) (rate(vigil_estimated_cost_usd_total{{{SEL}}}[{RI}])) * 3600", "{{agent}}")],
            "currencyUSD",
            "From the model price table (model_prices in vigil.yaml over built-in list prices).",
            stack=True,
        ),
    )
    g.add(
        stat(
            "Estimated cost (time range)",
            f"sum(increase(vigil_estimated_cost_usd_total{{{SEL}}}[$__range]))",
            "currencyUSD",
            decimals=2,
        ),
        4,
    )
    g.add(
        stat(
            "Unpriced token share",
            f"sum(rate(vigil_unpriced_tokens_total{{{SEL}}}[{RI}]))"
            f" / (sum(rate(vigil_tokens_total{{{SEL}}}[{RI}])) > 0)",
            "percentunit",
            "Tokens of models missing from the price table: the cost estimate leaves them out.",
        ),
        4,
    )
    g.add(
        timeseries(
            "Tokens per run",
            [
                target(
                    f"histogram_quantile({q}, sum by (agent, le) (rate(vigil_run_tokens_bucket{{{SEL}}}[{RI}])))",
                    f"{{{{agent}}}} p{int(q * 100)}",
                    exemplar=True,
                )
                for q in (0.5, 0.95)
            ],
            "short",
        ),
        24,
        7,
    )


def latency_row(g: Layout) -> None:
    g.row("Latency")
    g.add(
        timeseries(
            "Run duration p50 / p95 / p99",
            quantiles("vigil_run_duration_seconds", "", SEL),
            "s",
            "Root span duration of the selected agents. Exemplar dots are runs: click for the trace id.",
        ),
        12,
    )
    g.add(
        timeseries(
            "Flag latency p50 / p95 / p99",
            quantiles("vigil_flag_latency_seconds", "", ENV),
            "s",
            "Root span end to review item committed (includes the quiet period).",
        ),
        12,
    )


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
    g.add(
        timeseries(
            "Human review pass rate",
            [target(f"avg by (agent) (vigil_review_pass_rate{{{SEL}}})", "{{agent}}")],
            "percentunit",
            "Share of reviewed runs the reviewers passed.",
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
            "Claims and lease expiries",
            [
                target(f"sum(rate(vigil_review_claims_total{{{ENV}}}[{RI}]))", "claims"),
                target(f"sum(rate(vigil_review_lease_expiries_total{{{ENV}}}[{RI}]))", "lease expiries"),
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
            "Drops",
            [target(f"sum by (stage, reason) (rate(vigil_dropped_total{{{ENV}}}[{RI}]))", "{{stage}} {{reason}}")],
            "ops",
            "Spans refused by a bounded buffer (lost).",
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


def variables() -> list[Panel]:
    def query_var(name: str, label: str, query: str) -> Panel:
        return {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"},
            "definition": query,
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
            "sort": 1,
        }

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Prometheus",
            "query": "prometheus",
            "current": {"text": "Prometheus", "value": "vigil-prometheus"},
        },
        query_var("environment", "Environment", 'label_values(up{job=~"vigil.*"}, environment)'),
        query_var("agent", "Agent", f"label_values(vigil_runs_total{{{ENV}}}, agent)"),
    ]


def dashboard() -> Panel:
    """The dashboard document (Grafana schema 39)."""
    g = Layout()
    for build in (runs_row, quality_row, cost_row, latency_row, review_row, judge_row, pipeline_row):
        build(g)
    return {
        "uid": "vigil-fleet",
        "title": "Vigil - agent fleet",
        "description": "Run quality, review queue, LLM judge and pipeline health of a Vigil deployment.",
        "tags": ["vigil", "llm", "agents"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables()},
        "annotations": {
            "list": [
                {
                    "name": "Vigil alerts",
                    "datasource": DS,
                    "enable": True,
                    "iconColor": "red",
                    "expr": f'ALERTS{{alertname=~"Vigil.*", alertstate="firing", {ENV}}}',
                    "titleFormat": "{{alertname}}",
                    "textFormat": "{{agent}}",
                }
            ]
        },
        "links": [],
        "panels": g.panels,
    }


def render() -> str:
    """The dashboard as the committed JSON text."""
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
