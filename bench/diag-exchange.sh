#!/usr/bin/env bash
# What the row exchange through L2 costs each case, split in two (perf-notes v8, v28).  Every
# case is timed beside cuBLASLt, in turns, with three builds of this tree:
#   real       the exchange as built;
#   self-only  every CTA reads back only its own rank's slot: the same posts, loads and L2 round
#              trips, but no waiting for the row's other CTAs (wrong results);
#   none       no posts, no loads, no waiting: every gather folds zeros (wrong results); the
#              epilogue's arithmetic, parks, finishes and stores are all still there.
# real - self-only = waiting for the row's slowest CTA; self-only - none = the exchange's loads.
# `none` bounds what any schedule of the exchange can reach with this mainloop and epilogue.
#   bench/diag-exchange.sh "SPEC SHAPE [bench options]" ...        (GPU machine; AB_REPS turns)
#   bench/diag-exchange.sh --tree self|none    builds that variant only and prints its tree, e.g.
#       python3 bench/compare.py --comfuse "$(bench/diag-exchange.sh --tree none)/build/comfuse"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
[ $# -ge 1 ] || { echo "usage: bench/diag-exchange.sh \"SPEC SHAPE [options]\" ... | --tree self|none" >&2; exit 2; }
variant() {   # $1: self | none; prints the variant's tree
    local d
    d=$(mktemp -d)
    cp -r Makefile include src tools "$d"/
    python3 - "$d/src/device/cf_reduce.cuh" "$1" <<'PY' || return 1
import sys
path, mode = sys.argv[1], sys.argv[2]
s = open(path).read()
def sub(a, b, count=None):
    global s
    n = s.count(a)
    assert n and (count is None or n == count), (a, n)
    s = s.replace(a, b)
if mode == "self":
    sub("mine + q * CF_BM", "mine + t.rank * CF_BM", 3)
    sub("mine + rank(c) * CF_BM", "mine + t.rank * CF_BM", 1)
    sub("slots + q * CF_BM + 64", "slots + t.rank * CF_BM + 64", 1)
else:
    # the functions every L2 exchange goes through: nothing stored, nothing loaded, all fresh; a
    # synchronous gather of many ranks reads no staged words either
    sub("constexpr bool STAGED = SYNC && cf_staged_gather<WORDS>::on;", "constexpr bool STAGED = false;", 1)
    for head in ("void cf_post_rows(", "void cf_xchg_load(", "bool cf_xchg_fresh(", "void cf_gather_stage("):
        i = s.index(head)
        j = s.index("{", i) + 1
        body = {"void cf_xchg_load(": "\n    lo = hi = 0u; if (p) return;",
                "bool cf_xchg_fresh(": "\n    if (lo == lo) return true;"}.get(head, "\n    if (t.lane >= 0) return;")
        s = s[:j] + body + s[j:]
open(path, "w").write(s)
PY
    make -C "$d" -j"$(nproc)" all >/dev/null 2>&1 || { echo "diag-exchange: $1 build failed" >&2; return 1; }
    echo "$d"
}
if [ "$1" = --tree ]; then
    case ${2:-} in self | none) variant "$2"; exit ;; esac
    echo "diag-exchange: --tree self|none" >&2
    exit 2
fi
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "diag-exchange: build failed" >&2; exit 1; }
self_tree=$(variant self) && none_tree=$(variant none) || exit 1
trees=("$PWD" "$self_tree" "$none_tree")
names=(real self-only none)
# shellcheck source=bench/turns.sh
. bench/turns.sh
echo "fused/cuBLAS per turn; [median / real's median]"
time_trees "$@"
