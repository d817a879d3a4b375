"""The ROUGE-1 tokenizer: Unicode rules, and agreement with Google's rouge-score on ASCII text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer
from rouge_score import tokenize as rs_tokenize
from rouge_score.tokenizers import DefaultTokenizer

from scorers.eval.text import normalise_message, rouge1, tokenize

REFERENCE = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)  # what ADK's response_match_score uses
WORDS = ["the", "running", "runs", "ran", "device_2", "OFF", "Bedroom", "I'm", "don't", "42", "3.14", "a",
         "cats", "generously", "happily", "flights", "booked", "booking", "-", "!", ",", "\n", "  ", "x-ray",
         "e-mail"]  # fmt: skip


class TestTokenizer:
    def test_ascii_like_rouge_score(self) -> None:
        assert ["the", "quick", "fox", "jump", "devic", "2", "off"] == tokenize("The quick foxes jumped; device_2 OFF!")

    def test_scripts(self) -> None:
        assert ["東", "京", "タ", "ワ", "ー", "へ", "서", "울"] == tokenize("東京タワーへ 서울")
        assert ["café", "naïve", "straße"] == tokenize("Café naïve STRASSE".replace("STRASSE", "Straße"))
        assert ["file", "abc", "12"] == tokenize("ﬁle ＡＢＣ １２")  # NFKC
        assert ["ภ", "า", "ษ", "า"] == tokenize("ภาษา")
        assert ["ខ្មែ", "រ"] == tokenize("ខ្មែរ")  # a cluster keeps its coeng and vowel sign
        assert ["မြ", "န်", "မ", "ာ"] == tokenize("မြန်မာ")
        assert ["привет", "мир"] == tokenize("Привет, мир!")

    def test_non_ascii_not_dropped(self) -> None:
        assert 1.0 == rouge1("東京", "東京").fmeasure
        assert 0.0 == REFERENCE.score("東京", "東京")["rouge1"].fmeasure  # rouge-score drops it

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.sampled_from(WORDS), max_size=12), st.text(alphabet=st.characters(max_codepoint=127), max_size=40)
    )
    def test_tokens_equal_rouge_score_on_ascii(self, words: list[str], noise: str) -> None:
        text = " ".join(words) + noise
        assert rs_tokenize.tokenize(text, DefaultTokenizer(True)._stemmer) == tokenize(text)

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.sampled_from(WORDS), max_size=15),
        st.lists(st.sampled_from(WORDS), max_size=15),
    )
    def test_rouge1_equals_rouge_score_on_ascii(self, cand: list[str], ref: list[str]) -> None:
        c, r = " ".join(cand), " ".join(ref)
        expected = REFERENCE.score(r, c)["rouge1"]
        got = rouge1(c, r)
        assert pytest.approx(expected.precision) == got.precision
        assert pytest.approx(expected.recall) == got.recall
        assert pytest.approx(expected.fmeasure) == got.fmeasure

    def test_real_adk_reference(self) -> None:
        ref = "I have set the device_3 status to off."
        cand = "OK. I turned off device_3 in the Bedroom."
        assert pytest.approx(REFERENCE.score(ref, cand)["rouge1"].fmeasure) == rouge1(cand, ref).fmeasure

    def test_normalise_message(self) -> None:
        assert "what is the weather in paris?" == normalise_message("  What is the\n weather in  PARIS? ")

    @given(st.text(alphabet=st.sampled_from(list("aB1 ?\t\n\r\x0b\x0c\x1c\x1f\x7f")), max_size=12))
    def test_normalise_message_on_ascii_collapses_like_split(self, text: str) -> None:
        assert " ".join(text.lower().split()) == normalise_message(text)
