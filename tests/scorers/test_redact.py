"""Tests for scorers.redact: built-in patterns, custom patterns, attribute filters, run copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scorers.model import Message, Run, Step, StepKind, ToolCall
from scorers.redact import RedactionConfigError, Redactor, luhn_ok

R = Redactor()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail alice.smith+tag@example.co.uk now", "mail [REDACTED:email] now"),
        ("call +4915112345678.", "call [REDACTED:phone]."),
        ("call (555) 123-4567 today", "call [REDACTED:phone] today"),
        ("office 030 1234 5678", "office [REDACTED:phone]"),
        ("card 4111 1111 1111 1111 exp", "card [REDACTED:card] exp"),
        ("card 4111-1111-1111-1111", "card [REDACTED:card]"),
        ("key sk-proj-abcdefghijklmnop1234 used", "key [REDACTED:api_key] used"),
        ("aws AKIAIOSFODNN7EXAMPLE", "aws [REDACTED:api_key]"),
        ("gh ghp_" + "a" * 36, "gh [REDACTED:api_key]"),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwx", "Authorization: [REDACTED:api_key]"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "jwt [REDACTED:api_key]"),
    ],
)
def test_builtin_patterns(text: str, expected: str) -> None:
    """Each built-in pattern replaces what it is meant to, and only that."""
    assert expected == R.text(text)


@pytest.mark.parametrize(
    "text",
    [
        "order 1234567890123 shipped",  # 13 digits failing Luhn: an id, not a card
        "on 2026-11-22 at 10:15",
        "version 1.2.3, 42 items, step 7 of 12",
        "trace 0af7651916cd43dd8448eb211c80319c",
        "call_abc123 returned 200",
        "tokens: 1234 in, 567 out",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    """Ids, dates, versions and counts are not mistaken for personal data."""
    assert text == R.text(text)


def test_luhn() -> None:
    """The Luhn check accepts a test card number and rejects a one-digit change."""
    assert luhn_ok("4111 1111 1111 1111")
    assert not luhn_ok("4111 1111 1111 1112")


@given(st.text(max_size=200))
def test_idempotent(text: str) -> None:
    """Redacting twice changes nothing more than redacting once."""
    once = R.text(text)
    assert once == R.text(once)


def test_custom_patterns_and_selection() -> None:
    """Only chosen built-ins apply; custom patterns are named in the replacement."""
    r = Redactor(["email"], {"employee_id": r"\bEMP-\d{6}\b"})
    assert "[REDACTED:email] [REDACTED:employee_id] +4915112345678" == r.text("a@b.io EMP-123456 +4915112345678")
    assert "a@b.io" == Redactor([]).text("a@b.io")


@pytest.mark.parametrize(
    ("names", "custom", "message"),
    [
        (["emails"], None, "unknown redaction pattern 'emails'"),
        ([], {"bad": "("}, "redaction pattern 'bad' does not compile"),
        ([], {"bad name": "x"}, "use letters, digits and _"),
    ],
)
def test_bad_configuration_is_refused(names: list[str], custom: dict[str, str] | None, message: str) -> None:
    """A wrong name or a regex that does not compile is refused with a message naming it."""
    with pytest.raises(RedactionConfigError, match=message):
        Redactor(names, custom)


def test_attribute_filters() -> None:
    """Deny globs win over allow globs; an empty allow list keeps everything not denied."""
    r = Redactor(deny=["*password*"], allow=["app.*", "user.password"])
    assert r.keep_attribute("app.tenant")
    assert not r.keep_attribute("user.password")
    assert not r.keep_attribute("other.key")
    assert R.keep_attribute("app.tenant")
    assert not R.keep_attribute("http.request.header.Authorization")


def test_run_copy_redacts_every_free_text_field() -> None:
    """Final answer, messages, tool arguments/results/errors, span status and attributes are redacted."""
    run = Run(
        trace_id="ab" * 16,
        final_output="write to bob@example.com",
        error_type="ValueError: bob@example.com",
        messages=(Message("user", "my card is 4111 1111 1111 1111"),),
        tools=(
            ToolCall(
                "01" * 8, "send", arguments='{"to": "bob@example.com"}', result="ok", error="denied for +4915112345678"
            ),
        ),
        steps=(Step("02" * 8, None, "chat", StepKind.LLM, status_message="key sk-abcdefghijklmnopqrstu"),),
        attributes={"user.email": "bob@example.com", "db.password": "hunter2", "n": 3},
    )
    out = R.run(run)
    assert "write to [REDACTED:email]" == out.final_output
    assert "ValueError: [REDACTED:email]" == out.error_type
    assert "my card is [REDACTED:card]" == out.messages[0].content
    tool = out.tools[0]
    assert ('{"to": "[REDACTED:email]"}', "ok", "denied for [REDACTED:phone]") == (
        tool.arguments,
        tool.result,
        tool.error,
    )
    assert "key [REDACTED:api_key]" == out.steps[0].status_message
    assert {"user.email": "[REDACTED:email]", "n": 3} == dict(out.attributes)
    assert "write to bob@example.com" == run.final_output  # the input is not modified


def _whole_text(text: str, redactor: Redactor = R) -> str:
    """The reference: every pattern of ``redactor`` substituted over the whole text, in its order."""
    import re

    from scorers.redact import BUILTIN_PATTERNS, luhn_ok

    for name in redactor.names:
        marker = f"[REDACTED:{name}]"

        def replace(match: re.Match[str], marker: str = marker, name: str = name) -> str:
            return match.group() if name == "card" and not luhn_ok(match.group()) else marker

        text = re.sub(BUILTIN_PATTERNS[name], replace, text)
    return text


# Text dense in what the patterns look for: digits (ASCII and others \d matches), their separators,
# e-mail characters, key prefixes, and letters around them.
_PIECES = st.one_of(
    st.sampled_from(
        [" ", "-", ".", "(", ")", "+", "@", "_", "%", "a", "Z", "x", "\n", "sk-", "AKIA", "ghp_", "xoxb-", "AIza",
         "eyJ", "Bearer ", "bearer\t", "example.com", ".org", "٣", "߂", "4111", "1111", "555", "0134", "2026-11-03"]
    ),
    st.text(alphabet="0123456789", min_size=1, max_size=6),
    st.text(max_size=4),
)  # fmt: skip
_DENSE = st.lists(_PIECES, max_size=60).map("".join)


@given(_DENSE)
def test_candidate_runs_give_what_the_whole_text_gives(text: str) -> None:
    """Running the built-ins on the scanned candidate runs only redacts exactly what the whole-text
    substitution does: the same secrets caught, nothing new kept or cut."""
    assert _whole_text(text) == R.text(text)


@given(_DENSE)
def test_compiled_scan_equals_the_python_scan(text: str) -> None:
    """The compiled scanner and its pure-Python twin find the same candidates."""
    from scorers import redact

    assert redact._FAST is not None, "scorers._redact_fast was not built (pip install needs a C compiler)"
    assert redact._scan_py(text) == redact._FAST.scan(text)


def test_custom_patterns_run_over_the_whole_text_after_the_builtins() -> None:
    """A custom pattern sees the text the built-ins left, and the built-ins see what an earlier change left."""
    redactor = Redactor(["email", "phone"], {"ticket": r"TICKET-\d+"})
    assert "mail [REDACTED:email], call [REDACTED:phone], [REDACTED:ticket]" == redactor.text(
        "mail a.b@example.com, call +4915112345678, TICKET-12345678"
    )


def test_a_custom_pattern_under_a_built_in_name_runs_over_the_whole_text() -> None:
    """Only the built-in expressions are confined to the scan's candidate runs: a custom ``phone`` that
    matches text no phone run holds still redacts it."""
    redactor = Redactor(["phone"], {"phone": r"ext\. \d{2}"})
    assert "call [REDACTED:phone] today" == redactor.text("call ext. 42 today")
