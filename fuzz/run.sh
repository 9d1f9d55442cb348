#!/usr/bin/env bash
# Runs the fuzz targets for SECONDS each: `fuzz/run.sh 5` (the bounded slice of
# `make test`) or `fuzz/run.sh 3600 ruleset` (a campaign on one target).
# Skips with one line when the nightly toolchain is missing; installs
# cargo-fuzz once when it is.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-5}"
shift || true
targets=("${@:-validate decide ruleset json outbox payload}")
read -r -a targets <<< "${targets[*]}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: skipped (no nightly toolchain; rustup toolchain install nightly)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
IDEMFLOW_FUZZ_SECONDS="$seconds" python3 seed-corpus.py
# The instrumented build is the slow part (minutes): keep it outside the clone
# so later runs on this machine, CI's fresh clones included, build incrementally.
export CARGO_TARGET_DIR="${IDEMFLOW_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idemflow/fuzz-target}"

for target in "${targets[@]}"; do
  case "$target" in
    ruleset) dict=dict/ruleset.dict ;;
    outbox) dict=dict/outbox.dict ;;
    *) dict=dict/event.dict ;;
  esac
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run "$target" "corpus/$target" -- \
    -max_total_time="$seconds" -dict="$dict" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
    grep -E '^(stat::number_of_executed_units|Done|==[0-9]+==|SUMMARY|thread .* panicked|artifact_prefix|Test unit written)' || true
  # A finding makes cargo fuzz exit non-zero; pipefail carries it here.
done
