"""ROUGE-1 with a Unicode-aware tokenizer, and the text normalisation used to match user messages.

The tokenizer (:func:`tokenize`):

1. NFKC normalisation, then lower case;
2. Han (CJK ideographs), Hiragana, Katakana and Hangul: one token per character;
3. Thai, Lao, Khmer and Myanmar (written without spaces between words): one token per grapheme
   cluster (a base letter with its vowel signs and tone marks);
4. any other run of letters, digits and combining marks is a word; a word made only of ASCII
   letters and digits goes through the Porter stemmer (NLTK's, as Google's ``rouge-score``
   package uses it) when it is longer than three characters; other words are kept whole;
5. everything else (spaces, punctuation, symbols, ``_``) separates tokens.

On ASCII text the tokens are exactly those of ``rouge-score``'s default tokenizer with
``use_stemmer=True`` (which Google ADK's ``response_match_score`` uses); unlike it, non-ASCII
text is not dropped. ROUGE-1 F-measure (:func:`rouge1`) is the harmonic mean of unigram
precision (overlap / candidate tokens) and recall (overlap / reference tokens), 0 when either
is 0 (so two empty texts score 0, as in ``rouge-score``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import regex

__all__ = ["Rouge", "normalise_message", "rouge1", "tokenize"]

_PER_CHAR = (
    "\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff"  # Hangul
    "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"  # Hiragana, Katakana
    "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3038-\u303b\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\U00020000-\U0002fa1f\U00030000-\U0003134f"
)
_CLUSTERED = "\u0e00-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u19e0-\u19ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff"
"""Thai, Lao, Khmer (and symbols), Myanmar (and extensions)."""

_TOKEN = regex.compile(
    rf"(?P<char>[{_PER_CHAR}])"
    rf"|(?P<cluster>(?:(?=[{_CLUSTERED}])\X)+)"
    rf"|(?P<word>(?:(?![{_PER_CHAR}{_CLUSTERED}])[\p{{L}}\p{{N}}\p{{M}}])+)"
)
_CLUSTER = regex.compile(r"\X")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_SPACES = re.compile(r"\s+")


@functools.cache
def _porter() -> Callable[[str], str]:
    """NLTK's Porter stemmer, imported on first use: NLTK costs 25-40 MiB of resident memory, which
    a process that never computes ROUGE (``vigil run`` without an online eval) need not hold."""
    from nltk.stem.porter import PorterStemmer

    stem: Callable[[str], str] = PorterStemmer().stem
    return stem


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return _porter()(word) if len(word) > 3 else word


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` (see the module docstring). Pure."""
    if text.isascii():  # NFKC leaves ASCII alone; only [a-z0-9] runs are tokens (the common, fast case)
        return [_stem(w) for w in _ASCII_WORD.findall(text.lower())]
    text = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        piece = m.group()
        if kind == "char":
            tokens.append(piece)
        elif kind == "cluster":
            tokens.extend(c for c in _CLUSTER.findall(piece) if not c.isspace())
        elif piece.isascii():
            # ASCII letters/digits only here (punctuation never enters a word): rouge-score's tokens
            tokens.extend(_stem(w) for w in _ASCII_WORD.findall(piece))
        else:
            tokens.append(piece)
    return tokens


@functools.lru_cache(maxsize=4096)
def _counts(text: str) -> tuple[dict[str, int], int]:
    """Token counts of a reference and their total (memoised: references repeat; callers never mutate them)."""
    counts = Counter(tokenize(text))
    return dict(counts), counts.total()


@dataclass(frozen=True, slots=True)
class Rouge:
    """ROUGE-1 precision, recall and F-measure."""

    precision: float
    recall: float
    fmeasure: float


def rouge1(candidate: str, reference: str) -> Rouge:
    """ROUGE-1 of ``candidate`` (the agent's answer) against ``reference`` (the expected one). Pure."""
    tokens = tokenize(candidate)  # answers rarely repeat: not cached
    ref, ref_total = _counts(reference)
    # overlap = Σ min(candidate count, reference count): each candidate token uses up one of the reference's
    left = ref.copy()
    overlap = 0
    for token in tokens:
        m = left.get(token)
        if m:
            overlap += 1
            left[token] = m - 1
    precision = overlap / max(len(tokens), 1)
    recall = overlap / max(ref_total, 1)
    f = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return Rouge(precision, recall, f)


def normalise_message(text: str) -> str:
    """A user message as matched against eval cases: NFKC, case-folded, whitespace collapsed and trimmed."""
    if text.isascii():  # NFKC is the identity and casefold is lower on ASCII
        if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
            return text.lower()  # its only whitespace is single inner spaces: nothing to collapse
        return " ".join(text.lower().split())
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
