#!/usr/bin/env bash
# Same-call A/B on the GPU machine: reference trees (`git archive` tarballs) against this tree,
# every SPEC at every SHAPE benched in turns (ref1 ref2 ... this, repeated), each beside cuBLASLt
# in its own process.  Prints fused/cuBLAS of every turn and, per tree, the median over the
# first tree's median.
#   git archive -o build/ab-ref.tar REF                       (here; carry build/ab-ref.tar)
#   bench/ab.sh build/ab-ref.tar[,more.tar ...] "SPEC SHAPE [bench options]" ...   (GPU machine)
# Env: AB_REPS (turns per tree, default 3), AB_ITERS (launches per bench, default 100).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
[ $# -ge 2 ] || { echo "usage: bench/ab.sh REF.tar[,REF2.tar...] \"SPEC SHAPE [options]\" ..." >&2; exit 2; }
IFS=, read -r -a tarballs <<<"$1"
shift
trees=()
for tb in "${tarballs[@]}"; do
    d=$(mktemp -d)
    tar -xf "$tb" -C "$d" || exit 1
    make -C "$d" -j"$(nproc)" all >/dev/null 2>&1 || { echo "ab: build of $tb failed" >&2; exit 1; }
    trees+=("$d")
done
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "ab: build of this tree failed" >&2; exit 1; }
trees+=("$PWD")
names=("${tarballs[@]##*/}" "this")
# shellcheck source=bench/turns.sh
. bench/turns.sh
echo "fused/cuBLAS per turn; [median / first tree's median]; trees: ${names[*]}"
time_trees "$@"
