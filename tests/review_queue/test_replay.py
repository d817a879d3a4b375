"""Tests of review_queue.replay and ``vigil replay``/``vigil db upgrade`` against a real OTLP/HTTP receiver."""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from collector.metrics import CollectorMetrics
from collector.otlp import decode_json
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from review_queue.replay import collect_files, replay
from tests.support.fixtures import served
from vigil.bench.synth import body, make_run
from vigil.cli import main

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "openai_plain.json"


@dataclass
class Receiver:
    """A live OTLP/HTTP receiver on an in-process stream."""

    endpoint: str
    stream: InProcessStream

    def spans(self) -> int:
        return sum(len(b.spans) for b in self.stream.get_many(100_000, 0.0))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """The real receiver app under uvicorn on a free port."""
    metrics = CollectorMetrics(CollectorRegistry())
    stream = InProcessStream(100_000, 1, metrics)
    with served(create_otlp_app(stream, metrics, max_body_bytes=1 << 22, retry_after_s=1)) as url:
        yield Receiver(url, stream)


def _protobuf_file(path: Path, seed: int) -> int:
    run = make_run(random.Random(seed))
    path.write_bytes(body(list(run.spans)))
    return len(run.spans)


class TestReplay:
    """Files and directories are sent; accepted and rejected spans are counted."""

    def test_protobuf_json_gzip_and_directory(self, receiver: Receiver, tmp_path: Path) -> None:
        """Every span of every file arrives; the counts say so."""
        folder = tmp_path / "captured"
        (folder / "deeper").mkdir(parents=True)
        n = _protobuf_file(folder / "a.pb", 1)
        n += _protobuf_file(folder / "deeper" / "b.bin", 2)
        (folder / "notes.txt").write_text("not OTLP, not collected")
        gz = tmp_path / "c.pb.gz"
        raw = body(list(make_run(random.Random(3)).spans))
        gz.write_bytes(gzip.compress(raw))
        n += sum(1 for _ in make_run(random.Random(3)).spans)
        json_spans = decode_json(FIXTURE.read_bytes()).accepted
        stats = replay([folder, gz, FIXTURE], receiver.endpoint, progress=False)
        assert (4, n + json_spans, 0, []) == (
            stats.files,
            stats.accepted_spans,
            stats.rejected_spans,
            stats.failed_files,
        )
        assert n + json_spans == receiver.spans()

    def test_bad_file_and_partial_success(self, receiver: Receiver, tmp_path: Path) -> None:
        """A garbage file fails as a whole; a span with a bad id is a counted partial rejection."""
        garbage = tmp_path / "garbage.pb"
        garbage.write_bytes(b"\xff\xff\xff not protobuf")
        run = make_run(random.Random(4))
        bad = list(run.spans)
        bad[0].span_id = b"\x00" * 8
        partial = tmp_path / "partial.pb"
        partial.write_bytes(body(bad))
        stats = replay([garbage, partial], receiver.endpoint + "/v1/traces", progress=False)
        assert (len(bad) - 1, 1) == (stats.accepted_spans, stats.rejected_spans)
        assert [str(garbage)] == [path for path, _ in stats.failed_files]
        assert "HTTP 400" in stats.failed_files[0][1]

    def test_missing_path(self, tmp_path: Path) -> None:
        """A path that does not exist is an error before anything is sent."""
        with pytest.raises(FileNotFoundError):
            collect_files([tmp_path / "nope.pb"])


class TestCli:
    """``vigil replay`` and ``vigil db upgrade``."""

    def test_replay_command(self, receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The summary line reports the accepted spans; exit 0."""
        n = _protobuf_file(tmp_path / "x.pb", 5)
        assert 0 == main(["replay", "--no-progress", "--endpoint", receiver.endpoint, str(tmp_path)])
        assert f"1 files: {n} spans accepted, 0 rejected, 0 files failed" in capsys.readouterr().out

    def test_replay_missing_file_exit_2(self, tmp_path: Path) -> None:
        """A missing file is a usage error."""
        assert 2 == main(["replay", "--no-progress", str(tmp_path / "missing.pb")])

    def test_db_upgrade_creates_schema(self, tmp_path: Path) -> None:
        """``vigil db upgrade`` migrates the configured database; running it twice is fine."""
        url = f"sqlite:///{tmp_path / 'v.db'}"
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text(f"database_url: '{url}'\n")
        assert 0 == main(["--config", str(cfg), "db", "upgrade"])
        assert 0 == main(["--config", str(cfg), "db", "upgrade"])
        tables = set(sa.inspect(sa.create_engine(url)).get_table_names())
        assert {"runs", "review_items", "alembic_version"} <= tables

    def test_db_upgrade_unreachable(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An unreachable database exits 1 with a message."""
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("database_url: 'postgresql+psycopg://postgres@127.0.0.1:1/test'\n")
        assert 1 == main(["--config", str(cfg), "db", "upgrade"])
        assert "vigil db upgrade:" in capsys.readouterr().err

    @pytest.mark.parametrize("role", ["collector", "scorer"])
    def test_bad_kafka_setting_exits_2(self, role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad Kafka setting refuses to start the role and names the key."""
        cfg = tmp_path / "vigil.yaml"
        cfg.write_text("kafka_compression: brotli\n")
        assert 2 == main(["--config", str(cfg), role])
        assert "kafka_compression" in capsys.readouterr().err
