"""DSPy through ``openinference-instrumentation-dspy``.

Quirks: spans are named ``<class>.forward`` / ``<object>.__call__``: the root is the user's
module (``TravelAgent.forward``: the class names the agent), tools are ``<tool>.__call__``
without ``tool.name``; ReAct ends its loop by calling its built-in ``finish`` tool (the end
marker, not a tool call). With the LiteLLM engine a LiteLLM ``completion`` LLM span nests in
``LM.__call__`` (one call, two instrumentations).
"""

from __future__ import annotations

from scorers.dialects.base import Adapter


class DSPy(Adapter):
    """DSPy."""

    name = "dspy"
    scopes = frozenset({"openinference.instrumentation.dspy"})
    entry_methods = frozenset({"forward", "aforward", "__call__", "acall"})
    answer_tools = frozenset({"finish"})
