"""The reports' dimension summary: Markdown escaping of agent output, the baseline file, the summary rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from scorers.eval.criteria import CriterionResult
from scorers.eval.dimensions import CaseMeasures, summarise_dimensions
from scorers.eval.evaluate import CaseResult
from vigil.eval_report import load_baseline, markdown_report, markdown_text, summary_rows


def test_markdown_escapes_agent_output() -> None:
    evil = "<img src=x onerror=alert(1)> | `code` [link](http://x) **bold**\nnext"
    text = markdown_text(evil)
    assert "&lt;img src=x onerror=alert(1)&gt; \\| \\`code\\` \\[link\\](http://x) \\*\\*bold\\*\\* next" == text
    result = CaseResult(
        "s",
        "c|<b>",
        (CriterionResult("graceful", 0.0, 1.0, False, evil),),
        False,
        error=evil,
        dimension="robustness",
        measures=CaseMeasures(),
    )
    md = markdown_report([result])
    assert "<img" not in md
    assert "| s/c\\|&lt;b&gt; | robustness |" in md


def test_markdown_cut_to_limit() -> None:
    assert "a" * 9 + "…" == markdown_text("a" * 50, limit=10)


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json", "expected a JSON report"), ('{"passed": true}', "an object with 'results'")],
)
def test_bad_baseline_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load_baseline(path)
    assert "\n" not in str(err.value)


def test_rows_per_dimension_with_baseline() -> None:
    results = [
        CaseResult("s", "a", (), True, dimension="efficiency", measures=CaseMeasures(None, None, 2, 200, 100.0)),
        CaseResult("s", "b", (), False, dimension="efficiency", measures=CaseMeasures(None, None, 4, 400, 300.0)),
    ]
    base = {"dimensions": {"efficiency": {"steps": 3.0, "tokens": 350, "latency_ms": 250.0}}}
    rows = [(r.metric, r.value, r.baseline, r.change) for r in summary_rows(summarise_dimensions(results, base))]
    assert [
        ("steps per task", "3.00", "3.00", "±0"),
        ("tokens per task", "300", "350", "−50"),
        ("latency per task", "200 ms", "250 ms", "−50 ms"),
        ("cases passed", "50.0 % (1/2)", "", ""),
    ] == rows
