"""Tests for review_queue.privacy: nothing unredacted reaches the store, and configuration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from review_queue.privacy import RedactingSink
from scorers.model import Evidence, Message, ToolCall
from scorers.redact import RedactionConfigError
from tests.support.review_queue import InMemoryRunSink, scored_run
from vigil.cli import EXIT_CONFIG, main
from vigil.run import build
from vigil.scoring import redactor_from_settings
from vigil.settings import Settings

SECRET = "alice@example.com"


def _content() -> dict[str, object]:
    return {
        "final_output": f"mailed {SECRET}",
        "messages": (Message("user", f"I am {SECRET}, card 4111 1111 1111 1111"),),
        "tools": (ToolCall("01" * 8, "send", arguments=f'{{"to": "{SECRET}"}}', result="sent"),),
        "attributes": {"user.id": "u1", "http.request.header.authorization": "Bearer abcdefghijklmnopqrstuv"},
        "error_type": f"SendError: {SECRET}",
        "evidence": (
            Evidence(
                "errored", "errored.root", "02" * 8, f"send to {SECRET}", "status.message", f"failed for {SECRET}"
            ),
        ),
    }


def test_flagged_runs_are_redacted_before_the_inner_sink() -> None:
    """A flagged run reaches the store with its content redacted and denied attributes gone."""
    inner = InMemoryRunSink()
    sink = RedactingSink(inner, redactor_from_settings(Settings.load({})))
    original = scored_run("ab" * 16, reasons=["errored"], **_content())
    (outcome,) = sink.write([original])
    assert outcome.new_flag
    stored = inner.runs["ab" * 16].run
    assert "mailed [REDACTED:email]" == stored.final_output
    assert "I am [REDACTED:email], card [REDACTED:card]" == stored.messages[0].content
    assert '{"to": "[REDACTED:email]"}' == stored.tools[0].arguments
    assert {"user.id": "u1"} == dict(stored.attributes)
    assert "SendError: [REDACTED:email]" == stored.error_type
    assert ("failed for [REDACTED:email]", "send to [REDACTED:email]") == (
        stored.evidence[0].value,
        stored.evidence[0].span_name,
    )
    assert SECRET in str(original.run.final_output)


def test_reason_evidence_is_redacted() -> None:
    """The evidence of flag reasons quotes run text too: redacted before the store."""
    inner = InMemoryRunSink()
    sink = RedactingSink(inner, redactor_from_settings(Settings.load({})))
    quoted = Evidence("errored", "errored.root", "", "", "status.message", f"mail {SECRET}")
    sink.write([dataclasses.replace(scored_run("ef" * 16, reasons=["errored"]), evidence=(quoted,))])
    assert "mail [REDACTED:email]" == inner.runs["ef" * 16].evidence[0].value


def test_unflagged_runs_have_their_error_type_and_evidence_redacted() -> None:
    """An unflagged run's content is never persisted; its error type and evidence (run-index columns) are redacted."""
    inner = InMemoryRunSink()
    RedactingSink(inner, redactor_from_settings(Settings.load({}))).write([scored_run("cd" * 16, **_content())])
    assert "SendError: [REDACTED:email]" == inner.runs["cd" * 16].run.error_type
    assert "failed for [REDACTED:email]" == inner.runs["cd" * 16].run.evidence[0].value


def test_settings_from_environment() -> None:
    """VIGIL_REDACT picks built-ins (empty: none); VIGIL_ATTRIBUTES_ALLOW keeps only matching keys."""
    settings = Settings.load({"VIGIL_REDACT": "card", "VIGIL_ATTRIBUTES_ALLOW": "user.*"})
    redactor = redactor_from_settings(settings)
    assert ("card",) == redactor.names
    assert SECRET == redactor.text(SECRET)
    assert redactor.keep_attribute("user.id")
    assert not redactor.keep_attribute("app.id")
    assert () == redactor_from_settings(Settings.load({"VIGIL_REDACT": ""})).names


def test_bad_pattern_refuses_to_build(tmp_path: Path) -> None:
    """A custom pattern that does not compile stops start-up with its name."""
    settings = Settings.load(
        {}, overrides={"redact_patterns": {"ticket": "(["}, "database_url": f"sqlite:///{tmp_path}/v.db"}
    )
    with pytest.raises(RedactionConfigError, match="ticket"):
        build(settings)


def test_bad_pattern_name_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vigil run`` with an unknown redaction pattern exits 2 and names it."""
    cfg = tmp_path / "vigil.yaml"
    cfg.write_text(f"redact: [email, passport]\ndatabase_url: sqlite:///{tmp_path}/v.db\n")
    assert EXIT_CONFIG == main(["--config", str(cfg), "run"])
    assert "passport" in capsys.readouterr().err
