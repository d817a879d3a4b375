"""What the smolagents drivers share (``smolagents.py``, ``smolagents_answer_checks.py``): the two tools
(smolagents' ``@tool`` reads each argument's description from the docstring), the ``final_answer`` turn,
and the instrumented model on the fake server.

Import it after the driver has put its own folder last on ``sys.path`` (see ``smolagents.py``), so that
``import smolagents`` here finds the package, not the driver of that name.
"""

from __future__ import annotations

from harness import API_KEY, Harness, current
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, tool

from collector.demo.fakeopenai import ToolCallTurn


@tool
def get_weather(city: str) -> str:
    """Return the current weather for a city.

    Args:
        city: the city name.
    """
    current().tool()
    return f"It is 21 C and sunny in {city}."


@tool
def lookup_order(order_id: str) -> str:
    """Return the status of an order.

    Args:
        order_id: the order id.
    """
    current().tool(failed=True)
    raise LookupError(f"order {order_id} not found")


def final(answer: str) -> ToolCallTurn:
    """A model turn that calls smolagents' built-in ``final_answer`` tool."""
    return ToolCallTurn.of("final_answer", answer=answer)


def instrumented_model(h: Harness) -> OpenAIServerModel:
    """Instrument smolagents into ``h``'s provider; the Chat Completions model on the fake server, no retries."""
    SmolagentsInstrumentor().instrument(tracer_provider=h.provider)
    return OpenAIServerModel(
        model_id="gpt-4o-mini", api_base=h.base_url, api_key=API_KEY, client_kwargs={"max_retries": 0}
    )
