#!/usr/bin/env bash
# L2 latency or waiting for peers?  sum_only with: the real exchange; every CTA reading only
# its own slot (same stores, loads, L2 round trip; no waiting for peers); no exchange.
cd "$(dirname "$0")"
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
    for spec in diagspecs/sum_only.cf examples/gemm_rmsnorm.cf; do
      tag=$([ $b = build ] && echo real || ([ $b = $b_self ] && echo self-only || echo none))
      timeout 60 $b/comfuse bench --iters 60 --shape "$shape" $spec 2>&1 | awk -F'\t' -v s="$tag $(basename $spec)" -v sh="$shape" '/^BENCH/ { printf "%-26s %-22s ratio %.3f\n", s, sh, $4 / $5 }'
    done
  done
done
