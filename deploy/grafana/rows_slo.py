"""Dashboard rows of the quality targets (SLOs): one row per default target, then week over week.

The series come from ``deploy/prometheus/slo_rules.yml`` (``vigil slo generate``): the SLI over
1h and the budget window, the objective (and floor), the error budget remaining and the 1h/6h
burn rates, per agent and ``slo`` label. Targets are read from :data:`scorers.slo.DEFAULT_TARGETS`.
"""

from __future__ import annotations

from panels import SEL, Layout, Panel, stat, target, timeseries

from review_queue.targets import bound_text
from scorers.slo import DEFAULT_TARGETS, Direction, Target
from vigil.slo import FAST, SLOW, thresholds

R = "environment_agent:vigil_slo"
TITLES = {
    "task_completion": "Task completion",
    "step_efficiency": "Step efficiency (mean)",
    "review_pass_rate": "Human review pass rate",
    "safety_block_rate": "Safety-block rate",
    "steps_per_task": "Steps per task (mean)",
    "session_completion": "Session completion",
}


def _sel(name: str) -> str:
    return f'{{slo="{name}", {SEL}}}'


def _unit(t: Target) -> str:
    return "percentunit" if t.sli.unit == "ratio" else "short"


def slo_rows(g: Layout) -> None:
    for name, t in DEFAULT_TARGETS.items():
        _target_row(g, name, t)
    _week_over_week(g)


def _target_row(g: Layout, name: str, t: Target) -> None:
    title = TITLES.get(name, name)
    s = _sel(name)
    g.row(f"SLO: {title} ({bound_text(t)})")
    if t.direction is Direction.TREND:
        g.add(
            timeseries(
                f"{title}: this week vs last week",
                [
                    target(f"{R}_sli:ratio_rate1d{s}", "{{agent}} last 24h"),
                    target(f"{R}_sli:ratio_rate1d{s} offset 7d", "{{agent}} same day last week"),
                    target(f"(1 + {t.objective:g}) * ({R}_sli:ratio_rate1d{s} offset 7d)", "{{agent}} alert line"),
                ],
                _unit(t),
                f"{t.sli.description}. VigilSLOTrendRising fires when the last day and the last 6h are more than"
                f" {t.objective * 100:g} % above the same day a week earlier.",
            ),
            24,
        )
        return
    targets = [
        target(f"{R}_sli:ratio_rate1h{s}", "{{agent}} 1h"),
        target(f"{R}_sli:ratio_rate28d{s}", "{{agent}} 28d"),
        target(f"{R}_objective:value{s}", "{{agent}} target"),
    ]
    if t.direction is Direction.BAND:
        targets.append(target(f"{R}_floor:value{s}", "{{agent}} floor"))
    g.add(
        timeseries(
            f"{title} vs target",
            targets,
            _unit(t),
            f"{t.sli.description}: over the last hour and the budget window, against the target"
            f" ({bound_text(t)}; per agent from vigil.yaml `slo:`).",
        ),
        10,
    )
    budget = stat(
        f"{title}: error budget remaining (28d)",
        f"{R}_error_budget_remaining:ratio{s}",
        "percentunit",
        "Share of the window's error budget not yet spent (negative: the target was missed; VigilSLOBudgetExhausted).",
        decimals=1,
    )
    budget["targets"][0]["legendFormat"] = "{{agent}}"
    budget["fieldConfig"]["defaults"]["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": "red", "value": None}, {"color": "orange", "value": 0}, {"color": "green", "value": 0.25}],
    }
    budget["options"]["colorMode"] = "background"
    g.add(budget, 6)
    fast, slow = thresholds(t)
    assert t.budget is not None
    g.add(
        timeseries(
            f"{title}: burn rate",
            [
                target(f"{R}_burn_rate:rate1h{s}", "{{agent}} 1h"),
                target(f"{R}_burn_rate:rate6h{s}", "{{agent}} 6h"),
            ],
            "short",
            f"Error ratio / budget: 1 spends the budget exactly over the window. Alerts: VigilSLOFastBurn at"
            f" {fast / t.budget:.3g}x over {FAST[1]} and {FAST[2]}, VigilSLOSlowBurn at {slow / t.budget:.3g}x over"
            f" {SLOW[1]} and {SLOW[2]}.",
            thresholds=[
                {"color": "transparent", "value": None},
                {"color": "orange", "value": round(slow / t.budget, 3)},
                {"color": "red", "value": round(fast / t.budget, 3)},
            ],
        ),
        8,
    )


def _week_over_week(g: Layout) -> None:
    g.row("Week over week (7 days vs the 7 days before)")
    width = 24 // len(DEFAULT_TARGETS)
    for i, (name, t) in enumerate(DEFAULT_TARGETS.items()):
        s = _sel(name)
        panel: Panel = timeseries(
            TITLES.get(name, name),
            [
                target(f"{R}_sli:ratio_rate7d{s}", "{{agent}} this week"),
                target(f"{R}_sli:ratio_rate7d{s} offset 7d", "{{agent}} last week"),
            ],
            _unit(t),
            f"{t.sli.description}, over the last 7 days and the 7 days before (target {bound_text(t)}).",
        )
        g.add(panel, width if i < len(DEFAULT_TARGETS) - 1 else 24 - width * (len(DEFAULT_TARGETS) - 1))
