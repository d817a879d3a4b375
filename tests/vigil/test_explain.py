"""``vigil explain``: derived fields, evidence and why-not, from captured OTLP files or a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collector.model import TraceBatch
from collector.otlp import encode_batch
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Evidence
from tests.support.review_queue import scored_run
from tests.support.spans import node, trace
from vigil.cli import EXIT_CONFIG, main
from vigil.explain import why_not

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def _config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "vigil.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'vigil.db'}\n{extra}")
    return cfg


def _explain_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *files: Path, extra: str = ""
) -> list[dict[str, Any]]:
    assert 0 == main(["--config", str(_config(tmp_path, extra)), "explain", "--json", *map(str, files)])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


class TestFiles:
    def test_every_run_of_a_capture(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """One document per trace; the limit-hit runs carry their evidence and a flag."""
        truth = json.loads((FIXTURES / "vercel_ai.truth.json").read_text())
        docs = _explain_json(tmp_path, capsys, FIXTURES / "vercel_ai.json")
        by_id = {d["trace_id"]: d for d in docs}
        assert {r["trace_id"] for r in truth["runs"]} <= set(by_id)
        for expected in truth["runs"]:
            doc = by_id[expected["trace_id"]]
            limit = doc["signals"]["hit_max_iterations"]
            assert expected["hit_max_iterations"] == limit["set"], expected["scenario"]
            if limit["set"]:
                assert limit["evidence"], expected["scenario"]
                assert "hit_max_iterations" in doc["flag"]["reasons"]
            else:
                assert limit["why_not"], expected["scenario"]

    def test_text_output(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The text form names each signal, the rule that set it and the span."""
        assert 0 == main(["--config", str(_config(tmp_path)), "explain", str(FIXTURES / "langgraph_agent.json")])
        out = capsys.readouterr().out
        assert "hit_max_iterations: SET" in out
        assert "[limit.vocabulary]" in out
        assert "why not:" in out
        assert "run(s) explained." in out

    def test_user_detection_rules_apply(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The detection section of vigil.yaml is used: a disabled built-in no longer fires."""
        docs = _explain_json(
            tmp_path, capsys, FIXTURES / "vercel_ai.json", extra="detection: {disable: [limit.cutoff]}\n"
        )
        rules = {e["rule"] for d in docs for e in d["signals"]["hit_max_iterations"]["evidence"]}
        assert "limit.cutoff" not in rules

    def test_session_and_user_ids(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The ids read from the trace are shown, and the sessions section of vigil.yaml is used."""
        truth = json.loads((FIXTURES / "langgraph_sessions.truth.json").read_text())
        docs = {d["trace_id"]: d for d in _explain_json(tmp_path, capsys, FIXTURES / "langgraph_sessions.json")}
        for expected in truth["runs"]:
            doc = docs[expected["trace_id"]]
            assert (expected["session_id"], expected["user_id"]) == (doc["session_id"], doc["user_id"])
        custom = trace(node("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent", "app.chat": "c-1"}))
        capture = tmp_path / "custom.pb"
        capture.write_bytes(encode_batch(TraceBatch(custom[0].trace_id, tuple(custom))))
        [doc] = _explain_json(tmp_path, capsys, capture, extra="sessions: {session_keys: [app.chat]}\n")
        assert "c-1" == doc["session_id"]

    def test_directory_and_protobuf(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A directory stands for its files; protobuf bodies are read too."""
        folder = tmp_path / "captures"
        folder.mkdir()
        spans = trace(node("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"}))
        (folder / "one.pb").write_bytes(encode_batch(TraceBatch(spans[0].trace_id, tuple(spans))))
        docs = _explain_json(tmp_path, capsys, folder)
        assert ["bot"] == [d["agent"] for d in docs]

    @pytest.mark.parametrize(("content", "message"), [(None, "no such file"), (b"not otlp at all", "not an OTLP")])
    def test_bad_input_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
    ) -> None:
        path = tmp_path / "bad.pb"
        if content is not None:
            path.write_bytes(content)
        assert EXIT_CONFIG == main(["--config", str(_config(tmp_path)), "explain", str(path)])
        err = capsys.readouterr().err.strip()
        assert message in err
        assert 1 == len(err.splitlines())


class TestStored:
    def test_stored_run_with_evidence(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        cfg = _config(tmp_path)
        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        ev = Evidence("safety_blocked", "block.finish_reason", "b" * 16, "chat", "finish_reason", "content_filter")
        SqlStore(url).write([scored_run("ab" * 16, reasons=["safety_blocked"], safety_blocked=True, evidence=(ev,))])
        assert 0 == main(["--config", str(cfg), "explain", "--trace", "AB" * 16])
        out = capsys.readouterr().out
        assert "[block.finish_reason] span 'chat'" in out
        assert 1 == main(["--config", str(cfg), "explain", "--trace", "cd" * 16])


def test_why_not_names_the_last_finish_reason() -> None:
    from scorers.normalise import normalise

    chat = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ["stop"]}
    run = normalise(trace(node("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent"}, node("chat", chat))))
    reasons = why_not(run)
    assert "finished with stop" in reasons["hit_max_iterations"]
    assert "finish reasons seen: stop" in reasons["safety_blocked"]


def test_corrupt_gzip_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.gz`` file that is not gzip is refused like any other bad file: one line, exit 2."""
    path = tmp_path / "capture.json.gz"
    path.write_bytes(b"not gzip at all")
    assert EXIT_CONFIG == main(["--config", str(_config(tmp_path)), "explain", str(path)])
    err = capsys.readouterr().err.strip()
    assert "not an OTLP trace export" in err
    assert 1 == len(err.splitlines())


def test_what_the_trace_cannot_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ADK's callback guardrail leaves neither a model span nor a guardrail span: explain says so, with the reason."""
    truth = json.loads((FIXTURES / "google_adk.truth.json").read_text())
    guard = next(r["trace_id"] for r in truth["runs"] if r["scenario"] == "ad_guardrail")
    docs = {d["trace_id"]: d for d in _explain_json(tmp_path, capsys, FIXTURES / "google_adk.json")}
    [text] = docs[guard]["cannot_show"]
    assert text.startswith("this trace cannot show whether a guardrail answered instead of the model, because")
    assert 0 == main(["--config", str(_config(tmp_path)), "explain", str(FIXTURES / "google_adk.json")])
    assert "this trace cannot show whether a guardrail answered" in capsys.readouterr().out
