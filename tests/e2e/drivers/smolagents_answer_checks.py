# ruff: noqa: E402
"""E2e driver: smolagents ``final_answer_checks`` that reject a first answer.

The same agent setup as ``smolagents.py`` (a ``ToolCallingAgent`` traced by
``openinference-instrumentation-smolagents``, ``OpenAIServerModel`` on the fake server, no client
retries), plus ``final_answer_checks``: before smolagents accepts a ``final_answer`` it calls each
check; one that returns false or raises becomes ``AgentError("Check <name> failed with error:
<message>")`` on the step (``MultiStepAgent._validate_final_answer``), the step's error
is shown to the model, and the loop goes on.

Scenarios (sequential scripts, as in ``smolagents.py``):

* ``sc_normal``: one weather tool call, then ``final_answer``; the checks pass.
* ``sc_pii_rejected``: the first ``final_answer`` holds a social security number; the PII check
  raises, the second answer passes. Truth: blocked (the output safety check triggered).
* ``sc_length_rejected``: the first ``final_answer`` is too short for the length check; the second
  passes. Truth: not blocked (a form rule, not a safety one).

Run: ``python tests/e2e/drivers/smolagents_answer_checks.py --capture F --out F``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# This folder holds smolagents.py (another driver): put it last on the path, or `import
# smolagents` would import that script.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from typing import Any

from harness import Harness, current
from smolagents import ToolCallingAgent
from smolagents.utils import AgentError
from smolagents_tools import final, get_weather, instrumented_model

from collector.demo.fakeopenai import ToolCallTurn

AGENT = "sc_travel_agent"
SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")


def no_personal_data(final_answer: Any, memory: Any, agent: Any = None) -> bool:
    """Reject an answer that holds a social security number (driver truth: the safety check triggered)."""
    if SSN.search(str(final_answer)):
        current().safety_blocked = True
        raise ValueError("the answer discloses a social security number")
    return True


def long_enough(final_answer: Any, memory: Any, agent: Any = None) -> bool:
    """Reject an answer shorter than three words (a form rule)."""
    return len(str(final_answer).split()) >= 3


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("smolagents_answer_checks", "sa-checked-travel-desk")
    model = instrumented_model(h)
    h.register("sc_normal", [ToolCallTurn.of("get_weather", city="Paris"), final("Sunny in Paris.")], sequential=True)
    h.register(
        "sc_pii_rejected", [final("Booked for SSN 078-05-1120."), final("Your trip is booked.")], sequential=True
    )
    h.register("sc_length_rejected", [final("Sunny."), final("Sunny in Paris.")], sequential=True)
    plan = [
        ("sc_normal", "What is the weather in Paris?"),
        ("sc_pii_rejected", "Book my trip to Paris."),
        ("sc_length_rejected", "What is the weather in Paris?"),
    ]
    for name, prompt in plan:
        agent = ToolCallingAgent(
            tools=[get_weather],
            model=model,
            name=AGENT,
            max_steps=4,
            verbosity_level=0,
            final_answer_checks=[no_personal_data, long_enough],
        )
        with h.scenario(name, agent=AGENT, expected=(AgentError,)) as run:
            agent.run(f"{run.marker} {prompt}")
    h.finish()


if __name__ == "__main__":
    main()
