#!/usr/bin/env bash
# Runs every compiled test file with tap and prints a closing "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
jobs=${TAP_JOBS:-2}
# The real-process cluster tests run on their own, one file at a time (make test-cluster).
files=$(find dist -name '*.test.js' -not -path '*/node_modules/*' -not -path 'dist/cluster-test/cluster/*' | sort)
extra=$(find scripts -name '*.test.mjs' | sort)
npx tap --jobs="$jobs" --reporter=tap $files $extra 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# tap's closing summary comment: "# { total: N, pass: P, fail: F, ... }".
summary=$(grep -E '^# \{ total:' "$log" | tail -n 1)
pass=$(sed -nE 's/.*pass: ([0-9]+).*/\1/p' <<<"$summary"); pass=${pass:-0}
fail=$(sed -nE 's/.*fail: ([0-9]+).*/\1/p' <<<"$summary"); fail=${fail:-0}
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
echo "tests: $pass passed, $fail failed"
exit "$rc"
