"""Dashboard rows about the runs themselves: throughput, quality, tokens and cost, latency."""

from __future__ import annotations

from panels import DS, ENV, RI, SEL, Chart, Custom, Heatmap, Panel, Row, Stat, quantiles, ratio_band, target


def _outcomes() -> Panel:
    return {
        "type": "piechart",
        "title": "Outcomes (time range)",
        "datasource": DS,
        "targets": [target(f"sum by (outcome) (increase(vigil_runs_total{{{SEL}}}[$__range]))", "{{outcome}}")],
        "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "legend": {"displayMode": "table"}},
    }


RUNS: Row = (
    "Runs",
    [
        Chart(
            "Run rate by agent and outcome",
            [(f"sum by (agent, outcome) (rate(vigil_runs_total{{{SEL}}}[{RI}]))", "{{agent}} {{outcome}}")],
            "ops",
            "Runs scored per second (outcome: ok, error, limit_hit, blocked).",
            w=12,
            stack=True,
        ),
        Custom(_outcomes, w=4),
        Chart(
            "Flag rate by reason",
            [(f"sum by (reason, priority) (rate(vigil_flags_total{{{ENV}}}[{RI}]))", "{{reason}} {{priority}}")],
            "ops",
            "Flag reasons recorded per second; one flagged run may have several reasons.",
        ),
        Chart(
            "Share of runs flagged for review",
            [(f"environment_agent:vigil_flag_ratio:rate5m{{{SEL}}}", "{{agent}}")],
            "percentunit",
            "Random sample (5 % by default) plus every rule-triggered run.",
        ),
        Chart(
            "Error rate",
            [(f"environment_agent:vigil_error_ratio:rate5m{{{SEL}}}", "{{agent}}")],
            "percentunit",
            "Share of runs whose exception reached the caller (alert: VigilErrorRateSpike).",
        ),
        Chart(
            "Tool error rate by tool",
            [
                (
                    f"sum by (tool) (rate(vigil_tool_errors_total{{{SEL}}}[{RI}]))"
                    f" / (sum by (tool) (rate(vigil_tool_calls_total{{{SEL}}}[{RI}])) > 0)",
                    "{{tool}}",
                )
            ],
            "percentunit",
            "Failed tool calls / tool calls.",
        ),
    ],
)

QUALITY: Row = (
    "Quality",
    [
        Chart(
            "Safety-block rate (band 0.05 % - 10 %)",
            [
                (f"environment_agent:vigil_safety_block_ratio:rate5m{{{SEL}}}", "{{agent}} 5m"),
                (f"environment_agent:vigil_safety_block_ratio:rate1h{{{SEL}}}", "{{agent}} 1h"),
            ],
            "percentunit",
            "Too high: the model or its users changed. Too low: guardrails not firing. The red areas are"
            " the alert thresholds (VigilSafetyBlockRateHigh on 1h, VigilSafetyBlockRateLow on 6h).",
            thresholds=ratio_band(0.0005, 0.10),
        ),
        Chart(
            "Max-iteration hit rate",
            [
                (f"environment_agent:vigil_max_iterations_ratio:rate5m{{{SEL}}}", "{{agent}} 5m"),
                (f"environment_agent:vigil_max_iterations_ratio:rate1d{{{SEL}}}", "{{agent}} 1d baseline"),
            ],
            "percentunit",
            "Share of runs that hit an iteration/turn/recursion cap (loops).",
        ),
        Chart(
            "Step efficiency median",
            [
                target(
                    "histogram_quantile(0.5, sum by (agent, le)"
                    f" (rate(vigil_run_step_efficiency_bucket{{{SEL}}}[{RI}])))",
                    "{{agent}}",
                    exemplar=True,
                ),
                (f"environment_agent:vigil_step_efficiency:p50_1d{{{SEL}}}", "{{agent}} 1d"),
            ],
            "percentunit",
            "min(1, optimal / actual steps); 1 = optimal. Exemplar dots are runs (trace id).",
        ),
        Heatmap(
            "Step efficiency distribution",
            f"sum by (le) (rate(vigil_run_step_efficiency_bucket{{{SEL}}}[{RI}]))",
            "percentunit",
            "Runs per efficiency bucket.",
            w=12,
        ),
        Chart(
            "Steps per run",
            [
                (
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
            description="LLM calls per run.",
            w=12,
        ),
    ],
)

COST: Row = (
    "Tokens and estimated cost",
    [
        Chart(
            "Tokens per second",
            [(f"sum by (agent, direction) (rate(vigil_tokens_total{{{SEL}}}[{RI}]))", "{{agent}} {{direction}}")],
            stack=True,
        ),
        Chart(
            "Estimated cost (USD per hour)",
            [(f"sum by (agent) (rate(vigil_estimated_cost_usd_total{{{SEL}}}[{RI}])) * 3600", "{{agent}}")],
            "currencyUSD",
            "From the model price table (model_prices in vigil.yaml over built-in list prices).",
            stack=True,
        ),
        Stat(
            "Estimated cost (time range)",
            f"sum(increase(vigil_estimated_cost_usd_total{{{SEL}}}[$__range]))",
            "currencyUSD",
            decimals=2,
            w=4,
        ),
        Stat(
            "Unpriced token share",
            f"sum(rate(vigil_unpriced_tokens_total{{{SEL}}}[{RI}]))"
            f" / (sum(rate(vigil_tokens_total{{{SEL}}}[{RI}])) > 0)",
            "percentunit",
            "Tokens of models missing from the price table: the cost estimate leaves them out.",
            w=4,
        ),
        Chart(
            "Tokens per run",
            [
                target(
                    f"histogram_quantile({q}, sum by (agent, le) (rate(vigil_run_tokens_bucket{{{SEL}}}[{RI}])))",
                    f"{{{{agent}}}} p{int(q * 100)}",
                    exemplar=True,
                )
                for q in (0.5, 0.95)
            ],
            w=24,
            h=7,
        ),
    ],
)

LATENCY: Row = (
    "Latency",
    [
        Chart(
            "Run duration p50 / p95 / p99",
            quantiles("vigil_run_duration_seconds", "", SEL),
            "s",
            "Root span duration of the selected agents. Exemplar dots are runs: click for the trace id.",
            w=12,
        ),
        Chart(
            "Flag latency p50 / p95 / p99",
            quantiles("vigil_flag_latency_seconds", "", ENV),
            "s",
            "Root span end to review item committed (includes the quiet period).",
            w=12,
        ),
    ],
)
