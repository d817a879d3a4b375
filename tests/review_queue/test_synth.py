"""Tests for vigil.bench.synth: the benchmark workload has the shape BENCHMARKS.md states."""

from __future__ import annotations

import random
import statistics

from vigil.bench.synth import make_run


class TestSynth:
    def test_runs_have_10_to_30_spans(self) -> None:
        """Every generated run has 10 to at most 29 spans, about 16.6 on average, and exactly one root."""
        rng = random.Random(3)
        runs = [make_run(rng) for _ in range(2000)]
        sizes = [len(run.spans) for run in runs]
        assert 10 == min(sizes)
        assert max(sizes) <= 29
        assert 16.0 < statistics.mean(sizes) < 17.2
        assert all(sum(1 for s in run.spans if not s.parent_span_id) == 1 for run in runs)

    def test_content_bytes_puts_captured_messages_on_every_llm_span(self) -> None:
        """With content_bytes every chat span carries 1–2× that many bytes of messages, no other span does."""
        rich = make_run(random.Random(8), content_bytes=1024)
        assert any(s.name.startswith("chat") for s in rich.spans)
        for span in rich.spans:
            messages = [a.value.string_value for a in span.attributes if a.key == "gen_ai.input.messages"]
            if span.name.startswith("chat"):
                assert 1024 <= len(messages[0]) <= 2048
            else:
                assert [] == messages
