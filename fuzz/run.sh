#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 60) seconds, one after the other, then
# shrinks each corpus (cargo fuzz cmin). Exits non-zero if a target found a crash; the
# crashing input is in fuzz/artifacts/<target>/ and must become a corpus case.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
status=0
for target in request_head chunked response_header connection proxy_header websocket_frames; do
    echo "== $target: ${seconds}s"
    if ! cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -max_len=4096; then
        echo "== $target found a crash: see fuzz/artifacts/$target/" >&2
        status=1
    fi
    cargo +nightly fuzz cmin "$target" "corpus/$target" >/dev/null 2>&1 || true
done
exit $status
