"""``vigil replay FILES…``: send captured OTLP trace bodies to an OTLP/HTTP endpoint.

Each file is one ``ExportTraceServiceRequest``: protobuf (``.pb``, ``.bin``, ``.protobuf``,
``.otlp``) or JSON (``.json``); gzip-compressed files (``*.gz``) are sent with
``Content-Encoding: gzip``. A directory stands for every such file below it, in name order.
A 503/429 answer is retried after its ``Retry-After``; a partial success counts its
rejected spans. At the end a summary counts accepted and rejected spans and failed files.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from collector.errors import DecodeError
from collector.otlp import decode_json, decode_protobuf

__all__ = ["ReplayStats", "body_kind", "collect_files", "replay"]

PROTOBUF_SUFFIXES = frozenset({".pb", ".bin", ".protobuf", ".otlp"})
JSON_SUFFIXES = frozenset({".json"})
MAX_ATTEMPTS = 10
"""Attempts per file while the endpoint answers 503/429."""


@dataclass
class ReplayStats:
    """What a replay did.

    Attributes:
        files: files sent.
        accepted_spans: spans the endpoint accepted.
        rejected_spans: spans it rejected (partial success, or a whole refused file).
        failed_files: files refused as a whole (4xx, retries exhausted, unreadable), with reasons.
    """

    files: int = 0
    accepted_spans: int = 0
    rejected_spans: int = 0
    failed_files: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the terminal."""
        return (
            f"{self.files} files: {self.accepted_spans} spans accepted, {self.rejected_spans} rejected, "
            f"{len(self.failed_files)} files failed"
        )


def body_kind(path: Path) -> str | None:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    if not suffixes:
        return None
    if suffixes[-1] in PROTOBUF_SUFFIXES:
        return "protobuf"
    if suffixes[-1] in JSON_SUFFIXES:
        return "json"
    return None


def collect_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories into their OTLP files (sorted); explicit files are kept as given.

    Raises:
        FileNotFoundError: a path does not exist.
    """
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.is_file() and body_kind(p) is not None))
        elif path.exists():
            out.append(path)
        else:
            raise FileNotFoundError(str(path))
    return out


def _span_count(raw: bytes, kind: str) -> int:
    """Spans in a body (accepted + rejected by the local decoder); 0 when it cannot be decoded."""
    try:
        result = decode_protobuf(raw) if kind == "protobuf" else decode_json(raw)
    except DecodeError:
        return 0
    return result.accepted + result.rejected


def _rejected_in(response: httpx.Response, kind: str) -> int:
    if not response.content:
        return 0
    if kind == "json":
        partial = response.json().get("partialSuccess") or {}
        return int(partial.get("rejectedSpans") or 0)
    message = ExportTraceServiceResponse()
    message.ParseFromString(response.content)
    return int(message.partial_success.rejected_spans)


def _send(client: httpx.Client, url: str, path: Path, stats: ReplayStats) -> None:
    kind = body_kind(path) or "protobuf"
    data = path.read_bytes()
    compressed = path.suffix.lower() == ".gz"
    spans = _span_count(gzip.decompress(data) if compressed else data, kind)
    headers = {"Content-Type": "application/json" if kind == "json" else "application/x-protobuf"}
    if compressed:
        headers["Content-Encoding"] = "gzip"
    stats.files += 1
    for _ in range(MAX_ATTEMPTS):
        response = client.post(url, content=data, headers=headers)
        if response.status_code in (429, 503):
            time.sleep(min(30.0, float(response.headers.get("Retry-After", "1") or 1)))
            continue
        if response.status_code == 200:
            rejected = _rejected_in(response, kind)
            stats.accepted_spans += max(0, spans - rejected)
            stats.rejected_spans += rejected
            return
        stats.rejected_spans += spans
        stats.failed_files.append((str(path), f"HTTP {response.status_code}: {response.text[:200]}"))
        return
    stats.rejected_spans += spans
    stats.failed_files.append((str(path), f"still {response.status_code} after {MAX_ATTEMPTS} attempts"))


def _iter_progress(files: list[Path], console: Console, show: bool) -> Iterator[Path]:
    if not show:
        yield from files
        return
    columns = (TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("replay", total=len(files))
        for path in files:
            yield path
            progress.advance(task)


def replay(
    paths: Iterable[Path],
    endpoint: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    progress: bool = True,
    console: Console | None = None,
) -> ReplayStats:
    """Send every OTLP file of ``paths`` to ``endpoint`` (base URL or full ``…/v1/traces`` URL).

    Raises:
        FileNotFoundError: a path does not exist.
        httpx.TransportError: the endpoint cannot be reached.
    """
    files = collect_files(paths)
    url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
    stats = ReplayStats()
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        for path in _iter_progress(files, console or Console(stderr=True), progress):
            try:
                _send(client, url, path, stats)
            except OSError as exc:
                stats.failed_files.append((str(path), f"unreadable: {exc}"))
    return stats
