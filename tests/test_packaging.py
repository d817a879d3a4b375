"""The distribution as a user installs it: ``vigil-sidecar`` built, installed and run from a fresh venv.

The sdist and the wheel are built with ``python -m build`` (the wheel from the sdist, so the
compiled OTLP decoder must build from what the sdist ships) out of a copy of the source tree,
never writing into the checkout. The wheel is installed into a fresh virtualenv, which must hold
the compiled decoder, the reviewer UI's templates and static files, the migrations and
``alembic.ini``, and the overload script, and no test kit. Then ``vigil run --demo`` runs from that
virtualenv on free ports until it stores a run, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from vigil.process import start_vigil

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".capture-venvs",
    "node_modules",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.so",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "test-artifacts",
    "*.db",
    "*.db-*",
    "vigil.state",
)
"""What a checkout holds besides the source: never copied (a stale ``.so`` would hide a broken build)."""

STEP_TIMEOUT_S = 300


def _clean_env() -> dict[str, str]:
    """This environment without what would point a child at the checkout or this virtualenv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
    )
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert 0 == done.returncode, f"{' '.join(args)} exited {done.returncode}\n{output}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it, from a copy of the source tree."""
    base = tmp_path_factory.mktemp("packaging")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    out = base / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], base)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    """The one wheel."""
    (found,) = dist.glob("vigil_sidecar-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel (and its dependencies) installed."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", str(path)], path.parent)
    _run([str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)], path.parent)
    return path


def test_sdist_and_wheel_are_built(dist: Path) -> None:
    """``python -m build`` makes both artefacts under the distribution name."""
    assert 1 == len(list(dist.glob("vigil_sidecar-*.tar.gz")))
    assert 1 == len(list(dist.glob("vigil_sidecar-*-cp3*-*.whl")))  # platform wheel: it has the compiled decoder


def test_wheel_ships_the_data_files_and_no_test_kit(wheel: Path) -> None:
    """Templates, static files, migrations, alembic.ini and the overload script are in; tests are not."""
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        path.relative_to(ROOT).as_posix()
        for pattern in (
            "review_queue/templates/*.html",
            "review_queue/static/*",
            "review_queue/migrations/*.py",
            "review_queue/migrations/*.mako",
            "review_queue/migrations/versions/*.py",
        )
        for path in ROOT.glob(pattern)
    }
    wanted |= {"review_queue/alembic.ini", "vigil/bench/overload.lua"}
    assert set() == wanted - names
    assert any(n.startswith("collector/_otlp_fast.") and n.endswith(".so") for n in names)
    assert any(n.startswith("scorers/_redact_fast.") and n.endswith(".so") for n in names)
    assert [] == [n for n in names if n.split("/")[0] in ("tests", "test")]
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert {"collector", "scorers", "review_queue", "vigil"} == tops


def test_installed_package_has_the_compiled_decoder(venv: Path, tmp_path: Path) -> None:
    """The wheel built from the sdist compiled the OTLP decoder, and the venv imports its own copy."""
    probe = "import collector.otlp as o; print(o.compiled_decoder(), o.__file__)"
    compiled, where = _run([str(venv / "bin" / "python"), "-c", probe], tmp_path).split()
    assert "True" == compiled
    assert Path(where).is_relative_to(venv)


def test_vigil_run_demo_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """``vigil run --demo`` from the venv: ready, stores runs, exits 0 on SIGTERM (checked by start_vigil)."""
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "PYTHONPATH": ""}  # empty: the installed package, not the checkout
    vigil = [str(venv / "bin" / "vigil")]
    with start_vigil(tmp_path, env, ("--demo", "--demo-rate", "5"), command=vigil) as running:
        deadline = time.monotonic() + 90
        runs: list[object] = []
        while not runs and time.monotonic() < deadline:
            time.sleep(0.5)
            response = httpx.get(f"{running.api}/api/v1/runs", timeout=5)
            assert 200 == response.status_code, response.text
            runs = response.json()["items"]
        assert runs, f"no run stored within 90 s\n{running.log_tail()}"
