"""The ``vigil`` console script: the composition root of every role and tool.

``vigil run`` runs everything in one process; other sub-commands arrive with their
issues. Configuration errors exit with status 2 and a message naming the key.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from collector.errors import CollectorError
from review_queue.errors import ReviewQueueError
from scorers.errors import ScorersError
from vigil.settings import Settings
from vigil.tools import configure_logging, review_store

if TYPE_CHECKING:
    pass

EXIT_CONFIG = 2


def _cmd_run(args: argparse.Namespace) -> int:
    from review_queue.store import upgrade_database_in_child
    from vigil.run import build, serve

    settings = _settings(args)
    if args.demo:  # the fleet's OpenAI client would log every request at info
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("httpx2").setLevel(logging.WARNING)
        settings = demo_settings(settings)
    upgrade_database_in_child(settings.database_url)  # the server then never imports Alembic
    emb = build(settings)
    drained = asyncio.run(serve(emb, demo_rate=args.demo_rate if args.demo else None, demo_seed=args.demo_seed))
    return 0 if drained else 1


def demo_settings(settings: Settings) -> Settings:
    """``vigil run --demo``'s settings: the demo's conversations close a minute after their last turn
    (:data:`collector.demo.plan.SESSION_IDLE_S`) unless ``session_idle_s`` was set (file or environment)."""
    from collector.demo.plan import SESSION_IDLE_S

    if "session_idle_s" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"session_idle_s": SESSION_IDLE_S})


def _cmd_demo(args: argparse.Namespace) -> int:
    from collector.demo.fleet import DemoFleet
    from collector.demo.plan import fresh_seed

    configure_logging("warning")  # the live progress display owns the terminal
    endpoint = args.endpoint or ("http://127.0.0.1:4317" if args.protocol == "grpc" else "http://127.0.0.1:4318")
    try:
        fleet = DemoFleet(
            endpoint,
            rate_per_s=args.rate,
            duration_s=args.duration,
            runs=args.runs,
            seed=fresh_seed() if args.seed is None else args.seed,
            protocol=args.protocol,
            pace=args.pace,
            on_feedback=_feedback_poster(args.feedback_url, args.feedback_token) if args.feedback_url else None,
        )
    except ValueError as exc:
        print(f"vigil demo: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # Ctrl-C or SIGTERM: start no more runs, finish and flush the others, write the truth.
    previous = {sig: signal.signal(sig, lambda *_: fleet.shutdown(0)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        runs = fleet.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if args.truth is not None:
        doc = {"endpoint": endpoint, "seed": fleet.seed, "runs": [asdict(r) for r in runs]}
        args.truth.write_text(json.dumps(doc, indent=1) + "\n")
    print(fleet.stats.summary(), file=sys.stderr)
    stats = fleet.stats
    if stats.spans_failed or (runs and not stats.spans_exported):
        total = stats.spans_failed + stats.spans_exported
        print(f"vigil demo: {stats.spans_failed} of {total} spans could not be exported to {endpoint}", file=sys.stderr)
        return 1
    return 0


def _feedback_poster(base_url: str, token: str | None) -> Callable[[str, str], None]:
    """``on_feedback`` for ``vigil demo``: POST each thumbs-down to ``<base_url>/api/v1/feedback``."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = base_url.rstrip("/") + "/api/v1/feedback"

    def post(trace_id: str, feedback: str) -> None:
        score = "down" if feedback == "thumbs_down" else "up"
        body = {"feedback_id": f"demo-{trace_id}", "trace_id": trace_id, "score": score, "source": "demo"}
        httpx.post(url, json=body, headers=headers, timeout=5.0).raise_for_status()

    return post


def _env_setting(text: str) -> tuple[str, str]:
    """``VIGIL_NAME=VALUE`` of ``--server-env``."""
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("VIGIL_"):
        raise argparse.ArgumentTypeError(f"expected VIGIL_NAME=VALUE, got {text!r}")
    return name, value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


SPANS_PER_RUN = 16.6
"""Average spans of a synthetic run (:mod:`vigil.bench.synth`): ``vigil soak --spans-per-s``."""


def _cmd_bench(args: argparse.Namespace) -> int:
    if getattr(args, "overload", False):
        from vigil.bench.overload import main as overload_main

        configure_logging("warning")
        return overload_main(args)
    if getattr(args, "kafka", False):
        from vigil.bench.kafka import main as kafka_main

        configure_logging("warning")
        return kafka_main(args)
    if getattr(args, "eval", False):
        from vigil.bench.eval_online import main as eval_main

        configure_logging("warning")
        if args.instructions is not None:
            from vigil.bench.eval_online import main_instructions

            return main_instructions(args.runs if args.runs != 20_000 else 2000, args.instructions or None)
        return eval_main(args.runs if args.runs != 20_000 else 5000, args.repeat)
    if args.heavy:
        from vigil.bench.heavy import main as heavy_main

        return heavy_main(
            args.runs,
            args.repeat,
            args.senders,
            args.tree,
            args.session_turns,
            server_env=args.server_env,
            own_runs=args.own_runs,
        )
    from vigil.bench.pipeline import main as bench_main

    return bench_main(args)


def _cmd_purge(args: argparse.Namespace) -> int:
    import json

    from review_queue.retention import purge_traces
    from review_queue.store import create_store_engine

    bad = [t for t in args.trace_id if len(t) != 32 or any(c not in "0123456789abcdefABCDEF" for c in t)]
    if bad:
        print(f"vigil: not a trace id (32 hex characters): {bad[0]!r}", file=sys.stderr)
        return EXIT_CONFIG
    settings = _settings(args)  # JSON logs on stderr; stdout carries the result
    engine = create_store_engine(settings.database_url)
    try:
        deleted = purge_traces(engine, args.trace_id)
    finally:
        engine.dispose()
    print(json.dumps({"trace_ids": len(set(args.trace_id)), "deleted": deleted}))
    return 0


def _cmd_soak(args: argparse.Namespace) -> int:
    from rich.console import Console

    from vigil.bench.soak import soak

    console = Console(stderr=True)
    rate = args.spans_per_s / SPANS_PER_RUN if args.spans_per_s else args.rate
    result = soak(
        args.minutes * 60, rate, sample_every_s=args.sample_every, console=console, content_bytes=args.content_bytes
    )
    verdict = "flat" if result.flat(args.tolerance) else "NOT flat"
    start, median, peak, end = result.rss()
    print(
        f"soak: {args.minutes:g} min at {rate:g} runs/s ({result.sent_spans / (args.minutes * 60):.0f} spans/s, "
        f"content {args.content_bytes}-{2 * args.content_bytes} B per LLM span); RSS MiB start {start:.1f}, "
        f"median {median:.1f}, peak {peak:.1f}, end {end:.1f}, "
        f"growth last quarter vs third quarter {result.growth:+.1%} "
        f"(tolerance {args.tolerance:.0%}); runs sent {result.sent_runs}, accepted {result.accepted_runs}, "
        f"stored {result.stored_runs}, refused requests {result.refused}: memory {verdict}"
    )
    return 0 if result.flat(args.tolerance) else 1


def _cmd_rules_check(args: argparse.Namespace) -> int:
    import os

    from scorers.judge import judge_rules, parse_judges
    from scorers.registry import build_chain
    from scorers.rules import compile_rules

    settings = Settings.load(config_file=args.config)
    chain = build_chain(settings.scorers, optimal_steps=settings.optimal_steps)
    judges = parse_judges(settings.judges, os.environ)  # also validates the judges section
    rules = compile_rules(
        judge_rules(judges, settings.rules),
        [n for n, _ in chain],
        repeat_threshold=settings.repeat_threshold,
        judge_names=[j.name for j in judges],
    )
    for rule in rules:
        print(f"{rule.name:24} {rule.priority.value:7} {rule.expr}")
    for spec in settings.session_judge_specs(os.environ):  # also validates the session_judges section
        print(f"{'judge_' + spec.name:24} {spec.config.priority.value:7} session judge {spec.rubric.label}: "
              f"score < {spec.config.flag_below} ({spec.config.select})")  # fmt: skip
    return 0


def _cmd_tokens(args: argparse.Namespace) -> int:
    from review_queue.auth import TokenStore
    from review_queue.errors import ConflictError, InvalidInputError, NotFoundError
    from vigil.settings import Settings

    store = review_store(args)
    admin_configured = Settings.load(config_file=args.config).admin_token is not None
    tokens = TokenStore(store.engine, admin_configured=admin_configured)
    try:
        if args.tokens_command == "create":
            secret, record = tokens.create(args.name, args.role)
            print(secret)
            print(
                f"created token {record['id']} {record['name']!r} role {record['role']}; it is not shown again",
                file=sys.stderr,
            )
        elif args.tokens_command == "list":
            print(f"{'id':>4}  {'name':24} {'role':9} {'prefix':9} {'created (UTC)':20} state")
            for t in tokens.list():
                created = datetime.fromtimestamp(t["created_at"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
                state = "revoked" if t["revoked_at"] else "active"
                print(f"{t['id']:>4}  {t['name']:24} {t['role']:9} {t['prefix']:9} {created:20} {state}")
        else:
            count = tokens.revoke(args.token)
            print(f"revoked {count} token(s)", file=sys.stderr)
    except (InvalidInputError, NotFoundError, ConflictError) as exc:
        print(f"vigil tokens: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import time

    from review_queue.export import eval_set, export_cases, jsonl

    store = review_store(args)
    try:
        result = export_cases(store.engine, agent=args.agent)
    finally:
        store.close()
    out = sys.stdout if args.output in (None, "-") else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    try:
        if args.format == "jsonl":
            out.writelines(jsonl(result.cases))
        else:
            json.dump(eval_set(result.cases, args.eval_set_id, time.time()), out, ensure_ascii=False, indent=1)
            out.write("\n")
    finally:
        if out is not sys.stdout:
            out.close()
    skipped = ", ".join(f"{why} {n}" for why, n in sorted(result.skipped.items())) or "none"
    print(f"exported {len(result.cases)} case(s); skipped: {skipped}", file=sys.stderr)
    return 0


def _add_overload_arguments(bench: argparse.ArgumentParser) -> None:
    """``vigil bench --overload`` and its options."""
    overload = bench.add_argument_group("--overload", "10x overload with wrk (apt-get install wrk)")
    overload.add_argument("--overload", action="store_true", help="offer far more than the pipeline takes (wrk)")
    overload.add_argument("--role", choices=("run", "collector", "both"), default="both", help="what to overload")
    overload.add_argument("--seconds", type=_positive, default=45.0, help="load duration (default 45)")
    overload.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    overload.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    overload.add_argument("--memory-limit-mb", type=int, default=768, help="VIGIL_MEMORY_LIMIT_MB (default 768)")
    overload.add_argument(
        "--queue-max-batches", type=int, default=None, help="vigil run VIGIL_QUEUE_MAX_BATCHES (default: its default)"
    )
    overload.add_argument(
        "--kafka-buffer-mb", type=float, default=32.0, help="collector VIGIL_KAFKA_BUFFER_BYTES in MiB (default 32)"
    )


def _add_review_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``vigil tokens …``, ``vigil export`` and ``vigil eval …``."""
    tokens = sub.add_parser("tokens", help="API tokens with roles (admin, reviewer, viewer, ingest)")
    tokens_sub = tokens.add_subparsers(dest="tokens_command", required=True)
    create = tokens_sub.add_parser("create", help="create a token and print it (once)")
    create.add_argument("--role", required=True, choices=("admin", "reviewer", "viewer", "ingest"))
    create.add_argument("--name", required=True, help="who uses it (the reviewer name in verdicts)")
    tokens_sub.add_parser("list", help="list tokens (never their secrets)")
    revoke = tokens_sub.add_parser("revoke", help="revoke a token by id or every active token of a name")
    revoke.add_argument("token", help="token id or name")
    tokens.set_defaults(func=_cmd_tokens)
    export = sub.add_parser("export", help="export reviewed runs as an evaluation set (alias of 'vigil eval export')")
    _add_export_arguments(export)
    from vigil.eval_cli import add_eval_commands

    add_eval_commands(sub, _add_export_arguments)


def _add_export_arguments(export: argparse.ArgumentParser) -> None:
    """The options of ``vigil export`` / ``vigil eval export``."""
    export.add_argument("--format", choices=("evalset", "jsonl"), default="evalset")
    export.add_argument("--output", "-o", default=None, help="file to write (default stdout)")
    export.add_argument("--agent", default=None, help="only this agent's runs")
    export.add_argument("--eval-set-id", default="vigil_reviewed", help="eval_set_id of the EvalSet")
    export.set_defaults(func=_cmd_export)


def _settings(args: argparse.Namespace) -> Settings:
    """The settings of ``--config`` and the environment, with logging configured at their level."""
    settings = Settings.load(config_file=args.config)
    configure_logging(settings.log_level)
    return settings


def _cmd_role(args: argparse.Namespace) -> int:
    """``vigil collector`` / ``scorer`` / ``review`` (``args.role``)."""
    from vigil import roles

    settings = _settings(args)
    if args.role == "scorer":
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at info
    serve = {"collector": roles.serve_collector, "scorer": roles.serve_scorer, "review": roles.serve_review}
    return roles.run_role(lambda: serve[args.role](settings))


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from review_queue.errors import ReviewQueueError
    from review_queue.store import upgrade_database

    settings = _settings(args)
    try:
        upgrade_database(settings.database_url)
    except ReviewQueueError as exc:
        print(f"vigil db upgrade: {exc}", file=sys.stderr)
        return 1
    print("database schema is up to date", file=sys.stderr)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    import httpx

    from review_queue.replay import replay

    configure_logging("warning")  # the progress bar owns the terminal
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    try:
        stats = replay(args.files, args.endpoint, headers=headers, progress=not args.no_progress)
    except FileNotFoundError as exc:
        print(f"vigil replay: no such file: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except httpx.TransportError as exc:
        print(f"vigil replay: cannot reach {args.endpoint}: {exc}", file=sys.stderr)
        return 1
    for path, reason in stats.failed_files[:20]:
        print(f"  failed {path}: {reason}", file=sys.stderr)
    print(stats.summary())
    return 0 if not stats.failed_files else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    from vigil.explain import ExplainError, explain_files, print_explanations, stored_explanation
    from vigil.scoring import Scoring

    settings = Settings.load(config_file=args.config)
    configure_logging("warning")
    if args.trace:
        store = review_store(args)
        doc = store.get_run(args.trace.lower())
        if doc is None:
            print(f"vigil explain: no stored run {args.trace}", file=sys.stderr)
            return 1
        print(json.dumps(doc, default=str) if args.json else stored_explanation(doc))
        return 0
    if not args.files:
        print("vigil explain: give OTLP files or directories, or --trace TRACE_ID", file=sys.stderr)
        return EXIT_CONFIG
    scoring = Scoring.from_settings(settings)
    pipeline = scoring.pipeline(None, None)
    try:
        explanations = explain_files(args.files, pipeline)
    except FileNotFoundError as exc:
        print(f"vigil explain: no such file: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ExplainError as exc:
        print(f"vigil explain: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print_explanations(explanations, sys.stdout, as_json=args.json)
    return 0 if explanations else 1


@functools.cache
def settings_epilog() -> str:
    """The settings every role reads, for its ``--help``: each ``VIGIL_*`` variable, its default and
    the first sentence of its description (the whole reference: docs/reference/settings.md)."""
    from vigil.settings import ENV_PREFIX, Settings

    lines = [
        "settings (environment variable=default; the same key in lowercase in vigil.yaml, or $VIGIL_CONFIG;",
        "every one explained in docs/reference/settings.md):",
    ]
    for name, field in Settings.model_fields.items():
        default = "" if field.is_required() or field.default_factory is not None else field.default
        shown = "unset" if default is None else str(getattr(default, "value", default))
        about = (field.description or "").split(". ")[0].rstrip(".")
        lines.append(f"  {ENV_PREFIX}{name.upper()}={shown}  {about}")
    return "\n".join(lines)


def _add_scale_out(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The scale-out roles and their tooling (issue 3)."""
    for role, text in (
        ("collector", "OTLP receivers (HTTP, gRPC) publishing to Kafka"),
        ("scorer", "Kafka consumer group: assemble, score, store, /metrics"),
        ("review", "REST API over the store (PostgreSQL via VIGIL_DATABASE_URL)"),
    ):
        sub.add_parser(
            role, help=text, epilog=settings_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter
        ).set_defaults(func=_cmd_role, role=role)
    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", help="migrate VIGIL_DATABASE_URL to the newest schema").set_defaults(
        func=_cmd_db_upgrade
    )
    replay = sub.add_parser("replay", help="send captured OTLP files (protobuf or JSON, or directories)")
    replay.add_argument("files", nargs="+", type=Path, help="files or directories")
    replay.add_argument("--endpoint", default="http://127.0.0.1:4318", help="OTLP/HTTP endpoint")
    replay.add_argument("--token", default=None, help="ingest bearer token")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")
    replay.set_defaults(func=_cmd_replay)
    explain = sub.add_parser(
        "explain", help="print every field Vigil derives from captured OTLP files, and why each signal is (not) set"
    )
    explain.add_argument("files", nargs="*", type=Path, help="OTLP files (protobuf or JSON, .gz) or directories")
    explain.add_argument("--trace", default=None, help="explain a run already stored (VIGIL_DATABASE_URL)")
    explain.add_argument("--json", action="store_true", help="one JSON document per run")
    explain.set_defaults(func=_cmd_explain)


def _version() -> str:
    """The installed distribution's version (``vigil-sidecar``), or ``unknown`` when run from a bare tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vigil-sidecar")
    except PackageNotFoundError:
        return "unknown"


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``vigil bench`` and its variants (spool, eval, judge, Kafka, overload)."""
    bench = sub.add_parser("bench", help="measure ingest and pipeline throughput and flag latency")
    bench.add_argument("--runs", type=int, default=20_000, help="runs per measurement")
    bench.add_argument("--repeat", type=int, default=5, help="repetitions (the median is reported)")
    bench.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    bench.add_argument("--judge", action="store_true", help="only the LLM judge on vs off pipeline comparison")
    bench.add_argument(
        "--spool",
        choices=("batch", "interval", "never"),
        default=None,
        help="only the write-ahead spool off vs on pipeline comparison, with this fsync policy",
    )
    bench.add_argument(
        "--eval",
        action="store_true",
        help="online eval cost: 1,000 cases loaded, 10%% of runs matching (default 5,000 runs)",
    )
    bench.add_argument(
        "--instructions",
        nargs="?",
        const="",
        default=None,
        type=Path,
        metavar="DIR",
        help="with --eval: count instructions under valgrind's callgrind instead of CPU time (deterministic "
        "under load; default 2,000 runs); keep the dumps in DIR",
    )
    bench.add_argument(
        "--heavy",
        action="store_true",
        help="the heavy-content row: realistic runs with 1-2 KB of content per model span through a real vigil run",
    )
    bench.add_argument("--senders", type=int, default=1, help="--heavy: keep-alive connections sending at once")
    bench.add_argument(
        "--own-runs",
        action="store_true",
        help="--heavy with --senders: each connection sends its own runs (an agent process per connection); "
        "by default one stream of bodies is dealt out in turn, so most runs have spans on two connections",
    )
    bench.add_argument(
        "--session-turns",
        action="append",
        type=int,
        default=[],
        metavar="K",
        help="--heavy: runs per gen_ai.conversation.id (1, the default: a session per run; 0: no session id; "
        "K: sessions of K turns); repeatable: each workload is measured, rounds interleaved",
    )
    bench.add_argument(
        "--tree",
        action="append",
        default=[],
        help="--heavy: measure the vigil of this checkout too (repeatable; rounds interleaved; '.' is this one)",
    )
    bench.add_argument(
        "--server-env",
        action="append",
        default=[],
        type=_env_setting,
        metavar="VIGIL_NAME=VALUE",
        help="--heavy: a setting of the measured vigil run (repeatable; e.g. VIGIL_RETRY_AFTER_S=10, the back-off "
        "of an OpenTelemetry Collector in front)",
    )
    bench.add_argument("--kafka", action="store_true", help="measure the scale-out path (collector, Kafka, scorer)")
    bench.add_argument("--kafka-bootstrap", default=None, help="use this Kafka (default: start tansu)")
    bench.add_argument("--database-url", default=None, help="store of --kafka (default: local PostgreSQL or SQLite)")
    _add_overload_arguments(bench)
    bench.set_defaults(func=_cmd_bench)


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``vigil``."""
    p = argparse.ArgumentParser(prog="vigil", description="Observability and review sidecar for LLM agents.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--config", default=None, help="YAML config file (default $VIGIL_CONFIG or ./vigil.yaml)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="everything in one process on SQLite (receivers, scorers, API, /metrics)",
        epilog=settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--demo", action="store_true", help="also run the demo agent fleet against this Vigil")
    run.add_argument("--demo-rate", type=_positive, default=2.0, help="demo runs per second (default 2)")
    run.add_argument(
        "--demo-seed",
        type=int,
        default=None,
        help="seed of the demo's runs (default: a fresh one each start, whose session ids the database has not seen)",
    )
    run.set_defaults(func=_cmd_run)
    demo = sub.add_parser("demo", help="send simulated agent runs (a realistic good/bad mix) to an OTLP endpoint")
    demo.add_argument("--endpoint", help="OTLP endpoint (default http://127.0.0.1:4318, :4317 for grpc)")
    demo.add_argument("--protocol", choices=("http/protobuf", "grpc"), default="http/protobuf")
    demo.add_argument("--rate", type=_positive, default=5.0, help="runs started per second (default 5)")
    limit = demo.add_mutually_exclusive_group()
    limit.add_argument("--duration", type=_positive, default=None, help="seconds to send for (default: until Ctrl-C)")
    limit.add_argument("--runs", type=int, default=None, help="number of runs to send")
    demo.add_argument(
        "--seed", type=int, default=None, help="seed of the run sequence (default: a fresh one; --truth records it)"
    )
    demo.add_argument("--pace", type=float, default=1.0, help="latency multiplier, 0 = no simulated latency")
    demo.add_argument("--truth", type=Path, default=None, help="write every run's ground truth to this JSON file")
    demo.add_argument(
        "--feedback-url", default=None, help="Vigil API base URL: POST users' thumbs-down to its feedback API"
    )
    demo.add_argument("--feedback-token", default=None, help="bearer token (role ingest) for --feedback-url")
    demo.set_defaults(func=_cmd_demo)
    _add_bench(sub)
    purge = sub.add_parser("purge", help="delete everything stored about given traces (deletion requests)")
    purge.add_argument("--trace-id", action="append", required=True, help="a trace id; repeat for several")
    purge.set_defaults(func=_cmd_purge)
    soak = sub.add_parser("soak", help="long steady load on a real vigil run; exit 1 unless memory stays flat")
    soak.add_argument("--minutes", type=_positive, default=30.0, help="duration (default 30)")
    soak.add_argument("--rate", type=_positive, default=200.0, help="runs per second (default 200)")
    soak.add_argument(
        "--spans-per-s",
        type=_positive,
        default=None,
        help=f"spans per second instead of --rate ({SPANS_PER_RUN} a run)",
    )
    soak.add_argument(
        "--content-bytes",
        type=_non_negative_int,
        default=0,
        help="captured message content per LLM span: this many bytes to twice as many (default 0: none)",
    )
    soak.add_argument("--sample-every", type=_positive, default=5.0, help="seconds between RSS samples")
    soak.add_argument("--tolerance", type=_positive, default=0.05, help="allowed RSS growth (default 0.05)")
    soak.set_defaults(func=_cmd_soak)
    rules = sub.add_parser("rules", help="flag rules")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    check = rules_sub.add_parser("check", help="validate the configured rules and print them")
    check.set_defaults(func=_cmd_rules_check)
    _add_review_commands(sub)
    _add_scale_out(sub)
    from vigil.quality_cli import add_quality_command
    from vigil.slo_cli import add_slo_commands

    add_slo_commands(sub)
    add_quality_command(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vigil`` console script."""
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (CollectorError, ScorersError, ReviewQueueError) as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


if __name__ == "__main__":
    sys.exit(main())
