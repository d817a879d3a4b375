"""scorers.dialects.base: the check that tells where orjson's canonical JSON may differ from the standard library's."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from scorers.dialects.base import _not_orjson

_PLAIN: re.Pattern[bytes] = re.compile(rb"[0-9][.eE]|null|\x7f")
"""The check as first written: a digit before a point or an exponent, ``null``, DEL."""


@given(st.lists(st.sampled_from([b"0", b"9", b"5", b".", b"e", b"E", b"n", b"u", b"l", b"null", b"\x7f", b'"', b"a"]))
       .map(b"".join) | st.binary(max_size=40))  # fmt: skip
def test_byte_searches_find_what_the_pattern_finds(text: bytes) -> None:
    """The byte searches say "may differ" exactly where the pattern finds a match."""
    assert (_PLAIN.search(text) is not None) == _not_orjson(text)
