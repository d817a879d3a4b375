"""Load the sanitizer builds of Vigil's C extensions (``build/fuzz/``, made by ``scripts/fuzz/build.sh``)
in place of the installed ones, before anything imports ``collector`` or ``scorers``.

Imported first by every harness. A meta-path finder answers for ``collector._otlp_fast`` and
``scorers._redact_fast`` with the files in ``build/fuzz/``; everything else imports as usual.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "fuzz"
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
BUILT = {
    "collector._otlp_fast": BUILD / f"_otlp_fast{_SUFFIX}",
    "scorers._redact_fast": BUILD / f"_redact_fast{_SUFFIX}",
}


class _Sanitized(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        built = BUILT.get(fullname)
        if built is None:
            return None
        if not built.exists():
            raise SystemExit(f"{built} is missing: run scripts/fuzz/build.sh first")
        return importlib.util.spec_from_file_location(fullname, built)


if any(name in sys.modules for name in BUILT):
    raise SystemExit("scripts/fuzz/_sanitized.py must be imported before collector and scorers")
sys.path.insert(0, str(ROOT))  # the project's own packages (tests.support too), never an installed copy
sys.meta_path.insert(0, _Sanitized())


def loaded(name: str) -> ModuleType:
    """The sanitizer build of ``name``, checked to be the one in use."""
    module = importlib.import_module(name)
    if Path(module.__file__ or "") != BUILT[name]:
        raise SystemExit(f"{name} came from {module.__file__}, not {BUILT[name]}")
    return module
