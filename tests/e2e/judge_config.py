"""The LLM judge both judge end-to-end tests configure: groundedness on every run, flagging below 0.5,
on the fake OpenAI-compatible server, with every other flag rule switched off so counts are exact."""

from __future__ import annotations

import json
from typing import Any

from collector.demo.fakeopenai import TextTurn, Usage

LOW = TextTurn(json.dumps({"reasoning": "The refund is not in any tool result.", "score": 0.1}), Usage(400, 30))
HIGH = TextTurn(json.dumps({"reasoning": "Every claim is supported.", "score": 0.95}), Usage(400, 30))
DEFAULT_RULES = ("hit_max_iterations", "safety_blocked", "low_step_efficiency", "errored", "tool_loop", "random_sample")


def judge_yaml(base_url: str, **extra: Any) -> str:
    """``vigil.yaml`` text: the ``ground`` judge (plus ``extra`` keys) and the default rules off."""
    judge = {
        "rubric": "groundedness",
        "model": "judge-model",
        "base_url": base_url,
        "api_key_env": "JUDGE_API_KEY",
        "select": "true",
        "flag_below": 0.5,
        **extra,
    }
    rules = {name: {"enabled": False} for name in DEFAULT_RULES}
    return json.dumps({"judges": {"ground": judge}, "rules": rules})
