"""Dashboard rows about the runs themselves: throughput, quality, tokens and cost, latency."""

from __future__ import annotations

from panels import DS, ENV, RI, SEL, Layout, heatmap, quantiles, ratio_band, stat, target, timeseries


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
