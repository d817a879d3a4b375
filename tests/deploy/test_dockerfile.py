"""deploy/Dockerfile, checked statically (no container engine on this machine): one image for
every role, non-root, the ports and health endpoint the settings define, sources that exist."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from vigil.cli import parser
from vigil.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


class TestDockerfile:
    """The image Vigil's compose stack and manifests run."""

    def test_entrypoint_is_vigil_and_default_command_exists(self) -> None:
        """ENTRYPOINT is the `vigil` console script and the default CMD is one of its sub-commands."""
        stage = dict(final_stage())
        assert ["vigil"] == json.loads(stage["ENTRYPOINT"])
        cmd = json.loads(stage["CMD"])
        assert cmd[0] == parser().parse_args(cmd).command
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert "vigil" in scripts

    def test_runs_as_numeric_non_root_user(self) -> None:
        """The final stage switches to a numeric uid other than 0 (runAsNonRoot can verify it)."""
        users = [arg for word, arg in final_stage() if word == "USER"]
        uid = users[-1].split(":")[0]
        assert uid.isdigit()
        assert int(uid) != 0

    def test_exposes_the_settings_default_ports(self) -> None:
        """EXPOSE lists exactly the default OTLP, API and metrics ports of the settings model."""
        exposed = {int(p) for word, arg in final_stage() if word == "EXPOSE" for p in arg.split()}
        fields = Settings.model_fields
        expected = {fields[k].default for k in ("otlp_http_port", "otlp_grpc_port", "http_port", "metrics_port")}
        assert expected == exposed

    def test_healthcheck_hits_healthz_on_metrics_port(self) -> None:
        """The HEALTHCHECK probes /healthz on VIGIL_METRICS_PORT (default from the settings)."""
        check = next(arg for word, arg in final_stage() if word == "HEALTHCHECK")
        assert "/healthz" in check
        assert "VIGIL_METRICS_PORT" in check
        assert f"'{Settings.model_fields['metrics_port'].default}'" in check

    def test_env_names_are_settings(self) -> None:
        """Every VIGIL_* variable the image sets is a settings field."""
        env = " ".join(arg for word, arg in final_stage() if word == "ENV")
        names = set(re.findall(r"\b(VIGIL_[A-Z_]+)=", env))
        assert names
        assert {n[len("VIGIL_") :].lower() for n in names} <= set(Settings.model_fields)

    def test_copied_sources_exist_and_survive_dockerignore(self) -> None:
        """COPY sources exist in the build context (repo root) and are re-included by the ignore file."""
        ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        for word, arg in instructions():
            if word == "COPY" and not arg.startswith("--from"):
                *sources, _ = arg.split()
                for src in sources:
                    assert (ROOT / src).exists(), src
                    assert f"!{src}" in ignore or f"!{src}/**" in ignore, src

    def test_installs_the_postgres_extra(self) -> None:
        """The image installs the `postgres` extra, which pyproject defines (psycopg)."""
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        assert any("psycopg" in dep for dep in extras["postgres"])
        assert "'.[postgres]'" in DOCKERFILE.read_text()
