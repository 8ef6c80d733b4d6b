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
for shape in M=16384,N=1024,K=1024 M=4096,N=2048,K=512 M=16384,N=2048,K=1024; do
  for b in build $b_self $b_none; do
    for spec in bench/specs/sum_only.cf examples/gemm_rmsnorm.cf; do
      tag=$([ $b = build ] && echo real || ([ $b = $b_self ] && echo self-only || echo none))
      timeout 60 $b/comfuse bench --iters 60 --shape "$shape" $spec 2>&1 | awk -F'\t' -v s="$tag $(basename $spec)" -v sh="$shape" '/^BENCH/ { printf "%-26s %-22s ratio %.3f\n", s, sh, $4 / $5 }'
    done
  done
done
