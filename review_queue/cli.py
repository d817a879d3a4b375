"""The ``vigil`` console script: the composition root of every role and tool.

``vigil run`` runs everything in one process; other sub-commands arrive with their
issues. Configuration errors exit with status 2 and a message naming the key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

import structlog

from collector.errors import CollectorError
from collector.settings import Settings
from scorers.errors import ScorersError

EXIT_CONFIG = 2


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


def _cmd_run(args: argparse.Namespace) -> int:
    from review_queue.embedded import build, serve

    settings = Settings.load(config_file=args.config)
    configure_logging(settings.log_level)
    emb = build(settings)
    drained = asyncio.run(serve(emb))
    return 0 if drained else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from review_queue.bench import main as bench_main

    return bench_main(args)


def _cmd_rules_check(args: argparse.Namespace) -> int:
    from scorers.registry import build_chain
    from scorers.rules import compile_rules

    settings = Settings.load(config_file=args.config)
    chain = build_chain(settings.scorers, optimal_steps=settings.optimal_steps)
    rules = compile_rules(settings.rules, [n for n, _ in chain], repeat_threshold=settings.repeat_threshold)
    for rule in rules:
        print(f"{rule.name:24} {rule.priority.value:7} {rule.expr}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``vigil``."""
    p = argparse.ArgumentParser(prog="vigil", description="Observability and review sidecar for LLM agents.")
    p.add_argument("--config", default=None, help="YAML config file (default $VIGIL_CONFIG or ./vigil.yaml)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="everything in one process on SQLite (receivers, scorers, API, /metrics)")
    run.set_defaults(func=_cmd_run)
    bench = sub.add_parser("bench", help="measure ingest and pipeline throughput and flag latency")
    bench.add_argument("--runs", type=int, default=20_000, help="runs per measurement")
    bench.add_argument("--repeat", type=int, default=5, help="repetitions (the median is reported)")
    bench.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    bench.set_defaults(func=_cmd_bench)
    rules = sub.add_parser("rules", help="flag rules")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    check = rules_sub.add_parser("check", help="validate the configured rules and print them")
    check.set_defaults(func=_cmd_rules_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vigil`` console script."""
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (CollectorError, ScorersError) as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


if __name__ == "__main__":
    sys.exit(main())
