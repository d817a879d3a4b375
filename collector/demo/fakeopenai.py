"""A scripted, OpenAI-compatible HTTP server for tests and demos (no network, no model).

:class:`FakeOpenAI` serves ``POST /v1/chat/completions`` (plain and streamed as SSE) and ``POST
/v1/responses`` (plain and streamed) on 127.0.0.1, on a free port. Every answer comes from a
*script*: a list of turns, each a tool call, a final text answer, a ``content_filter`` finish, a
refusal or an HTTP error. A request picks its script with a marker anywhere in its messages,
``[[scenario:NAME]]`` or ``[[scenario:NAME#TAG]]`` (the tag tells repeated runs of one script apart
in the request log), or out of band with the HTTP header ``X-Vigil-Scenario: NAME#TAG``
(:data:`HEADER`; the same syntax without the brackets), which wins over a marker in the content: a
client that must not show its script to whoever reads the conversation (the ``vigil demo`` fleet,
whose runs reviewers judge blind) sends the header, and its messages stay clean. It picks its turn
with the number of assistant turns already in the conversation. So concurrent conversations are
deterministic, and the server keeps no per-conversation state. After the last turn the last one
repeats, which makes an endless tool-calling loop a one-turn script. A script registered with
``sequential=True`` picks its turn by the number of requests already served for its ``NAME#TAG``
instead, so a client that retries the same conversation (after a 429, a timeout) walks through the
script.

A **conversation marker** names one script per user message, comma-separated:
``[[scenario:NAME1,NAME2,NAME3#TAG]]`` (in the system message, say, which stays the same while the
history grows), or the header ``X-Vigil-Scenario: NAME1,NAME2,NAME3#TAG``. The request's *n*-th user
message plays script *n* (the last one from there on), and its turn is the number of assistant turns
since that last user message: so each turn of a multi-turn chat that resends its history gets its
own script, still without server state.

Turns can be slow (``delay_s``: the answer waits, for client timeouts) and an
:class:`ErrorTurn` can carry ``retry_after`` (a ``Retry-After`` header, as on a 429). A
judge's structured answer is a :class:`TextTurn` whose text is the JSON (or not: malformed).

Token usage is predictable: turn ``i`` reports ``100 + 10 * i`` prompt tokens and
``20 + 5 * i`` completion tokens unless the turn says otherwise. Every served request is
recorded (:meth:`FakeOpenAI.served`, or ``GET /_fake/requests`` from another process), and
scripts can be registered over HTTP with ``PUT /_fake/scripts/NAME``.

Example::

    with FakeOpenAI({"weather": [ToolCallTurn.of("get_weather", city="Paris"),
                                 TextTurn("Sunny.")]}) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="test")
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "HEADER",
    "ContentFilterTurn",
    "ErrorTurn",
    "FakeOpenAI",
    "RefusalTurn",
    "Served",
    "TextTurn",
    "ToolCall",
    "ToolCallTurn",
    "Turn",
    "Usage",
    "function_tools",
    "turn_from_json",
    "turn_to_json",
]

MARKER: Final = re.compile(r"\[\[scenario:([A-Za-z0-9_.\-]+(?:,[A-Za-z0-9_.\-]+)*)(?:#([A-Za-z0-9_.\-]+))?\]\]")
"""The scenario marker: ``[[scenario:NAME]]``, ``[[scenario:NAME#TAG]]``, or a conversation's
``[[scenario:NAME1,NAME2#TAG]]`` (one script per user message)."""

HEADER: Final = "X-Vigil-Scenario"
"""The request header that names the script out of band: ``NAME``, ``NAME#TAG`` or ``NAME1,NAME2#TAG``
(a marker's inside); when present and well-formed it wins over any marker in the content."""

Json: TypeAlias = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts one answer reports."""

    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def for_turn(cls, index: int) -> Usage:
        """The default usage of turn ``index`` (0-based): 100 + 10 i prompt, 20 + 5 i completion."""
        return cls(100 + 10 * index, 20 + 5 * index)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model asks for; ``arguments`` is serialised as JSON."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCallTurn:
    """An assistant turn that asks for one or more tool calls (finish reason ``tool_calls``)."""

    calls: tuple[ToolCall, ...]
    usage: Usage | None = None

    @classmethod
    def of(cls, name: str, **arguments: Any) -> ToolCallTurn:
        """A turn with the single call ``name(**arguments)``."""
        return cls((ToolCall(name, arguments),))


@dataclass(frozen=True, slots=True)
class TextTurn:
    """A final assistant answer (finish reason ``stop``)."""

    text: str
    usage: Usage | None = None
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ContentFilterTurn:
    """An answer cut by the provider's content filter (``content_filter`` / ``incomplete``)."""

    text: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class RefusalTurn:
    """The model declines to answer: the provider withholds the content and sends a refusal.

    Chat Completions: ``message.refusal`` is the text, ``message.content`` is null, the finish
    reason is ``stop`` (streamed as ``delta.refusal`` pieces). Responses API: a ``completed``
    response whose output message has one ``refusal`` content part instead of ``output_text``.
    """

    refusal: str = "I'm sorry, but I can't help with that request."
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class ErrorTurn:
    """An HTTP error answer in OpenAI's error format; no tokens are reported."""

    status: int = 400
    message: str = "The response was filtered due to the prompt triggering content management policy."
    code: str = "content_filter"
    usage: Usage | None = None
    retry_after: float | None = None
    delay_s: float = 0.0


Turn: TypeAlias = ToolCallTurn | TextTurn | ContentFilterTurn | ErrorTurn | RefusalTurn
"""One scripted model answer."""

_DEFAULT_SCRIPT: Final[tuple[Turn, ...]] = (TextTurn("Hello from FakeOpenAI."),)


@dataclass(frozen=True, slots=True)
class Served:
    """One request the server answered, as recorded for assertions.

    Attributes:
        scenario: script name (``""`` when the request had no marker nor :data:`HEADER`).
        tag: the marker's (or header's) tag (``""`` when absent).
        turn: 0-based turn index chosen from the conversation.
        api: ``chat.completions`` or ``responses``.
        stream: whether the answer was streamed.
        kind: ``tool_calls``, ``text``, ``content_filter``, ``refusal`` or ``error``.
        tool_calls: names of the tools the answer asked for.
        prompt_tokens: prompt tokens reported to the client (0 for errors).
        completion_tokens: completion tokens reported to the client (0 for errors).
        usage_reported: whether the client was sent the usage (streams only on request).
        model: the model the request named.
        response_format: the ``type`` of the request's ``response_format`` (``""`` when absent).
    """

    scenario: str
    tag: str
    turn: int
    api: str
    stream: bool
    kind: str
    tool_calls: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool
    model: str
    response_format: str = ""

    @property
    def key(self) -> str:
        """``NAME#TAG``, or ``NAME`` without a tag: what one run of a script is filed under."""
        return f"{self.scenario}#{self.tag}" if self.tag else self.scenario


def turn_to_json(turn: Turn) -> Json:
    """Serialise ``turn`` for ``PUT /_fake/scripts/NAME`` (inverse of :func:`turn_from_json`)."""
    data = asdict(turn)
    data["type"] = type(turn).__name__
    return data


def turn_from_json(data: Mapping[str, Any]) -> Turn:
    """Build a turn from its JSON form.

    Raises:
        ValueError: unknown ``type`` or malformed fields.
    """
    fields = {k: v for k, v in data.items() if k != "type"}
    if fields.get("usage") is not None:
        fields["usage"] = Usage(**fields["usage"])
    kind = str(data.get("type"))
    try:
        if kind == "ToolCallTurn":
            fields["calls"] = tuple(ToolCall(c["name"], c.get("arguments", {})) for c in fields["calls"])
            return ToolCallTurn(**fields)
        if kind in _SIMPLE_TURNS:
            return _SIMPLE_TURNS[kind](**fields)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"malformed {kind} turn: {exc}") from exc
    raise ValueError(f"unknown turn type {kind!r}")


_SIMPLE_TURNS: Final[Mapping[str, type[TextTurn | ContentFilterTurn | ErrorTurn | RefusalTurn]]] = {
    "TextTurn": TextTurn,
    "ContentFilterTurn": ContentFilterTurn,
    "ErrorTurn": ErrorTurn,
    "RefusalTurn": RefusalTurn,
}


class FakeOpenAI:
    """A scripted OpenAI-compatible server on ``127.0.0.1`` and a free port.

    Args:
        scripts: script name -> turns. More can be added with :meth:`register`.
        port: port to bind (0 picks a free one).

    Threading: requests are served on their own threads; :meth:`register` and
    :meth:`served` may be called from any thread.
    """

    def __init__(self, scripts: Mapping[str, Sequence[Turn]] | None = None, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, tuple[Turn, ...]] = {}
        self._sequential: set[str] = set()
        self._requests_by_key: dict[str, int] = {}
        self._served: list[Served] = []
        self._counter = 0
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for name, turns in (scripts or {}).items():
            self.register(name, turns)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, for ``OpenAI(base_url=...)``.

        Raises:
            RuntimeError: the server is not started.
        """
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def port(self) -> int:
        """The bound port. Raises :class:`RuntimeError` before :meth:`start`."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return int(self._server.server_address[1])

    def start(self) -> FakeOpenAI:
        """Bind and serve in a daemon thread; returns ``self``. Idempotent."""
        if self._server is None:
            self._server = _Server(("127.0.0.1", self._port), _handler_for(self))
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.05,), name="fakeopenai", daemon=True
            )
            self._thread.start()
        return self

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop serving and close the socket, waiting up to ``timeout_s``. Idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout_s)
            self._server = None
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def register(self, name: str, turns: Sequence[Turn], *, sequential: bool = False) -> None:
        """Add or replace script ``name``.

        With ``sequential`` the turn is the number of requests already served for the
        request's ``NAME#TAG`` (retries advance the script), not the conversation's turn.

        Raises:
            ValueError: ``turns`` is empty or ``name`` is not a valid marker name.
        """
        if not turns:
            raise ValueError(f"script {name!r} has no turns")
        if "," in name or not MARKER.fullmatch(f"[[scenario:{name}]]"):
            raise ValueError(f"script name {name!r} must match [A-Za-z0-9_.-]+")
        with self._lock:
            self._scripts[name] = tuple(turns)
            if sequential:
                self._sequential.add(name)
            else:
                self._sequential.discard(name)

    def served(self, key: str | None = None) -> list[Served]:
        """Requests answered so far, oldest first; only those of ``key`` (``NAME`` or ``NAME#TAG``)."""
        with self._lock:
            return [s for s in self._served if key is None or key in (s.key, s.scenario)]

    def answer(
        self, path: str, body: Mapping[str, Any], scenario_header: str | None = None
    ) -> tuple[int, Json | Iterator[bytes]]:
        """Answer one API request: ``(status, JSON body)`` or ``(200, SSE byte chunks)``.

        ``scenario_header``: the request's :data:`HEADER` value, if any (it wins over a content marker).
        This is the whole behaviour of the server without HTTP, for direct use in tests.
        """
        api = "responses" if path.rstrip("/").endswith("/responses") else "chat.completions"
        scenario, tag = _from_header(scenario_header) or _find_marker(body)
        conversation = body.get("messages") if api == "chat.completions" else body.get("input")
        if scenario and "," in scenario:  # a conversation marker: the script of the latest user message
            scripts, conversation = _latest_exchange(scenario.split(","), conversation)
            scenario = scripts
        index = _assistant_turns(conversation)
        with self._lock:
            script = self._scripts.get(scenario) if scenario else _DEFAULT_SCRIPT
            self._counter += 1
            number = self._counter
            if scenario in self._sequential:
                key = f"{scenario}#{tag}" if tag else str(scenario)
                index = self._requests_by_key.get(key, 0)
                self._requests_by_key[key] = index + 1
        if script is None:
            return 404, _error_body(f"unknown scenario {scenario!r}", "unknown_scenario")
        turn = script[min(index, len(script) - 1)]
        usage = turn.usage or Usage.for_turn(index)
        stream = bool(body.get("stream"))
        reported = not stream or api == "responses" or _wants_stream_usage(body)
        failed = isinstance(turn, ErrorTurn)
        served = Served(
            scenario=scenario or "",
            tag=tag,
            turn=index,
            api=api,
            stream=stream,
            kind=_kind(turn),
            tool_calls=tuple(c.name for c in turn.calls) if isinstance(turn, ToolCallTurn) else (),
            prompt_tokens=0 if failed else usage.prompt_tokens,
            completion_tokens=0 if failed else usage.completion_tokens,
            usage_reported=reported and not failed,
            model=str(body.get("model", "")),
            response_format=_response_format(body),
        )
        with self._lock:
            self._served.append(served)
        delay = getattr(turn, "delay_s", 0.0)
        if delay > 0:
            time.sleep(delay)  # a slow model: each request has its own thread
        if isinstance(turn, ErrorTurn):
            error = _HeadedJson(_error_body(turn.message, turn.code))
            if turn.retry_after is not None:
                error.headers["Retry-After"] = f"{turn.retry_after:g}"
            return turn.status, error
        reply = _Reply(number, index, str(body.get("model", "fake-model")), turn, usage)
        if api == "responses":
            return 200, (reply.response_events() if stream else reply.response())
        return 200, (reply.chat_chunks(reported) if stream else reply.chat_completion())


def _kind(turn: Turn) -> str:
    kinds = {ToolCallTurn: "tool_calls", TextTurn: "text", ContentFilterTurn: "content_filter", RefusalTurn: "refusal"}
    return kinds.get(type(turn), "error")


def _from_header(value: str | None) -> tuple[str, str] | None:
    """The script names and tag of a :data:`HEADER` value; None when absent or malformed."""
    found = MARKER.fullmatch(f"[[scenario:{value.strip()}]]") if value else None
    return (found.group(1), found.group(2) or "") if found else None


def _find_marker(body: Mapping[str, Any]) -> tuple[str | None, str]:
    """The first scenario marker in the request's messages/input/instructions."""
    found = MARKER.search(json.dumps([body.get("messages"), body.get("input"), body.get("instructions")]))
    return (found.group(1), found.group(2) or "") if found else (None, "")


def _latest_exchange(names: Sequence[str], conversation: object) -> tuple[str, list[Any]]:
    """For a conversation marker: the script of the conversation's latest user message (the *n*-th user
    message plays ``names[n - 1]``, the last name beyond) and the items after that message."""
    items = conversation if isinstance(conversation, list) else []
    users = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get("role") == "user"]
    if not users:
        return names[0], items
    return names[min(len(users), len(names)) - 1], items[users[-1] + 1 :]


def _assistant_turns(conversation: object) -> int:
    """How many assistant turns precede this request.

    A turn is an assistant message, or a run of adjacent Responses-API ``function_call`` /
    assistant items (one turn may ask for several tools).
    """
    if not isinstance(conversation, list):
        return 0
    turns, in_turn = 0, False
    for item in conversation:
        is_assistant = isinstance(item, dict) and (
            item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
        )
        if is_assistant and not in_turn:
            turns += 1
        in_turn = is_assistant and isinstance(item, dict) and "role" not in item
    return turns


def _response_format(body: Mapping[str, Any]) -> str:
    fmt = body.get("response_format")
    return str(fmt.get("type", "")) if isinstance(fmt, dict) else ""


def _wants_stream_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


class _HeadedJson(dict[str, Any]):
    """A JSON body that also carries HTTP headers (``Retry-After`` of an error turn)."""

    def __init__(self, data: Json) -> None:
        super().__init__(data)
        self.headers: dict[str, str] = {}


def _error_body(message: str, code: str) -> Json:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


@dataclass(frozen=True, slots=True)
class _Reply:
    """Renders one scripted turn in each wire format."""

    number: int
    index: int
    model: str
    turn: Turn
    usage: Usage

    @property
    def finish_reason(self) -> str:
        if isinstance(self.turn, ToolCallTurn):
            return "tool_calls"
        return "content_filter" if isinstance(self.turn, ContentFilterTurn) else "stop"

    @property
    def text(self) -> str | None:
        return self.turn.text if isinstance(self.turn, TextTurn | ContentFilterTurn) else None

    @property
    def refusal(self) -> str | None:
        return self.turn.refusal if isinstance(self.turn, RefusalTurn) else None

    def call_ids(self) -> list[tuple[str, ToolCall]]:
        calls = self.turn.calls if isinstance(self.turn, ToolCallTurn) else ()
        return [(f"call_{self.number}_{self.index}_{k}", c) for k, c in enumerate(calls)]

    def chat_usage(self) -> Json:
        u = self.usage
        return {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        }

    def chat_completion(self) -> Json:
        """A ``chat.completion`` object."""
        tool_calls = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for cid, c in self.call_ids()
        ]
        message: Json = {"role": "assistant", "content": self.text, "refusal": self.refusal}
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason, "logprobs": None}
        return {**self._chat_head("chat.completion"), "choices": [choice], "usage": self.chat_usage()}

    def _chat_head(self, obj: str) -> Json:
        return {
            "id": f"chatcmpl-fake-{self.number}",
            "object": obj,
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": "fp_fake",
        }

    def chat_chunks(self, with_usage: bool) -> Iterator[bytes]:
        """``chat.completion.chunk`` SSE events, ending with ``[DONE]``."""

        def chunk(delta: Json, finish: str | None = None, **extra: Any) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return _sse({**self._chat_head("chat.completion.chunk"), "choices": [choice], **extra})

        yield chunk({"role": "assistant", "content": "" if self.text is not None else None})
        for piece in _pieces(self.text or ""):
            yield chunk({"content": piece})
        for piece in _pieces(self.refusal or ""):
            yield chunk({"refusal": piece})
        for k, (cid, call) in enumerate(self.call_ids()):
            head = {
                "index": k,
                "id": cid,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            yield chunk({"tool_calls": [{"index": k, "function": {"arguments": json.dumps(call.arguments)}}]})
        yield chunk({}, self.finish_reason)
        if with_usage:
            yield _sse({**self._chat_head("chat.completion.chunk"), "choices": [], "usage": self.chat_usage()})
        yield b"data: [DONE]\n\n"

    def response(self) -> Json:
        """A Responses-API ``response`` object (``incomplete`` for a content filter)."""
        filtered = isinstance(self.turn, ContentFilterTurn)
        u = self.usage
        return {
            "id": f"resp_fake_{self.number}",
            "object": "response",
            "created_at": int(time.time()),
            "model": self.model,
            "status": "incomplete" if filtered else "completed",
            "incomplete_details": {"reason": "content_filter"} if filtered else None,
            "output": self.output_items(),
            "error": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "top_p": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": {
                "input_tokens": u.prompt_tokens,
                "output_tokens": u.completion_tokens,
                "total_tokens": u.prompt_tokens + u.completion_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    def output_items(self) -> list[Json]:
        items: list[Json] = [
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
                "status": "completed",
            }
            for cid, c in self.call_ids()
        ]
        if self.refusal:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_fake_{self.number}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "refusal", "refusal": self.refusal}],
                }
            )
        if self.text:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_fake_{self.number}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": self.text, "annotations": []}],
                }
            )
        return items

    def response_events(self) -> Iterator[bytes]:
        """Responses-API SSE events: created, one added/done pair per item, completed/incomplete."""
        final = self.response()
        seq = iter(range(1_000_000))
        start = {**final, "status": "in_progress", "output": [], "incomplete_details": None, "usage": None}
        yield _sse({"type": "response.created", "sequence_number": next(seq), "response": start}, "response.created")
        for i, item in enumerate(final["output"]):
            for name in ("response.output_item.added", "response.output_item.done"):
                event = {"type": name, "sequence_number": next(seq), "output_index": i, "item": item}
                yield _sse(event, name)
        last = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield _sse({"type": last, "sequence_number": next(seq), "response": final}, last)


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(data: Json, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class _Server(ThreadingHTTPServer):
    """Serves each connection on a daemon thread; clients hanging up are not errors."""

    daemon_threads = True
    request_queue_size = 128  # the stdlib's 5 refuses connections under a burst of concurrent clients

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore connections the client closed; report anything else as the stdlib does."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    """A request-handler class bound to ``fake``."""

    class Handler(_Handler):
        server_fake = fake

    return Handler


class _Handler(BaseHTTPRequestHandler):
    """HTTP glue: API routes, the request log, and script registration."""

    server_fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: headers and body are separate writes; with Nagle on, the body of every
    # keep-alive answer waited ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests read the request log instead."""

    def do_POST(self) -> None:
        """``/v1/chat/completions`` and ``/v1/responses``."""
        path = urlsplit(self.path).path
        if not path.endswith(("/chat/completions", "/responses")):
            self._json(404, _error_body(f"no route {path}", "not_found"))
            return
        try:
            body = self._body()
        except ValueError as exc:
            self._json(400, _error_body(f"invalid JSON: {exc}", "invalid_json"))
            return
        status, answer = self.server_fake.answer(path, body, self.headers.get(HEADER))
        if isinstance(answer, dict):
            self._json(status, answer, getattr(answer, "headers", None))
        else:
            self._stream(answer)

    def do_PUT(self) -> None:
        """``/_fake/scripts/NAME`` with ``{"turns": [...], "sequential": false}`` registers a script."""
        path = urlsplit(self.path).path
        name = path.removeprefix("/_fake/scripts/")
        try:
            body = self._body()
            turns = [turn_from_json(t) for t in body["turns"]]
            self.server_fake.register(name, turns, sequential=bool(body.get("sequential")))
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, _error_body(str(exc), "invalid_script"))
            return
        self._json(200, {"registered": name, "turns": len(turns)})

    def do_GET(self) -> None:
        """``/_fake/requests[?scenario=KEY]`` (the request log) and ``/v1/models``."""
        url = urlsplit(self.path)
        if url.path == "/_fake/requests":
            key = parse_qs(url.query).get("scenario", [None])[0]
            self._json(200, {"requests": [{**asdict(s), "key": s.key} for s in self.server_fake.served(key)]})
        elif url.path.endswith("/models"):
            self._json(
                200,
                {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "vigil"}]},
            )
        else:
            self._json(404, _error_body(f"no route {url.path}", "not_found"))

    def _body(self) -> Json:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.loads(raw or b"{}")
        if not isinstance(data, dict):
            raise ValueError("body must be a JSON object")
        return data

    def _json(self, status: int, data: Json, headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a :class:`FakeOpenAI` from the command line until SIGTERM or SIGINT.

    ``python -m collector.demo.fakeopenai --serve --port-file PATH`` binds a free port (or
    ``--port N``), writes the port number to ``PATH`` (atomically, so a poller never reads a
    partial number) and serves with no scripts; other processes register theirs with
    ``PUT /_fake/scripts/NAME`` and read the log at ``GET /_fake/requests``.
    """
    parser = argparse.ArgumentParser(prog="python -m collector.demo.fakeopenai", description="Scripted OpenAI server.")
    parser.add_argument("--serve", action="store_true", help="serve until SIGTERM or SIGINT")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    parser.add_argument("--port-file", type=Path, help="write the bound port to this file")
    args = parser.parse_args(argv)
    if not args.serve:
        parser.error("nothing to do: pass --serve")
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server threads start: they inherit the mask
    with FakeOpenAI(port=args.port) as fake:
        if args.port_file is not None:
            args.port_file.parent.mkdir(parents=True, exist_ok=True)
            partial = args.port_file.with_name(args.port_file.name + ".partial")
            partial.write_text(f"{fake.port}\n")
            os.replace(partial, args.port_file)
        print(f"FakeOpenAI serving {fake.base_url}", file=sys.stderr, flush=True)
        signal.sigwait(stop)


if __name__ == "__main__":
    main()


def function_tools(specs: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Chat Completions ``tools`` of functions of one string argument: ``(name, argument, description)`` each."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": doc,
                "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
            },
        }
        for name, arg, doc in specs
    ]
