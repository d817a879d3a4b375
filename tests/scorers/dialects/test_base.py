"""scorers.dialects.base: the check that tells where orjson's canonical JSON may differ from the standard library's."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from scorers.dialects.base import _NOT_ORJSON

_PLAIN: re.Pattern[bytes] = re.compile(rb"[0-9][.eE]|null|\x7f")
"""The check as first written: a digit before a point or an exponent, ``null``, DEL."""


@given(st.lists(st.sampled_from([b"0", b"9", b"5", b".", b"e", b"E", b"n", b"u", b"l", b"null", b"\x7f", b'"', b"a"]))
       .map(b"".join) | st.binary(max_size=40))  # fmt: skip
def test_literal_first_spelling_matches_what_the_plain_pattern_matches(text: bytes) -> None:
    """The spelling the search can skip with finds a match exactly where the plain pattern does."""
    assert (_PLAIN.search(text) is None) == (_NOT_ORJSON.search(text) is None)
