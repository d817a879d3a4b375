"""Eval sets and eval configs: the ADK ``EvalSet`` JSON model, its legacy form, and the criteria config.

The shape is Google ADK's (``google.adk.evaluation``, Apache-2.0), which ``vigil eval export``
writes:

* **EvalSet** ``{eval_set_id, name, description, eval_cases: [EvalCase], creation_timestamp}``;
* **EvalCase** ``{eval_id, conversation: [Invocation], session_input, conversation_scenario}``;
* **Invocation** ``{invocation_id, user_content, final_response, intermediate_data: {tool_uses:
  [{id, name, args}], intermediate_responses}, creation_timestamp}``; contents are
  ``{role, parts: [{text, …}]}`` (parts' other fields are kept and ignored).

The **legacy** test-file form, still loaded by ADK, is a JSON list of turns ``{query,
expected_tool_use: [{tool_name, tool_input}], reference}``: one case whose conversation is the
list. An ADK ``test_config.json`` (``{"criteria": {name: threshold | {threshold, …}}}``) is an
:class:`EvalConfig`.

Malformed files raise :class:`EvalFileError` naming the file, the JSON path (``$.eval_cases[0]
.conversation[1].user_content``) and what was expected. Vigil extensions (ignored by ADK):
``EvalCase.expected_phrases`` (for ``phrase_recall``), ``EvalCase.rubrics`` and
``EvalCase.metadata`` (:class:`CaseMetadata`: the case's dimension, tags, expected facts and
robustness checks). ADK's ``EvalCase`` model allows extra keys (``extra="allow"``), so a file with
them still loads in ADK, which keeps and ignores them.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scorers.errors import ScorersError

__all__ = [
    "DIMENSIONS",
    "ArgMatch",
    "CaseMetadata",
    "Content",
    "CriterionConfig",
    "EvalCase",
    "EvalConfig",
    "EvalFileError",
    "EvalSet",
    "IntermediateData",
    "Invocation",
    "JudgeOptions",
    "MatchType",
    "Part",
    "ToolCall",
    "load_eval_config",
    "load_eval_set",
    "parse_eval_config",
    "parse_eval_set",
]


class EvalFileError(ScorersError, ValueError):
    """An eval set or eval config file is malformed.

    Attributes:
        file: the file (or ``<memory>``).
        path: the JSON path of the bad value (``$`` for the document).
        expected: what was expected there.
    """

    def __init__(self, file: str, path: str, expected: str) -> None:
        self.file = file
        self.path = path
        self.expected = expected
        super().__init__(f"{file}: {path}: {expected}")


class _Loose(BaseModel):
    """ADK objects carry fields Vigil does not use (``video_metadata``, ``thought``…): kept, ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Part(_Loose):
    """One part of a content; only ``text`` is read."""

    text: str | None = None


class Content(_Loose):
    """A message: ``role`` and ``parts``."""

    role: str | None = None
    parts: list[Part] | None = None

    @property
    def text(self) -> str:
        """The parts' texts joined with newlines (ADK's ``_get_text_from_content``)."""
        return "\n".join(p.text for p in self.parts or () if p.text)

    @classmethod
    def of(cls, text: str, role: str) -> Content:
        """A one-part content."""
        return cls(role=role, parts=[Part(text=text)])


class ToolCall(_Loose):
    """One expected (or actual) tool call: ``name`` and ``args`` (decoded JSON)."""

    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    id: str | None = None

    @property
    def arguments(self) -> dict[str, Any]:
        """``args`` or ``{}``."""
        return self.args or {}

    @functools.cached_property
    def canonical(self) -> str:
        """The arguments as canonical JSON (sorted keys, no spaces, ASCII), as Vigil stores a traced call's."""
        return json.dumps(self.arguments, sort_keys=True, separators=(",", ":"), default=str)


class IntermediateData(_Loose):
    """Tool calls and intermediate responses of an invocation."""

    tool_uses: list[ToolCall] = Field(default_factory=list)
    intermediate_responses: list[Any] = Field(default_factory=list)

    @field_validator("tool_uses", "intermediate_responses", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return [] if value is None else value


class Invocation(_Loose):
    """One turn: what the user said and what was expected back."""

    invocation_id: str | None = None
    user_content: Content
    final_response: Content | None = None
    intermediate_data: IntermediateData | None = None
    creation_timestamp: float | None = None

    @property
    def user_text(self) -> str:
        """The user's message text."""
        return self.user_content.text

    @property
    def expected_response(self) -> str:
        """The expected final response text (empty when none)."""
        return self.final_response.text if self.final_response is not None else ""

    @property
    def tool_uses(self) -> list[ToolCall]:
        """The expected tool trajectory."""
        return self.intermediate_data.tool_uses if self.intermediate_data is not None else []


class SessionInput(_Loose):
    """Initial session of a case."""

    app_name: str | None = None
    user_id: str | None = None
    state: dict[str, Any] | None = None


class ConversationScenario(_Loose):
    """A simulated-user scenario (ADK); Vigil reads it but has no user simulator: such cases are skipped."""

    starting_prompt: str | None = None
    conversation_plan: str | None = None


DIMENSIONS = ("capability", "efficiency", "robustness")
"""What a case measures: can the agent do the task, does it do it cheaply, does it hold up on unusual input."""

CHECKS = ("graceful", "no_leak", "tool_error_handled")
"""The rule-based checks a robustness case can list (:mod:`scorers.eval.robustness`)."""


class CaseMetadata(_Loose):
    """Vigil's metadata of a case, under the case's ``metadata`` key.

    Attributes:
        dimension: ``capability`` (default), ``efficiency`` or ``robustness``.
        tags: free labels (``shortcut``, ``empty_input``…), shown in the reports.
        expected_facts: the facts the answer must contain (normalised text, as ``phrase_recall``) for
            the capability dimension's task completion; the case's ``expected_phrases`` when absent.
        checks: rule-based checks that judge the case instead of the config's criteria (a derived
            edge case has no reference answer): ``graceful``, ``no_leak``, ``tool_error_handled``.
        derived_from: the case a derived edge case was made from.
        translations: the case's first user message asked in other languages, by language code
            (``{"fr": "Quel temps fait-il à Paris ?"}``): the ``language`` edge case of
            :mod:`scorers.eval.robustness` asks the first of them.
    """

    dimension: str = "capability"
    tags: list[str] = Field(default_factory=list)
    expected_facts: list[str] | None = None
    checks: list[str] | None = None
    derived_from: str | None = None
    translations: dict[str, str] | None = None

    @field_validator("dimension", mode="before")
    @classmethod
    def _dimension(cls, value: object) -> object:
        if value is None:
            return "capability"
        if isinstance(value, str) and value.strip().lower() in DIMENSIONS:
            return value.strip().lower()
        raise ValueError(f"one of {', '.join(DIMENSIONS)}, not {value!r}")

    @field_validator("translations", mode="after")
    @classmethod
    def _translations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        empty = [code for code, text in (value or {}).items() if not code.strip() or not text.strip()]
        if empty:
            raise ValueError(f"a language code and a non-empty message each, not {empty[0]!r}")
        return value

    @field_validator("checks", mode="after")
    @classmethod
    def _checks(cls, value: list[str] | None) -> list[str] | None:
        unknown = [c for c in value or () if c not in CHECKS]
        if unknown:
            raise ValueError(f"checks among {', '.join(CHECKS)}, not {unknown[0]!r}")
        return value


class EvalCase(_Loose):
    """One case: a conversation of expected invocations (or a scenario)."""

    eval_id: str = Field(min_length=1)
    conversation: list[Invocation] | None = None
    conversation_scenario: ConversationScenario | None = None
    session_input: SessionInput | None = None
    creation_timestamp: float | None = None
    expected_phrases: list[str] | None = None
    rubrics: list[str] | None = None
    metadata: CaseMetadata | None = None

    @property
    def turns(self) -> list[Invocation]:
        """The expected invocations (empty for a scenario-only case)."""
        return self.conversation or []

    @property
    def dimension(self) -> str:
        """The case's dimension (``capability`` when its metadata does not say)."""
        return self.metadata.dimension if self.metadata is not None else "capability"

    @property
    def tags(self) -> tuple[str, ...]:
        """The case's free tags."""
        return tuple(self.metadata.tags) if self.metadata is not None else ()

    @property
    def facts(self) -> tuple[str, ...]:
        """The expected facts of task completion: ``metadata.expected_facts``, else ``expected_phrases``."""
        if self.metadata is not None and self.metadata.expected_facts is not None:
            return tuple(self.metadata.expected_facts)
        return tuple(self.expected_phrases or ())


class EvalSet(_Loose):
    """A set of eval cases."""

    eval_set_id: str = Field(min_length=1)
    name: str | None = None
    description: str | None = None
    eval_cases: list[EvalCase] = Field(default_factory=list)
    creation_timestamp: float | None = None

    @field_validator("eval_cases", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return [] if value is None else value

    def case(self, eval_id: str) -> EvalCase | None:
        """The case with this id, or None."""
        return next((c for c in self.eval_cases if c.eval_id == eval_id), None)

    def document(self) -> dict[str, Any]:
        """The JSON document (ADK field names; unset optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


# --- the criteria config -------------------------------------------------------------------


class MatchType(str, Enum):
    """How an actual tool trajectory is matched to the expected one (ADK ``ToolTrajectoryCriterion``)."""

    EXACT = "EXACT"
    IN_ORDER = "IN_ORDER"
    ANY_ORDER = "ANY_ORDER"


class ArgMatch(str, Enum):
    """How a tool call's arguments are compared: all of them, only the expected keys, or not at all."""

    EXACT = "exact"
    SUBSET = "subset"
    IGNORE = "ignore"


class JudgeOptions(BaseModel):
    """The LLM judge of ``final_response_match`` and the rubric criteria (an OpenAI-compatible endpoint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field("gpt-4o-mini", min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    num_samples: int = Field(1, ge=1, le=15, description="Samples per question; the majority decides.")
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    max_backoff_s: float = Field(30.0, gt=0, description="Longest wait before a retry (also caps Retry-After).")
    max_tokens: int = Field(400, ge=16, description="Completion token limit of an answer.")
    tokens_per_hour: int | None = Field(None, gt=0)
    usd_per_hour: float | None = Field(None, gt=0)
    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    cache_size: int = Field(10_000, ge=0)


class CriterionConfig(BaseModel):
    """One criterion's settings: its threshold and what it reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(ge=0.0, le=1.0)
    match_type: MatchType = MatchType.EXACT
    arg_match: ArgMatch = ArgMatch.EXACT
    phrases: tuple[str, ...] = ()
    rubrics: tuple[str, ...] = ()

    @field_validator("match_type", mode="before")
    @classmethod
    def _match_type(cls, value: object) -> object:
        if isinstance(value, str):
            return value.strip().upper().replace("-", "_").replace(" ", "_")
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:  # ADK's enum values
            return list(MatchType)[value]
        return value

    @field_validator("arg_match", mode="before")
    @classmethod
    def _arg_match(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value


CRITERIA: Mapping[str, str] = {
    "tool_trajectory": "tool_trajectory",
    "tool_trajectory_avg_score": "tool_trajectory",
    "response_match": "response_match",
    "response_match_score": "response_match",
    "tool_recall": "tool_recall",
    "tool_precision": "tool_precision",
    "param_accuracy": "param_accuracy",
    "phrase_recall": "phrase_recall",
    "task_success": "task_success",
    "final_response_match": "final_response_match",
    "final_response_match_v2": "final_response_match",
    "rubric_response_quality": "rubric_response_quality",
    "rubric_based_final_response_quality_v1": "rubric_response_quality",
    "rubric_tool_use_quality": "rubric_tool_use_quality",
    "rubric_based_tool_use_quality_v1": "rubric_tool_use_quality",
}
"""Accepted criterion names (Vigil's and ADK's) → Vigil's name."""

JUDGED = frozenset(("final_response_match", "rubric_response_quality", "rubric_tool_use_quality"))
"""Criteria that ask an LLM judge."""

DEFAULT_CRITERIA: Mapping[str, CriterionConfig] = {
    "tool_trajectory": CriterionConfig(threshold=1.0),
    "response_match": CriterionConfig(threshold=0.8),
}
"""ADK's defaults: ``tool_trajectory_avg_score`` 1.0 (EXACT) and ``response_match_score`` 0.8."""


class EvalConfig(BaseModel):
    """Which criteria a case must pass, with their thresholds, and the judge of the judged ones.

    Accepts ADK's ``test_config.json`` (``{"criteria": {"tool_trajectory_avg_score": 1.0}}``) and
    Vigil's richer form (``{"criteria": {"tool_trajectory": {"threshold": 1.0, "match_type":
    "IN_ORDER", "arg_match": "subset"}}, "judge": {…}}``). ``task_success`` passes when every other
    configured criterion passed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    criteria: dict[str, CriterionConfig] = Field(default_factory=lambda: dict(DEFAULT_CRITERIA))
    judge: JudgeOptions | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        criteria = out.get("criteria")
        if isinstance(criteria, Mapping):
            fixed: dict[str, Any] = {}
            for name, value in criteria.items():
                canonical = CRITERIA.get(str(name))
                if canonical is None:
                    known = ", ".join(sorted(CRITERIA))
                    raise ValueError(f"a known criterion ({known}), not {name!r}")
                if isinstance(value, bool) or value is None:
                    raise ValueError(f"a threshold number or an object for criterion {name!r}")
                entry: Any = value
                if isinstance(value, int | float):
                    entry = {"threshold": value}
                elif isinstance(value, Mapping):
                    entry = {_snake(k): v for k, v in value.items()}
                    entry.pop("judge_model_options", None)
                fixed[canonical] = entry
            out["criteria"] = fixed
        return out

    @property
    def judged(self) -> tuple[str, ...]:
        """The configured criteria that need the judge."""
        return tuple(name for name in self.criteria if name in JUDGED)


def _snake(key: object) -> str:
    """``matchType`` → ``match_type`` (ADK writes criteria in camel case too)."""
    text = str(key)
    return "".join("_" + c.lower() if c.isupper() else c for c in text).lstrip("_")


# --- loading ---------------------------------------------------------------------------------


def load_eval_set(path: str | Path) -> EvalSet:
    """Read an eval set file: the current ``EvalSet`` JSON or the legacy list of turns.

    Raises:
        EvalFileError: not JSON, or not an eval set (file, JSON path, what was expected).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    return parse_eval_set(_read_json(path), str(path), default_id=_stem(path))


def parse_eval_set(data: Any, file: str = "<memory>", *, default_id: str = "eval_set") -> EvalSet:
    """Validate a decoded eval set document (current or legacy form).

    Raises:
        EvalFileError: naming ``file``, the JSON path and what was expected.
    """
    if isinstance(data, list):
        return _legacy(data, file, default_id)
    if not isinstance(data, Mapping):
        raise EvalFileError(file, "$", f"expected an EvalSet object or a legacy list of turns, got {_kind(data)}")
    try:
        return EvalSet.model_validate(data)
    except ValidationError as exc:
        raise _error(file, exc) from None


def load_eval_config(path: str | Path) -> EvalConfig:
    """Read an eval config (``test_config.json`` or YAML/JSON with ``criteria`` and ``judge``).

    Raises:
        EvalFileError: naming the file, the JSON path and what was expected.
    """
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise EvalFileError(str(path), "$", f"expected YAML: {exc}") from None
    else:
        data = _read_json(path)
    return parse_eval_config(data, str(path))


def parse_eval_config(data: Any, file: str = "<memory>") -> EvalConfig:
    """Validate a decoded eval config.

    Raises:
        EvalFileError: naming ``file``, the JSON path and what was expected.
    """
    if data is None:
        return EvalConfig()
    if not isinstance(data, Mapping):
        raise EvalFileError(file, "$", f"expected an object with 'criteria', got {_kind(data)}")
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise _error(file, exc, root=("criteria",) if _is_criteria_error(exc) else ()) from None


def _is_criteria_error(exc: ValidationError) -> bool:
    loc = exc.errors()[0]["loc"]
    return not loc  # a model_validator error: raised while reading 'criteria'


def _legacy(data: list[Any], file: str, eval_id: str) -> EvalSet:
    turns = []
    for i, item in enumerate(data):
        where = f"$[{i}]"
        if not isinstance(item, Mapping):
            raise EvalFileError(
                file, where, f"expected a turn object {{query, expected_tool_use, reference}}, got {_kind(item)}"
            )
        query = item.get("query")
        if not isinstance(query, str):
            raise EvalFileError(file, f"{where}.query", f"expected the user's query as a string, got {_kind(query)}")
        uses = item.get("expected_tool_use") or []
        if not isinstance(uses, list):
            raise EvalFileError(file, f"{where}.expected_tool_use", f"expected a list of tool uses, got {_kind(uses)}")
        calls = []
        for j, use in enumerate(uses):
            if not isinstance(use, Mapping) or not isinstance(use.get("tool_name"), str):
                raise EvalFileError(
                    file, f"{where}.expected_tool_use[{j}]", "expected {tool_name: string, tool_input: object}"
                )
            args = use.get("tool_input") or {}
            if not isinstance(args, Mapping):
                raise EvalFileError(
                    file, f"{where}.expected_tool_use[{j}].tool_input", f"expected an object, got {_kind(args)}"
                )
            calls.append(ToolCall(name=use["tool_name"], args=dict(args)))
        reference = item.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise EvalFileError(
                file, f"{where}.reference", f"expected the reference answer as a string, got {_kind(reference)}"
            )
        turns.append(
            Invocation(
                invocation_id=f"{eval_id}-{i}",
                user_content=Content.of(query, "user"),
                final_response=None if reference is None else Content.of(reference, "model"),
                intermediate_data=IntermediateData(tool_uses=calls),
            )
        )
    case = EvalCase(eval_id=eval_id, conversation=turns)
    return EvalSet(eval_set_id=eval_id, name=eval_id, eval_cases=[case] if turns else [])


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EvalFileError(str(path), "$", f"expected UTF-8 JSON: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalFileError(
            str(path), "$", f"expected JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def _error(file: str, exc: ValidationError, root: Sequence[str] = ()) -> EvalFileError:
    err = exc.errors()[0]
    path = "$"
    for part in (*root, *err["loc"]):
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Input should be ")
    got = err.get("input")
    if err["type"] == "missing":
        return EvalFileError(file, path, "expected this field, it is missing")
    if err["type"] == "extra_forbidden":
        return EvalFileError(file, path, "expected no such key (unknown field)")
    suffix = "" if isinstance(got, Mapping | list) or err["type"] == "value_error" else f" (got {_kind(got)})"
    return EvalFileError(file, path, f"expected {msg[0].lower() + msg[1:] if msg else 'a valid value'}{suffix}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number" if not (isinstance(value, float) and math.isnan(value)) else "NaN"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".evalset.json", ".test.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name
