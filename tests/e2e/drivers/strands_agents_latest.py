"""E2e driver: ``strands_agents.py`` with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.

With the opt-in, Strands' tracer writes the conversation as one ``gen_ai.client.inference.operation.details``
event per span holding the attribute form's keys (``gen_ai.input.messages``, ``gen_ai.output.messages``
with ``finish_reason``, ``gen_ai.system_instructions``) instead of one event per message; the
scenarios are the same.

Run: ``python tests/e2e/drivers/strands_agents_latest.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"  # before Strands reads it

from strands_agents import main

if __name__ == "__main__":
    main("strands_agents_latest")
