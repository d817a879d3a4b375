"""Tests for scorers.judge.client against the local fake OpenAI-compatible server (no network)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from collector.demo.fakeopenai import ErrorTurn, FakeOpenAI, TextTurn, Usage
from scorers.errors import JudgeCallError
from scorers.judge.client import JudgeClient, retry_after
from scorers.judge.config import JudgeConfig
from scorers.judge.rubrics import BUILTIN_RUBRICS, JudgeInput, render
from scorers.model import Run

GOOD = TextTurn(json.dumps({"reasoning": "Supported by the lookup.", "score": 0.8}), Usage(300, 40))


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A started fake server."""
    with FakeOpenAI() as server:
        yield server


class Waits:
    """A ``wait`` that records the requested delays without sleeping."""

    def __init__(self, stop: bool = False) -> None:
        self.delays: list[float] = []
        self.stop = stop

    def __call__(self, seconds: float) -> bool:
        self.delays.append(seconds)
        return self.stop


def _request(scenario: str) -> JudgeInput:
    run = Run(trace_id="a" * 32, final_output=f"[[scenario:{scenario}]] The answer.")
    return render(run, BUILTIN_RUBRICS["groundedness"])


def _client(fake: FakeOpenAI, **options: float) -> JudgeClient:
    endpoint = {"rubric": "groundedness", "model": "judge-model", "base_url": fake.base_url, **options}
    return JudgeClient(JudgeConfig.model_validate(endpoint), "test")


class TestVerdicts:
    """A normal verdict is asked for with a JSON schema and validated."""

    def test_normal_verdict(self, fake: FakeOpenAI) -> None:
        """Score, reasoning, usage and one attempt; the request named the model and asked for json_schema."""
        fake.register("good", [GOOD])
        outcomes: list[str] = []
        client = _client(fake)
        client._on_attempt = lambda outcome, _s: outcomes.append(outcome)
        judgement = client.judge(_request("good"), Waits())
        assert 0.8 == judgement.verdict.score
        assert "Supported by the lookup." == judgement.verdict.reasoning
        assert (300, 40, 1) == (judgement.input_tokens, judgement.output_tokens, judgement.attempts)
        (served,) = fake.served("good")
        assert ("judge-model", "json_schema") == (served.model, served.response_format)
        assert ["ok"] == outcomes

    def test_malformed_once_is_asked_again(self, fake: FakeOpenAI) -> None:
        """A malformed answer is retried once with a correction; the second answer counts, tokens add up."""
        fake.register("fixable", [TextTurn("I think it is fine!", Usage(300, 10)), GOOD])
        judgement = _client(fake).judge(_request("fixable"), Waits())
        assert 0.8 == judgement.verdict.score
        assert (600, 50, 2) == (judgement.input_tokens, judgement.output_tokens, judgement.attempts)
        assert [0, 1] == [s.turn for s in fake.served("fixable")]  # the retry carried the bad answer

    @pytest.mark.parametrize(
        "bad",
        [
            "not json at all",
            '{"reasoning": "x", "score": 1.7}',
            '{"score": 0.5}',
            '{"reasoning": "x", "score": "high"}',
        ],
    )
    def test_malformed_twice_is_an_error(self, fake: FakeOpenAI, bad: str) -> None:
        """Not JSON, out of range, missing or mistyped fields: twice means a malformed error, tokens kept."""
        fake.register("broken", [TextTurn(bad, Usage(100, 5))])
        with pytest.raises(JudgeCallError) as info:
            _client(fake).judge(_request("broken"), Waits())
        assert "malformed" == info.value.outcome
        assert (200, 10) == (info.value.input_tokens, info.value.output_tokens)
        assert 2 == len(fake.served("broken"))


class TestRetries:
    """429 with Retry-After, timeouts, server errors."""

    def test_429_honours_retry_after(self, fake: FakeOpenAI) -> None:
        """The wait before the retry is the server's Retry-After; then the verdict arrives."""
        fake.register(
            "busy", [ErrorTurn(429, "slow down", "rate_limit_exceeded", retry_after=7), GOOD], sequential=True
        )
        waits = Waits()
        judgement = _client(fake).judge(_request("busy"), waits)
        assert [7.0] == waits.delays
        assert (0.8, 2) == (judgement.verdict.score, judgement.attempts)

    def test_retry_after_is_capped(self, fake: FakeOpenAI) -> None:
        """A huge Retry-After is capped at max_backoff_s."""
        fake.register(
            "busy", [ErrorTurn(429, "slow down", "rate_limit_exceeded", retry_after=3600), GOOD], sequential=True
        )
        waits = Waits()
        _client(fake, max_backoff_s=5).judge(_request("busy"), waits)
        assert [5.0] == waits.delays

    def test_429_past_the_retries(self, fake: FakeOpenAI) -> None:
        """Rate-limited on every attempt: max_retries + 1 requests, then outcome rate_limited."""
        fake.register("busy", [ErrorTurn(429, "slow down", "rate_limit_exceeded")])
        waits = Waits()
        with pytest.raises(JudgeCallError) as info:
            _client(fake, max_retries=2).judge(_request("busy"), waits)
        assert "rate_limited" == info.value.outcome
        assert 3 == len(fake.served("busy"))
        assert 2 == len(waits.delays)  # exponential backoff without a Retry-After

    def test_timeout(self, fake: FakeOpenAI) -> None:
        """A slow server times out; after the retries the outcome is timeout."""
        fake.register("slow", [TextTurn(GOOD.text, delay_s=3.0)])
        with pytest.raises(JudgeCallError) as info:
            _client(fake, timeout_s=0.3, max_retries=1).judge(_request("slow"), Waits())
        assert "timeout" == info.value.outcome
        assert 2 == len(fake.served("slow"))

    def test_timeout_then_success(self, fake: FakeOpenAI) -> None:
        """A slow first answer is retried and the second one is used."""
        fake.register("flaky", [TextTurn(GOOD.text, delay_s=3.0), GOOD], sequential=True)
        judgement = _client(fake, timeout_s=0.5).judge(_request("flaky"), Waits())
        assert 2 == judgement.attempts

    def test_server_error_is_retried_client_error_is_not(self, fake: FakeOpenAI) -> None:
        """500 is retried; 400 (bad request, bad model) gives up at once."""
        fake.register("e500", [ErrorTurn(500, "oops", "server_error"), GOOD], sequential=True)
        assert 0.8 == _client(fake).judge(_request("e500"), Waits()).verdict.score
        fake.register("e400", [ErrorTurn(400, "bad model", "model_not_found")])
        with pytest.raises(JudgeCallError) as info:
            _client(fake).judge(_request("e400"), Waits())
        assert "error" == info.value.outcome
        assert 1 == len(fake.served("e400"))

    def test_shutdown_during_a_wait_gives_up(self, fake: FakeOpenAI) -> None:
        """A wait that reports shutdown ends the attempt at once."""
        fake.register(
            "busy", [ErrorTurn(429, "slow down", "rate_limit_exceeded", retry_after=1), GOOD], sequential=True
        )
        with pytest.raises(JudgeCallError):
            _client(fake).judge(_request("busy"), Waits(stop=True))
        assert 1 == len(fake.served("busy"))


class TestRetryAfterHeader:
    """Parsing of Retry-After and retry-after-ms."""

    def test_forms(self) -> None:
        """Milliseconds win; seconds; an HTTP date or garbage gives None."""
        assert 0.25 == retry_after({"retry-after-ms": "250", "retry-after": "9"})
        assert 9.0 == retry_after({"retry-after": "9"})
        assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
        assert retry_after({}) is None
