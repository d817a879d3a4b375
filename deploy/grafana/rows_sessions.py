"""Dashboard row about sessions (conversations): closed per second, turns, and the session signal rates."""

from __future__ import annotations

from panels import RI, SEL, Layout, heatmap, target, timeseries


def sessions_row(g: Layout) -> None:
    g.row("Sessions")
    g.add(
        timeseries(
            "Sessions closed by agent",
            [target(f"sum by (agent) (rate(vigil_sessions_closed_total{{{SEL}}}[{RI}]))", "{{agent}}")],
            "ops",
            "Conversations closed after their idle time (session_idle_s, 30 minutes by default).",
        ),
        8,
    )
    rates = [
        ("completed", "vigil_sessions_completed_total"),
        ("re-asked", "vigil_sessions_reasked_total"),
        ("abandoned", "vigil_sessions_abandoned_total"),
        ("asked for a human", "vigil_sessions_escalated_total"),
    ]
    g.add(
        timeseries(
            "Session signal rates",
            [
                target(
                    f"sum(rate({metric}{{{SEL}}}[{RI}])) / (sum(rate(vigil_sessions_closed_total{{{SEL}}}[{RI}])) > 0)",
                    label,
                )
                for label, metric in rates
            ],
            "percentunit",
            "Share of closed sessions completed (not abandoned), with a re-ask, abandoned right after a failed, "
            "blocked or cut-off turn, and with a request for a human.",
        ),
        8,
    )
    g.add(
        heatmap(
            "Turns per session",
            f"sum by (le) (increase(vigil_session_turns_bucket{{{SEL}}}[{RI}]))",
            "short",
            "Turns of each closed session.",
        ),
        8,
    )
