"""Tests for review_queue.app.bench.pipeline: the benchmark measures what it claims (no timing assertions)."""

from __future__ import annotations

from review_queue.app.bench.pipeline import bench_pipeline, bench_stages
from review_queue.app.bench.synth import bodies


class TestBench:
    """The benchmark drives every run through the real pipeline."""

    def test_every_generated_run_is_written(self) -> None:
        """All runs and spans generated are accounted for by the pipeline measurement."""
        expected_spans = sum(n for _, n, _ in bodies(300))
        for saturated in (True, False):
            rate, spans, written = bench_pipeline(300, saturated=saturated)
            assert (expected_spans, 300) == (spans, written)
            assert rate > 0

    def test_scoring_thread_figure_leaves_the_details_writer_out(self) -> None:
        """The scoring-thread figure is one value per measurement, from this thread's CPU only: never
        below the process figure, which also counts the details writer's thread (CPU accounting, not timing)."""
        scoring: list[float] = []
        rate, _, written = bench_pipeline(300, scoring=scoring)
        assert (1, 300) == (len(scoring), written)
        assert scoring[0] >= rate > 0

    def test_stages_cover_the_pipeline(self) -> None:
        """The stage breakdown names every stage of the pipeline."""
        stages = bench_stages(100)
        assert ["decode", "normalise", "score", "decide", "metrics", "store (SQLite)"] == list(stages)
        assert all(v > 0 for v in stages.values())


class TestJudgeBench:
    """The judge comparison accounts for every run it selects."""

    def test_every_selected_run_is_judged_or_dropped(self) -> None:
        """Judge on: runs judged + dropped (flood, shutdown) + at most the in-flight ones = runs generated."""
        import json

        from collector.demo.fakeopenai import FakeOpenAI, TextTurn
        from review_queue.app.bench.pipeline import bench_judge_once

        verdict = TextTurn(json.dumps({"reasoning": "ok", "score": 0.9}), delay_s=0.05)
        with FakeOpenAI({"verdict": [verdict]}) as fake:
            on = bench_judge_once(300, fake.port)
        off = bench_judge_once(300, None)
        assert 300 - 4 <= on["judged"] + on["dropped"] <= 300
        assert on["judged"] >= 1
        assert (0, 0) == (off["judged"], off["dropped"])
        assert all(on[k] > 0 and off[k] > 0 for k in ("thread", "process", "wall"))
