"""Dashboard row about sessions (conversations): closed per second, turns, and the session signal rates."""

from __future__ import annotations

from panels import RI, SEL, Chart, Heatmap, Row

_RATES = [
    ("completed", "vigil_sessions_completed_total"),
    ("re-asked", "vigil_sessions_reasked_total"),
    ("abandoned", "vigil_sessions_abandoned_total"),
    ("asked for a human", "vigil_sessions_escalated_total"),
]

SESSIONS: Row = (
    "Sessions",
    [
        Chart(
            "Sessions closed by agent",
            [(f"sum by (agent) (rate(vigil_sessions_closed_total{{{SEL}}}[{RI}]))", "{{agent}}")],
            "ops",
            "Conversations closed after their idle time (session_idle_s, 30 minutes by default).",
        ),
        Chart(
            "Session signal rates",
            [
                (
                    f"sum(rate({metric}{{{SEL}}}[{RI}])) / (sum(rate(vigil_sessions_closed_total{{{SEL}}}[{RI}])) > 0)",
                    label,
                )
                for label, metric in _RATES
            ],
            "percentunit",
            "Share of closed sessions completed (not abandoned), with a re-ask, abandoned right after a failed, "
            "blocked or cut-off turn, and with a request for a human.",
        ),
        Heatmap(
            "Turns per session",
            f"sum by (le) (increase(vigil_session_turns_bucket{{{SEL}}}[{RI}]))",
            "short",
            "Turns of each closed session.",
        ),
    ],
)
