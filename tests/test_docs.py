"""The manual's generated reference pages (docs/reference/) match the code they are generated from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current() -> None:
    """``scripts/gen_docs.py --check`` passes: a setting, metric or command changed without regenerating fails."""
    assert 0 == _gen_docs().main(["--check"]), "run: .venv/bin/python scripts/gen_docs.py"


def test_every_setting_and_metric_is_in_the_reference() -> None:
    """The pages name every settings field with its variable, and every declared metric."""
    from vigil.settings import Settings

    settings = (ROOT / "docs" / "reference" / "settings.md").read_text()
    for key in Settings.model_fields:
        assert f"| `VIGIL_{key.upper()}`<br>`{key}` |" in settings, key
    metrics = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    names = [row[0] for row in _gen_docs().declared_metrics()]
    assert "vigil_runs_total" in names
    for name in names:
        assert f"| `{name}` |" in metrics, name


def test_readme_fits_on_a_screen_or_two() -> None:
    """README.md: the title and one sentence first, under 250 lines, its images and manual links resolve."""
    import re

    text = (ROOT / "README.md").read_text()
    assert text.startswith("# Vigil\n\n")
    assert len(text.splitlines()) < 250
    targets = re.findall(r"\]\(((?:docs/)[^)#\s]+)", text)
    assert "docs/images/review.png" in targets
    for target in targets:
        assert (ROOT / target).exists(), target
