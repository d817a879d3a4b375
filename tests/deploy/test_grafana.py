"""The Grafana dashboard and provisioning: generated JSON in sync, well-formed, wired to Prometheus."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from review_queue.api import create_api_app
from review_queue.store import SqlStore, upgrade_database

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "vigil.json"

ISSUE_PANELS = (  # a phrase of a panel title for each panel the issue lists
    "Run rate by agent and outcome",
    "Flag rate by reason",
    "Safety-block rate (band",
    "Max-iteration hit rate",
    "Step efficiency distribution",
    "Step efficiency median",
    "Steps per run",
    "Tokens per second",
    "Estimated cost",
    "Run duration p50 / p95 / p99",
    "Review queue depth by priority",
    "Oldest pending item age by priority",
    "Human review pass rate",
    "Judge score",
    "Spans in / rejected",
    "Late spans",
    "Runs in flight",
    "Consumer lag",
    "Drops",
)


def generator(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(GRAFANA))  # generate.py imports its sibling modules, as when run as a script
    spec = importlib.util.spec_from_file_location("vigil_grafana_generate", GRAFANA / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


class TestDashboard:
    """deploy/grafana/dashboards/vigil.json."""

    def test_committed_json_matches_generator(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The committed JSON is what generate.py writes (run it after editing)."""
        assert generator(monkeypatch).render() == DASHBOARD.read_text()

    def test_issue_panels_present(self) -> None:
        """Every panel the issue lists is on the dashboard."""
        titles = [p["title"] for p in load()["panels"]]
        missing = [t for t in ISSUE_PANELS if not any(t in title for title in titles)]
        assert [] == missing

    def test_grid_ids_and_datasource(self) -> None:
        """Unique ids, panels inside the 24-column grid, every query on the datasource variable."""
        panels = load()["panels"]
        assert len(panels) == len({p["id"] for p in panels})
        for p in panels:
            pos = p["gridPos"]
            assert 0 <= pos["x"], p["title"]
            assert pos["x"] + pos["w"] <= 24, p["title"]
            for t in p.get("targets", []):
                assert {"type": "prometheus", "uid": "${datasource}"} == t["datasource"], p["title"]
                assert t["expr"].strip(), p["title"]
        non_rows = [p for p in panels if p["type"] != "row"]
        assert all(p.get("targets") for p in non_rows)

    def test_agent_and_environment_variables(self) -> None:
        """Both variables exist, allow All (regex .*) and every agent-labelled run query uses them."""
        variables = {v["name"]: v for v in load()["templating"]["list"]}
        for name in ("environment", "agent"):
            assert ".*" == variables[name]["allValue"]
            assert variables[name]["includeAll"]
            assert variables[name]["multi"]
        assert "environment" in variables["environment"]["definition"]
        for p in load()["panels"]:
            for t in p.get("targets", []):
                if "vigil_runs_total" in t["expr"] or "vigil_run_" in t["expr"]:
                    assert 'agent=~"$agent"' in t["expr"], p["title"]
                    assert 'environment=~"$environment"' in t["expr"], p["title"]

    def test_run_histogram_panels_show_exemplars(self) -> None:
        """Latency and step-efficiency quantile queries request exemplars (trace id links)."""
        for p in load()["panels"]:
            if p["title"].startswith(("Run duration", "Step efficiency median")):
                assert any(t.get("exemplar") for t in p["targets"]), p["title"]


class TestProvisioning:
    """Datasource and dashboard provider files Grafana loads at start."""

    def test_datasource_uid_matches_dashboard_default_and_links_trace_ids(self) -> None:
        """The provisioned Prometheus has the uid the dashboard selects and an exemplar link to the run."""
        ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "vigil.yaml").read_text())["datasources"][0]
        var = next(v for v in load()["templating"]["list"] if v["name"] == "datasource")
        assert ds["uid"] == var["current"]["value"]
        assert "prometheus" == ds["type"]
        link = ds["jsonData"]["exemplarTraceIdDestinations"][0]
        assert "trace_id" == link["name"]
        assert link["url"].startswith("${VIGIL_PUBLIC_URL}/")
        assert link["url"].endswith("/$${__value.raw}")  # $$: a literal $ for Grafana

    def test_exemplar_link_is_a_route_of_vigil(self, tmp_path: Path) -> None:
        """The link's path (trace id in place of the Grafana variable) is the UI's run page."""
        ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "vigil.yaml").read_text())["datasources"][0]
        url = ds["jsonData"]["exemplarTraceIdDestinations"][0]["url"]
        path = url.removeprefix("${VIGIL_PUBLIC_URL}").replace("$${__value.raw}", "{trace_id}")
        database = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(database)
        store = SqlStore(database)
        try:
            routes = {getattr(r, "path", None) for r in create_api_app(store, admin_token=None).routes}
        finally:
            store.close()
        assert "/runs/{trace_id}" == path
        assert path in routes

    def test_dashboard_provider_path(self) -> None:
        """The provider reads the folder compose.yaml mounts the dashboards into."""
        provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "vigil.yaml").read_text())["providers"][0]
        assert "file" == provider["type"]
        assert "/var/lib/grafana/dashboards/vigil" == provider["options"]["path"]


class TestSloRows:
    """One row per default quality target and the week-over-week row (deploy/grafana/rows_slo.py)."""

    def test_row_per_target_with_value_budget_and_burn(self) -> None:
        """Budget targets: value vs target, budget remaining, burn rate; the trend: this week vs last."""
        panels = load()["panels"]
        rows = [p["title"] for p in panels if p["type"] == "row" and p["title"].startswith("SLO: ")]
        assert 6 == len(rows)
        titles = [p["title"] for p in panels]
        names = ("Task completion", "Step efficiency (mean)", "Human review pass rate", "Safety-block rate")
        for name in (*names, "Session completion"):
            for suffix in (" vs target", ": error budget remaining (28d)", ": burn rate"):
                assert name + suffix in titles
        assert "Steps per task (mean): this week vs last week" in titles
        exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
        assert any('vigil_slo_floor:value{slo="safety_block_rate"' in e for e in exprs)

    def test_week_over_week_panels(self) -> None:
        """The six numbers over the last 7 days against the 7 days before."""
        panels = load()["panels"]
        start = next(i for i, p in enumerate(panels) if p["title"].startswith("Week over week"))
        week = panels[start + 1 : start + 7]
        assert 6 == len(week)
        assert "Session completion" == week[-1]["title"]
        for p in week:
            assert [" offset 7d" in t["expr"] for t in p["targets"]] == [False, True]
            assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
