"""The adapter registry: every module registered once, keys composed in order, hooks called."""

from __future__ import annotations

import importlib
import pkgutil

import scorers.dialects as registry
from scorers.dialects import (
    ADAPTERS,
    ARGUMENT_KEYS,
    DIALECTS,
    INPUT_TOKEN_KEYS,
    MODEL_KEYS,
    TOOL_NAME_KEYS,
    Adapter,
    classify,
    messages_of,
)
from scorers.dialects.base import strip_method
from scorers.model import Message, StepKind
from tests.support.spans import span

K = StepKind


class TestRegistry:
    """One adapter module, one entry in :data:`ADAPTERS`."""

    def test_every_module_registered_once(self) -> None:
        """Each adapter module of the package has exactly one instance in ADAPTERS (adding a file registers it)."""
        modules = {
            m.name for m in pkgutil.iter_modules(registry.__path__) if m.name != "base" and not m.name.startswith("_")
        }
        registered = {type(a).__module__.rsplit(".", 1)[1] for a in ADAPTERS}
        assert modules == registered
        assert len(ADAPTERS) == len({type(a) for a in ADAPTERS})
        for name in modules:
            module = importlib.import_module(f"scorers.dialects.{name}")
            assert module.__doc__, f"{name} documents its dialect or framework"

    def test_names_and_scopes_unique(self) -> None:
        """Adapter names are unique and no instrumentation scope belongs to two frameworks."""
        assert len({a.name for a in ADAPTERS}) == len(ADAPTERS)
        scopes = [s for a in ADAPTERS for s in a.scopes]
        assert len(scopes) == len(set(scopes))

    def test_dialects_are_the_unscoped_adapters_in_order(self) -> None:
        """The dialect vote's tie order is the registry order."""
        assert ("genai", "openinference", "traceloop", "vercel", "langsmith") == DIALECTS

    def test_keys_composed_in_registry_order(self) -> None:
        """Where the first present key wins, the earlier dialect's key comes first."""
        assert INPUT_TOKEN_KEYS[:3] == (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        )
        assert MODEL_KEYS[0] == "gen_ai.response.model"
        assert TOOL_NAME_KEYS[0] == "gen_ai.tool.name"
        assert ARGUMENT_KEYS[-1] == "tool.parameters"  # a last resort after every dialect's own keys

    def test_default_hooks_do_nothing(self) -> None:
        """An adapter that overrides nothing classifies, names and reads nothing."""
        bare = Adapter()
        one = span(name="x.run")
        assert (None, None, False, [], None) == (
            bare.classify(one),
            bare.classify_name("x"),
            bare.recognises(one),
            bare.messages({}),
            bare.entity_name(one, K.AGENT),
        )

    def test_strip_method(self) -> None:
        """Only a listed entry method is stripped."""
        methods = frozenset({"run"})
        assert ("agent", "agent.forward", "run", ".run") == (
            strip_method("agent.run", methods),
            strip_method("agent.forward", methods),
            strip_method("run", methods),
            strip_method(".run", methods),
        )


class TestHooksAreCalledInOrder:
    """The registry walks adapters in order and stops at the first answer."""

    def test_earlier_dialect_wins(self) -> None:
        """A span with two dialects' kind attributes is classified by the earlier adapter."""
        one = span(attributes={"gen_ai.operation.name": "chat", "openinference.span.kind": "TOOL"})
        assert (K.LLM, "genai") == classify(one)

    def test_message_readers(self) -> None:
        """The first reader whose keys are present and that finds messages answers."""
        attrs = {
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "oi",
            "gen_ai.input.messages": "not json",
        }
        assert [Message("user", "oi")] == messages_of(attrs)
        assert [] == messages_of({"unrelated": 1})
