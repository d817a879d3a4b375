"""LLM judges in ``vigil scorer``: runs from Kafka are judged on the fake OpenAI-compatible server,
verdicts and the flags they cause land in PostgreSQL, judge metrics on the scorer's /metrics."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from kafka import KafkaProducer

from collector.demo.fakeopenai import FakeOpenAI
from collector.kafka import record_key
from vigil.bench.broker import TansuBroker
from vigil.bench.synth import body, make_run

from .judge_config import HIGH, LOW, judge_yaml
from .scaleout import make_cluster, wait_assigned, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """The judge's model."""
    with FakeOpenAI({"low": [LOW], "high": [HIGH]}) as server:
        yield server


def _judged(db_url: str) -> dict[str, tuple[float, bool | None]]:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT trace_id, score, passed FROM judge_results WHERE judge = 'ground'")).all()
    engine.dispose()
    return {trace_id: (score, passed) for trace_id, score, passed in rows}


def _flag_reasons(db_url: str) -> dict[str, list[str]]:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT trace_id, reasons FROM review_items")).all()
    engine.dispose()
    return {trace_id: list(reasons) for trace_id, reasons in rows}


def test_scorer_judges_runs_from_kafka(tansu: TansuBroker, pg_url: str, workdir: Path, fake: FakeOpenAI) -> None:
    """A low groundedness score flags its run (item with reason judge_ground); a high one does not."""
    (workdir / "judges.yaml").write_text(judge_yaml(fake.base_url))  # only the judge flags: the test is exact
    cluster = make_cluster(tansu, pg_url, workdir)
    scorer = cluster.spawn(
        "scorer", VIGIL_CONFIG=str(workdir / "judges.yaml"), VIGIL_SAMPLE_RATE="0", JUDGE_API_KEY="sk-test"
    )
    try:
        scorer.wait_ready()
        wait_assigned([scorer], cluster.partitions)
        runs = {
            scenario: make_run(random.Random(seed), answer=f"[[scenario:{scenario}]] Your refund of $40 was issued.")
            for seed, scenario in ((1, "low"), (2, "high"))
        }
        producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
        for run in runs.values():
            producer.send(cluster.topic, key=record_key(run.trace_id), value=body(list(run.spans)))
        producer.flush()
        producer.close()
        wait_for(lambda: len(_judged(pg_url)) == 2, 60, "two verdicts in judge_results", scorer.log_tail)
        low, high = runs["low"].trace_id, runs["high"].trace_id
        assert {low: (0.1, False), high: (0.95, True)} == _judged(pg_url)
        wait_for(lambda: low in _flag_reasons(pg_url), 30, "the judge's flag", scorer.log_tail)
        assert {low: ["judge_ground"]} == _flag_reasons(pg_url)
        assert 2.0 == scorer.metric("vigil_judge_requests_total", {"judge": "ground", "outcome": "ok"})
        assert 1.0 == scorer.metric("vigil_flags_total", {"reason": "judge_ground", "priority": "normal"})
    finally:
        scorer.stop()
