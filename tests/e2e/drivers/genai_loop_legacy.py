"""E2e driver: ``genai_loop.py`` in the default semconv mode (``OTEL_SEMCONV_STABILITY_OPT_IN`` unset).

The same agent, scenarios and scripts as ``genai_loop.py``, under the service name
``genai-travel-desk-legacy``, so the two captures can be compared mode against mode.

Run: ``python tests/e2e/drivers/genai_loop_legacy.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

from genai_loop import run


def main() -> None:
    """The default-mode run."""
    run("genai_loop_legacy", "genai-travel-desk-legacy", latest=False)


if __name__ == "__main__":
    main()
