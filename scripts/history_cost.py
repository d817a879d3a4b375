# mypy: ignore-errors
"""What reading a run's model-call messages costs when each call resends the whole history (issue 25).

Every framework sends a model call the conversation so far, so a run of N calls carries N growing
copies of its history in ``gen_ai.input.messages``. This times, for one such run (a system prompt, a
user request, then per call an assistant tool call and a ~700-character tool result), reading every
call's messages from scratch (``scorers.content.message_pairs``, what the run details did) against
reading them in order with ``scorers.content.MessageHistory`` (only what each call adds is parsed),
and the detector's search of every call's input for CrewAI's forced-final-answer prompt, lower-casing
each input whole against :class:`scorers.detect.GrowingText`::

    PYTHONPATH=. .venv/bin/python scripts/history_cost.py --calls 10 30 60

Best of 30 repetitions, microseconds per run; both give the same pairs (asserted).
"""

from __future__ import annotations

import argparse
import json
import time

from scorers import content
from scorers.detect import CREWAI_FORCE_FINAL_ANSWER, GrowingText


def _calls(n: int) -> list[dict[str, str]]:
    history = [
        {"role": "system", "parts": [{"type": "text", "content": "You are a helpful travel agent. " * 12}]},
        {"role": "user", "parts": [{"type": "text", "content": "Find me a flight to Paris next week. " * 5}]},
    ]
    calls = []
    for i in range(n):
        out = [{"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{i}", "name": "search",
                                                "arguments": {"q": f"flights paris {i}"}}]}]  # fmt: skip
        calls.append({"gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps(out)})
        result = {"type": "tool_call_response", "id": f"c{i}", "response": f"result {i}: " + "fare 129 EUR, " * 50}
        history = [*history, *out, {"role": "tool", "parts": [result]}]
    return calls


def _best(read_run, calls, repeat: int = 30) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        read_run(calls)
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[10, 30, 60])
    args = parser.parse_args()
    for n in args.calls:
        calls = _calls(n)
        history = content.MessageHistory()
        assert [history(a) for a in calls] == [content.message_pairs(a) for a in calls]
        scratch = _best(lambda cs: [content.message_pairs(a) for a in cs], calls)
        incremental = _best(lambda cs: [h(a) for h in (content.MessageHistory(),) for a in cs], calls)
        size = len(calls[-1]["gen_ai.input.messages"])
        print(f"{n:3d} calls (last input {size / 1024:5.1f} KiB): messages from scratch {scratch:7.0f} µs, "
              f"in order {incremental:6.0f} µs ({scratch / incremental:.1f}×)")  # fmt: skip
        inputs = [a["gen_ai.input.messages"] for a in calls]
        marker = CREWAI_FORCE_FINAL_ANSWER
        grown = GrowingText(marker)
        assert [grown(t) for t in inputs] == [marker in t.lower() for t in inputs]
        whole = _best(lambda ts: [marker in t.lower() for t in ts], inputs)
        searched = _best(lambda ts: [g(t) for g in (GrowingText(marker),) for t in ts], inputs)
        print(f"{'':36s}force-answer check whole {whole:7.0f} µs, grown {searched:6.0f} µs ({whole / searched:.1f}×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
