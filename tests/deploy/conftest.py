"""Fixtures of the deployment tests: what the code actually offers, to cross-check manifests against."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from vigil.cli import parser
from vigil.settings import VIGIL_CONFIG, Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
IMAGE = "vigil:0.1.0"


def _commands(p: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for action in p._actions:  # argparse exposes sub-commands only through _actions
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.add((*prefix, name))
                found |= _commands(sub, (*prefix, name))
    return found


@pytest.fixture(scope="session")
def cli_commands() -> set[tuple[str, ...]]:
    """Every ``vigil`` sub-command path the parser has, e.g. ``("run",)``, ``("db", "upgrade")``."""
    return _commands(parser())


@pytest.fixture(scope="session")
def settings_env() -> set[str]:
    """Every ``VIGIL_*`` variable the settings model reads."""
    return {f"VIGIL_{name.upper()}" for name in Settings.model_fields} | {VIGIL_CONFIG}


Command = Callable[[list[str]], tuple[str, ...]]
Port = Callable[[Mapping[str, str], str], int]


@pytest.fixture(scope="session")
def vigil_command(cli_commands: set[tuple[str, ...]]) -> Command:
    """Maps container args to the longest ``vigil`` sub-command path they start with (``()``: none)."""

    def leaf(args: list[str]) -> tuple[str, ...]:
        best: tuple[str, ...] = ()
        for n in range(1, len(args) + 1):
            if tuple(args[:n]) in cli_commands:
                best = tuple(args[:n])
        return best

    return leaf


@pytest.fixture(scope="session")
def setting_port() -> Port:
    """The port a role listens on for setting ``key`` (e.g. ``metrics_port``) given its environment."""

    def port(env: Mapping[str, str], key: str) -> int:
        value = env.get(f"VIGIL_{key.upper()}")
        return int(value) if value is not None else int(Settings.model_fields[key].default)

    return port
