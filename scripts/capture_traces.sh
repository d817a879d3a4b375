#!/usr/bin/env bash
# Re-capture the instrumentor trace fixtures (tests/fixtures/traces/) from the real frameworks.
#
#   bash scripts/capture_traces.sh                 # every driver
#   bash scripts/capture_traces.sh pydantic_ai ... # only these
#
# Each Python driver tests/e2e/drivers/<name>.py gets its own virtualenv under
# ${CAPTURE_VENVS:-.capture-venvs}/<name>, built from tests/e2e/drivers/<name>.requirements.txt
# (pinned framework + instrumentor versions) plus Vigil itself without its dependencies' extras,
# so frameworks whose pins disagree never share an environment. A Node driver
# tests/e2e/drivers/<name>/package.json is installed with npm ci (npm install without a lock) and
# run with `node <name>/driver.mjs`. Every driver talks to the scripted OpenAI-compatible server
# (collector.demo.fakeopenai) and writes <name>.json (OTLP/JSON) and <name>.truth.json (what it
# observed) next to the other fixtures. The suite replays the fixtures without any framework.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRIVERS=tests/e2e/drivers
OUT=tests/fixtures/traces
VENVS=${CAPTURE_VENVS:-$ROOT/.capture-venvs}
PY="${PYTHON:-python3}"

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for req in "$DRIVERS"/*.requirements.txt; do names+=("$(basename "$req" .requirements.txt)"); done
  for pkg in "$DRIVERS"/*/package.json; do [ -e "$pkg" ] && names+=("$(basename "$(dirname "$pkg")")"); done
fi

for name in "${names[@]}"; do
  echo "== $name"
  if [ -f "$DRIVERS/$name/package.json" ]; then
    if [ -f "$DRIVERS/$name/package-lock.json" ]; then
      (cd "$DRIVERS/$name" && npm ci --silent)
    else
      (cd "$DRIVERS/$name" && npm install --silent)
    fi
    # The Node driver needs the scripted server: run it from Vigil's own venv.
    mkdir -p "$VENVS"
    rm -f "$VENVS/$name.port"
    .venv/bin/python -m collector.demo.fakeopenai --serve --port-file "$VENVS/$name.port" &
    fake=$!
    trap 'kill $fake 2>/dev/null || true' EXIT
    for _ in $(seq 100); do [ -s "$VENVS/$name.port" ] && break; sleep 0.1; done
    [ -s "$VENVS/$name.port" ] || { echo "fake OpenAI server did not start" >&2; exit 1; }
    port=$(cat "$VENVS/$name.port")
    node "$DRIVERS/$name/driver.mjs" --openai-base-url "http://127.0.0.1:$port/v1" \
      --capture "$OUT/$name.json" --out "$OUT/$name.truth.json"
    kill $fake; trap - EXIT; rm -f "$VENVS/$name.port"
    continue
  fi
  venv="$VENVS/$name"
  if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$VENVS"
    "$PY" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
  fi
  "$venv/bin/pip" install -q -r "$DRIVERS/$name.requirements.txt"
  "$venv/bin/pip" install -q --no-deps -e .
  "$venv/bin/python" "$DRIVERS/$name.py" --capture "$OUT/$name.json" --out "$OUT/$name.truth.json"
done
