"""A real Prometheus scrapes a real ``vigil run --demo``, with the shipped config and rules.

Then every PromQL expression of the Grafana dashboard, the recording rules and the alert rules
is evaluated through Prometheus's HTTP API: all must be valid, every metric they name must be
one Vigil exports (or a recording rule, a Prometheus built-in, or a metric of another role
listed in :data:`OTHER_ROLE_METRICS`), and every expression whose metrics this traffic produces
must return data. Needs the Debian ``prometheus`` package (``scripts/test.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from vigil.process import VigilProcess, free_port, start_vigil

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROM_DIR = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "vigil.json"
RULE_FILES = ("recording_rules.yml", "alert_rules.yml", "slo_rules.yml")

OTHER_ROLE_METRICS = frozenset(
    {
        # LLM judges: registered only when `judges:` is configured
        "vigil_judge_requests_total",
        "vigil_judge_latency_seconds_bucket",
        "vigil_judge_tokens_total",
        "vigil_judge_cost_usd_total",
        "vigil_judge_score_bucket",
        "vigil_judge_agreement_rate",
        "vigil_judge_cohen_kappa",
        "vigil_judge_dropped_total",
        # Kafka scale-out (issue 3: `vigil collector`, `vigil scorer`)
        "vigil_consumer_lag_records",
        "vigil_consumer_bad_records_total",
        "vigil_consumer_paused",
        "vigil_kafka_buffer_bytes",
        "vigil_kafka_buffer_capacity_bytes",
        "vigil_kafka_delivery_failures_total",
    }
)
"""Metrics of roles or features this ``vigil run --demo`` does not export. Their queries must still
be valid; they are required to return data as soon as Vigil exports samples of them here."""

BUILTIN_METRICS = frozenset({"up"})
"""Series Prometheus itself creates for every target."""

OPTIONAL_BUILTINS = frozenset({"ALERTS", "ALERTS_FOR_STATE"})
"""Series that exist only while an alert is pending or firing."""

GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range": "5m",
    "$__interval": "15s",
    "$environment": ".*",
    "$agent": ".*",
}

DEMO_RATE = "20"
SCRAPE_TIMEOUT_S = 240.0

_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)


def metric_names(expr: str) -> set[str]:
    """The metric (or recording-rule) names a PromQL expression selects.

    Strips string literals, label matchers, range/subquery brackets and grouping clauses, then
    keeps identifiers that are not function calls, keywords or numbers.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"\d[\w.]*|[A-Za-z_:][A-Za-z0-9_:]*", text):  # numbers and durations first
        name = match.group(0)
        after = text[match.end() :].lstrip()
        if name[0].isdigit() or after.startswith("(") or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


class TestMetricNames:
    """The PromQL name extractor the scrape test relies on."""

    def test_extracts_selectors_not_functions_labels_or_keywords(self) -> None:
        """Functions, label names, grouping labels and keywords are not metric names."""
        expr = (
            'sum by (agent) (rate(vigil_runs_total{outcome="error", job=~"a|b"}[5m])) '
            "/ on (agent) group_left (x) (rule:name:rate5m > 0) or vector(0) * up offset 1d"
        )
        assert {"vigil_runs_total", "rule:name:rate5m", "up"} == metric_names(expr)


def dashboard_exprs() -> list[tuple[str, str]]:
    """``(where, expr)`` of every dashboard query, annotation and variable, variables substituted."""
    doc = json.loads(DASHBOARD.read_text())
    found = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in doc["annotations"]["list"]]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["definition"])
            assert inner, f"variable {var['name']}: unexpected query {var['definition']}"
            found.append((f"variable {var['name']!r}", inner.group(1)))
    return [(where, substitute(expr)) for where, expr in found]


def substitute(expr: str) -> str:
    """Replace Grafana's variables the way Grafana would with "All" selected."""
    for var, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted Grafana variable in {expr}"
    return expr


def rule_exprs() -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Recording rules (name -> expressions) and ``(where, expr)`` of every rule."""
    records: dict[str, list[str]] = {}
    found = []
    for file in RULE_FILES:
        for group in yaml.safe_load((PROM_DIR / file).read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("record") or rule["alert"]
                found.append((f"{file} {name}", rule["expr"]))
                if "record" in rule:
                    records.setdefault(rule["record"], []).append(rule["expr"])
    return records, found


@dataclass
class Prometheus:
    """A running Prometheus server."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> dict[str, Any]:
        """Evaluate an instant query; returns the API's JSON (status, data or error)."""
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        if resp.status_code == 503:  # still starting (TSDB replay, rule manager)
            return {"status": "unavailable", "error": resp.text}
        body: dict[str, Any] = resp.json()
        return body

    def values(self, expr: str) -> list[dict[str, Any]]:
        """The result vector of a valid query."""
        body = self.query(expr)
        assert "success" == body["status"], f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def prometheus_config(vigil: VigilProcess, tmp: Path) -> Path:
    """The shipped prometheus.yml with its jobs replaced by one scraping ``vigil``, every 1 s."""
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROM_DIR / f) for f in config["rule_files"]]
    assert sorted(RULE_FILES) == sorted(Path(f).name for f in config["rule_files"])
    config.pop("alerting")  # no Alertmanager here
    shipped = config["scrape_configs"]
    assert all(job["job_name"].startswith("vigil") for job in shipped), "VigilDown watches up{job=~'vigil.*'}"
    config["scrape_configs"] = [
        {
            "job_name": "vigil",
            "static_configs": [{"targets": [f"127.0.0.1:{vigil.metrics_port}"], "labels": {"environment": "test"}}],
        }
    ]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run --demo`` on free ports with a short quiet period, its sessions closed 20 s after their
    last turn (the demo's turns are a few seconds apart; the default minute only makes the wait longer)."""
    workdir = tmp_path_factory.mktemp("vigil")
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_OTLP_GRPC_PORT": "0", "VIGIL_SESSION_IDLE_S": "20"}
    with start_vigil(workdir, env, args=("--demo", "--demo-rate", DEMO_RATE)) as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(vigil: VigilProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus (Debian package) scraping ``vigil`` with the shipped rules."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("LOUD SKIP: the `prometheus` binary is missing; apt-get install prometheus (scripts/test.sh does)")
    tmp = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={prometheus_config(vigil, tmp)}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
            ],
            stdout=out,
            stderr=out,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_for_traffic(prom)
        yield prom
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


READY_QUERIES = (
    'sum(vigil_runs_total{environment="test"}) >= 60',
    "sum(vigil_safety_blocks_total) > 0",
    "sum(vigil_max_iterations_hits_total) > 0",
    "count(count by (agent) (vigil_runs_total)) >= 4",
    "count_over_time(sum(vigil_runs_total)[5m:1s]) >= 5",
    'count(environment_agent:vigil_safety_block_ratio:rate5m{environment="test"}) >= 1',
    "sum(vigil_flag_latency_seconds_count) > 0",
    'count(environment_agent:vigil_slo_error_budget_remaining:ratio{slo="task_completion"}) >= 4',
    # the demo's sessions close a minute after their last turn: the session panels' rates need closes
    # scraped twice within their 1m window (a close scraped once, just before the check, is no rate yet)
    "sum(rate(vigil_sessions_closed_total[1m])) > 0",
)
"""What the traffic must have produced, and Prometheus scraped and evaluated, before checking."""


def _wait_for_traffic(prom: Prometheus) -> None:
    deadline = time.monotonic() + SCRAPE_TIMEOUT_S
    pending = list(READY_QUERIES)
    while pending and time.monotonic() < deadline:
        if prom.process.poll() is not None:
            pytest.fail(f"prometheus exited {prom.process.returncode}:\n{prom.log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            pending = [q for q in pending if not prom.query(q).get("data", {}).get("result")]
        time.sleep(1)
    assert not pending, f"not reached within {SCRAPE_TIMEOUT_S} s: {pending}\n{prom.log.read_text()[-2000:]}"


def exported(vigil: VigilProcess) -> tuple[set[str], set[str]]:
    """Series names Vigil's /metrics declares (by family type), and those with samples now."""
    text = httpx.get(vigil.metrics_url, timeout=10).text
    declared: set[str] = set()
    sampled: set[str] = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for family in text_string_to_metric_families(text):
        declared.update(family.name + s for s in suffixes.get(family.type, ("",)))
        sampled.update(s.name for s in family.samples)
    return declared, sampled


class TestRealScrape:
    """Every expression Vigil ships, evaluated against a real Prometheus scraping real traffic."""

    def test_every_expression_valid_known_and_exercised(self, vigil: VigilProcess, prometheus: Prometheus) -> None:
        """Valid everywhere; names exported; data wherever the traffic produces the metrics."""
        records, rules = rule_exprs()
        declared, sampled = exported(vigil)

        def base_metrics(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
            if name in records and name not in seen:
                return set().union(*(base_metrics(n, seen | {name}) for e in records[name] for n in metric_names(e)))
            return {name}

        problems = []
        with_data = 0
        exprs = dashboard_exprs() + rules
        for where, expr in exprs:
            body = prometheus.query(expr)
            if body["status"] != "success":
                problems.append(f"{where}: invalid: {body.get('error')}\n    {expr}")
                continue
            bases = set().union(*(base_metrics(n) for n in metric_names(expr))) if metric_names(expr) else set()
            unknown = bases - declared - BUILTIN_METRICS - OPTIONAL_BUILTINS - OTHER_ROLE_METRICS
            if unknown:
                problems.append(f"{where}: queries metrics Vigil does not export: {sorted(unknown)}\n    {expr}")
                continue
            exercised = bases <= (sampled | BUILTIN_METRICS)
            # Alerts need not fire here, and a week-old offset has nothing in a fresh Prometheus.
            quiet_ok = where.split()[1].startswith("Vigil") or " offset 7d" in expr
            if not quiet_ok and exercised and not body["data"]["result"]:
                problems.append(f"{where}: no data although its metrics {sorted(bases)} have samples\n    {expr}")
            with_data += bool(body["data"]["result"])
        assert not problems, "\n".join(problems)
        assert len(exprs) > 100  # the dashboard, recording and alert rules were all read
        assert with_data >= 70, f"only {with_data} of {len(exprs)} expressions returned data"

    def test_alert_and_recording_rules_evaluate_without_errors(self, prometheus: Prometheus) -> None:
        """Prometheus reports every shipped rule healthy, and no Vigil-down alert is active."""
        groups = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        _, shipped = rule_exprs()
        assert len(shipped) == len(rules)
        unhealthy = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        assert [] == unhealthy
        active = {a["metric"]["alertname"] for a in prometheus.values("ALERTS")}
        assert not active & {"VigilDown", "VigilAbsent", "VigilSpansDropped", "VigilStoreWritesFailing"}

    def test_slo_rules_record_the_demo_fleet(self, prometheus: Prometheus) -> None:
        """Every generated SLO recording rule of a run-based target has a value for every demo agent."""
        records = {
            (rule["record"], rule["labels"]["slo"])
            for group in yaml.safe_load((PROM_DIR / "slo_rules.yml").read_text())["groups"]
            for rule in group["rules"]
            # review_pass_rate needs human verdicts, session_completion closed sessions (the demo closes
            # them a minute after their last turn, so they may not be there yet)
            if "record" in rule and rule["labels"]["slo"] not in {"review_pass_rate", "session_completion"}
        }
        assert len(records) > 50
        missing = []
        for record, slo in sorted(records):
            agents = {s["metric"]["agent"] for s in prometheus.values(f'{record}{{slo="{slo}"}}')}
            if not {"support", "research", "billing", "triage"} <= agents:
                missing.append(f"{record}{{slo={slo!r}}}: {sorted(agents)}")
        assert [] == missing
        completion = prometheus.values('environment_agent:vigil_slo_sli:ratio_rate28d{slo="task_completion"}')
        assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in completion)
        assert max(float(s["value"][1]) for s in completion) > 0.0

    def test_slo_summary_from_prometheus_and_from_metrics(self, vigil: VigilProcess, prometheus: Prometheus) -> None:
        """`vigil slo summary` reads the same targets from Prometheus and from /metrics; a summary matches itself."""
        from scorers.slo import parse_slo
        from vigil import slo

        config = parse_slo(None)
        from_prom = slo.summary_from_prometheus(config, prometheus.values, prometheus.url, "1h")
        from_metrics = slo.summary_from_metrics(config, httpx.get(vigil.metrics_url, timeout=10).text, "vigil")
        for doc in (from_prom, from_metrics):
            completion = doc["targets"]["task_completion"]
            assert 0.0 < completion["fleet"] <= 1.0
            assert {"support", "research", "billing", "triage"} <= set(completion["agents"])
            assert doc["targets"]["steps_per_task"]["fleet"] >= 1.0
        assert all(f.ok for f in slo.compare(from_metrics, from_metrics))
        # the counts behind the ratios (the raw counters' increase over the window) allow a test
        for doc in (from_prom, from_metrics):
            num, den = doc["targets"]["task_completion"]["counts"]["fleet"]
            assert 0 < num <= den
            assert pytest.approx(doc["targets"]["task_completion"]["fleet"], abs=0.05) == num / den
        assert all(f.test is not None for f in slo.compare(from_prom, from_prom) if f.target == "task_completion")

    def test_environment_and_agent_variables_resolve(self, prometheus: Prometheus) -> None:
        """The dashboard's variables list the target label and the demo fleet's agents."""
        env = prometheus.values('count by (environment) (up{job=~"vigil.*"})')
        assert ["test"] == [s["metric"]["environment"] for s in env]
        agents = {
            s["metric"]["agent"] for s in prometheus.values('count by (agent) (vigil_runs_total{environment=~".*"})')
        }
        assert {"support", "research", "billing", "triage"} <= agents

    def test_run_histograms_carry_trace_id_exemplars(self, prometheus: Prometheus) -> None:
        """Prometheus stored exemplars with 32-hex trace ids on the run duration histogram."""
        now = time.time()
        body = httpx.get(
            f"{prometheus.url}/api/v1/query_exemplars",
            params={"query": "vigil_run_duration_seconds_bucket", "start": now - 600, "end": now},
            timeout=10,
        ).json()
        assert "success" == body["status"], body
        ids = [e["labels"]["trace_id"] for series in body["data"] for e in series["exemplars"]]
        assert ids, "no exemplars stored"
        assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)

    def test_demo_traffic_values_are_plausible(self, prometheus: Prometheus) -> None:
        """The recorded safety-block share lies in (0, 1] and the cost counter grows for priced demo models."""
        ratios = [float(s["value"][1]) for s in prometheus.values("environment_agent:vigil_safety_block_ratio:rate5m")]
        assert all(0.0 <= r <= 1.0 for r in ratios)
        assert max(ratios) > 0.0
        cost = prometheus.values("sum(vigil_estimated_cost_usd_total)")
        assert float(cost[0]["value"][1]) > 0.0
