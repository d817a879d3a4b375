"""What every e2e driver shares: arguments, the OTel pipeline, the fake model, the ground truth.

A driver is a small agent app instrumented by a third-party instrumentor. It runs a few
scenarios, each in its own trace, and writes what it *observed* (ground truth) as JSON, so
the e2e test can compare Vigil's derived fields against it. Usage::

    h = Harness("langgraph", "lg-weather-agent")
    h.register("lg_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny.")])
    with h.scenario("lg_normal", agent="weather_agent") as run:
        graph.invoke({"messages": [("user", run.marker + " weather?")]})
    h.finish()

Arguments (all optional): ``--endpoint http://127.0.0.1:4318`` (OTLP/HTTP base URL; no
export without it), ``--openai-base-url`` (a running :class:`FakeOpenAI`; a private one is
started without it), ``--out ground_truth.json``, ``--capture traces.json`` (the driver's own
spans as OTLP/JSON, for reference fixtures).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import inspect
import json
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.demo.fakeopenai import (
    ContentFilterTurn,
    ErrorTurn,
    FakeOpenAI,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    function_tools,
    turn_to_json,
)

API_KEY = "sk-vigil-e2e-fake"
"""The API key drivers hand to their clients; the fake server ignores it."""

SERVER_ERROR = ErrorTurn(500, "The server had an error while processing your request.", "server_error")
"""The model's answer in the ``*_http_500`` scenarios: OpenAI's own 500."""

TOOL_SPECS = function_tools((("get_weather", "city", "Current weather"), ("lookup_order", "order_id", "Order status")))
"""The two tools of :func:`tools` as Chat Completions ``tools``, for drivers that run their own loop."""


@dataclass
class RunTruth:
    """What a driver observed during one scenario (one trace); the e2e test's expectations.

    ``llm_calls`` and the token sums come from the fake server's request log for this run,
    ``tool_calls``/``tool_errors`` from the driver's own tool functions, and the three flags
    from what reached the caller (exceptions) or what the model answered (finish reasons).
    Tokens count only answers the app accepted: a driver lists in ``rejected_kinds`` the
    answer kinds its framework raises on before recording their usage; ``served_*_tokens``
    keep the fake server's full totals. ``session_id`` / ``user_id`` are the ids the driver itself
    gave the framework for a turn of a conversation (:class:`Conversation`; None for a lone run),
    ``turn`` the turn's index in it.
    """

    scenario: str
    agent: str
    key: str = ""
    marker: str = ""
    trace_id: str = ""
    root_span: str = ""
    llm_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    hit_max_iterations: bool = False
    safety_blocked: bool = False
    errored: bool = False
    exception: str | None = None
    finish_kinds: list[str] = field(default_factory=list)
    rejected_kinds: list[str] = field(default_factory=list)
    served_input_tokens: int = 0
    served_output_tokens: int = 0
    session_id: str | None = None
    user_id: str | None = None
    turn: int | None = None

    def tool(self, failed: bool = False) -> None:
        """Count one tool execution (and one error when ``failed``)."""
        self.tool_calls += 1
        self.tool_errors += int(failed)


_active: list[RunTruth] = []
"""The run of the scenario in progress (set by :meth:`Harness.scenario`)."""


def current() -> RunTruth:
    """The run of the scenario in progress: where a tool or a framework callback counts."""
    return _active[-1]


def tools(error: type[Exception] = ValueError) -> tuple[Callable[..., str], Callable[..., str]]:
    """The two tools every agent driver offers, counting into :func:`current`.

    ``get_weather(city)`` answers; ``lookup_order(order_id)`` fails with ``error`` (the type the
    driver's framework or loop expects from a failing tool). A driver wraps them in its
    framework's tool decorator where it has one; names and docstrings are the tools' schema.
    """

    def get_weather(city: str) -> str:
        """Return the current weather for a city."""
        current().tool()
        return f"It is 21 C and sunny in {city}."

    def lookup_order(order_id: str) -> str:
        """Return the status of an order."""
        current().tool(failed=True)
        raise error(f"order {order_id} not found")

    return get_weather, lookup_order


class _RootRecorder(SpanProcessor):
    """Records the trace id and name of every root span, in start order."""

    def __init__(self) -> None:
        self.roots: list[tuple[str, str]] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Keep ``span`` if it has no parent."""
        if span.parent is None:
            self.roots.append((format(span.context.trace_id, "032x"), span.name))


class Harness:
    """Arguments, tracer provider, fake-server access and ground truth of one driver process."""

    def __init__(self, driver: str, service_name: str, argv: Sequence[str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=f"Vigil e2e driver: {driver}")
        parser.add_argument("--endpoint", help="OTLP/HTTP base URL, e.g. http://127.0.0.1:4318")
        parser.add_argument("--openai-base-url", help="a running FakeOpenAI, e.g. http://127.0.0.1:PORT/v1")
        parser.add_argument("--out", type=Path, help="where to write the ground truth JSON")
        parser.add_argument("--capture", type=Path, help="where to write the spans as OTLP/JSON")
        self.args = parser.parse_args(argv)
        self.driver = driver
        self.service_name = service_name
        self.tag = uuid.uuid4().hex[:8]
        self.runs: list[RunTruth] = []
        self.sessions: list[SessionTruth] = []
        self._fake: FakeOpenAI | None = None
        if self.args.openai_base_url:
            self.base_url: str = self.args.openai_base_url.rstrip("/")
        else:
            self._fake = FakeOpenAI().start()
            self.base_url = self._fake.base_url
        self.memory = InMemorySpanExporter()
        self._roots = _RootRecorder()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(self._roots)
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        if self.args.endpoint:
            exporter = OTLPSpanExporter(endpoint=self.args.endpoint.rstrip("/") + "/v1/traces")
            self.provider.add_span_processor(BatchSpanProcessor(exporter))

    @property
    def admin_url(self) -> str:
        """The fake server's root URL (its ``/_fake/...`` endpoints)."""
        return self.base_url.removesuffix("/v1")

    def register(self, name: str, turns: Sequence[Turn], *, sequential: bool = False) -> None:
        """Register script ``name`` with the fake server (over HTTP, so any server works).

        ``sequential``: the turn served is the number of requests already served for the run
        (instead of one counted from the conversation's assistant messages).
        """
        script: dict[str, Any] = {"turns": [turn_to_json(t) for t in turns]}
        if sequential:
            script["sequential"] = True
        body = json.dumps(script).encode()
        request = urllib.request.Request(f"{self.admin_url}/_fake/scripts/{name}", body, method="PUT")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def served(self, key: str) -> list[dict[str, Any]]:
        """The fake server's log entries for run ``key`` (``NAME#TAG``)."""
        url = f"{self.admin_url}/_fake/requests?scenario={urllib.parse.quote(key)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            entries: list[dict[str, Any]] = json.load(response)["requests"]
        return entries

    @contextmanager
    def scenario(
        self, name: str, agent: str, expected: tuple[type[BaseException], ...] = (), *, key: str | None = None
    ) -> Iterator[RunTruth]:
        """Run one scenario: yields its :class:`RunTruth` (with ``.marker`` for the prompt).

        ``key``: the fake server's run key when several scenarios share one script (the turns of a
        :class:`Conversation`); the scenario then counts only the requests served while it ran.

        An exception of a type in ``expected`` is swallowed and recorded as having reached the
        caller (``errored``); any other exception propagates. Afterwards the run gets its trace
        id (the one root span started inside) and its LLM calls and tokens from the fake server.

        Raises:
            RuntimeError: the scenario did not start exactly one root span.
        """
        run = RunTruth(scenario=name, agent=agent, key=key or f"{name}#{self.tag}")
        run.marker = f"[[scenario:{run.key}]]"
        since = len(self.served(run.key)) if key else 0
        before = len(self._roots.roots)
        _active.append(run)
        try:
            yield run
        except expected as exc:
            run.errored = True
            run.exception = f"{type(exc).__module__}.{type(exc).__qualname__}"
        finally:
            _active.remove(run)
        roots = self._roots.roots[before:]
        if len(roots) != 1:
            raise RuntimeError(f"scenario {name} started {len(roots)} root spans: {roots}")
        run.trace_id, run.root_span = roots[0]
        self._add_served(run, since)
        self.runs.append(run)

    def _add_served(self, run: RunTruth, since: int = 0) -> None:
        entries = self.served(run.key)[since:]
        run.llm_calls = len(entries)
        reported = [e for e in entries if e["usage_reported"]]
        accepted = [e for e in reported if e["kind"] not in run.rejected_kinds]
        run.served_input_tokens = sum(e["prompt_tokens"] for e in reported)
        run.served_output_tokens = sum(e["completion_tokens"] for e in reported)
        run.input_tokens = sum(e["prompt_tokens"] for e in accepted)
        run.output_tokens = sum(e["completion_tokens"] for e in accepted)
        run.finish_kinds = [e["kind"] for e in entries]
        run.safety_blocked = run.safety_blocked or "content_filter" in run.finish_kinds

    def finish(self) -> None:
        """Flush and shut the tracer provider down, then write the ground truth and capture."""
        self.provider.force_flush()
        self.provider.shutdown()
        if self.args.out:
            truth: dict[str, Any] = {
                "driver": self.driver,
                "service_name": self.service_name,
                "runs": [asdict(r) for r in self.runs],
            }
            if self.sessions:
                truth["sessions"] = [asdict(s) for s in self.sessions]
            self.args.out.write_text(json.dumps(truth, indent=2) + "\n")
        if self.args.capture:
            self.args.capture.write_text(json.dumps(otlp_json(self.memory.get_finished_spans()), indent=1) + "\n")
        if self._fake is not None:
            self._fake.shutdown()
        for run in self.runs:
            print(json.dumps(asdict(run)), file=sys.stderr)


def drive(driver: str, service_name: str, *steps: Callable[[Harness], object]) -> None:
    """A driver's main: its :class:`Harness`, then each step with it in order (instrument, register the
    scripts, run the scenarios; a step that returns a coroutine has it run with ``asyncio.run``), then
    :meth:`Harness.finish`."""
    h = Harness(driver, service_name)
    for step in steps:
        result = step(h)
        if inspect.iscoroutine(result):
            asyncio.run(result)
    h.finish()


def global_provider(h: Harness) -> None:
    """A :func:`drive` step for frameworks that trace into OpenTelemetry's global tracer provider."""
    trace.set_tracer_provider(h.provider)


@dataclass
class SessionTruth:
    """What a driver scripted for one conversation: its ids, its turns' traces, its session signals.

    ``signals``: ``reask`` (indexes of turns where the user asks again, rephrased, what an earlier turn
    asked after it was answered), ``abandoned`` (the conversation ends right after a failed, blocked or
    cut-off turn), ``human_request`` (indexes of turns where the user asks for a human).
    """

    name: str
    agent: str
    session_id: str
    user_id: str | None
    traces: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=lambda: {"reask": [], "abandoned": False, "human_request": []})


class Conversation:
    """One scripted multi-turn conversation: each turn one scenario (one trace) of one shared script.

    The script (all the model's answers over the conversation, in order) is registered
    ``sequential``, so turn *k* is served the answers after those of turns before it whatever the
    history the framework resends; the marker (:attr:`marker`) goes once into the conversation (its
    system prompt or first message) and the framework's history carries it to every later request.
    Usage::

        c = Conversation(h, "lg_weather", "weather_agent", session_id="s-1", user_id="u-1", script=[...])
        with c.turn() as run:
            graph.invoke(..., {"configurable": {"thread_id": c.session_id}})
        with c.turn(reask=True) as run: ...
        c.end(abandoned=False)
    """

    def __init__(
        self,
        h: Harness,
        name: str,
        agent: str,
        *,
        session_id: str,
        user_id: str | None,
        script: Sequence[Turn],
    ) -> None:
        self.h = h
        self.name = name
        self.key = f"{name}#{h.tag}"
        self.marker = f"[[scenario:{self.key}]]"
        self.truth = SessionTruth(name, agent, session_id, user_id)
        h.register(name, script, sequential=True)
        h.sessions.append(self.truth)

    @property
    def session_id(self) -> str:
        """The id the driver gives the framework for this conversation."""
        return self.truth.session_id

    @property
    def user_id(self) -> str | None:
        """The id of the user the driver gives the framework, if the framework carries one."""
        return self.truth.user_id

    @contextmanager
    def turn(
        self, *, expected: tuple[type[BaseException], ...] = (), reask: bool = False, human: bool = False
    ) -> Iterator[RunTruth]:
        """One turn of the conversation (one trace); ``reask``/``human``: what the user does in it."""
        index = len(self.truth.traces)
        with self.h.scenario(f"{self.name}_t{index}", self.truth.agent, expected, key=self.key) as run:
            run.session_id, run.user_id, run.turn = self.truth.session_id, self.truth.user_id, index
            yield run
        self.truth.traces.append(self.h.runs[-1].trace_id)
        if reask:
            self.truth.signals["reask"].append(index)
        if human:
            self.truth.signals["human_request"].append(index)

    def end(self, *, abandoned: bool) -> None:
        """The conversation is over; ``abandoned``: it ended right after a failed, blocked or cut-off turn."""
        self.truth.signals["abandoned"] = abandoned

    def play(self, says: Sequence[Say], say: Callable[[str], object], *, abandoned: bool) -> None:
        """Run ``says`` as the conversation's turns (``say(text)`` runs the app once), then :meth:`end` it."""
        for s in says:
            with self.turn(expected=s.expected, reask=s.reask, human=s.human) as run:
                run.rejected_kinds = list(s.rejected_kinds)
                run.safety_blocked = s.safety_blocked
                say(s.text)
        self.end(abandoned=abandoned)


@dataclass(frozen=True)
class Say:
    """One user turn of a :class:`Plan`: what the user says and what the turn is.

    ``reask`` / ``human``: the user asks again / asks for a human (:meth:`Conversation.turn`);
    ``expected``: the exceptions that reach the caller in this turn; ``rejected_kinds`` /
    ``safety_blocked``: preset on the turn's :class:`RunTruth` (a framework that raises before
    recording usage, or a content filter whose error reaches the caller).
    """

    text: str
    reask: bool = False
    human: bool = False
    expected: tuple[type[BaseException], ...] = ()
    rejected_kinds: tuple[str, ...] = ()
    safety_blocked: bool = False


@dataclass(frozen=True)
class Plan:
    """A scripted conversation as data: its name, session id (``{session}-{tag}``), user, the model's
    answers over the whole conversation (``script``), the user's turns and whether it is abandoned."""

    name: str
    session: str
    user_id: str | None
    script: Sequence[Turn]
    says: Sequence[Say]
    abandoned: bool = False


def converse(
    h: Harness, agent: str, plans: Sequence[Plan], start: Callable[[Conversation], Callable[[str], object]]
) -> None:
    """Run each conversation of ``plans`` for ``agent``: ``start(conversation)`` sets the app up for it
    (its marker, its ids) and returns the function that runs one user turn."""
    for plan in plans:
        c = Conversation(
            h, plan.name, agent, session_id=f"{plan.session}-{h.tag}", user_id=plan.user_id, script=plan.script
        )
        c.play(plan.says, start(c), abandoned=plan.abandoned)


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as an OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, integer enums)."""
    ordered = sorted(spans, key=lambda s: (s.start_time or 0, s.context.span_id if s.context else 0))
    data: dict[str, Any] = MessageToDict(encode_spans(ordered), use_integers_for_enums=True)
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return data


def _hex_ids(obj: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if obj.get(key):
            obj[key] = base64.b64decode(obj[key]).hex()


LOOP_PLAN: tuple[tuple[str, str, int, bool], ...] = (
    ("normal", "What is the weather in Paris?", 10, True),
    ("parallel", "Weather in Paris and Rome?", 10, True),
    ("tool_error", "Where is my order A-404?", 10, True),
    ("max_iterations", "Keep checking Oslo.", 6, True),
    ("graceful_cap", "Keep checking Oslo.", 3, False),
    ("content_filter", "Say something filtered.", 10, True),
    ("http_500", "What is the weather in Paris?", 10, True),
)
"""The scenarios of a driver running its own tool loop: name suffix, prompt, iteration cap, raise at the cap."""


def loop_scenarios(
    h: Harness,
    prefix: str,
    agent: str,
    ask: Callable[[str, RunTruth, int, bool], str],
    *,
    capped: type[BaseException],
    errors: tuple[type[BaseException], ...],
) -> None:
    """Register and run :data:`LOOP_PLAN` for a driver with its own tool loop (``genai_loop``, ``traceloop_loop``).

    ``ask(prompt, run, cap, raise_on_cap)`` runs the app once; it raises ``capped`` at the cap when
    asked to, and otherwise answers "I could not finish ..." (the graceful cap). ``errors``: the
    other exceptions that reach the caller.
    """
    oslo = ToolCallTurn.of("get_weather", city="Oslo")
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    scripts: dict[str, list[Turn]] = {
        "normal": [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")],
        "parallel": [both, TextTurn("Sunny in Paris and Rome.")],
        "tool_error": [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")],
        "max_iterations": [oslo],
        "graceful_cap": [oslo],
        "content_filter": [ContentFilterTurn("")],
        "http_500": [SERVER_ERROR],
    }
    for suffix, turns in scripts.items():
        h.register(f"{prefix}_{suffix}", turns)
    for suffix, prompt, cap, raise_on_cap in LOOP_PLAN:
        with h.scenario(f"{prefix}_{suffix}", agent=agent, expected=(capped, *errors)) as run:
            try:
                answer = ask(f"{run.marker} {prompt}", run, cap, raise_on_cap)
            except capped:
                run.hit_max_iterations = True
                raise
            # The graceful cap: the loop ran out while the model still asked for tools.
            run.hit_max_iterations = answer.startswith("I could not finish")
