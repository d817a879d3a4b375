"""Generate ``dashboards/vigil.json``, the Grafana dashboard of a Vigil deployment.

Run ``python deploy/grafana/generate.py`` after editing; ``tests/deploy/test_grafana.py`` fails
when the committed JSON differs from this script's output, and ``tests/deploy/test_scrape.py``
evaluates every query (rows_runs.py, rows_sessions.py, rows_slo.py, rows_ops.py) against a real
Prometheus scraping a real Vigil.

Variables: ``environment`` (the Prometheus target label set in ``deploy/prometheus/prometheus.yml``
or by the ServiceMonitor) and ``agent`` (the ``agent`` label of run metrics). Metrics without an
``agent`` label (pipeline, review queue, flag reasons) are filtered by environment only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from panels import DS, ENV, Layout, Panel, build_rows
from rows_ops import JUDGE, PIPELINE, REVIEW
from rows_runs import COST, LATENCY, QUALITY, RUNS
from rows_sessions import SESSIONS
from rows_slo import slo_rows

OUT = Path(__file__).parent / "dashboards" / "vigil.json"


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
    build_rows(g, [RUNS, QUALITY, SESSIONS])
    slo_rows(g)  # one row per default quality target: built from scorers.slo.DEFAULT_TARGETS
    build_rows(g, [COST, LATENCY, REVIEW, JUDGE, PIPELINE])
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
