"""deploy/compose.yaml parses and agrees with the code: image, commands, env names, ports, files.

Docker is not available on the CI machine (nor needed): the file is checked statically; the
Prometheus and Grafana material it mounts is exercised by the other tests of this package.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vigil.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
IMAGE = "vigil:0.1.0"
ROLES = {"collector": ("collector",), "scorer": ("scorer",), "review": ("review",), "migrate": ("db", "upgrade")}


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def services() -> dict[str, dict[str, Any]]:
    svc: dict[str, dict[str, Any]] = compose()["services"]
    return svc


def vigil_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if s.get("image") == IMAGE}


def published(service: dict[str, Any]) -> dict[int, int]:
    """Container port -> host port."""
    out = {}
    for mapping in service.get("ports", []):
        host, container = str(mapping).split(":")
        out[int(container)] = int(host)
    return out


class TestSchema:
    """The file validates against the Compose Specification (check-jsonschema's vendored compose-spec)."""

    def test_valid_compose_spec(self, tmp_path: Path) -> None:
        """compose.yaml is valid; a misspelt key in a copy is reported (so the check can fail)."""
        check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
        ok = subprocess.run([*check, str(DEPLOY / "compose.yaml")], capture_output=True, text=True, check=False)
        assert 0 == ok.returncode, ok.stdout + ok.stderr
        broken = compose()
        broken["services"]["scorer"]["deploy"] = {"replica": 2}
        bad_file = tmp_path / "compose.yaml"
        bad_file.write_text(yaml.safe_dump(broken))
        bad = subprocess.run([*check, str(bad_file)], capture_output=True, text=True, check=False)
        assert 0 != bad.returncode
        assert "replica" in bad.stdout + bad.stderr


class TestServices:
    """The stack the issue lists, built from one image."""

    def test_stack_members(self) -> None:
        """Kafka, the three roles (two scorers), PostgreSQL, Prometheus, Alertmanager, Grafana, otelcol profile."""
        svc = services()
        assert {"kafka", "postgres", "prometheus", "alertmanager", "grafana", "otelcol"} <= set(svc)
        assert ROLES.keys() <= vigil_services().keys()
        assert 2 == svc["scorer"]["deploy"]["replicas"]
        assert ["otelcol"] == svc["otelcol"]["profiles"]
        assert svc["kafka"]["image"].startswith("apache/kafka:")
        assert "broker,controller" == svc["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
        assert "zookeeper" not in svc

    def test_one_image_built_from_deploy_dockerfile(self) -> None:
        """Every Vigil service uses the same image, built with deploy/Dockerfile from the repository root."""
        for name, s in vigil_services().items():
            assert {"context": "..", "dockerfile": "deploy/Dockerfile"} == s["build"], name
            context = (DEPLOY / s["build"]["context"]).resolve()
            assert (context / s["build"]["dockerfile"]).is_file()
            assert (context / "pyproject.toml").is_file()


class TestAgainstCode:
    """Commands, variables and ports exist in the code."""

    def test_commands_exist_in_cli(self, vigil_command: Any) -> None:
        """Each Vigil service runs a sub-command the `vigil` parser has; the roles run the right one."""
        for name, s in vigil_services().items():
            leaf = vigil_command(s["command"])
            assert leaf, f"{name}: `vigil {' '.join(s['command'])}` is not a vigil sub-command"
            if name in ROLES:
                assert ROLES[name] == leaf, name

    def test_stop_grace_covers_the_roles_stop(self) -> None:
        """Each role's stop_grace_period (Docker default 10 s) outlasts its worst-case stop (else SIGKILL cuts it)."""
        from vigil.roles import stop_budget_s

        for name, s in vigil_services().items():
            if name in ROLES and name != "migrate":
                grace = str(s.get("stop_grace_period", "10s"))
                assert grace.endswith("s"), f"{name}: write stop_grace_period in seconds"
                assert grace[:-1].isdigit(), f"{name}: write stop_grace_period in seconds"
                assert int(grace[:-1]) > stop_budget_s(ROLES[name][0]), name

    def test_env_names_are_settings(self, settings_env: set[str]) -> None:
        """Every VIGIL_* variable given to a Vigil service is a field of the settings model, and validates."""
        for name, s in vigil_services().items():
            env = {k: str(v) for k, v in s["environment"].items()}
            assert set(env) <= settings_env, f"{name}: unknown {sorted(set(env) - settings_env)}"
            Settings.load(env)  # raises SettingsError on a bad value

    def test_ports_match_settings(self, setting_port: Any) -> None:
        """Published ports are the ports the roles listen on; Prometheus scrapes the metrics port by service name."""
        svc = vigil_services()
        env = {name: {k: str(v) for k, v in s["environment"].items()} for name, s in svc.items()}
        assert {
            setting_port(env["collector"], "otlp_http_port"),
            setting_port(env["collector"], "otlp_grpc_port"),
        } == set(published(svc["collector"]))
        assert {setting_port(env["review"], "http_port")} == set(published(svc["review"]))
        prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
        assert [f"collector:{setting_port(env['collector'], 'metrics_port')}"] == jobs["vigil-collector"][
            "static_configs"
        ][0]["targets"]
        assert [f"review:{setting_port(env['review'], 'metrics_port')}"] == jobs["vigil-review"]["static_configs"][0][
            "targets"
        ]
        sd = jobs["vigil-scorer"]["dns_sd_configs"][0]
        assert (["scorer"], setting_port(env["scorer"], "metrics_port")) == (sd["names"], sd["port"])

    def test_kafka_topic_agrees_everywhere(self) -> None:
        """The topic the init job creates is the one the roles and otelcol use, with otlp_proto by trace id."""
        svc = services()
        topic = next(a.split("=", 1)[1] for a in svc["kafka-init"]["command"] if a.startswith("--topic="))
        assert all(s["environment"]["VIGIL_KAFKA_TOPIC"] == topic for s in vigil_services().values())
        otel = yaml.safe_load((DEPLOY / "otelcol" / "config.yaml").read_text())["exporters"]["kafka"]
        assert (topic, "otlp_proto", True) == (otel["topic"], otel["encoding"], otel["partition_traces_by_id"])
        assert ["kafka:9092"] == otel["brokers"]


class TestMounts:
    """Every file the stack mounts exists, at the path its consumer reads."""

    def test_mounted_files_exist(self) -> None:
        """Bind mounts (./...) point at files or directories of deploy/."""
        for name, s in services().items():
            for volume in s.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("."):
                    assert (DEPLOY / source).exists(), f"{name}: {source}"

    def test_prometheus_rule_files_mounted_beside_config(self) -> None:
        """prometheus.yml's rule_files are mounted next to it, and Alertmanager's target is the service."""
        prom_cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        mounts = {v.split(":")[1] for v in services()["prometheus"]["volumes"]}
        for rule_file in prom_cfg["rule_files"]:
            assert f"/etc/prometheus/{rule_file}" in mounts
        target = prom_cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0]
        assert "alertmanager:9093" == target
        assert "9093:9093" in services()["alertmanager"]["ports"]

    def test_prometheus_keeps_the_slo_window(self) -> None:
        """Prometheus keeps the history the SLO rules read (the 28-day budget window + a day), not its default 15d."""
        from scorers.slo import parse_slo
        from vigil import slo

        flags = dict(f.split("=", 1) for f in services()["prometheus"]["command"] if "=" in f)
        assert f"{slo.retention_days(parse_slo(None))}d" == flags["--storage.tsdb.retention.time"]
        assert "29d" == flags["--storage.tsdb.retention.time"]

    def test_grafana_provisioning_paths(self) -> None:
        """Grafana gets the provisioning folders and the dashboards where the provider looks."""
        mounts = dict(v.split(":")[:2] for v in services()["grafana"]["volumes"] if v.startswith("."))
        provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/vigil.yaml").read_text())["providers"][0]
        assert "./grafana/dashboards" == next(k for k, v in mounts.items() if v == provider["options"]["path"])
        assert "/etc/grafana/provisioning/datasources" == mounts["./grafana/provisioning/datasources"]
        text = (DEPLOY / "grafana/provisioning/datasources/vigil.yaml").read_text()
        datasource = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        grafana_env = services()["grafana"]["environment"]
        for name in set(re.findall(r"(?<!\$)\$\{([A-Z_]+)\}", datasource)):
            assert name in grafana_env, f"datasource provisioning reads ${{{name}}}, not set for Grafana"
        review_port = published(services()["review"])
        assert f"http://localhost:{next(iter(review_port.values()))}" == grafana_env["VIGIL_PUBLIC_URL"]

    def test_alertmanager_routes_to_defined_receivers(self) -> None:
        """Every receiver a route names is defined."""
        am = yaml.safe_load((DEPLOY / "prometheus" / "alertmanager.yml").read_text())
        names = {r["name"] for r in am["receivers"]}
        routes = [am["route"], *am["route"].get("routes", [])]
        assert {r["receiver"] for r in routes} <= names


class TestExposure:
    """Secure defaults in the compose stack: listeners reachable by the other containers, the API never open."""

    def test_roles_bind_all_interfaces_explicitly(self) -> None:
        """Each role sets VIGIL_LISTEN_HOST itself (Vigil's default is loopback, unreachable from other containers)."""
        from vigil.exposure import is_loopback

        for name, s in vigil_services().items():
            env = {k: str(v) for k, v in s["environment"].items()}
            assert "0.0.0.0" == env.get("VIGIL_LISTEN_HOST"), name
            assert not is_loopback(Settings.load(env).bind_host("metrics")), name

    def test_published_api_requires_an_admin_token(self) -> None:
        """The review API is published on the host: its admin token is required from the environment (no default)."""
        env = services()["review"]["environment"]
        token = env["VIGIL_ADMIN_TOKEN"]
        assert token.startswith("${VIGIL_ADMIN_TOKEN:?"), token  # compose refuses to start without it
