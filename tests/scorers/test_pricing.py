"""Tests for scorers.pricing: longest-prefix lookup and the estimated cost of a run."""

from __future__ import annotations

import pytest

from scorers.model import Run, Step, StepKind
from scorers.pricing import DEFAULT_PRICES, PriceTable


def llm(model: str | None, tokens_in: int, tokens_out: int, kind: StepKind = StepKind.LLM) -> Step:
    return Step(f"s{tokens_in}", None, "chat", kind, model=model, input_tokens=tokens_in, output_tokens=tokens_out)


class TestPriceTable:
    """Model names match the longest key they start with."""

    def test_longest_prefix_wins(self) -> None:
        """A dated gpt-4o-mini snapshot is priced as gpt-4o-mini, not gpt-4o."""
        table = PriceTable()
        assert DEFAULT_PRICES["gpt-4o-mini"] == table.price("gpt-4o-mini-2024-07-18")
        assert DEFAULT_PRICES["gpt-4o"] == table.price("gpt-4o-2024-11-20")

    def test_unknown_and_missing_models(self) -> None:
        """No matching key, or no model at all, has no price."""
        assert PriceTable().price("claude-x") is None
        assert PriceTable().price(None) is None

    def test_overrides_win_over_defaults(self) -> None:
        """A configured price replaces the built-in one and new models are added."""
        table = PriceTable({"gpt-4o": (1.0, 2.0), "local-llama": (0.0, 0.0)})
        assert (1.0, 2.0) == table.price("gpt-4o")
        assert (0.0, 0.0) == table.price("local-llama-3")

    def test_negative_price_refused(self) -> None:
        """A negative price is a ValueError naming the model."""
        with pytest.raises(ValueError, match="bad"):
            PriceTable({"bad": (-1.0, 0.0)})


class TestRunCost:
    """Only de-duplicated LLM steps count; unknown models are reported, not guessed."""

    def test_cost_of_priced_and_unpriced_steps(self) -> None:
        """1M input tokens of gpt-4o-mini cost its input price; unknown-model tokens are unpriced."""
        run = Run(
            trace_id="a" * 32,
            input_tokens=1_000_010,  # the run totals sum its LLM steps (normalise's contract)
            output_tokens=500_005,
            steps=(
                llm("gpt-4o-mini", 1_000_000, 0),
                llm("gpt-4o-mini", 0, 500_000),
                llm("mystery", 10, 5),
                llm("gpt-4o", 1_000_000, 1_000_000, kind=StepKind.OTHER),  # nested duplicate: not counted
            ),
        )
        cost = PriceTable().run_cost(run)
        assert 0.15 + 0.30 == pytest.approx(cost.usd)
        assert 15 == cost.unpriced_tokens

    def test_run_without_tokens_costs_nothing(self) -> None:
        """A run with no token usage is free and has no unpriced tokens (its steps are not walked)."""
        run = Run(trace_id="b" * 32, steps=(llm("mystery", 0, 0),))
        cost = PriceTable().run_cost(run)
        assert (0.0, 0) == (cost.usd, cost.unpriced_tokens)
