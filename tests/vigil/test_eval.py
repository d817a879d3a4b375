"""``vigil eval``: the example end to end, reports (JSON, JUnit XML parsed back), scoring captured traces,
the pytest helper with sync and async agents, ``eval add`` from a stored run, ``eval export``."""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from collector.model import TraceBatch
from collector.otlp import encode_batch
from review_queue.privacy import RedactingSink
from review_queue.store import SqlStore, upgrade_database
from scorers.eval.model import load_eval_set
from scorers.model import Message, ToolCall
from scorers.redact import Redactor
from tests.support.review_queue import scored_run
from tests.support.spans import agent_run
from vigil.cli import main
from vigil.evaltest import assert_eval_passes, run_eval

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "support_agent"
EVALSET = EXAMPLE / "evalset.json"
CONFIG = EXAMPLE / "eval_config.json"


@pytest.fixture(autouse=True, scope="module")
def _undo_example_tracing() -> Iterator[None]:
    """The example agent sets its tracing up once per process (and instruments OpenAI): undo it after."""
    yield
    from examples.support_agent import agent

    agent._model.reset()


def _vigil_yaml(tmp_path: Path) -> Path:
    cfg = tmp_path / "vigil.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'vigil.db'}\n")
    return cfg


def _run(tmp_path: Path, agent: str, *extra: str) -> int:
    return main(
        ["--config", str(_vigil_yaml(tmp_path)), "eval", "run", "--agent", f"examples.support_agent.agent:{agent}",
         str(EVALSET), "--config", str(CONFIG), *extra]
    )  # fmt: skip


class TestRun:
    def test_example_passes_end_to_end(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        report = tmp_path / "report.json"
        assert 0 == _run(tmp_path, "answer", "--json", str(report))
        out = capsys.readouterr().out
        assert "3/3 case run(s) passed." in out
        doc = json.loads(report.read_text())
        assert doc["passed"] is True
        by_case = {r["eval_id"]: r for r in doc["results"]}
        two_turns = by_case["order_then_refund"]
        assert 2 == len(two_turns["trace_ids"])  # one trace per turn
        scores = {c["name"]: c["score"] for c in two_turns["criteria"]}
        assert {
            "tool_trajectory": 1.0,
            "response_match": 1.0,
            "tool_recall": 1.0,
            "task_success": 1.0,
        }.items() <= scores.items()

    def test_regression_fails_with_junit_parsed_back(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        junit = tmp_path / "junit.xml"
        assert 1 == _run(tmp_path, "answer_regressed", "--junit", str(junit), "--repeat", "2", "--concurrency", "2")
        out = capsys.readouterr().out
        assert 'get_weather: argument city: expected "Paris", got "paris"' in out
        assert 'turn 2: missing refund_order(order_id="A-17")' in out
        root = ET.parse(junit).getroot()
        assert ("6", "4", "0") == (root.get("tests"), root.get("failures"), root.get("errors"))
        (suite,) = root.findall("testsuite")
        assert "support_agent" == suite.get("name")
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        assert {
            "weather_paris#1",
            "weather_paris#2",
            "order_then_refund#1",
            "order_then_refund#2",
            "greeting#1",
            "greeting#2",
        } == set(cases)
        failure = cases["weather_paris#1"].find("failure")
        assert failure is not None
        assert "tool_trajectory 0.00 < 1" in (failure.get("message") or "")
        assert 'expected "Paris", got "paris"' in (failure.text or "")
        props = {p.get("name"): p.get("value") for p in cases["order_then_refund#2"].iter("property")}
        assert "0.5000" == props["tool_trajectory"]
        assert cases["greeting#1"].find("failure") is None

    def test_bad_inputs_exit_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text('{"eval_set_id": "s", "eval_cases": [{"eval_id": "c", "conversation": [{}]}]}')
        cfg = str(_vigil_yaml(tmp_path))
        assert 2 == main(["--config", cfg, "eval", "run", "--agent", "x:y", str(bad)])
        assert "bad.json: $.eval_cases[0].conversation[0].user_content: expected this field" in capsys.readouterr().err
        assert 2 == main(["--config", cfg, "eval", "run", "--agent", "no_such_module_xyz:f", str(EVALSET)])
        assert "cannot import 'no_such_module_xyz'" in capsys.readouterr().err


class TestHelper:
    def test_sync_and_async_agents(self) -> None:
        from examples.support_agent import agent

        results = assert_eval_passes(EVALSET, agent=agent.answer, config=CONFIG)
        assert 3 == len(results)

        async def async_answer(message: str, history: Sequence[dict[str, str]]) -> str:
            return await asyncio.to_thread(agent.answer, message, history)

        assert_eval_passes(EVALSET, agent=async_answer, config=CONFIG)

    def test_failure_shows_the_report(self) -> None:
        from examples.support_agent import agent

        with pytest.raises(AssertionError) as info:
            assert_eval_passes(EVALSET, agent=agent.answer_regressed, config=CONFIG)
        message = str(info.value)
        assert "weather_paris (0/1)" in message
        assert "missing refund_order" in message

    def test_an_agent_that_raises_is_an_error(self) -> None:
        def broken(message: str) -> str:
            raise RuntimeError("model down")

        (first, *_) = run_eval(EVALSET, broken, CONFIG)
        assert first.passed is False
        assert first.error is not None
        assert "RuntimeError: model down" in first.error


class TestScoreTraces:
    def test_captured_traces_by_case_id(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        spans = agent_run(llm_calls=2, tools_per_call=1, content=True)
        root = next(s for s in spans if s.parent_span_id is None)
        tagged = [
            replace(s, attributes={**s.attributes, "vigil.eval.case_id": "weather"}) if s is root else s for s in spans
        ]
        folder = tmp_path / "traces"
        folder.mkdir()
        (folder / "one.pb").write_bytes(encode_batch(TraceBatch(root.trace_id, tuple(tagged))))
        evalset = tmp_path / "set.json"
        evalset.write_text(json.dumps({"eval_set_id": "s", "eval_cases": [
            {"eval_id": "weather", "conversation": [{
                "user_content": {"parts": [{"text": "What is the weather in Paris and in Rome?"}]},
                "final_response": {"parts": [{"text": "Paris 18C, Rome 24C."}]},
                "intermediate_data": {"tool_uses": [{"name": "tool_0", "args": {"city": "Paris"}}]}}]},
            {"eval_id": "never_ran", "conversation": [{"user_content": {"parts": [{"text": "hello?"}]}}]},
        ]}))  # fmt: skip
        junit = tmp_path / "j.xml"
        code = main(["--config", str(_vigil_yaml(tmp_path)), "eval", "score", str(evalset), "--traces", str(folder),
                     "--json", "-", "--junit", str(junit)])  # fmt: skip
        assert 1 == code  # never_ran has no trace
        doc = json.loads(capsys.readouterr().out)
        by_case = {r["eval_id"]: r for r in doc["results"]}
        assert by_case["weather"]["passed"] is True
        assert [root.trace_id] == by_case["weather"]["trace_ids"]
        assert "no trace carries vigil.eval.case_id='never_ran'" in by_case["never_ran"]["error"]
        assert "1" == ET.parse(junit).getroot().get("errors")


class TestManage:
    def test_show(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == main(["eval", "show", str(EVALSET)])
        out = capsys.readouterr().out
        assert "order_then_refund" in out
        assert "refund_order" in out

    def test_add_from_run_is_redacted_and_deduplicated(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        cfg = _vigil_yaml(tmp_path)
        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        store = SqlStore(url)
        run = scored_run(
            "cd" * 16,
            reasons=["errored"],
            agent="support",
            messages=(Message("user", "Refund order 7 and mail me at jane@example.com"), Message("assistant", "Done.")),
            tools=(ToolCall("s1", "refund_order", arguments='{"order_id": "7"}'),),
            final_output="Done, refunded.",
        )
        RedactingSink(store, Redactor(("email",), {})).write([run])
        target = tmp_path / "cases.json"
        assert 0 == main(["--config", str(cfg), "eval", "add", str(target), "--from-run", "CD" * 16])
        (case,) = load_eval_set(target).eval_cases
        (turn,) = case.turns
        assert "jane@example.com" not in turn.user_text  # stored redacted, so the case is too
        assert "refund_order" == turn.tool_uses[0].name
        assert "Done, refunded." == turn.expected_response
        assert 0 == main(
            ["--config", str(cfg), "eval", "add", str(target), "--from-run", "cd" * 16, "--eval-id", "other"]
        )
        assert "already has this case" in capsys.readouterr().err
        assert 1 == len(load_eval_set(target).eval_cases)
        assert 1 == main(["--config", str(cfg), "eval", "add", str(target), "--from-run", "ef" * 16])
        assert "no stored run" in capsys.readouterr().err
        store.close()

    def test_export_alias(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        cfg = str(_vigil_yaml(tmp_path))
        upgrade_database(f"sqlite:///{tmp_path / 'vigil.db'}")
        assert 0 == main(["--config", cfg, "export", "--eval-set-id", "x"])
        old = json.loads(capsys.readouterr().out)
        assert 0 == main(["--config", cfg, "eval", "export", "--eval-set-id", "x"])
        new = json.loads(capsys.readouterr().out)
        assert old.keys() == new.keys()
        assert old["eval_cases"] == new["eval_cases"] == []


class TestMergeTurn:
    def test_the_last_trace_that_captured_an_answer_gives_it_even_empty(self) -> None:
        from scorers.model import Run
        from vigil.evalrun import merge_turn

        answered = Run("a" * 32, start_ns=1, final_output="Paris 18C.")
        empty = Run("b" * 32, start_ns=2, final_output="")
        silent = Run("c" * 32, start_ns=3)  # captured no answer (a tool-only trace)
        assert "" == merge_turn([silent, empty, answered]).response  # ADK: the last final response, empty
        assert "Paris 18C." == merge_turn([silent, answered]).response
        assert "" == merge_turn([silent]).response


class TestTurnTags:
    def test_a_multi_turn_case_is_one_trace_per_turn_sharing_case_and_conversation(self) -> None:
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from examples.support_agent import agent
        from scorers.eval.model import load_eval_set

        eval_set = load_eval_set(EVALSET)
        two_turns = eval_set.model_copy(update={"eval_cases": [eval_set.case("order_then_refund")]})
        run_eval(two_turns, agent.answer, CONFIG)  # the harness installs the global provider first
        provider = otel_trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        (result,) = run_eval(two_turns, agent.answer, CONFIG)
        assert result.passed
        roots = sorted(
            (s for s in exporter.get_finished_spans() if s.parent is None and s.attributes),
            key=lambda s: s.start_time or 0,
        )
        tagged = [s for s in roots if (s.attributes or {}).get("vigil.eval.case_id") == "order_then_refund"]
        assert 2 == len(tagged)
        first, second = (dict(s.attributes or {}) for s in tagged)
        assert (0, 1) == (first["vigil.eval.turn"], second["vigil.eval.turn"])
        assert first["gen_ai.conversation.id"] == second["gen_ai.conversation.id"]
        assert "support_agent" == first["vigil.eval.set_id"]
        assert tagged[0].context.trace_id != tagged[1].context.trace_id  # one trace per turn
        assert [f"{s.context.trace_id:032x}" for s in tagged] == list(result.trace_ids)
        exporter.shutdown()


class TestJudgeClosed:
    class _Judge:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    def test_closed_on_leaving_and_on_error(self) -> None:
        """The judge is closed once when the block ends and once when it raises; None is no judge."""
        from vigil.evalrun import judge_closed

        judge = self._Judge()
        with judge_closed(judge):  # type: ignore[arg-type]
            assert 0 == judge.closed
        assert 1 == judge.closed
        with pytest.raises(KeyError), judge_closed(judge):  # type: ignore[arg-type]
            raise KeyError("x")
        assert 2 == judge.closed
        with judge_closed(None):
            pass


class TestDimensionsCli:
    def test_add_with_dimension_and_tags(self, tmp_path: Path) -> None:
        cfg = _vigil_yaml(tmp_path)
        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        store = SqlStore(url)
        run = scored_run(
            "ab" * 16,
            reasons=["errored"],
            messages=(Message("user", "   ?"), Message("assistant", "Sorry?")),
            final_output="Sorry?",
        )
        RedactingSink(store, Redactor((), {})).write([run])
        store.close()
        target = tmp_path / "cases.json"
        argv = ["--config", str(cfg), "eval", "add", str(target), "--from-run", "ab" * 16]
        assert 0 == main([*argv, "--dimension", "robustness", "--tag", "blank", "--tag", "prod", "--tag", "blank"])
        (case,) = load_eval_set(target).eval_cases
        assert ("robustness", ("blank", "prod")) == (case.dimension, case.tags)
        assert 2 == len(json.loads(target.read_text())["eval_cases"][0]["metadata"])  # dimension, tags

    def test_robustness_names_the_cases_without_a_translation(self, capsys: pytest.CaptureFixture[str]) -> None:
        """No case of the example carries ``metadata.translations``: no language case, and the command says so."""
        assert 0 == main(["eval", "robustness", str(EVALSET), "--kind", "language", "--kind", "empty"])
        captured = capsys.readouterr()
        assert ["empty"] == [c["eval_id"] for c in json.loads(captured.out)["eval_cases"]]
        assert (
            f"vigil eval robustness: {EVALSET}: no language edge case for weather_paris, order_then_refund, greeting "
            '(add the question in another language as metadata.translations, e.g. {"fr": "..."})'
        ) == captured.err.strip()

    def test_robustness_writes_the_derived_set(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == main(["eval", "robustness", str(EVALSET), "--kind", "empty", "--kind", "injection"])
        doc = json.loads(capsys.readouterr().out)
        assert ["empty", "weather_paris.injection", "order_then_refund.injection", "greeting.injection"] == [
            c["eval_id"] for c in doc["eval_cases"]
        ]
        assert 2 == main(["eval", "robustness", str(EVALSET), "--kind", "typo"])
        assert "vigil eval robustness: unknown edge-case kind 'typo'" in capsys.readouterr().err
        bad = tmp_path / "b.json"
        bad.write_text("{}")
        assert 2 == main(["eval", "run", "--agent", "x:y", str(EVALSET), "--baseline", str(bad)])
        assert "an object with 'results'" in capsys.readouterr().err
