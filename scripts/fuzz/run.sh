#!/usr/bin/env bash
# Coverage-guided fuzzing of Vigil's C extensions under ASan + UBSan, each checked against its Python twin.
#
#   bash scripts/fuzz/run.sh 40                         # every harness, 40 s each (the test command's run)
#   bash scripts/fuzz/run.sh 3600 otlp_wire             # one harness for an hour (before a release)
#
# Harnesses (scripts/fuzz/<name>.py): otlp_raw (bytes into the OTLP decoder), otlp_wire (a structure-
# aware protobuf writer driven by the input), redact (the redaction scan, the run details' attribute loop,
# the GenAI message reader). Each starts from its committed seeds (scripts/fuzz/corpus/<name>/) plus what
# earlier local runs found (build/fuzz/corpus/<name>/, git-ignored). Any sanitizer report, divergence from
# the Python implementation, uncaught exception or input slower than FUZZ_TIMEOUT seconds (10) fails the
# run; the input is written to build/fuzz/findings/ and replays with
#   LD_PRELOAD=$(.venv/bin/python -c 'import atheris; print(atheris.path())')/asan_with_fuzzer.so \
#     ASAN_OPTIONS=detect_leaks=0 .venv/bin/python scripts/fuzz/<name>.py build/fuzz/findings/<file>
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
seconds=${1:?usage: run.sh SECONDS [HARNESS...]}
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(otlp_raw otlp_wire redact)

bash scripts/fuzz/build.sh >/dev/null
runtime="$("$PY" -c 'import atheris; print(atheris.path())')/asan_with_fuzzer.so"
mkdir -p build/fuzz/findings build/fuzz/logs
# Python itself is not built with ASan: its allocations are not leaks to report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
for name in "${harnesses[@]}"; do
  mkdir -p "build/fuzz/corpus/$name"
  log="build/fuzz/logs/$name-$(date +%Y%m%dT%H%M%S).log"
  status=0
  LD_PRELOAD="$runtime" "$PY" "scripts/fuzz/$name.py" \
    -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=4096 -max_len="${FUZZ_MAX_LEN:-65536}" \
    -print_final_stats=1 -artifact_prefix="build/fuzz/findings/$name-" \
    "build/fuzz/corpus/$name" "scripts/fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  stats=$(grep -aE "^#[0-9]+" "$log" | tail -1 | sed "s/.*cov:/cov:/" || true)
  runs=$(grep -a '^stat::number_of_executed_units:' "$log" | sed 's/.*: *//')
  if [ "$status" -ne 0 ]; then
    failed=1
    echo "fuzz $name: FAILED (exit $status) after ${runs:-?} inputs; $log:"
    grep -av '^INFO: Instrumenting' "$log" | grep -aE -A30 'ERROR|Uncaught|SUMMARY|Traceback' | head -60
  else
    echo "fuzz $name: ${runs:-?} inputs in ${seconds}s, no finding (${stats})"
  fi
done
exit "$failed"
