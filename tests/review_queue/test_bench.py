"""Tests for vigil.bench.pipeline: the benchmark measures what it claims (no timing assertions)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vigil.bench.eval_online import SECTIONS, instruction_report, run_sections
from vigil.bench.pipeline import bench_pipeline, bench_stages
from vigil.bench.synth import bodies


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
        from vigil.bench.pipeline import bench_judge_once

        verdict = TextTurn(json.dumps({"reasoning": "ok", "score": 0.9}), delay_s=0.05)
        with FakeOpenAI({"verdict": [verdict]}) as fake:
            on = bench_judge_once(300, fake.port)
        off = bench_judge_once(300, None)
        assert 300 - 4 <= on["judged"] + on["dropped"] <= 300
        assert on["judged"] >= 1
        assert (0, 0) == (off["judged"], off["dropped"])
        assert all(on[k] > 0 and off[k] > 0 for k in ("thread", "process", "wall"))


class TestEvalInstructions:
    """``vigil bench --eval --instructions``: sections between markers, counted by callgrind."""

    def test_each_section_runs_once_between_two_markers(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The report pairs callgrind's dumps with the sections: two marker calls per section and no others."""
        calls: list[float] = []
        real = time.process_time

        def marker() -> float:
            calls.append(real())
            return calls[-1]

        monkeypatch.setattr(time, "process_time", marker)
        labels = run_sections(tmp_path, 300)
        meta = json.loads((tmp_path / "sections.json").read_text())
        assert list(SECTIONS) == labels == meta["sections"]
        assert 2 * len(SECTIONS) == len(calls)
        assert (300, 1000) == (meta["runs"], meta["cases"])
        assert 0.05 * 300 <= meta["matched"] <= 0.15 * 300

    @pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
    def test_the_report_reads_real_callgrind_dumps(self, tmp_path: Path) -> None:
        """Sections of known relative size, counted by callgrind, come back in the right order and ratios."""
        sizes = {"process_off": 1, "process_on": 2, "eval_alone": 1, "embedded_off": 2, "embedded_on": 3}
        program = "import time\n" + "".join(
            f"time.process_time()\nsum(range({n * 200_000}))\ntime.process_time()\n" for n in sizes.values()
        )
        (tmp_path / "sections.json").write_text(
            json.dumps({"sections": list(sizes), "runs": 10, "matched": 1, "cases": 5})
        )
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-before=time_process_time",
             f"--callgrind-out-file={tmp_path / 'callgrind.out'}", sys.executable, "-c", program],
            check=True, capture_output=True,
        )  # fmt: skip
        report = instruction_report(tmp_path)
        assert 1.0 == pytest.approx(report["process_overhead"], rel=0.01)  # twice the work: +100 %
        assert 0.5 == pytest.approx(report["embedded_overhead"], rel=0.01)
        assert report["eval_alone"] == pytest.approx(report["process_off"], rel=0.01)
        assert (10.0, 1.0, 5.0) == (report["runs"], report["matched"], report["cases"])
        (tmp_path / "callgrind.out.3").unlink()
        with pytest.raises(ValueError, match="9 callgrind dumps for 5 sections"):
            instruction_report(tmp_path)
