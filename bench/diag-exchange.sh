#!/usr/bin/env bash
# What a row exchange through L2 costs, split in two (docs/perf-notes.md v8): each spec
# timed beside cuBLASLt with
#   real       the exchange as built;
#   self-only  every CTA reads back only its own slot: the same stores, loads and L2
#              round trip, but no waiting for the row's other CTAs (wrong results);
#   none       no exchange at all (wrong results).
# real - self-only = waiting for the slowest CTA of the row; self-only - none = L2 latency.
cd "$(dirname "$0")/.."
export CF_CACHE_DIR=$(mktemp -d)
make -j16 all >/dev/null || exit 1
mk() {  # $1: python replacement mode
  d=$(mktemp -d); cp -r Makefile include src tools "$d"/
  python3 - "$d/src/device/cf_reduce.cuh" "$1" <<'PY'
import sys
p=sys.argv[1]; s=open(p).read()
if sys.argv[2] == "self":
    for a, b in (("mine + q * CF_BM", "mine + t.rank * CF_BM"), ("mine + 2 * q * CF_BM", "mine + 2 * t.rank * CF_BM")):
        assert a in s
        s = s.replace(a, b)
else:
    for f in ("cf_post_rows", "cf_gather_rows"):
        i = s.index("__device__ __forceinline__ void " + f)
        j = s.index("{", i) + 1
        s = s[:j] + "\n    if (t.M > 0) return;" + s[j:]
open(p,'w').write(s)
PY
  make -C "$d" -j16 all >/dev/null || exit 1
  echo "$d/build"
}
b_self=$(mk self); b_none=$(mk none)
# bench/diag-exchange.sh [SPEC...] [-- SHAPE...]: the specs (default sum_only and RMSNorm) in
# both finish modes (late: parked, finished after the next mainloop; sync: at once).
specs=() shapes=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do specs+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
shapes=("$@")
[ ${#specs[@]} = 0 ] && specs=(bench/specs/sum_only.cf examples/gemm_rmsnorm.cf)
[ ${#shapes[@]} = 0 ] && shapes=(M=16384,N=1024,K=1024 M=4096,N=2048,K=512 M=16384,N=2048,K=1024)
for b in build $b_self $b_none; do   # NVRTC first, in parallel
  for shape in "${shapes[@]}"; do for spec in "${specs[@]}"; do for f in "" --sync-finish; do
    echo "$b/comfuse compile $f --shape $shape $spec"
  done; done; done
done | xargs -P "$(nproc)" -I{} sh -c '{} >/dev/null 2>&1'
for shape in "${shapes[@]}"; do
  for spec in "${specs[@]}"; do
    for f in "" --sync-finish; do
      for b in build $b_self $b_none; do
        tag=$([ $b = build ] && echo real || ([ $b = $b_self ] && echo self-only || echo none))
        timeout 60 $b/comfuse bench --iters 60 $f --shape "$shape" $spec 2>&1 | awk -F'\t' -v s="$tag $(basename $spec) ${f:---late}" -v sh="$shape" '/^BENCH/ { printf "%-42s %-22s ratio %.3f  (%.4f ms)\n", s, sh, $8, $4 }'
      done
    done
  done
done
