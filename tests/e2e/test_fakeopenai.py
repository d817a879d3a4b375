"""The scripted OpenAI-compatible server, driven by the real ``openai`` client."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from collector.demo.fakeopenai import (
    HEADER,
    ContentFilterTurn,
    ErrorTurn,
    FakeOpenAI,
    RefusalTurn,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    Usage,
    turn_from_json,
    turn_to_json,
)

WEATHER: list[Turn] = [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A started server with a weather script, a filtered one and an error one."""
    scripts: dict[str, list[Turn]] = {
        "weather": WEATHER,
        "filtered": [ContentFilterTurn("I can")],
        "broken": [ErrorTurn(400)],
    }
    with FakeOpenAI(scripts) as server:
        yield server


@pytest.fixture
def client(fake: FakeOpenAI) -> openai.OpenAI:
    """An OpenAI client pointed at ``fake`` that never retries."""
    return openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0)


def _tool_reply(first: Any) -> list[dict[str, Any]]:
    call = first.choices[0].message.tool_calls[0]
    return [
        {"role": "user", "content": "[[scenario:weather#t]] hi"},
        first.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]


class TestChatCompletions:
    """``POST /v1/chat/completions`` follows the script turn by turn."""

    def test_turns_follow_the_conversation(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """The first request gets the tool call, the one after the tool result gets the answer."""
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "[[scenario:weather#t]] hi"}]
        )
        second = client.chat.completions.create(model="m", messages=_tool_reply(first))  # type: ignore[arg-type]
        assert "tool_calls" == first.choices[0].finish_reason
        calls: Any = first.choices[0].message.tool_calls
        assert {"city": "Paris"} == json.loads(calls[0].function.arguments)
        assert ("stop", "Sunny in Paris.") == (second.choices[0].finish_reason, second.choices[0].message.content)
        assert (100, 20, 110, 25) == (
            first.usage.prompt_tokens,  # type: ignore[union-attr]
            first.usage.completion_tokens,  # type: ignore[union-attr]
            second.usage.prompt_tokens,  # type: ignore[union-attr]
            second.usage.completion_tokens,  # type: ignore[union-attr]
        )
        assert [0, 1] == [s.turn for s in fake.served("weather#t")]

    def test_stream_reports_usage_only_on_request(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """A streamed answer assembles to the script and carries usage only with ``include_usage``."""
        messages: Any = [{"role": "user", "content": "[[scenario:filtered]]"}]
        with_usage = list(
            client.chat.completions.create(
                model="m", messages=messages, stream=True, stream_options={"include_usage": True}
            )
        )
        without = list(client.chat.completions.create(model="m", messages=messages, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in with_usage if c.choices)
        assert ("I can", "content_filter") == (text, [c for c in with_usage if c.choices][-1].choices[0].finish_reason)
        assert 100 == with_usage[-1].usage.prompt_tokens  # type: ignore[union-attr]
        assert all(c.usage is None for c in without)
        assert [True, False] == [s.usage_reported for s in fake.served("filtered")]

    def test_error_turn_is_an_http_error(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """An error turn answers with its status and OpenAI's error body."""
        with pytest.raises(openai.BadRequestError, match="content management policy"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "[[scenario:broken]]"}])
        assert ["error"] == [s.kind for s in fake.served("broken")]

    def test_unknown_scenario_is_404(self, client: openai.OpenAI) -> None:
        """A marker naming no script fails loudly."""
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "[[scenario:nope]]"}])

    def test_scenario_header_picks_the_script(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """``X-Vigil-Scenario`` names the script out of band (clean messages), wins over a content marker,
        and a malformed header falls back to the marker."""
        clean: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = client.chat.completions.create(model="m", messages=clean, extra_headers={HEADER: "weather#h1"})
        assert "tool_calls" == first.choices[0].finish_reason
        marked: Any = [{"role": "user", "content": "[[scenario:broken#h2]] hi"}]
        client.chat.completions.create(model="m", messages=marked, extra_headers={HEADER: "filtered#h2"})
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=marked, extra_headers={HEADER: "no such [name]"})
        assert [("weather", "h1", 0), ("filtered", "h2", 0), ("broken", "h2", 0)] == [
            (s.scenario, s.tag, s.turn) for s in fake.served() if s.tag in ("h1", "h2")
        ]

    def test_concurrent_conversations_are_independent(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """Many parallel first turns of one script all get turn 0."""

        def ask(i: int) -> str | None:
            r = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"[[scenario:weather#c{i}]]"}]
            )
            return r.choices[0].finish_reason

        with ThreadPoolExecutor(8) as pool:
            assert ["tool_calls"] * 16 == list(pool.map(ask, range(16)))


class TestResponses:
    """``POST /v1/responses`` renders the same scripts in the Responses format."""

    def test_function_call_then_text(self, client: openai.OpenAI) -> None:
        """Tool call first, then the answer once the call's output is in the input."""
        first = client.responses.create(model="m", input="[[scenario:weather]] go")
        call = first.output[0]
        follow: Any = [
            {"role": "user", "content": "[[scenario:weather]] go"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},  # type: ignore[union-attr]
        ]
        second = client.responses.create(model="m", input=follow)
        assert ("function_call", "Sunny in Paris.") == (call.type, second.output_text)

    def test_content_filter_is_incomplete(self, client: openai.OpenAI) -> None:
        """A filtered turn is ``incomplete`` with reason ``content_filter``, streamed or not."""
        plain = client.responses.create(model="m", input="[[scenario:filtered]]")
        with client.responses.stream(model="m", input="[[scenario:filtered]]") as stream:
            events = [e.type for e in stream]
        assert ("incomplete", "content_filter") == (plain.status, plain.incomplete_details.reason)  # type: ignore[union-attr]
        assert "response.incomplete" == events[-1]


class TestScripts:
    """Scripts round-trip through JSON and can be registered over HTTP."""

    def test_turns_round_trip(self) -> None:
        """``turn_from_json(turn_to_json(t)) == t`` for every kind of turn."""
        turns: list[Turn] = [
            ToolCallTurn((ToolCall("a", {"x": 1}), ToolCall("b")), Usage(1, 2)),
            TextTurn("t"),
            ContentFilterTurn(),
            ErrorTurn(500, "boom", "server_error"),
            RefusalTurn("no", Usage(3, 4)),
        ]
        assert turns == [turn_from_json(json.loads(json.dumps(turn_to_json(t)))) for t in turns]

    def test_register_over_http_and_read_the_log(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """``PUT /_fake/scripts/NAME`` adds a script; ``GET /_fake/requests`` lists what was served."""
        body = json.dumps({"turns": [turn_to_json(TextTurn("remote"))]}).encode()
        put = urllib.request.Request(f"http://127.0.0.1:{fake.port}/_fake/scripts/remote", body, method="PUT")
        urllib.request.urlopen(put, timeout=5).close()
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "[[scenario:remote]]"}]
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{fake.port}/_fake/requests?scenario=remote", timeout=5) as r:
            log = json.load(r)["requests"]
        assert ("remote", ["text"]) == (answer.choices[0].message.content, [e["kind"] for e in log])


class TestJudgeFeatures:
    """What the LLM-judge tests need: sequential scripts, Retry-After, slow answers, structured output."""

    def test_sequential_script_advances_per_request(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """The same conversation sent twice walks a sequential script; other tags have their own count."""
        fake.register(
            "seq", [ErrorTurn(429, "slow down", "rate_limit_exceeded", retry_after=3), TextTurn("ok")], sequential=True
        )
        messages: Any = [{"role": "user", "content": "[[scenario:seq#a]]"}]
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="m", messages=messages)
        assert "3" == info.value.response.headers["retry-after"]
        assert "ok" == client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "[[scenario:seq#b]]"}])

    def test_slow_turn_times_out_the_client(self, fake: FakeOpenAI) -> None:
        """A turn with delay_s answers late: a client with a shorter timeout gives up."""
        fake.register("slow", [TextTurn("late", delay_s=2.0)])
        impatient = openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0, timeout=0.2)
        with pytest.raises(openai.APITimeoutError):
            impatient.chat.completions.create(model="m", messages=[{"role": "user", "content": "[[scenario:slow]]"}])

    def test_response_format_is_recorded(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """The request's response_format type is in the log; the JSON text comes back as content."""
        fake.register("verdict", [TextTurn('{"reasoning": "r", "score": 1}')])
        fmt: Any = {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}}
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "[[scenario:verdict]]"}], response_format=fmt
        )
        assert {"reasoning": "r", "score": 1} == json.loads(reply.choices[0].message.content or "")
        assert "json_schema" == fake.served("verdict")[0].response_format

    def test_burst_of_concurrent_clients(self, fake: FakeOpenAI) -> None:
        """64 simultaneous connections are all served (listen backlog 128, not the stdlib's 5)."""

        def one(i: int) -> str | None:
            c = openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0, timeout=30)
            reply = c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {i}"}])
            c.close()
            return reply.choices[0].message.content

        with ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(one, range(64)))
        assert ["Hello from FakeOpenAI."] * 64 == answers

    def test_sequential_registration_over_http(self, fake: FakeOpenAI, client: openai.OpenAI) -> None:
        """``PUT /_fake/scripts/NAME`` accepts ``sequential``."""
        turns = [turn_to_json(TextTurn("first")), turn_to_json(TextTurn("second"))]
        body = json.dumps({"turns": turns, "sequential": True}).encode()
        put = urllib.request.Request(f"http://127.0.0.1:{fake.port}/_fake/scripts/remote2", body, method="PUT")
        urllib.request.urlopen(put, timeout=5).close()
        messages: Any = [{"role": "user", "content": "[[scenario:remote2]]"}]
        got = [
            client.chat.completions.create(model="m", messages=messages).choices[0].message.content for _ in range(2)
        ]
        assert ["first", "second"] == got


class TestRefusal:
    """A refusal turn: the provider withholds the answer and says why, in both APIs."""

    @pytest.fixture
    def refusing(self, fake: FakeOpenAI) -> FakeOpenAI:
        """``fake`` with a script whose only turn refuses."""
        fake.register("refuse", [RefusalTurn("I can't help with that.")])
        return fake

    def test_chat_refusal_has_no_content(self, refusing: FakeOpenAI, client: openai.OpenAI) -> None:
        """``message.refusal`` is the text, ``content`` is null, the finish reason is ``stop``."""
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "[[scenario:refuse]]"}])
        message = reply.choices[0].message
        assert ("I can't help with that.", None, "stop") == (
            message.refusal,
            message.content,
            reply.choices[0].finish_reason,
        )
        assert ["refusal"] == [s.kind for s in refusing.served("refuse")]
        assert 100 == refusing.served("refuse")[0].prompt_tokens

    def test_chat_refusal_streams_as_refusal_deltas(self, refusing: FakeOpenAI, client: openai.OpenAI) -> None:
        """Streamed, the refusal arrives in ``delta.refusal`` pieces and no content."""
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "[[scenario:refuse]]"}], stream=True
            )
        )
        refusal = "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices)
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert ("I can't help with that.", "") == (refusal, content)

    def test_responses_refusal_is_a_refusal_part(self, refusing: FakeOpenAI, client: openai.OpenAI) -> None:
        """The Responses API answer is ``completed`` with one message whose only part is a refusal."""
        plain = client.responses.create(model="m", input="[[scenario:refuse]]")
        with client.responses.stream(model="m", input="[[scenario:refuse]]") as stream:
            final = stream.get_final_response()
        for response in (plain, final):
            message: Any = response.output[0]
            assert ("completed", "message", "") == (response.status, message.type, response.output_text)
            assert [("refusal", "I can't help with that.")] == [(p.type, p.refusal) for p in message.content]


class TestServe:
    """``python -m collector.demo.fakeopenai --serve --port-file PATH``: the server Node drivers use."""

    def test_serves_over_http_until_sigterm(self, tmp_path: Path) -> None:
        """The port lands in the file (its folder created); scripts register over HTTP; SIGTERM exits 0."""
        port_file = tmp_path / "run" / "fake.port"
        command = [sys.executable, "-m", "collector.demo.fakeopenai", "--serve", "--port-file", str(port_file)]
        server = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 15
            while not port_file.exists() and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            admin = f"http://127.0.0.1:{int(port_file.read_text())}"
            body = json.dumps({"turns": [turn_to_json(TextTurn("served"))]}).encode()
            urllib.request.urlopen(
                urllib.request.Request(f"{admin}/_fake/scripts/cli", body, method="PUT"), timeout=5
            ).close()
            client = openai.OpenAI(base_url=f"{admin}/v1", api_key="test", max_retries=0)
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "[[scenario:cli#t]]"}]
            )
            with urllib.request.urlopen(f"{admin}/_fake/requests?scenario=cli%23t", timeout=5) as r:
                log = json.load(r)["requests"]
            assert ("served", ["cli#t"]) == (reply.choices[0].message.content, [e["key"] for e in log])
        finally:
            server.send_signal(signal.SIGTERM)
            _, stderr = server.communicate(timeout=10)
        assert (0, [f"FakeOpenAI serving {admin}/v1"]) == (server.returncode, stderr.decode().splitlines())
