"""Write the seeds of ``otlp_raw`` (scripts/fuzz/corpus/otlp_raw/): request bodies as agents send them.

    .venv/bin/python scripts/fuzz/seeds.py

One body per trace of each captured framework trace (tests/fixtures/traces/, up to three per file)
and a few of the benchmark's synthetic agent runs (``vigil.bench.synth``), each under 16 KiB so the
fuzzer's mutations stay quick. The other harnesses' seeds are what their fuzzing runs kept, minimised
(``-merge=1``): their inputs are choices, not bodies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from collector.otlp import decode_json, encode_batch
from vigil.bench.synth import bodies

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "scripts" / "fuzz" / "corpus" / "otlp_raw"
LIMIT = 16 * 1024


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    seeds: list[bytes] = []
    for fixture in sorted((ROOT / "tests" / "fixtures" / "traces").glob("*.json")):
        if ".truth." in fixture.name:
            continue
        batches = decode_json(fixture.read_bytes()).batches
        seeds += [body for body in map(encode_batch, batches) if len(body) <= LIMIT][:3]
    seeds += [body for body, _, _ in bodies(12, seed=7) if len(body) <= LIMIT]
    for body in seeds:
        (OUT / hashlib.sha1(body).hexdigest()).write_bytes(body)  # (libFuzzer's own naming)
    print(f"{len(seeds)} seeds, {sum(map(len, seeds))} bytes, in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
