"""Tests for vigil.settings: precedence, YAML, and refusal of bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.errors import SettingsError
from vigil.settings import Settings


class TestLoad:
    """Settings come from an injected mapping and an optional YAML file."""

    def test_defaults(self, tmp_path: Path) -> None:
        """Without configuration the documented defaults apply."""
        s = Settings.load({}, config_file=_empty(tmp_path))
        assert (4318, 8080, 9464, 2.0, 0.05) == (
            s.otlp_http_port, s.http_port, s.metrics_port, s.quiet_period_s, s.sample_rate,
        )  # fmt: skip
        assert "sqlite:///vigil.db" == s.database_url

    def test_precedence_override_env_yaml(self, tmp_path: Path) -> None:
        """Overrides beat VIGIL_* variables, which beat vigil.yaml."""
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("http_port: 1111\nmetrics_port: 2222\nsample_rate: 0.5\n")
        s = Settings.load({"VIGIL_HTTP_PORT": "3333", "VIGIL_SAMPLE_RATE": "0.1"}, {"sample_rate": 0.2}, cfg)
        assert (3333, 2222, 0.2) == (s.http_port, s.metrics_port, s.sample_rate)

    def test_scorers_from_comma_list(self, tmp_path: Path) -> None:
        """VIGIL_SCORERS is a comma-separated list."""
        s = Settings.load({"VIGIL_SCORERS": "latency, tokens"}, config_file=_empty(tmp_path))
        assert ("latency", "tokens") == s.scorers

    def test_admin_token_is_masked(self) -> None:
        """The admin token never shows in repr."""
        s = Settings(admin_token="s3cret")  # type: ignore[arg-type]
        assert "s3cret" not in repr(s)
        assert s.admin_token is not None
        assert "s3cret" == s.admin_token.get_secret_value()

    def test_frozen(self) -> None:
        """Settings cannot change after start-up."""
        s = Settings()
        with pytest.raises(ValueError, match="frozen"):
            s.http_port = 1  # type: ignore[misc]


class TestRefusal:
    """A bad value refuses to start with a message naming the key."""

    @pytest.mark.parametrize(
        ("env", "key"),
        [
            ({"VIGIL_SAMPLE_RATE": "1.5"}, "sample_rate"),
            ({"VIGIL_QUIET_PERIOD_S": "soon"}, "quiet_period_s"),
            ({"VIGIL_HTTP_PORT": "70000"}, "http_port"),
            ({"VIGIL_LOG_LEVEL": "loud"}, "log_level"),
            ({"VIGIL_SAMPLE_RATE": "-0.1"}, "sample_rate"),
            ({"VIGIL_REVIEW_BUDGET_PER_DAY": "0"}, "review_budget_per_day"),
            ({"VIGIL_REVIEW_BUDGET_PER_DAY": "-5"}, "review_budget_per_day"),
            ({"VIGIL_REVIEW_SAMPLE_ALLOCATION": "smart"}, "review_sample_allocation"),
        ],
    )
    def test_names_key_and_variable(self, env: dict[str, str], key: str, tmp_path: Path) -> None:
        """The error carries the key and the VIGIL_ variable."""
        with pytest.raises(SettingsError) as info:
            Settings.load(env, config_file=_empty(tmp_path))
        assert key == info.value.key
        assert f"VIGIL_{key.upper()}" in str(info.value)

    def test_an_agents_review_budget_of_0_is_refused(self, tmp_path: Path) -> None:
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("review_budget_agents:\n  support: 0\n")
        with pytest.raises(SettingsError, match="review budget of agent 'support'") as info:
            Settings.load({}, config_file=cfg)
        assert "review_budget_agents" == info.value.key

    @pytest.mark.parametrize(
        ("text", "message"),
        [("  false_pass: 0.7\n", "false_pass must be a number in"), ("  wrong: 0.1\n", "unknown keys")],
    )
    def test_bad_reviewer_error_rates_are_refused(self, text: str, message: str, tmp_path: Path) -> None:
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("review_error_rates:\n" + text)
        with pytest.raises(SettingsError, match=message) as info:
            Settings.load({}, config_file=cfg)
        assert "review_error_rates" == info.value.key

    def test_reviewer_error_rates(self, tmp_path: Path) -> None:
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("review_error_rates: {false_pass: 0.1}\n")
        assert (0.1, 0.0) == Settings.load({}, config_file=cfg).reviewer_error()
        assert Settings.load({}, config_file=_empty(tmp_path)).reviewer_error() is None

    def test_unknown_yaml_key(self, tmp_path: Path) -> None:
        """A misspelt YAML key is refused, not ignored."""
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("sampel_rate: 0.1\n")
        with pytest.raises(SettingsError, match="sampel_rate"):
            Settings.load({}, config_file=cfg)

    def test_missing_explicit_file(self, tmp_path: Path) -> None:
        """An explicitly named config file must exist."""
        with pytest.raises(SettingsError, match="not found"):
            Settings.load({"VIGIL_CONFIG": str(tmp_path / "nope.yaml")})

    def test_invalid_yaml(self, tmp_path: Path) -> None:
        """Broken YAML is refused."""
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("a: [\n")
        with pytest.raises(SettingsError, match="invalid YAML"):
            Settings.load({}, config_file=cfg)


def _empty(tmp_path: Path) -> Path:
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("{}\n")
    return cfg


class TestKafkaSettings:
    """The scale-out settings (names are a contract with the deploy manifests)."""

    def test_defaults(self, tmp_path: Path) -> None:
        """The documented Kafka defaults."""
        s = Settings.load({}, config_file=_empty(tmp_path))
        assert ("127.0.0.1:9092", "otlp_spans", "vigil-scorers", "none", True) == (
            s.kafka_bootstrap, s.kafka_topic, s.kafka_group_id, s.kafka_compression, s.kafka_idempotent,
        )  # fmt: skip

    def test_from_environment(self, tmp_path: Path) -> None:
        """VIGIL_KAFKA_* variables set them; compression is case-insensitive."""
        env = {
            "VIGIL_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
            "VIGIL_KAFKA_TOPIC": "spans",
            "VIGIL_KAFKA_GROUP_ID": "g",
            "VIGIL_KAFKA_COMPRESSION": "ZSTD",
        }
        s = Settings.load(env, config_file=_empty(tmp_path))
        assert ("k1:9092,k2:9092", "spans", "g", "zstd") == (
            s.kafka_bootstrap, s.kafka_topic, s.kafka_group_id, s.kafka_compression,
        )  # fmt: skip

    @pytest.mark.parametrize(
        ("variable", "value"),
        [("VIGIL_KAFKA_COMPRESSION", "brotli"), ("VIGIL_KAFKA_BUFFER_BYTES", "10"), ("VIGIL_KAFKA_TOPIC", "")],
    )
    def test_bad_values_name_the_key(self, tmp_path: Path, variable: str, value: str) -> None:
        """A bad Kafka value refuses to start, naming the variable."""
        with pytest.raises(SettingsError) as info:
            Settings.load({variable: value}, config_file=_empty(tmp_path))
        assert variable == info.value.variable


class TestModelPrices:
    """``model_prices`` (YAML only): USD per million tokens by model prefix."""

    def test_yaml_prices_parsed(self, tmp_path: Path) -> None:
        """A YAML mapping of model to [input, output] becomes a mapping of tuples."""
        path = tmp_path / "vigil.yaml"
        path.write_text("model_prices:\n  my-model: [1.5, 3]\n")
        assert {"my-model": (1.5, 3.0)} == dict(Settings.load({}, config_file=path).model_prices)

    def test_negative_price_refused(self, tmp_path: Path) -> None:
        """A negative price refuses to start, naming the key."""
        path = tmp_path / "vigil.yaml"
        path.write_text("model_prices:\n  my-model: [-1, 3]\n")
        with pytest.raises(SettingsError, match="model_prices"):
            Settings.load({}, config_file=path)


class TestMemoryBudgets:
    """Issue 15 item 3: one VIGIL_MEMORY_LIMIT_MB, split into byte budgets."""

    def test_budgets_follow_the_memory_limit(self, tmp_path: Path) -> None:
        s = Settings.load({"VIGIL_MEMORY_LIMIT_MB": "200"}, config_file=_empty(tmp_path))
        budgets = s.memory_budgets()
        assert (int(200 * 1024 * 1024 * 0.06), 50 * 1024 * 1024) == (budgets.inflight, budgets.intake)

    def test_no_limit_no_budgets(self, tmp_path: Path) -> None:
        s = Settings.load({"VIGIL_MEMORY_LIMIT_MB": "0"}, config_file=_empty(tmp_path))
        assert all(0 == value for _, value in s.memory_budgets().items())
