"""One verdict from an OpenAI-compatible endpoint: structured output, retries, timeouts.

:class:`JudgeClient` asks ``chat.completions`` for a JSON answer matching
:data:`~scorers.judge.rubrics.VERDICT_SCHEMA` (``response_format`` ``json_schema``, strict)
and validates it with pydantic (:class:`Verdict`). The ``openai`` client's own retries are
off; this module retries itself so every attempt is measured:

* 429: wait ``Retry-After`` (or ``retry-after-ms``) when the server sends it, else back off
  exponentially with jitter; both capped at ``max_backoff_s``;
* timeouts, connection errors, 5xx (and 408/409): back off and retry;
* other 4xx: give up at once (a bad model name or key will not get better);
* a malformed answer (not JSON, wrong shape, score outside [0, 1]): asked once more, with
  the bad answer and the validation error in the conversation; malformed twice is an error.

Blocking: call from a worker thread. ``wait(seconds) -> bool`` sleeps between attempts and
returns True to abandon (shutdown).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scorers.errors import JudgeCallError
from scorers.judge.rubrics import VERDICT_SCHEMA, JudgeInput

if TYPE_CHECKING:  # imported by the first client: ``openai`` costs ~18 MiB, held only where judges run
    import openai

Wait = Callable[[float], bool]
"""Sleep up to the given seconds; True means "stop now" (shutdown)."""

_RETRYABLE_STATUS = frozenset((408, 409))


class Verdict(BaseModel):
    """The judge's answer, validated."""

    model_config = ConfigDict(extra="forbid")
    reasoning: str = Field(max_length=4000)
    score: float = Field(ge=0.0, le=1.0)


@dataclass(frozen=True, slots=True)
class Judgement:
    """A validated verdict and what it cost.

    Attributes:
        verdict: the answer.
        input_tokens / output_tokens: summed over every attempt that reported usage.
        latency_s: wall time, retries and waits included.
        attempts: HTTP requests sent.
    """

    verdict: Verdict
    input_tokens: int
    output_tokens: int
    latency_s: float
    attempts: int


@dataclass(slots=True)
class _Tally:
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 0


class Endpoint(Protocol):
    """How a judge talks to its model; a judge's configuration is one (``vigil.yaml``'s
    :class:`~scorers.judge.config.JudgeConfig`, the eval config's ``judge`` section).

    Attributes:
        base_url: OpenAI-compatible endpoint (None: the OpenAI API).
        model: the model name.
        timeout_s: timeout of one request.
        max_retries: retries after 429, timeouts, connection errors and 5xx.
        max_backoff_s: cap of a wait (``Retry-After`` included).
        max_tokens: completion limit.
    """

    base_url: str | None
    model: str
    timeout_s: float
    max_retries: int
    max_backoff_s: float
    max_tokens: int


class JudgeClient:
    """Asks one model for verdicts.

    Args:
        endpoint: the model, where it is and how long and how often to ask it.
        api_key: the key.
        on_attempt: ``(outcome, seconds)`` after every HTTP request (metrics); outcome is
            ``ok``, ``malformed``, ``rate_limited``, ``timeout`` or ``error``.
    """

    def __init__(
        self, endpoint: Endpoint, api_key: str, *, on_attempt: Callable[[str, float], None] | None = None
    ) -> None:
        import openai

        self._client = openai.OpenAI(
            base_url=endpoint.base_url, api_key=api_key, timeout=endpoint.timeout_s, max_retries=0
        )
        self.endpoint = endpoint
        self._on_attempt = on_attempt
        self._rng = random.Random()

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def judge(self, request: JudgeInput, wait: Wait) -> Judgement:
        """Get one validated verdict.

        Raises:
            JudgeCallError: with ``outcome`` ``malformed``, ``rate_limited``, ``timeout`` or
                ``error`` (also on shutdown during a wait); it carries the tokens spent.
        """
        started = time.perf_counter()
        tally = _Tally()
        messages: list[dict[str, str]] = request.messages()
        text = self._complete(messages, tally, wait)
        try:
            verdict = Verdict.model_validate_json(text)
        except ValidationError as first:
            messages += [
                {"role": "assistant", "content": text[:2000]},
                {"role": "user", "content": _correction(first)},
            ]
            text = self._complete(messages, tally, wait)
            try:
                verdict = Verdict.model_validate_json(text)
            except ValidationError as second:
                raise _failed("malformed", f"malformed verdict twice: {_first_error(second)}", tally) from second
        return Judgement(
            verdict, tally.input_tokens, tally.output_tokens, time.perf_counter() - started, tally.attempts
        )

    def _complete(self, messages: list[dict[str, str]], tally: _Tally, wait: Wait) -> str:
        """One answer's text, retrying transient failures."""
        import openai  # already loaded by __init__

        for retry in range(self.endpoint.max_retries + 1):
            last = retry == self.endpoint.max_retries
            t0 = time.perf_counter()
            tally.attempts += 1
            try:
                reply = self._client.chat.completions.create(  # type: ignore[call-overload]  # dict params are the wire format
                    model=self.endpoint.model,
                    messages=messages,
                    response_format=_RESPONSE_FORMAT,
                    max_tokens=self.endpoint.max_tokens,
                    temperature=0,
                )
            except openai.APIError as exc:
                outcome, delay = self._classify(exc, retry)
                self._attempted(outcome, t0)
                if last or delay is None or wait(delay):
                    raise _failed(outcome, f"{outcome}: {_describe(exc)}", tally) from exc
                continue
            usage = reply.usage
            if usage is not None:
                tally.input_tokens += usage.prompt_tokens
                tally.output_tokens += usage.completion_tokens
            text = reply.choices[0].message.content if reply.choices else None
            self._attempted("ok" if text else "malformed", t0)
            return text or ""
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _classify(self, exc: openai.APIError, retry: int) -> tuple[str, float | None]:
        """``(outcome, seconds to wait before retrying, or None to give up)``."""
        import openai  # already loaded by __init__

        backoff = min(self.endpoint.max_backoff_s, 0.5 * 2**retry * (0.5 + self._rng.random()))
        if isinstance(exc, openai.APITimeoutError):
            return "timeout", backoff
        if isinstance(exc, openai.APIConnectionError):
            return "error", backoff
        if isinstance(exc, openai.RateLimitError):
            hinted = retry_after(exc.response.headers)
            return "rate_limited", min(self.endpoint.max_backoff_s, hinted) if hinted is not None else backoff
        if isinstance(exc, openai.APIStatusError) and (exc.status_code >= 500 or exc.status_code in _RETRYABLE_STATUS):
            return "error", backoff
        return "error", None

    def _attempted(self, outcome: str, t0: float) -> None:
        if self._on_attempt is not None:
            self._on_attempt(outcome, time.perf_counter() - t0)


_RESPONSE_FORMAT: Mapping[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "verdict", "schema": dict(VERDICT_SCHEMA), "strict": True},
}


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds form), or None."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: rare for APIs, fall back to backoff
        if seconds >= 0:
            return seconds
    return None


def _correction(exc: ValidationError) -> str:
    return (
        "Your answer was not valid: "
        f"{_first_error(exc)}. Answer again with only a JSON object "
        '{"reasoning": "...", "score": <number from 0 to 1>}.'
    )


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def _describe(exc: openai.APIError) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}: {exc.message}"[:300] if status else f"{type(exc).__name__}: {exc.message}"[:300]


def _failed(outcome: str, message: str, tally: _Tally) -> JudgeCallError:
    return JudgeCallError(outcome, message, tally.input_tokens, tally.output_tokens)
