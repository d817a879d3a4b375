"""The CEL evaluator (``common-expression-language``) without its command-line interface.

The package's ``cel/__init__.py`` imports its interactive CLI (``cel.cli``: prompt_toolkit, typer,
rich, pygments) before the compiled evaluator, which costs every Vigil process about 24 MB of
resident memory for code it never runs (measured with ``VmRSS`` around ``import cel``: +27 MB;
around this module: +3 MB). This module loads the compiled module ``cel.cel`` by itself, registered
under its own name, so that a later ``import cel`` (a user's plugin, a test) reuses it rather than
initialising the extension twice. When the package is already imported, or its layout is not the
expected one, it falls back to ``import cel``.

Use :func:`compile` and :class:`Context` from here rather than from ``cel``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cel.cel import Context, Program, compile

__all__ = ["Context", "Program", "compile"]


def _load() -> ModuleType:
    """The compiled ``cel.cel`` module, loaded without executing ``cel/__init__.py`` when possible."""
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    if "cel" not in sys.modules:
        package = importlib.util.find_spec("cel")
        locations = package.submodule_search_locations if package is not None else None
        spec = importlib.machinery.PathFinder.find_spec("cel.cel", list(locations or ()))
        if (
            spec is not None
            and spec.loader is not None
            and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
        ):
            module = importlib.util.module_from_spec(spec)
            sys.modules["cel.cel"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["cel.cel"]
                raise
            return module
    import cel.cel as module  # the package as published (it imports its CLI too)

    return module


if not TYPE_CHECKING:
    _core = _load()
    Context = _core.Context
    Program = _core.Program
    compile = _core.compile
