"""Judges configured in ``vigil.yaml`` (``judges:``), validated at start-up.

Example::

    judges:
      groundedness:
        rubric: groundedness          # built-in name, or {name, version, instructions}
        model: gpt-4o-mini
        base_url: https://api.openai.com/v1
        api_key_env: OPENAI_API_KEY   # the variable holding the key; omit for local servers
        select: flagged               # CEL over the run; default: flagged runs only (random_sample:
                                      # the runs of the random review sample, for judge calibration)
        sample_rate: 1.0              # of the selected runs, deterministic on the trace id
        flag_below: 0.5               # adds the rule judge_groundedness: judge.groundedness < 0.5
        priority: normal
        price: {input_per_mtok: 0.15, output_per_mtok: 0.6}
        budget: {tokens_per_hour: 2000000, usd_per_hour: 1.0}

Session judges (``session_judges:``, same keys) judge a closed session's conversation instead of
one run: ``rubric`` is a session rubric (``contradiction``, ``conversation_completeness``,
``knowledge_retention``) or your own, ``select`` is CEL over the session rule variables
(default ``turns >= 2``) and a score below ``flag_below`` (default 0.5) flags the session.

A bad judge refuses to start with :class:`~scorers.errors.JudgeConfigError` naming the judge
and the key.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scorers import cel_core as cel
from scorers.errors import JudgeConfigError
from scorers.judge.budget import Price
from scorers.judge.model import Rubric
from scorers.judge.rubrics import BUILTIN_RUBRICS, PREAMBLE, SESSION_PREAMBLE, SESSION_RUBRICS
from scorers.model import Priority, Run
from scorers.rules import RUN_FIELDS, activation

NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
"""Judge names are CEL identifiers (``judge.<name>`` in rules) and metric label values."""

DEFAULT_SELECT = "flagged"
DEFAULT_SESSION_SELECT = "turns >= 2"
"""Session judges judge every closed conversation of two turns or more by default (then ``sample_rate``)."""
SELECTOR_EXTRA = ("flagged", "priority", "reasons", "random_sample")
"""Variables a selector sees besides the rule variables: the run's flag decision."""


class _RubricIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64)
    version: str = Field(min_length=1, max_length=32)
    instructions: str = Field(min_length=20)


class _PriceIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input_per_mtok: float = Field(default=0.0, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)


class _BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens_per_hour: int | None = Field(default=None, gt=0)
    usd_per_hour: float | None = Field(default=None, gt=0)


class JudgeConfig(BaseModel):
    """One judge's ``vigil.yaml`` entry (field docs are the reference)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rubric: str | _RubricIn = Field(
        description="Built-in rubric name or {name, version, instructions}; instructions follow the common preamble."
    )
    model: str = Field(min_length=1, description="Model name sent to the endpoint.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint; default the OpenAI API.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    select: str = Field(DEFAULT_SELECT, description="CEL selector over the run and its flag decision.")
    sample_rate: float = Field(1.0, ge=0, le=1, description="Share of selected runs judged (deterministic).")
    pass_threshold: float = Field(0.5, ge=0, le=1, description="score >= threshold is a pass (for agreement).")
    flag_below: float | None = Field(None, ge=0, le=1, description="Flag runs whose score is below this.")
    priority: Priority = Field(Priority.NORMAL, description="Priority of the flag_below rule.")
    concurrency: int = Field(2, ge=1, le=64, description="Requests in flight for this judge.")
    queue_size: int = Field(100, ge=1, description="Runs waiting for this judge; more are dropped (and counted).")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one request.")
    max_retries: int = Field(2, ge=0, le=10, description="Retries after 429, timeouts and 5xx.")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest wait before a retry (also caps Retry-After).")
    max_tokens: int = Field(400, ge=16, description="Completion token limit of a verdict.")
    max_content_chars: int = Field(12_000, ge=1000, description="Characters of run content sent.")
    price: _PriceIn = Field(_PriceIn(), description="USD per million tokens.")
    budget: _BudgetIn = Field(_BudgetIn(), description="Spend limits per hour.")
    cache_size: int = Field(10_000, ge=0, description="Verdicts cached by (rubric, model, content hash).")


class SessionJudgeConfig(JudgeConfig):
    """One session judge's ``vigil.yaml`` entry: a judge's keys, with session defaults."""

    select: str = Field(DEFAULT_SESSION_SELECT, description="CEL selector over the closed session's rule variables.")
    sample_rate: float = Field(1.0, ge=0, le=1, description="Share of selected sessions judged (deterministic).")
    flag_below: float | None = Field(0.5, ge=0, le=1, description="Flag sessions whose score is below this.")


_C = TypeVar("_C", bound=JudgeConfig)


@dataclass(frozen=True, slots=True)
class JudgeSpec:
    """A validated judge, ready to run.

    Attributes:
        name: the judge name.
        config: the validated entry.
        rubric: the resolved rubric.
        api_key: the key read from ``api_key_env`` (a placeholder for keyless local servers).
        selector: the compiled CEL selector, or None for the default (flagged runs).
        price: the token price.
    """

    name: str
    config: JudgeConfig
    rubric: Rubric
    api_key: str
    selector: cel.Program | None
    price: Price

    @property
    def rule(self) -> tuple[str, dict[str, str]] | None:
        """The flag rule ``flag_below`` adds, as ``(name, {expr, priority})``, or None."""
        below = self.config.flag_below
        if below is None:
            return None
        expr = f"has(judge.{self.name}) && judge.{self.name} < {float(below)!r}"
        return f"judge_{self.name}", {"expr": expr, "priority": self.config.priority.value}


def parse_judges(config: Mapping[str, Any] | None, environ: Mapping[str, str]) -> tuple[JudgeSpec, ...]:
    """Validate the ``judges:`` mapping.

    Args:
        config: ``{name: {...}}`` from ``vigil.yaml`` (None: no judges).
        environ: where ``api_key_env`` variables are read.

    Raises:
        JudgeConfigError: naming the judge and key of the first bad value.
    """
    specs = []
    for name, entry in (config or {}).items():
        if not isinstance(name, str) or not NAME.match(name):
            raise JudgeConfigError(str(name), "name", "must match [a-z][a-z0-9_]* (it is a CEL identifier)")
        if not isinstance(entry, Mapping):
            raise JudgeConfigError(name, "judges", "a judge must be a mapping")
        specs.append(_spec(name, entry, environ))
    return tuple(specs)


def parse_session_judges(
    config: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    *,
    sample: Mapping[str, Any],
    taken: Collection[str] = (),
) -> tuple[JudgeSpec, ...]:
    """Validate the ``session_judges:`` mapping.

    Args:
        config: ``{name: {...}}`` from ``vigil.yaml`` (None: no session judges).
        environ: where ``api_key_env`` variables are read.
        sample: the session rule variables of a sample session (a selector is dry-run on them).
        taken: the run judges' names (a session judge may not reuse one: they share the metric label).

    Raises:
        JudgeConfigError: naming the judge and key of the first bad value.
    """
    specs = []
    for name, entry in (config or {}).items():
        if not isinstance(name, str) or not NAME.match(name):
            raise JudgeConfigError(str(name), "name", "must match [a-z][a-z0-9_]*")
        if name in taken:
            raise JudgeConfigError(name, "name", "a run judge has this name (they share the judge metrics)")
        if not isinstance(entry, Mapping):
            raise JudgeConfigError(name, "session_judges", "a judge must be a mapping")
        cfg = _validated(name, SessionJudgeConfig, entry)
        rubric = _rubric(name, cfg.rubric, SESSION_RUBRICS, SESSION_PREAMBLE)
        program = _compiled(name, cfg.select)
        _dry_run(name, program, sample)
        specs.append(JudgeSpec(name, cfg, rubric, _api_key(name, cfg, environ), program, _price(cfg)))
    return tuple(specs)


def judge_rules(specs: Sequence[JudgeSpec], rules: Mapping[str, Any] | None) -> dict[str, Any]:
    """The configured rules plus each judge's ``flag_below`` rule (a configured rule of that name wins)."""
    merged: dict[str, Any] = {}
    for spec in specs:
        rule = spec.rule
        if rule is not None:
            merged[rule[0]] = rule[1]
    merged.update(rules or {})
    return merged


def _spec(name: str, entry: Mapping[str, Any], environ: Mapping[str, str]) -> JudgeSpec:
    cfg = _validated(name, JudgeConfig, entry)
    rubric = _rubric(name, cfg.rubric, BUILTIN_RUBRICS, PREAMBLE)
    selector = None if cfg.select.strip() == DEFAULT_SELECT else _selector(name, cfg.select)
    return JudgeSpec(name, cfg, rubric, _api_key(name, cfg, environ), selector, _price(cfg))


def _validated(name: str, model: type[_C], entry: Mapping[str, Any]) -> _C:
    try:
        return model.model_validate(entry)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "?"
        raise JudgeConfigError(name, key, err["msg"]) from exc


def _api_key(name: str, cfg: JudgeConfig, environ: Mapping[str, str]) -> str:
    if cfg.api_key_env is None:
        return "unused"  # local OpenAI-compatible servers (vLLM, Ollama) take any key
    if not environ.get(cfg.api_key_env):
        raise JudgeConfigError(name, "api_key_env", f"environment variable {cfg.api_key_env} is not set")
    return environ[cfg.api_key_env]


def _price(cfg: JudgeConfig) -> Price:
    return Price(cfg.price.input_per_mtok, cfg.price.output_per_mtok)


def _rubric(name: str, value: str | _RubricIn, builtin: Mapping[str, Rubric], preamble: str) -> Rubric:
    if isinstance(value, _RubricIn):
        return Rubric(value.name, value.version, preamble + value.instructions)
    if value not in builtin:
        known = ", ".join(sorted(builtin))
        raise JudgeConfigError(name, "rubric", f"unknown rubric {value!r}; built-in: {known}")
    return builtin[value]


def _compiled(name: str, expr: str) -> cel.Program:
    try:
        return cel.compile(expr)
    except (ValueError, RuntimeError) as exc:
        raise JudgeConfigError(name, "select", f"CEL syntax error: {exc}") from exc


def _selector(name: str, expr: str) -> cel.Program:
    program = _compiled(name, expr)
    _dry_run(name, program, selector_activation(Run(trace_id="0" * 32, agent="sample"), {}, None))
    return program


def _dry_run(name: str, program: cel.Program, sample: Mapping[str, Any]) -> None:
    """Evaluate a selector on a sample: a syntax-valid selector that cannot run on one refuses to start."""
    try:
        result = program.execute({k: sample[k] for k in program.variables() if k in sample})
    except (LookupError, ArithmeticError):
        return  # data-dependent on the empty sample
    except (RuntimeError, ValueError, TypeError) as exc:
        raise JudgeConfigError(name, "select", f"evaluation failed on a sample: {exc}") from exc
    if not isinstance(result, bool):
        raise JudgeConfigError(name, "select", f"must evaluate to a boolean, got {type(result).__name__}")


def selector_activation(
    run: Run,
    scores: Mapping[str, float],
    flag: Any,
    variables: frozenset[str] | None = None,
    *,
    sampled: bool = False,
) -> dict[str, Any]:
    """The variables a selector sees: the rule variables plus ``flagged``, ``priority``, ``reasons``.

    ``random_sample`` is whether the run is in the random review sample (its recorded design,
    ``sampled``): ``select: random_sample`` judges exactly the runs the quality estimates' judge
    calibration and prediction-powered figures need, whatever else flagged them. With ``variables``
    only those are returned (the selector's own: cheaper on the stream thread).
    """
    extra = {
        "random_sample": sampled,
        "flagged": flag is not None,
        "priority": "" if flag is None else flag.priority.value,
        "reasons": [] if flag is None else list(flag.reasons),
    }
    if variables is not None and variables <= _CHEAP:
        act = {name: getattr(run, name) for name in variables if name in RUN_FIELDS}
        act.update((k, v) for k, v in extra.items() if k in variables)
        if "scores" in variables:
            act["scores"] = dict(scores)
        return act
    act = activation(run, scores, random_sample=sampled)
    act.update(extra)
    return act


_CHEAP = frozenset((*RUN_FIELDS, *SELECTOR_EXTRA, "scores"))
