"""deploy/k8s parses and agrees with the code and with itself.

Checked statically (no cluster here): the image and the sub-commands each container runs, the
VIGIL_* names (settings model), ports against the settings, probes on /healthz and /readyz,
resource requests, non-root security contexts, Secret/ConfigMap references, Service and
monitor selectors, scorer replicas = topic partitions, and the PrometheusRule in sync with
deploy/prometheus.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from vigil.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
IMAGE = "vigil:0.1.0"
KUBERNETES_VERSION = "1.29"
"""Oldest Kubernetes release the manifests target."""

Doc = dict[str, Any]


def documents() -> list[Doc]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs: list[Doc] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


def by_kind(kind: str) -> list[Doc]:
    return [d for d in documents() if d["kind"] == kind]


def named(kind: str, name: str) -> Doc:
    return next(d for d in by_kind(kind) if d["metadata"]["name"] == name)


def pod_specs() -> Iterator[tuple[str, Doc]]:
    for d in documents():
        if d["kind"] in {"Deployment", "Job"}:
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]


def vigil_containers() -> Iterator[tuple[str, Doc, Doc]]:
    """(workload, pod spec, container) of every container running the Vigil image."""
    for name, spec in pod_specs():
        for c in spec["containers"]:
            if c["image"] == IMAGE:
                yield name, spec, c


def container_env(c: Doc) -> dict[str, str]:
    """The container's effective VIGIL_* environment (ConfigMaps resolved; Secret values as a marker)."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(named("ConfigMap", source["configMapRef"]["name"])["data"])
    for var in c.get("env", []):
        env[var["name"]] = var.get("value", "<from secret>")
    return env


class TestFiles:
    """Every manifest parses and kustomization lists them all."""

    def test_kustomization_lists_every_manifest(self) -> None:
        """No manifest is left out of kustomization.yaml, and every listed one exists."""
        listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
        present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
        assert present == listed

    def test_kustomize_image_override_targets_the_vigil_image(self) -> None:
        """`images:` retags exactly the image the Vigil containers use (the compose stack builds the same tag)."""
        image = yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"][0]
        assert IMAGE == f"{image['name']}:{image['newTag']}"
        compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
        assert IMAGE == compose["x-vigil"]["image"]

    def test_every_object_is_namespaced_and_labelled(self) -> None:
        """Objects carry apiVersion, kind, a name; everything but the Namespace lives in `vigil`."""
        for d in documents():
            assert d["apiVersion"], d
            assert d["metadata"]["name"], d
            if d["kind"] != "Namespace":
                assert "vigil" == d["metadata"]["namespace"], d["metadata"]["name"]


class TestSchemas:
    """Core objects validate against the Kubernetes OpenAPI schemas (kubernetes-validate, offline)."""

    def test_core_objects_validate_strictly(self) -> None:
        """Deployments, Services, the Job, ConfigMap, Secret and Namespace have no unknown or mistyped field.

        The Prometheus Operator objects have no bundled schema; their content is checked below.
        """
        core = [d for d in documents() if not d["apiVersion"].startswith("monitoring.coreos.com/")]
        assert len(core) >= 8
        for d in core:
            kubernetes_validate.validate(d, KUBERNETES_VERSION, strict=True)

    def test_validation_catches_a_misspelt_field(self) -> None:
        """The validator is strict: an unknown container field is an error (so the test above can fail)."""
        job = copy.deepcopy(named("Job", "vigil-db-upgrade"))
        job["spec"]["template"]["spec"]["containers"][0]["arg"] = ["db", "upgrade"]
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


class TestContainers:
    """The Vigil containers run real sub-commands with real settings."""

    def test_roles_present(self) -> None:
        """A collector sidecar next to an agent, scorers, the review API and the migration job."""
        roles = {(name, tuple(c["args"])) for name, _, c in vigil_containers()}
        assert {
            ("support-agent", ("collector",)),
            ("vigil-scorer", ("scorer",)),
            ("vigil-review", ("review",)),
            ("vigil-db-upgrade", ("db", "upgrade")),
        } == roles

    def test_grace_period_covers_the_roles_stop(self) -> None:
        """terminationGracePeriodSeconds (default 30) outlasts each role's worst-case stop (else SIGKILL cuts it)."""
        from vigil.roles import stop_budget_s

        for name, spec, c in vigil_containers():
            role = c["args"][0]
            if role in {"collector", "scorer", "review", "run"}:
                delay = float(container_env(c).get("VIGIL_SHUTDOWN_DELAY_S", "0"))
                assert spec.get("terminationGracePeriodSeconds", 30) > stop_budget_s(role, delay), (name, role)

    def test_commands_exist_in_cli(self, vigil_command: Any) -> None:
        """Each container's args are a full `vigil` sub-command."""
        for name, _, c in vigil_containers():
            assert tuple(c["args"]) == vigil_command(c["args"]), f"{name}: `vigil {' '.join(c['args'])}`"

    def test_env_names_are_settings_and_validate(self, settings_env: set[str]) -> None:
        """Every VIGIL_* variable (direct or from the ConfigMap) is a settings field, and the values load."""
        for name, _, c in vigil_containers():
            env = container_env(c)
            assert set(env) <= settings_env, f"{name}: unknown {sorted(set(env) - settings_env)}"
            Settings.load({k: v for k, v in env.items() if v != "<from secret>"})

    def test_database_url_from_secret(self) -> None:
        """Roles that write or read the store take VIGIL_DATABASE_URL from the Secret's key."""
        secret = named("Secret", "vigil-database")
        for name, _, c in vigil_containers():
            if c["args"][0] == "collector":
                continue
            ref = next(v for v in c["env"] if v["name"] == "VIGIL_DATABASE_URL")["valueFrom"]["secretKeyRef"]
            assert "vigil-database" == ref["name"], name
            assert ref["key"] in secret["stringData"], name
            assert secret["stringData"][ref["key"]].startswith("postgresql+psycopg://")

    def test_ports_match_settings(self, setting_port: Any) -> None:
        """Named container ports are the ports the process binds for that setting."""
        keys = {
            "metrics": "metrics_port",
            "http": "http_port",
            "otlp-http": "otlp_http_port",
            "otlp-grpc": "otlp_grpc_port",
        }
        for name, _, c in vigil_containers():
            env = container_env(c)
            for port in c.get("ports", []):
                assert setting_port(env, keys[port["name"]]) == port["containerPort"], f"{name}: {port}"

    def test_probes(self) -> None:
        """Long-running containers have liveness on /healthz and readiness on /readyz, on a named port."""
        for name, _, c in vigil_containers():
            if c["args"][0] == "db":
                continue
            ports = {p["name"] for p in c["ports"]}
            assert "/healthz" == c["livenessProbe"]["httpGet"]["path"], name
            assert "/readyz" == c["readinessProbe"]["httpGet"]["path"], name
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                assert c[probe]["httpGet"]["port"] in ports, f"{name} {probe}"

    def test_resources_and_security(self) -> None:
        """Every container requests CPU and memory and runs non-root without privilege escalation."""
        for name, spec in pod_specs():
            pod_sc = spec["securityContext"]
            assert pod_sc["runAsNonRoot"] is True, name
            assert pod_sc["runAsUser"] != 0, name
            for c in spec["containers"]:
                assert {"cpu", "memory"} <= set(c["resources"]["requests"]), f"{name}/{c['name']}"
                assert c["securityContext"]["allowPrivilegeEscalation"] is False, f"{name}/{c['name']}"
                assert ["ALL"] == c["securityContext"]["capabilities"]["drop"], f"{name}/{c['name']}"

    def test_receiver_memory_ceiling_below_container_limit(self) -> None:
        """Receivers refuse spans (VIGIL_MEMORY_LIMIT_MB) before the container memory limit OOM-kills them."""
        units = {"Mi": 1, "Gi": 1024}
        for name, _, c in vigil_containers():
            if c["args"][0] not in {"collector", "run"}:
                continue
            limit = c["resources"]["limits"]["memory"]
            limit_mib = int(limit[:-2]) * units[limit[-2:]]
            env = container_env(c)
            ceiling = int(env.get("VIGIL_MEMORY_LIMIT_MB", Settings.model_fields["memory_limit_mb"].default))
            assert 0 < ceiling < limit_mib, f"{name}: VIGIL_MEMORY_LIMIT_MB={ceiling} vs limit {limit}"

    def test_read_only_root_has_writable_tmp(self) -> None:
        """Vigil containers with a read-only root get an emptyDir at /tmp."""
        for name, spec, c in vigil_containers():
            if c["securityContext"].get("readOnlyRootFilesystem"):
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                volumes = {v["name"]: v for v in spec.get("volumes", [])}
                assert "emptyDir" in volumes[mounts["/tmp"]], name


class TestTopology:
    """Sidecar, scale-out and discovery wiring."""

    def test_agent_exports_to_sidecar_on_localhost(self, setting_port: Any) -> None:
        """The agent's OTLP endpoint is the sidecar's HTTP receiver on localhost, bound to 127.0.0.1."""
        spec = named("Deployment", "support-agent")["spec"]["template"]["spec"]
        agent = next(c for c in spec["containers"] if c["name"] == "agent")
        sidecar = next(c for c in spec["containers"] if c["image"] == IMAGE)
        endpoint = next(v["value"] for v in agent["env"] if v["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
        env = container_env(sidecar)
        assert f"http://localhost:{setting_port(env, 'otlp_http_port')}" == endpoint
        assert "127.0.0.1" == env["VIGIL_OTLP_HTTP_HOST"]

    def test_scorers_sized_to_partitions(self) -> None:
        """Scorer replicas equal the topic's partition count (more would idle, fewer leave capacity unused)."""
        scorer = named("Deployment", "vigil-scorer")
        assert int(scorer["metadata"]["annotations"]["vigil.dev/topic-partitions"]) == scorer["spec"]["replicas"]

    def test_services_select_their_pods_and_ports(self) -> None:
        """Each Service selects its Deployment's pods and targets a named container port."""
        for svc in by_kind("Service"):
            dep = named("Deployment", svc["metadata"]["name"])
            pod = dep["spec"]["template"]
            assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
            names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
            assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names

    def test_monitors_find_every_metrics_endpoint(self) -> None:
        """The ServiceMonitor selects both Services' `metrics` port; the PodMonitor the sidecar pods."""
        sm = named("ServiceMonitor", "vigil")
        selected = [
            s
            for s in by_kind("Service")
            if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert {"vigil-scorer", "vigil-review"} == {s["metadata"]["name"] for s in selected}
        for svc in selected:
            assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}
        pm = named("PodMonitor", "vigil-collector")
        agent_labels = named("Deployment", "support-agent")["spec"]["template"]["metadata"]["labels"]
        assert pm["spec"]["selector"]["matchLabels"].items() <= agent_labels.items()
        for monitor in (sm, pm):
            assert ["environment"] == monitor["spec"]["podTargetLabels"]

    def test_pods_carry_environment_label(self) -> None:
        """Every monitored pod has the `environment` label the monitors copy onto targets."""
        for name in ("vigil-scorer", "vigil-review", "support-agent"):
            assert named("Deployment", name)["spec"]["template"]["metadata"]["labels"]["environment"]


class TestPrometheusRule:
    """prometheusrule.yaml holds exactly deploy/prometheus's groups."""

    def test_in_sync_with_rule_files(self) -> None:
        """Regenerate with `python deploy/k8s/prometheusrule.py` after editing the rule files."""
        spec = importlib.util.spec_from_file_location("vigil_k8s_prometheusrule", K8S / "prometheusrule.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.prometheus_rule() == named("PrometheusRule", "vigil")


class TestPrometheus:
    """The shipped Prometheus keeps the SLO window and loads exactly Vigil's monitors and rules."""

    def test_retention_covers_the_slo_window(self) -> None:
        """Retention from the longest window the SLO rules read (28d + a day), with storage that survives restarts."""
        from scorers.slo import parse_slo
        from vigil import slo

        spec = named("Prometheus", "vigil")["spec"]
        assert f"{slo.retention_days(parse_slo(None))}d" == spec["retention"]
        assert spec["storage"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"]

    def test_selects_the_monitors_and_rules(self) -> None:
        """Its selectors match the ServiceMonitor, the PodMonitor and the PrometheusRule; its account may discover."""
        spec = named("Prometheus", "vigil")["spec"]
        for kind, selector in (
            ("ServiceMonitor", "serviceMonitorSelector"),
            ("PodMonitor", "podMonitorSelector"),
            ("PrometheusRule", "ruleSelector"),
        ):
            wanted = spec[selector]["matchLabels"]
            for d in by_kind(kind):
                assert wanted.items() <= d["metadata"]["labels"].items(), (kind, d["metadata"]["name"])
        binding = named("RoleBinding", spec["serviceAccountName"])
        assert [spec["serviceAccountName"]] == [s["name"] for s in binding["subjects"]]
        named("ServiceAccount", spec["serviceAccountName"])
        role = named("Role", binding["roleRef"]["name"])
        assert any("endpoints" in r["resources"] and "list" in r["verbs"] for r in role["rules"])


class TestExposure:
    """Secure defaults: what each container exposes is set explicitly, and no API is open off loopback."""

    def test_every_listener_is_reachable_where_the_pod_needs_it(self) -> None:
        """Probes and monitors reach the pod IP, so metrics bind all interfaces; the sidecar's OTLP stays local."""
        from vigil.exposure import is_loopback

        for name, _, c in vigil_containers():
            env = {k: v for k, v in container_env(c).items() if v != "<from secret>"}
            settings = Settings.load(env)
            if c["args"][0] == "db":
                continue
            assert not is_loopback(settings.bind_host("metrics")), name
            if c["args"][0] == "collector":
                assert is_loopback(settings.bind_host("otlp_http")), name  # the agent exports to localhost
                assert is_loopback(settings.bind_host("otlp_grpc")), name

    def test_api_off_loopback_takes_its_admin_token_from_a_secret(self) -> None:
        """The review API binds the pod IP, so VIGIL_ADMIN_TOKEN comes from the vigil-admin Secret (none shipped)."""
        from vigil.exposure import is_loopback

        for name, _, c in vigil_containers():
            if c["args"][0] not in {"review", "run"}:
                continue
            env = {k: v for k, v in container_env(c).items() if v != "<from secret>"}
            assert not is_loopback(Settings.load(env).bind_host("http")), name
            ref = next(v for v in c["env"] if v["name"] == "VIGIL_ADMIN_TOKEN")["valueFrom"]["secretKeyRef"]
            assert {"name": "vigil-admin", "key": "token"} == ref, name
            assert all(d["metadata"]["name"] != "vigil-admin" for d in by_kind("Secret"))  # no default token
