#!/usr/bin/env bash
# Run every fuzz target in turn, one at a time, to RUNS executions each (default 10
# million), with MAX_SECONDS per target as a safety net. Run from anywhere:
#
#   bridge/fuzz/tools/run-all.sh                  # all targets
#   RUNS=1000000 bridge/fuzz/tools/run-all.sh poll webhook
#
# Working corpora grow in bridge/fuzz/corpus-work/<target> (git-ignored), seeded from
# the committed bridge/fuzz/corpus/<target>; crashes land in
# bridge/fuzz/artifacts/<target>/; libFuzzer's log of each run is
# $CARGO_TARGET_DIR/logs/<target>/fuzz-0.log.
set -euo pipefail
FUZZ=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd "$FUZZ/../.." && pwd)/fuzz-target}
RUNS=${RUNS:-10000000}
MAX_SECONDS=${MAX_SECONDS:-7200}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(webhook poll config duration_and_labels http_query)

dict() {
    case $1 in
        config) echo config.dict ;;
        http_query) echo query.dict ;;
        *) echo alerts.dict ;;
    esac
}

cargo +nightly fuzz build --fuzz-dir "$FUZZ"
for t in "${targets[@]}"; do
    mkdir -p "$FUZZ/corpus-work/$t" "$CARGO_TARGET_DIR/logs/$t"
    echo "== $t: $RUNS runs, at most ${MAX_SECONDS}s (log: $CARGO_TARGET_DIR/logs/$t/fuzz-0.log)"
    start=$(date +%s)
    # -jobs=1 runs the fuzzer in one worker whose output goes to fuzz-0.log in the
    # working directory.
    (cd "$CARGO_TARGET_DIR/logs/$t" && cargo +nightly fuzz run --fuzz-dir "$FUZZ" "$t" \
        "$FUZZ/corpus-work/$t" "$FUZZ/corpus/$t" -- \
        -runs="$RUNS" -max_total_time="$MAX_SECONDS" -jobs=1 -timeout=5 \
        -max_len=8192 -dict="$FUZZ/dicts/$(dict "$t")" -print_final_stats=1) || echo "!! $t exited $?"
    echo "== $t took $(( $(date +%s) - start ))s; corpus-work: $(ls "$FUZZ/corpus-work/$t" | wc -l) files"
    grep -E "^#[0-9]+ +DONE|^stat::|panicked|ERROR: libFuzzer|SUMMARY" "$CARGO_TARGET_DIR/logs/$t/fuzz-0.log" | tail -12 || true
done
