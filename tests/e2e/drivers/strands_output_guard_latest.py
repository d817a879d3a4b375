"""E2e driver: ``strands_output_guard.py`` with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.

With the opt-in, Strands' tracer writes each span's conversation as one
``gen_ai.client.inference.operation.details`` event (see ``strands_agents_latest.py``); the
guards and scenarios are the same.

Run: ``python tests/e2e/drivers/strands_output_guard_latest.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"  # before Strands reads it

from strands_output_guard import main

if __name__ == "__main__":
    main("strands_output_guard_latest")
