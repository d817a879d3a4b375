"""Plumbing the one-shot commands share: logging for a terminal tool and the configured store.

Its own module so that the command modules (``eval_cli``, ``eval_session``, ``quality_cli``) and the
console script (``cli``) import it rather than each other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

import structlog

from vigil.settings import Settings

if TYPE_CHECKING:
    from review_queue.store import SqlStore

__all__ = ["configure_logging", "review_store"]


def configure_logging(level: str) -> None:
    """Configure logging once per process: JSON lines on stderr, for structlog and stdlib loggers alike."""
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("alembic").setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )


def review_store(args: argparse.Namespace) -> SqlStore:
    """The configured store (``--config`` and the environment), migrated: the tools run against the
    same database as the server."""
    from review_queue.store import SqlStore, upgrade_database

    settings = Settings.load(config_file=args.config)
    configure_logging("warning")
    upgrade_database(settings.database_url)
    return SqlStore(settings.database_url)
