#!/usr/bin/env bash
# Build Vigil's two C extensions for fuzzing: clang, AddressSanitizer + UndefinedBehaviorSanitizer,
# libFuzzer's coverage counters (-fsanitize=fuzzer-no-link), into build/fuzz/ (git-ignored), beside
# the ordinary builds that `pip install` made in collector/ and scorers/ (left untouched).
#
#   bash scripts/fuzz/build.sh            # needs Debian's clang (atheris's wheel brings the runtime)
#
# The harnesses (scripts/fuzz/*.py) load these builds in place of the installed ones; scripts/fuzz/run.sh
# preloads atheris's asan_with_fuzzer.so, which carries the ASan, UBSan and libFuzzer runtimes.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
CC=${CC:-clang}
OUT=build/fuzz
mkdir -p "$OUT"
include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
flags=(-g -O1 -fno-omit-frame-pointer -fPIC -shared -I"$include"
       -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined
       -Wall -Werror=implicit-function-declaration)
for source in collector/_otlp_fast.c scorers/_redact_fast.c; do
  name=$(basename "$source" .c)
  "$CC" "${flags[@]}" "$source" -o "$OUT/$name$suffix"
  echo "built $OUT/$name$suffix"
done
