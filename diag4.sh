#!/usr/bin/env bash
# (1) does PingPong hide an epilogue? identity epilogue + a fixed nanosleep in a patched build
# (2) the reduction workloads with 16-byte pair exchanges
cd "$(dirname "$0")"
export CF_CACHE_DIR=$(mktemp -d)
make -j16 all >/dev/null || exit 1
builds=(build)
for ns in 1000 3000 6000; do
  d=$(mktemp -d); cp -r Makefile include src tools "$d"/
  python3 - "$d/src/device/cf_sm90.cuh" $ns <<'PY'
import sys
p=sys.argv[1]; s=open(p).read()
a="            cf_epilogue(args, t, acc);"
assert a in s
s=s.replace(a, "            if (t.tid == 0) __nanosleep(%s);  /* diag */\n            cf_named_bar_sync(t.bar_id, 128);\n" % sys.argv[2] + a)
open(p,'w').write(s)
PY
  make -C "$d" -j16 all >/dev/null || exit 1
  builds+=("$d/build")
done
for b in "${builds[@]}"; do
  for shape in M=16384,N=1024,K=1024 M=4096,N=2048,K=512 M=16384,N=1024,K=4096; do
    timeout 60 $b/comfuse bench --iters 60 --shape "$shape" examples/gemm.cf 2>&1 | awk -F'\t' -v s="$b" -v sh="$shape" '/^BENCH/ { printf "%-30s %-22s ratio %.3f  (%.4f ms)\n", s, sh, $4 / $5, $4 }'
  done
done
cases=()
for shape in M=16384,N=1024,K=1024 M=16384,N=2048,K=1024 M=4096,N=2048,K=512 M=8192,N=4096,K=4096; do
  for spec in examples/gemm_bias_ln.cf examples/gemm_rmsnorm.cf examples/gemm_softmax.cf examples/gemm_ln_softmax.cf diagspecs/sum_only.cf; do cases+=("$spec $shape"); done
done
printf '%s\n' "${cases[@]}" | xargs -P 16 -I{} sh -c 'set -- {}; build/comfuse compile --shape $2 $1 >/dev/null 2>&1'
for c in "${cases[@]}"; do
  set -- $c
  timeout 60 build/comfuse bench --iters 60 --shape "$2" "$1" 2>&1 | awk -F'\t' -v s="$(basename $1)" -v sh="$2" '/^BENCH/ { printf "%-20s %-22s ratio %.3f\n", s, sh, $4 / $5 } /comfuse( bench)?:/ { print s, sh, $0 }'
done
for spec in examples/gemm_bias_ln.cf examples/gemm_softmax.cf examples/gemm_ln_softmax.cf tests/specs/ln_big_mean.cf tests/specs/softmax_inf.cf; do
  for shape in M=1000,N=1000,K=1000 M=300,N=2000,K=256; do
    timeout 60 build/comfuse run --check --shape $shape $spec 2>&1 | grep -E "check (passed|FAILED)|error" | sed "s|^|$(basename $spec) $shape: |"
  done
done
