"""``agent_run``: the ``invoke_agent {name}`` root span of one agent run, with an iteration cap.

Vigil's normaliser reads the run from this span (scorers/signals.py): ``gen_ai.agent.name``
names the agent, ``vigil.max_iterations_hit`` (or ``vigil.iterations`` ≥
``vigil.max_iterations``) marks a cap hit, ``vigil.safety_blocked`` a guardrail block,
``vigil.optimal_steps`` feeds step efficiency, and status ERROR with ``error.type`` means
an exception reached the caller.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from random import getrandbits
from types import TracebackType
from typing import Final

from opentelemetry.trace import Span, TracerProvider
from opentelemetry.util.types import AttributeValue

from collector.instrument import spans
from collector.instrument.content import clip, input_messages, output_messages
from collector.instrument.errors import MaxIterationsExceeded

CURRENT_RUN: Final[ContextVar[AgentRun | None]] = ContextVar("vigil_current_run", default=None)
"""The innermost entered :class:`AgentRun` of this context."""


def current_run() -> AgentRun | None:
    """The innermost :func:`agent_run` being executed in this context, or None.

    The way to reach the run from a function decorated with ``@agent_run(...)``, e.g. to
    ``current_run().tick()``. Context follows ``asyncio`` tasks; threads need
    ``contextvars.copy_context().run``.
    """
    return CURRENT_RUN.get()


_UUID4_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET: Final = (4 << 76) | (0x8000 << 48)


def inherited(explicit: TracerProvider | None) -> tuple[TracerProvider | None, bool]:
    """Provider and content setting of a new helper span.

    The provider is ``explicit`` if given, else the enclosing run's, else the defaults'
    (see :mod:`collector.instrument.spans`); the content setting is the enclosing run's,
    else the defaults'. So a sub-agent, tool or guardrail follows its run.
    """
    parent = CURRENT_RUN.get()
    if parent is not None:
        return explicit or parent.tracer_provider, parent.capture_content
    defaults = spans.defaults()
    return explicit or defaults.provider, defaults.capture


def new_conversation_id() -> str:
    """A random UUID4 as 32 hex digits, like ``uuid.uuid4().hex``.

    Drawn from ``random.getrandbits`` as the SDK draws trace ids (reseeded after ``fork``),
    which costs a fraction of ``uuid4``'s ``os.urandom`` call.
    """
    return format(getrandbits(128) & _UUID4_CLEAR | _UUID4_SET, "032x")


def _check_count(label: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be an int >= 1 or None, got {value!r}")


class AgentRun(spans.Scope):
    """One agent run: a context manager (``with agent_run(...) as run``) and a decorator.

    Create it with :func:`agent_run`. Inside the ``with`` block, :meth:`tick` counts
    iterations, :meth:`set_output` records the final answer, and :func:`tool_call` /
    :func:`guardrail` spans nest under the run. Not thread-safe: tick from the agent's thread.

    An exception leaving the block marks the root span failed (status ERROR,
    ``error.type``, ``exception`` event) and propagates.
    """

    __slots__ = (
        "_blocked",
        "_capture",
        "_hit",
        "_iterations",
        "_provider",
        "_run_token",
        "_tracer_provider",
        "conversation_id",
        "max_iterations",
        "name",
        "optimal_steps",
        "raise_on_max",
    )

    def __init__(
        self,
        name: str,
        *,
        max_iterations: int | None = None,
        optimal_steps: int | None = None,
        conversation_id: str | None = None,
        raise_on_max: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__()
        if max_iterations is not None:
            _check_count("max_iterations", max_iterations)
        if optimal_steps is not None:
            _check_count("optimal_steps", optimal_steps)
        if raise_on_max and max_iterations is None:
            raise ValueError("raise_on_max=True needs max_iterations")
        self.name = clip(name)
        self.max_iterations = max_iterations
        self.optimal_steps = optimal_steps
        self.conversation_id = conversation_id
        self.raise_on_max = raise_on_max
        self._tracer_provider = tracer_provider
        self._provider: TracerProvider | None = None
        self._capture = False
        self._iterations = 0
        self._hit = False
        self._blocked = False
        self._run_token: Token[AgentRun | None] | None = None

    def __enter__(self) -> AgentRun:
        self._provider, self._capture = inherited(self._tracer_provider)
        if self.conversation_id is None:
            self.conversation_id = new_conversation_id()
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.name,
            "gen_ai.conversation.id": clip(self.conversation_id),
        }
        if self.max_iterations is not None:
            attributes["vigil.max_iterations"] = self.max_iterations
        if self.optimal_steps is not None:
            attributes["vigil.optimal_steps"] = self.optimal_steps
        self._open(spans.tracer_for(self._provider), f"invoke_agent {self.name}", attributes)
        self._run_token = CURRENT_RUN.set(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._span is not None:
            self._span.set_attribute("vigil.iterations", self._iterations)
        if self._run_token is not None:
            CURRENT_RUN.reset(self._run_token)
            self._run_token = None
        self._close(exc)

    def __call__(self, fn: spans.F) -> spans.F:
        """Decorate ``fn`` (sync or ``async def``): each call is a new run with this configuration."""
        return spans.wrap(fn, lambda _args, _kwargs: self._fresh())

    def _fresh(self) -> AgentRun:
        return AgentRun(
            self.name,
            max_iterations=self.max_iterations,
            optimal_steps=self.optimal_steps,
            conversation_id=self.conversation_id,
            raise_on_max=self.raise_on_max,
            tracer_provider=self._tracer_provider,
        )

    def tick(self) -> bool:
        """Count one iteration of the agent loop.

        ``max_iterations`` is a budget of ticks: the tick that reaches it marks the run a
        cap hit (``vigil.max_iterations_hit=true`` on the root span, which Vigil flags
        high). With the tick at the top of the loop body, as in ``while run.tick(): ...``,
        the agent runs at most ``max_iterations - 1`` full iterations.

        Returns:
            True while the agent may go on; False once the cap is reached (then and on
            every later tick). Always True without ``max_iterations``.

        Raises:
            MaxIterationsExceeded: the cap is reached and ``raise_on_max`` is set (after marking).
            RuntimeError: called outside the ``with`` block.
        """
        span = self._active_span("tick")
        self._iterations += 1
        limit = self.max_iterations
        if limit is None or self._iterations < limit:
            return True
        if not self._hit:
            self._hit = True
            span.set_attribute("vigil.max_iterations_hit", True)
        if self.raise_on_max:
            raise MaxIterationsExceeded(self.name, self._iterations, limit)
        return False

    def set_input(self, message: object) -> None:
        """Record what the user asked as ``gen_ai.input.messages`` on the run's span (content capture on only;
        strings as they are, other values as JSON, clipped to 8 KiB), so a run stopped before any model call
        — an input guardrail — still shows what was blocked; ``RuntimeError`` outside the ``with`` block."""
        self._record_content("set_input", "gen_ai.input.messages", message, self._capture, input_messages)

    def set_output(self, output: object) -> None:
        """Record the agent's final answer as ``gen_ai.output.messages`` (with content capture on: strings
        as they are, other values as JSON, clipped to 8 KiB); ``RuntimeError`` outside the ``with`` block."""
        self._record_content("set_output", "gen_ai.output.messages", output, self._capture, output_messages)

    def mark_blocked(self) -> None:
        """Mark the run safety-blocked (``vigil.safety_blocked=true``); :meth:`Guardrail.block` calls it."""
        span = self._active_span("mark_blocked")
        if not self._blocked:
            self._blocked = True
            span.set_attribute("vigil.safety_blocked", True)

    @property
    def iterations(self) -> int:
        """Iterations counted so far."""
        return self._iterations

    @property
    def max_iterations_hit(self) -> bool:
        """Whether the cap was reached."""
        return self._hit

    @property
    def safety_blocked(self) -> bool:
        """Whether a guardrail in this run blocked."""
        return self._blocked

    @property
    def trace_id(self) -> str:
        """The run's trace id, 32 hex digits (what ``GET /api/v1/runs/{trace_id}`` takes).

        Raises:
            RuntimeError: the run was never entered.
        """
        return format(self._active_span("trace_id").get_span_context().trace_id, "032x")

    @property
    def span(self) -> Span:
        """The root span, for attributes of your own.

        Raises:
            RuntimeError: the run was never entered.
        """
        return self._active_span("span")

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The provider this run's spans go to (None: the global one); tool and guardrail spans inherit it."""
        return self._provider

    @property
    def capture_content(self) -> bool:
        """Whether content is recorded in this run."""
        return self._capture


def agent_run(
    name: str,
    max_iterations: int | None = None,
    optimal_steps: int | None = None,
    *,
    conversation_id: str | None = None,
    raise_on_max: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> AgentRun:
    """The root span of one agent run, ``invoke_agent {name}`` (kind INTERNAL).

    Use as ``with agent_run("support", max_iterations=8) as run:`` or as a decorator,
    ``@agent_run("support", max_iterations=8)`` (sync and ``async def`` functions; reach
    the run with :func:`current_run`). Attributes: ``gen_ai.operation.name=invoke_agent``,
    ``gen_ai.agent.name``, ``gen_ai.conversation.id``, ``vigil.max_iterations``,
    ``vigil.optimal_steps``, and at the end ``vigil.iterations``.

    Args:
        name: the agent's name (what Vigil groups runs by).
        max_iterations: iteration cap counted by :meth:`AgentRun.tick` (None: no cap).
        optimal_steps: the LLM calls an ideal run needs; Vigil's ``step_efficiency`` is
            ``min(1, optimal_steps / llm_calls)``.
        conversation_id: session or thread id; a random UUID4 hex when None.
        raise_on_max: raise :class:`MaxIterationsExceeded` from the tick that reaches the cap.
        tracer_provider: where the spans go (default: ``vigil_setup``'s, else the global one).

    Returns:
        The run; entering it starts the span.

    Raises:
        ValueError: ``max_iterations`` or ``optimal_steps`` below 1, or ``raise_on_max``
            without ``max_iterations``.
    """
    return AgentRun(
        name,
        max_iterations=max_iterations,
        optimal_steps=optimal_steps,
        conversation_id=conversation_id,
        raise_on_max=raise_on_max,
        tracer_provider=tracer_provider,
    )
