#!/usr/bin/env bash
# `make test-cluster`: the real-process cluster tests (cluster-test/cluster/*.test.ts, compiled
# to dist/), one file at a time (each starts its own nodes; running two clusters at once on two
# cores would distort the failover timings), then a closing "N passed, N failed" line.
# CLUSTER_JOBS=2 runs two files at a time; arguments name test files to run instead of all.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find dist/cluster-test/cluster -name '*.test.js' | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "test-cluster: no compiled tests under dist/cluster-test/cluster (make build)" >&2; exit 2; }
log=$(mktemp)
started=$(date +%s)
npx tap --jobs="${CLUSTER_JOBS:-1}" --reporter=tap "${files[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# Test files, from tap's top-level result lines.
pass=$(grep -cE '^ok [0-9]+ - ' "$log")
fail=$(grep -cE '^not ok [0-9]+ - ' "$log")
grep -E '^\s*# (FAILOVER|round [0-9]+: killed)' "$log" | sed 's/^ *//' >&2 || true
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
echo "cluster test files, $(( $(date +%s) - started )) s in all:"
echo "cluster-tests: $pass passed, $fail failed"
exit "$rc"
