"""The README's metric catalogue lists every metric the embedded roles register."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from collector.metrics import CollectorMetrics
from scorers.metrics import RunMetrics

README = Path(__file__).resolve().parents[2] / "README.md"


def catalogue() -> str:
    text = README.read_text()
    start = text.index("\n## Metrics\n")
    return text[start : text.index("\n## ", start + 1)]


class TestCatalogue:
    """README "Metrics" against the registries."""

    def test_every_registered_metric_is_documented(self) -> None:
        """The table names exactly the families of the collector and run metrics, with their exposed names."""
        registry = CollectorRegistry()
        CollectorMetrics(registry)
        RunMetrics(registry)
        exposed = set()
        for family in registry.collect():
            exposed.add(family.name + "_total" if family.type == "counter" else family.name)
        documented = set(re.findall(r"`(vigil_[a-z_]+)`", catalogue()))
        assert exposed - documented == set()
        assert documented - exposed == set()  # no stale or misspelt names either
        assert len(exposed) >= 25
