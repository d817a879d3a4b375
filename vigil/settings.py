"""Process-wide settings: one frozen object from an optional YAML file plus ``VIGIL_*`` variables.

Precedence: explicit overrides > ``VIGIL_*`` environment variables > ``vigil.yaml`` > defaults.
Every setting has a ``VIGIL_<KEY upper-cased>`` variable and a ``<key>`` in the YAML file.
:meth:`Settings.load` is the only code that reads the environment; tests pass a plain dict.
A bad value raises :class:`SettingsError` naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from collector.budget import MemoryBudgets
from collector.errors import SettingsError
from collector.kafka import DEFAULT_ACK_TIMEOUT_S, DEFAULT_BUFFER_BYTES, DEFAULT_TOPIC
from review_queue.details import DEFAULT_DETAILS_RETENTION_DAYS, DEFAULT_DETAILS_SAMPLE_RATE
from review_queue.feedback import DEFAULT_PENDING_MAX, DEFAULT_PENDING_S
from review_queue.model import DEFAULT_CATEGORIES
from review_queue.session_close import SAMPLE_SESSION_VARIABLES, SessionRule, compile_session_rules
from review_queue.sessions import DEFAULT_IDLE_S, SessionConfig
from review_queue.workbench import DEFAULT_LEASE_S
from scorers.assemble import (
    DEFAULT_CLOSED_CACHE,
    DEFAULT_EVICT_IDLE_S,
    DEFAULT_MAX_IDLE_S,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_MAX_SPANS_PER_RUN,
    DEFAULT_QUIET_PERIOD_S,
)
from scorers.judge import JudgeSpec, parse_session_judges
from scorers.metrics import DEFAULT_MAX_AGENTS, DEFAULT_MAX_TOOLS
from scorers.redact import BUILTIN_PATTERNS, DEFAULT_DENY
from scorers.rules import DEFAULT_REPEAT_THRESHOLD, DEFAULT_SAMPLE_RATE
from scorers.session_ids import SessionKeys
from scorers.slo import SloConfig, parse_slo
from vigil.connections import DEFAULT_LIMITS, ConnectionLimits

ENV_PREFIX = "VIGIL_"
DEFAULT_CONFIG_FILE = "vigil.yaml"
VIGIL_CONFIG = "VIGIL_CONFIG"
"""Path of the YAML configuration file (default ``./vigil.yaml``, optional)."""


class Settings(BaseModel):
    """Every knob of every role. Field docs are the reference (docs/reference/settings.md, by scripts/gen_docs.py).

    A default that a domain module also needs is defined once, in that module, and referenced here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen_host: str = Field(
        "127.0.0.1",
        description="Bind address of every listener without its own host setting: loopback only by default; "
        "0.0.0.0 (or an interface address) to serve other hosts.",
    )
    otlp_http_host: str | None = Field(
        None,
        description="Bind address of the OTLP/HTTP receiver (and of gRPC without otlp_grpc_host); default listen_host.",
    )
    otlp_grpc_host: str | None = Field(
        None, description="Bind address of the OTLP/gRPC receiver; default otlp_http_host, else listen_host."
    )
    metrics_host: str | None = Field(
        None, description="Bind address of /metrics, /healthz and /readyz; default http_host, else listen_host."
    )
    otlp_http_port: int = Field(4318, ge=0, le=65535, description="OTLP/HTTP receiver port.")
    otlp_grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP/gRPC receiver port; 0 disables it.")
    http_host: str | None = Field(
        None, description="Bind address of the API and UI; default listen_host. Open (no token) only on loopback."
    )
    http_port: int = Field(8080, ge=0, le=65535, description="REST API and reviewer UI port.")
    metrics_port: int = Field(9464, ge=0, le=65535, description="Prometheus /metrics port.")
    database_url: str = Field("sqlite:///vigil.db", description="SQLAlchemy URL of the run index and queue.")
    quiet_period_s: float = Field(
        DEFAULT_QUIET_PERIOD_S, gt=0, description="A run closes this long after its last span once its root ended."
    )
    max_idle_s: float = Field(DEFAULT_MAX_IDLE_S, gt=0, description="A trace idle this long is scored as incomplete.")
    sample_rate: float = Field(
        DEFAULT_SAMPLE_RATE, ge=0, le=1, description="Share of runs flagged at random (deterministic on trace id)."
    )
    admin_token: SecretStr | None = Field(None, description="Bearer token required by the API when set.")
    ingest_token: SecretStr | None = Field(
        None, description="Bearer token required on OTLP ingest (HTTP and gRPC) when set."
    )
    max_body_bytes: int = Field(20 * 1024 * 1024, gt=0, description="OTLP request body limit after decompression.")
    memory_limit_mb: int = Field(
        1024,
        ge=0,
        description="Resident memory ceiling in MiB: above it the receivers refuse with 503/UNAVAILABLE; it is "
        "also split into byte budgets for OTLP bodies in flight (read, inflated, decoded), the in-process stream, "
        "runs in flight, the late-span cache, the judge queues and the spool's write queue (see the RUNBOOK's "
        "limits table); 0 disables both.",
    )
    queue_max_batches: int = Field(10_000, gt=0, description="Capacity of the in-process stream (records).")
    retry_after_s: int = Field(2, ge=1, description="Retry-After seconds sent with 503 when the stream is full.")
    shutdown_delay_s: float = Field(
        0.0,
        ge=0,
        le=60,
        description="vigil collector: seconds it keeps receiving after SIGTERM (/readyz answers 503) before it "
        "drains, so that an agent stopped at the same time (a sidecar) can still export its last spans.",
    )
    max_inflight_runs: int = Field(DEFAULT_MAX_INFLIGHT, gt=0, description="Cap on runs being assembled at once.")
    evict_idle_s: float = Field(
        DEFAULT_EVICT_IDLE_S,
        gt=0,
        description="When the runs in flight are over their caps, a run whose root has not ended and that received "
        "no span for this long is scored incomplete; runs still receiving spans are never cut (vigil run refuses "
        "new bodies with 503/UNAVAILABLE instead).",
    )
    max_spans_per_run: int = Field(
        DEFAULT_MAX_SPANS_PER_RUN, gt=0, description="Cap on spans kept per run; more are dropped and counted."
    )
    state_path: str = Field(
        "vigil.state",
        description="vigil run: file where SIGTERM saves runs still in flight for the next start; empty disables.",
    )
    closed_run_cache: int = Field(
        DEFAULT_CLOSED_CACHE,
        ge=0,
        description=(
            "Scored runs whose spans are kept unpacked so late spans can re-score them (~22 KiB each); runs "
            "packed while spans come late are bounded by the late cache's bytes alone."
        ),
    )
    max_agent_labels: int = Field(DEFAULT_MAX_AGENTS, gt=0, description="Distinct agent label values before 'other'.")
    max_tool_labels: int = Field(DEFAULT_MAX_TOOLS, gt=0, description="Distinct tool label values before 'other'.")
    scorers: tuple[str, ...] = Field(
        (
            "step_efficiency",
            "tool_error_rate",
            "repeated_tool_calls",
            "max_iterations_hit",
            "safety_block",
            "latency",
            "tokens",
        ),
        description="Scorer chain, by name (comma-separated in the environment).",
    )
    rules: Mapping[str, Any] | None = Field(
        None, description="Flag rules {name: {expr, priority}}; YAML only. Default rules when unset."
    )
    optimal_steps: Mapping[str, int] = Field(
        default_factory=dict, description="Per-agent optimal step counts for step_efficiency (YAML only)."
    )
    repeat_threshold: int = Field(
        DEFAULT_REPEAT_THRESHOLD, ge=2, description="Identical tool calls that count as a loop."
    )
    log_level: str = Field("info", description="structlog level: debug, info, warning, error.")
    redact: tuple[str, ...] = Field(
        tuple(BUILTIN_PATTERNS),
        description="Built-in redaction patterns applied to run content before it is stored "
        f"({', '.join(BUILTIN_PATTERNS)}; comma-separated in the environment, empty for none).",
    )
    redact_patterns: Mapping[str, str] = Field(
        default_factory=dict, description="Extra redaction patterns {name: regex} (YAML only)."
    )
    attributes_deny: tuple[str, ...] = Field(
        DEFAULT_DENY,
        description="Root attribute key globs never stored (case-insensitive; comma-separated in the environment).",
    )
    attributes_allow: tuple[str, ...] = Field(
        (), description="When set, only root attribute keys matching these globs are stored."
    )
    model_prices: Mapping[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="USD per million (input, output) tokens by model-name prefix, over the built-in table (YAML only).",
    )
    review_budget_per_day: int | None = Field(
        None,
        gt=0,
        description="Random review items a day: the random sample's rate is set so the expected items fit it "
        "(recorded on every run); unset: sample_rate.",
    )
    review_sample_allocation: Literal["uniform", "uncertainty"] = Field(
        "uniform",
        description="How the random sample's rate is spread: uniform (every run alike) or uncertainty (more "
        "where Vigil's completion prediction is least sure, the same expected items; each run's rate recorded).",
    )
    review_budget_agents: Mapping[str, int] = Field(
        default_factory=dict,
        description="Agents' own review budgets (random items a day) beside the fleet's (YAML only).",
    )
    review_error_rates: Mapping[str, float] = Field(
        default_factory=dict,
        description="The reviewers' known error rates {false_pass, false_fail}: the quality estimates' pass rates "
        "are corrected for them (YAML only).",
    )
    review_queue_capacity: int = Field(
        10_000, ge=0, description="Pending review items beyond which random-sample-only flags are shed; 0: never."
    )
    retention_days: float = Field(
        30.0, ge=0, description="Days before runs (with items, feedback, judge verdicts) are deleted; 0: never."
    )
    details_retention_days: float = Field(
        DEFAULT_DETAILS_RETENTION_DAYS,
        ge=0,
        description="Days the details (spans, attributes, conversation) of unflagged runs are kept; 0: flagged only.",
    )
    details_sample_rate: float = Field(
        DEFAULT_DETAILS_SAMPLE_RATE,
        ge=0,
        le=1,
        description="Share of unflagged runs whose details are written (deterministic by trace id); 1: every run.",
    )
    retention_keep_reviewed: bool = Field(
        True, description="Keep runs whose review is done past the retention period (evaluation set, audit trail)."
    )
    session_idle_s: float = Field(
        DEFAULT_IDLE_S,
        gt=0,
        description="Seconds without a new turn after which a session (conversation) closes; default 30 minutes.",
    )
    session_signals: Mapping[str, Any] | None = Field(
        None,
        description="Session signals and review {reask_threshold, human_phrases: [...], rules: {name: {expr, "
        "priority}}, sample_rate}; YAML only (see review_queue.sessions and review_queue.session_close).",
    )
    slo: Mapping[str, Any] | None = Field(
        None,
        description="Quality targets {window, targets: {name: {...}}, agents: {agent: {name: {...}}}}; YAML only; "
        "the six defaults when unset (see scorers.slo and docs/quality.md).",
    )
    detection: Mapping[str, Any] | None = Field(
        None,
        description="Your own limit/block markers {hit_max_iterations|safety_blocked: {exception_types, messages, "
        "attributes, rejections, benign_rejections}, disable: [rule ids]}: rejections / benign_rejections add "
        "reasons an output check's rejection blocks on / never blocks on; YAML only (see "
        "scorers.detect.DetectionConfig).",
    )
    sessions: Mapping[str, Any] | None = Field(
        None,
        description="Your own attribute keys of session and user ids {session_keys: [...], user_keys: [...]}, tried "
        "after the built-in ones; YAML only (see scorers.session_ids and docs/sessions.md).",
    )
    judges: Mapping[str, Any] | None = Field(
        None, description="LLM judges {name: {rubric, model, base_url, ...}}; YAML only (see scorers.judge.config)."
    )
    session_judges: Mapping[str, Any] | None = Field(
        None,
        description="Optional session-level LLM judges {name: {rubric: contradiction|conversation_completeness|"
        "knowledge_retention, model, ...}} run when a session closes; YAML only (see scorers.judge.session).",
    )
    eval_sets: tuple[str, ...] = Field(
        (),
        description="Eval set files (ADK EvalSet JSON) production runs are matched and scored against, reloaded "
        "on change; enables the eval_regression rule (comma-separated in the environment).",
    )
    eval_config: str | None = Field(
        None, description="Eval config file (criteria and thresholds) of the online eval; default ADK's criteria."
    )
    review_lease_s: float = Field(
        DEFAULT_LEASE_S, gt=0, description="Lease of a claimed review item; it returns to pending when it lapses."
    )
    review_categories: tuple[str, ...] | None = Field(
        None,
        description="Failure taxonomy of verdicts (comma-separated in the environment). Default: "
        f"{', '.join(DEFAULT_CATEGORIES)}.",
    )
    session_secret: SecretStr | None = Field(
        None, description="Key signing UI session cookies (≥ 16 bytes); random per process when unset."
    )
    secure_cookies: bool = Field(False, description="Mark UI cookies Secure (serve the UI over HTTPS).")
    self_telemetry: bool = Field(
        False,
        description="Keep FastAPI's built-in OpenTelemetry on the API (to the process's global providers); "
        "off so Vigil never ingests its own requests.",
    )
    http_header_timeout_s: float = Field(
        DEFAULT_LIMITS.header_timeout_s,
        gt=0,
        description="Seconds an HTTP client has to send its request line and headers (API/UI, OTLP/HTTP, probes).",
    )
    http_body_timeout_s: float = Field(
        DEFAULT_LIMITS.body_timeout_s, gt=0, description="Seconds an HTTP client has to send a request body."
    )
    http_keep_alive_s: int = Field(
        DEFAULT_LIMITS.keep_alive_s, ge=1, description="Seconds an idle keep-alive HTTP connection is kept."
    )
    http_max_connections: int = Field(
        DEFAULT_LIMITS.max_connections,
        ge=1,
        description="Open connections per HTTP listener; beyond it the longest-idle ones are closed.",
    )
    feedback_pending_max: int = Field(
        DEFAULT_PENDING_MAX,
        ge=0,
        description="Feedback rows held for runs not stored yet; beyond it such feedback is refused (429).",
    )
    feedback_pending_s: float = Field(
        DEFAULT_PENDING_S, gt=0, description="Seconds feedback waits for its run before it is dropped."
    )
    ingest_auth: bool = Field(
        False, description="Require a bearer token of role ingest (or admin) on OTLP ingest, also without ingest_token."
    )
    # --- write-ahead spool (vigil run) ---
    spool_path: str = Field(
        "vigil.spool",
        description="vigil run: directory of the write-ahead spool; every accepted OTLP body is written there "
        "before it is answered 200 and replayed after a crash; empty disables it.",
    )
    spool_fsync: Literal["batch", "interval", "never"] = Field(
        "batch",
        description="When the spool fsyncs: batch (group commit before every answer: survives power loss), "
        "interval (every spool_fsync_interval_ms: survives a process crash), never (left to the OS).",
    )
    spool_fsync_interval_ms: int = Field(200, gt=0, description="Fsync period of spool_fsync=interval.")
    spool_max_mb: int = Field(
        512, gt=0, description="Byte budget of the spool in MiB; when full, OTLP requests get 503 + Retry-After."
    )
    # --- scale-out on Kafka (vigil collector / vigil scorer) ---
    kafka_spool: bool = Field(
        False,
        description="vigil collector: while Kafka does not take a request (unreachable, no acknowledgement within "
        "kafka_ack_timeout_s), append it to the spool (spool_path, spool_fsync, spool_max_mb) and answer 200 once the "
        "spool's policy is met; drained to Kafka in order when it answers again, also after a restart.",
    )
    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", min_length=1, description="Kafka bootstrap servers, host:port[,host:port...]."
    )
    kafka_topic: str = Field(DEFAULT_TOPIC, min_length=1, description="Topic of OTLP trace records.")
    kafka_group_id: str = Field("vigil-scorers", min_length=1, description="Consumer group of vigil scorer.")
    kafka_compression: str = Field(
        "none", description="Producer compression of vigil collector: none, gzip, snappy, lz4, zstd."
    )
    kafka_idempotent: bool = Field(True, description="Idempotent production (acks=all is always used).")
    kafka_buffer_bytes: int = Field(
        DEFAULT_BUFFER_BYTES,
        ge=65536,
        description="Record bytes the collector holds unacknowledged; beyond it receivers answer 503.",
    )
    kafka_ack_timeout_s: float = Field(
        DEFAULT_ACK_TIMEOUT_S,
        gt=0,
        description="vigil collector: how long a request waits for Kafka's acknowledgement (acks=all) of its "
        "records before it is answered 503 + Retry-After; the collector answers 200 only once they are acknowledged.",
    )
    kafka_session_timeout_ms: int = Field(
        10_000, ge=1000, description="Consumer group session timeout (tansu joins take about half of it)."
    )
    kafka_max_poll_records: int = Field(2000, gt=0, description="Records a scorer takes per poll.")
    kafka_commit_interval_s: float = Field(
        1.0, gt=0, description="Longest time between offset commits of a scorer with safe progress."
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        """A SQLAlchemy URL whose driver is installed (checked without connecting)."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            make_url(v).get_dialect()
        except ArgumentError:
            raise ValueError(
                "not a database URL: use sqlite:///path/vigil.db or postgresql+psycopg://user@host:5432/db"
            ) from None
        except NoSuchModuleError as exc:
            raise ValueError(f"unknown database driver: {exc}") from None
        except ImportError as exc:
            raise ValueError(f"the database driver is not installed: {exc}") from None
        return v

    @field_validator("kafka_compression")
    @classmethod
    def _compression(cls, v: str) -> str:
        if v.lower() not in {"none", "gzip", "snappy", "lz4", "zstd"}:
            raise ValueError("must be one of none, gzip, snappy, lz4, zstd")
        return v.lower()

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be one of debug, info, warning, error")
        return v.lower()

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        parse_slo(v)  # raises a one-line SloConfigError (a ValueError) naming the target and key
        return v

    @field_validator("sessions")
    @classmethod
    def _sessions(cls, v: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        SessionKeys.from_mapping(v)  # raises a one-line SessionConfigError (a ValueError) naming the field
        return v

    def slo_config(self) -> SloConfig:
        """The validated quality targets."""
        return parse_slo(self.slo)

    @field_validator("review_budget_agents")
    @classmethod
    def _budgets(cls, v: Mapping[str, int]) -> Mapping[str, int]:
        for agent, budget in v.items():
            if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
                raise ValueError(f"the review budget of agent {agent!r} must be a whole number above 0, got {budget!r}")
        return v

    @field_validator("review_error_rates")
    @classmethod
    def _error_rates(cls, v: Mapping[str, float]) -> Mapping[str, float]:
        unknown = set(v) - {"false_pass", "false_fail"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}: use false_pass and false_fail")
        for key, rate in v.items():
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 0.5:
                raise ValueError(f"{key} must be a number in [0, 0.5), got {rate!r}")
        return v

    def reviewer_error(self) -> tuple[float, float] | None:
        """``(false_pass, false_fail)`` of ``review_error_rates``, or ``None`` when none is set."""
        if not self.review_error_rates:
            return None
        rates = self.review_error_rates
        return float(rates.get("false_pass", 0.0)), float(rates.get("false_fail", 0.0))

    @field_validator("model_prices")
    @classmethod
    def _prices(cls, v: Mapping[str, tuple[float, float]]) -> Mapping[str, tuple[float, float]]:
        bad = [model for model, (inp, out) in v.items() if inp < 0 or out < 0]
        if bad:
            raise ValueError(f"prices must be >= 0 (model {bad[0]!r})")
        return v

    @field_validator("session_signals")
    @classmethod
    def _session_signals(cls, v: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        SessionConfig.from_mapping(v)  # a one-line ValueError naming the key
        compile_session_rules((v or {}).get("rules"))  # RuleError (a ValueError) naming the rule
        rate = (v or {}).get("sample_rate", 0.0)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ValueError(f"sample_rate must be a number in [0, 1], got {rate!r}")
        return v

    def session_config(self) -> SessionConfig:
        """The session settings: idle time, re-ask threshold, request-for-a-human vocabulary."""
        return SessionConfig.from_mapping(self.session_signals, self.session_idle_s)

    def session_rules(self) -> tuple[SessionRule, ...]:
        """The compiled session rules (``session_signals.rules`` over the defaults)."""
        return compile_session_rules((self.session_signals or {}).get("rules"))

    def session_judge_specs(self, environ: Mapping[str, str]) -> tuple[JudgeSpec, ...]:
        """The validated ``session_judges`` (none when unset).

        Raises:
            scorers.errors.JudgeConfigError: naming the judge and key of the first bad value.
        """
        return parse_session_judges(
            self.session_judges, environ, sample=SAMPLE_SESSION_VARIABLES, taken=tuple(self.judges or ())
        )

    def session_sample_rate(self) -> float:
        """The share of closed sessions sampled into review: ``session_signals.sample_rate``, else ``sample_rate``."""
        return float((self.session_signals or {}).get("sample_rate", self.sample_rate))

    @field_validator("review_categories", mode="before")
    @classmethod
    def _categories(cls, v: object) -> object:
        if isinstance(v, str):
            v = tuple(p.strip() for p in v.split(",") if p.strip())
        if v is not None and not v:
            raise ValueError("needs at least one category")
        return v

    @field_validator("scorers", "redact", "attributes_deny", "attributes_allow", "eval_sets", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str):
            return tuple(p.strip() for p in v.split(",") if p.strip())
        return v

    def bind_host(self, endpoint: Literal["otlp_http", "otlp_grpc", "http", "metrics"]) -> str:
        """The address ``endpoint`` listens on: its own host setting, else the fallback chain, else ``listen_host``."""
        chains = {
            "otlp_http": (self.otlp_http_host,),
            "otlp_grpc": (self.otlp_grpc_host, self.otlp_http_host),
            "http": (self.http_host,),
            "metrics": (self.metrics_host, self.http_host),
        }
        return next((host for host in chains[endpoint] if host is not None), self.listen_host)

    def memory_budgets(self) -> MemoryBudgets:
        """The byte budget of each bounded structure, split from ``memory_limit_mb`` (all unbounded at 0)."""
        return MemoryBudgets.from_limit(self.memory_limit_mb * 1024 * 1024)

    def connection_limits(self) -> ConnectionLimits:
        """The HTTP listeners' limits (``VIGIL_HTTP_*``)."""
        return ConnectionLimits(
            header_timeout_s=self.http_header_timeout_s,
            body_timeout_s=self.http_body_timeout_s,
            keep_alive_s=self.http_keep_alive_s,
            max_connections=self.http_max_connections,
        )

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        config_file: str | Path | None = None,
    ) -> Settings:
        """Build settings from the YAML file, the environment and explicit overrides.

        Args:
            environ: the environment (default ``os.environ``).
            overrides: explicit values that win over everything.
            config_file: YAML path; default ``$VIGIL_CONFIG`` or ``./vigil.yaml`` if it exists.

        Raises:
            SettingsError: naming the key (and variable) of the first bad value.
        """
        env = os.environ if environ is None else environ
        from_file = _read_yaml(config_file, env)
        path = _config_path(config_file, env)
        values: dict[str, Any] = dict(from_file)
        origin = {key: f"{path}: {key}" for key in from_file}  # where each value came from, for errors
        from_env = _from_env(env)
        values.update(from_env)
        origin.update({key: f"{ENV_PREFIX}{key.upper()}" for key in from_env})
        origin.update(_files_from_env(env, values))
        values.update(overrides or {})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0]) if err["loc"] else "?"
            where = ".".join(str(part) for part in err["loc"])
            reason = err["msg"].removeprefix("Value error, ")
            reason = reason if len(err["loc"]) <= 1 else f"at {where}: {reason}"
            variable = origin.get(key, f"{ENV_PREFIX}{key.upper()}")
            value = values.get(key) if len(err["loc"]) <= 1 else err.get("input")
            if key in _SECRET_KEYS or (key == "database_url" and isinstance(value, str) and "@" in value):
                value = "<hidden>"  # tokens, and a database URL that may carry a password
            raise SettingsError(key, variable, reason, value) from exc


def _read_yaml(config_file: str | Path | None, env: Mapping[str, str]) -> Mapping[str, Any]:
    explicit = config_file is not None or VIGIL_CONFIG in env
    path = Path(config_file or env.get(VIGIL_CONFIG) or DEFAULT_CONFIG_FILE)
    if not path.exists():
        if explicit:
            raise SettingsError("config", VIGIL_CONFIG, "file not found", str(path))
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SettingsError("config", VIGIL_CONFIG, f"invalid YAML: {exc}", str(path)) from exc
    if not isinstance(data, dict):
        raise SettingsError("config", VIGIL_CONFIG, "top level must be a mapping", str(path))
    return data


def _config_path(config_file: str | Path | None, env: Mapping[str, str]) -> Path:
    """The YAML file :func:`_read_yaml` reads (named in errors about its values)."""
    return Path(config_file or env.get(VIGIL_CONFIG) or DEFAULT_CONFIG_FILE)


def _files_from_env(env: Mapping[str, str], values: dict[str, Any]) -> dict[str, str]:
    """Read YAML-only settings given a file path in the environment (``VIGIL_RULES=/etc/vigil/rules.yaml``).

    The file holds the mapping itself. ``values`` is updated in place; returns where each came from.

    Raises:
        SettingsError: naming the setting, the variable and the file (missing, unreadable, not YAML, not a mapping).
    """
    origin: dict[str, str] = {}
    for key, field in Settings.model_fields.items():
        variable = f"{ENV_PREFIX}{key.upper()}"
        text = env.get(variable)
        if text is None or "Mapping" not in str(field.annotation):
            continue
        path = Path(text)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError as exc:
            raise SettingsError(key, variable, "file not found (a YAML file holding the mapping)", text) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(key, variable, f"cannot read the file: {exc}", text) from exc
        except yaml.YAMLError as exc:
            raise SettingsError(key, variable, f"invalid YAML in the file: {exc}".replace("\n", " "), text) from exc
        if not isinstance(data, dict):
            raise SettingsError(key, variable, "the file must hold a mapping", text)
        values[key] = data
        origin[key] = f"{path} ({variable})"
    return origin


def _from_env(env: Mapping[str, str]) -> dict[str, str]:
    fields = Settings.model_fields
    out: dict[str, str] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name != VIGIL_CONFIG:
            key = name[len(ENV_PREFIX) :].lower()
            if key in fields:
                out[key] = value
    return out


_SECRET_KEYS = frozenset({"admin_token", "ingest_token", "session_secret"})
"""Settings whose value never appears in an error message."""
