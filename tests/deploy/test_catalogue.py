"""The README's metric catalogue lists every metric the embedded roles register."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from collector.metrics import CollectorMetrics
from scorers.metrics import RunMetrics

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PACKAGES = ("collector", "scorers", "review_queue")


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
        assert len(exposed) >= 25

    def test_no_stale_or_misspelt_names(self) -> None:
        """Every name in the table is declared somewhere in Vigil's code (any role's metrics)."""
        source = "\n".join(p.read_text() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
        declared = set(re.findall(r'"(vigil_[a-z_]+)"', source))
        documented = set(re.findall(r"`(vigil_[a-z_]+)`", catalogue()))
        stale = {n for n in documented if n not in declared and n.removesuffix("_total") not in declared}
        assert set() == stale
