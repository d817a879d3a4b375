"""A minimal agent as the manual's "The helpers" section (docs/instrumenting.md) writes it, for the
README-following test.

Run as ``python tests/e2e/readme_agent.py <fake OpenAI base URL>``, with the ``OTEL_*`` variables of the
README's quick tour in the environment: one ``agent_run`` with one chat call whose prompt is ``PROMPT``.
"""

from __future__ import annotations

import sys

import openai

from collector.instrument import agent_run, vigil_setup

PROMPT = "What is the refund policy for order 4711? [[scenario:readme]]"


def main(base_url: str) -> None:
    """One traced run, flushed before exit."""
    tracing = vigil_setup(service_name="readme-bot")
    client = openai.OpenAI(base_url=base_url, api_key="test")
    with agent_run("support", max_iterations=8, optimal_steps=1) as run:
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}])
        run.set_output(reply.choices[0].message.content or "")
    tracing.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
