"""``tool_call`` and ``guardrail``: the ``execute_tool`` and ``apply_guardrail`` spans of a run.

Both nest under the enclosing :func:`~collector.instrument.agent_run` (by context) and
use its tracer provider and content setting. Outside any run they are spans of their own
trace on the default provider.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from collector.instrument import spans
from collector.instrument.content import call_arguments, clip, json_text, signature_of
from collector.instrument.run import CURRENT_RUN, AgentRun, inherited


class ToolCall(spans.Scope):
    """One tool execution; create it with :func:`tool_call`.

    An exception leaving the block marks the span failed (status ERROR, ``error.type``,
    ``exception`` event), which Vigil counts as a tool error, and propagates.
    """

    __slots__ = ("_capture", "_pending", "_tracer_provider", "arguments", "call_id", "name")

    def __init__(
        self,
        name: str,
        *,
        call_id: str | None = None,
        arguments: object = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__()
        self.name = clip(name)
        self.call_id = call_id
        self.arguments = arguments
        self._tracer_provider = tracer_provider
        self._capture = False
        self._pending: tuple[Any, tuple[Any, ...], dict[str, Any]] | None = None

    def __enter__(self) -> ToolCall:
        provider, self._capture = inherited(self._tracer_provider)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.name,
            "gen_ai.tool.type": "function",
        }
        if self.call_id is not None:
            attributes["gen_ai.tool.call.id"] = clip(self.call_id)
        if self._capture:
            if self._pending is not None:
                self.arguments = call_arguments(*self._pending)
            if self.arguments is not None:
                attributes["gen_ai.tool.call.arguments"] = json_text(self.arguments)
        self._pending = None
        self._open(spans.tracer_for(provider), f"execute_tool {self.name}", attributes)
        return self

    def __call__(self, fn: spans.F) -> spans.F:
        """Decorate ``fn`` (sync or ``async def``): each call is a tool span; with content
        capture on, its arguments (by parameter name, without ``self``/``cls``) and return
        value are recorded."""
        signature = signature_of(fn)

        def enter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> ToolCall:
            call = ToolCall(self.name, call_id=self.call_id, tracer_provider=self._tracer_provider)
            call._pending = (signature, args, kwargs)
            return call

        return spans.wrap(fn, enter, on_result=True)

    def set_result(self, result: object) -> None:
        """Record the tool's result as ``gen_ai.tool.call.result`` (with content capture on: strings as they
        are, other values as JSON, clipped to 8 KiB); ``RuntimeError`` outside the ``with`` block."""
        self._record_content("set_result", "gen_ai.tool.call.result", result, self._capture, json_text)


class Guardrail(spans.Scope):
    """One guardrail check; create it with :func:`guardrail`."""

    __slots__ = ("_blocked", "_run", "_tracer_provider", "name")

    def __init__(self, name: str, *, tracer_provider: TracerProvider | None = None) -> None:
        super().__init__()
        self.name = clip(name)
        self._tracer_provider = tracer_provider
        self._run: AgentRun | None = None
        self._blocked = False

    def __enter__(self) -> Guardrail:
        self._run = CURRENT_RUN.get()
        provider, _ = inherited(self._tracer_provider)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "apply_guardrail",
            "gen_ai.guardrail.component.name": self.name,
        }
        self._open(spans.tracer_for(provider), f"apply_guardrail {self.name}", attributes)
        return self

    def block(self, reason: str) -> None:
        """The guardrail blocked: mark this span and the enclosing run safety-blocked.

        Sets ``vigil.guardrail.blocked=true`` and ``gen_ai.guardrail.result.reason`` here
        and ``vigil.safety_blocked=true`` on the run's root span, so Vigil flags the run
        high. The reason is recorded whatever the content setting: keep the offending
        content out of it.

        Raises:
            RuntimeError: called outside the ``with`` block.
        """
        span = self._active_span("block")
        self._blocked = True
        span.set_attribute("vigil.guardrail.blocked", True)
        span.set_attribute("gen_ai.guardrail.result.reason", clip(reason))
        if self._run is not None:
            self._run.mark_blocked()

    @property
    def blocked(self) -> bool:
        """Whether :meth:`block` was called."""
        return self._blocked


def tool_call(
    name: str,
    call_id: str | None = None,
    arguments: object = None,
    tracer_provider: TracerProvider | None = None,
) -> ToolCall:
    """The span of one tool execution, ``execute_tool {name}`` (kind INTERNAL).

    Use as ``with tool_call("lookup_order", call_id=..., arguments={...}) as call:`` then
    ``call.set_result(...)``, or as a decorator, ``@tool_call("lookup_order")``.
    Attributes: ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``,
    ``gen_ai.tool.type=function``, ``gen_ai.tool.call.id`` when given, and with content
    capture on ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` (JSON text, 8 KiB at most).

    Args:
        name: the tool's name.
        call_id: the id of the model's tool call (``call_...``), if any.
        arguments: the call's arguments (recorded only with content capture on).
        tracer_provider: where the span goes (default: the enclosing run's).

    Returns:
        The tool call; entering it starts the span.
    """
    return ToolCall(name, call_id=call_id, arguments=arguments, tracer_provider=tracer_provider)


def guardrail(name: str, tracer_provider: TracerProvider | None = None) -> Guardrail:
    """The span of one guardrail check, ``apply_guardrail {name}`` (kind INTERNAL).

    ``with guardrail("pii_filter") as g: if bad: g.block("card number in input")``.
    Attributes: ``gen_ai.operation.name=apply_guardrail``,
    ``gen_ai.guardrail.component.name``; see :meth:`Guardrail.block`.

    Args:
        name: the guardrail's name.
        tracer_provider: where the span goes (default: the enclosing run's).

    Returns:
        The guardrail; entering it starts the span.
    """
    return Guardrail(name, tracer_provider=tracer_provider)
