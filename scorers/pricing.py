"""Estimated cost of a run's LLM calls, from a per-model price table.

Prices are USD per million tokens, ``(input, output)``. A model name matches the longest
table key it starts with, so ``gpt-4o-mini-2024-07-18`` is priced as ``gpt-4o-mini`` (not
``gpt-4o``). Models not in the table are not priced: their tokens are reported separately
so a dashboard can show how much of the spend the estimate covers.

The built-in table holds OpenAI list prices; ``model_prices`` in ``vigil.yaml`` adds models
or overrides these (see docs/metrics.md). It is an estimate: cached-input discounts, batch
pricing and provider-specific billing are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scorers.model import Run, StepKind

Price = tuple[float, float]
"""USD per million input tokens, USD per million output tokens."""

DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
}
"""OpenAI list prices (USD per 1M tokens, standard tier) for the models the demo fleet uses and
their neighbours; extend or override with ``model_prices`` in ``vigil.yaml``."""

_LLM = StepKind.LLM  # module constant: enum attribute lookups cost more than a global read

MAX_CACHED_MODELS = 1024
"""Distinct model names whose lookup is memoised (model names come from traces)."""


@dataclass(frozen=True, slots=True)
class RunCost:
    """The estimated cost of one run.

    Attributes:
        usd: estimated USD of the priced LLM calls.
        unpriced_tokens: tokens of LLM calls whose model is not in the table (or unknown).
    """

    usd: float
    unpriced_tokens: int


class PriceTable:
    """Looks up model prices by longest key prefix. Thread-safe for concurrent reads.

    Args:
        prices: model name (or prefix) to ``(input, output)`` USD per million tokens; merged
            over :data:`DEFAULT_PRICES`.

    Raises:
        ValueError: a price is negative.
    """

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        table = {**DEFAULT_PRICES, **(prices or {})}
        for model, (inp, out) in table.items():
            if inp < 0 or out < 0:
                raise ValueError(f"model_prices[{model!r}]: prices must be >= 0, got ({inp}, {out})")
        self._keys = sorted(table, key=len, reverse=True)
        self._table = table
        self._cache: dict[str, Price | None] = {}

    def price(self, model: str | None) -> Price | None:
        """The price of ``model``, or ``None`` when no key is a prefix of it."""
        if not model:
            return None
        if model in self._cache:
            return self._cache[model]
        found = next((self._table[k] for k in self._keys if model.startswith(k)), None)
        if len(self._cache) < MAX_CACHED_MODELS:
            self._cache[model] = found
        return found

    def run_cost(self, run: Run) -> RunCost:
        """Estimate the cost of ``run``'s LLM steps (the de-duplicated calls that carry tokens)."""
        usd = 0.0
        unpriced = 0
        if not (run.input_tokens or run.output_tokens):
            return RunCost(usd, unpriced)
        cache = self._cache
        for step in run.steps:
            if step.kind is not _LLM:
                continue
            model = step.model
            price = cache[model] if model in cache else self.price(model)
            if price is None:
                unpriced += step.input_tokens + step.output_tokens
            else:
                usd += (step.input_tokens * price[0] + step.output_tokens * price[1]) / 1e6
        return RunCost(usd, unpriced)
