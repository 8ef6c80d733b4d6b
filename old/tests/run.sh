#!/usr/bin/env bash
# Runs every built CPU test and prints one closing line with the totals.
set -u
build=${1:-build}
pass=0 fail=0 failed_tests=()
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    out=$("$t" 2>&1); rc=$?
    echo "$out" | tail -n 25
    line=$(echo "$out" | grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
    [ -n "$line" ] || { p=0; f=1; echo "$t: printed no result line"; }
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; echo "$t: exited with $rc"; fi
    pass=$((pass + p)); fail=$((fail + f))
    [ "$f" = 0 ] || failed_tests+=("$t")
done
[ ${#failed_tests[@]} -eq 0 ] || echo "failing: ${failed_tests[*]}"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
