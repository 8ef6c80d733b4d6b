#!/usr/bin/env bash
cd "$(dirname "$0")"
export CF_CACHE_DIR=$(mktemp -d)
make -j16 all >/dev/null || exit 1
cases=()
for shape in M=16384,N=1024,K=1024 M=16384,N=1024,K=2048 M=4096,N=2048,K=512; do
  for spec in examples/gemm.cf examples/gemm_bias_ln.cf diagspecs/ln_gb.cf diagspecs/ln_novec.cf examples/gemm_rmsnorm.cf diagspecs/rms_novec.cf diagspecs/sum_only.cf examples/gemm_softmax.cf; do
    cases+=("$spec $shape")
  done
done
printf '%s\n' "${cases[@]}" | xargs -P 16 -I{} sh -c 'set -- {}; build/comfuse compile --shape $2 $1 >/dev/null 2>&1'
for c in "${cases[@]}"; do
  set -- $c
  timeout 60 build/comfuse bench --iters 60 --shape "$2" "$1" 2>&1 | awk -F'\t' -v s="$(basename $1)" -v sh="$2" '/fused kernel:/ { sub(/^ +fused kernel: +/, ""); k = $0 } /^BENCH/ { printf "%-18s %-22s ratio %.3f  %s\n", s, sh, $4 / $5, substr(k,1,70) } /comfuse( bench)?:/ { print s, sh, $0 }'
done
