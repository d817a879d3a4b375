"""scorers.cel_core: the compiled CEL evaluator without the package's command-line interface."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_rules_load_without_the_cel_cli() -> None:
    out = _run("""
        import sys
        from scorers.rules import compile_rules
        from scorers import cel_core
        print("cel.cli" in sys.modules, "prompt_toolkit" in sys.modules, "cel" in sys.modules)
        print(cel_core.compile("x + 1").execute(cel_core.Context({"x": 41})))
    """)
    assert "False False False\n42" == out


def test_a_later_import_cel_reuses_the_loaded_evaluator() -> None:
    out = _run("""
        from scorers import cel_core
        import cel
        print(cel.compile is cel_core.compile, cel.evaluate("2 * 21", {}))
    """)
    assert "True 42" == out


def test_falls_back_to_the_package_when_it_is_already_imported() -> None:
    out = _run("""
        import cel
        from scorers import cel_core
        print(cel_core.Context is cel.Context, cel_core.compile("1 < 2").execute(cel_core.Context({})))
    """)
    assert "True True" == out


def test_no_vigil_process_imports_the_cel_cli() -> None:
    """Every module of the roles' import graph reaches CEL through scorers.cel_core."""
    out = _run("""
        import sys
        import vigil.cli, vigil.run, vigil.roles, review_queue.session_close
        print("cel.cli" in sys.modules, "prompt_toolkit" in sys.modules)
    """)
    assert "False False" == out
