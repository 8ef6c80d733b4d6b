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
    a="v[c] = q < CF_ROW_CTAS ? cf_ld_relaxed_u64(mine + q * CF_BM) : 0ull;"
    assert a in s
    s=s.replace(a, "v[c] = q < CF_ROW_CTAS ? cf_ld_relaxed_u64(mine + t.rank * CF_BM) : 0ull;")
    b="v[c] = cf_ld_relaxed_u64(mine + q * CF_BM);"
    assert b in s
    s=s.replace(b, "v[c] = cf_ld_relaxed_u64(mine + t.rank * CF_BM);")
else:
    a="    unsigned long long *slots = args.xchg + ((size_t)t.tile_m * CF_NUM_RED + RED) * CF_ROW_CTAS * CF_BM;"
    assert a in s
    s=s.replace(a, "    if (t.M > 0) return;\n"+a)
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
